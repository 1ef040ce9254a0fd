//! Writing GGUF files through ggml's gguf API, atomically.

use super::{Array, Value};
use crate::context::{check_shape, Tensor};
use crate::dtype::{DType, Element};
use crate::error::{Error, Result};
use crate::log;
use ggml_sys as sys;
use std::collections::HashSet;
use std::ffi::CString;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The longest string (bytes) and array (elements) ggml's reader takes
/// (gguf.cpp's `GGUF_MAX_STRING_LENGTH`, `GGUF_MAX_ARRAY_ELEMENTS`): a file
/// holding a longer one could not be read back.
const MAX_READ: usize = 1 << 30;

/// Collects metadata and tensors, then writes a GGUF v3 file.
///
/// Tensor data are copied into the writer when added, so tensors of any
/// backend (GPU included) can be written after their graph is gone.
pub struct GgufWriter {
    ctx: *mut sys::gguf_context,
    data: Vec<Vec<u8>>,
    names: HashSet<String>,
}

// SAFETY: the writer owns its gguf context (plain heap memory, no thread
// affinity, freed on drop); `&mut self` methods change it, so moving the
// writer to another thread is safe. Not `Sync`: ggml's gguf calls are not
// documented as safe to run side by side on one context.
unsafe impl Send for GgufWriter {}

impl Default for GgufWriter {
    fn default() -> Self {
        Self::new()
    }
}

fn c(s: &str, what: &str) -> Result<CString> {
    CString::new(s).map_err(|_| Error::gguf(PathBuf::new(), format!("{what} {s:?} contains a NUL byte")))
}

impl GgufWriter {
    /// An empty writer.
    pub fn new() -> GgufWriter {
        log::init();
        // SAFETY: plain constructors.
        let ctx = unsafe { sys::gguf_init_empty() };
        GgufWriter { ctx, data: Vec::new(), names: HashSet::new() }
    }

    /// Set metadata `key` to `value`. A key set again takes the new value and
    /// moves to the end of the file's key order (as ggml's `gguf_set_val_*`).
    ///
    /// # Errors
    /// Empty keys, keys or strings with NUL bytes, strings or arrays longer than
    /// ggml's reader takes (2³⁰ bytes or elements), and `general.alignment` other
    /// than the u32 32: ggml's writer lays tensor data out with the default
    /// alignment whatever that key says, so any other value would describe the
    /// file wrongly (readers, ours and ggml's, would refuse it).
    pub fn set(&mut self, key: &str, value: impl Into<Value>) -> Result<()> {
        let value = value.into();
        if key.is_empty() {
            return Err(Error::gguf(PathBuf::new(), "empty metadata key"));
        }
        if key == "general.alignment" && value != Value::U32(super::DEFAULT_ALIGNMENT as u32) {
            return Err(Error::gguf(
                PathBuf::new(),
                format!(
                    "general.alignment {value:?}: only the u32 {} is supported (ggml's writer always aligns tensor data to it)",
                    super::DEFAULT_ALIGNMENT
                ),
            ));
        }
        let long = match &value {
            Value::String(v) => v.len() > MAX_READ,
            Value::Array(Array::String(v)) => v.len() > MAX_READ || v.iter().any(|s| s.len() > MAX_READ),
            Value::Array(a) => a.len() > MAX_READ,
            _ => false,
        };
        if long || key.len() > MAX_READ {
            return Err(Error::gguf(
                PathBuf::new(),
                format!("metadata {key:.64?}: strings and arrays are read back up to {MAX_READ} bytes or elements (ggml's reader)"),
            ));
        }
        let k = c(key, "key")?;
        let (ctx, kp) = (self.ctx, k.as_ptr());
        // SAFETY: valid context and C strings; array data outlive the calls (ggml copies).
        unsafe {
            match value {
                Value::U8(v) => sys::gguf_set_val_u8(ctx, kp, v),
                Value::I8(v) => sys::gguf_set_val_i8(ctx, kp, v),
                Value::U16(v) => sys::gguf_set_val_u16(ctx, kp, v),
                Value::I16(v) => sys::gguf_set_val_i16(ctx, kp, v),
                Value::U32(v) => sys::gguf_set_val_u32(ctx, kp, v),
                Value::I32(v) => sys::gguf_set_val_i32(ctx, kp, v),
                Value::F32(v) => sys::gguf_set_val_f32(ctx, kp, v),
                Value::Bool(v) => sys::gguf_set_val_bool(ctx, kp, v),
                Value::String(v) => {
                    let cv = c(&v, "string value")?;
                    sys::gguf_set_val_str(ctx, kp, cv.as_ptr())
                }
                Value::U64(v) => sys::gguf_set_val_u64(ctx, kp, v),
                Value::I64(v) => sys::gguf_set_val_i64(ctx, kp, v),
                Value::F64(v) => sys::gguf_set_val_f64(ctx, kp, v),
                Value::Array(a) => self.set_array(kp, a)?,
            }
        }
        Ok(())
    }

