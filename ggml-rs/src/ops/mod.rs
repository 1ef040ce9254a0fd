//! Ops: `ggml_<op>` as methods of [`Context`], each checking in Rust the
//! preconditions ggml would otherwise enforce with a process-ending assert.
//!
//! Shapes are in ggml `ne` order: `ne[0]` is the contiguous dimension, so a
//! matrix of `rows × cols` is `[cols, rows]`. Results live in the context the
//! method is called on and borrow every operand, so a result never outlives
//! the data it may view. Every method returns [`Error::Op`] naming the op and
//! the offending shapes instead of reaching a ggml assert.

mod elementwise;
mod grad;
mod nn;
mod shape;
mod train;

use crate::context::{Context, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use ggml_sys as sys;

pub use nn::RopeMode;

/// Tensors an op result may create at most (some ggml ops build helper views).
const OP_TENSORS: usize = 4;

impl Context {
    /// Run a ggml constructor after reserving room, and wrap its result.
    pub(crate) fn op<'a>(
        &'a self,
        name: &'static str,
        f: impl FnOnce(*mut sys::ggml_context) -> *mut sys::ggml_tensor,
    ) -> Result<Tensor<'a>> {
        self.reserve(name, OP_TENSORS)?;
        let t = self.wrap(f(self.raw()))?;
        self.note_sources(&t);
        Ok(t)
    }
}

pub(crate) fn shape_str(t: &Tensor<'_>) -> String {
    format!("{:?}", t.ne())
}

/// `b` can be broadcast (tiled) to the shape of `a` (`ggml_can_repeat(b, a)`).
pub(crate) fn can_repeat(b: &Tensor<'_>, a: &Tensor<'_>) -> bool {
    let (an, bn) = (a.ne(), b.ne());
    (0..4).all(|i| bn[i] > 0 && an[i] % bn[i] == 0)
}

pub(crate) fn same_shape(a: &Tensor<'_>, b: &Tensor<'_>) -> bool {
    a.ne() == b.ne()
}

fn is_float(d: DType) -> bool {
    matches!(d, DType::F32 | DType::F16 | DType::BF16)
}

/// An operand as messages name it: its name quoted, or "(unnamed)" (ggml
/// names an unnamed tensor's views " (view)", " (transposed)"...: those are
/// said as "(unnamed, transposed)").
pub(crate) fn label(t: &Tensor<'_>) -> String {
    label_of(&t.name())
}

/// [`label`] of a tensor named `name`. The names ggml gives unnamed members of
/// a graph it builds ("leaf_3", "node_12", and their views' "leaf_3 (view)")
/// are said as unnamed too.
pub(crate) fn label_of(name: &str) -> String {
    let generated = |b: &str| {
        ["leaf_", "node_"].iter().any(|p| b.strip_prefix(p).is_some_and(|d| !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit())))
    };
    // ggml appends " (view)", " (copy)"... to the source's name, once per view
    let (mut base, mut kind) = (name, None);
    while let Some(i) = base.rfind(" (").filter(|_| base.ends_with(')')) {
        kind = kind.or(Some(&base[i + 2..base.len() - 1]));
        base = &base[..i];
    }
    match kind {
        _ if !base.is_empty() && !generated(base) => format!("{name:?}"),
        Some(what) => format!("(unnamed, {what})"),
        None => "(unnamed)".to_string(),
    }
}

pub(crate) fn need_dtype(op: &'static str, t: &Tensor<'_>, allowed: &[DType]) -> Result<()> {
    if allowed.contains(&t.dtype()) {
        Ok(())
    } else {
        let names: Vec<&str> = allowed.iter().map(|d| d.name()).collect();
        Err(Error::op(op, format!("operand {} is {}, expected {}", label(t), t.dtype(), names.join(" or "))))
    }
}

pub(crate) fn need_float(op: &'static str, t: &Tensor<'_>) -> Result<()> {
    need_dtype(op, t, &[DType::F32, DType::F16, DType::BF16])
}

/// Rows are contiguous (`nb[0]` is the element size), as most kernels require.
pub(crate) fn need_rows(op: &'static str, t: &Tensor<'_>) -> Result<()> {
    if t.nb()[0] != t.dtype().type_size() || t.dtype().is_quantized() {
        return Err(Error::op(op, format!("operand {} {} must have contiguous rows (use cont first)", label(t), shape_str(t))));
    }
    Ok(())
}

pub(crate) fn need_contiguous(op: &'static str, t: &Tensor<'_>) -> Result<()> {
    if !t.is_contiguous() {
        return Err(Error::op(op, format!("operand {} {} must be contiguous (use cont first)", label(t), shape_str(t))));
    }
    Ok(())
}

/// Binary elementwise ops: `b` broadcasts to `a`; types a ∈ {f32,f16,bf16}, b ∈ {a's type, f32}.
pub(crate) fn check_binary(op: &'static str, a: &Tensor<'_>, b: &Tensor<'_>) -> Result<()> {
    if !can_repeat(b, a) {
        return Err(Error::op(
            op,
            format!("cannot broadcast {} to {}: each ne of the second must divide the first's", shape_str(b), shape_str(a)),
        ));
    }
    if !is_float(a.dtype()) || !(b.dtype() == a.dtype() || b.dtype() == DType::F32) {
        return Err(Error::op(op, format!("unsupported types {} and {}", a.dtype(), b.dtype())));
    }
    need_rows(op, b)?;
    Ok(())
}
