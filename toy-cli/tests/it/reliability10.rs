//! The tenth reliability pass (stop 51).

use crate::common::process::{signal, wait_for};
use std::process::{Command, Stdio};

/// `toy train --json` stopped by a signal still prints its summary on stdout
/// (with `reason: interrupted` and the step it saved), then exits 128 + the
/// signal with the resume line on stderr: a script sees where the run is.
#[test]
fn an_interrupted_json_run_prints_its_summary() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("r");
    let mut child = Command::new(env!("CARGO_BIN_EXE_toy"))
        .args(["train", "--json", "--threads", "1", "--preset", "smoke", "--steps", "100000", "--out"])
        .arg(&run)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&run, "step", 5, &mut child);
    signal(&child, "-TERM");
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(143));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let s: serde_json::Value = serde_json::from_str(stdout.trim()).unwrap_or_else(|e| panic!("{e}: {stdout:?}"));
    assert_eq!(s["format"], "toy/train-v1");
    assert_eq!(s["reason"], "interrupted");
    let steps = s["steps"].as_u64().unwrap();
    assert!(steps >= 5 && run.join(format!("weights/step_{steps}.gguf")).is_file(), "{s}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains(&format!("interrupted at step {steps}; saved weights/step_{steps}.gguf")), "{err}");
}
