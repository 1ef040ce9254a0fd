//! Low-rank adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large
//! Language Models"): a targeted matrix `W` `[in, out]` computes
//! `W·x + (alpha/rank)·B·(A·x)` with `A` `[in, rank]` and `B` `[rank, out]`
//! (ggml `ne` order, as llama.cpp's adapters: `llama-adapter.cpp`,
//! `build_lora_mm`). `A` starts as loralib's `kaiming_uniform_(a=√5)`,
//! U(−1/√in, 1/√in), and `B` at zero, so step 0 is the base model.

use super::table::Table;
use super::weights::Autocast;
use super::ModelConfig;
use ggml_rs::{Context, DType, Result, Tensor};
use rand::SeedableRng;
use rand_distr::{Distribution, Uniform};
use serde::{Deserialize, Serialize};

/// What a refusal says of an architecture without adapters (gpt2): the
/// architectures whose tables name LoRA targets.
pub const ARCHS: &str = "adapters apply to llama and qwen2 models";

/// Which matrices get adapters, of what rank, at what scale.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LoraConfig {
    /// `r`: the inner width of `B·A`.
    pub rank: usize,
    /// `alpha`: the update is scaled by `alpha / rank`.
    pub alpha: f32,
    /// Names out of the table's [`Table::lora_targets`] (`attn_q`...).
    pub targets: Vec<String>,
}

impl LoraConfig {
    /// `alpha / rank`.
    pub fn scale(&self) -> f32 {
        self.alpha / self.rank as f32
    }

    /// Whether `target` (`attn_q`...) is adapted.
    pub fn targets(&self, target: &str) -> bool {
        self.targets.iter().any(|t| t == target)
    }

    /// Check rank, alpha and targets for the model `cfg` whose parameters
    /// `table` lists. The rank is at most the smaller side of every targeted
    /// matrix (`B·A` of a larger rank is no more than a full-rank update:
    /// attn_k and attn_v are `[d_model, n_kv·d_head]`, narrower than the width
    /// under grouped-query attention).
    pub fn validate(&self, table: &Table, cfg: &ModelConfig) -> std::result::Result<(), String> {
        if self.rank == 0 {
            return Err("--lora-rank 0 must be at least 1".into());
        }
        if !self.alpha.is_finite() || self.alpha <= 0.0 {
            return Err(format!("--lora-alpha {} must be positive and finite", self.alpha));
        }
        if self.targets.is_empty() {
            return Err("--lora-targets names no matrix".into());
        }
        let all = table.lora_targets();
        if let Some(t) = self.targets.iter().find(|t| !all.contains(&t.as_str())) {
            if t == "all-linear" {
                return Err("--lora-targets: all-linear names every matrix; give it alone".into());
            }
            return Err(format!("--lora-targets: {t:?} is not one of {}, PEFT's q_proj ... down_proj, or all-linear", all.join(", ")));
        }
        // The narrowest target: the smallest of the sides of the targets' [in, out].
        let sides = self.targets.iter().filter_map(|t| table.lora_spec(t).map(|s| (t, (s.ne)(cfg))));
        let (limit, target, ne) =
            sides.map(|(t, ne)| (ne.iter().copied().min().unwrap_or(0), t, ne)).min_by_key(|m| m.0).expect("targets checked above");
        if self.rank > limit {
            if limit == cfg.d_model {
                return Err(format!("--lora-rank {} must be between 1 and the model width {limit}", self.rank));
            }
            return Err(format!("--lora-rank {} must be between 1 and {limit}, the smaller side of {target} {ne:?}", self.rank));
        }
        Ok(())
    }
}

/// One adapted matrix's pair: `A` `[in, rank]`, `B` `[rank, out]`.
#[derive(Clone, Copy)]
pub struct Adapter<'w> {
    pub a: Tensor<'w>,
    pub b: Tensor<'w>,
}

/// The adapters of `blk.{block}.{target}.weight` `[n_in, n_out]`, named as
/// llama.cpp reads them (`….weight.lora_a`, `….weight.lora_b`).
pub fn new_adapter<'w>(ctx: &'w Context, block: usize, target: &str, n_in: usize, n_out: usize, rank: usize) -> Result<Adapter<'w>> {
    let base = format!("blk.{block}.{target}.weight");
    let a = ctx.new_tensor(DType::F32, &[n_in as i64, rank as i64])?.set_name(&format!("{base}.lora_a"))?;
    let b = ctx.new_tensor(DType::F32, &[rank as i64, n_out as i64])?.set_name(&format!("{base}.lora_b"))?;
    Ok(Adapter { a, b })
}

