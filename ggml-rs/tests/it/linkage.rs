//! A build with a loadable CPU module (`--features dynamic`, what
//! `scripts/dist.sh` builds for GPU machines) links ggml and ggml-base only:
//! nothing that ggml-cpu.h declares may be called outside a static-only test.
//! Stop 51's `ggml_get_type_traits_cpu` in `cpy`'s checks broke that link, and
//! no test builds the dynamic feature (it needs cmake).

use std::path::Path;

/// The functions ggml-cpu.h of ggml 0.26.0 declares (exported by ggml-cpu only).
const CPU_ONLY: &[&str] = &[
    "ggml_backend_cpu_",
    "ggml_backend_is_cpu",
    "ggml_cpu_",
    "ggml_get_f32_",
    "ggml_get_i32_",
    "ggml_get_type_traits_cpu",
    "ggml_graph_compute",
    "ggml_graph_plan",
    "ggml_is_numa",
    "ggml_new_f32",
    "ggml_new_i32",
    "ggml_numa_init",
    "ggml_set_f32",
    "ggml_set_i32",
    "ggml_threadpool_",
];

/// Every `sys::NAME` call of a CPU-only function in the `.rs` files under `dir`,
/// before the file's test module (`#[cfg(test)]` or `#[cfg(all(test, ...))]`).
fn cpu_only_calls(dir: &Path, found: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            cpu_only_calls(&path, found);
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            if line.trim_start().starts_with("#[cfg(test)]") || line.trim_start().starts_with("#[cfg(all(test") {
                break;
            }
            for name in CPU_ONLY {
                if line.contains(&format!("sys::{name}")) {
                    found.push(format!("{}:{}: {}", path.display(), i + 1, line.trim()));
                }
            }
        }
    }
}

#[test]
fn library_code_calls_nothing_only_ggml_cpu_exports() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    for crate_dir in [root.to_path_buf(), root.join("../toy-cli"), root.join("../toy-stories")] {
        if crate_dir.join("src").is_dir() {
            cpu_only_calls(&crate_dir.join("src"), &mut found);
        }
    }
    assert!(found.is_empty(), "calls that a --features dynamic build cannot link:\n{}", found.join("\n"));
}
