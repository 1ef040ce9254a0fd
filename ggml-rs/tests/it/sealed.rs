//! [`ggml_rs::Element`] is sealed: `Tensor::read`/`write` copy raw bytes on
//! the promise that the Rust type has the ggml type's size and no invalid bit
//! patterns, so no type outside the crate may implement it. Checked by
//! compiling small crates against the `ggml_rs` library this test links
//! (found next to the test binary, with its dependencies).

use std::path::{Path, PathBuf};
use std::process::Command;

/// The newest `libggml_rs-*.rlib` in `deps` (the one cargo just built for this test).
fn ggml_rs_rlib(deps: &Path) -> PathBuf {
    std::fs::read_dir(deps)
        .expect("the test binary's folder")
        .filter_map(|e| e.ok())
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with("libggml_rs-") && n.ends_with(".rlib")
        })
        .max_by_key(|e| e.metadata().and_then(|m| m.modified()).ok())
        .map(|e| e.path())
        .unwrap_or_else(|| panic!("no libggml_rs-*.rlib in {}", deps.display()))
}

/// Type-check `src` as a library crate that uses `ggml_rs`: (compiled, rustc's messages).
fn compile(src: &str) -> (bool, String) {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("case.rs");
    std::fs::write(&file, src).unwrap();
    let out = Command::new("rustc")
        .args(["--edition", "2021", "--crate-type", "lib", "--emit", "metadata", "--out-dir"])
        .arg(dir.path())
        .arg("-L")
        .arg(format!("dependency={}", deps.display()))
        .arg("--extern")
        .arg(format!("ggml_rs={}", ggml_rs_rlib(deps).display()))
        .arg(&file)
        .output()
        .expect("rustc runs");
    (out.status.success(), String::from_utf8_lossy(&out.stderr).into_owned())
}

#[test]
fn element_cannot_be_implemented_outside_the_crate() {
    // The set-up works: the crate's own element types can be used generically.
    let (ok, msg) = compile("pub fn dtype<T: ggml_rs::Element>() -> ggml_rs::DType { T::DTYPE }\n");
    assert!(ok, "a crate using ggml_rs::Element should compile: {msg}");

    // A type smaller than the ggml type (reads would copy past the Vec) and a
    // reference (reads would make one out of tensor bytes).
    for (ty, dtype) in [("pub struct Small(u8);", "F32"), ("pub struct Evil(&'static u64);", "I64")] {
        let name = ty.split(['(', ' ']).nth(2).unwrap();
        let src = format!(
            "#[derive(Clone, Copy)] {ty}\n\
             impl Default for {name} {{ fn default() -> Self {{ unimplemented!() }} }}\n\
             impl ggml_rs::Element for {name} {{ const DTYPE: ggml_rs::DType = ggml_rs::DType::{dtype}; }}\n"
        );
        let (ok, msg) = compile(&src);
        assert!(!ok, "implementing Element for {name} must not compile");
        assert!(msg.contains("Sealed"), "refused because the trait is sealed, not for another reason: {msg}");
    }
}
