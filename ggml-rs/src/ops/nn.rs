//! Neural-network ops: matrix products, embeddings, norms, RoPE, softmax, GLU, loss.

use super::{need_contiguous, need_dtype, need_rows, same_shape, shape_str};
use crate::context::{Context, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use ggml_sys as sys;

/// How RoPE pairs the dimensions of a head (`mode` of `ggml_rope_ext`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RopeMode {
    /// Mode 0: rotate adjacent pairs `(2i, 2i+1)`; what llama.cpp's `llama`
    /// architecture uses (GPT-J style).
    Normal,
    /// Mode 2 (`GGML_ROPE_TYPE_NEOX`): rotate `(i, i + n_dims/2)` (GPT-NeoX,
    /// Hugging Face `rotate_half`).
    Neox,
}

impl RopeMode {
    fn raw(self) -> i32 {
        match self {
            RopeMode::Normal => sys::GGML_ROPE_TYPE_NORMAL as i32,
            RopeMode::Neox => sys::GGML_ROPE_TYPE_NEOX as i32,
        }
    }
}

impl Context {
    /// Rows of `a` picked by the indices in `ids` (`ggml_get_rows`): an embedding
    /// lookup. `a` is `[ne0, n_rows, ne2, ne3]`, `ids` is i32 `[n, ne2, ne3]`; the
    /// result is f32 `[ne0, n, ne2, ne3]`. The table's rows must be contiguous.
    /// Indices are checked when the graph runs (see [`Graph::compute`](crate::Graph::compute)),
    /// so `ids` must be data the caller writes (a leaf, or a view of one). Its
    /// backward (the gradient of the table) takes a 2-d table `[ne0, n_rows]`
    /// and a 1-d `ids` only.
    ///
    /// # Errors
    /// [`Error::Op`] when `ids` is not i32 or is the result of an op (ggml
    /// aborts on a computed index out of range), the shapes do not match as
    /// above, or the table's type has no conversion to f32.
    pub fn get_rows<'a>(&'a self, a: Tensor<'a>, ids: Tensor<'a>) -> Result<Tensor<'a>> {
        need_dtype("get_rows", &ids, &[DType::I32])?;
        if !ids.is_written_data() {
            return Err(Error::op(
                "get_rows",
                format!("indices {} are the result of an op: they must be data you write (a leaf or a view of one), which is checked against the table before each run", shape_str(&ids)),
            ));
        }
        let (an, bn) = (a.ne(), ids.ne());
        if an[2] != bn[1] || an[3] != bn[2] || bn[3] != 1 {
            return Err(Error::op(
                "get_rows",
                format!("table {} and indices {}: need table ne2 = indices ne1, table ne3 = indices ne2", shape_str(&a), shape_str(&ids)),
            ));
        }
        if !a.dtype().can_dequantize() {
            return Err(Error::op("get_rows", format!("cannot read rows of {}", a.dtype())));
        }
        if a.nb()[0] != a.dtype().type_size() {
            return Err(Error::op(
                "get_rows",
                format!("table {} has strided rows (transposed or permuted dimension 0); use cont first", shape_str(&a)),
            ));
        }
        // SAFETY: checked.
        self.op("get_rows", |ctx| unsafe { sys::ggml_get_rows(ctx, a.raw(), ids.raw()) })
    }

    /// Matrix product contracting over `ne0` (`ggml_mul_mat`): `a` is `[k, m, …]`,
    /// `b` is `[k, n, …]`, the result is f32 `[m, n, …]`: in row-major terms `b·aᵀ`
    /// (an `n × m` matrix). With `a` a weight stored as `rows × cols = out × in`
    /// and `x` a column of `in` values, `mul_mat(a, x)` is `W·x`.
    /// Dimensions 2 and 3 of `a` broadcast over `b`'s (each must divide): slice `i`
    /// of the result reads `a`'s slice `i / (b.ne2 / a.ne2)` (grouped heads share
    /// consecutive slices; [`soft_max_ext`](Self::soft_max_ext)'s mask repeats
    /// instead). `b` must be f32,
    /// or bf16 (an activation stored for bf16 products, toy-rs patch 0042: CUDA reads it as
    /// it is, the CPU widens it; a bf16 `b` made by [`cast`](Self::cast) of an f32 tensor
    /// passes its f32 gradient back through the cast).
    /// Both operands may be permuted views (as in attention) but their rows must be
    /// contiguous (`nb[0]` is the element size): the CPU kernel asserts it.
    pub fn mul_mat<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Result<Tensor<'a>> {
        let (an, bn) = (a.ne(), b.ne());
        if an[0] != bn[0] || bn[2] % an[2] != 0 || bn[3] % an[3] != 0 {
            return Err(Error::op(
                "mul_mat",
                format!("cannot multiply {} by {}: ne0 must match and a's ne2, ne3 must divide b's", shape_str(&a), shape_str(&b)),
            ));
        }
        for (which, t) in [("first", &a), ("second", &b)] {
            if t.nb()[0] != t.dtype().type_size() {
                return Err(Error::op(
                    "mul_mat",
                    format!("{which} operand {} has strided rows (transposed or permuted dimension 0); use cont first", shape_str(t)),
                ));
            }
        }
        if a.nb()[0] > a.nb()[1] {
            return Err(Error::op(
                "mul_mat",
                format!(
                    "first operand {} has a row stride {} below its element stride {} (a transposed or stride-0 view); use cont first",
                    shape_str(&a),
                    a.nb()[1],
                    a.nb()[0]
                ),
            ));
        }
        need_dtype("mul_mat", &b, &[DType::F32, DType::BF16])?;
        if !a.dtype().can_dequantize() {
            return Err(Error::op("mul_mat", format!("unsupported weight type {}", a.dtype())));
        }
        // SAFETY: checked.
        self.op("mul_mat", |ctx| unsafe { sys::ggml_mul_mat(ctx, a.raw(), b.raw()) })
    }

    /// [`mul_mat`](Self::mul_mat) with a bf16 result (toy-rs patch 0041,
    /// `ggml_mul_mat_bf16`): bf16 products summed in f32 and rounded once, what
    /// PyTorch's autocast `linear` writes, e.g. a head's `[V, N]` logits in half
    /// the memory. `a` `[k, m]` f32 or bf16, `b` `[k, n]` f32 or bf16 (a product
    /// input cast to bf16; patch 0048), both contiguous matrices; the result is
    /// bf16 `[m, n]` and its gradient is bf16 too where the next op's backward
    /// writes one (the loss from ids, a swiglu of two such products: patch
    /// 0048), else f32. CUDA only: a graph holding it refuses to allocate on
    /// the CPU.
    ///
    /// # Errors
    /// [`Error::Op`] on other types, shapes or layouts.
    pub fn mul_mat_bf16<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Result<Tensor<'a>> {
        need_dtype("mul_mat_bf16", &a, &[DType::F32, DType::BF16])?;
        need_dtype("mul_mat_bf16", &b, &[DType::F32, DType::BF16])?;
        let (an, bn) = (a.ne(), b.ne());
        if an[0] != bn[0] || an[2..] != [1, 1] || bn[2..] != [1, 1] {
            return Err(Error::op(
                "mul_mat_bf16",
                format!("cannot multiply {} by {}: two matrices of equal ne0", shape_str(&a), shape_str(&b)),
            ));
        }
        for t in [&a, &b] {
            need_contiguous("mul_mat_bf16", t)?;
        }
        // SAFETY: checked.
        self.op("mul_mat_bf16", |ctx| unsafe { sys::ggml_mul_mat_bf16(ctx, a.raw(), b.raw()) })
    }

    /// Outer product summed over `ne1` (`ggml_out_prod`): `a` `[m, k, …]`, `b`
    /// `[n, k, …]` → `[m, n, …]`; what `mul_mat`'s backward uses. `a` f32, or bf16
    /// (a frozen weight cast for a bf16 product, toy-rs patch 0040); `b` f32.
    pub fn out_prod<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Result<Tensor<'a>> {
        let (an, bn) = (a.ne(), b.ne());
        if an[1] != bn[1] || bn[2] % an[2] != 0 || bn[3] % an[3] != 0 {
            return Err(Error::op("out_prod", format!("cannot form the outer product of {} and {}", shape_str(&a), shape_str(&b))));
        }
        need_dtype("out_prod", &a, &[DType::F32, DType::BF16])?;
        if a.nb()[0] != a.dtype().type_size() {
            return Err(Error::op(
                "out_prod",
                format!("first operand {} has strided rows (transposed or permuted dimension 0); use cont first", shape_str(&a)),
            ));
        }
        need_dtype("out_prod", &b, &[DType::F32])?;
        // SAFETY: checked.
        self.op("out_prod", |ctx| unsafe { sys::ggml_out_prod(ctx, a.raw(), b.raw()) })
    }

    /// RMSNorm over `ne0` without gain: `x / √(mean(x²) + eps)` (Zhang & Sennrich
    /// 2019; `ggml_rms_norm`). f32 with contiguous rows.
    pub fn rms_norm<'a>(&'a self, a: Tensor<'a>, eps: f32) -> Result<Tensor<'a>> {
        check_norm("rms_norm", &a, eps)?;
        // SAFETY: checked.
        self.op("rms_norm", |ctx| unsafe { sys::ggml_rms_norm(ctx, a.raw(), eps) })
    }

    /// RMSNorm over `ne0` with a gain, `g ⊙ x / √(mean(x²) + eps)`, as one node
    /// (`ggml_rms_norm_gain`, our patch 0036): `a` f32 `[d, …]` with contiguous
    /// rows, `g` f32 `[d]`. The same values as [`Context::rms_norm`] then
    /// [`Context::mul`], but a backward graph keeps only `a` and the result: the
    /// gain's gradient recomputes the norm instead of keeping `[d, …]` more.
    ///
    /// # Errors
    /// [`Error::Op`] for another type, strided rows, a `g` of another shape, or
    /// an `eps` that is negative or not finite.
    pub fn rms_norm_gain<'a>(&'a self, a: Tensor<'a>, g: Tensor<'a>, eps: f32) -> Result<Tensor<'a>> {
        check_norm("rms_norm_gain", &a, eps)?;
        check_affine("rms_norm_gain", "gain", &a, &g)?;
        // SAFETY: checked.
        self.op("rms_norm_gain", |ctx| unsafe { sys::ggml_rms_norm_gain(ctx, a.raw(), g.raw(), eps) })
    }

    /// LayerNorm over `ne0` with gain and bias, `g ⊙ (x − mean) / √(var + eps) + b`
    /// (Ba et al. 2016), as one node (`ggml_norm_gain_bias`, our patch 0036): `a`
    /// f32 `[d, …]` with contiguous rows, `g` and `b` f32 `[d]`. The same values
    /// as [`Context::norm`], [`Context::mul`] and [`Context::add`], but a backward
    /// graph keeps only `a` and the result (the gain's gradient recomputes the norm).
    ///
    /// # Errors
    /// [`Error::Op`] for another type, strided rows, a `g` or `b` of another
    /// shape, or an `eps` that is negative or not finite.
    pub fn norm_gain_bias<'a>(&'a self, a: Tensor<'a>, g: Tensor<'a>, b: Tensor<'a>, eps: f32) -> Result<Tensor<'a>> {
        check_norm("norm_gain_bias", &a, eps)?;
        check_affine("norm_gain_bias", "gain", &a, &g)?;
        check_affine("norm_gain_bias", "bias", &a, &b)?;
        // SAFETY: checked.
        self.op("norm_gain_bias", |ctx| unsafe { sys::ggml_norm_gain_bias(ctx, a.raw(), g.raw(), b.raw(), eps) })
    }

    /// LayerNorm over `ne0` without gain or bias: `(x − mean) / √(var + eps)` (Ba et
    /// al. 2016; `ggml_norm`). f32 with contiguous rows. Its backward comes from
    /// our ggml patch (`patches/`).
    pub fn norm<'a>(&'a self, a: Tensor<'a>, eps: f32) -> Result<Tensor<'a>> {
        check_norm("norm", &a, eps)?;
        // SAFETY: checked.
        self.op("norm", |ctx| unsafe { sys::ggml_norm(ctx, a.raw(), eps) })
    }

    /// Rotary position embedding (Su et al. 2021; `ggml_rope_ext` without
    /// frequency factors or context extension). `a` is `[head_dim, n_head, n_pos, n_seq]`
    /// f32 or bf16 (see below), `pos` an i32 vector of `n_pos` positions; the first `n_dims` (even, ≤
    /// head_dim) dimensions of each head rotate by `pos·base^(−2i/n_dims)`.
    /// A bf16 `a` (a `mul_mat_bf16` product, patch 0076) gives a bf16 result, in
    /// the normal and NeoX modes on CUDA only; the CPU refuses the graph.
    pub fn rope_ext<'a>(&'a self, a: Tensor<'a>, pos: Tensor<'a>, n_dims: usize, mode: RopeMode, freq_base: f32) -> Result<Tensor<'a>> {
        need_dtype("rope_ext", &a, &[DType::F32, DType::BF16])?;
        need_dtype("rope_ext", &pos, &[DType::I32])?;
        need_rows("rope_ext", &a)?;
        let (an, pn) = (a.ne(), pos.ne());
        if pn[1] != 1 || pn[2] != 1 || pn[3] != 1 || pn[0] != an[2] {
            return Err(Error::op("rope_ext", format!("positions {} must be a vector of a's ne2 = {} values", shape_str(&pos), an[2])));
        }
        if n_dims == 0 || n_dims % 2 != 0 || n_dims as i64 > an[0] {
            return Err(Error::op("rope_ext", format!("n_dims = {n_dims} must be even, ≥ 2 and ≤ ne0 = {}", an[0])));
        }
        if !(freq_base.is_finite() && freq_base > 0.0) {
            return Err(Error::op("rope_ext", format!("freq_base = {freq_base} must be positive")));
        }
        // SAFETY: checked; NULL freq factors; no YaRN extension (ext_factor 0).
        self.op("rope_ext", |ctx| unsafe {
            sys::ggml_rope_ext(
                ctx,
                a.raw(),
                pos.raw(),
                std::ptr::null_mut(),
                n_dims as i32,
                mode.raw(),
                0,
                freq_base,
                1.0,
                0.0,
                1.0,
                32.0,
                1.0,
            )
        })
    }

    /// `softmax(scale·a + mask)` over `ne0` (`ggml_soft_max_ext`, no ALiBi). `a`
    /// contiguous f32 `[n_kv, n_q, n_head, n_seq]`; `mask` (f32 or f16, contiguous)
    /// is `[n_kv, ≥ n_q, d2, d3]` with `d2`, `d3` dividing `a`'s, e.g. a causal mask
    /// `[n_kv, n_q]` of `0` and `−∞` shared by every head and sequence. Head `h`
    /// reads mask slice `h % d2` (and sequence `s` slice `s % d3`): ggml's
    /// broadcast, not [`mul_mat`](Self::mul_mat)'s. `scale` must be finite.
    pub fn soft_max_ext<'a>(&'a self, a: Tensor<'a>, mask: Option<Tensor<'a>>, scale: f32) -> Result<Tensor<'a>> {
        if !scale.is_finite() {
            return Err(Error::op("soft_max_ext", format!("scale {scale} is not finite")));
        }
        need_dtype("soft_max_ext", &a, &[DType::F32])?;
        need_contiguous("soft_max_ext", &a)?;
        let mask_ptr = match mask {
            Some(m) => {
                need_dtype("soft_max_ext", &m, &[DType::F32, DType::F16])?;
                need_contiguous("soft_max_ext", &m)?;
                let (an, mn) = (a.ne(), m.ne());
                if mn[0] != an[0] || mn[1] < an[1] || an[2] % mn[2] != 0 || an[3] % mn[3] != 0 {
                    return Err(Error::op("soft_max_ext", format!("mask {} does not fit scores {}", shape_str(&m), shape_str(&a))));
                }
                m.raw()
            }
            None => std::ptr::null_mut(),
        };
        // SAFETY: checked.
        self.op("soft_max_ext", |ctx| unsafe { sys::ggml_soft_max_ext(ctx, a.raw(), mask_ptr, scale, 0.0) })
    }

    /// Set elements above the diagonal shifted by `n_past` to −∞ (`ggml_diag_mask_inf`).
    ///
    /// # Errors
    /// [`Error::Op`] when `a` is not a contiguous f32 tensor or `n_past` is
    /// above `i32::MAX` (ggml's type for it).
    pub fn diag_mask_inf<'a>(&'a self, a: Tensor<'a>, n_past: usize) -> Result<Tensor<'a>> {
        need_dtype("diag_mask_inf", &a, &[DType::F32])?;
        need_contiguous("diag_mask_inf", &a)?;
        if n_past > i32::MAX as usize {
            return Err(Error::op("diag_mask_inf", format!("n_past = {n_past} is above {}", i32::MAX)));
        }
        // SAFETY: checked.
        self.op("diag_mask_inf", |ctx| unsafe { sys::ggml_diag_mask_inf(ctx, a.raw(), n_past as i32) })
    }

    /// SwiGLU with separate operands: `silu(a) ⊙ b` (Shazeer 2020; `ggml_swiglu_split`).
    /// Same shape and type (f32, f16 or bf16), contiguous; the result has that shape
    /// and type. With bf16 `a` and `b` that are [`cast`](Context::cast)s of f32
    /// tensors (autocast), the backward differentiates through
    /// [`swiglu_back`](Context::swiglu_back) (patch 0044) and a product may read the
    /// bf16 result; the gradients reaching the f32 tensors are f32.
    pub fn swiglu_split<'a>(&'a self, a: Tensor<'a>, b: Tensor<'a>) -> Result<Tensor<'a>> {
        if !same_shape(&a, &b) || a.dtype() != b.dtype() {
            return Err(Error::op(
                "swiglu_split",
                format!("operands differ: {} {} and {} {}", shape_str(&a), a.dtype(), shape_str(&b), b.dtype()),
            ));
        }
        need_dtype("swiglu_split", &a, &[DType::F32, DType::F16, DType::BF16])?;
        for t in [&a, &b] {
            // ggml_is_contiguous_1: rows contiguous and dims ≥ 2 packed.
            need_contiguous("swiglu_split", t)?;
        }
        // SAFETY: checked.
        self.op("swiglu_split", |ctx| unsafe { sys::ggml_swiglu_split(ctx, a.raw(), b.raw()) })
    }

    /// The gradient of [`gelu`](Context::gelu) (tanh form): `dy ⊙ gelu'(x)` with
    /// `t = tanh(√(2/π)(x + 0.044715x³))`, `gelu'(x) = ½(1 + t) + ½x(1 − t²)√(2/π)(1 + 3·0.044715x²)`
    /// (`ggml_gelu_back`, our patch 0010; what the backward of `gelu` uses).
    /// `dy` f32 and `x` f32 or bf16 (patch 0045), contiguous, of the same shape; the
    /// result is f32.
    pub fn gelu_back<'a>(&'a self, dy: Tensor<'a>, x: Tensor<'a>) -> Result<Tensor<'a>> {
        if !same_shape(&dy, &x) {
            return Err(Error::op("gelu_back", format!("dy {} and x {} differ in shape", shape_str(&dy), shape_str(&x))));
        }
        need_dtype("gelu_back", &dy, &[DType::F32])?;
        need_dtype("gelu_back", &x, &[DType::F32, DType::BF16])?;
        for t in [&dy, &x] {
            need_contiguous("gelu_back", t)?;
        }
        // SAFETY: checked.
        self.op("gelu_back", |ctx| unsafe { sys::ggml_gelu_back(ctx, dy.raw(), x.raw()) })
    }

    /// Both gradients of [`swiglu_split`](Context::swiglu_split), `y = silu(a) ⊙ b`, in
    /// one pass (`ggml_swiglu_back`, our patch 0044): with `s = σ(a)`,
    /// `da = dy ⊙ b ⊙ s ⊙ (1 + a(1 − s))` and `db = dy ⊙ a ⊙ s`. `dy` f32, `a` and `b`
    /// f32 or bf16 (one type), all contiguous of one shape `[n0, n1, n2, n3]`; the
    /// result is f32 `[n0, n1, n2, 2·n3]`, `da` in its first half and `db` in its second.
    pub fn swiglu_back<'a>(&'a self, dy: Tensor<'a>, a: Tensor<'a>, b: Tensor<'a>) -> Result<Tensor<'a>> {
        if !same_shape(&dy, &a) || !same_shape(&a, &b) || a.dtype() != b.dtype() {
            return Err(Error::op(
                "swiglu_back",
                format!("dy {}, a {} {} and b {} {} differ", shape_str(&dy), shape_str(&a), a.dtype(), shape_str(&b), b.dtype()),
            ));
        }
        need_dtype("swiglu_back", &dy, &[DType::F32])?;
        need_dtype("swiglu_back", &a, &[DType::F32, DType::BF16])?;
        for t in [&dy, &a, &b] {
            need_contiguous("swiglu_back", t)?;
        }
        // SAFETY: checked.
        self.op("swiglu_back", |ctx| unsafe { sys::ggml_swiglu_back(ctx, dy.raw(), a.raw(), b.raw()) })
    }

    /// Cross-entropy of softmax(`logits`) against the distributions `labels`, over
    /// `ne0`, averaged over the rows: `−(1/rows)·Σ labels·log_softmax(logits)`
    /// (`ggml_cross_entropy_loss`). Both contiguous f32 of the same shape
    /// `[n_vocab, rows]`; the result is a one-element f32 tensor. Only `logits`
    /// receives a gradient: `labels` are data (a backward through them is refused).
    pub fn cross_entropy_loss<'a>(&'a self, logits: Tensor<'a>, labels: Tensor<'a>) -> Result<Tensor<'a>> {
        if !same_shape(&logits, &labels) {
            return Err(Error::op(
                "cross_entropy_loss",
                format!("logits {} and labels {} differ in shape", shape_str(&logits), shape_str(&labels)),
            ));
        }
        for t in [&logits, &labels] {
            need_dtype("cross_entropy_loss", t, &[DType::F32])?;
            need_contiguous("cross_entropy_loss", t)?;
        }
        // SAFETY: checked.
        self.op("cross_entropy_loss", |ctx| unsafe { sys::ggml_cross_entropy_loss(ctx, logits.raw(), labels.raw()) })
    }

    /// Causal self-attention in one op (toy patch 0020, `ggml_attn_causal`;
    /// FlashAttention-2, Dao 2023): `softmax(scale·q·kᵀ + causal mask)·v`
    /// without storing the `[T, T]` scores; the backward recomputes them from
    /// each row's log-sum-exp.
    ///
    /// `q`: f32 `[d_head, n_head, T, B]`; `k`, `v`: f32 `[d_head, n_kv, T, B]`,
    /// `n_kv` dividing `n_head` (query head `h` reads kv head
    /// `h / (n_head/n_kv)`, llama.cpp's convention). Rows (`ne0`) contiguous,
    /// other strides free. Or all three bf16 (patch 0043: casts of f32
    /// tensors, whose gradients stay f32), on CUDA only, for `d_head` 64 or
    /// 128 (its flash kernels): [`Graph::allocate`](crate::Graph::allocate)
    /// refuses such a node elsewhere. Returns the output `[d_head, n_head, T, B]`
    /// (contiguous: a view of the op's packed result): f32, or bf16 for bf16
    /// inputs (patch 0073, as PyTorch's SDPA under autocast; its gradient
    /// stays f32; `TOY_NO_0073`, read by ggml as the op is made, keeps it f32).
    /// CPU and CUDA kernels; on other backends the scheduler runs it on the CPU.
    ///
    /// # Errors
    /// [`Error::Op`] on other types, mixed types, strided rows, or shapes that
    /// do not match.
    pub fn attn_causal<'a>(&'a self, q: Tensor<'a>, k: Tensor<'a>, v: Tensor<'a>, scale: f32) -> Result<Tensor<'a>> {
        for t in [&q, &k, &v] {
            need_dtype("attn_causal", t, &[DType::F32, DType::BF16])?;
            if t.dtype() != q.dtype() {
                return Err(Error::op("attn_causal", format!("q is {} and another operand {}", q.dtype(), t.dtype())));
            }
            if t.nb()[0] != t.dtype().type_size() {
                return Err(Error::op("attn_causal", format!("{} has strided rows", shape_str(t))));
            }
        }
        let (qn, kn) = (q.ne(), k.ne());
        if !same_shape(&k, &v) || kn[0] != qn[0] || kn[2] != qn[2] || kn[3] != qn[3] || kn[1] == 0 || qn[1] % kn[1] != 0 {
            return Err(Error::op(
                "attn_causal",
                format!("q {}, k {} and v {} do not make grouped attention", shape_str(&q), shape_str(&k), shape_str(&v)),
            ));
        }
        if !scale.is_finite() {
            return Err(Error::op("attn_causal", format!("scale {scale} is not finite")));
        }
        // SAFETY: checked.
        let packed = self.op("attn_causal", |ctx| unsafe { sys::ggml_attn_causal(ctx, q.raw(), k.raw(), v.raw(), scale) })?;
        let row = qn[0] as usize * packed.dtype().type_size();
        let nb = [row, row * qn[1] as usize, row * (qn[1] * qn[2]) as usize];
        self.view(packed, &qn, &nb, 0)
    }

    /// Mean cross-entropy of softmax(`logits`) against class ids `targets`
    /// (toy patch 0017, `ggml_cross_entropy_loss_ids`): with `N` the rows whose
    /// target lies in `[0, n_vocab)`, `(1/N)·Σ (logsumexp(row) − row[target])`.
    /// Rows whose target is outside that range (−1 for a masked token) are
    /// ignored: they count neither in the sum nor in `N`, as with PyTorch's
    /// `F.cross_entropy(..., ignore_index=-1)`, except that a batch with no
    /// counted row gives 0, not NaN. No dense label tensor is made, on the host
    /// or the device, and the backward writes the logits' gradient
    /// `(softmax − onehot)·dloss/N` in one pass (in place over the logits when
    /// nothing else reads them).
    ///
    /// `logits`: contiguous f32 `[n_vocab, rows, ...]`, or bf16 on CUDA (patch
    /// 0041: read into f32, the gradient bf16); `targets`: contiguous i32 with
    /// one element per row. The result is a one-element f32 tensor.
    ///
    /// # Errors
    /// [`Error::Op`] on other types, a non-contiguous input, or a count of
    /// targets other than the number of rows.
    pub fn cross_entropy_loss_ids<'a>(&'a self, logits: Tensor<'a>, targets: Tensor<'a>) -> Result<Tensor<'a>> {
        self.cross_entropy_loss_ids_ext(logits, targets, logits.ne()[0])
    }

    /// [`cross_entropy_loss_ids`](Self::cross_entropy_loss_ids) over the first
    /// `n_classes` columns of `logits` `[ne0, rows]`: the columns from
    /// `n_classes` on are padding (a vocabulary rounded up to a multiple of 128
    /// so that the products around the head run aligned cuBLAS kernels). They
    /// take no part in the softmax and get a zero gradient; targets must lie
    /// below `n_classes` to count.
    ///
    /// # Errors
    /// As [`cross_entropy_loss_ids`](Self::cross_entropy_loss_ids), and
    /// [`Error::Op`] unless `0 < n_classes <= ne0`.
    pub fn cross_entropy_loss_ids_ext<'a>(&'a self, logits: Tensor<'a>, targets: Tensor<'a>, n_classes: i64) -> Result<Tensor<'a>> {
        if n_classes <= 0 || n_classes > logits.ne()[0] {
            return Err(Error::op("cross_entropy_loss_ids", format!("{n_classes} classes for logits {}", shape_str(&logits))));
        }
        need_dtype("cross_entropy_loss_ids", &logits, &[DType::F32, DType::BF16])?;
        need_dtype("cross_entropy_loss_ids", &targets, &[DType::I32])?;
        for t in [&logits, &targets] {
            need_contiguous("cross_entropy_loss_ids", t)?;
        }
        let rows = logits.nelements() / logits.ne()[0].max(1);
        if targets.nelements() != rows || logits.ne()[0] > i32::MAX as i64 {
            return Err(Error::op(
                "cross_entropy_loss_ids",
                format!("targets {} do not give one id per row of logits {}", shape_str(&targets), shape_str(&logits)),
            ));
        }
        // SAFETY: checked.
        self.op("cross_entropy_loss_ids", |ctx| unsafe { sys::ggml_cross_entropy_loss_ids(ctx, logits.raw(), targets.raw(), n_classes) })
    }
}

/// A norm's gain or bias: f32, contiguous, `[ne0 of a]`.
fn check_affine(op: &'static str, what: &str, a: &Tensor<'_>, g: &Tensor<'_>) -> Result<()> {
    need_dtype(op, g, &[DType::F32])?;
    if g.ne() != [a.ne()[0], 1, 1, 1] || !g.is_contiguous() {
        return Err(Error::op(op, format!("{what} {} must be contiguous [{}] for {}", shape_str(g), a.ne()[0], shape_str(a))));
    }
    Ok(())
}

fn check_norm(op: &'static str, a: &Tensor<'_>, eps: f32) -> Result<()> {
    need_dtype(op, a, &[DType::F32])?;
    need_rows(op, a)?;
    if !(eps.is_finite() && eps >= 0.0) {
        return Err(Error::op(op, format!("eps = {eps} must be finite and ≥ 0")));
    }
    Ok(())
}
