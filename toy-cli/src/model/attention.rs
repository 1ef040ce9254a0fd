//! Causal self-attention over a batch, one masked softmax for all heads.

use super::Batch;
use ggml_rs::{Context, Result, RopeMode, Tensor};
use serde::{Deserialize, Serialize};

/// How attention is computed (`--attention`). The serde default is
/// `Reference`: runs recorded before `--attention` existed used it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Attention {
    /// Scores, masked softmax and product as separate ops, the `[T, T]` scores
    /// kept for the backward (the reference).
    #[default]
    Reference,
    /// One fused op (ggml patches 0020 and 0021, FlashAttention-2's
    /// recomputation): no `[T, T]` tensor is stored. CPU and CUDA kernels.
    Fused,
}

impl Attention {
    /// The default on `device` (a `--device` value or comma list): `Fused`
    /// where every device has the op's kernels (the CPU and CUDA; no slower
    /// there, see bench/results.md), else `Reference` (Metal, where the fused
    /// op would run on the CPU).
    pub fn default_for(device: &str) -> Attention {
        let has_kernels = |d: &str| {
            let d = d.trim().to_ascii_lowercase();
            d.starts_with("cpu") || d.starts_with("cuda")
        };
        if device.split(',').all(has_kernels) {
            Attention::Fused
        } else {
            Attention::Reference
        }
    }

    /// The name (`reference`, `fused`).
    pub fn name(self) -> &'static str {
        match self {
            Attention::Reference => "reference",
            Attention::Fused => "fused",
        }
    }
}

/// A key/value cache in a forward pass (incremental decoding, as llama.cpp's
/// `llama_decode` keeps one): every layer's keys and values (after RoPE) of
/// the batch's tokens become graph outputs named `cache_k.{layer}` and
/// `cache_v.{layer}` (`[d_head, n_kv, T, 1]`, contiguous); with `past`, the
/// batch is one new token whose query also attends to the earlier positions.
#[derive(Clone, Copy, Debug)]
pub struct CacheStep<'a> {
    /// Keys and values of the earlier positions, `[d_head, n_kv, P, n_layers]`
    /// each (P ≥ 1); `None` for the pass that fills the cache.
    pub past: Option<(Tensor<'a>, Tensor<'a>)>,
}

/// Scaled dot-product attention with a causal mask (Vaswani et al. 2017).
///
/// `q` is `[d_head, n_head, T, B]`, `k` and `v` are `[d_head, n_kv, T, B]` with
/// `n_kv` dividing `n_head` (grouped-query attention: query head `h` reads kv
/// head `h / (n_head/n_kv)`, llama.cpp's convention), as `x.attention` says
/// (the causal mask `x.mask` for the reference). `layer` is the block's index
/// (for `x.cache`, see [`CacheStep`]). Returns `[d_head·n_head, T, B]`.
pub fn causal_attention<'a>(
    ctx: &'a Context,
    q: Tensor<'a>,
    k: Tensor<'a>,
    v: Tensor<'a>,
    x: &Batch<'a>,
    layer: usize,
) -> Result<Tensor<'a>> {
    let [dh, n_head, t, b] = q.ne();
    let n_kv = k.ne()[1];
    let (k, v) = match x.cache {
        Some(c) => {
            let k = ctx.cont(k)?.set_name(&format!("cache_k.{layer}"))?.set_output();
            let v = ctx.cont(v)?.set_name(&format!("cache_v.{layer}"))?.set_output();
            if let Some(past) = c.past {
                return cached_attention(ctx, q, k, v, past, layer);
            }
            (k, v)
        }
        None => (k, v),
    };
    if x.attention == Attention::Fused {
        let o = ctx.attn_causal(q, k, v, 1.0 / (dh as f32).sqrt())?; // [dh, H, T, B], GQA read in place
        return ctx.reshape(o, &[dh * n_head, t, b]);
    }
    let Some(mask) = x.mask else {
        return Err(ggml_rs::Error::Op {
            op: "causal_attention",
            msg: "the reference attention needs the causal mask (constants made for it)".into(),
        });
    };
    // Contiguous operands let ggml's CPU mul_mat use a blocked GEMM (patch
    // 0059's, or llamafile's) instead of one dot product per output element.
    let q = ctx.cont(ctx.permute(q, [0, 2, 1, 3])?)?; // [dh, T, H, B]
    let mut k = ctx.cont(ctx.permute(k, [0, 2, 1, 3])?)?; // [dh, T, Hkv, B]
    let mut v = ctx.cont(ctx.permute(v, [1, 2, 0, 3])?)?; // [T, dh, Hkv, B]
    if n_kv < n_head {
        k = repeat_kv(ctx, k, n_head / n_kv)?;
        v = repeat_kv(ctx, v, n_head / n_kv)?;
    }
    let kq = ctx.mul_mat(k, q)?; // [T_k, T_q, H, B]
    let p = ctx.soft_max_ext(kq, Some(mask), 1.0 / (dh as f32).sqrt())?;
    let o = ctx.mul_mat(v, p)?; // [dh, T_q, H, B]
    let o = ctx.permute(o, [0, 2, 1, 3])?; // [dh, H, T, B]
    ctx.cont_nd(o, &[dh * n_head, t, b])
}

