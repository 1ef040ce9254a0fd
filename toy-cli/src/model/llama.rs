//! The llama architecture (SmolLM2 family): pre-norm blocks with RMSNorm,
//! RoPE (ggml mode 0, as llama.cpp's `llama` expects), multi-head or
//! grouped-query causal attention, SwiGLU feed-forward, no biases.

use super::attention::{causal_attention, rope};
use super::lora::{linear, new_adapter, Adapter, TARGETS};
use super::{Batch, ModelConfig, Param};
use ggml_rs::{Context, DType, Result, Tensor};

/// One transformer block's weights (shapes in ggml `ne` order, `[in, out]`).
pub struct Block<'w> {
    /// `[d]`
    pub attn_norm: Tensor<'w>,
    /// `[d, n_head·d_head]`
    pub attn_q: Tensor<'w>,
    /// `[d, n_kv·d_head]`
    pub attn_k: Tensor<'w>,
    /// `[d, n_kv·d_head]`
    pub attn_v: Tensor<'w>,
    /// `[n_head·d_head, d]`
    pub attn_output: Tensor<'w>,
    /// `[d]`
    pub ffn_norm: Tensor<'w>,
    /// `[d, d_ff]`
    pub ffn_gate: Tensor<'w>,
    /// `[d, d_ff]`
    pub ffn_up: Tensor<'w>,
    /// `[d_ff, d]`
    pub ffn_down: Tensor<'w>,
    /// Low-rank adapters of the matrices above, in [`TARGETS`] order.
    pub lora: [Option<Adapter<'w>>; 7],
}

impl<'w> Block<'w> {
    /// The matrices in [`TARGETS`] order.
    pub fn matrices(&self) -> [Tensor<'w>; 7] {
        [self.attn_q, self.attn_k, self.attn_v, self.attn_output, self.ffn_gate, self.ffn_up, self.ffn_down]
    }
}

/// All weights of a llama model.
pub struct Llama<'w> {
    pub cfg: ModelConfig,
    /// `[d, vocab]`, or `[donor_width, vocab]` (frozen) with a lens.
    pub token_embd: Tensor<'w>,
    /// Projection lens `[donor_width, d]`, when `cfg.donor_width` is set.
    pub lens: Option<Tensor<'w>>,
    pub blocks: Vec<Block<'w>>,
    /// `[d]`
    pub output_norm: Tensor<'w>,
    /// `[d, vocab]`, absent when tied to `token_embd`.
    pub output: Option<Tensor<'w>>,
}

fn typed<'w>(ctx: &'w Context, dtype: DType, name: &str, ne: &[usize]) -> Result<Tensor<'w>> {
    let ne: Vec<i64> = ne.iter().map(|&n| n as i64).collect();
    ctx.new_tensor(dtype, &ne)?.set_name(name)
}

fn weight<'w>(ctx: &'w Context, name: &str, ne: &[usize]) -> Result<Tensor<'w>> {
    typed(ctx, DType::F32, name, ne)
}

/// The type of the frozen base's matrices: the base's own f16/bf16 under LoRA, else f32.
fn matrix_dtype(cfg: &ModelConfig) -> DType {
    match (&cfg.lora, cfg.base_dtype.as_deref()) {
        (Some(_), Some("f16")) => DType::F16,
        (Some(_), Some("bf16")) => DType::BF16,
        _ => DType::F32,
    }
}

