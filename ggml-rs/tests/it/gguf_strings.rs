//! GGUF strings are UTF-8 text that ggml's reader hands out as C strings: a
//! file with a non-UTF-8 or NUL-holding key, value or tensor name is refused
//! (it had been read with U+FFFD for the bad bytes, or cut at the NUL, and
//! so copied changed); and two threads writing one path never see each
//! other's temporary file.

use crate::gguf_hostile::{Files, B, F32, GGUF_ARRAY, GGUF_STRING};
use ggml_rs::gguf::{GgufFile, GgufWriter};

/// A file with one extra metadata pair written by `kv` and one tensor named `tensor`.
fn file(kv: &dyn Fn(&mut B), tensor: &[u8]) -> Vec<u8> {
    let mut b = B::header(3, 1, 2);
    b.key("general.architecture", GGUF_STRING).str(b"toy");
    kv(&mut b);
    b.str(tensor).u32(1).i64(8).u32(F32).u64(0).pad(32).data(32);
    b.0
}

/// What a file is refused for, its extra metadata pair, its tensor's name,
/// and what the refusal says.
type Case = (&'static str, fn(&mut B), &'static [u8], &'static str);

#[test]
fn strings_that_are_not_plain_utf8_text_are_refused() {
    let mut fs = Files::new();
    fs.open(&file(&|b| _ = b.key("s.ok", GGUF_STRING).str("héllo 字".as_bytes()), b"t0")).unwrap();
    let ok_pair: fn(&mut B) = |b| _ = b.key("ok", GGUF_STRING).str(b"v");
    let cases: [Case; 6] = [
        ("non-UTF-8 value", |b| _ = b.key("s.bad", GGUF_STRING).str(b"ab\xff\xfecd"), b"t0", "\"s.bad\": the string value is not UTF-8"),
        ("NUL in a value", |b| _ = b.key("s.nul", GGUF_STRING).str(b"abc\0def"), b"t0", "\"s.nul\": the string value contains a NUL byte"),
        (
            "array element",
            |b| _ = b.key("s.arr", GGUF_ARRAY).u32(GGUF_STRING).u64(3).str(b"a").str(b"b").str(b"c\xff"),
            b"t0",
            "\"s.arr\": string 2 is not UTF-8",
        ),
        ("NUL in a key", |b| _ = b.key("k\0a", GGUF_STRING).str(b"v"), b"t0", "metadata key 1 contains a NUL byte"),
        ("NUL in a tensor name", ok_pair, b"x\0a", "tensor 0: its name contains a NUL byte"),
        ("non-UTF-8 tensor name", ok_pair, b"w\xff", "tensor 0: its name is not UTF-8"),
    ];
    for (what, kv, tensor, says) in cases {
        let msg = fs.refuse(what, &file(&kv, tensor));
        assert!(msg.contains(says), "{what}: {msg}");
    }
}

#[test]
fn writer_errors_say_gguf_where_no_file_is_named_yet() {
    let e = GgufWriter::new().set("", 1u32).unwrap_err().to_string();
    assert_eq!(e, "gguf: empty metadata key");
}

/// Two threads write one path over and over while a third opens it: every
/// write succeeds and every open reads a whole file.
#[test]
fn concurrent_writes_of_one_path_are_each_atomic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.gguf");
    let writer = |v: u32| {
        let mut w = GgufWriter::new();
        w.set("v", v).unwrap();
        w.add_tensor_data("t", &[256], &vec![v as f32; 256]).unwrap();
        w
    };
    writer(0).write(&path).unwrap();
    std::thread::scope(|s| {
        for v in [1u32, 2] {
            let (w, path) = (writer(v), &path);
            s.spawn(move || {
                for _ in 0..200 {
                    w.write(path).unwrap();
                }
            });
        }
        s.spawn(|| {
            for _ in 0..400 {
                let f = GgufFile::open(&path).unwrap();
                assert_eq!(f.tensor_f32("t").unwrap().len(), 256);
            }
        });
    });
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("race.gguf")], "temporaries left behind");
}
