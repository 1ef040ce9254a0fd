//! A complete, bounds-checked walk over a GGUF header in Rust.
//!
//! ggml's parser (`gguf_init_from_reader` in `gguf.cpp`) trusts sizes it reads
//! and aborts the process on some malformed input; everything it would choke on,
//! and more (tensor data past the end of the file, non-UTF-8 keys, bool bytes
//! other than 0/1), is refused here first with a message that says where.

use crate::dtype::DType;

/// What the header says, once validated.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The GGUF format version (2 or 3).
    pub version: u32,
    /// Number of metadata key-value pairs.
    pub n_kv: u64,
    /// Number of tensors.
    pub n_tensors: u64,
    /// Alignment of tensor data in bytes (`general.alignment`, or
    /// [`DEFAULT_ALIGNMENT`](super::DEFAULT_ALIGNMENT)).
    pub alignment: usize,
    /// Byte offset of the data section (tensor offsets are relative to it).
    pub data_offset: usize,
}

const MAX_NAME: usize = ggml_sys::GGML_MAX_NAME as usize;

struct Cursor<'b> {
    buf: &'b [u8],
    pos: usize,
}

impl<'b> Cursor<'b> {
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize, what: &str) -> Result<&'b [u8], String> {
        if n > self.left() {
            return Err(format!("truncated at byte {} reading {what} ({n} bytes needed, {} left)", self.pos, self.left()));
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Ok(s)
    }

    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(self.take(4, what)?.try_into().unwrap()))
    }

    fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }

    fn i64(&mut self, what: &str) -> Result<i64, String> {
        Ok(i64::from_le_bytes(self.take(8, what)?.try_into().unwrap()))
    }

    fn string(&mut self, what: &str) -> Result<&'b [u8], String> {
        let at = self.pos;
        let n = self.u64(what)?;
        if n > self.left() as u64 {
            return Err(format!("{what} at byte {at} claims {n} bytes, only {} left", self.left()));
        }
        self.take(n as usize, what)
    }
}

/// Size in bytes of one scalar of GGUF type `t`, or `None` for strings/arrays/invalid.
fn scalar_size(t: u32) -> Option<usize> {
    match t {
        0 | 1 | 7 => Some(1),
        2 | 3 => Some(2),
        4..=6 => Some(4),
        10..=12 => Some(8),
        _ => None,
    }
}

/// Validate the header of a GGUF file held in `buf` (the whole file).
pub fn validate(buf: &[u8]) -> Result<Header, String> {
    let mut c = Cursor { buf, pos: 0 };
    let (version, n_kv, n_tensors) = read_counts(&mut c)?;
    let alignment = read_metadata(&mut c, n_kv)?;
    let infos = read_tensor_infos(&mut c, n_tensors, alignment)?;
    let data_offset = if n_tensors > 0 { c.pos.div_ceil(alignment) * alignment } else { c.pos };
    for t in &infos {
        if data_offset as u128 + t.offset + t.nbytes > buf.len() as u128 {
            return Err(format!("tensor {:?}: data ends past the end of the file ({} bytes)", t.name, buf.len()));
        }
    }
    Ok(Header { version, n_kv, n_tensors, alignment, data_offset })
}

/// What a file that is not a GGUF looks like, from its first bytes, for the
/// formats a model is often downloaded in, with the way to a GGUF: a
/// safetensors file (an 8-byte little-endian header length, then JSON), a
/// PyTorch checkpoint (`torch.save`'s zip archive, whose first entry is
/// `…/data.pkl`, or a bare pickle), or the GGML formats that
/// GGUF replaced (magics `ggml`, `ggmf`, `ggjt`, `ggla`, stored as
/// little-endian u32s).
fn other_format(buf: &[u8]) -> Option<&'static str> {
    if buf.len() >= 9 && buf[8] == b'{' && u64::from_le_bytes(buf[..8].try_into().ok()?) < buf.len() as u64 {
        return Some("a safetensors file (convert the model to GGUF with llama.cpp's convert_hf_to_gguf.py)");
    }
    // torch.save's zip names its first entry `<name>/data.pkl`; older files are a bare pickle
    let zip_entry = || buf.get(30..30 + u16::from_le_bytes(buf.get(26..28)?.try_into().ok()?) as usize);
    let torch_zip = buf.starts_with(b"PK\x03\x04") && zip_entry().is_some_and(|n| n.ends_with(b"data.pkl"));
    if torch_zip || buf.starts_with(&[0x80, 0x02]) {
        return Some("a PyTorch checkpoint (convert the model to GGUF with llama.cpp's convert_hf_to_gguf.py)");
    }
    match buf.get(..4)? {
        b"lmgg" | b"fmgg" | b"tjgg" | b"algg" => {
            Some("a file of the GGML formats before GGUF (convert it with llama.cpp's convert_llama_ggml_to_gguf.py)")
        }
        _ => None,
    }
}