impl<'w> Llama<'w> {
    /// Create the parameter tensors in `ctx` (unallocated), named as in llama.cpp.
    pub fn new(ctx: &'w Context, cfg: &ModelConfig) -> Result<Llama<'w>> {
        let (d, f, v) = (cfg.d_model, cfg.d_ff, cfg.vocab);
        let (hq, hkv) = (cfg.n_heads * cfg.d_head(), cfg.n_kv_heads * cfg.d_head());
        let mt = matrix_dtype(cfg);
        let mat = |name: &str, ne: &[usize]| typed(ctx, mt, name, ne);
        let blocks = (0..cfg.n_layers)
            .map(|i| {
                let n = |s: &str| format!("blk.{i}.{s}.weight");
                let dims = [(d, hq), (d, hkv), (d, hkv), (hq, d), (d, f), (d, f), (f, d)];
                let mut lora = [None; 7];
                if let Some(l) = &cfg.lora {
                    for (k, (target, (n_in, n_out))) in TARGETS.iter().zip(dims).enumerate() {
                        if l.targets(target) {
                            lora[k] = Some(new_adapter(ctx, i, target, n_in, n_out, l.rank)?);
                        }
                    }
                }
                Ok(Block {
                    lora,
                    attn_norm: weight(ctx, &n("attn_norm"), &[d])?,
                    attn_q: mat(&n("attn_q"), &[d, hq])?,
                    attn_k: mat(&n("attn_k"), &[d, hkv])?,
                    attn_v: mat(&n("attn_v"), &[d, hkv])?,
                    attn_output: mat(&n("attn_output"), &[hq, d])?,
                    ffn_norm: weight(ctx, &n("ffn_norm"), &[d])?,
                    ffn_gate: mat(&n("ffn_gate"), &[d, f])?,
                    ffn_up: mat(&n("ffn_up"), &[d, f])?,
                    ffn_down: mat(&n("ffn_down"), &[f, d])?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Llama {
            cfg: cfg.clone(),
            token_embd: mat("token_embd.weight", &[cfg.donor_width.unwrap_or(d), v])?,
            lens: match cfg.donor_width {
                Some(w) => Some(weight(ctx, "lens.weight", &[w, d])?),
                None => None,
            },
            blocks,
            output_norm: weight(ctx, "output_norm.weight", &[d])?,
            output: if cfg.tied { None } else { Some(mat("output.weight", &[d, v])?) },
        })
    }

    /// Parameters in checkpoint order, then the adapters; norms are not
    /// decayed, the donor table is frozen when a lens is used, and with LoRA
    /// only the adapters train.
    pub fn params(&self) -> Vec<Param<'w>> {
        let base = self.cfg.lora.is_none();
        let p = |t: Tensor<'w>| Param { tensor: t, trainable: base, decay: t.n_dims() >= 2 };
        let mut v =
            vec![Param { tensor: self.token_embd, trainable: base && (self.lens.is_none() || !self.cfg.freeze_table), decay: true }];
        v.extend(self.lens.map(p));
        v.push(p(self.output_norm));
        v.extend(self.output.map(p));
        for b in &self.blocks {
            for t in [b.attn_norm, b.ffn_norm, b.attn_q, b.attn_k, b.attn_v, b.attn_output, b.ffn_gate, b.ffn_up, b.ffn_down] {
                v.push(p(t));
            }
        }
        for b in &self.blocks {
            for l in b.lora.iter().flatten() {
                v.extend([l.a, l.b].map(|t| Param { tensor: t, trainable: true, decay: true }));
            }
        }
        v
    }

    /// The output head `[d, vocab]` (the token table when tied).
    pub fn head(&self) -> Tensor<'w> {
        self.output.unwrap_or(self.token_embd)
    }

    /// The last hidden states `[d, T, B]`, normalized, before the head
    /// (shapes annotated for d = d_model, H = heads).
    pub fn hidden<'a>(&self, ctx: &'a Context, x: Batch<'a>) -> Result<Tensor<'a>>
    where
        'w: 'a,
    {
        let c = &self.cfg;
        let (d, t, b) = (c.d_model as i64, x.t as i64, x.b as i64);
        let (dh, eps) = (c.d_head() as i64, c.norm_eps);
        let s = c.lora.as_ref().map_or(1.0, |l| l.scale());
        let mut h = ctx.get_rows(self.token_embd, x.tokens)?; // [d or donor, T·B]
        if let Some(lens) = self.lens {
            h = ctx.mul_mat(lens, h)?; // [d, T·B]
        }
        let mut h = ctx.reshape(h, &[d, t, b])?; // [d, T, B]
        for blk in &self.blocks {
            let a = ctx.mul(ctx.rms_norm(h, eps)?, blk.attn_norm)?;
            // RoPE over [dh, heads, T·B] with per-token positions: its backward then
            // receives a contiguous gradient (through the reshape), which CUDA needs.
            let (hq, hkv) = (c.n_heads as i64, c.n_kv_heads as i64);
            // W·x (+ alpha/r·B·A·x on the adapted matrices), W in TARGETS order.
            let lin = |k: usize, x| linear(ctx, blk.matrices()[k], blk.lora[k], s, x);
            let q = rope(ctx, ctx.reshape(lin(0, a)?, &[dh, hq, t * b])?, x.pos, c.rope_base)?;
            let k = rope(ctx, ctx.reshape(lin(1, a)?, &[dh, hkv, t * b])?, x.pos, c.rope_base)?;
            let q = ctx.reshape(q, &[dh, hq, t, b])?; // [dh, H, T, B]
            let k = ctx.reshape(k, &[dh, hkv, t, b])?;
            let v = ctx.reshape(lin(2, a)?, &[dh, hkv, t, b])?;
            let att = causal_attention(ctx, q, k, v, &x)?; // [H·dh, T, B]
            h = ctx.add(h, lin(3, att)?)?;

            let m = ctx.mul(ctx.rms_norm(h, eps)?, blk.ffn_norm)?;
            let g = ctx.swiglu_split(lin(4, m)?, lin(5, m)?)?; // [d_ff, T, B]
            h = ctx.add(h, lin(6, g)?)?;
        }
        ctx.mul(ctx.rms_norm(h, eps)?, self.output_norm) // [d, T, B]
    }
}
