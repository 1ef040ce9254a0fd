//! ggml's CPU build without cmake: the `cc` crate compiles the same sources
//! with the same definitions and flags as ggml's CMakeLists do for our options
//! (static, `GGML_NATIVE=OFF`, `GGML_LLAMAFILE=ON`, no OpenMP, no BLAS), so a
//! machine with Rust and a C/C++ compiler alone can build toy. One exception:
//! `ggml-quants.c` is vectorized for AVX2 too (`QUANTS_FLAGS`, bit-identical
//! results), as the CPU backend already requires AVX2.
//!
//! Read off `compile_commands.json` of the cmake build of ggml 0.26.0 (cmake
//! 3.25, gcc 12, x86-64). Only x86-64 is described here; other targets and the
//! CUDA / Metal / dynamic builds go through cmake (`build.rs`).

use std::fs;
use std::path::{Path, PathBuf};

/// Sources of `ggml-base` (C, then C++), relative to `src/`.
const BASE_C: &[&str] = &["ggml.c", "ggml-alloc.c"];
const QUANTS_C: &[&str] = &["ggml-quants.c"];
const BASE_CXX: &[&str] = &["ggml.cpp", "ggml-backend.cpp", "ggml-backend-meta.cpp", "ggml-opt.cpp", "ggml-threading.cpp", "gguf.cpp"];
/// Sources of the CPU backend on x86-64, relative to `src/`.
const CPU_C: &[&str] = &["ggml-cpu/ggml-cpu.c", "ggml-cpu/quants.c", "ggml-cpu/arch/x86/quants.c"];
const CPU_CXX: &[&str] = &[
    "ggml-cpu/ggml-cpu.cpp",
    "ggml-cpu/repack.cpp",
    "ggml-cpu/hbm.cpp",
    "ggml-cpu/traits.cpp",
    "ggml-cpu/amx/amx.cpp",
    "ggml-cpu/amx/mmq.cpp",
    "ggml-cpu/tiled/tiled.cpp",
    "ggml-cpu/tiled/tiled-kernel.cpp",
    "ggml-cpu/binary-ops.cpp",
    "ggml-cpu/unary-ops.cpp",
    "ggml-cpu/vec.cpp",
    "ggml-cpu/ops.cpp",
    "ggml-cpu/llamafile/sgemm.cpp",
    "ggml-cpu/llamafile/toy-sgemm.cpp",
    "ggml-cpu/arch/x86/repack.cpp",
];
/// The backend registry (`ggml`), which links the CPU backend in.
const REG_CXX: &[&str] = &["ggml-backend-dl.cpp", "ggml-backend-reg.cpp"];

/// `GGML_NATIVE=OFF` on x86-64: AVX2, FMA, F16C, BMI2 (what `-march=haswell` has).
const X86_DEFINES: &[&str] = &["GGML_AVX", "GGML_AVX2", "GGML_BMI2", "GGML_F16C", "GGML_FMA", "GGML_SSE42"];
const X86_FLAGS: &[&str] = &["-msse4.2", "-mf16c", "-mfma", "-mbmi2", "-mavx", "-mavx2"];

/// ggml-quants.c (ggml-base's reference quantization and dequantization,
/// which the CPU backend calls to dequantize a frozen base): vectorized for
/// AVX2 like the CPU backend, without contracting `x*d + m` into FMAs, so
/// that every value is rounded as in the plain C (bit-identical results).
const QUANTS_FLAGS: &[&str] = &["-mavx2", "-mfma", "-mf16c", "-ffp-contract=off"];

/// Whether this target is one this module describes (the others use cmake).
pub fn supported(target_arch: &str, target_env: &str) -> bool {
    target_arch == "x86_64" && target_env != "msvc"
}

/// One group of sources compiled alike.
struct Unit<'a> {
    files: &'a [&'a str],
    cxx: bool,
    cpu: bool,
    defines: &'a [&'a str],
    flags: &'a [&'a str],
}

/// Compile ggml's CPU build from the patched folder `ggml_dir` into one static
/// library `libggml.a` in `out_dir` and tell cargo to link it. Always `-O3`:
/// ggml's kernels are the tests' hot path, whatever the Rust profile.
pub fn build(ggml_dir: &Path, out_dir: &Path) -> Result<(), String> {
    let src = ggml_dir.join("src");
    let gen = out_dir.join("ggml-gen");
    fs::create_dir_all(&gen).map_err(|e| format!("{}: {e}", gen.display()))?;
    // ggml-version.h, as ggml's cmake writes it from ggml-version.h.in.
    let version_in = fs::read_to_string(src.join("ggml-version.h.in")).map_err(|e| format!("ggml-version.h.in: {e}"))?;
    let version = version_in.replace("@GGML_VERSION@", "0.26.0").replace("@GGML_BUILD_COMMIT@", "unknown");
    fs::write(gen.join("ggml-version.h"), version).map_err(|e| format!("ggml-version.h: {e}"))?;

    let cpu_defs = ["GGML_USE_CPU_REPACK", "GGML_USE_LLAMAFILE"];
    let units = [
        Unit { files: BASE_C, cxx: false, cpu: false, defines: &[], flags: &[] },
        Unit { files: QUANTS_C, cxx: false, cpu: false, defines: &[], flags: QUANTS_FLAGS },
        Unit { files: BASE_CXX, cxx: true, cpu: false, defines: &[], flags: &[] },
        Unit { files: CPU_C, cxx: false, cpu: true, defines: &cpu_defs, flags: &[] },
        Unit { files: CPU_CXX, cxx: true, cpu: true, defines: &cpu_defs, flags: &[] },
        Unit { files: REG_CXX, cxx: true, cpu: false, defines: &["GGML_USE_CPU"], flags: &[] },
    ];
    let mut objects: Vec<PathBuf> = Vec::new();
    for u in &units {
        let mut b = compiler(ggml_dir, &gen, u.cxx);
        for d in u.defines {
            b.define(d, None);
        }
        for f in u.flags {
            b.flag(f);
        }
        if u.cpu {
            b.include(ggml_dir).include(src.join("ggml-cpu"));
            for d in X86_DEFINES {
                b.define(d, None);
            }
            for f in X86_FLAGS {
                b.flag(f);
            }
        }
        for f in u.files {
            let p = src.join(f);
            if !p.is_file() {
                return Err(format!("{} is missing from the ggml source", p.display()));
            }
            b.file(p);
        }
        objects.extend(b.try_compile_intermediates().map_err(|e| format!("compiling ggml: {e}"))?);
    }
    // One archive, so the link order of ggml's libraries (which call each other) cannot matter.
    compiler(ggml_dir, &gen, true).objects(&objects).try_compile("ggml").map_err(|e| format!("archiving ggml: {e}"))?;
    Ok(())
}

/// A `cc::Build` with the definitions and flags every ggml source gets.
fn compiler(ggml_dir: &Path, gen: &Path, cxx: bool) -> cc::Build {
    let mut b = cc::Build::new();
    b.cpp(cxx)
        .std(if cxx { "gnu++17" } else { "gnu11" })
        .opt_level(3)
        .debug(false)
        .pic(true)
        .warnings(false)
        .cargo_warnings(false)
        .define("NDEBUG", None)
        .define("GGML_SCHED_MAX_COPIES", "4")
        .define("_GNU_SOURCE", None)
        .define("_XOPEN_SOURCE", "600")
        .include(ggml_dir.join("src"))
        .include(gen)
        .include(ggml_dir.join("include"));
    b
}
