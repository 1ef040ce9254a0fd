//! Views and layout ops: reshape, view, permute, transpose, cont, cpy.

use super::{need_contiguous, shape_str};
use crate::context::{check_shape, Context, Tensor};
use crate::error::{Error, Result};
use crate::DType;
use ggml_sys as sys;

impl Context {
    /// The same data with shape `ne` (1 to 4 dims, same element count); `a` must
    /// be contiguous (`ggml_reshape_{1,2,3,4}d`).
    pub fn reshape<'a>(&'a self, a: Tensor<'a>, ne: &[i64]) -> Result<Tensor<'a>> {
        check_shape("reshape", a.dtype(), ne)?;
        need_contiguous("reshape", &a)?;
        let n: i64 = ne.iter().product();
        if n != a.nelements() {
            return Err(Error::op("reshape", format!("{} has {} elements, {ne:?} has {n}", shape_str(&a), a.nelements())));
        }
        // SAFETY: checked.
        self.op("reshape", |ctx| unsafe {
            match ne.len() {
                1 => sys::ggml_reshape_1d(ctx, a.raw(), ne[0]),
                2 => sys::ggml_reshape_2d(ctx, a.raw(), ne[0], ne[1]),
                3 => sys::ggml_reshape_3d(ctx, a.raw(), ne[0], ne[1], ne[2]),
                _ => sys::ggml_reshape_4d(ctx, a.raw(), ne[0], ne[1], ne[2], ne[3]),
            }
        })
    }

    /// A strided view into `a`'s data (`ggml_view_{1,2,3,4}d`): shape `ne`, row
    /// strides `nb` (bytes, `nb.len() == ne.len() − 1`: the strides of
    /// dimensions 1, 2, 3), starting `offset` bytes in. Every addressed byte
    /// must lie inside `a`.
    ///
    /// # Errors
    /// [`Error::Op`] for a bad shape, a wrong number of strides, an offset or a
    /// stride that is not a multiple of the type's size (its block's bytes for
    /// quantized types: 4 for f32, 34 for q8_0), or a view running past `a`.
    pub fn view<'a>(&'a self, a: Tensor<'a>, ne: &[i64], nb: &[usize], offset: usize) -> Result<Tensor<'a>> {
        check_shape("view", a.dtype(), ne)?;
        if nb.len() + 1 != ne.len() {
            let n = ne.len() - 1;
            let names: Vec<String> = (1..=n).map(|i| format!("nb{i}")).collect();
            let which = if n == 0 { "none".to_string() } else { names.join(", ") };
            return Err(Error::op(
                "view",
                format!("{} dims take {n} strides ({which}; nb0 is the element's size, not given), got {}", ne.len(), nb.len()),
            ));
        }
        let dt = a.dtype();
        let size = dt.type_size();
        if offset % size != 0 {
            return Err(Error::op("view", format!("offset {offset} is not a multiple of the {size}-byte {dt} element (or block)")));
        }
        if let Some(s) = nb.iter().find(|&&s| s % size != 0) {
            return Err(Error::op("view", format!("stride {s} in {nb:?} is not a multiple of the {size}-byte {dt} element (or block)")));
        }
        // Last byte actually addressed, and the contiguous size ggml checks.
        let mut end = offset as u128 + dt.row_size(ne[0]) as u128;
        for (i, &s) in nb.iter().enumerate() {
            end += (ne[i + 1] as u128 - 1) * s as u128;
        }
        let dense = dt.row_size(ne[0]) as u128 * ne[1..].iter().product::<i64>() as u128 + offset as u128;
        let cap = a.nbytes() as u128;
        if end > cap || dense > cap {
            return Err(Error::op(
                "view",
                format!("view {ne:?} strides {nb:?} at offset {offset} runs past the {} bytes of {}", a.nbytes(), shape_str(&a)),
            ));
        }
        // SAFETY: bounds checked above.
        self.op("view", |ctx| unsafe {
            match ne.len() {
                1 => sys::ggml_view_1d(ctx, a.raw(), ne[0], offset),
                2 => sys::ggml_view_2d(ctx, a.raw(), ne[0], ne[1], nb[0], offset),
                3 => sys::ggml_view_3d(ctx, a.raw(), ne[0], ne[1], ne[2], nb[0], nb[1], offset),
                _ => sys::ggml_view_4d(ctx, a.raw(), ne[0], ne[1], ne[2], ne[3], nb[0], nb[1], nb[2], offset),
            }
        })
    }

