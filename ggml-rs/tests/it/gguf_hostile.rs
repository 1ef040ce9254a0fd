//! GGUF: hostile files (truncated, corrupted, lying headers, metadata and
//! tensor infos) must give `Err` without ever reaching one of ggml's aborts (a
//! crash would end this test process).

use crate::common;

use common::*;
use ggml_rs::gguf::{Array, GgufFile, Value};
use ggml_rs::Error;
use rand::Rng;
use std::path::{Path, PathBuf};

/// A GGUF byte builder, for files the writer would never produce.
#[derive(Clone, Default)]
pub(crate) struct B(pub(crate) Vec<u8>);

impl B {
    pub(crate) fn header(version: u32, n_tensors: i64, n_kv: i64) -> B {
        let mut b = B(b"GGUF".to_vec());
        b.u32(version).i64(n_tensors).i64(n_kv);
        b
    }
    pub(crate) fn u8(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    pub(crate) fn u32(&mut self, v: u32) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    pub(crate) fn u64(&mut self, v: u64) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    pub(crate) fn i64(&mut self, v: i64) -> &mut Self {
        self.0.extend(v.to_le_bytes());
        self
    }
    pub(crate) fn str(&mut self, s: &[u8]) -> &mut Self {
        self.u64(s.len() as u64);
        self.0.extend(s);
        self
    }
    /// A key and its scalar type; the caller writes the value.
    pub(crate) fn key(&mut self, k: &str, ty: u32) -> &mut Self {
        self.str(k.as_bytes()).u32(ty)
    }
    pub(crate) fn tensor(&mut self, name: &str, ne: &[i64], ty: u32, offset: u64) -> &mut Self {
        self.str(name.as_bytes()).u32(ne.len() as u32);
        for &n in ne {
            self.i64(n);
        }
        self.u32(ty).u64(offset)
    }
    pub(crate) fn pad(&mut self, align: usize) -> &mut Self {
        while self.0.len() % align != 0 {
            self.0.push(0);
        }
        self
    }
    pub(crate) fn data(&mut self, n: usize) -> &mut Self {
        self.0.extend((0..n).map(|i| (i * 7) as u8));
        self
    }
}

pub(crate) const GGUF_U32: u32 = 4;
const GGUF_BOOL: u32 = 7;
pub(crate) const GGUF_STRING: u32 = 8;
pub(crate) const GGUF_ARRAY: u32 = 9;
const GGUF_U64: u32 = 10;
pub(crate) const F32: u32 = 0;

/// The well-formed file every hostile case departs from: two metadata pairs
/// (a string and a u32 array) and two f32 tensors of 32 bytes each, so the
/// data ends exactly at the end of the file.
fn baseline() -> B {
    let mut b = B::header(3, 2, 2);
    b.key("general.architecture", GGUF_STRING).str(b"toy");
    b.key("a.arr", GGUF_ARRAY).u32(GGUF_U32).u64(3).u32(1).u32(2).u32(3);
    b.tensor("t0", &[4, 2], F32, 0).tensor("t1", &[8], F32, 32);
    b.pad(32).data(64);
    b
}

pub(crate) struct Files {
    dir: tempfile::TempDir,
    n: usize,
}

impl Files {
    pub(crate) fn new() -> Files {
        Files { dir: tempfile::tempdir().unwrap(), n: 0 }
    }
    fn write(&mut self, bytes: &[u8]) -> PathBuf {
        self.n += 1;
        let p = self.dir.path().join(format!("f{}.gguf", self.n));
        std::fs::write(&p, bytes).unwrap();
        p
    }
    /// Open `bytes` as a file; a successful open must give in-bounds tensor data.
    pub(crate) fn open(&mut self, bytes: &[u8]) -> ggml_rs::Result<GgufFile> {
        let p = self.write(bytes);
        let r = GgufFile::open(&p);
        if let Ok(f) = &r {
            for t in f.tensors() {
                assert!(t.offset + t.nbytes <= bytes.len(), "{}: data past the end accepted", t.name);
                assert_eq!(f.tensor_data(&t.name).unwrap().len(), t.nbytes);
                if t.dtype.can_dequantize() {
                    f.tensor_f32(&t.name).unwrap();
                }
            }
        }
        r
    }
    /// `bytes` must be refused with a GGUF error naming the file.
    pub(crate) fn refuse(&mut self, what: &str, bytes: &[u8]) -> String {
        match self.open(bytes) {
            Ok(f) => panic!("{what}: accepted {f:?}"),
            Err(e @ Error::Gguf { .. }) => {
                let msg = e.to_string();
                assert!(msg.contains(".gguf"), "{what}: the message names the file: {msg}");
                println!("{what}: {msg}");
                msg
            }
            Err(e) => panic!("{what}: unexpected error kind {e:?}"),
        }
    }
}

fn path_of(p: &Path) -> String {
    p.display().to_string()
}

#[test]
fn baseline_is_well_formed() {
    let mut fs = Files::new();
    let b = baseline();
    let f = fs.open(&b.0).unwrap();
    assert_eq!(f.get_str("general.architecture").unwrap(), "toy");
    assert_eq!(f.get("a.arr"), Some(&Value::Array(Array::U32(vec![1, 2, 3]))));
    assert_eq!(f.tensors().len(), 2);
    let t1 = f.tensor("t1").unwrap();
    assert_eq!(t1.offset + t1.nbytes, b.0.len(), "the data ends at the end of the file");
    assert!(path_of(f.path()).ends_with(".gguf"));
}

#[test]
fn truncated_at_every_offset() {
    let mut fs = Files::new();
    let b = baseline().0;
    let mut said_truncated = 0;
    for len in 0..b.len() {
        let msg = fs.refuse(&format!("truncated to {len} bytes"), &b[..len]);
        said_truncated += usize::from(msg.contains("(a truncated or incomplete file?)"));
    }
    // Cut inside an array's values, the count runs past the end: the message says what it likely is.
    assert!(said_truncated > 0, "no message suggested a truncated file");
}

#[test]
fn garbage_and_random_corruption_never_crash() {
    let mut fs = Files::new();
    let mut r = rng(42);
    // Pure garbage, with and without a valid magic.
    for i in 0..300 {
        let n = r.random_range(0..200);
        let mut g: Vec<u8> = (0..n).map(|_| r.random()).collect();
        if i % 2 == 1 && g.len() >= 4 {
            g[..4].copy_from_slice(b"GGUF");
        }
        if i % 2 == 0 {
            fs.refuse("garbage", &g);
        } else {
            let _ = fs.open(&g);
        }
    }
    // A valid file with 1 to 4 random bytes overwritten: anything may come
    // back, but never a crash or out-of-bounds data (checked in `open`).
    let b = baseline().0;
    let mut accepted = 0;
    for _ in 0..1500 {
        let mut m = b.clone();
        for _ in 0..r.random_range(1..=4) {
            let at = r.random_range(0..m.len());
            m[at] = r.random();
        }
        if fs.open(&m).is_ok() {
            accepted += 1;
        }
    }
    println!("random corruption: {accepted} of 1500 variants still well-formed");
}

#[test]
fn hostile_headers() {
    let mut fs = Files::new();
    let mut b = baseline();
    b.0[..4].copy_from_slice(b"GGUG");
    fs.refuse("bad magic", &b.0);
    // Files of the formats models are downloaded in, named with the way to a GGUF.
    let mut safetensors = 20u64.to_le_bytes().to_vec();
    safetensors.extend_from_slice(b"{\"__metadata__\":{}}  ");
    safetensors.extend_from_slice(&[0u8; 64]);
    let mut pickle = vec![0x80, 0x02];
    pickle.extend_from_slice(&[0u8; 64]);
    let mut zip = b"PK\x03\x04".to_vec();
    zip.extend_from_slice(&[0u8; 22]);
    zip.extend_from_slice(&(14u16).to_le_bytes());
    zip.extend_from_slice(&[0u8; 2]);
    zip.extend_from_slice(b"model/data.pkl");
    zip.extend_from_slice(&[0u8; 64]);
    let mut ggjt = 0x6767_6a74u32.to_le_bytes().to_vec();
    ggjt.extend_from_slice(&[0u8; 64]);
    for (bytes, says) in [
        (safetensors, "not a GGUF file: a safetensors file (convert the model to GGUF with llama.cpp's convert_hf_to_gguf.py)"),
        (pickle, "not a GGUF file: a PyTorch checkpoint"),
        (zip, "not a GGUF file: a PyTorch checkpoint"),
        (ggjt, "not a GGUF file: a file of the GGML formats before GGUF (convert it with llama.cpp's convert_llama_ggml_to_gguf.py)"),
    ] {
        let msg = fs.refuse(says, &bytes);
        assert!(msg.contains(says), "{msg}");
    }
    for v in [0u32, 1, 4, 0x0300_0000] {
        let mut b = baseline();
        b.0[4..8].copy_from_slice(&v.to_le_bytes());
        let msg = fs.refuse(&format!("version {v}"), &b.0);
        // version 3 as a big-endian file stores it
        let big = v == 0x0300_0000;
        assert_eq!(msg.contains("a big-endian GGUF (version 3 byte-swapped)"), big, "{msg}");
    }
    // Huge and negative counts.
    for (nt, nkv) in [(2, i64::MAX), (i64::MAX, 2), (2, -1), (-5, 2), (1 << 40, 2), (2, 1 << 40), (3, 2), (2, 3)] {
        let mut b = baseline();
        b.0[8..16].copy_from_slice(&nt.to_le_bytes());
        b.0[16..24].copy_from_slice(&nkv.to_le_bytes());
        fs.refuse(&format!("counts {nt} tensors, {nkv} pairs"), &b.0);
    }
}

#[test]
fn hostile_metadata() {
    let mut fs = Files::new();
    let with_kv = |kv: &dyn Fn(&mut B)| -> Vec<u8> {
        let mut b = B::header(3, 1, 2);
        b.key("general.architecture", GGUF_STRING).str(b"toy");
        kv(&mut b);
        b.tensor("t0", &[8], F32, 0).pad(32).data(32);
        b.0
    };
    // The harness itself: a valid extra pair opens.
    fs.open(&with_kv(&|b| {
        b.key("ok", GGUF_BOOL).u8(1);
    }))
    .unwrap();

    fs.refuse(
        "key length past EOF",
        &with_kv(&|b| {
            b.u64(u64::MAX).u32(GGUF_U32).u32(1);
        }),
    );
    fs.refuse(
        "key length of 1 GiB",
        &with_kv(&|b| {
            b.u64(1 << 30);
        }),
    );
    fs.refuse(
        "string value length past EOF",
        &with_kv(&|b| {
            b.key("s", GGUF_STRING).u64(1 << 20).0.extend(b"short");
        }),
    );
    fs.refuse(
        "array of 2^62 u32",
        &with_kv(&|b| {
            b.key("a", GGUF_ARRAY).u32(GGUF_U32).u64(1 << 62).u32(1);
        }),
    );
    fs.refuse(
        "array of u64::MAX strings",
        &with_kv(&|b| {
            b.key("a", GGUF_ARRAY).u32(GGUF_STRING).u64(u64::MAX).str(b"x");
        }),
    );
    fs.refuse(
        "string in an array longer than the file",
        &with_kv(&|b| {
            b.key("a", GGUF_ARRAY).u32(GGUF_STRING).u64(2).str(b"x").u64(1 << 40);
        }),
    );
    fs.refuse(
        "duplicate key",
        &with_kv(&|b| {
            b.key("general.architecture", GGUF_STRING).str(b"again");
        }),
    );
    fs.refuse(
        "empty key",
        &with_kv(&|b| {
            b.key("", GGUF_U32).u32(1);
        }),
    );
    fs.refuse(
        "non-UTF-8 key",
        &with_kv(&|b| {
            b.str(&[0xff, 0xfe, 0x41]).u32(GGUF_U32).u32(1);
        }),
    );
    fs.refuse(
        "bool byte 2",
        &with_kv(&|b| {
            b.key("flag", GGUF_BOOL).u8(2);
        }),
    );
    fs.refuse(
        "bool array with a 2",
        &with_kv(&|b| {
            b.key("flags", GGUF_ARRAY).u32(GGUF_BOOL).u64(3).u8(1).u8(2).u8(0);
        }),
    );
    fs.refuse(
        "unknown value type 13",
        &with_kv(&|b| {
            b.key("x", 13).u32(0);
        }),
    );
    fs.refuse(
        "unknown value type 0xffffffff",
        &with_kv(&|b| {
            b.key("x", u32::MAX).u32(0);
        }),
    );
    fs.refuse(
        "unknown array element type",
        &with_kv(&|b| {
            b.key("x", GGUF_ARRAY).u32(99).u64(1).u32(0);
        }),
    );
    fs.refuse(
        "nested array",
        &with_kv(&|b| {
            b.key("x", GGUF_ARRAY).u32(GGUF_ARRAY).u64(1).u32(GGUF_U32).u64(1).u32(5);
        }),
    );
    for (what, align) in [("alignment 0", 0u32), ("alignment 3", 3), ("alignment 48", 48)] {
        fs.refuse(
            what,
            &with_kv(&|b| {
                b.key("general.alignment", GGUF_U32).u32(align);
            }),
        );
    }
    fs.refuse(
        "alignment as u64",
        &with_kv(&|b| {
            b.key("general.alignment", GGUF_U64).u64(32);
        }),
    );
    fs.refuse(
        "alignment as an array",
        &with_kv(&|b| {
            b.key("general.alignment", GGUF_ARRAY).u32(GGUF_U32).u64(1).u32(32);
        }),
    );
    // A valid non-default alignment whose data section is not padded to it
    // puts the data past the end of the file.
    fs.refuse(
        "alignment 4096 without padding",
        &with_kv(&|b| {
            b.key("general.alignment", GGUF_U32).u32(4096);
        }),
    );
}

#[test]
fn hostile_tensor_infos() {
    let mut fs = Files::new();
    // One tensor, described by `info`, followed by `data` bytes after padding.
    let one = |info: &dyn Fn(&mut B), data: usize| -> Vec<u8> {
        let mut b = B::header(3, 1, 0);
        info(&mut b);
        b.pad(32).data(data);
        b.0
    };
    fs.open(&one(
        &|b| {
            b.tensor("t", &[4, 2], F32, 0);
        },
        32,
    ))
    .unwrap();

    fs.refuse(
        "n_dims 5",
        &one(
            &|b| {
                b.tensor("t", &[1, 1, 1, 1, 2], F32, 0);
            },
            64,
        ),
    );
    fs.refuse(
        "n_dims u32::MAX",
        &one(
            &|b| {
                b.str(b"t").u32(u32::MAX).i64(1);
            },
            64,
        ),
    );
    fs.refuse(
        "negative dimension",
        &one(
            &|b| {
                b.tensor("t", &[-1, 2], F32, 0);
            },
            64,
        ),
    );
    fs.refuse(
        "i64::MIN dimension",
        &one(
            &|b| {
                b.tensor("t", &[4, i64::MIN], F32, 0);
            },
            64,
        ),
    );
    fs.refuse(
        "element count overflows i64",
        &one(
            &|b| {
                b.tensor("t", &[i64::MAX, 2], F32, 0);
            },
            64,
        ),
    );
    fs.refuse(
        "byte size overflows",
        &one(
            &|b| {
                b.tensor("t", &[1 << 31, 1 << 31], F32, 0);
            },
            64,
        ),
    );
    fs.refuse(
        "unknown tensor type 9999",
        &one(
            &|b| {
                b.tensor("t", &[8], 9999, 0);
            },
            64,
        ),
    );
    fs.refuse(
        "removed tensor type 4 (Q4_2)",
        &one(
            &|b| {
                b.tensor("t", &[32], 4, 0);
            },
            64,
        ),
    );
    fs.refuse(
        "row not a multiple of the Q8_0 block",
        &one(
            &|b| {
                b.tensor("t", &[33], 8, 0);
            },
            64,
        ),
    );
    fs.refuse(
        "tensor name of 64 bytes",
        &one(
            &|b| {
                b.tensor(&"n".repeat(64), &[8], F32, 0);
            },
            64,
        ),
    );
    fs.refuse(
        "tensor name length past EOF",
        &one(
            &|b| {
                b.u64(1 << 50);
            },
            64,
        ),
    );
    fs.refuse(
        "offset u64::MAX",
        &one(
            &|b| {
                b.tensor("t", &[8], F32, u64::MAX);
            },
            64,
        ),
    );
    fs.refuse(
        "offset 2^40",
        &one(
            &|b| {
                b.tensor("t", &[8], F32, 1 << 40);
            },
            64,
        ),
    );
    fs.refuse(
        "offset not where the data section says",
        &one(
            &|b| {
                b.tensor("t", &[8], F32, 32);
            },
            64,
        ),
    );
    fs.refuse(
        "data past EOF",
        &one(
            &|b| {
                b.tensor("t", &[1 << 20], F32, 0);
            },
            64,
        ),
    );
    fs.refuse(
        "data one byte short",
        &one(
            &|b| {
                b.tensor("t", &[8], F32, 0);
            },
            31,
        ),
    );

    // Two tensors.
    let two = |second: &str, off: u64| -> Vec<u8> {
        let mut b = B::header(3, 2, 0);
        b.tensor("t0", &[8], F32, 0).tensor(second, &[8], F32, off);
        b.pad(32).data(64);
        b.0
    };
    fs.open(&two("t1", 32)).unwrap();
    fs.refuse("duplicate tensor name", &two("t0", 32));
    fs.refuse("overlapping tensors", &two("t1", 0));
    fs.refuse("second tensor past EOF", &two("t1", 64));
}

#[test]
fn zero_sized_tensors_do_not_crash() {
    // ggml accepts dimensions of 0; whatever our reader decides, it must not crash.
    let mut fs = Files::new();
    for ne in [vec![0i64, 3], vec![4, 0], vec![0]] {
        let mut b = B::header(3, 1, 0);
        b.tensor("z", &ne, F32, 0).pad(32);
        match fs.open(&b.0) {
            Ok(_) => println!("tensor of shape {ne:?}: accepted"),
            Err(e) => println!("tensor of shape {ne:?}: {e}"),
        }
    }
}

#[test]
fn reads_non_default_alignment() {
    // ggml's writer always uses 32 (so ours refuses other values, see
    // writer_refuses_bad_input), but files written elsewhere may use another.
    for align in [64usize, 8] {
        let mut b = B::header(3, 2, 1);
        b.key("general.alignment", GGUF_U32).u32(align as u32);
        b.tensor("t0", &[3], F32, 0).tensor("t1", &[2], F32, align.max(12).div_ceil(align) as u64 * align as u64);
        b.pad(align).data(align.max(12).div_ceil(align) * align + 8);
        let mut fs = Files::new();
        let f = fs.open(&b.0).unwrap();
        assert_eq!(f.alignment(), align);
        for t in f.tensors() {
            assert_eq!(t.offset % align, 0, "{}", t.name);
        }
    }
}
