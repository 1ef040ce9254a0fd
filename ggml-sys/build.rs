//! Build script: obtain the pinned ggml source through cargo, copy it into a
//! build-private folder, apply `patches/*.patch` in order, build it and link it.
//!
//! The CPU build on x86-64 needs only a C/C++ compiler: the `cc` crate compiles
//! ggml's sources with the flags its cmake build uses (`build/cpu.rs`). The
//! `cuda`, `metal` and `dynamic` features, other targets, and `TOY_GGML_CMAKE=1`
//! build through cmake and our wrapper project instead.
//!
//! Environment (all optional):
//! - `GGML_SOURCE_DIR`: a ggml folder to use instead of the pinned package.
//! - `TOY_GGML_CMAKE=1`: build with cmake even where the compiler alone would do.
//! - `GGML_*`, `CMAKE_*` (cmake builds): forwarded to cmake as `-D` definitions (ours
//!   win on conflict only for the options this crate must control, listed in `FORCED`).
//! - `CMAKE_CUDA_ARCHITECTURES` (feature `cuda`): default `90a` (H100/H200; the flash
//!   attention's wgmma kernels of patch 0069 need it; `90` or others for other GPUs).

use std::collections::BTreeMap;
use std::env;
use std::path::{Path, PathBuf};
use std::process::{exit, Command};

#[path = "build/cpu.rs"]
mod cpu;
#[path = "build/source.rs"]
mod source;

/// cmake options this crate decides; the environment cannot override them.
const FORCED: &[&str] = &[
    "BUILD_SHARED_LIBS",
    "GGML_BACKEND_DL",
    "GGML_STATIC",
    "GGML_BUILD_TESTS",
    "GGML_BUILD_EXAMPLES",
    "TOY_GGML_SOURCE_DIR",
    "GGML_CUDA",
    "GGML_METAL",
];

fn fail(msg: &str) -> ! {
    eprintln!("error: {msg}");
    println!("cargo:warning={msg}");
    exit(1);
}

fn tool_works(tool: &str, arg: &str) -> bool {
    Command::new(tool).arg(arg).output().map(|o| o.status.success()).unwrap_or(false)
}

/// Whether this build needs cmake: GPU backends, shared libraries, targets
/// `build/cpu.rs` does not describe, or `TOY_GGML_CMAKE=1`.
fn needs_cmake() -> bool {
    let arch = env::var("CARGO_CFG_TARGET_ARCH").unwrap_or_default();
    let target_env = env::var("CARGO_CFG_TARGET_ENV").unwrap_or_default();
    cfg!(any(feature = "cuda", feature = "metal", feature = "dynamic"))
        || !cpu::supported(&arch, &target_env)
        || env::var("TOY_GGML_CMAKE").map(|v| v == "1").unwrap_or(false)
}

/// Fail early with one line when the build tools are missing, after trying to
/// install them (`install`).
fn check_tools(cmake_needed: bool) {
    let cmake = env::var("CMAKE").unwrap_or_else(|_| "cmake".into());
    let cmake_works = || tool_works(&cmake, "--version");
    if cmake_needed && !(cmake_works() || install("cmake", "cmake") && cmake_works()) {
        fail("toy-ggml-sys: cmake not found: this build (GPU backend, shared libraries or a non-x86-64 target) needs cmake >= 3.14 (Debian/Ubuntu: `apt-get install cmake`, macOS: `brew install cmake`)");
    }
    let cc = env::var("CC").unwrap_or_else(|_| "cc".into());
    let cxx = env::var("CXX").unwrap_or_else(|_| "c++".into());
    let works = || tool_works(&cc, "--version") && tool_works(&cxx, "--version");
    if !(works() || install("g++", "") && works()) {
        fail("toy-ggml-sys: no C/C++ compiler found: install one (Debian/Ubuntu: `apt-get install g++`, macOS: `xcode-select --install`), or set CC and CXX");
    }
}