    unsafe fn set_array(&mut self, kp: *const std::ffi::c_char, a: Array) -> Result<()> {
        fn raw<T>(ctx: *mut sys::gguf_context, kp: *const std::ffi::c_char, ty: sys::gguf_type, v: &[T]) {
            // SAFETY: v holds v.len() elements of the GGUF type `ty`.
            unsafe { sys::gguf_set_arr_data(ctx, kp, ty, v.as_ptr().cast(), v.len()) }
        }
        let ctx = self.ctx;
        match a {
            Array::U8(v) => raw(ctx, kp, sys::GGUF_TYPE_UINT8, &v),
            Array::I8(v) => raw(ctx, kp, sys::GGUF_TYPE_INT8, &v),
            Array::U16(v) => raw(ctx, kp, sys::GGUF_TYPE_UINT16, &v),
            Array::I16(v) => raw(ctx, kp, sys::GGUF_TYPE_INT16, &v),
            Array::U32(v) => raw(ctx, kp, sys::GGUF_TYPE_UINT32, &v),
            Array::I32(v) => raw(ctx, kp, sys::GGUF_TYPE_INT32, &v),
            Array::F32(v) => raw(ctx, kp, sys::GGUF_TYPE_FLOAT32, &v),
            Array::Bool(v) => raw(ctx, kp, sys::GGUF_TYPE_BOOL, &v.iter().map(|&b| b as u8).collect::<Vec<u8>>()),
            Array::U64(v) => raw(ctx, kp, sys::GGUF_TYPE_UINT64, &v),
            Array::I64(v) => raw(ctx, kp, sys::GGUF_TYPE_INT64, &v),
            Array::F64(v) => raw(ctx, kp, sys::GGUF_TYPE_FLOAT64, &v),
            Array::String(v) => {
                let cs: Vec<CString> = v.iter().map(|s| c(s, "string value")).collect::<Result<_>>()?;
                let mut ptrs: Vec<*const std::ffi::c_char> = cs.iter().map(|s| s.as_ptr()).collect();
                // SAFETY: ptrs holds cs.len() valid C strings that outlive the call.
                unsafe { sys::gguf_set_arr_str(ctx, kp, ptrs.as_mut_ptr(), ptrs.len()) }
            }
        }
        Ok(())
    }

    fn check_name(&self, name: &str) -> Result<()> {
        if name.is_empty() || name.len() >= sys::GGML_MAX_NAME as usize {
            return Err(Error::gguf(PathBuf::new(), format!("tensor name {name:?} must have 1 to 63 bytes")));
        }
        if self.names.contains(name) {
            return Err(Error::gguf(PathBuf::new(), format!("duplicate tensor name {name:?}")));
        }
        Ok(())
    }

    /// Add a tensor from raw bytes of `dtype` with shape `ne` (ggml order).
    ///
    /// # Errors
    /// Bad shapes, a byte count that does not match, empty, long or duplicate names.
    pub fn add_tensor_bytes(&mut self, name: &str, dtype: DType, ne: &[i64], bytes: Vec<u8>) -> Result<()> {
        check_shape("gguf tensor", dtype, ne)?;
        self.check_name(name)?;
        let cn = c(name, "tensor name")?;
        // A throw-away description: gguf_add_tensor copies the struct.
        // SAFETY: a fresh no_alloc context sized for one tensor; shape checked.
        unsafe {
            let params = sys::ggml_init_params { mem_size: sys::ggml_tensor_overhead(), mem_buffer: std::ptr::null_mut(), no_alloc: true };
            let meta = sys::ggml_init(params);
            if meta.is_null() {
                return Err(Error::Capacity("gguf writer: cannot allocate metadata".into()));
            }
            let t = sys::ggml_new_tensor(meta, dtype.to_raw(), ne.len() as i32, ne.as_ptr());
            let nbytes = sys::ggml_nbytes(t);
            if nbytes != bytes.len() {
                sys::ggml_free(meta);
                return Err(Error::gguf(PathBuf::new(), format!("tensor {name}: {} bytes given, {nbytes} expected", bytes.len())));
            }
            sys::ggml_set_name(t, cn.as_ptr());
            sys::gguf_add_tensor(self.ctx, t);
            sys::ggml_free(meta);
            // The data vector is kept until the writer drops.
            sys::gguf_set_tensor_data(self.ctx, cn.as_ptr(), bytes.as_ptr().cast());
        }
        self.names.insert(name.to_string());
        self.data.push(bytes);
        Ok(())
    }