    /// Reorder dimensions (`ggml_permute`): dimension `i` of `a` becomes dimension
    /// `axes[i]` of the result. `axes` must be a permutation of 0..4.
    ///
    /// # Errors
    /// [`Error::Op`] when `axes` is no permutation, or when a block-quantized
    /// `a` would lose its dimension 0 (its rows are blocks of values).
    pub fn permute<'a>(&'a self, a: Tensor<'a>, axes: [usize; 4]) -> Result<Tensor<'a>> {
        let mut seen = [false; 4];
        for &x in &axes {
            if x >= 4 || seen[x] {
                return Err(Error::op("permute", format!("{axes:?} is not a permutation of 0..4")));
            }
            seen[x] = true;
        }
        if axes[0] != 0 {
            keeps_blocks("permute", &a)?;
        }
        // SAFETY: checked.
        self.op("permute", |ctx| unsafe { sys::ggml_permute(ctx, a.raw(), axes[0] as i32, axes[1] as i32, axes[2] as i32, axes[3] as i32) })
    }

    /// Swap dimensions 0 and 1 (`ggml_transpose`), as a view.
    ///
    /// # Errors
    /// [`Error::Op`] for a block-quantized `a` (its rows are blocks of values:
    /// cast it to f32 first).
    pub fn transpose<'a>(&'a self, a: Tensor<'a>) -> Result<Tensor<'a>> {
        keeps_blocks("transpose", &a)?;
        // SAFETY: always valid.
        self.op("transpose", |ctx| unsafe { sys::ggml_transpose(ctx, a.raw()) })
    }

    /// A contiguous copy of `a` (`ggml_cont`).
    ///
    /// # Errors
    /// [`Error::Op`] for a type the CPU cannot copy (see [`cpy`](Self::cpy)).
    pub fn cont<'a>(&'a self, a: Tensor<'a>) -> Result<Tensor<'a>> {
        check_copy("cont", &a, a.dtype())?;
        // SAFETY: always valid.
        self.op("cont", |ctx| unsafe { sys::ggml_cont(ctx, a.raw()) })
    }

    /// `a` with zeros appended: `pad[i]` more elements along dimension `i`
    /// (`ggml_pad`); differentiable through our patch 0019 (the gradient is the
    /// window of the result's gradient where `a` sits). f32, contiguous `a`.
    ///
    /// # Errors
    /// [`Error::Op`] for another type, a non-contiguous `a`, or a negative or
    /// overflowing size.
    pub fn pad<'a>(&'a self, a: Tensor<'a>, pad: [i64; 4]) -> Result<Tensor<'a>> {
        super::need_dtype("pad", &a, &[crate::DType::F32])?;
        need_contiguous("pad", &a)?;
        let ne = a.ne();
        let mut out = [0i64; 4];
        for i in 0..4 {
            let n = ne.get(i).copied().unwrap_or(1);
            out[i] = match n.checked_add(pad[i]) {
                Some(v) if pad[i] >= 0 && pad[i] <= i32::MAX as i64 => v,
                _ => return Err(Error::op("pad", format!("cannot pad {} by {pad:?}", shape_str(&a)))),
            };
        }
        check_shape("pad", a.dtype(), &out)?;
        let p: Vec<i32> = pad.iter().map(|&x| x as i32).collect();
        // SAFETY: checked.
        self.op("pad", |ctx| unsafe { sys::ggml_pad(ctx, a.raw(), p[0], p[1], p[2], p[3]) })
    }