/// Install a missing build tool where that needs no question: apt-get as root
/// (or through password-less sudo), else brew. `TOY_NO_INSTALL=1` turns this off.
/// Says what it does as a cargo warning; true when the installer succeeded.
fn install(debian: &str, brew: &str) -> bool {
    println!("cargo:rerun-if-env-changed=TOY_NO_INSTALL");
    if env::var("TOY_NO_INSTALL").is_ok_and(|v| v == "1") {
        return false;
    }
    let run =
        |cmd: &mut Command| cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::null()).status().is_ok_and(|s| s.success());
    if tool_works("apt-get", "--version") {
        let root = Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0"));
        let sudo: &[&str] = if root {
            &[]
        } else if run(Command::new("sudo").args(["-n", "true"])) {
            &["sudo", "-n"]
        } else {
            return false;
        };
        println!("cargo:warning=toy-ggml-sys: installing {debian} with apt-get");
        let apt = |args: &[&str]| {
            let all: Vec<&str> = sudo.iter().chain(["apt-get"].iter()).chain(args).copied().collect();
            run(Command::new(all[0]).args(&all[1..]).env("DEBIAN_FRONTEND", "noninteractive"))
        };
        return apt(&["update", "-qq"]) && apt(&["install", "-y", "-qq", debian]);
    }
    if !brew.is_empty() && tool_works("brew", "--version") {
        println!("cargo:warning=toy-ggml-sys: installing {brew} with brew");
        return run(Command::new("brew").args(["install", brew]));
    }
    false
}

fn main() {
    let manifest_dir = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let out_dir = PathBuf::from(env::var("OUT_DIR").unwrap());
    let root = manifest_dir.parent().unwrap().to_path_buf();
    let patches_dir = root.join("patches");

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=build");
    println!("cargo:rerun-if-changed=cmake/CMakeLists.txt");
    println!("cargo:rerun-if-changed={}", patches_dir.display());
    println!("cargo:rerun-if-changed={}", root.join("vendor/ggml-source/Cargo.toml").display());
    println!("cargo:rerun-if-changed={}", root.join("vendor/ggml-source/Cargo.lock").display());
    println!("cargo:rerun-if-env-changed=GGML_SOURCE_DIR");
    println!("cargo:rerun-if-env-changed=CMAKE_CUDA_ARCHITECTURES");
    println!("cargo:rerun-if-env-changed=TOY_GGML_CMAKE");

    // docs.rs-style builds and `cargo doc` need no native library, nor does
    // clippy (a check build links nothing): the test command runs clippy
    // before the tests, and would otherwise compile ggml twice.
    println!("cargo:rerun-if-env-changed=RUSTC_WORKSPACE_WRAPPER");
    let clippy = env::var("RUSTC_WORKSPACE_WRAPPER").is_ok_and(|w| w.contains("clippy-driver"));
    if env::var_os("DOCS_RS").is_some() || clippy {
        return;
    }

    let cmake_needed = needs_cmake();
    check_tools(cmake_needed);

    let upstream = match source::locate(&root) {
        Ok(p) => p,
        Err(e) => fail(&format!("toy-ggml-sys: {e}")),
    };
    let ggml_dir = match source::prepare(&upstream, &patches_dir, &out_dir.join("ggml-src")) {
        Ok(p) => p,
        Err(e) => fail(&format!("toy-ggml-sys: {e}")),
    };
    println!("cargo:source_dir={}", ggml_dir.display());

    build_bindings(&ggml_dir, &out_dir);
    if !cmake_needed {
        if let Err(e) = cpu::build(&ggml_dir, &out_dir) {
            fail(&format!("toy-ggml-sys: {e}"));
        }
        if env::var("CARGO_CFG_TARGET_OS").as_deref() != Ok("macos") {
            println!("cargo:rustc-link-lib=dylib=m");
        }
        return;
    }
    let lib_dirs = build_ggml(&manifest_dir, &ggml_dir);
    link(&lib_dirs);
}

