//! How a bf16 training step reads a frozen compact base (toy-rs patch 0061),
//! or loads it in bf16 once.

use crate::model::table::Role;
use crate::model::weights::Compact;
use crate::model::{ModelConfig, Weights};
use ggml_rs::{Backend, Context, DType, Tensor};

/// Bytes of bf16 copies of `weights`' frozen compact matrices (a LoRA base's
/// quantized or f16 weights; 2 bytes a weight).
fn bf16_copy_bytes(weights: &Weights<'_>) -> u64 {
    let compact = |t: &Tensor<'_>| !matches!(t.dtype(), DType::F32 | DType::BF16);
    weights.params().iter().filter(|p| !p.trainable && compact(&p.tensor)).map(|p| 2 * p.tensor.nelements() as u64).sum()
}

/// How a bf16 step reads its frozen compact matrices (a LoRA base's quantized or
/// f16 weights): converted to bf16 once a step and kept for the backward
/// ([`Compact::Bf16Step`], toy-rs patch 0061) when `once` and those copies take
/// at most an eighth of the device's memory (SmolLM2-135M: 0.2 of 141 GiB on an
/// H200; an 8B model on a 24 GiB GPU converts per product); else once per product
/// ([`Compact::Bf16`]: twice a step, one matrix's copy at a time, QLoRA's way).
/// `TOY_NO_0061` (the caller) keeps the per-product conversion for A/B runs.
pub(crate) fn bf16_compact(weights: &Weights<'_>, device: &Backend, once: bool) -> Compact {
    let bytes = bf16_copy_bytes(weights);
    let (_, total) = device.device().memory();
    if once && bytes > 0 && bytes <= total as u64 / 8 {
        Compact::Bf16Step
    } else {
        Compact::Bf16
    }
}

/// The model to build for a bf16 step over `model`'s frozen compact base
/// when [`bf16_compact`] would convert it once a step: the same model with
/// its matrices typed bf16, to be loaded once in bf16 (the file's values
/// dequantized to f32 and rounded to nearest bf16, the values of the step's
/// conversions). The step then converts only the token table (as before:
/// its rows are looked up in their stored type, exactly, and a tied head
/// multiplies by its bf16 copy): a LoRA step over SmolLM2-135M's Q4_1 ran 4
/// list launches, 0.55 ms of GPU time, a step (ncu, H200, stop 49). The device
/// holds the bf16 matrices instead of the compact ones and the step's copies
/// of them (the copies lived from the step's start to its backward, inside the
/// compute buffer that ggml keeps for the whole run). Measured on an H100
/// (stop 53, bench/results.md): LoRA r16 over that Q4_1 21.29 → 20.83 ms a
/// step and 58 MiB less, over its f16 copy 21.50 → 20.84 ms and 198 MiB less. None when there is
/// nothing to convert or it would not be once a step. `TOY_BASE_CAST_PER_STEP`
/// (the caller) keeps patch 0061's casts for A/B runs.
pub(crate) fn bf16_base(model: &ModelConfig, device: &Backend, capacity: usize) -> ggml_rs::Result<Option<ModelConfig>> {
    let probe = Context::new(capacity)?; // tensor descriptions only: nothing is allocated
    let weights = Weights::new(&probe, model)?;
    if bf16_compact(&weights, device, true) != Compact::Bf16Step {
        return Ok(None);
    }
    let bf16 = |t: &String| if matches!(DType::from_name(t), Some(DType::F32)) { t.clone() } else { "bf16".to_string() };
    let mut m = model.clone();
    m.base_dtype = m.base_dtype.as_ref().map(bf16);
    m.base_dtype_except = m.base_dtype_except.iter().map(|(k, t)| (k.clone(), bf16(t))).collect();
    let table = weights.table();
    for s in table.first.iter().chain(table.last).filter(|s| s.role == Role::Embedding) {
        if let Some(t) = model.base_dtype_except.get(s.name).or(model.base_dtype.as_ref()) {
            m.base_dtype_except.insert(s.name.to_string(), t.clone());
        }
    }
    Ok(Some(m))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::{lora::LoraConfig, Arch, ModelConfig};
    use ggml_rs::Context;

    /// A small f16 base's copies fit any device: once a step, unless asked
    /// otherwise; an f32 model has no compact matrix to convert.
    #[test]
    fn a_small_compact_base_is_converted_once_a_step() {
        let mut c = ModelConfig::new(Arch::Llama, 61, 32, 2, 4, 48, 8);
        c.lora = Some(LoraConfig { rank: 4, alpha: 4.0, targets: vec!["attn_q".into()] });
        let cpu = Backend::cpu().unwrap();
        let ctx = Context::new(256).unwrap();
        assert_eq!(bf16_compact(&Weights::new(&ctx, &c).unwrap(), &cpu, true), Compact::Bf16, "f32: nothing to convert");
        c.base_dtype = Some("f16".into());
        let w = Weights::new(&ctx, &c).unwrap();
        assert_eq!(bf16_compact(&w, &cpu, true), Compact::Bf16Step);
        assert_eq!(bf16_compact(&w, &cpu, false), Compact::Bf16);
    }
}