    /// `a` and `b` joined along dimension `dim` (0..4; `ggml_concat`): the
    /// result has `a.ne[dim] + b.ne[dim]` there and their common size
    /// elsewhere, `a` first. f32; either operand may be a view. A key/value
    /// cache grows this way, one position at a time. No backward.
    ///
    /// # Errors
    /// [`Error::Op`] for another type, `dim` ≥ 4, or sizes that differ outside `dim`.
    pub fn concat<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>, dim: usize) -> Result<Tensor<'a>> {
        super::need_dtype("concat", &a, &[DType::F32])?;
        super::need_dtype("concat", &b, &[DType::F32])?;
        let (na, nb) = (a.ne(), b.ne());
        if dim >= 4 || (0..4).any(|i| i != dim && na[i] != nb[i]) {
            return Err(Error::op("concat", format!("cannot join {} and {} along dimension {dim}", shape_str(&a), shape_str(&b))));
        }
        let mut out = na;
        out[dim] = na[dim].checked_add(nb[dim]).ok_or_else(|| Error::op("concat", "size overflows"))?;
        check_shape("concat", DType::F32, &out)?;
        // SAFETY: checked above; both tensors live in this context.
        self.op("concat", |ctx| unsafe { sys::ggml_concat(ctx, a.raw(), b.raw(), dim as i32) })
    }

    /// A contiguous copy of `a` with shape `ne` (same element count; `ggml_cont_4d`).
    pub fn cont_nd<'a>(&'a self, a: Tensor<'a>, ne: &[i64]) -> Result<Tensor<'a>> {
        check_shape("cont_nd", a.dtype(), ne)?;
        let n: i64 = ne.iter().product();
        if n != a.nelements() {
            return Err(Error::op("cont_nd", format!("{} has {} elements, {ne:?} has {n}", shape_str(&a), a.nelements())));
        }
        let mut full = [1i64; 4];
        full[..ne.len()].copy_from_slice(ne);
        // SAFETY: checked.
        self.op("cont_nd", |ctx| unsafe { sys::ggml_cont_4d(ctx, a.raw(), full[0], full[1], full[2], full[3]) })
    }

    /// `a` converted to `dtype`, same shape (`ggml_cast`, a `GGML_OP_CPY` node):
    /// between f32, f16 and bf16, or from a quantized type to f32 or bf16
    /// (dequantized, as [`DType::to_f32`] does, then rounded to nearest for
    /// bf16; `a` must then be contiguous).
    ///
    /// A frozen weight kept compact (quantized, f16, bf16) enters a product as
    /// `mul_mat(cast(w, F32), x)`, or `cast(w, BF16)` for a bf16 product (toy-rs
    /// patch 0040: CUDA's `mul_mat` and `out_prod` read a bf16 first operand as
    /// it is): the backward (toy-rs patch 0023) casts `w` again for the gradient
    /// of `x`, so the forward's copy is freed after the product instead of
    /// living until the backward.
    ///
    /// # Errors
    /// [`Error::Op`] for another pair of types, or a non-contiguous quantized `a`.
    pub fn cast<'a>(&'a self, a: Tensor<'a>, dtype: DType) -> Result<Tensor<'a>> {
        let float = |t: DType| matches!(t, DType::F32 | DType::F16 | DType::BF16);
        let ok = (float(a.dtype()) && float(dtype))
            || (a.dtype().is_quantized() && a.dtype().can_dequantize() && matches!(dtype, DType::F32 | DType::BF16));
        if !ok {
            return Err(Error::op("cast", format!("cannot convert {} to {dtype}", a.dtype())));
        }
        if a.dtype().is_quantized() {
            need_contiguous("cast", &a)?;
        }
        // SAFETY: checked; ggml_cast makes a new tensor of a's shape.
        self.op("cast", |ctx| unsafe { sys::ggml_cast(ctx, a.raw(), dtype.to_raw()) })
    }

    /// [`cast`](Self::cast), flagged so that the backward reads this copy as it
    /// is (`GGML_TENSOR_FLAG_KEEP`, toy-rs patch 0061) instead of casting again
    /// for the gradient of a product's `x`: one cast a step instead of two, the
    /// copy living from the cast to its last use in the backward. For a frozen
    /// weight's bf16 copy where memory allows; a step's graph makes these
    /// copies first ([`crate::Graph::hoist_param_casts`]), where CUDA runs each
    /// run of one source type (q4_0, q4_1, q5_0, q5_1, q8_0, f16) as one launch.
    ///
    /// # Errors
    /// As [`cast`](Self::cast).
    pub fn cast_kept<'a>(&'a self, a: Tensor<'a>, dtype: DType) -> Result<Tensor<'a>> {
        let t = self.cast(a, dtype)?;
        // SAFETY: a live tensor of this context, made just now.
        unsafe { (*t.raw()).flags |= sys::GGML_TENSOR_FLAG_KEEP as i32 };
        Ok(t)
    }

    /// Copy `a` into `b`'s memory, converting type (`ggml_cpy`); returns a view of `b`.
    /// The types the CPU converts (the backend of last resort): any type to
    /// itself; between f32, f16 and bf16; f32 to i32 and back; f32, f16 or bf16
    /// to a quantized type that has a row quantizer (`q8_0`, `q4_K`, ...); a
    /// quantized type to f32, or to bf16 when both are contiguous.
    ///
    /// # Errors
    /// [`Error::Op`] when the element counts differ or the pair of types is
    /// not one of the above.
    ///
    /// When `b` is a leaf without data (not allocated in a context), the result is
    /// instead a new tensor of `b`'s type and shape holding the converted values
    /// (`ggml_cast`, reshaped), and `b` stays empty: a graph cannot write into a
    /// leaf the scheduler treats as the caller's input (it may place it on another
    /// device than the copy).
    pub fn cpy<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Result<Tensor<'a>> {
        if a.nelements() != b.nelements() {
            return Err(Error::op("cpy", format!("{} and {} differ in element count", shape_str(&a), shape_str(&b))));
        }
        check_copy("cpy", &a, b.dtype())?;
        check_copy_layout(&a, &b)?;
        if b.op() == sys::GGML_OP_NONE && !b.is_view() && !b.is_allocated() {
            // SAFETY: checked; ggml_cast makes a new tensor of a's shape.
            let c = self.op("cpy", |ctx| unsafe { sys::ggml_cast(ctx, a.raw(), b.dtype().to_raw()) })?;
            return if c.ne() == b.ne() { Ok(c) } else { self.reshape(if c.is_contiguous() { c } else { self.cont(c)? }, &b.shape()) };
        }
        // SAFETY: checked.
        self.op("cpy", |ctx| unsafe { sys::ggml_cpy(ctx, a.raw(), b.raw()) })
    }
}

