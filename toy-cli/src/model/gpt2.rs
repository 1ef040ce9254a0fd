//! The GPT-2 architecture (Radford et al. 2019): token and learned position
//! embeddings, pre-LayerNorm blocks with gain and bias, attention and MLP with
//! biases, GELU (tanh form), final LayerNorm, output tied to the token table.
//!
//! q, k and v are separate parameters here (their gradients stay plain
//! `mul_mat` gradients); checkpoints store them fused as `attn_qkv`, as llama.cpp
//! expects.

use super::attention::causal_attention;
use super::{Batch, ModelConfig, Param};
use ggml_rs::{Context, DType, Result, Tensor};

/// A weight matrix `[in, out]` and its bias `[out]`.
#[derive(Clone, Copy)]
pub struct Linear<'w> {
    pub weight: Tensor<'w>,
    pub bias: Tensor<'w>,
}

impl<'w> Linear<'w> {
    fn new(ctx: &'w Context, name: &str, n_in: usize, n_out: usize) -> Result<Linear<'w>> {
        Ok(Linear {
            weight: ctx.new_tensor_2d(DType::F32, n_in as i64, n_out as i64)?.set_name(&format!("{name}.weight"))?,
            bias: ctx.new_tensor_1d(DType::F32, n_out as i64)?.set_name(&format!("{name}.bias"))?,
        })
    }

    /// `W·x + b`: `[in, ...] → [out, ...]`.
    pub fn forward<'a>(&self, ctx: &'a Context, x: Tensor<'a>) -> Result<Tensor<'a>>
    where
        'w: 'a,
    {
        ctx.add(ctx.mul_mat(self.weight, x)?, self.bias)
    }
}

/// LayerNorm gain and bias, `[d]` each.
#[derive(Clone, Copy)]
pub struct LayerNorm<'w> {
    pub weight: Tensor<'w>,
    pub bias: Tensor<'w>,
}

impl<'w> LayerNorm<'w> {
    fn new(ctx: &'w Context, name: &str, d: usize) -> Result<LayerNorm<'w>> {
        Ok(LayerNorm {
            weight: ctx.new_tensor_1d(DType::F32, d as i64)?.set_name(&format!("{name}.weight"))?,
            bias: ctx.new_tensor_1d(DType::F32, d as i64)?.set_name(&format!("{name}.bias"))?,
        })
    }

    /// `γ ⊙ norm(x) + β` over `ne0` (Ba et al. 2016).
    pub fn forward<'a>(&self, ctx: &'a Context, x: Tensor<'a>, eps: f32) -> Result<Tensor<'a>>
    where
        'w: 'a,
    {
        ctx.add(ctx.mul(ctx.norm(x, eps)?, self.weight)?, self.bias)
    }
}

/// One GPT-2 block.
pub struct Block<'w> {
    pub attn_norm: LayerNorm<'w>,
    /// `[d, d]` each, with `[d]` biases.
    pub attn_q: Linear<'w>,
    pub attn_k: Linear<'w>,
    pub attn_v: Linear<'w>,
    pub attn_output: Linear<'w>,
    pub ffn_norm: LayerNorm<'w>,
    /// `[d, d_ff]`
    pub ffn_up: Linear<'w>,
    /// `[d_ff, d]`
    pub ffn_down: Linear<'w>,
}

/// All weights of a GPT-2 model.
pub struct Gpt2<'w> {
    pub cfg: ModelConfig,
    /// `[d, vocab]`, also the output head.
    pub token_embd: Tensor<'w>,
    /// `[d, context]`
    pub position_embd: Tensor<'w>,
    pub blocks: Vec<Block<'w>>,
    pub output_norm: LayerNorm<'w>,
}

