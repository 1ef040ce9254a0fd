//! Ops that shape the backward pass rather than the forward values: a tensor
//! that passes no gradient, and a product whose input gradient goes through
//! another matrix (toy-rs patch 0066).

use super::shape_str;
use crate::context::{Context, Tensor};
use crate::error::{Error, Result};
use ggml_sys as sys;

impl Context {
    /// A view of `a` that passes no gradient to `a`, as PyTorch's
    /// `Tensor.detach()`: the backward pass treats it as a constant
    /// (`GGML_TENSOR_FLAG_DETACHED`, toy-rs patch 0066). Same shape, type and
    /// data as `a`; nothing is copied or computed.
    pub fn detach<'a>(&'a self, a: Tensor<'a>) -> Result<Tensor<'a>> {
        // A VIEW node (not ggml_view_tensor's leaf view): the graph then reaches `a`
        // through it, and computes `a` before what reads the view.
        let (ne, nb) = (a.ne(), a.nb());
        // SAFETY: a is a live tensor of this context; the view has its shape and strides.
        let v = self.op("detach", |ctx| unsafe { sys::ggml_view_4d(ctx, a.raw(), ne[0], ne[1], ne[2], ne[3], nb[1], nb[2], nb[3], 0) })?;
        // SAFETY: v was just made in this context; nb0 too as `a`'s (a transposed `a` has a strided dimension 0).
        unsafe {
            (*v.raw()).nb[0] = nb[0];
            (*v.raw()).flags |= sys::GGML_TENSOR_FLAG_DETACHED as i32;
        }
        Ok(v)
    }

    /// `mul_mat(w, x)` `[m, n, …]` whose backward computes the gradient of `x`
    /// with `w_back` in the place of `w` (toy-rs patch 0066,
    /// `ggml_mul_mat_set_backward_weight`; ggml's rule for `MUL_MAT` in
    /// `ggml_compute_backward`). For a frozen `w` with a low-rank update computed
    /// beside it (LoRA: `y = W·x + s·B·(A·x)`), `w_back = detach(W + s·B·A)`
    /// gives the whole input gradient in one product, and the update's own
    /// products take `detach(x)` ([`detach`](Self::detach)): they then only give
    /// `A` and `B` their gradients. The forward value is `w·x`, and the forward
    /// graph does not hold `w_back`: building the backward adds it (and what
    /// it is computed from) where the gradient of `x` needs it, so that it
    /// lives only there.
    ///
    /// `w` `[k, m]` and `x` `[k, n, …]` as [`mul_mat`](Self::mul_mat).
    ///
    /// # Errors
    /// [`Error::Op`] when `mul_mat` refuses the operands, or `w_back` is not a
    /// contiguous matrix of `w`'s shape and type, or may take a gradient
    /// (neither detached nor a tensor that no op made).
    pub fn mul_mat_backward_weight<'a>(&'a self, w: Tensor<'a>, x: Tensor<'a>, w_back: Tensor<'a>) -> Result<Tensor<'a>> {
        check_backward_weight(w, w_back)?;
        attach_backward_weight(self.mul_mat(w, x)?, w_back)
    }

    /// [`mul_mat_bf16`](Self::mul_mat_bf16) with a backward weight, as
    /// [`mul_mat_backward_weight`](Self::mul_mat_backward_weight).
    ///
    /// # Errors
    /// As `mul_mat_bf16` and `mul_mat_backward_weight`.
    pub fn mul_mat_bf16_backward_weight<'a>(&'a self, w: Tensor<'a>, x: Tensor<'a>, w_back: Tensor<'a>) -> Result<Tensor<'a>> {
        check_backward_weight(w, w_back)?;
        attach_backward_weight(self.mul_mat_bf16(w, x)?, w_back)
    }
}

/// `w_back` as a backward weight for `w`: a contiguous matrix of `w`'s shape
/// and type that takes no gradient itself.
fn check_backward_weight(w: Tensor<'_>, w_back: Tensor<'_>) -> Result<()> {
    if w_back.ne() != w.ne() || w.ne()[2..] != [1, 1] {
        return Err(Error::op(
            "mul_mat_backward_weight",
            format!("backward weight {} must be a matrix of the weight's shape {}", shape_str(&w_back), shape_str(&w)),
        ));
    }
    if !w_back.is_detached() && (w_back.op() != sys::GGML_OP_NONE || w_back.is_param()) {
        return Err(Error::op(
            "mul_mat_backward_weight",
            format!("backward weight {:?} ({}) must be detached (Context::detach) or a constant", w_back.name(), w_back.op_name()),
        ));
    }
    // w's type: the input gradient then runs the kernels it would run with w
    if w_back.dtype() != w.dtype() || !w_back.is_contiguous() {
        return Err(Error::op(
            "mul_mat_backward_weight",
            format!("backward weight {} must be contiguous and of the weight's type {}", w_back.dtype(), w.dtype()),
        ));
    }
    Ok(())
}

/// Record `w_back` as the product `y`'s backward weight.
fn attach_backward_weight<'a>(y: Tensor<'a>, w_back: Tensor<'a>) -> Result<Tensor<'a>> {
    // SAFETY: y is a MUL_MAT just made in this context; w_back has its src0's shape (checked).
    unsafe { sys::ggml_mul_mat_set_backward_weight(y.raw(), w_back.raw()) };
    Ok(y)
}
