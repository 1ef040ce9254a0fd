//! `toy describe`: what a GGUF file holds.

use crate::cli::DescribeArgs;
use crate::error::Result;
use crate::files::resolve_model;
use ggml_rs::gguf::{Array, GgufFile, Value};
use serde_json::json;

fn short(v: &Value) -> String {
    match v {
        Value::Array(a) => format!("[{} items]", a.len()),
        Value::String(s) if s.len() > 60 => format!("{:?}…", &s[..s.char_indices().nth(60).map(|c| c.0).unwrap_or(s.len())]),
        Value::String(s) => format!("{s:?}"),
        other => format!("{other:?}").split('(').nth(1).map(|x| x.trim_end_matches(')').to_string()).unwrap_or_default(),
    }
}

/// A value as JSON: a scalar as its number, bool or whole string (an f32 as
/// its shortest decimal, `1e-5` rather than `9.99999974e-6`); an array as
/// `{"type": "<element type>", "len": n}`, as `gguf-dump` summarises one.
fn json_value(v: &Value) -> serde_json::Value {
    match v {
        Value::U8(x) => json!(x),
        Value::I8(x) => json!(x),
        Value::U16(x) => json!(x),
        Value::I16(x) => json!(x),
        Value::U32(x) => json!(x),
        Value::I32(x) => json!(x),
        Value::U64(x) => json!(x),
        Value::I64(x) => json!(x),
        Value::F32(x) => json!(crate::model::as_written(*x)),
        Value::F64(x) => json!(x),
        Value::Bool(x) => json!(x),
        Value::String(x) => json!(x),
        Value::Array(a) => json!({ "type": array_type(a), "len": a.len() }),
    }
}

/// GGUF's name of an array's element type (`gguf_type_name`: "u32", "str"...).
fn array_type(a: &Array) -> &'static str {
    match a {
        Array::U8(_) => "u8",
        Array::I8(_) => "i8",
        Array::U16(_) => "u16",
        Array::I16(_) => "i16",
        Array::U32(_) => "u32",
        Array::I32(_) => "i32",
        Array::F32(_) => "f32",
        Array::Bool(_) => "bool",
        Array::String(_) => "str",
        Array::U64(_) => "u64",
        Array::I64(_) => "i64",
        Array::F64(_) => "f64",
    }
}

/// Files up to this many bytes of tensors have their values scanned by describe.
const SCAN_BYTES: u64 = 4 << 30;

/// The first tensor (and element) of `f` holding a NaN or an infinity, what
/// generate, eval and finetune refuse on loading; `None` for a file with more
/// than [`SCAN_BYTES`] of tensors (not scanned) or tensors toy cannot read.
fn first_non_finite(f: &GgufFile) -> Option<(String, usize)> {
    if f.tensors().iter().map(|t| t.nbytes as u64).sum::<u64>() > SCAN_BYTES {
        return None;
    }
    f.tensors().iter().find_map(|t| {
        let v = f.tensor_f32(&t.name).ok()?;
        v.iter().position(|x| !x.is_finite()).map(|i| (t.name.clone(), i))
    })
}

/// Print the metadata and tensors of a checkpoint, with a warning on stderr
/// when it is a model the other commands refuse to load.
pub fn run(args: &DescribeArgs) -> Result<()> {
    let path = resolve_model(&args.model)?;
    let f = GgufFile::open(&path)?;
    // What generate, eval, finetune and export would refuse, said up front; the
    // file is still described (that is how one finds out what is wrong with it).
    if f.get("general.architecture").is_some() && !crate::formats::adapter::is_adapter(&f) {
        if let Err(e) = crate::formats::checkpoint::check_model(&f, &path) {
            eprintln!("toy describe: warning: {}", crate::output::one_line(&e.to_string()));
        } else if let Some((name, i)) = first_non_finite(&f) {
            eprintln!(
                "toy describe: warning: {}: tensor {name} holds a non-finite value at element {i}; the model is broken",
                path.display()
            );
        }
    }
    // A resume state holds each weight's AdamW moments beside it: those are not parameters.
    let moment = |name: &str| name.ends_with(".adam_m") || name.ends_with(".adam_v");
    let n_params: i64 = f.tensors().iter().filter(|t| !moment(&t.name)).map(|t| t.nelements()).sum();
    let of_state = if f.tensors().iter().any(|t| moment(&t.name)) { " and their AdamW moments" } else { "" };
    if args.json {
        let meta: serde_json::Map<String, serde_json::Value> = f.metadata().iter().map(|(k, v)| (k.clone(), json_value(v))).collect();
        let tensors: Vec<_> = f
            .tensors()
            .iter()
            .map(|t| json!({ "name": t.name, "dtype": t.dtype.name(), "shape": t.shape(), "nbytes": t.nbytes }))
            .collect();
        return crate::say!(
            "{}",
            json!({ "format": "toy/describe-v2", "path": path, "version": f.version(), "n_params": n_params, "metadata": meta, "tensors": tensors })
        );
    }
    crate::say!(
        "{} (GGUF v{}, {} tensors, {} parameters{of_state})",
        crate::output::shown(&path),
        f.version(),
        f.tensors().len(),
        count(n_params as u64)
    )?;
    for (k, v) in f.metadata() {
        crate::say!("  {k:<44} {}", short(v))?;
    }
    for t in f.tensors() {
        crate::say!("  {:<32} {:<5} {:?}", t.name, t.dtype.name(), t.shape())?;
    }
    Ok(())
}

/// A parameter count as people write it: 134.52M, 2.46K (an adapter of rank 1
/// is no "0.00M"), 1.24B; under a thousand, the number.
fn count(n: u64) -> String {
    match n {
        0..=999 => n.to_string(),
        1_000..=999_999 => format!("{:.2}K", n as f64 / 1e3),
        1_000_000..=999_999_999 => format!("{:.2}M", n as f64 / 1e6),
        _ => format!("{:.2}B", n as f64 / 1e9),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn counts_read_as_people_write_them() {
        let got: Vec<_> = [0u64, 999, 2_464, 16_384, 134_515_008, 1_235_814_400].iter().map(|&n| super::count(n)).collect();
        assert_eq!(got, ["0", "999", "2.46K", "16.38K", "134.52M", "1.24B"]);
    }

    #[test]
    fn json_metadata_is_typed() {
        use ggml_rs::gguf::{Array, Value};
        let long = "x".repeat(100);
        let got: Vec<_> = [
            Value::F32(1e-5),
            Value::U32(49152),
            Value::Bool(false),
            Value::String(long.clone()),
            Value::Array(Array::String(vec!["a".into(), "b".into()])),
        ]
        .iter()
        .map(super::json_value)
        .collect();
        let want = serde_json::json!([1e-5, 49152, false, long, { "type": "str", "len": 2 }]);
        assert_eq!(serde_json::Value::Array(got), want);
        assert_eq!(super::json_value(&Value::F32(1e-5)).as_f64(), Some(1e-5)); // not 9.99999974e-6
    }
}
