//! Reading GGUF files: validate in Rust, parse with ggml, map the data.

use super::validate::{validate, Header};
use super::{Array, Value};
use crate::context::Tensor;
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::log;
use ggml_sys as sys;
use std::collections::BTreeMap;
use std::ffi::CStr;
use std::path::{Path, PathBuf};

/// A tensor described in a GGUF file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorInfo {
    /// The tensor's name in the file.
    pub name: String,
    /// The element type of its data.
    pub dtype: DType,
    /// Shape in ggml `ne` order (`ne[0]` contiguous), trailing 1s kept to 4 dims.
    pub ne: [i64; 4],
    /// Byte offset from the start of the file.
    pub offset: usize,
    /// Size of the data in bytes.
    pub nbytes: usize,
}

impl TensorInfo {
    /// Number of elements.
    pub fn nelements(&self) -> i64 {
        self.ne.iter().product()
    }

    /// The shape with trailing 1s removed.
    pub fn shape(&self) -> Vec<i64> {
        let n = (1..=4).rev().find(|&i| self.ne[i - 1] != 1).unwrap_or(1);
        self.ne[..n].to_vec()
    }
}

/// An open, validated GGUF file: metadata in order, tensor descriptions, and
/// the file mapped in memory for zero-copy tensor data.
pub struct GgufFile {
    path: PathBuf,
    map: memmap2::Mmap,
    header: Header,
    metadata: Vec<(String, Value)>,
    tensors: Vec<TensorInfo>,
}

impl std::fmt::Debug for GgufFile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "GgufFile({}, {} keys, {} tensors)", self.path.display(), self.metadata.len(), self.tensors.len())
    }
}

/// Metadata pairs in file order and tensor descriptions, as parsed by ggml.
type Parsed = (Vec<(String, Value)>, Vec<TensorInfo>);