/// `W·x` (plus `r` when given), plus an adapter's `term` ([`term`]: built by
/// the caller before this call, so that it comes first in the graph). The
/// product reads `op`, the operand the caller made of `W`
/// ([`super::weights::weight_operand`]): `W` itself, its step's bf16 copy
/// (autocast), or, for `W` kept in a frozen base's type (quantized, f16,
/// bf16), `W` dequantized as QLoRA does (Dettmers et al. 2023) to f32 or bf16,
/// or read as stored in a graph without a backward, as `how` says.
///
/// The graph's order: the adapter's term first, `r` added to it, and `W·x`
/// last, with that sum as its addend. On CUDA each sum then runs as its
/// product's GEMM epilogue (patch 0037), and the backward, which runs in
/// reverse, starts with `W`'s product: it converts the output gradient to
/// bf16 once, and the adapter's two products that read it (the gradients of
/// `B` and of `A·x`) take that copy (patch 0040) instead of running in f32.
///
/// With `merged` (the adapter and its scale) the product's input gradient goes
/// through `W + scale·B·A` ([`merged_weight`]); the term must then have been
/// built from `detach(x)`, so that the adapter adds nothing more to it.
pub fn linear<'a>(
    ctx: &'a Context,
    (w, op): (Tensor<'a>, Tensor<'a>),
    term: Option<Tensor<'a>>,
    x: Tensor<'a>,
    r: Option<Tensor<'a>>,
    how: super::weights::Compact,
    merged: Option<(Adapter<'a>, f32)>,
) -> Result<Tensor<'a>> {
    // `r` before the product it is added to: no node (such as the reshape of
    // `r`) between a product and its sum, which CUDA folds into the GEMM.
    let addend = match (r, term) {
        (Some(r), Some(t)) => Some(ctx.add(r, t)?),
        (r, t) => r.or(t),
    };
    let y = match merged {
        Some((l, scale)) => ctx.mul_mat_backward_weight(op, x, merged_weight(ctx, w, op, how, l, scale)?)?,
        None => ctx.mul_mat(op, x)?,
    };
    match addend {
        Some(a) => ctx.add(a, y),
        None => Ok(y),
    }
}

/// The adapter's term `B·(scale·(A·x))` `[out, N]` of `x` `[in, N]`.
///
/// In f32 the scale is on the rank-r product `A·x` `[r, N]`, not on `B·(A·x)`
/// `[out, N]`: the same update, one pass over a tensor out/r times smaller
/// (on CUDA the GEMM's alpha, patch 0037).
///
/// Under [`Autocast::inputs`] (bf16 products) `A` (scaled: `scale·A` is the
/// same update) and `B` are cast to bf16 once, and all four products of the
/// step read those copies: the forward's two and the backward's two that
/// multiply by them (the gradients of `A·x` and of `x`), where each product
/// had converted its f32 parameter itself. Under [`Autocast::outputs`]
/// (CUDA) `A·x` is a bf16 product (`ggml_mul_mat_bf16`, patch 0041), as an
/// autocast `lora_A` writes it: `B`'s product and the gradient of `B` read it
/// as it is, not converted twice.
pub fn term<'a>(ctx: &'a Context, l: Adapter<'a>, scale: f32, x: Tensor<'a>, autocast: Autocast) -> Result<Tensor<'a>> {
    if !autocast.inputs {
        return ctx.mul_mat(l.b, ctx.scale(ctx.mul_mat(l.a, x)?, scale)?);
    }
    let (a, b) = bf16_factors(ctx, l, scale)?;
    let ne = x.ne();
    let h = if autocast.outputs && x.is_contiguous() && ne[2] == 1 && ne[3] == 1 {
        ctx.mul_mat_bf16(a, x)? // bf16 [r, N]
    } else {
        ctx.mul_mat(a, x)? // [r, N]
    };
    ctx.mul_mat(b, h) // [out, N]
}

/// [`term`] in bf16 (`[out, N]`, both products `ggml_mul_mat_bf16`) of a
/// bf16 `x` `[in, N]`, for a product that writes bf16 itself (SwiGLU's gate
/// and up under [`Autocast::outputs`], [`super::weights::Block::gated`]): the
/// sum of the two is bf16, which CUDA runs as the product's GEMM with the term
/// as a bf16 C (toy-rs patch 0055), and the SwiGLU's backward writes its
/// gradient in bf16 for all four products that read it. CUDA only, as
/// `mul_mat_bf16`.
///
/// # Errors
/// [`ggml_rs::Error::Op`] for an `x` that is not a contiguous matrix.
pub fn term_bf16<'a>(ctx: &'a Context, l: Adapter<'a>, scale: f32, x: Tensor<'a>) -> Result<Tensor<'a>> {
    let (a, b) = bf16_factors(ctx, l, scale)?;
    let h = ctx.mul_mat_bf16(a, x)?; // bf16 [r, N]
    ctx.mul_mat_bf16(b, h) // bf16 [out, N]
}