/// Environment `GGML_*` / `CMAKE_*` variables, forwarded to cmake.
fn passthrough_env() -> BTreeMap<String, String> {
    let mut defs = BTreeMap::new();
    for (k, v) in env::vars() {
        if (k.starts_with("GGML_") || k.starts_with("CMAKE_"))
            && k != "GGML_SOURCE_DIR"
            && k != "GGML_NO_BACKTRACE"
            && !FORCED.contains(&k.as_str())
        {
            println!("cargo:rerun-if-env-changed={k}");
            defs.insert(k, v);
        }
    }
    defs
}

fn build_ggml(manifest_dir: &Path, ggml_dir: &Path) -> Vec<PathBuf> {
    let dynamic = cfg!(feature = "dynamic");
    let mut cfg = cmake::Config::new(manifest_dir.join("cmake"));
    let on_off = |b: bool| if b { "ON" } else { "OFF" };

    cfg.profile("Release")
        .define("TOY_GGML_SOURCE_DIR", ggml_dir)
        .define("BUILD_SHARED_LIBS", on_off(dynamic))
        .define("GGML_BACKEND_DL", on_off(dynamic))
        .define("GGML_BUILD_TESTS", "OFF")
        .define("GGML_BUILD_EXAMPLES", "OFF")
        .define("GGML_CCACHE", "OFF")
        // Portable: AVX2/FMA/F16C on x86-64 but never -march=native, so a
        // binary built here runs on any x86-64 with AVX2.
        .define("GGML_NATIVE", "OFF")
        .define("GGML_OPENMP", "OFF")
        .define("GGML_BLAS", "OFF")
        .define("GGML_LLAMAFILE", "ON")
        .define("GGML_CUDA", on_off(cfg!(feature = "cuda")))
        .define("GGML_METAL", on_off(cfg!(feature = "metal")))
        .define("GGML_VULKAN", "OFF")
        .define("CMAKE_POSITION_INDEPENDENT_CODE", "ON");

    if cfg!(feature = "cuda") {
        let archs = env::var("CMAKE_CUDA_ARCHITECTURES").unwrap_or_else(|_| "90a".into());
        cfg.define("CMAKE_CUDA_ARCHITECTURES", archs)
            .define("GGML_CUDA_FA", "OFF")
            .define("GGML_CUDA_NCCL", "OFF")
            // Replay a training step's kernels as one CUDA graph (off by default in standalone ggml).
            .define("GGML_CUDA_GRAPHS", "ON")
            .define("CMAKE_CUDA_FLAGS", "-Xcompiler=-fPIC");
    }
    if cfg!(feature = "metal") {
        cfg.define("GGML_METAL_EMBED_LIBRARY", "ON").define("GGML_METAL_NDEBUG", "ON");
    }
    for (k, v) in passthrough_env() {
        cfg.define(k, v);
    }
    let jobs = env::var("NUM_JOBS").unwrap_or_else(|_| "2".into());
    cfg.env("CMAKE_BUILD_PARALLEL_LEVEL", jobs);
    // Build the libraries only; the install step of the nested project is not needed.
    cfg.build_target("all");
    let dst = cfg.build();
    let build = dst.join("build");
    let lib_dirs = vec![build.join("ggml/src"), build.join("ggml/src/ggml-cpu"), build.join("bin")];
    if dynamic {
        // Shared libraries and backend modules land in build/bin; dependents
        // (scripts, tests) find them through this metadata key.
        println!("cargo:lib_dir={}", build.join("bin").display());
    }
    lib_dirs
}

