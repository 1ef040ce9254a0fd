//! Element types (`ggml_type`) and the Rust scalars that map onto them.

use crate::error::{Error, Result};
use ggml_sys as sys;

/// A ggml element type. Quantized types are listed so that GGUF files holding
/// them can be described and dequantized; compute graphs here use f32.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DType {
    /// 32-bit IEEE float (4 bytes).
    F32,
    /// 16-bit IEEE half float (2 bytes).
    F16,
    /// bfloat16: the upper half of an f32 (2 bytes).
    BF16,
    /// 64-bit IEEE float (8 bytes).
    F64,
    /// 8-bit signed integer.
    I8,
    /// 16-bit signed integer.
    I16,
    /// 32-bit signed integer (token ids, `get_rows` indices).
    I32,
    /// 64-bit signed integer.
    I64,
    /// 4-bit quantized, blocks of 32 with an f16 scale (18 bytes a block).
    Q4_0,
    /// 4-bit quantized, blocks of 32 with an f16 scale and minimum (20 bytes a block).
    Q4_1,
    /// 5-bit quantized, blocks of 32 with an f16 scale (22 bytes a block).
    Q5_0,
    /// 5-bit quantized, blocks of 32 with an f16 scale and minimum (24 bytes a block).
    Q5_1,
    /// 8-bit quantized, blocks of 32 with an f16 scale (34 bytes a block).
    Q8_0,
    /// 2-bit k-quant, super-blocks of 256 (`q2_K`).
    Q2K,
    /// 3-bit k-quant, super-blocks of 256 (`q3_K`).
    Q3K,
    /// 4-bit k-quant, super-blocks of 256 (`q4_K`).
    Q4K,
    /// 5-bit k-quant, super-blocks of 256 (`q5_K`).
    Q5K,
    /// 6-bit k-quant, super-blocks of 256 (`q6_K`).
    Q6K,
    /// Any other type ggml supports (`iq2_xxs`, `tq1_0`, ...): made only by
    /// [`from_raw`](Self::from_raw), so it always names a type ggml has.
    Other(OtherType),
}

/// The `ggml_type` number of a [`DType::Other`]: one that ggml supports
/// (below `GGML_TYPE_COUNT`, not a removed type), as [`DType::from_raw`] checked.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct OtherType(u32);

impl OtherType {
    /// The `ggml_type` number.
    pub fn get(self) -> u32 {
        self.0
    }
}

impl DType {
    /// The `ggml_type` number.
    pub fn to_raw(self) -> sys::ggml_type {
        match self {
            DType::F32 => sys::GGML_TYPE_F32,
            DType::F16 => sys::GGML_TYPE_F16,
            DType::BF16 => sys::GGML_TYPE_BF16,
            DType::F64 => sys::GGML_TYPE_F64,
            DType::I8 => sys::GGML_TYPE_I8,
            DType::I16 => sys::GGML_TYPE_I16,
            DType::I32 => sys::GGML_TYPE_I32,
            DType::I64 => sys::GGML_TYPE_I64,
            DType::Q4_0 => sys::GGML_TYPE_Q4_0,
            DType::Q4_1 => sys::GGML_TYPE_Q4_1,
            DType::Q5_0 => sys::GGML_TYPE_Q5_0,
            DType::Q5_1 => sys::GGML_TYPE_Q5_1,
            DType::Q8_0 => sys::GGML_TYPE_Q8_0,
            DType::Q2K => sys::GGML_TYPE_Q2_K,
            DType::Q3K => sys::GGML_TYPE_Q3_K,
            DType::Q4K => sys::GGML_TYPE_Q4_K,
            DType::Q5K => sys::GGML_TYPE_Q5_K,
            DType::Q6K => sys::GGML_TYPE_Q6_K,
            DType::Other(n) => n.0,
        }
    }

