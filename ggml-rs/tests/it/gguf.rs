//! GGUF: round trip of every metadata type and of f32/f16 tensors through
//! `GgufWriter` and `GgufFile` (hostile files: `gguf_hostile`).

use crate::common;

use common::*;
use ggml_rs::gguf::{Array, GgufFile, GgufWriter, Value};
use ggml_rs::{Context, DType, Error};
use half::f16;

/// Every metadata type: each scalar, each array type, and empty arrays of each.
fn all_metadata() -> Vec<(String, Value)> {
    let mut kv: Vec<(String, Value)> = vec![
        ("s.u8".into(), Value::U8(250)),
        ("s.i8".into(), Value::I8(-128)),
        ("s.u16".into(), Value::U16(65535)),
        ("s.i16".into(), Value::I16(-32768)),
        ("s.u32".into(), Value::U32(4_000_000_000)),
        ("s.i32".into(), Value::I32(i32::MIN)),
        ("s.f32".into(), Value::F32(-1.5e-30)),
        ("s.bool.true".into(), Value::Bool(true)),
        ("s.bool.false".into(), Value::Bool(false)),
        ("s.string".into(), Value::String("héllo, wörld ✓".into())),
        ("s.string.empty".into(), Value::String(String::new())),
        ("s.u64".into(), Value::U64(u64::MAX)),
        ("s.i64".into(), Value::I64(i64::MIN)),
        ("s.f64".into(), Value::F64(std::f64::consts::PI * 1e300)),
        ("a.u8".into(), Value::Array(Array::U8(vec![0, 1, 255]))),
        ("a.i8".into(), Value::Array(Array::I8(vec![-128, 0, 127]))),
        ("a.u16".into(), Value::Array(Array::U16(vec![0, 65535]))),
        ("a.i16".into(), Value::Array(Array::I16(vec![-32768, 32767, 1]))),
        ("a.u32".into(), Value::Array(Array::U32(vec![7, u32::MAX]))),
        ("a.i32".into(), Value::Array(Array::I32(vec![i32::MIN, -1, i32::MAX]))),
        ("a.f32".into(), Value::Array(Array::F32(vec![0.0, -0.0, 1e-45, f32::MAX, f32::INFINITY]))),
        ("a.bool".into(), Value::Array(Array::Bool(vec![true, false, false, true]))),
        ("a.string".into(), Value::Array(Array::String(vec!["a".into(), String::new(), "ünïcode".into(), "x".repeat(1000)]))),
        ("a.u64".into(), Value::Array(Array::U64(vec![u64::MAX, 0]))),
        ("a.i64".into(), Value::Array(Array::I64(vec![i64::MIN, i64::MAX]))),
        ("a.f64".into(), Value::Array(Array::F64(vec![f64::MIN_POSITIVE, -2.5]))),
    ];
    let empty = [
        Array::U8(vec![]),
        Array::I8(vec![]),
        Array::U16(vec![]),
        Array::I16(vec![]),
        Array::U32(vec![]),
        Array::I32(vec![]),
        Array::F32(vec![]),
        Array::Bool(vec![]),
        Array::String(vec![]),
        Array::U64(vec![]),
        Array::I64(vec![]),
        Array::F64(vec![]),
    ];
    for (i, a) in empty.into_iter().enumerate() {
        kv.push((format!("empty.{i}"), Value::Array(a)));
    }
    kv
}

