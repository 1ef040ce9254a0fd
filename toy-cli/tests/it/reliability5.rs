//! The fifth reliability pass (a fresh user's trial, stop 47): a stop signal
//! during a long step of many micro-batches, a refused `--resume` that must
//! change nothing, `toy prep --force` into a corpus a run reads, and the
//! notes and messages that pass found unclear.

use crate::common::process::{fails, ok, signal, toy, wait_for};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

fn train(dir: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_toy"));
    c.env_remove("TOY_RUN_ID").current_dir(dir).args(["train", "--threads", "1", "--log-every", "1000"]).args(args);
    c
}

/// The loss the run printed for `step` (`step N: loss=X`).
fn loss_at(stdout: &[u8], step: u64) -> String {
    let text = String::from_utf8_lossy(stdout);
    let prefix = format!("step {step}: loss=");
    text.lines().find_map(|l| l.strip_prefix(&prefix).map(str::to_string)).unwrap_or_else(|| panic!("no loss of step {step} in {text}"))
}

/// A signal during a step of 3,000 micro-batches (`--grad-accum`) stops the
/// run between two of them, within a second, with the last whole step saved
/// (here the starting weights, step 0); `--resume` runs the dropped step again
/// on the same windows, so the run ends on the loss of a run never stopped.
#[test]
fn a_stop_lands_between_micro_batches_and_the_step_runs_again() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let args = ["--preset", "smoke", "--steps", "2", "--grad-accum", "3000", "--eval-every", "0"];
    let whole = train(t, &args).args(["--out", "whole"]).output().unwrap();
    ok(&whole);
    let mut child = train(t, &args).args(["--out", "cut"]).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    wait_for(&t.join("cut"), "run_start", 1, &mut child);
    std::thread::sleep(Duration::from_millis(300));
    signal(&child, "-INT");
    let t0 = Instant::now();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(t0.elapsed() < Duration::from_secs(2), "stopped {:?} after the signal: {err}", t0.elapsed());
    let said = format!("{}{err}", String::from_utf8_lossy(&out.stdout));
    assert!(said.contains("step 1: stopped between its micro-batches") && err.contains("saved weights/step_0.gguf"), "{said}");
    let resumed = train(t, &["--resume", "cut"]).output().unwrap();
    ok(&resumed);
    assert_eq!(loss_at(&resumed.stdout, 2), loss_at(&whole.stdout, 2));
}

/// `--resume` of a run whose newest checkpoint was deleted by hand: refused
/// in one line that names the intact older checkpoint and how to resume from
/// it, and nothing in the folder changes (the state of the deleted
/// checkpoint was removed as a leftover before).
#[test]
fn a_refused_resume_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, &["--preset", "smoke", "--steps", "4", "--save-every", "2", "--out", "r"]).output().unwrap());
    std::fs::remove_file(t.join("r/weights/step_4.gguf")).unwrap();
    let list = || {
        let mut v: Vec<String> =
            std::fs::read_dir(t.join("r/weights")).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into()).collect();
        v.sort();
        v
    };
    let before = list();
    let o = train(t, &["--resume", "r", "--steps", "6"]).output().unwrap();
    fails(&o, "train", "no checkpoint: weights/latest points to step_4.gguf, which is gone; step_2.gguf is intact");
    assert!(String::from_utf8_lossy(&o.stderr).contains("ln -sfn step_2.gguf"));
    assert_eq!(list(), before);
    assert!(before.contains(&"step_4.state.gguf".to_string()), "{before:?}");
}

/// `toy prep --force` into a prepared corpus that a run is reading is
/// refused, naming the file; once the run has ended it goes through.
#[test]
fn prep_force_refuses_a_corpus_a_run_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let text: String = (0..3000).map(|i| format!("word{} and word{} again. ", i % 97, i % 31)).collect();
    std::fs::write(t.join("a.txt"), text).unwrap();
    ok(&toy(t, &["prep", "a.txt", "--vocab-size", "300", "--out", "p"]));
    let mut child = train(t, &["--preset", "smoke", "--steps", "1000000", "--corpus", "p", "--out", "r"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    wait_for(&t.join("r"), "step", 1, &mut child);
    let o = toy(t, &["prep", "a.txt", "--vocab-size", "280", "--out", "p", "--force"]);
    signal(&child, "-KILL");
    let _ = child.wait();
    fails(&o, "prep", "train.bin is being read by a running toy train");
    ok(&toy(t, &["prep", "a.txt", "--vocab-size", "280", "--out", "p", "--force"]));
}

/// A model dimension above its bound is named with its value.
#[test]
fn a_dimension_too_large_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let o = train(tmp.path(), &["--preset", "smoke", "--d-ff", "100000000", "--steps", "1", "--out", "r"]).output().unwrap();
    fails(&o, "train", "d_ff 100000000 is too large (at most 262144)");
    assert!(!tmp.path().join("r").exists());
}

/// `--resume --steps N` of a run planned for fewer steps says, in its
/// `resuming` line, that the cosine schedule is planned again, with the rates
/// of the last step and the next.
#[test]
fn a_longer_resume_notes_the_new_schedule() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, &["--preset", "smoke", "--steps", "3", "--out", "r"]).output().unwrap());
    let o = train(t, &["--resume", "r", "--steps", "5"]).output().unwrap();
    ok(&o);
    let said = String::from_utf8_lossy(&o.stdout);
    assert!(
        said.contains("from its config.toml; --steps 5 re-plans the learning-rate schedule it had for 3 steps: step 3 ran at"),
        "{said}"
    );
}

/// A `--resume` refused once its folder is opened (here `events.jsonl`
/// replaced by a link) says only its one line: the `resuming` line on
/// stdout comes once the run has started.
#[test]
fn a_resume_refused_late_says_only_its_line() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, &["--preset", "smoke", "--steps", "2", "--out", "r"]).output().unwrap());
    std::fs::write(t.join("elsewhere.jsonl"), "").unwrap();
    std::fs::remove_file(t.join("r/events.jsonl")).unwrap();
    std::os::unix::fs::symlink(t.join("elsewhere.jsonl"), t.join("r/events.jsonl")).unwrap();
    let o = train(t, &["--resume", "r", "--steps", "3"]).output().unwrap();
    crate::common::process::fails_with(&o, 2, "symbolic link");
    assert!(o.stdout.is_empty(), "{}", String::from_utf8_lossy(&o.stdout));
}