    /// The type for a `ggml_type` number, or `None` when ggml does not support it
    /// (out of range, or a removed type whose block size is 0).
    pub fn from_raw(t: u32) -> Option<DType> {
        if t >= sys::GGML_TYPE_COUNT {
            return None;
        }
        // SAFETY: `t` is below GGML_TYPE_COUNT, so the traits table has an entry.
        let blck = unsafe { (*sys::ggml_get_type_traits(t)).blck_size };
        if blck == 0 {
            return None;
        }
        Some(match t {
            sys::GGML_TYPE_F32 => DType::F32,
            sys::GGML_TYPE_F16 => DType::F16,
            sys::GGML_TYPE_BF16 => DType::BF16,
            sys::GGML_TYPE_F64 => DType::F64,
            sys::GGML_TYPE_I8 => DType::I8,
            sys::GGML_TYPE_I16 => DType::I16,
            sys::GGML_TYPE_I32 => DType::I32,
            sys::GGML_TYPE_I64 => DType::I64,
            sys::GGML_TYPE_Q4_0 => DType::Q4_0,
            sys::GGML_TYPE_Q4_1 => DType::Q4_1,
            sys::GGML_TYPE_Q5_0 => DType::Q5_0,
            sys::GGML_TYPE_Q5_1 => DType::Q5_1,
            sys::GGML_TYPE_Q8_0 => DType::Q8_0,
            sys::GGML_TYPE_Q2_K => DType::Q2K,
            sys::GGML_TYPE_Q3_K => DType::Q3K,
            sys::GGML_TYPE_Q4_K => DType::Q4K,
            sys::GGML_TYPE_Q5_K => DType::Q5K,
            sys::GGML_TYPE_Q6_K => DType::Q6K,
            n => DType::Other(OtherType(n)),
        })
    }

    /// The type ggml names `name` (`"f32"`, `"q4_1"`, `"q6_K"`; case ignored),
    /// the inverse of [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<DType> {
        (0..sys::GGML_TYPE_COUNT).filter_map(DType::from_raw).find(|t| t.name().eq_ignore_ascii_case(name))
    }

    /// ggml's name for the type (`"f32"`, `"q8_0"`, ...).
    pub fn name(self) -> &'static str {
        // SAFETY: ggml_type_name returns a static string for every valid type.
        unsafe { std::ffi::CStr::from_ptr(sys::ggml_type_name(self.to_raw())) }.to_str().unwrap_or("?")
    }

    /// Elements per block (1 for plain types, 32 for `q8_0`, 256 for k-quants).
    pub fn block_size(self) -> i64 {
        // SAFETY: valid type (constructed through from_raw or a named variant).
        unsafe { sys::ggml_blck_size(self.to_raw()) }
    }

    /// Bytes per block.
    pub fn type_size(self) -> usize {
        // SAFETY: as above.
        unsafe { sys::ggml_type_size(self.to_raw()) }
    }

    /// Bytes needed for one row of `ne0` elements; `ne0` must be a multiple of
    /// [`block_size`](Self::block_size).
    pub fn row_size(self, ne0: i64) -> usize {
        self.type_size() * (ne0 / self.block_size()) as usize
    }

    /// True for block-quantized types.
    pub fn is_quantized(self) -> bool {
        // SAFETY: as above.
        unsafe { sys::ggml_is_quantized(self.to_raw()) }
    }

    /// True when ggml can turn rows of this type into f32 (`to_float` exists).
    pub fn can_dequantize(self) -> bool {
        // SAFETY: as above.
        let tr = unsafe { &*sys::ggml_get_type_traits(self.to_raw()) };
        self == DType::F32 || tr.to_float.is_some()
    }

    /// Convert `n` elements of raw data of this type to f32 through ggml's
    /// `to_float` (dequantization for quantized types).
    ///
    /// # Errors
    /// When the type has no conversion, `n` is not a multiple of the block size,
    /// or `raw` is shorter than `n` elements.
    pub fn to_f32(self, raw: &[u8], n: usize) -> Result<Vec<f32>> {
        crate::log::init();
        let blck = self.block_size() as usize;
        if n % blck != 0 {
            return Err(Error::op("to_f32", format!("{n} elements is not a multiple of the {} block size {blck}", self.name())));
        }
        let need = (n / blck).saturating_mul(self.type_size());
        if raw.len() < need {
            return Err(Error::op("to_f32", format!("{} bytes given, {need} needed", raw.len())));
        }
        if self == DType::F32 {
            return Ok(raw[..need].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect());
        }
        // SAFETY: valid type.
        let tr = unsafe { &*sys::ggml_get_type_traits(self.to_raw()) };
        let f = tr.to_float.ok_or_else(|| Error::op("to_f32", format!("no conversion from {} to f32", self.name())))?;
        let mut out = vec![0f32; n];
        // SAFETY: `raw` holds `need` bytes = n elements of this type; `out` holds n floats.
        unsafe { f(raw.as_ptr().cast(), out.as_mut_ptr(), n as i64) };
        Ok(out)
    }
}