/// The magic, the version and the counts of metadata pairs and tensors
/// (which must fit in what is left of the file).
fn read_counts(c: &mut Cursor<'_>) -> Result<(u32, u64, u64), String> {
    let magic = c.take(4, "magic").map_err(|_| "not a GGUF file (shorter than 4 bytes)".to_string())?;
    if magic != b"GGUF" {
        return Err(match other_format(c.buf) {
            Some(what) => format!("not a GGUF file: {what}"),
            None => "not a GGUF file (bad magic)".into(),
        });
    }
    let version = c.u32("version")?;
    if version != 2 && version != 3 {
        if matches!(version.swap_bytes(), 2 | 3) {
            // llama.cpp's gguf-py writes big-endian files (--bigendian) for big-endian machines
            return Err(format!("a big-endian GGUF (version {} byte-swapped); only little-endian files are read", version.swap_bytes()));
        }
        return Err(format!("unsupported GGUF version {version} (2 and 3 are read)"));
    }
    let n_tensors = c.i64("tensor count")?;
    let n_kv = c.i64("metadata count")?;
    if n_tensors < 0 || n_kv < 0 {
        return Err(format!("negative counts ({n_tensors} tensors, {n_kv} metadata pairs)"));
    }
    // Each pair takes at least 13 bytes, each tensor at least 25.
    if (n_kv as u128) * 13 + (n_tensors as u128) * 25 > c.left() as u128 {
        return Err(format!("{n_kv} metadata pairs and {n_tensors} tensors cannot fit in {} bytes", c.buf.len()));
    }
    Ok((version, n_kv as u64, n_tensors as u64))
}

/// A GGUF string as text: UTF-8 (as the format says), without NUL bytes
/// (ggml's reader hands strings out as C strings, which a NUL would cut
/// short); otherwise what is wrong with it.
fn text(bytes: &[u8]) -> Result<&str, &'static str> {
    let s = std::str::from_utf8(bytes).map_err(|_| "is not UTF-8 (GGUF strings are)")?;
    if s.contains('\0') {
        return Err("contains a NUL byte, which ggml's reader would cut it at");
    }
    Ok(s)
}

/// Walk `n_kv` metadata pairs: UTF-8 keys, unique and not empty, values of a
/// known type that fit, strings UTF-8 without NUL bytes; returns `general.alignment` (or the default).
fn read_metadata(c: &mut Cursor<'_>, n_kv: u64) -> Result<usize, String> {
    let mut keys = std::collections::HashSet::new();
    let mut alignment = super::DEFAULT_ALIGNMENT;
    for i in 0..n_kv {
        let key = c.string("metadata key")?;
        let key = text(key).map_err(|why| format!("metadata key {i} {why}"))?;
        if key.is_empty() {
            return Err(format!("metadata key {i} is empty"));
        }
        if !keys.insert(key.to_string()) {
            return Err(format!("duplicate metadata key {key:?}"));
        }
        if let Some(a) = read_value(c, key)? {
            alignment = a;
        }
    }
    Ok(alignment)
}