/// `W + scale·B·A` `[in, out]` of `W` (stored; `op`, the forward product's
/// operand made of it as `how` says: f32, or bf16 under autocast) and its adapter, detached
/// ([`Context::detach`]): what the
/// product's input gradient multiplies when the adapter's term reads a
/// detached `x` (toy-rs patch 0066, [`Context::mul_mat_backward_weight`]).
/// Only the backward computes it, where that gradient is built: one matrix
/// of the base's size at a time, not one per adapted matrix from the forward.
///
/// Why: the adapter's share of `dx`, `Aᵀ·(scale·Bᵀ·dy)`, otherwise costs two
/// narrow products and a sum over `[in, T·B]` per adapted matrix, on the
/// backward's critical path; here it is in the base product's own GEMM, and
/// what is left of the adapter's backward (its `Bᵀ·dy`, `dA` and `dB`) only
/// leads to `A`'s and `B`'s gradients, which CUDA runs on its side stream
/// (patch 0060). The sum is made in f32 and rounded once to `W`'s type, as
/// autocast rounds a fully fine-tuned weight: the same gradient in f32, the
/// same to bf16's rounding under autocast.
pub fn merged_weight<'a>(
    ctx: &'a Context,
    w: Tensor<'a>,
    op: Tensor<'a>,
    how: super::weights::Compact,
    l: Adapter<'a>,
    scale: f32,
) -> Result<Tensor<'a>> {
    // `W` as the forward's product read it (`op`) where that is `W` itself or a copy kept for the
    // backward anyway (Bf16Step); else cast afresh, a node of its own made in the backward with
    // the rest of this, so that the forward's per-product copy dies after the forward
    let w = if op == w || how == super::weights::Compact::Bf16Step { op } else { super::weights::operand(ctx, w, how)? };
    // [in, out]: Σ_k A[i, k]·B[k, o], the outer products of A [in, r] and Bᵀ [out, r] (a view)
    let d = ctx.out_prod(ctx.detach(l.a)?, ctx.transpose(ctx.detach(l.b)?)?)?;
    let d = if scale == 1.0 { d } else { ctx.scale(d, scale)? }; // on CUDA the GEMM's alpha (patch 0037)
    ctx.detach(ctx.add(w, d)?) // W's type
}

/// `scale·A` `[in, r]` and `B` `[r, out]` cast to bf16, once for the step's
/// products that read them. A training step moves these casts to the front of
/// its graph (`Graph::hoist_param_casts`), where CUDA runs them as one launch
/// (toy-rs patch 0057).
fn bf16_factors<'a>(ctx: &'a Context, l: Adapter<'a>, scale: f32) -> Result<(Tensor<'a>, Tensor<'a>)> {
    let a = if scale == 1.0 { l.a } else { ctx.scale(l.a, scale)? }; // [in, r]
    Ok((ctx.cast(a, DType::BF16)?, ctx.cast(l.b, DType::BF16)?))
}

/// Write the starting values: `A` ~ U(−1/√in, 1/√in), `B` = 0, from one
/// ChaCha stream seeded with `seed`, adapter by adapter in order.
pub fn init_adapters(adapters: &[Adapter<'_>], seed: u64) -> Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x10_7a);
    for ad in adapters {
        let n_in = ad.a.ne()[0] as f32;
        let bound = 1.0 / n_in.sqrt();
        let dist = Uniform::new_inclusive(-bound, bound).expect("a valid range");
        let n = ad.a.nelements() as usize;
        ad.a.write(&(0..n).map(|_| dist.sample(&mut rng)).collect::<Vec<f32>>())?;
        ad.b.write(&vec![0f32; ad.b.nelements() as usize])?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Arch;

    #[test]
    fn rank_is_bounded_by_the_narrowest_target() {
        // Grouped-query attention: attn_k and attn_v are [64, 16] (1 of 4 heads of 16).
        let mut cfg = ModelConfig::new(Arch::Llama, 300, 64, 2, 4, 128, 32);
        cfg.n_kv_heads = 1;
        let table = cfg.arch.table();
        let config =
            |rank: usize, targets: &[&str]| LoraConfig { rank, alpha: 1.0, targets: targets.iter().map(|t| t.to_string()).collect() };
        assert_eq!(config(64, &["attn_q", "ffn_up"]).validate(table, &cfg), Ok(()));
        let e = config(65, &["attn_q"]).validate(table, &cfg).unwrap_err();
        assert!(e.contains("model width 64"), "{e}");
        assert_eq!(config(16, &["attn_q", "attn_k"]).validate(table, &cfg), Ok(()));
        let e = config(17, &["attn_q", "attn_k"]).validate(table, &cfg).unwrap_err();
        assert!(e.contains("--lora-rank 17 must be between 1 and 16, the smaller side of attn_k [64, 16]"), "{e}");
        let e = config(0, &["attn_v"]).validate(table, &cfg).unwrap_err();
        assert!(e.contains("--lora-rank 0 must be at least 1"), "{e}");
    }
}
