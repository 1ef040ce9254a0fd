//! Which graphs ggml can differentiate: mirrors `ggml_build_backward_expand` and
//! `ggml_compute_backward` (ggml 0.26.0 plus our patches) so that a graph they
//! would abort on is refused with an error instead.

use crate::context::Tensor;
use crate::error::{Error, Result};
use ggml_sys as sys;
use std::collections::{HashMap, HashSet};

/// Ops whose backward ggml implements (with our `NORM` patch), for any operand
/// that needs a gradient unless [`check_node`] says otherwise.
const OPS_WITH_BACKWARD: &[sys::ggml_op] = &[
    sys::GGML_OP_NONE,
    sys::GGML_OP_DUP,
    sys::GGML_OP_ADD,
    sys::GGML_OP_ADD1,
    sys::GGML_OP_ACC,
    sys::GGML_OP_SUB,
    sys::GGML_OP_MUL,
    sys::GGML_OP_DIV,
    sys::GGML_OP_SQR,
    sys::GGML_OP_SQRT,
    sys::GGML_OP_LOG,
    sys::GGML_OP_SIN,
    sys::GGML_OP_COS,
    sys::GGML_OP_SUM,
    sys::GGML_OP_SUM_ROWS,
    sys::GGML_OP_REPEAT,
    sys::GGML_OP_REPEAT_BACK,
    sys::GGML_OP_RMS_NORM,
    sys::GGML_OP_NORM,
    sys::GGML_OP_MUL_MAT,
    sys::GGML_OP_SCALE,
    sys::GGML_OP_CPY,
    sys::GGML_OP_CONT,
    sys::GGML_OP_RESHAPE,
    sys::GGML_OP_VIEW,
    sys::GGML_OP_PERMUTE,
    sys::GGML_OP_TRANSPOSE,
    sys::GGML_OP_GET_ROWS,
    sys::GGML_OP_DIAG_MASK_INF,
    sys::GGML_OP_DIAG_MASK_ZERO,
    sys::GGML_OP_SOFT_MAX,
    sys::GGML_OP_ROPE,
    sys::GGML_OP_UNARY,
    sys::GGML_OP_CROSS_ENTROPY_LOSS,
    sys::GGML_OP_CROSS_ENTROPY_LOSS_IDS,
    sys::GGML_OP_PAD,
    sys::GGML_OP_ATTN_CAUSAL,
    sys::GGML_OP_GLU,
];

/// Unary ops with a backward (GELU from our patch).
const UNARY_WITH_BACKWARD: &[sys::ggml_unary_op] = &[
    sys::GGML_UNARY_OP_ABS,
    sys::GGML_UNARY_OP_SGN,
    sys::GGML_UNARY_OP_NEG,
    sys::GGML_UNARY_OP_STEP,
    sys::GGML_UNARY_OP_RELU,
    sys::GGML_UNARY_OP_SILU,
    sys::GGML_UNARY_OP_EXP,
    sys::GGML_UNARY_OP_EXPM1,
    sys::GGML_UNARY_OP_SOFTPLUS,
    sys::GGML_UNARY_OP_GELU,
];

