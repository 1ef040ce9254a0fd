//! Data-parallel training on CPU backends (`--device cpu,cpu`): the same loss
//! curve as one device at the same global batch, resume across device counts,
//! and the refusals of bad device lists. One thread per replica: ggml's
//! spinning thread barrier makes more threads than free cores crawl (two
//! tests run at once on a 2-core machine).

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;

fn toy() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_toy"));
    c.env_remove("TOY_RUN_ID");
    c
}

/// `toy train` on the smoke shape with a global batch of 4.
fn train(out: &Path, arch: &str, device: &str, steps: u64, extra: &[&str]) {
    let o = toy()
        .args(["train", "--arch", arch, "--preset", "smoke", "--batch", "4", "--threads", "1", "--eval-every", "0", "--json"])
        .args(["--device", device, "--steps", &steps.to_string()])
        .arg("--out")
        .arg(out)
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "toy train --device {device}: {}", String::from_utf8_lossy(&o.stderr));
}

fn losses(run: &Path) -> BTreeMap<u64, f64> {
    let text = std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == "step")
        .map(|e| (e["step"].as_u64().unwrap(), e["loss"].as_f64().unwrap()))
        .collect()
}

fn max_rel(a: &BTreeMap<u64, f64>, b: &BTreeMap<u64, f64>) -> f64 {
    assert_eq!(a.keys().collect::<Vec<_>>(), b.keys().collect::<Vec<_>>(), "different steps");
    a.iter().map(|(k, x)| (x - b[k]).abs() / x.abs()).fold(0.0, f64::max)
}

#[test]
fn two_cpu_replicas_follow_one_device() {
    for arch in ["llama", "gpt2"] {
        let dir = tempfile::tempdir().unwrap();
        let (one, two) = (dir.path().join("one"), dir.path().join("two"));
        train(&one, arch, "cpu", 20, &[]);
        train(&two, arch, "cpu,cpu", 20, &[]);
        let (a, b) = (losses(&one), losses(&two));
        assert_eq!(a.len(), 20);
        let e = max_rel(&a, &b);
        println!("{arch}: cpu vs cpu,cpu, 20 steps: max relative loss difference {e:.3e}");
        assert!(e < 1e-5, "{arch}: {e}");
        let start: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(two.join("events.jsonl")).unwrap().lines().next().unwrap()).unwrap();
        assert_eq!(start["backend"]["devices"], serde_json::json!(["cpu", "cpu"]));
    }
}

/// `toy train --resume run --steps 20 --device device`.
fn resume(run: &Path, device: &str) {
    let o = toy().args(["train", "--steps", "20", "--device", device, "--threads", "1", "--json", "--resume"]).arg(run).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn resume_on_fewer_devices_continues_the_curve() {
    // 10 steps, then 10 more from the checkpoint (the schedule is stretched to
    // 20 steps at the resume, the same for both): on one device throughout,
    // and on two devices then one.
    let dir = tempfile::tempdir().unwrap();
    let (one, two) = (dir.path().join("one"), dir.path().join("two"));
    train(&one, "llama", "cpu", 10, &[]);
    resume(&one, "cpu");
    train(&two, "llama", "cpu,cpu", 10, &[]);
    resume(&two, "cpu");
    let (a, b) = (losses(&one), losses(&two));
    assert_eq!(a.len(), 20);
    let e = max_rel(&a, &b);
    println!("cpu,cpu for 10 steps, then cpu, against cpu throughout: max relative loss difference {e:.3e}");
    assert!(e < 1e-5, "{e}");
}

#[test]
fn bad_device_lists_are_refused() {
    for (device, batch, want) in [
        ("cpu,cpu", "3", "does not divide"),
        ("cpu,cuda:0", "4", "cannot mix"),
        ("cuda:7,cuda:8", "4", "cuda:7"),
        ("cpu,", "4", "empty entry"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("r");
        let o = toy()
            .args(["train", "--preset", "smoke", "--steps", "2", "--device", device, "--batch", batch])
            .arg("--out")
            .arg(&run)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "--device {device}: {err}");
        assert!(err.starts_with("toy train: ") && err.contains(want) && err.trim().lines().count() == 1, "--device {device}: {err}");
        assert!(!run.exists(), "--device {device} left a run folder");
    }
}
