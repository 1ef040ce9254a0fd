//! The seventh reliability pass (a new user's trial): a prepared corpus whose
//! token files were rewritten in place, the CPU's free memory, and the step
//! events a killed run logged after its last checkpoint.

use crate::common::process::{fails, ok, toy};
use std::path::Path;
use std::process::Output;
use toy_stories as stories;

const QUICK: &[&str] = &["--preset", "smoke", "--threads", "1", "--log-every", "1000", "--eval-every", "0"];

/// `toy train --resume R --threads 1 --steps STEPS` with `extra`.
fn resume(dir: &Path, steps: &str, extra: &[&str]) -> Output {
    toy(dir, &[&["train", "--resume", "R", "--threads", "1", "--steps", steps], extra].concat())
}

/// Rewrite the u32 ids of `path` in place (the same file, the same size)
/// through `f`, which must change them.
fn rewrite_ids(path: &Path, f: impl Fn(&mut Vec<u32>)) {
    use std::io::Write;
    let bytes = std::fs::read(path).unwrap();
    let mut ids: Vec<u32> = bytes.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    f(&mut ids);
    let out: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    assert!(out != bytes && out.len() == bytes.len(), "{} did not change", path.display());
    let mut file = std::fs::OpenOptions::new().write(true).open(path).unwrap();
    file.write_all(&out).unwrap();
}

/// The line of `R/config.toml` that records the token files' SHA-256, if any.
fn ids_line(dir: &Path) -> Option<String> {
    let config = std::fs::read_to_string(dir.join("R/config.toml")).unwrap();
    config.lines().find(|l| l.starts_with("corpus_ids_sha256 = ")).map(str::to_string)
}

/// F4: a prepared folder's train.bin or val.bin rewritten in place with other
/// ids of the same size (manifest.json untouched) is refused on resume, naming
/// the files; `--allow-corpus-change` goes on with it; a run whose config.toml
/// predates the record (no `corpus_ids_sha256`) resumes and records it.
#[test]
fn resume_refuses_rewritten_token_files() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("c.txt"), stories::generate_with(5, 40)).unwrap();
    ok(&toy(t, &["prep", "c.txt", "--vocab-size", "300", "--out", "p"]));
    ok(&toy(t, &[&["train", "--corpus", "p", "--steps", "2", "--save-every", "1", "--out", "R"], QUICK].concat()));
    let recorded = ids_line(t).expect("config.toml records the token files");
    let manifest = std::fs::read(t.join("p/manifest.json")).unwrap();

    rewrite_ids(&t.join("p/train.bin"), |ids| ids.reverse());
    assert_eq!(std::fs::read(t.join("p/manifest.json")).unwrap(), manifest);
    fails(&resume(t, "4", &[]), "train", "its token files train.bin and val.bin were rewritten");
    assert!(!t.join("R/weights/step_3.gguf").exists(), "the refused resume trained");
    assert_eq!(ids_line(t).as_ref(), Some(&recorded), "the refused resume changed config.toml");
    ok(&resume(t, "3", &["--allow-corpus-change"]));
    let taken = ids_line(t).unwrap();
    assert_ne!(taken, recorded, "the resume did not record the token files it went on with");
    ok(&resume(t, "4", &[])); // the new ids are the run's now

    rewrite_ids(&t.join("p/val.bin"), |ids| ids.rotate_left(1));
    fails(&resume(t, "5", &[]), "train", "train.bin and val.bin were rewritten");
    // A run started by a build that recorded the manifest alone: nothing to check.
    let config = std::fs::read_to_string(t.join("R/config.toml")).unwrap();
    std::fs::write(t.join("R/config.toml"), config.replace(&format!("{taken}\n"), "")).unwrap();
    assert_eq!(ids_line(t), None);
    ok(&resume(t, "5", &[]));
    assert!(ids_line(t).is_some_and(|l| l != taken), "the resume did not record the token files");
}

/// `MemAvailable` of /proc/meminfo in bytes.
fn mem_available() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap();
    let kib = meminfo.lines().find_map(|l| l.strip_prefix("MemAvailable:")).unwrap().split_whitespace().next().unwrap();
    kib.parse::<u64>().unwrap() * 1024
}

/// F6: the CPU's free memory is the host's available memory (ggml's CPU
/// device reports its total as free), so `toy devices` and the memory check
/// before training no longer take all of RAM as free.
#[cfg(target_os = "linux")]
#[test]
fn the_cpus_free_memory_is_what_linux_has_available() {
    let tmp = tempfile::tempdir().unwrap();
    let before = mem_available();
    let o = toy(tmp.path(), &["devices", "--json"]);
    let after = mem_available();
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let cpu = v["devices"].as_array().unwrap().iter().find(|d| d["kind"] == "cpu").expect("a CPU device");
    let (free, total) = (cpu["memory_free"].as_u64().unwrap(), cpu["memory_total"].as_u64().unwrap());
    assert!(free < total, "free {free} is not below total {total}");
    // MemAvailable moves while other processes run: within 256 MiB of what it was around the call.
    let slack = 256 << 20;
    let (lo, hi) = (before.min(after).saturating_sub(slack), before.max(after) + slack);
    assert!((lo..=hi).contains(&free), "free {free} is not MemAvailable ({before}..{after})");
    let text = String::from_utf8_lossy(&toy(tmp.path(), &["devices"]).stdout).into_owned();
    let row = text.lines().find(|l| l.starts_with("cpu ")).expect("a cpu row");
    let mib: Vec<u64> = row.split_whitespace().filter_map(|w| w.parse().ok()).take(2).collect();
    assert!(mib.len() == 2 && mib[0] < mib[1], "{row}");
}
