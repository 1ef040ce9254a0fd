//! Training runs survive interruptions, crashes and bad disks: exact resume,
//! SIGINT/SIGTERM, kill -9 during checkpoint writes, an unwritable checkpoint,
//! non-finite steps.

use crate::common::process::{count, signal, wait_for};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

fn toy() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_toy"));
    c.env_remove("TOY_RUN_ID");
    c
}

fn train(out: &Path, extra: &[&str]) -> Command {
    let mut c = toy();
    c.args(["train", "--threads", "1", "--log-every", "1000"]).arg("--out").arg(out).args(extra);
    c
}

/// Step losses by step, from events.jsonl (later entries win).
fn losses(run: &Path) -> std::collections::BTreeMap<u64, String> {
    let text = std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == "step")
        .map(|e| (e["step"].as_u64().unwrap(), e["loss"].to_string()))
        .collect()
}

fn last_event(run: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

fn latest(run: &Path) -> PathBuf {
    run.join("weights/latest")
}

#[test]
fn resume_after_sigint_gives_the_same_curve() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (dir.path().join("a"), dir.path().join("b"));
    let args = ["--preset", "smoke", "--steps", "60", "--seed", "5"];
    assert!(train(&a, &args).status().unwrap().success());
    let mut child = train(&b, &args).stdout(Stdio::null()).spawn().unwrap();
    wait_for(&b, "step", 20, &mut child);
    signal(&child, "-INT");
    let st = child.wait().unwrap();
    assert_eq!(st.code(), Some(130), "SIGINT must end the run with 130");
    let end = last_event(&b);
    assert_eq!(end["kind"], "run_end");
    assert_eq!(end["reason"], "interrupted");
    let stopped = end["final_step"].as_u64().unwrap();
    assert!(stopped < 60 && latest(&b).exists());
    let out = toy().args(["train", "--resume"]).arg(&b).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(count(&b, "resume"), 1);
    assert_eq!(losses(&a), losses(&b), "resumed at step {stopped}: the loss curve differs");
}

#[test]
fn sigterm_saves_and_exits_143() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("r");
    let mut child = train(&run, &["--preset", "smoke", "--steps", "100000"]).stdout(Stdio::null()).spawn().unwrap();
    wait_for(&run, "step", 5, &mut child);
    signal(&child, "-TERM");
    assert_eq!(child.wait().unwrap().code(), Some(143));
    assert_eq!(last_event(&run)["reason"], "interrupted");
    let out = toy().args(["describe"]).arg(latest(&run)).output().unwrap();
    assert!(out.status.success());
}

#[test]
fn kill_9_during_checkpoints_leaves_a_loadable_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    for (i, delay_ms) in [40u64, 90, 150, 230, 330].iter().enumerate() {
        let run = dir.path().join(format!("k{i}"));
        // A checkpoint every step: a kill lands inside a write most of the time.
        let mut child = train(&run, &["--preset", "tiny", "--steps", "100000", "--save-every", "1", "--eval-every", "0"])
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        wait_for(&run, "checkpoint", 1, &mut child);
        std::thread::sleep(Duration::from_millis(*delay_ms));
        signal(&child, "-KILL");
        child.wait().unwrap();
        let out = toy().args(["generate"]).arg(&run).args(["-n", "2", "--greedy", "--threads", "1"]).output().unwrap();
        assert!(out.status.success(), "after kill -9 the latest checkpoint does not load: {}", String::from_utf8_lossy(&out.stderr));
        // ... and the run can continue from it.
        let out = toy()
            .args(["train", "--resume"])
            .arg(&run)
            .args(["--steps", &(count(&run, "checkpoint") as u64 + 2).to_string(), "--threads", "1"])
            .output()
            .unwrap();
        assert!(out.status.success(), "resume after kill -9: {}", String::from_utf8_lossy(&out.stderr));
    }
}

#[test]
fn an_unwritable_checkpoint_ends_the_run_and_keeps_the_last_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("r");
    let mut child = train(&run, &["--preset", "tiny", "--steps", "40", "--save-every", "10", "--eval-every", "0"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&run, "checkpoint", 1, &mut child);
    // A folder where the next checkpoint should go: no write can replace it.
    std::fs::create_dir_all(run.join("weights/step_20.gguf/blocker")).unwrap();
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("toy train: ") && err.contains("step_20") && err.contains("last good checkpoint"), "{err}");
    let end = last_event(&run);
    assert_eq!((end["kind"].as_str(), end["reason"].as_str()), (Some("run_end"), Some("errored")));
    assert_eq!(std::fs::read_link(latest(&run)).unwrap(), PathBuf::from("step_10.gguf"));
    assert!(toy().args(["describe"]).arg(latest(&run)).output().unwrap().status.success());
}

#[test]
fn a_non_finite_step_stops_without_a_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("r");
    let out = train(&run, &["--preset", "smoke", "--steps", "30", "--lr", "1e30", "--warmup-steps", "0"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("non-finite"), "{err}");
    // Nothing was saved: no folder is left to resume (see reliability3_runs).
    assert!(err.contains("removed") && !run.exists(), "a run that saved nothing left its folder: {err}");

    let run2 = dir.path().join("s");
    let out =
        train(&run2, &["--preset", "smoke", "--steps", "30", "--lr", "1e30", "--warmup-steps", "0", "--skip-nonfinite"]).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(count(&run2, "skip") > 0);
    assert_eq!(last_event(&run2)["reason"], "completed");
    // A skipped last step still ends with the run's final checkpoint.
    assert_eq!(std::fs::read_link(latest(&run2)).unwrap(), PathBuf::from("step_30.gguf"));

    // Resumed from those weights, every step is skipped: nothing trained, so
    // the run fails and its earlier checkpoint is left as it was.
    let out = toy().args(["train", "--resume"]).arg(&run2).args(["--steps", "33"]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.starts_with("toy train: ") && err.contains("all 3 steps") && !err.contains("Some("), "{err}");
    assert_eq!(std::fs::read_link(latest(&run2)).unwrap(), PathBuf::from("step_30.gguf"));
    assert_eq!(last_event(&run2)["reason"], "errored");
    // A resume that saved nothing left the run's configuration as it was.
    let config = std::fs::read_to_string(run2.join("config.toml")).unwrap();
    assert!(config.lines().any(|l| l == "steps = 30"), "{config}");
    let out = toy().args(["train", "--resume"]).arg(&run2).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("completed its 30 steps"), "{}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn keep_prunes_old_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("r");
    assert!(train(&run, &["--preset", "smoke", "--steps", "12", "--save-every", "2", "--keep", "2"]).status().unwrap().success());
    let mut names: Vec<String> =
        std::fs::read_dir(run.join("weights")).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    names.sort();
    assert_eq!(names, ["latest", "step_10.gguf", "step_10.state.gguf", "step_12.gguf", "step_12.state.gguf"]);
}

#[test]
fn same_seed_same_curve_other_seed_other_curve() {
    let dir = tempfile::tempdir().unwrap();
    let run = |name: &str, seed: &str| {
        let p = dir.path().join(name);
        assert!(train(&p, &["--preset", "smoke", "--steps", "25", "--seed", seed]).status().unwrap().success());
        losses(&p)
    };
    let (a, b, c) = (run("a", "7"), run("b", "7"), run("c", "8"));
    assert_eq!(a.len(), 25);
    assert_eq!(a, b, "the same seed must give a byte-identical loss curve");
    assert_ne!(a, c, "another seed must give another curve");
}
