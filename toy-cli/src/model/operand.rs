//! How a product reads a weight: as it is, dequantized or widened for the
//! time of the product, or as a bf16 copy made for the product or once a
//! step ([`Compact`], [`Autocast::weights`]).

use super::weights::Autocast;
use ggml_rs::{Context, DType, Result, Tensor};

/// How a product reads a matrix kept in a compact type (a frozen LoRA base's
/// quantized, f16 or bf16 matrices; an f32 matrix is always read as it is).
#[derive(Clone, Copy, PartialEq, Eq, Debug, Default)]
pub enum Compact {
    /// Dequantized (or widened) to f32 for the time of the product: the
    /// f32 arithmetic of the dequantized model, as on the CPU.
    #[default]
    F32,
    /// As stored: ggml's `mul_mat` of that type, as llama.cpp runs it (for
    /// q4_1 the activations are rounded to q8_1). Graphs without a backward.
    Stored,
    /// Converted to bf16 for a bf16 product (`--dtype bf16` on CUDA): one
    /// pass from the stored type (toy-rs patch 0040), where [`Compact::F32`]
    /// wrote f32 that the product then converted to bf16 itself. The same
    /// values: the dequantized f32 rounded to nearest bf16 either way.
    Bf16,
    /// As [`Compact::Bf16`], but converted once a step: the backward's products
    /// read the forward's copy ([`Context::cast_kept`], toy-rs patch 0061)
    /// instead of converting again, and CUDA makes a step's copies of one type
    /// in one launch. The step then holds the compact matrices in bf16 (2 bytes
    /// a weight) from its start to the backward, as full fine-tuning holds its
    /// weights' bf16 copies; the stored base stays compact.
    Bf16Step,
}

/// A weight as a product's f32 operand: `w` itself when f32, else `w`
/// dequantized (or widened from f16/bf16) for the time of the product
/// ([`Context::cast`]; the backward casts again rather than keep the copy).
pub fn matrix<'a>(ctx: &'a Context, w: Tensor<'a>) -> Result<Tensor<'a>> {
    operand(ctx, w, Compact::F32)
}

/// A weight as a product's operand, read as `how` says when it is not f32.
pub fn operand<'a>(ctx: &'a Context, w: Tensor<'a>, how: Compact) -> Result<Tensor<'a>> {
    match (w.dtype(), how) {
        (DType::F32, _) | (_, Compact::Stored) | (DType::BF16, Compact::Bf16 | Compact::Bf16Step) => Ok(w),
        (_, Compact::F32) => ctx.cast(w, DType::F32),
        (_, Compact::Bf16) => ctx.cast(w, DType::BF16),
        (_, Compact::Bf16Step) => ctx.cast_kept(w, DType::BF16),
    }
}

/// A weight as a product's operand: under [`Autocast::weights`] a trainable
/// f32 matrix's bf16 copy (a new `ggml_cast` each call, so the caller makes
/// one operand a matrix a graph; a training graph makes them first), else as
/// `how` says ([`operand`]).
pub fn weight_operand<'a>(ctx: &'a Context, w: Tensor<'a>, how: Compact, autocast: Autocast) -> Result<Tensor<'a>> {
    if cast_once(w, autocast) {
        ctx.cast(w, DType::BF16)
    } else {
        operand(ctx, w, how)
    }
}

/// Whether products read `w` through one bf16 copy a graph ([`Autocast::weights`]):
/// a trainable f32 matrix under that setting.
pub fn cast_once(w: Tensor<'_>, autocast: Autocast) -> bool {
    autocast.weights && w.dtype() == DType::F32 && w.is_param()
}
