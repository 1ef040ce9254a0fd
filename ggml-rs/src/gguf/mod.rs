//! GGUF files through ggml's own gguf API (`gguf.h`).
//!
//! [`GgufFile`] maps a file, validates its whole header in Rust (see
//! [`validate`]) and only then lets ggml's parser read it; tensor data are
//! zero-copy slices of the mapping. [`GgufWriter`] collects metadata and tensors
//! and writes atomically: a temporary file in the same folder, fsynced, then
//! renamed over the target.

mod read;
pub mod validate;
mod write;

pub use read::{GgufFile, TensorInfo};
pub use write::GgufWriter;

/// Alignment of the data section when `general.alignment` is absent.
pub const DEFAULT_ALIGNMENT: usize = 32;

/// A metadata value. Arrays hold one element type (nested arrays are not
/// supported by ggml's reader, so they are refused).
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// GGUF type `uint8`.
    U8(u8),
    /// GGUF type `int8`.
    I8(i8),
    /// GGUF type `uint16`.
    U16(u16),
    /// GGUF type `int16`.
    I16(i16),
    /// GGUF type `uint32`.
    U32(u32),
    /// GGUF type `int32`.
    I32(i32),
    /// GGUF type `float32`.
    F32(f32),
    /// GGUF type `bool`.
    Bool(bool),
    /// GGUF type `string`.
    String(String),
    /// GGUF type `uint64`.
    U64(u64),
    /// GGUF type `int64`.
    I64(i64),
    /// GGUF type `float64`.
    F64(f64),
    /// GGUF type `array`: elements of one type.
    Array(Array),
}

/// A homogeneous metadata array.
#[derive(Clone, Debug, PartialEq)]
pub enum Array {
    /// Elements of GGUF type `uint8`.
    U8(Vec<u8>),
    /// Elements of GGUF type `int8`.
    I8(Vec<i8>),
    /// Elements of GGUF type `uint16`.
    U16(Vec<u16>),
    /// Elements of GGUF type `int16`.
    I16(Vec<i16>),
    /// Elements of GGUF type `uint32`.
    U32(Vec<u32>),
    /// Elements of GGUF type `int32`.
    I32(Vec<i32>),
    /// Elements of GGUF type `float32`.
    F32(Vec<f32>),
    /// Elements of GGUF type `bool`.
    Bool(Vec<bool>),
    /// Elements of GGUF type `string`.
    String(Vec<String>),
    /// Elements of GGUF type `uint64`.
    U64(Vec<u64>),
    /// Elements of GGUF type `int64`.
    I64(Vec<i64>),
    /// Elements of GGUF type `float64`.
    F64(Vec<f64>),
}

/// GGUF's name of the scalar type of a `Value` or an `Array` (`$e`) variant,
/// with `$p => $r` for `Value`'s array variant.
macro_rules! gguf_type_name {
    ($e:ident, $v:expr $(, $p:pat => $r:expr)?) => {
        match $v {
            $e::U8(_) => "uint8",
            $e::I8(_) => "int8",
            $e::U16(_) => "uint16",
            $e::I16(_) => "int16",
            $e::U32(_) => "uint32",
            $e::I32(_) => "int32",
            $e::F32(_) => "float32",
            $e::Bool(_) => "bool",
            $e::String(_) => "string",
            $e::U64(_) => "uint64",
            $e::I64(_) => "int64",
            $e::F64(_) => "float64",
            $($p => $r,)?
        }
    };
}

impl Array {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Array::U8(v) => v.len(),
            Array::I8(v) => v.len(),
            Array::U16(v) => v.len(),
            Array::I16(v) => v.len(),
            Array::U32(v) => v.len(),
            Array::I32(v) => v.len(),
            Array::F32(v) => v.len(),
            Array::Bool(v) => v.len(),
            Array::String(v) => v.len(),
            Array::U64(v) => v.len(),
            Array::I64(v) => v.len(),
            Array::F64(v) => v.len(),
        }
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The GGUF type of the elements (`uint8`... `float64`), for messages.
    pub fn element_type_name(&self) -> &'static str {
        gguf_type_name!(Array, self)
    }
}

impl Value {
    /// The GGUF type's name (`uint32`, `string`, `array of float32`...), for messages.
    pub fn type_name(&self) -> String {
        gguf_type_name!(Value, self, Value::Array(a) => return format!("array of {}", a.element_type_name())).to_string()
    }

    /// The value as u64 when it is any unsigned or non-negative signed integer.
    pub fn as_u64(&self) -> Option<u64> {
        match *self {
            Value::U8(v) => Some(v as u64),
            Value::U16(v) => Some(v as u64),
            Value::U32(v) => Some(v as u64),
            Value::U64(v) => Some(v),
            Value::I8(v) if v >= 0 => Some(v as u64),
            Value::I16(v) if v >= 0 => Some(v as u64),
            Value::I32(v) if v >= 0 => Some(v as u64),
            Value::I64(v) if v >= 0 => Some(v as u64),
            _ => None,
        }
    }

    /// The value as f64 when it is any number.
    pub fn as_f64(&self) -> Option<f64> {
        match *self {
            Value::F32(v) => Some(v as f64),
            Value::F64(v) => Some(v),
            Value::I8(v) => Some(v as f64),
            Value::I16(v) => Some(v as f64),
            Value::I32(v) => Some(v as f64),
            Value::I64(v) => Some(v as f64),
            _ => self.as_u64().map(|v| v as f64),
        }
    }

    /// The string, for string values.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// The bool, for bool values.
    pub fn as_bool(&self) -> Option<bool> {
        match self {
            Value::Bool(b) => Some(*b),
            _ => None,
        }
    }
}

macro_rules! value_from {
    ($($t:ty => $v:ident),*) => {
        $(impl From<$t> for Value { fn from(x: $t) -> Self { Value::$v(x) } })*
        $(impl From<Vec<$t>> for Value { fn from(x: Vec<$t>) -> Self { Value::Array(Array::$v(x)) } })*
    };
}
value_from!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, f32 => F32, bool => Bool, String => String, u64 => U64, i64 => I64, f64 => F64);

impl From<&str> for Value {
    fn from(s: &str) -> Self {
        Value::String(s.to_string())
    }
}

impl From<Vec<&str>> for Value {
    fn from(v: Vec<&str>) -> Self {
        Value::Array(Array::String(v.into_iter().map(String::from).collect()))
    }
}