fn s(p: *const std::ffi::c_char) -> String {
    // SAFETY: ggml returns NUL-terminated strings owned by the gguf context.
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

impl GgufFile {
    /// Open and validate `path`.
    ///
    /// The file is memory-mapped, not read: tensor data are slices of the
    /// mapping. As with any reader of a mapped file, truncating (or rewriting
    /// in place) the file while the `GgufFile` is open makes later accesses to
    /// the lost pages kill the process with `SIGBUS`; replace such files by
    /// renaming a new one over them (as [`GgufWriter`](super::GgufWriter) does).
    ///
    /// # Errors
    /// [`Error::Io`] when the file cannot be read, [`Error::Gguf`] naming the
    /// problem when it is not a well-formed GGUF file.
    pub fn open(path: impl AsRef<Path>) -> Result<GgufFile> {
        log::init();
        let path = path.as_ref().to_path_buf();
        // Before opening: opening a FIFO would block until someone writes to it.
        let kind = std::fs::metadata(&path).map_err(|e| Error::io(&path, e))?;
        if !kind.is_file() {
            return Err(Error::gguf(&path, "not a regular file"));
        }
        let file = std::fs::File::open(&path).map_err(|e| Error::io(&path, e))?;
        let meta = file.metadata().map_err(|e| Error::io(&path, e))?;
        if !meta.is_file() {
            return Err(Error::gguf(&path, "not a regular file"));
        }
        if meta.len() == 0 {
            return Err(Error::gguf(&path, "empty file, not a GGUF file"));
        }
        // SAFETY: read-only private mapping; a file truncated underneath us is the
        // usual mmap caveat, and every access below is bounds-checked against
        // the length validated here.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| Error::io(&path, e))?;
        Self::from_map(path, map)
    }

    fn from_map(path: PathBuf, map: memmap2::Mmap) -> Result<GgufFile> {
        // A count that runs past the end is most often a file cut short (an interrupted download).
        let header = validate(&map).map_err(|m| {
            Error::gguf(&path, if m.contains("cannot fit in") { format!("{m} (a truncated or incomplete file?)") } else { m })
        })?;
        let params = sys::gguf_init_params { no_alloc: true, ctx: std::ptr::null_mut() };
        // SAFETY: the buffer was validated above; ggml copies what it keeps.
        let ctx = unsafe { sys::gguf_init_from_buffer(map.as_ptr().cast(), map.len(), params) };
        if ctx.is_null() {
            let why = log::take_last_error().unwrap_or_else(|| "rejected by ggml's parser".into());
            return Err(Error::gguf(&path, why));
        }
        let parsed = Self::extract(ctx, &header);
        // SAFETY: we own ctx.
        unsafe { sys::gguf_free(ctx) };
        let (metadata, tensors) = parsed.map_err(|m| Error::gguf(&path, m))?;
        Ok(GgufFile { path, map, header, metadata, tensors })
    }

    fn extract(ctx: *mut sys::gguf_context, header: &Header) -> std::result::Result<Parsed, String> {
        let mut metadata = Vec::new();
        // SAFETY: indices within the counts ggml reports; types checked before each getter.
        unsafe {
            for i in 0..sys::gguf_get_n_kv(ctx) {
                let key = s(sys::gguf_get_key(ctx, i));
                let ty = sys::gguf_get_kv_type(ctx, i);
                let v = if ty == sys::GGUF_TYPE_ARRAY { Value::Array(read_array(ctx, i)?) } else { read_scalar(ctx, i, ty)? };
                metadata.push((key, v));
            }
            let data_offset = sys::gguf_get_data_offset(ctx);
            if data_offset != header.data_offset {
                return Err(format!("data offset disagreement ({data_offset} vs {})", header.data_offset));
            }
            let mut tensors = Vec::new();
            for i in 0..sys::gguf_get_n_tensors(ctx) {
                let ty = sys::gguf_get_tensor_type(ctx, i);
                let dtype = DType::from_raw(ty).ok_or_else(|| format!("tensor {i}: bad type {ty}"))?;
                let ne_ptr = sys::gguf_get_tensor_ne(ctx, i);
                let ne = [*ne_ptr, *ne_ptr.add(1), *ne_ptr.add(2), *ne_ptr.add(3)];
                tensors.push(TensorInfo {
                    name: s(sys::gguf_get_tensor_name(ctx, i)),
                    dtype,
                    ne,
                    offset: data_offset + sys::gguf_get_tensor_offset(ctx, i),
                    nbytes: sys::gguf_get_tensor_size(ctx, i),
                });
            }
            Ok((metadata, tensors))
        }
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// GGUF version (2 or 3).
    pub fn version(&self) -> u32 {
        self.header.version
    }

    /// Data alignment in bytes.
    pub fn alignment(&self) -> usize {
        self.header.alignment
    }

    /// All metadata pairs in file order.
    pub fn metadata(&self) -> &[(String, Value)] {
        &self.metadata
    }

    /// Metadata as a sorted map.
    pub fn metadata_map(&self) -> BTreeMap<&str, &Value> {
        self.metadata.iter().map(|(k, v)| (k.as_str(), v)).collect()
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v)
    }

    /// `key` as an unsigned integer (of any GGUF integer type, if not negative).
    ///
    /// # Errors
    /// [`Error::Gguf`] naming the key when it is absent, or its type and value when
    /// it is not such an integer.
    pub fn get_u64(&self, key: &str) -> Result<u64> {
        self.typed(key, "a non-negative integer", Value::as_u64)
    }

    /// `key` as a float (of any GGUF number type); errors as [`get_u64`](Self::get_u64).
    pub fn get_f64(&self, key: &str) -> Result<f64> {
        self.typed(key, "a number", Value::as_f64)
    }

    /// `key` as a string; errors as [`get_u64`](Self::get_u64).
    pub fn get_str(&self, key: &str) -> Result<&str> {
        self.typed(key, "a string", Value::as_str)
    }

    fn typed<'s, T>(&'s self, key: &str, expected: &str, f: impl Fn(&'s Value) -> Option<T>) -> Result<T> {
        let Some(v) = self.get(key) else { return Err(Error::gguf(&self.path, format!("key {key} is missing"))) };
        f(v).ok_or_else(|| {
            let shown = match v {
                Value::Array(a) if a.len() == 1 => "of 1 element".to_string(),
                Value::Array(a) => format!("of {} elements", a.len()),
                Value::String(s) if s.chars().count() > 40 => format!("{:?}...", s.chars().take(40).collect::<String>()),
                Value::String(s) => format!("{s:?}"),
                v => format!("{v:?}").split(['(', ')']).nth(1).unwrap_or_default().to_string(),
            };
            Error::gguf(&self.path, format!("key {key} is {} {shown}, expected {expected}", v.type_name()))
        })
    }

    /// All tensor descriptions in file order.
    pub fn tensors(&self) -> &[TensorInfo] {
        &self.tensors
    }

    /// The description of tensor `name`.
    pub fn tensor(&self, name: &str) -> Option<&TensorInfo> {
        self.tensors.iter().find(|t| t.name == name)
    }

    /// The raw bytes of tensor `name` (a view into the mapped file).
    pub fn tensor_data(&self, name: &str) -> Result<&[u8]> {
        let t = self.tensor(name).ok_or_else(|| Error::gguf(&self.path, format!("no tensor {name}")))?;
        Ok(&self.map[t.offset..t.offset + t.nbytes])
    }

    /// Tensor `name` converted to f32 (dequantized when quantized).
    pub fn tensor_f32(&self, name: &str) -> Result<Vec<f32>> {
        let t = self.tensor(name).ok_or_else(|| Error::gguf(&self.path, format!("no tensor {name}")))?;
        if !t.dtype.can_dequantize() {
            return Err(Error::gguf(&self.path, format!("tensor {name}: cannot convert {} to f32", t.dtype)));
        }
        t.dtype.to_f32(self.tensor_data(name)?, t.nelements() as usize).map_err(|e| Error::gguf(&self.path, format!("tensor {name}: {e}")))
    }

    /// Copy tensor `name` into `dst` (allocated, contiguous), which must have
    /// its shape (`ne`) and its type, or be f32 (the values converted, as
    /// [`tensor_f32`](Self::tensor_f32)) or bf16 (those f32 values rounded to
    /// nearest even, as ggml's `GGML_FP32_TO_BF16`).
    ///
    /// # Errors
    /// [`Error::Gguf`] when there is no such tensor or the shapes or types
    /// differ as above; the errors of [`Tensor::write_bytes`].
    pub fn load_into(&self, name: &str, dst: Tensor<'_>) -> Result<()> {
        let t = self.tensor(name).ok_or_else(|| Error::gguf(&self.path, format!("no tensor {name}")))?;
        let same_shape = t.shape() == dst.shape();
        if t.dtype == dst.dtype() && same_shape {
            return dst.write_bytes(self.tensor_data(name)?);
        }
        if dst.dtype() == DType::F32 && same_shape {
            return dst.write(&self.tensor_f32(name)?);
        }
        if dst.dtype() == DType::BF16 && same_shape {
            let values = self.tensor_f32(name)?;
            return dst.write(&values.into_iter().map(half::bf16::from_f32).collect::<Vec<_>>());
        }
        Err(Error::gguf(
            &self.path,
            format!("tensor {name} is {} {:?}, destination is {} {:?}", t.dtype, t.shape(), dst.dtype(), dst.shape()),
        ))
    }
}

unsafe fn read_scalar(ctx: *mut sys::gguf_context, i: i64, ty: sys::gguf_type) -> std::result::Result<Value, String> {
    // SAFETY (caller): `i` is a valid key index of type `ty`.
    unsafe {
        Ok(match ty {
            sys::GGUF_TYPE_UINT8 => Value::U8(sys::gguf_get_val_u8(ctx, i)),
            sys::GGUF_TYPE_INT8 => Value::I8(sys::gguf_get_val_i8(ctx, i)),
            sys::GGUF_TYPE_UINT16 => Value::U16(sys::gguf_get_val_u16(ctx, i)),
            sys::GGUF_TYPE_INT16 => Value::I16(sys::gguf_get_val_i16(ctx, i)),
            sys::GGUF_TYPE_UINT32 => Value::U32(sys::gguf_get_val_u32(ctx, i)),
            sys::GGUF_TYPE_INT32 => Value::I32(sys::gguf_get_val_i32(ctx, i)),
            sys::GGUF_TYPE_FLOAT32 => Value::F32(sys::gguf_get_val_f32(ctx, i)),
            sys::GGUF_TYPE_BOOL => Value::Bool(sys::gguf_get_val_bool(ctx, i)),
            sys::GGUF_TYPE_STRING => Value::String(s(sys::gguf_get_val_str(ctx, i))),
            sys::GGUF_TYPE_UINT64 => Value::U64(sys::gguf_get_val_u64(ctx, i)),
            sys::GGUF_TYPE_INT64 => Value::I64(sys::gguf_get_val_i64(ctx, i)),
            sys::GGUF_TYPE_FLOAT64 => Value::F64(sys::gguf_get_val_f64(ctx, i)),
            t => return Err(format!("key {i}: unknown type {t}")),
        })
    }
}

unsafe fn read_array(ctx: *mut sys::gguf_context, i: i64) -> std::result::Result<Array, String> {
    // SAFETY (caller): `i` is a valid array key; data holds n elements of its type.
    unsafe {
        let n = sys::gguf_get_arr_n(ctx, i);
        let ty = sys::gguf_get_arr_type(ctx, i);
        if ty == sys::GGUF_TYPE_STRING {
            return Ok(Array::String((0..n).map(|j| s(sys::gguf_get_arr_str(ctx, i, j))).collect()));
        }
        let p = sys::gguf_get_arr_data(ctx, i);
        fn v<T: Copy>(p: *const std::ffi::c_void, n: usize) -> Vec<T> {
            if n == 0 {
                return Vec::new();
            }
            // SAFETY: ggml stores n contiguous, aligned T values.
            unsafe { std::slice::from_raw_parts(p.cast::<T>(), n) }.to_vec()
        }
        Ok(match ty {
            sys::GGUF_TYPE_UINT8 => Array::U8(v(p, n)),
            sys::GGUF_TYPE_INT8 => Array::I8(v(p, n)),
            sys::GGUF_TYPE_UINT16 => Array::U16(v(p, n)),
            sys::GGUF_TYPE_INT16 => Array::I16(v(p, n)),
            sys::GGUF_TYPE_UINT32 => Array::U32(v(p, n)),
            sys::GGUF_TYPE_INT32 => Array::I32(v(p, n)),
            sys::GGUF_TYPE_FLOAT32 => Array::F32(v(p, n)),
            sys::GGUF_TYPE_BOOL => Array::Bool(v::<u8>(p, n).into_iter().map(|b| b != 0).collect()),
            sys::GGUF_TYPE_UINT64 => Array::U64(v(p, n)),
            sys::GGUF_TYPE_INT64 => Array::I64(v(p, n)),
            sys::GGUF_TYPE_FLOAT64 => Array::F64(v(p, n)),
            t => return Err(format!("key {i}: unknown array type {t}")),
        })
    }
}