/// Refuse graphs whose backward ggml cannot build. `nodes` in execution order.
pub(crate) fn check_differentiable(nodes: &[Tensor<'_>]) -> Result<()> {
    let mut needs: HashSet<*mut sys::ggml_tensor> = HashSet::new();
    let mut any_param = false;
    for n in nodes {
        let srcs = n.srcs();
        // Operands whose gradient ggml ignores by construction.
        let ignored = |j: usize| -> bool {
            matches!((n.op(), j), (sys::GGML_OP_CPY, 1) | (sys::GGML_OP_GET_ROWS, 1) | (sys::GGML_OP_ROPE, 1))
                || (n.op() == sys::GGML_OP_UNARY && matches!(unary(n), sys::GGML_UNARY_OP_SGN | sys::GGML_UNARY_OP_STEP))
        };
        let src_needs: Vec<bool> = (0..srcs.len()).map(|j| !ignored(j) && needs.contains(&srcs[j].raw())).collect();
        // a detached tensor (patch 0066) is a constant to the backward pass
        let node_needs = n.is_param() || (!n.is_detached() && src_needs.iter().any(|&b| b));
        if n.is_param() {
            any_param = true;
        }
        if !node_needs || n.dtype() == crate::DType::I32 {
            continue;
        }
        check_node(n, &srcs, &src_needs)?;
        needs.insert(n.raw());
    }
    if !any_param {
        return Err(Error::Backward("no parameter in the graph (mark weights with Context::set_param)".into()));
    }
    check_strided_grads(nodes, &needs)
}

/// ggml differentiates PERMUTE and TRANSPOSE by permuting the incoming gradient
/// back, so their operand receives a strided view, and many backward rules and
/// kernels assert contiguous input (a process abort, at build or at compute).
/// Accepted operands, each verified by the gradient checks in `tests/grad.rs`:
/// RESHAPE (its backward makes the gradient contiguous), parameters
/// ([`Graph::build_backward`](crate::Graph::build_backward) adds a contiguous
/// copy), and MUL_MAT, ROPE and RMS_NORM when the rows stay contiguous (their
/// kernels take row strides but not a strided dimension 0; MUL_MAT's gradient
/// is a `mul_mat` with the incoming gradient as second operand since our patch
/// 0003). Except for RESHAPE the operand must have no other consumer, since ggml
/// would accumulate into the strided view. Everything else is refused; a reshape
/// to the same shape in front of the permute lifts the restriction.
fn check_strided_grads(nodes: &[Tensor<'_>], needs: &HashSet<*mut sys::ggml_tensor>) -> Result<()> {
    let mut uses: HashMap<*mut sys::ggml_tensor, usize> = HashMap::new();
    for n in nodes.iter().filter(|n| needs.contains(&n.raw())) {
        for s in n.srcs() {
            *uses.entry(s.raw()).or_default() += 1;
        }
    }
    for n in nodes {
        if !matches!(n.op(), sys::GGML_OP_PERMUTE | sys::GGML_OP_TRANSPOSE) || n.is_contiguous() {
            continue;
        }
        let Some(&s) = n.srcs().first() else { continue };
        if !needs.contains(&s.raw()) {
            continue;
        }
        let rows_kept = n.nb()[0] == n.dtype().type_size();
        let only_use = uses.get(&s.raw()).copied().unwrap_or(0) <= 1;
        let ok = match s.op() {
            sys::GGML_OP_RESHAPE => true,
            sys::GGML_OP_NONE => only_use && s.is_param(),
            sys::GGML_OP_MUL_MAT | sys::GGML_OP_ROPE | sys::GGML_OP_RMS_NORM => only_use && rows_kept,
            _ => false,
        };
        if !ok {
            let why = if only_use {
                format!("the backward of {} cannot take it", s.op_name())
            } else {
                "it has other consumers whose gradients ggml would add to it".into()
            };
            return Err(fail(
                n,
                &format!(
                    "ggml would pass a strided gradient to its operand {} ({}) and {why}; insert a reshape to the same shape between them (its backward makes the gradient contiguous)",
                    crate::ops::label(&s),
                    s.op_name()
                ),
            ));
        }
    }
    Ok(())
}

/// Whether `op` only views its source (nothing runs; ggml's scheduler skips it).
pub(crate) fn is_view_op(op: sys::ggml_op) -> bool {
    matches!(op, sys::GGML_OP_VIEW | sys::GGML_OP_RESHAPE | sys::GGML_OP_PERMUTE | sys::GGML_OP_TRANSPOSE)
}

/// The tensor that `t` reshapes, through any number of reshapes (`t` itself if
/// it is no reshape); `None` for a reshape without a source.
fn through_reshapes<'a>(t: &Tensor<'a>) -> Option<Tensor<'a>> {
    let mut t = *t;
    while t.op() == sys::GGML_OP_RESHAPE {
        t = *t.srcs().first()?;
    }
    Some(t)
}
/// Whether node `n` (op `op`) may read the bf16 operand `s` with the gradient
/// flowing through it (ggml's `build_backward_expand` takes the same list).
fn bf16_input(n: &Tensor<'_>, op: sys::ggml_op, s: &Tensor<'_>) -> bool {
    // Ops whose operand may be a bf16 cast of an f32 tensor, its gradient f32: a product's
    // input, maybe reshaped (patch 0042), the attention's (patch 0043), a swiglu's or a
    // GELU's (patches 0044, 0045); and a product may read the bf16 swiglu or GELU of such casts,
    // or the swiglu of two bf16 products (patch 0048).
    let product = matches!(op, sys::GGML_OP_MUL_MAT | sys::GGML_OP_RESHAPE);
    let reads_casts = product
        || matches!(op, sys::GGML_OP_ATTN_CAUSAL | sys::GGML_OP_GLU)
        || (op == sys::GGML_OP_UNARY && unary(n) == sys::GGML_UNARY_OP_GELU);
    // bf16 logits (patch 0041): the loss's bf16 gradient goes to their product's OUT_PRODs
    let bf16_logits = op == sys::GGML_OP_CROSS_ENTROPY_LOSS_IDS && s.dtype() == crate::DType::BF16 && s.op() == sys::GGML_OP_MUL_MAT;
    // a swiglu (or a reshape) reads a bf16 product, its gradient bf16 (patch 0048); a product
    // reads one (a LoRA adapter's A·x), its gradient f32, which the bf16 product's OUT_PRODs take
    // (patch 0055: and a sum of two bf16 products reads them, its gradient theirs)
    let bf16_product =
        matches!(op, sys::GGML_OP_GLU | sys::GGML_OP_RESHAPE | sys::GGML_OP_MUL_MAT | sys::GGML_OP_ADD) && is_bf16_product(s);
    // the attention's bf16 output (patch 0073), viewed, reshaped, multiplied or cast to f32
    let bf16_attention =
        matches!(op, sys::GGML_OP_VIEW | sys::GGML_OP_RESHAPE | sys::GGML_OP_MUL_MAT | sys::GGML_OP_CPY) && is_bf16_attention(s);
    // a rope reads a bf16 product, the attention bf16 ropes of them (q, k) and a bf16 product
    // (v), maybe reshaped, and a reshape reads such a rope (patch 0076)
    let bf16_qkv = (matches!(op, sys::GGML_OP_ROPE | sys::GGML_OP_ATTN_CAUSAL) && is_bf16_product(s))
        || (matches!(op, sys::GGML_OP_RESHAPE | sys::GGML_OP_ATTN_CAUSAL) && is_bf16_rope(s));
    bf16_logits || (reads_casts && is_bf16_cast(s)) || (product && is_bf16_activation(s)) || bf16_product || bf16_attention || bf16_qkv
}