/// Refuse to move dimension 0 of a block-quantized tensor: its values are
/// stored in blocks along that dimension, so the result would have a
/// dimension 0 that splits blocks, which ggml neither checks nor handles.
fn keeps_blocks(op: &'static str, a: &Tensor<'_>) -> Result<()> {
    if a.dtype().block_size() > 1 {
        return Err(Error::op(op, format!("{} is {}, stored in blocks along dimension 0: cast it to f32 first", shape_str(a), a.dtype())));
    }
    Ok(())
}

/// The layouts the CPU's conversions to and from blocks take: whole rows of
/// blocks written in order, and to bf16 (toy-rs patch 0040) contiguous both.
fn check_copy_layout(a: &Tensor<'_>, b: &Tensor<'_>) -> Result<()> {
    let (from, to) = (a.dtype(), b.dtype());
    if from == to {
        return Ok(());
    }
    if to.is_quantized() {
        // ggml quantizes each row of a's dimension 0 in whole blocks, read as contiguous values
        let bs = to.block_size();
        if a.ne()[0] % bs != 0 || a.nb()[0] != from.type_size() || !b.is_contiguous() {
            return Err(Error::op(
                "cpy",
                format!(
                    "{} to {} {}: a copy into {to} quantizes each row of the source (dimension 0) in blocks of {bs}: \
                     the source's rows must be contiguous and a multiple of {bs} long, the destination contiguous",
                    shape_str(a),
                    to,
                    shape_str(b)
                ),
            ));
        }
        return Ok(());
    }
    let fits = if from.is_quantized() && to == DType::BF16 {
        a.is_contiguous() && b.is_contiguous()
    } else if from.is_quantized() {
        b.nb()[0] == to.type_size() && (b.ne()[0] % from.block_size() == 0 || b.is_contiguous())
    } else {
        true
    };
    if !fits {
        return Err(Error::op(
            "cpy",
            format!("{} to {}: this conversion between {from} and {to} needs contiguous tensors", shape_str(a), shape_str(b)),
        ));
    }
    Ok(())
}