impl<'w> Gpt2<'w> {
    /// Create the parameter tensors in `ctx` (unallocated).
    pub fn new(ctx: &'w Context, cfg: &ModelConfig) -> Result<Gpt2<'w>> {
        let (d, f) = (cfg.d_model, cfg.d_ff);
        let blocks = (0..cfg.n_layers)
            .map(|i| {
                let n = |s: &str| format!("blk.{i}.{s}");
                Ok(Block {
                    attn_norm: LayerNorm::new(ctx, &n("attn_norm"), d)?,
                    attn_q: Linear::new(ctx, &n("attn_q"), d, d)?,
                    attn_k: Linear::new(ctx, &n("attn_k"), d, d)?,
                    attn_v: Linear::new(ctx, &n("attn_v"), d, d)?,
                    attn_output: Linear::new(ctx, &n("attn_output"), d, d)?,
                    ffn_norm: LayerNorm::new(ctx, &n("ffn_norm"), d)?,
                    ffn_up: Linear::new(ctx, &n("ffn_up"), d, f)?,
                    ffn_down: Linear::new(ctx, &n("ffn_down"), f, d)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Gpt2 {
            cfg: cfg.clone(),
            token_embd: ctx.new_tensor_2d(DType::F32, d as i64, cfg.vocab as i64)?.set_name("token_embd.weight")?,
            position_embd: ctx.new_tensor_2d(DType::F32, d as i64, cfg.context as i64)?.set_name("position_embd.weight")?,
            blocks,
            output_norm: LayerNorm::new(ctx, "output_norm", d)?,
        })
    }

    /// Parameters in a fixed order; matrices decayed, gains and biases not.
    pub fn params(&self) -> Vec<Param<'w>> {
        let p = |t: Tensor<'w>| Param { tensor: t, trainable: true, decay: t.n_dims() >= 2 };
        let mut v = vec![p(self.token_embd), p(self.position_embd)];
        for b in &self.blocks {
            for ln in [b.attn_norm, b.ffn_norm] {
                v.extend([p(ln.weight), p(ln.bias)]);
            }
            for l in [b.attn_q, b.attn_k, b.attn_v, b.attn_output, b.ffn_up, b.ffn_down] {
                v.extend([p(l.weight), p(l.bias)]);
            }
        }
        v.extend([p(self.output_norm.weight), p(self.output_norm.bias)]);
        v
    }

    /// The output head `[d, vocab]`: the token table (tied).
    pub fn head(&self) -> Tensor<'w> {
        self.token_embd
    }

    /// The last hidden states `[d, T, B]`, normalized, before the head.
    pub fn hidden<'a>(&self, ctx: &'a Context, x: Batch<'a>) -> Result<Tensor<'a>>
    where
        'w: 'a,
    {
        let c = &self.cfg;
        let (d, t, b) = (c.d_model as i64, x.t as i64, x.b as i64);
        let (dh, heads, eps) = (c.d_head() as i64, c.n_heads as i64, c.norm_eps);
        let tok = ctx.reshape(ctx.get_rows(self.token_embd, x.tokens)?, &[d, t, b])?; // [d, T, B]
        let pos = ctx.get_rows(self.position_embd, ctx.view(x.pos, &[t], &[], 0)?)?; // [d, T]
        let mut h = ctx.add(tok, pos)?;
        for blk in &self.blocks {
            let a = blk.attn_norm.forward(ctx, h, eps)?;
            let split = |l: &Linear<'w>| -> Result<Tensor<'a>> { ctx.reshape(l.forward(ctx, a)?, &[dh, heads, t, b]) };
            let att = causal_attention(ctx, split(&blk.attn_q)?, split(&blk.attn_k)?, split(&blk.attn_v)?, &x)?; // [d, T, B]
            h = ctx.add(h, blk.attn_output.forward(ctx, att)?)?;
            let m = blk.ffn_norm.forward(ctx, h, eps)?;
            let u = ctx.gelu(blk.ffn_up.forward(ctx, m)?)?; // [d_ff, T, B]
            h = ctx.add(h, blk.ffn_down.forward(ctx, u)?)?;
        }
        self.output_norm.forward(ctx, h, eps) // [d, T, B]
    }
}
