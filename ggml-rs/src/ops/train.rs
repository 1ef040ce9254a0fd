//! Optimizer-step ops (in place on a parameter). Used by [`crate::optim`].

use super::{same_shape, shape_str};
use crate::context::{Context, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use ggml_sys as sys;

impl Context {
    /// One AdamW update of parameter `w` in place (`ggml_opt_step_adamw`;
    /// Loshchilov & Hutter 2019). `hp` is f32 `[7]` = `[lr, β1, β2, eps, weight
    /// decay, 1/(1−β1ᵗ), 1/(1−β2ᵗ)]`; per element `m = β1·m + (1−β1)·g`,
    /// `v = β2·v + (1−β2)·g²`, `w = w·(1 − lr·wd) − lr·(m·h1)/(√(v·h2) + eps)`.
    /// `w` must be an f32 parameter; `grad`, `m` and `v` contiguous f32 of its shape.
    ///
    /// A building block of [`Optimizer`](crate::optim::Optimizer): a graph runs
    /// update nodes only for an optimizer attached to it ([`Optimizer::adamw`](crate::optim::Optimizer::adamw)),
    /// which writes `hp` before each step; [`Graph::allocate`](crate::Graph::allocate)
    /// refuses a graph holding other ones.
    pub fn opt_step_adamw<'a>(
        &'a self,
        w: Tensor<'a>,
        grad: Tensor<'a>,
        m: Tensor<'a>,
        v: Tensor<'a>,
        hp: Tensor<'a>,
    ) -> Result<Tensor<'a>> {
        if !w.is_param() {
            return Err(Error::op("opt_step_adamw", format!("{:?} is not a parameter", w.name())));
        }
        check_step_operand("opt_step_adamw", "parameter", w, w)?;
        for (what, t) in [("gradient", grad), ("first moment", m), ("second moment", v)] {
            check_step_operand("opt_step_adamw", what, t, w)?;
        }
        if hp.dtype() != DType::F32 || hp.nelements() != 7 {
            return Err(Error::op("opt_step_adamw", "hyper-parameters must be f32 [7]"));
        }
        // SAFETY: checked.
        self.op("opt_step_adamw", |ctx| unsafe { sys::ggml_opt_step_adamw(ctx, w.raw(), grad.raw(), m.raw(), v.raw(), hp.raw()) })
    }

    /// One SGD update of `w` in place (`ggml_opt_step_sgd`): `hp` is f32 `[2]` =
    /// `[lr, weight decay]`; `w = w·(1 − lr·wd) − lr·g`. `w` must be an f32
    /// parameter and `grad` contiguous f32 of its shape. A building block of
    /// [`Optimizer::sgd`](crate::optim::Optimizer::sgd), as
    /// [`opt_step_adamw`](Self::opt_step_adamw) is of AdamW.
    pub fn opt_step_sgd<'a>(&'a self, w: Tensor<'a>, grad: Tensor<'a>, hp: Tensor<'a>) -> Result<Tensor<'a>> {
        if !w.is_param() {
            return Err(Error::op("opt_step_sgd", format!("{:?} is not a parameter", w.name())));
        }
        check_step_operand("opt_step_sgd", "parameter", w, w)?;
        check_step_operand("opt_step_sgd", "gradient", grad, w)?;
        if hp.dtype() != DType::F32 || hp.nelements() != 2 {
            return Err(Error::op("opt_step_sgd", "hyper-parameters must be f32 [2]"));
        }
        // SAFETY: checked.
        self.op("opt_step_sgd", |ctx| unsafe { sys::ggml_opt_step_sgd(ctx, w.raw(), grad.raw(), hp.raw()) })
    }
}

/// The CPU kernels read every operand with the parameter's strides and handle
/// f32 only, so each must be a contiguous f32 tensor of the parameter's shape.
fn check_step_operand(op: &'static str, what: &str, t: Tensor<'_>, w: Tensor<'_>) -> Result<()> {
    if !same_shape(&w, &t) || t.dtype() != DType::F32 || !t.is_contiguous() {
        let layout = if t.is_contiguous() { "" } else { " non-contiguous" };
        return Err(Error::op(
            op,
            format!(
                "{what} {} {}{layout} must be a contiguous f32 tensor shaped like the parameter {}",
                shape_str(&t),
                t.dtype(),
                shape_str(&w)
            ),
        ));
    }
    Ok(())
}