/// Whether ggml-cpu's type traits give `t` a `from_float` (ggml-cpu.c's
/// `type_traits_cpu`). Read off ggml-base's reference table, which a build with
/// a loadable CPU module (`--features dynamic`) links where it does not link
/// ggml-cpu: the reference quantizers, less the three ggml-cpu leaves out
/// because they need `ggml_quantize_init` (iq3_xxs, iq3_s, iq2_s), plus q8_K,
/// which only ggml-cpu quantizes.
fn cpu_quantizes(t: DType) -> bool {
    let raw = t.to_raw();
    let needs_init = [sys::GGML_TYPE_IQ3_XXS, sys::GGML_TYPE_IQ3_S, sys::GGML_TYPE_IQ2_S];
    // SAFETY: a valid type; ggml-base's traits table has an entry for each.
    raw == sys::GGML_TYPE_Q8_K || (!needs_init.contains(&raw) && unsafe { (*sys::ggml_get_type_traits(raw)).from_float_ref.is_some() })
}

/// The pairs of types the CPU copies (ggml-cpu's `ggml_compute_forward_dup`,
/// which aborts on any other); the CPU runs what other backends cannot.
fn check_copy(op: &'static str, a: &Tensor<'_>, to: DType) -> Result<()> {
    let from = a.dtype();
    let float = |t: DType| matches!(t, DType::F32 | DType::F16 | DType::BF16);
    let quantizer = to.is_quantized() && cpu_quantizes(to);
    let ok = from == to
        || (float(from) && (float(to) || quantizer))
        || matches!((from, to), (DType::F32, DType::I32) | (DType::I32, DType::F32))
        || (from.is_quantized() && from.can_dequantize() && (to == DType::F32 || (to == DType::BF16 && a.is_contiguous())));
    if !ok {
        return Err(Error::op(op, format!("cannot convert {from} to {to}")));
    }
    Ok(())
}

#[cfg(all(test, not(feature = "dynamic")))]
mod tests {
    use super::*;

    /// The table read off ggml-base agrees with ggml-cpu's own for every type
    /// (a static build links both).
    #[test]
    fn cpu_quantizes_matches_the_cpu_traits() {
        for raw in 0..sys::GGML_TYPE_COUNT {
            let Some(t) = DType::from_raw(raw) else { continue };
            // SAFETY: a valid type number; the CPU traits table has an entry for each.
            let cpu = unsafe { (*sys::ggml_get_type_traits_cpu(raw)).from_float.is_some() };
            if t.is_quantized() {
                assert_eq!(cpu_quantizes(t), cpu, "{t}");
            }
        }
    }
}