/// Walk the value of metadata `key` (a scalar, a string or an array of
/// them); returns the alignment when `key` is `general.alignment`.
fn read_value(c: &mut Cursor<'_>, key: &str) -> Result<Option<usize>, String> {
    let mut ty = c.u32("value type")?;
    let mut n = 1u64;
    let is_array = ty == 9;
    if is_array {
        ty = c.u32("array element type")?;
        n = c.u64("array length")?;
        if ty == 9 {
            return Err(format!("{key:?}: nested arrays are not supported"));
        }
    }
    let alignment = key == "general.alignment";
    if alignment && (is_array || ty != 4) {
        return Err("general.alignment must be a u32".into());
    }
    match (ty, scalar_size(ty)) {
        (8, _) => {
            if n > (c.left() / 8) as u64 {
                return Err(format!("{key:?}: {n} strings cannot fit in the {} bytes left", c.left()));
            }
            for j in 0..n {
                let v = c.string(key)?;
                text(v).map_err(|why| match is_array {
                    true => format!("{key:?}: string {j} {why}"),
                    false => format!("{key:?}: the string value {why}"),
                })?;
            }
            Ok(None)
        }
        (_, Some(sz)) => {
            if n > (c.left() / sz) as u64 {
                return Err(format!("{key:?}: {n} values of {sz} bytes cannot fit in the {} bytes left", c.left()));
            }
            let data = c.take(n as usize * sz, key)?;
            if ty == 7 && data.iter().any(|&b| b > 1) {
                return Err(format!("{key:?}: bool values must be 0 or 1"));
            }
            if !alignment {
                return Ok(None);
            }
            let a = u32::from_le_bytes(data.try_into().unwrap());
            if a == 0 || !a.is_power_of_two() {
                return Err(format!("general.alignment {a} is not a power of 2"));
            }
            Ok(Some(a as usize))
        }
        _ => Err(format!("{key:?} has invalid type {ty}")),
    }
}

/// Where one tensor's data is, relative to the data section.
struct TensorSpan {
    name: String,
    offset: u128,
    nbytes: u128,
}

/// Walk `n_tensors` tensor infos: unique names that fit ggml's, at most 4
/// dimensions whose product does not overflow, a known type whose blocks
/// divide the rows, and offsets that follow each other at `alignment`.
fn read_tensor_infos(c: &mut Cursor<'_>, n_tensors: u64, alignment: usize) -> Result<Vec<TensorSpan>, String> {
    let mut names = std::collections::HashSet::new();
    let mut expected_offset: u128 = 0;
    let mut infos = Vec::with_capacity(n_tensors.min(1 << 20) as usize);
    for i in 0..n_tensors {
        let name = c.string("tensor name")?;
        if name.len() >= MAX_NAME {
            return Err(format!("tensor {i}: name of {} bytes (at most {} allowed)", name.len(), MAX_NAME - 1));
        }
        let name = text(name).map_err(|why| format!("tensor {i}: its name {why}"))?.to_string();
        if !names.insert(name.clone()) {
            return Err(format!("duplicate tensor name {name:?}"));
        }
        let nbytes = read_tensor_shape(c, &name)?;
        let offset = c.u64("tensor offset")? as u128;
        if offset != expected_offset {
            return Err(format!("tensor {name:?}: data offset {offset}, expected {expected_offset}"));
        }
        expected_offset = offset + nbytes.div_ceil(alignment as u128) * alignment as u128;
        infos.push(TensorSpan { name, offset, nbytes });
    }
    Ok(infos)
}

/// Walk the dimensions and type of tensor `name`; returns its size in bytes.
fn read_tensor_shape(c: &mut Cursor<'_>, name: &str) -> Result<u128, String> {
    let n_dims = c.u32("dimension count")?;
    if n_dims as usize > crate::context::MAX_DIMS {
        return Err(format!("tensor {name:?}: {n_dims} dimensions (at most 4)"));
    }
    let mut ne = [1i64; 4];
    for d in ne.iter_mut().take(n_dims as usize) {
        *d = c.i64("dimension")?;
        if *d < 0 {
            return Err(format!("tensor {name:?}: negative dimension {d}"));
        }
    }
    let mut nel: i64 = 1;
    for &d in &ne {
        nel = nel.checked_mul(d).ok_or_else(|| format!("tensor {name:?}: shape {ne:?} overflows"))?;
    }
    let ty = c.u32("tensor type")?;
    let dtype = DType::from_raw(ty).ok_or_else(|| format!("tensor {name:?}: unknown or removed type {ty}"))?;
    if ne[0] % dtype.block_size() != 0 {
        return Err(format!(
            "tensor {name:?}: {} elements per row is not a multiple of the {dtype} block size {}",
            ne[0],
            dtype.block_size()
        ));
    }
    Ok((nel / dtype.block_size()) as u128 * dtype.type_size() as u128)
}