#[test]
fn round_trip_every_metadata_type_and_tensors() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("model.gguf");
    let mut r = rng(1);
    let f32_data = uniform(&mut r, 12, -3.0, 3.0);
    let f16_data: Vec<f16> = uniform(&mut r, 40, -60000.0, 60000.0).into_iter().map(f16::from_f32).collect();
    let t4_data = uniform(&mut r, 24, -1.0, 1.0);

    let mut w = GgufWriter::new();
    let kv = all_metadata();
    for (k, v) in &kv {
        w.set(k, v.clone()).unwrap();
    }
    w.set("s.replaced", 1u32).unwrap();
    w.set("s.replaced", "now a string").unwrap(); // set replaces, keeping one key
    w.add_tensor_data("w.f32", &[3, 4], &f32_data).unwrap();
    w.add_tensor_data("w.f16", &[8, 5], &f16_data).unwrap();
    w.add_tensor_data("w.4d", &[2, 3, 2, 2], &t4_data).unwrap();
    // A tensor of a context (as a checkpoint writes weights).
    let cpu = cpu();
    let ctx = Context::new(4).unwrap();
    let t = leaf(&ctx, &cpu, &[5, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]);
    w.add_tensor("from.context", t).unwrap();
    w.write(&path).unwrap();

    let f = GgufFile::open(&path).unwrap();
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    let mut want = kv.clone();
    want.push(("s.replaced".into(), Value::String("now a string".into())));
    assert_eq!(f.metadata(), &want[..], "metadata, in order, with exact values");
    assert_eq!(f.get_u64("s.u64").unwrap(), u64::MAX);
    assert_eq!(f.get_str("s.string").unwrap(), "héllo, wörld ✓");
    assert_eq!(f.get_f64("s.f32").unwrap(), -1.5e-30f32 as f64);
    // The typed getters say what the key holds (a negative int64 had read
    // "missing or non-integer key").
    let said = |r: Result<String, ggml_rs::Error>| r.unwrap_err().to_string();
    assert!(said(f.get_u64("s.i64").map(|v| v.to_string()))
        .contains("key s.i64 is int64 -9223372036854775808, expected a non-negative integer"));
    assert!(said(f.get_str("s.u8").map(String::from)).contains("key s.u8 is uint8 "));
    assert!(said(f.get_f64("a.string").map(|v| v.to_string())).contains("key a.string is array of string of 4 elements, expected a number"));
    assert!(said(f.get_u64("s.string").map(|v| v.to_string())).contains("is string \"héllo, wörld ✓\""));
    assert!(said(f.get_u64("missing").map(|v| v.to_string())).contains("key missing is missing"));

    let names: Vec<&str> = f.tensors().iter().map(|t| t.name.as_str()).collect();
    assert_eq!(names, ["w.f32", "w.f16", "w.4d", "from.context"]);
    let ti = f.tensor("w.f16").unwrap();
    assert_eq!((ti.dtype, ti.ne, ti.nbytes), (DType::F16, [8, 5, 1, 1], 80));
    assert_eq!(f.tensor("w.4d").unwrap().ne, [2, 3, 2, 2]);
    for t in f.tensors() {
        assert_eq!(t.offset % 32, 0, "{} is aligned", t.name);
    }
    assert_eq!(f.tensor_f32("w.f32").unwrap(), f32_data);
    assert_eq!(f.tensor_data("w.f16").unwrap(), bytes_of(&f16_data));
    assert_eq!(f.tensor_f32("w.f16").unwrap(), f16_data.iter().map(|h| h.to_f32()).collect::<Vec<_>>());
    assert_eq!(f.tensor_f32("w.4d").unwrap(), t4_data);
    assert_eq!(f.tensor_f32("from.context").unwrap(), t.read::<f32>().unwrap());

    // Loading into tensors: same type, and f16 converted to an f32 destination.
    let dst = Context::new(4).unwrap();
    let d16 = dst.new_tensor(DType::F16, &[8, 5]).unwrap();
    let d32 = dst.new_tensor(DType::F32, &[8, 5]).unwrap();
    let bad = dst.new_tensor(DType::F32, &[3, 3]).unwrap();
    dst.allocate(&cpu).unwrap();
    f.load_into("w.f16", d16).unwrap();
    f.load_into("w.f16", d32).unwrap();
    assert_eq!(d16.read::<f16>().unwrap(), f16_data);
    assert_eq!(d32.read::<f32>().unwrap(), f16_data.iter().map(|h| h.to_f32()).collect::<Vec<_>>());
    assert!(f.load_into("w.f32", bad).is_err());
    // A bf16 destination: the f32 values rounded to nearest even (here of
    // f16 values that bf16 cannot all hold).
    let dst16 = Context::new(2).unwrap();
    let b16 = dst16.new_tensor(DType::BF16, &[8, 5]).unwrap();
    dst16.allocate(&cpu).unwrap();
    f.load_into("w.f16", b16).unwrap();
    let want: Vec<half::bf16> = f16_data.iter().map(|h| half::bf16::from_f32(h.to_f32())).collect();
    assert_eq!(b16.read::<half::bf16>().unwrap(), want);
    assert!(want.iter().zip(&f16_data).any(|(b, h)| b.to_f32() != h.to_f32()), "some values were rounded");
    // The same element count in another shape is not the same tensor.
    let transposed = dst.new_tensor(DType::F16, &[5, 8]).unwrap();
    dst.allocate(&cpu).unwrap();
    assert!(f.load_into("w.f16", transposed).unwrap_err().to_string().contains("[8, 5]"));
    assert!(f.tensor_data("nope").is_err());
}

