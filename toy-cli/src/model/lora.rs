//! Low-rank adapters (Hu et al. 2021, "LoRA: Low-Rank Adaptation of Large
//! Language Models"): a targeted matrix `W` `[in, out]` computes
//! `W·x + (alpha/rank)·B·(A·x)` with `A` `[in, rank]` and `B` `[rank, out]`
//! (ggml `ne` order, as llama.cpp's adapters: `llama-adapter.cpp`,
//! `build_lora_mm`). `A` starts as loralib's `kaiming_uniform_(a=√5)`,
//! U(−1/√in, 1/√in), and `B` at zero, so step 0 is the base model.

use super::table::Table;
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

    /// Check rank, alpha and targets for a model of width `d_model` whose
    /// parameters `table` lists.
    pub fn validate(&self, table: &Table, d_model: usize) -> std::result::Result<(), String> {
        if self.rank == 0 || self.rank > d_model {
            return Err(format!("--lora-rank {} must be between 1 and the model width {d_model}", self.rank));
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

/// `W·x` (plus `r` when given), plus `B·(scale·(A·x))` when `lora` is set.
/// A `W` kept in a frozen
/// base's type (quantized, f16, bf16) is dequantized for the product, as
/// QLoRA does (Dettmers et al. 2023), to f32 or bf16, or read as stored in
/// a graph without a backward, as `how` says ([`super::weights::operand`]).
///
/// The graph's order: the adapter's term first, `r` added to it, and `W·x`
/// last, with that sum as its addend. On CUDA each sum then runs as its
/// product's GEMM epilogue (patch 0037), and the backward, which runs in
/// reverse, starts with `W`'s product: it converts the output gradient to
/// bf16 once, and the adapter's two products that read it (the gradients of
/// `B` and of `A·x`) take that copy (patch 0040) instead of running in f32.
pub fn linear<'a>(
    ctx: &'a Context,
    w: Tensor<'a>,
    lora: Option<Adapter<'a>>,
    scale: f32,
    x: Tensor<'a>,
    r: Option<Tensor<'a>>,
    how: super::weights::Compact,
) -> Result<Tensor<'a>> {
    // The scale on the rank-r product `A·x` `[r, …]`, not on `B·(A·x)`
    // `[out, …]`: the same update, one pass over a tensor out/r times smaller.
    let term = match lora {
        Some(l) => Some(ctx.mul_mat(l.b, ctx.scale(ctx.mul_mat(l.a, x)?, scale)?)?),
        None => None,
    };
    // `r` before the product it is added to: no node (such as the reshape of
    // `r`) between a product and its sum, which CUDA folds into the GEMM.
    let addend = match (r, term) {
        (Some(r), Some(t)) => Some(ctx.add(r, t)?),
        (r, t) => r.or(t),
    };
    let y = ctx.mul_mat(super::weights::operand(ctx, w, how)?, x)?;
    match addend {
        Some(a) => ctx.add(a, y),
        None => Ok(y),
    }
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