    /// Add a tensor from a slice of plain elements with shape `ne`.
    pub fn add_tensor_data<T: Element>(&mut self, name: &str, ne: &[i64], data: &[T]) -> Result<()> {
        // SAFETY: plain-old-data element types.
        let bytes = unsafe { std::slice::from_raw_parts(data.as_ptr().cast::<u8>(), std::mem::size_of_val(data)) }.to_vec();
        self.add_tensor_bytes(name, T::DTYPE, ne, bytes)
    }

    /// Add a copy of an allocated tensor (from any backend) under `name`.
    pub fn add_tensor(&mut self, name: &str, t: Tensor<'_>) -> Result<()> {
        let bytes = t.read_bytes()?;
        self.add_tensor_bytes(name, t.dtype(), &t.shape(), bytes)
    }

    /// Write the file atomically: to a temporary file beside `path` (its own,
    /// even when threads write the same path), flushed and fsynced, then renamed
    /// over `path` (and the folder fsynced), so `path` is either the old file or
    /// a complete new one, never a partial write. A file replaced keeps its
    /// permissions.
    ///
    /// # Errors
    /// [`Error::Io`] naming the path when any step fails; the temporary file is removed.
    pub fn write(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let file_name = path.file_name().ok_or_else(|| Error::gguf(path, "not a file path"))?;
        // Unique to this call: two writes of one path (threads of this process) never share a temporary.
        static WRITES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let n = WRITES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        // (a long name cut, so the temporary's name stays within the system's 255 bytes)
        let name = file_name.to_string_lossy();
        let cut = name.char_indices().map(|(i, ch)| i + ch.len_utf8()).take_while(|&e| e <= 200).last().unwrap_or(0);
        let tmp = dir.join(format!(".{}.tmp-{}-{n}", &name[..cut], std::process::id()));
        // Errors name the file being written, not its temporary.
        let named = |e: Error| match e {
            Error::Io { source, .. } => Error::io(path, source),
            e => e,
        };
        let result = self.write_to(&tmp).map_err(named).and_then(|_| {
            // a file replaced keeps its permissions
            if let Ok(old) = std::fs::metadata(path) {
                let _ = std::fs::set_permissions(&tmp, old.permissions());
            }
            std::fs::rename(&tmp, path).map_err(|e| Error::io(path, e))?;
            if let Ok(d) = std::fs::File::open(dir) {
                let _ = d.sync_all();
            }
            Ok(())
        });
        if result.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        result
    }

    /// Write the file to `path` as a new file, flushed and fsynced, without a
    /// temporary of its own: for a caller that writes to its own temporary
    /// and renames it (say, two files that must appear together). Whatever has
    /// the name `path` (a stale file, a planted link) is removed first, and the
    /// file is created with `O_EXCL`, which never follows a link.
    ///
    /// # Errors
    /// [`Error::Io`] naming `path` when any step fails; a partial file is removed.
    pub fn write_new(&self, path: impl AsRef<Path>) -> Result<()> {
        let path = path.as_ref();
        let result = self.write_to(path);
        if result.is_err() {
            let _ = std::fs::remove_file(path);
        }
        result
    }

    fn write_to(&self, tmp: &Path) -> Result<()> {
        // A fresh file: whatever has the temporary's name (a stale file, a
        // planted link) is removed, and O_EXCL never follows a link.
        let _ = std::fs::remove_file(tmp);
        let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(tmp).map_err(|e| Error::io(tmp, e))?;
        // SAFETY: valid context; the buffer has the size ggml asks for.
        let meta = unsafe {
            let n = sys::gguf_get_meta_size(self.ctx);
            let mut buf = vec![0u8; n];
            sys::gguf_get_meta_data(self.ctx, buf.as_mut_ptr().cast());
            buf
        };
        // SAFETY: valid context.
        let align = unsafe { sys::gguf_get_alignment(self.ctx) };
        let mut w = std::io::BufWriter::with_capacity(1 << 20, &mut f);
        let io = |e| Error::io(tmp, e);
        w.write_all(&meta).map_err(io)?;
        // Tensor data in the order added, each padded to the alignment (as gguf.cpp lays it out).
        for d in &self.data {
            w.write_all(d).map_err(io)?;
            let pad = d.len().div_ceil(align) * align - d.len();
            w.write_all(&vec![0u8; pad]).map_err(io)?;
        }
        w.flush().map_err(io)?;
        drop(w);
        f.sync_all().map_err(io)?;
        Ok(())
    }
}

impl Drop for GgufWriter {
    fn drop(&mut self) {
        // SAFETY: we own the context.
        unsafe { sys::gguf_free(self.ctx) };
    }
}