impl DType {
    /// Rows of f32 `values`, `n_per_row` each, written in this type by ggml's
    /// own converters (`ggml_quantize_chunk`: the reference quantizers
    /// llama.cpp's `llama-quantize` runs, without an importance matrix; for
    /// f16 and bf16 a rounding conversion, for f32 a copy). Returns
    /// `values.len() / n_per_row` rows of [`row_size`](Self::row_size) bytes.
    ///
    /// # Errors
    /// When the type has no converter (integer types, `q8_1`), needs an
    /// importance matrix (some IQ types), or `n_per_row` is 0, is not a
    /// multiple of the block size, or does not divide `values.len()`; for a
    /// block-quantized type, when a value is not finite or is beyond f16's
    /// ±65504 (the blocks' scales are f16: ggml would write infinite scales,
    /// or abort, for the IQ types).
    pub fn quantize(self, values: &[f32], n_per_row: usize) -> Result<Vec<u8>> {
        crate::log::init();
        let name = self.name();
        let fail = |why: String| Err(Error::op("quantize", why));
        let convertible = matches!(self, DType::F32 | DType::F16 | DType::BF16) || (self.is_quantized() && self.can_dequantize());
        if !convertible {
            return fail(format!("ggml has no converter from f32 to {name}"));
        }
        // SAFETY: valid type.
        if unsafe { sys::ggml_quantize_requires_imatrix(self.to_raw()) } {
            return fail(format!("{name} needs an importance matrix, which this conversion does not take"));
        }
        let blck = self.block_size() as usize;
        if n_per_row == 0 || n_per_row % blck != 0 || values.len() % n_per_row != 0 || i64::try_from(n_per_row).is_err() {
            return fail(format!("rows of {n_per_row} of {} values do not split into {name} blocks of {blck}", values.len()));
        }
        if self.is_quantized() {
            if let Some((i, v)) = values.iter().enumerate().find(|(_, v)| !v.is_finite() || v.abs() > 65504.0) {
                return fail(format!(
                    "value {v} at index {i} does not fit {name}'s blocks, whose scales are f16 (finite values up to ±65504)"
                ));
            }
        }
        let nrows = values.len() / n_per_row;
        let mut out = vec![0u8; nrows * self.row_size(n_per_row as i64)];
        // SAFETY: `values` holds nrows·n_per_row floats and `out` nrows rows of
        // this type; no importance matrix is read for these types.
        let written = unsafe {
            sys::ggml_quantize_chunk(
                self.to_raw(),
                values.as_ptr(),
                out.as_mut_ptr().cast(),
                0,
                nrows as i64,
                n_per_row as i64,
                std::ptr::null(),
            )
        };
        debug_assert_eq!(written, out.len());
        Ok(out)
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// A Rust scalar that is the element of a plain (non-quantized) ggml type, so
/// tensor data can be copied to and from slices of it.
///
/// Implemented for `f32`, `f64`, `i8`, `i16`, `i32`, `i64`, [`half::f16`] and
/// [`half::bf16`] only. The trait is sealed: [`Tensor::read`](crate::Tensor::read)
/// and [`write`](crate::Tensor::write) copy raw bytes on the promise that
/// `size_of::<T>()` is the byte size of [`DTYPE`](Self::DTYPE) and that every
/// bit pattern is a valid `T`, which an outside type could break.
///
/// ```compile_fail,E0277
/// #[derive(Clone, Copy, Default)]
/// struct Small(u8);
/// impl ggml_rs::Element for Small {
///     const DTYPE: ggml_rs::DType = ggml_rs::DType::F32;
/// }
/// ```
pub trait Element: sealed::Sealed + Copy + Default + 'static {
    /// The matching ggml type.
    const DTYPE: DType;
}

mod sealed {
    /// Only this crate can name (and so implement) this trait, which keeps
    /// [`Element`](super::Element) to the plain scalars below.
    pub trait Sealed {}
}

macro_rules! element {
    ($($t:ty => $d:ident),* $(,)?) => {$(
        impl sealed::Sealed for $t {}
        impl Element for $t {
            const DTYPE: DType = DType::$d;
        }
    )*};
}

element! {
    f32 => F32,
    f64 => F64,
    i32 => I32,
    i8 => I8,
    i16 => I16,
    i64 => I64,
    half::f16 => F16,
    half::bf16 => BF16,
}
