//! Elementwise and reduction ops.

use super::{check_binary, need_contiguous, need_dtype, need_float, need_rows, shape_str};
use crate::context::{Context, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use ggml_sys as sys;

macro_rules! binary_op {
    ($(#[$doc:meta])* $name:ident, $ffi:ident) => {
        $(#[$doc])*
        ///
        /// `b` is broadcast to `a`'s shape: each `b.ne[i]` must divide `a.ne[i]`.
        /// The result has `a`'s shape and type.
        pub fn $name<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Result<Tensor<'a>> {
            check_binary(stringify!($name), &a, &b)?;
            need_rows(stringify!($name), &a)?;
            // SAFETY: broadcast and types checked.
            self.op(stringify!($name), |ctx| unsafe { sys::$ffi(ctx, a.raw(), b.raw()) })
        }
    };
}

macro_rules! unary_op {
    ($(#[$doc:meta])* $name:ident, $ffi:ident) => {
        unary_op!($(#[$doc])* $name, $ffi, "f32 or f16 (a gradient flows through f32 only)", [DType::F32, DType::F16]);
    };
    ($(#[$doc:meta])* $name:ident, $ffi:ident, $types:literal, [$($t:expr),*]) => {
        $(#[$doc])*
        ///
        #[doc = concat!("`a` must be ", $types, " and contiguous; the result has its shape and type.")]
        pub fn $name<'a>(&'a self, a: Tensor<'a>) -> Result<Tensor<'a>> {
            need_dtype(stringify!($name), &a, &[$($t),*])?;
            need_contiguous(stringify!($name), &a)?;
            // SAFETY: type and layout checked.
            self.op(stringify!($name), |ctx| unsafe { sys::$ffi(ctx, a.raw()) })
        }
    };
}

impl Context {
    binary_op!(
        /// `a + b` (`ggml_add`).
        add, ggml_add
    );
    binary_op!(
        /// `a - b` (`ggml_sub`).
        sub, ggml_sub
    );
    binary_op!(
        /// `a ⊙ b`, elementwise product (`ggml_mul`).
        mul, ggml_mul
    );
    binary_op!(
        /// `a / b`, elementwise (`ggml_div`).
        div, ggml_div
    );

    unary_op!(
        /// `x²` (`ggml_sqr`).
        sqr, ggml_sqr
    );
    unary_op!(
        /// `√x` (`ggml_sqrt`).
        sqrt, ggml_sqrt
    );
    unary_op!(
        /// `ln x` (`ggml_log`).
        log, ggml_log
    );
    unary_op!(
        /// `eˣ` (`ggml_exp`).
        exp, ggml_exp
    );
    unary_op!(
        /// `-x` (`ggml_neg`).
        neg, ggml_neg
    );
    unary_op!(
        /// `tanh x` (`ggml_tanh`). No gradient: ggml has no backward for it
        /// ([`Graph::build_backward`](crate::Graph::build_backward) refuses a graph that needs one).
        tanh, ggml_tanh
    );
    unary_op!(
        /// `max(x, 0)` (`ggml_relu`).
        relu, ggml_relu
    );
    unary_op!(
        /// SiLU, `x·σ(x)` (Elfwing et al. 2017; `ggml_silu`).
        silu, ggml_silu
    );
    unary_op!(
        /// GELU, tanh approximation `0.5x(1 + tanh(√(2/π)(x + 0.044715x³)))`
        /// (Hendrycks & Gimpel 2016; `ggml_gelu`). The CPU evaluates it in f32
        /// (toy-rs patch 0002: ggml's f16 lookup table, off by up to ~1e-3, is
        /// not built). A bf16 `a` that is a
        /// [`cast`](Context::cast) of an f32 tensor (autocast) is differentiated by
        /// [`gelu_back`](Context::gelu_back) reading it in bf16 (patch 0045).
        gelu, ggml_gelu, "f32, f16 or bf16", [DType::F32, DType::F16, DType::BF16]
    );
    unary_op!(
        /// GELU, exact form `0.5x(1 + erf(x/√2))` (`ggml_gelu_erf`). No gradient:
        /// ggml has no backward for it ([`gelu`](Context::gelu) has one).
        gelu_erf, ggml_gelu_erf
    );

    /// `s·a` (`ggml_scale`). `a` must be contiguous f32.
    pub fn scale<'a>(&'a self, a: Tensor<'a>, s: f32) -> Result<Tensor<'a>> {
        need_dtype("scale", &a, &[DType::F32])?;
        need_contiguous("scale", &a)?;
        // SAFETY: checked.
        self.op("scale", |ctx| unsafe { sys::ggml_scale(ctx, a.raw(), s) })
    }

    /// `s·a + b` with scalars `s`, `b` (`ggml_scale_bias`). `a` must be contiguous f32.
    pub fn scale_bias<'a>(&'a self, a: Tensor<'a>, s: f32, b: f32) -> Result<Tensor<'a>> {
        need_dtype("scale_bias", &a, &[DType::F32])?;
        need_contiguous("scale_bias", &a)?;
        // SAFETY: checked.
        self.op("scale_bias", |ctx| unsafe { sys::ggml_scale_bias(ctx, a.raw(), s, b) })
    }

    /// `min(max(a, lo), hi)` (`ggml_clamp`); f32, contiguous. No gradient.
    pub fn clamp<'a>(&'a self, a: Tensor<'a>, lo: f32, hi: f32) -> Result<Tensor<'a>> {
        need_dtype("clamp", &a, &[DType::F32])?;
        need_contiguous("clamp", &a)?;
        if lo.is_nan() || hi.is_nan() || lo > hi {
            return Err(Error::op("clamp", format!("bad bounds [{lo}, {hi}]")));
        }
        // SAFETY: checked.
        self.op("clamp", |ctx| unsafe { sys::ggml_clamp(ctx, a.raw(), lo, hi) })
    }

    /// Sum of each row: `[ne0, ne1, ne2, ne3] → [1, ne1, ne2, ne3]` (`ggml_sum_rows`). f32.
    pub fn sum_rows<'a>(&'a self, a: Tensor<'a>) -> Result<Tensor<'a>> {
        need_dtype("sum_rows", &a, &[DType::F32])?;
        need_rows("sum_rows", &a)?;
        // SAFETY: checked.
        self.op("sum_rows", |ctx| unsafe { sys::ggml_sum_rows(ctx, a.raw()) })
    }

    /// Mean of each row, `[ne0, ...] → [1, ...]`, built as `sum_rows` then `scale`
    /// by `1/ne0` (ggml's own MEAN has a backward that aborts when its input has
    /// another consumer).
    pub fn mean_rows<'a>(&'a self, a: Tensor<'a>) -> Result<Tensor<'a>> {
        let s = self.sum_rows(a)?;
        self.scale(s, 1.0 / a.ne()[0] as f32)
    }

    /// Sum of all elements, a one-element tensor (`ggml_sum`). f32 with contiguous rows.
    pub fn sum<'a>(&'a self, a: Tensor<'a>) -> Result<Tensor<'a>> {
        need_dtype("sum", &a, &[DType::F32])?;
        need_rows("sum", &a)?;
        // SAFETY: checked.
        self.op("sum", |ctx| unsafe { sys::ggml_sum(ctx, a.raw()) })
    }

    /// Tile `a` to the shape of `like` (`ggml_repeat`): each `a.ne[i]` must divide
    /// `like.ne[i]`; `a`'s rows must be contiguous.
    pub fn repeat<'a>(&'a self, a: Tensor<'a>, like: Tensor<'a>) -> Result<Tensor<'a>> {
        if !super::can_repeat(&a, &like) {
            return Err(Error::op("repeat", format!("cannot tile {} to {}", shape_str(&a), shape_str(&like))));
        }
        need_float("repeat", &a)?;
        need_rows("repeat", &a)?;
        // SAFETY: checked.
        self.op("repeat", |ctx| unsafe { sys::ggml_repeat(ctx, a.raw(), like.raw()) })
    }

    /// Tile `a` to shape `ne` (`ggml_repeat_4d`): each `a.ne[i]` must divide `ne[i]`;
    /// `a`'s rows must be contiguous.
    pub fn repeat_4d<'a>(&'a self, a: Tensor<'a>, ne: [i64; 4]) -> Result<Tensor<'a>> {
        crate::context::check_shape("repeat_4d", a.dtype(), &ne)?;
        let an = a.ne();
        if (0..4).any(|i| ne[i] % an[i] != 0) {
            return Err(Error::op("repeat_4d", format!("cannot tile {} to {ne:?}", shape_str(&a))));
        }
        need_float("repeat_4d", &a)?;
        need_rows("repeat_4d", &a)?;
        // SAFETY: checked.
        self.op("repeat_4d", |ctx| unsafe { sys::ggml_repeat_4d(ctx, a.raw(), ne[0], ne[1], ne[2], ne[3]) })
    }

    /// Sum `a` down to the shape of `like` (`ggml_repeat_back`, the adjoint of `repeat`).
    /// f32 with contiguous rows.
    pub fn repeat_back<'a>(&'a self, a: Tensor<'a>, like: Tensor<'a>) -> Result<Tensor<'a>> {
        if !super::can_repeat(&like, &a) {
            return Err(Error::op("repeat_back", format!("cannot sum {} down to {}", shape_str(&a), shape_str(&like))));
        }
        need_dtype("repeat_back", &a, &[DType::F32])?;
        need_rows("repeat_back", &a)?;
        // SAFETY: checked.
        self.op("repeat_back", |ctx| unsafe { sys::ggml_repeat_back(ctx, a.raw(), like.raw()) })
    }

    /// Flag the activation `a` (a [`gelu`](Self::gelu), another unary op or a
    /// GLU such as [`swiglu_split`](Self::swiglu_split)) to be computed again in
    /// the backward for the weight gradient of each product that reads it, maybe
    /// through reshapes (`GGML_TENSOR_FLAG_RECOMPUTE`, toy-rs patch 0062). The
    /// forward's `a` then dies after its forward uses instead of living until
    /// the backward: activation checkpointing of one op, as `torch.compile`
    /// does for pointwise ops. Costs one more pass of the op in the backward;
    /// its sources are kept anyway for its own gradient. Returns `a`.
    ///
    /// # Errors
    /// [`Error::Op`] when `a` is not a unary or GLU op's result, or is a view
    /// or not contiguous.
    pub fn recompute_in_backward<'a>(&'a self, a: Tensor<'a>) -> Result<Tensor<'a>> {
        if !matches!(a.op(), sys::GGML_OP_UNARY | sys::GGML_OP_GLU) || a.is_view() {
            return Err(Error::op(
                "recompute_in_backward",
                format!("{} is the result of {}; only a unary op's or a GLU's can be computed again", super::label(&a), a.op_name()),
            ));
        }
        need_contiguous("recompute_in_backward", &a)?;
        // SAFETY: a live tensor of this context.
        unsafe { (*a.raw()).flags |= sys::GGML_TENSOR_FLAG_RECOMPUTE as i32 };
        Ok(a)
    }

    /// Flag `a`, a bf16 [`gelu`](Self::gelu) of a bf16 tensor, so that its
    /// gradient is bf16 where one product alone reads it, as autocast's
    /// backward keeps it (`GGML_TENSOR_FLAG_BF16_GRAD`, toy-rs patch 0094):
    /// that product's input gradient is written in bf16, the GELU's backward
    /// reads it and writes the GELU input's gradient in bf16, and a bias
    /// summed before that input takes an f32 gradient of it (`repeat_back`).
    /// On CUDA that product and the GELU's backward then run as one cuBLASLt
    /// matmul with the DGELU epilogue (patch 0095). CUDA only: a graph with this flag has bf16 gradients that the CPU does
    /// not compute. Returns `a`.
    ///
    /// # Errors
    /// [`Error::Op`] when `a` is not a bf16 GELU of a bf16 tensor.
    pub fn bf16_gradient<'a>(&'a self, a: Tensor<'a>) -> Result<Tensor<'a>> {
        // SAFETY: a live tensor; its op_params[0] is its unary op where its op is UNARY.
        let gelu = a.op() == sys::GGML_OP_UNARY && unsafe { sys::ggml_get_unary_op(a.raw()) } == sys::GGML_UNARY_OP_GELU;
        if !gelu || a.dtype() != DType::BF16 || a.srcs()[0].dtype() != DType::BF16 {
            return Err(Error::op("bf16_gradient", format!("{} is not a bf16 GELU of a bf16 tensor", super::label(&a))));
        }
        // SAFETY: a live tensor of this context.
        unsafe { (*a.raw()).flags |= sys::GGML_TENSOR_FLAG_BF16_GRAD as i32 };
        Ok(a)
    }
}