/// One new token's attention over the cached positions and itself: q
/// `[dh, H, 1, 1]`, k and v `[dh, Hkv, 1, 1]`, `past` `[dh, Hkv, P, L]` each
/// (layer `layer` is read). No mask: every earlier position is visible. The
/// kv heads are broadcast by `mul_mat` (no backward is needed here).
fn cached_attention<'a>(
    ctx: &'a Context,
    q: Tensor<'a>,
    k: Tensor<'a>,
    v: Tensor<'a>,
    past: (Tensor<'a>, Tensor<'a>),
    layer: usize,
) -> Result<Tensor<'a>> {
    let [dh, n_head, _, _] = q.ne();
    let layer_of = |c: Tensor<'a>| {
        let [a, b, p, _] = c.ne();
        let nb = c.nb();
        ctx.view(c, &[a, b, p], &[nb[1], nb[2]], layer * nb[3])
    };
    let k = ctx.concat(layer_of(past.0)?, k, 2)?; // [dh, Hkv, P+1]
    let v = ctx.concat(layer_of(past.1)?, v, 2)?;
    let q = ctx.cont(ctx.permute(q, [0, 2, 1, 3])?)?; // [dh, 1, H]
    let k = ctx.cont(ctx.permute(k, [0, 2, 1, 3])?)?; // [dh, P+1, Hkv]
    let v = ctx.cont(ctx.permute(v, [1, 2, 0, 3])?)?; // [P+1, dh, Hkv]
    let kq = ctx.mul_mat(k, q)?; // [P+1, 1, H]
    let p = ctx.soft_max_ext(kq, None, 1.0 / (dh as f32).sqrt())?;
    let o = ctx.mul_mat(v, p)?; // [dh, 1, H]
    ctx.cont_nd(ctx.permute(o, [0, 2, 1, 3])?, &[dh * n_head, 1, 1])
}

/// Expand kv heads `[x, y, n_kv, B]` (contiguous) to `[x, y, n_kv·g, B]` with each
/// kv head repeated `g` times consecutively. An explicit repeat rather than
/// `mul_mat` broadcasting, whose weight gradient ggml cannot form when B > 1.
fn repeat_kv<'a>(ctx: &'a Context, t: Tensor<'a>, g: i64) -> Result<Tensor<'a>> {
    let [x, y, n_kv, b] = t.ne();
    let flat = ctx.reshape(t, &[x * y, 1, n_kv, b])?;
    let r = ctx.repeat_4d(flat, [x * y, g, n_kv, b])?;
    ctx.reshape(r, &[x, y, g * n_kv, b])
}

/// Apply RoPE in `mode` to `x` `[d_head, n_head, N]` at positions `pos`
/// (i32 `[N]`), rotating whole heads.
pub fn rope<'a>(ctx: &'a Context, x: Tensor<'a>, pos: Tensor<'a>, mode: RopeMode, base: f32) -> Result<Tensor<'a>> {
    let dh = x.ne()[0] as usize;
    // Deliberately wrong build for scripts/parity: RoPE base 1% too large while
    // checkpoints still record the true one. The harness must report FAIL.
    #[cfg(feature = "parity-perturb")]
    let base = base * 1.01;
    ctx.rope_ext(x, pos, dh, mode, base)
}

#[cfg(test)]
mod tests {
    use super::Attention;

    #[test]
    fn fused_by_default_where_the_kernels_exist() {
        assert_eq!(Attention::default_for("cpu"), Attention::Fused);
        assert_eq!(Attention::default_for("cuda:0, CUDA:1"), Attention::Fused);
        assert_eq!(Attention::default_for("metal"), Attention::Reference);
        assert_eq!(Attention::default_for("cuda,metal"), Attention::Reference);
    }
}
