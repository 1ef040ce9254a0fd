//! How a bf16 training step reads a frozen compact base (toy-rs patch 0061).

use crate::model::weights::Compact;
use crate::model::Weights;
use ggml_rs::Backend;

/// How a bf16 step reads its frozen compact matrices (a LoRA base's quantized or
/// f16 weights): converted to bf16 once a step and kept for the backward
/// ([`Compact::Bf16Step`], toy-rs patch 0061) when `once` and those copies take
/// at most an eighth of the device's memory (SmolLM2-135M: 0.2 of 141 GiB on an
/// H200; an 8B model on a 24 GiB GPU converts per product); else once per product
/// ([`Compact::Bf16`]: twice a step, one matrix's copy at a time, QLoRA's way).
/// `TOY_NO_0061` (the caller) keeps the per-product conversion for A/B runs.
pub(crate) fn bf16_compact(weights: &Weights<'_>, device: &Backend, once: bool) -> Compact {
    let compact = |t: &ggml_rs::Tensor<'_>| !matches!(t.dtype(), ggml_rs::DType::F32 | ggml_rs::DType::BF16);
    let bytes: u64 = weights.params().iter().filter(|p| !p.trainable && compact(&p.tensor)).map(|p| 2 * p.tensor.nelements() as u64).sum();
    let (_, total) = device.device().memory();
    if once && bytes > 0 && bytes <= total as u64 / 8 {
        Compact::Bf16Step
    } else {
        Compact::Bf16
    }
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