fn link(lib_dirs: &[PathBuf]) {
    for d in lib_dirs {
        println!("cargo:rustc-link-search=native={}", d.display());
    }
    // The CUDA / Metal backends' folders, when built in.
    for sub in ["ggml-cuda", "ggml-metal"] {
        println!("cargo:rustc-link-search=native={}", lib_dirs[0].join(sub).display());
    }
    let target_os = env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    if cfg!(feature = "dynamic") {
        println!("cargo:rustc-link-lib=dylib=ggml");
        println!("cargo:rustc-link-lib=dylib=ggml-base");
        copy_shared_libs(lib_dirs);
        return;
    }
    println!("cargo:rustc-link-lib=static=ggml");
    if cfg!(feature = "cuda") {
        println!("cargo:rustc-link-lib=static=ggml-cuda");
    }
    if cfg!(feature = "metal") {
        println!("cargo:rustc-link-lib=static=ggml-metal");
    }
    println!("cargo:rustc-link-lib=static=ggml-cpu");
    println!("cargo:rustc-link-lib=static=ggml-base");
    if cfg!(feature = "cuda") {
        if let Ok(cuda) = env::var("CUDA_PATH").or_else(|_| env::var("CUDA_HOME")) {
            println!("cargo:rustc-link-search=native={cuda}/lib64");
        } else {
            println!("cargo:rustc-link-search=native=/usr/local/cuda/lib64");
        }
        for l in ["cudart", "cublas", "cublasLt", "cuda"] {
            println!("cargo:rustc-link-lib=dylib={l}");
        }
    }
    match target_os.as_str() {
        "macos" | "ios" => {
            println!("cargo:rustc-link-lib=dylib=c++");
            for fw in ["Foundation", "Metal", "MetalKit", "Accelerate"] {
                println!("cargo:rustc-link-lib=framework={fw}");
            }
        }
        _ => {
            println!("cargo:rustc-link-lib=dylib=stdc++");
            println!("cargo:rustc-link-lib=dylib=m");
        }
    }
}

/// Copy `libggml*.so*` (and the CPU backend module) into the profile folder
/// (`target/<profile>/`), where binaries built with an `$ORIGIN` rpath find them.
fn copy_shared_libs(dirs: &[PathBuf]) {
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    // OUT_DIR is target/<profile>/build/<pkg>-<hash>/out.
    let Some(profile) = out.ancestors().nth(3) else { return };
    for dir in dirs {
        let Ok(rd) = std::fs::read_dir(dir) else { continue };
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with("libggml") && name.contains(".so") {
                let _ = std::fs::copy(e.path(), profile.join(&name));
            }
        }
    }
}

#[cfg(feature = "generate-bindings")]
fn build_bindings(ggml_dir: &Path, out_dir: &Path) {
    let include = ggml_dir.join("include");
    let mut builder = bindgen::Builder::default()
        .rust_target(bindgen::RustTarget::stable(82, 0).unwrap())
        .clang_arg(format!("-I{}", include.display()))
        .generate_comments(false)
        .prepend_enum_name(false)
        .layout_tests(false)
        .allowlist_item("(ggml|gguf|GGML|GGUF)_.*")
        .blocklist_item("ggml_backend_cpu_.*_numa.*")
        .opaque_type("FILE")
        .blocklist_type("FILE")
        .raw_line("pub type FILE = core::ffi::c_void;")
        .size_t_is_usize(true);
    for h in ["ggml.h", "ggml-alloc.h", "ggml-backend.h", "ggml-cpu.h", "gguf.h"] {
        builder = builder.header(include.join(h).to_string_lossy());
    }
    let bindings = builder.generate().unwrap_or_else(|e| {
        fail(&format!("toy-ggml-sys: bindgen failed ({e}); install libclang (Debian/Ubuntu: `apt-get install libclang-dev`)"))
    });
    bindings.write_to_file(out_dir.join("bindings.rs")).unwrap_or_else(|e| fail(&format!("toy-ggml-sys: cannot write bindings: {e}")));
}

#[cfg(not(feature = "generate-bindings"))]
fn build_bindings(_ggml_dir: &Path, _out_dir: &Path) {}