/// Whether `t` is `cast(x, BF16)` of an f32 `x`, maybe through reshapes (as
/// ggml's `toy_is_bf16_cast`, patch 0042).
fn is_bf16_cast(t: &Tensor<'_>) -> bool {
    let Some(t) = through_reshapes(t) else { return false };
    t.op() == sys::GGML_OP_CPY && t.dtype() == crate::DType::BF16 && t.srcs().first().is_some_and(|s| s.dtype() == crate::DType::F32)
}

/// Whether `t` is a bf16 product (`mul_mat_bf16`), maybe through reshapes, or
/// the bf16 sum of two (a product and its LoRA adapter's bf16 term) (as ggml's
/// `toy_is_bf16_product`, patches 0048 and 0055).
fn is_bf16_product(t: &Tensor<'_>) -> bool {
    let product = |t: &Tensor<'_>| t.op() == sys::GGML_OP_MUL_MAT && t.dtype() == crate::DType::BF16;
    through_reshapes(t).is_some_and(|t| {
        product(&t)
            || (t.op() == sys::GGML_OP_ADD && t.dtype() == crate::DType::BF16 && t.srcs().len() == 2 && t.srcs().iter().all(product))
    })
}

/// Whether `t` is the bf16 result of `attn_causal` (bf16 q, k and v) or a view
/// of its output, maybe reshaped (as ggml's `toy_is_bf16_attention`, patch
/// 0073): the output's gradient is f32.
fn is_bf16_attention(t: &Tensor<'_>) -> bool {
    let result = through_reshapes(t).and_then(|t| if t.op() == sys::GGML_OP_VIEW { t.srcs().first().copied() } else { Some(t) });
    result.is_some_and(|t| t.op() == sys::GGML_OP_ATTN_CAUSAL && t.dtype() == crate::DType::BF16)
}

/// Whether `t` is the bf16 rope of a bf16 product, maybe through reshapes
/// (both) (as ggml's `toy_is_bf16_rope`, patch 0076): its gradient is f32,
/// and where the rope is the product's only reader, the rope's backward gives
/// the product a bf16 one.
fn is_bf16_rope(t: &Tensor<'_>) -> bool {
    through_reshapes(t)
        .is_some_and(|t| t.op() == sys::GGML_OP_ROPE && t.dtype() == crate::DType::BF16 && t.srcs().first().is_some_and(is_bf16_product))
}

/// Whether `t` is a bf16 split SwiGLU of two bf16 casts (or two bf16 products,
/// patch 0048) or the bf16 GELU of one cast, maybe through reshapes (as ggml's
/// `toy_is_bf16_activation`, patches 0044, 0045).
fn is_bf16_activation(t: &Tensor<'_>) -> bool {
    let Some(t) = through_reshapes(t).filter(|t| t.dtype() == crate::DType::BF16) else { return false };
    let srcs = t.srcs();
    match t.op() {
        sys::GGML_OP_UNARY => unary(&t) == sys::GGML_UNARY_OP_GELU && srcs.first().is_some_and(is_bf16_cast),
        sys::GGML_OP_GLU => {
            // SAFETY: GLU node.
            let g = unsafe { sys::ggml_get_glu_op(t.raw()) };
            g == sys::GGML_GLU_OP_SWIGLU && srcs.len() == 2 && (srcs.iter().all(is_bf16_cast) || srcs.iter().all(is_bf16_product))
        }
        _ => false,
    }
}