fn bytes_of(v: &[f16]) -> Vec<u8> {
    v.iter().flat_map(|h| h.to_le_bytes()).collect()
}

#[test]
fn atomic_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.gguf");
    for round in 0..2u32 {
        let mut w = GgufWriter::new();
        w.set("general.alignment", 32u32).unwrap(); // the default, stated explicitly
        w.set("round", round).unwrap();
        w.add_tensor_data("t0", &[3], &[1.0f32, 2.0, 3.0]).unwrap(); // 12 bytes: padding follows
        w.add_tensor_data("t1", &[5 + round as i64], &vec![4.0f32; 5 + round as usize]).unwrap();
        w.write(&path).unwrap();
        let f = GgufFile::open(&path).unwrap();
        assert_eq!(f.alignment(), 32);
        assert_eq!(f.get_u64("round").unwrap(), round as u64, "the second write replaced the first");
        assert_eq!(f.tensor("t1").unwrap().offset % 32, 0);
        assert_eq!(f.tensor_f32("t1").unwrap(), vec![4.0; 5 + round as usize]);
    }
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("a.gguf")], "no temporary file is left behind");
    // Writing into a folder that does not exist fails with the path, leaving nothing.
    let e = GgufWriter::new().write(dir.path().join("no/such/dir/x.gguf")).unwrap_err();
    assert!(matches!(e, Error::Io { .. }), "{e}");
}

/// `write_new` writes the file itself (no temporary of its own, for a caller
/// that renames its own), replacing a planted link rather than writing through it.
#[cfg(unix)]
#[test]
fn write_new_writes_in_place_without_following_a_link() {
    let dir = tempfile::tempdir().unwrap();
    let (path, target) = (dir.path().join(".a.gguf.tmp-1"), dir.path().join("elsewhere"));
    std::fs::write(&target, b"keep").unwrap();
    std::os::unix::fs::symlink(&target, &path).unwrap();
    let mut w = GgufWriter::new();
    w.add_tensor_data("t", &[2], &[1.0f32, 2.0]).unwrap();
    w.write_new(&path).unwrap();
    assert_eq!(GgufFile::open(&path).unwrap().tensor_f32("t").unwrap(), vec![1.0, 2.0]);
    assert_eq!(std::fs::read(&target).unwrap(), b"keep", "the link's target is untouched");
    let mut left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    left.sort();
    assert_eq!(left, [".a.gguf.tmp-1", "elsewhere"], "no temporary of its own");
}

#[test]
fn writer_refuses_bad_input() {
    let mut w = GgufWriter::new();
    assert!(w.set("", 1u8).is_err());
    assert!(w.set("k\0ey", 1u8).is_err());
    assert!(w.set("s", "nul\0inside").is_err());
    assert!(w.set("general.alignment", 24u32).is_err());
    assert!(w.set("general.alignment", 64u32).is_err(), "ggml's writer would still align to 32");
    assert!(w.set("general.alignment", 32u64).is_err());
    w.add_tensor_data("t", &[2], &[1.0f32, 2.0]).unwrap();
    assert!(w.add_tensor_data("t", &[2], &[1.0f32, 2.0]).is_err(), "duplicate tensor name");
    assert!(w.add_tensor_data(&"n".repeat(64), &[1], &[1.0f32]).is_err(), "name over 63 bytes");
    assert!(w.add_tensor_data("", &[1], &[1.0f32]).is_err());
    assert!(w.add_tensor_data("u", &[3], &[1.0f32, 2.0]).is_err(), "byte count mismatch");
    assert!(w.add_tensor_bytes("q", DType::Q8_0, &[33], vec![0; 34]).is_err(), "row not a multiple of the block");
    assert!(w.add_tensor_data("z", &[0], &[0.0f32; 0]).is_err(), "zero dimension");
}
