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

/// The records of `R/events.jsonl`.
fn events(dir: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(dir.join("R/events.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// The steps of the `kind` records of `R/events.jsonl`, in the log's order.
fn steps_of(dir: &Path, kind: &str) -> Vec<u64> {
    events(dir).iter().filter(|e| e["kind"] == kind).map(|e| e["step"].as_u64().unwrap()).collect()
}

/// F8: a run killed between checkpoints logged steps its resume takes again;
/// the resume drops them, so each step appears once, in order. Here the run
/// is really killed (`kill -9`) some steps past its first checkpoint.
#[test]
fn a_killed_runs_steps_appear_once_after_resume() {
    use crate::common::process::{signal, wait_for};
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let args = [&["train", "--steps", "100000", "--save-every", "20", "--out", "R"], QUICK].concat();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_toy"))
        .args(&args)
        .current_dir(t)
        .env_remove("TOY_RUN_ID")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&t.join("R"), "checkpoint", 1, &mut child);
    wait_for(&t.join("R"), "step", 25, &mut child);
    signal(&child, "-KILL");
    let _ = child.wait();
    let logged = steps_of(t, "step");
    let saved = *steps_of(t, "checkpoint").last().unwrap();
    let last = *logged.last().unwrap();
    assert!(last > saved, "the kill left no step after the checkpoint of step {saved}");
    let steps = (last + 3).to_string();
    ok(&resume(t, &steps, &[]));
    let logged = steps_of(t, "step");
    assert_eq!(logged, (1..=last + 3).collect::<Vec<_>>(), "each step once, in order");
    let resumed: Vec<_> = events(t).iter().filter(|e| e["kind"] == "resume").map(|e| e["from_step"].as_u64().unwrap()).collect();
    assert_eq!(resumed, [saved]);
}

/// F8, every kind of record: a finished run sent back to an earlier
/// checkpoint (`weights/latest` moved, as `toy` suggests when the newest is
/// damaged) loses its later steps, evals, checkpoints and `run_end`; what came
/// before stays byte for byte; a torn last line goes; `loss.svg` is drawn again.
#[test]
fn a_resume_forgets_what_came_after_its_checkpoint() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let args = ["train", "--preset", "smoke", "--threads", "1", "--log-every", "1000", "--eval-every", "2", "--steps", "6"];
    ok(&toy(t, &[&args[..], &["--save-every", "2", "--out", "R"]].concat()));
    assert_eq!((steps_of(t, "step"), steps_of(t, "checkpoint")), (vec![1, 2, 3, 4, 5, 6], vec![2, 4, 6]));
    let evals_to_2: Vec<u64> = steps_of(t, "eval").into_iter().filter(|&s| s <= 2).collect();
    // The log up to the checkpoint of step 2, and a torn line at its end.
    let text = std::fs::read_to_string(t.join("R/events.jsonl")).unwrap();
    let at = text.find(r#""kind":"checkpoint""#).unwrap();
    let before = &text[..at + text[at..].find('\n').unwrap() + 1];
    std::fs::write(t.join("R/events.jsonl"), format!(r#"{text}{{"kind":"step","t":1.0,"st"#)).unwrap();
    std::os::unix::fs::symlink("step_2.gguf", t.join("R/weights/latest.new")).unwrap();
    std::fs::rename(t.join("R/weights/latest.new"), t.join("R/weights/latest")).unwrap();
    std::fs::remove_file(t.join("R/loss.svg")).unwrap();
    ok(&resume(t, "5", &[]));
    let after = std::fs::read_to_string(t.join("R/events.jsonl")).unwrap();
    assert!(after.starts_with(before), "the records up to step 2 changed:\n{after}");
    assert_eq!(steps_of(t, "step"), [1, 2, 3, 4, 5]);
    let increasing = |v: &[u64]| v.windows(2).all(|w| w[0] < w[1]);
    let (evals, saves) = (steps_of(t, "eval"), steps_of(t, "checkpoint"));
    assert!(increasing(&evals) && evals.starts_with(&evals_to_2) && evals.iter().all(|&s| s <= 5), "{evals:?}");
    assert!(increasing(&saves) && saves.starts_with(&[2, 4]) && saves.iter().all(|&s| s <= 5), "{saves:?}");
    let kinds: Vec<String> = events(t).iter().map(|e| e["kind"].as_str().unwrap().to_string()).collect();
    assert_eq!(kinds.iter().filter(|k| *k == "run_end").count(), 1, "{kinds:?}");
    assert_eq!(kinds.last().map(String::as_str), Some("run_end"));
    assert!(t.join("R/loss.svg").is_file());
}