fn unary(n: &Tensor<'_>) -> sys::ggml_unary_op {
    // SAFETY: only called for UNARY nodes.
    unsafe { sys::ggml_get_unary_op(n.raw()) }
}

fn fail(n: &Tensor<'_>, why: &str) -> Error {
    Error::Backward(format!("{} {}: {why}", n.op_name(), crate::ops::label(n)))
}

fn check_node(n: &Tensor<'_>, srcs: &[Tensor<'_>], src_needs: &[bool]) -> Result<()> {
    let op = n.op();
    if !OPS_WITH_BACKWARD.contains(&op) {
        return Err(fail(n, "ggml has no backward for this op"));
    }
    if n.is_view() && op != sys::GGML_OP_CPY && !is_view_op(op) {
        return Err(fail(n, "in-place ops cannot be differentiated"));
    }
    // Gradients flow through f32 operands, and through the bf16 ones of bf16_input.
    for (s, &need) in srcs.iter().zip(src_needs) {
        // (f16 too would reach kernels without an f16 case: scale, binary ops, gelu's backward)
        if need && !bf16_input(n, op, s) && s.dtype() != crate::DType::F32 {
            let fix = if op == sys::GGML_OP_CPY {
                "a cast back to f32 does not make a gradient flow through it: keep the trained path in f32"
            } else {
                "cast to f32 before this op"
            };
            return Err(fail(
                n,
                &format!("gradients flow only through f32 operands, and {} is {}: {fix}", crate::ops::label(s), s.dtype()),
            ));
        }
    }
    let need = |j: usize| src_needs.get(j).copied().unwrap_or(false);
    match op {
        sys::GGML_OP_UNARY if !UNARY_WITH_BACKWARD.contains(&unary(n)) => Err(fail(n, "ggml has no backward for this unary op")),
        sys::GGML_OP_GLU => {
            // SAFETY: GLU node.
            let g = unsafe { sys::ggml_get_glu_op(n.raw()) };
            if g != sys::GGML_GLU_OP_SWIGLU || srcs.len() < 2 {
                Err(fail(n, "only split SwiGLU has a backward"))
            } else {
                Ok(())
            }
        }
        sys::GGML_OP_SUB | sys::GGML_OP_DIV if need(1) && srcs[0].ne() != srcs[1].ne() => Err(fail(
            n,
            "ggml does not sum the gradient of a broadcast second operand of sub/div back to its shape; repeat that operand to the full shape first",
        )),
        sys::GGML_OP_SOFT_MAX if need(1) => Err(fail(n, "the softmax mask cannot receive a gradient")),
        sys::GGML_OP_CROSS_ENTROPY_LOSS if need(1) => Err(fail(n, "labels cannot receive a gradient")),
        sys::GGML_OP_ROPE if need(2) => Err(fail(n, "frequency factors cannot receive a gradient")),
        sys::GGML_OP_GET_ROWS if need(0) => {
            let (a, ids) = (srcs[0].ne(), srcs[1].ne());
            if a[2] != 1 || a[3] != 1 || ids[1] != 1 || ids[2] != 1 {
                Err(fail(n, "the backward of get_rows needs a 2-d table and a 1-d index vector (flatten the indices)"))
            } else {
                Ok(())
            }
        }
        sys::GGML_OP_MUL_MAT if need(1) && srcs[0].dtype().block_size() > 1 => Err(fail(
            n,
            &format!(
                "the gradient of the second operand needs the first transposed, and {:?} is {} (blocks along its rows): multiply by cast({:?}, F32)",
                srcs[0].name(),
                srcs[0].dtype(),
                srcs[0].name()
            ),
        )),
        sys::GGML_OP_MUL_MAT if need(0) => {
            let (a, b) = (srcs[0].ne(), srcs[1].ne());
            // Patch 0003 folds a 2-d weight broadcast over any batch; other broadcasts
            // take ggml's OUT_PROD path, which asserts ne3 = 1.
            let matrix = a[2] == 1 && a[3] == 1;
            if (a[2] != b[2] || a[3] != b[3]) && !matrix && b[3] != 1 {
                Err(fail(n, "the weight gradient of a broadcast mul_mat needs ne3 = 1 (repeat the operand explicitly)"))
            } else {
                Ok(())
            }
        }
        _ => Ok(()),
    }
}
