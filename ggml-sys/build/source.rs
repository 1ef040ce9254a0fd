//! Where the ggml source comes from, and how our patches are applied to a
//! private copy of it.

use sha2::{Digest, Sha256};
use std::env;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Command;

/// The package that ships the pinned ggml, and its exact version.
const PIN_PACKAGE: &str = "llama-cpp-sys-2";
const PIN_VERSION: &str = "0.1.161";

/// Find the upstream ggml folder: `GGML_SOURCE_DIR`, or the pinned package,
/// downloaded (and checksum-verified against `vendor/ggml-source/Cargo.lock`)
/// by `cargo metadata`.
pub fn locate(root: &Path) -> Result<PathBuf, String> {
    if let Some(dir) = env::var_os("GGML_SOURCE_DIR") {
        let dir = PathBuf::from(dir);
        if !dir.join("include/ggml.h").is_file() || !dir.join("CMakeLists.txt").is_file() {
            return Err(format!("GGML_SOURCE_DIR={} is not a ggml folder (expected include/ggml.h and CMakeLists.txt)", dir.display()));
        }
        return Ok(dir);
    }
    let manifest = root.join("vendor/ggml-source/Cargo.toml");
    let cargo = env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.args(["metadata", "--format-version", "1", "--locked", "--manifest-path"])
        .arg(&manifest)
        // The outer build's settings must not leak into this side query.
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    if env::var("CARGO_NET_OFFLINE").map(|v| v == "true").unwrap_or(false) {
        cmd.arg("--offline");
    }
    let out = cmd.output().map_err(|e| format!("cannot run cargo metadata: {e}"))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let last = err.lines().rfind(|l| !l.trim().is_empty()).unwrap_or("");
        return Err(format!(
            "cannot fetch the pinned ggml source ({PIN_PACKAGE} {PIN_VERSION}) with cargo: {last}; \
             set GGML_SOURCE_DIR to a ggml 0.26.0 folder to build offline"
        ));
    }
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).map_err(|e| format!("cargo metadata output: {e}"))?;
    let pkg = meta["packages"]
        .as_array()
        .and_then(|ps| ps.iter().find(|p| p["name"] == PIN_PACKAGE))
        .ok_or_else(|| format!("{PIN_PACKAGE} missing from cargo metadata"))?;
    if pkg["version"] != PIN_VERSION {
        return Err(format!("{PIN_PACKAGE} resolved to {} instead of {PIN_VERSION}", pkg["version"]));
    }
    let manifest_path = PathBuf::from(pkg["manifest_path"].as_str().unwrap_or_default());
    let dir = manifest_path.parent().unwrap_or(Path::new("")).join("llama.cpp/ggml");
    if !dir.join("include/ggml.h").is_file() {
        return Err(format!("{} has no ggml folder", dir.display()));
    }
    Ok(dir)
}

/// Patch files in `dir`, sorted by file name.
fn patch_files(dir: &Path) -> Result<Vec<PathBuf>, String> {
    let mut v: Vec<PathBuf> = match fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).filter(|p| p.extension().map(|x| x == "patch").unwrap_or(false)).collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    Ok(v)
}

/// Copy `upstream` to `work/ggml` and apply the patches, unless a copy made
/// from the same source and the same patches is already there. Returns the
/// patched folder. Re-running is idempotent: patches always go onto a fresh copy.
pub fn prepare(upstream: &Path, patches_dir: &Path, work: &Path) -> Result<PathBuf, String> {
    let patches = patch_files(patches_dir)?;
    let mut h = Sha256::new();
    h.update(upstream.to_string_lossy().as_bytes());
    for p in &patches {
        h.update(p.file_name().unwrap().to_string_lossy().as_bytes());
        h.update(fs::read(p).map_err(|e| format!("{}: {e}", p.display()))?);
    }
    let stamp: String = h.finalize().iter().map(|b| format!("{b:02x}")).collect();
    let dest = work.join("ggml");
    let stamp_file = work.join("stamp");
    if fs::read_to_string(&stamp_file).ok().as_deref() == Some(stamp.as_str()) && dest.is_dir() {
        return Ok(dest);
    }
    let _ = fs::remove_dir_all(work);
    copy_dir(upstream, &dest).map_err(|e| format!("copying ggml source: {e}"))?;
    for p in &patches {
        apply_patch(&dest, p)?;
    }
    fs::write(&stamp_file, &stamp).map_err(|e| e.to_string())?;
    Ok(dest)
}

fn copy_dir(src: &Path, dst: &Path) -> std::io::Result<()> {
    fs::create_dir_all(dst)?;
    for entry in fs::read_dir(src)? {
        let entry = entry?;
        let ty = entry.file_type()?;
        let to = dst.join(entry.file_name());
        if ty.is_dir() {
            copy_dir(&entry.path(), &to)?;
        } else {
            fs::copy(entry.path(), &to)?;
        }
    }
    Ok(())
}

/// Apply a unified diff (one or more files, paths relative to the ggml folder
/// with one leading component, as `git diff` writes them) to `root`; a file
/// diffed against `/dev/null` is created.
fn apply_patch(root: &Path, patch: &Path) -> Result<(), String> {
    let text = fs::read_to_string(patch).map_err(|e| format!("{}: {e}", patch.display()))?;
    let name = patch.file_name().unwrap().to_string_lossy().to_string();
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let starts: Vec<usize> =
        (0..lines.len()).filter(|&i| lines[i].starts_with("--- ") && lines.get(i + 1).is_some_and(|l| l.starts_with("+++ "))).collect();
    if starts.is_empty() {
        return Err(format!("patch {name} contains no file diff"));
    }
    for (k, &s) in starts.iter().enumerate() {
        let end = starts.get(k + 1).copied().unwrap_or(lines.len());
        // Trailing "diff --git" / "index" lines of the next file belong to it, not here.
        let mut e = end;
        while e > s + 2 && !(lines[e - 1].starts_with([' ', '+', '-', '\\', '@'])) {
            e -= 1;
        }
        let chunk: String = lines[s..e].concat();
        let target = lines[s + 1][4..].trim_end();
        let target = target.split('\t').next().unwrap_or(target);
        let rel = target.split_once('/').map(|(_, r)| r).unwrap_or(target);
        let path = root.join(rel);
        let parsed = diffy::Patch::from_str(&chunk).map_err(|e| format!("patch {name}: {rel}: {e}"))?;
        // A file the patch creates ("--- /dev/null") starts empty.
        let original = if lines[s].starts_with("--- /dev/null") {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
            }
            String::new()
        } else {
            fs::read_to_string(&path).map_err(|e| format!("patch {name}: {rel}: {e}"))?
        };
        let patched = diffy::apply(&original, &parsed).map_err(|e| format!("patch {name} does not apply to {rel}: {e}"))?;
        fs::write(&path, patched).map_err(|e| format!("{}: {e}", path.display()))?;
    }
    Ok(())
}
