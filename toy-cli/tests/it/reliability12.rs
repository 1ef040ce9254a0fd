//! The twelfth reliability pass (a user meeting real-world failures, stop
//! 53): a run folder that cannot be read is never taken for one without
//! checkpoints (`--resume` had restarted it from step 0, and a failure then
//! removed the earlier run's files), a log torn inside a character resumes,
//! the messages name the file that cannot be read, and `toy eval --split val`
//! of a prepared folder reads `val.bin` alone.

use crate::common::process::{fails, ok, toy};
use crate::reliability3_models::names;
use crate::reliability8::{eval_val, prepared_stories};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

/// A finished 2-step run of the smoke preset at `t/name`, a checkpoint each step.
fn run(t: &Path, name: &str) {
    ok(&toy(t, &["train", "--threads", "1", "--preset", "smoke", "--steps", "2", "--save-every", "1", "--out", name]));
}

/// Whether permissions bind this process (not root): a folder of mode 000 cannot be listed.
fn permissions_bind(t: &Path) -> bool {
    let probe = t.join("probe");
    std::fs::create_dir(&probe).unwrap();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o000)).unwrap();
    let binds = std::fs::read_dir(&probe).is_err();
    std::fs::set_permissions(&probe, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::remove_dir(&probe).unwrap();
    binds
}

#[test]
fn a_run_folder_that_cannot_be_read_is_refused_and_kept() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    run(t, "r");
    let before = names(&t.join("r"));
    // weights/ replaced by a file: said so (it was "cannot create run folder: File exists")
    let w = t.join("r/weights");
    std::fs::rename(&w, t.join("kept-weights")).unwrap();
    std::fs::write(&w, "not a folder").unwrap();
    fails(&toy(t, &["train", "--resume", "r", "--steps", "3"]), "train", "r/weights is not a folder");
    std::fs::remove_file(&w).unwrap();
    std::fs::rename(t.join("kept-weights"), &w).unwrap();
    assert_eq!(names(&t.join("r")), before, "nothing removed");
    // config.toml that is not text: the file is named as unreadable, not missing
    let cfg = std::fs::read(t.join("r/config.toml")).unwrap();
    std::fs::write(t.join("r/config.toml"), [0xffu8, 0xfe, 0]).unwrap();
    fails(&toy(t, &["train", "--resume", "r", "--steps", "3"]), "train", "cannot read config.toml");
    std::fs::write(t.join("r/config.toml"), &cfg).unwrap();
    if permissions_bind(t) {
        // weights/ that cannot be listed (mode 311): it had restarted from step 0
        std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o311)).unwrap();
        fails(&toy(t, &["train", "--resume", "r", "--steps", "3"]), "train", "cannot read");
        // nor read at all (mode 000): it had restarted, failed, and removed config.toml and the logs
        std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o000)).unwrap();
        fails(&toy(t, &["train", "--resume", "r", "--steps", "3"]), "train", "cannot read");
        fails(&toy(t, &["generate", "r", "-n", "2"]), "generate", "cannot read");
        std::fs::set_permissions(&w, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert_eq!(names(&t.join("r")), before, "nothing removed");
    }
    // weights/ a link to nothing
    std::fs::rename(&w, t.join("kept-weights")).unwrap();
    std::os::unix::fs::symlink("../gone", &w).unwrap();
    fails(&toy(t, &["train", "--resume", "r", "--steps", "3"]), "train", "weights is a link to nothing");
    fails(&toy(t, &["generate", "r", "-n", "2"]), "generate", "weights is a link to nothing");
    std::fs::remove_file(&w).unwrap();
    std::fs::rename(t.join("kept-weights"), &w).unwrap();
    if permissions_bind(t) {
        // the run folder itself unreadable: config.toml cannot be read (it said "no config.toml")
        std::fs::set_permissions(t.join("r"), std::fs::Permissions::from_mode(0o000)).unwrap();
        fails(&toy(t, &["train", "--resume", "r", "--steps", "3"]), "train", "cannot read config.toml");
        std::fs::set_permissions(t.join("r"), std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    // and the run goes on from its checkpoint
    let out = toy(t, &["train", "--resume", "r", "--steps", "3"]);
    ok(&out);
    assert!(String::from_utf8_lossy(&out.stdout).contains("step 2"), "{}", String::from_utf8_lossy(&out.stdout));
}

/// A killed writer's last line, cut inside a character (a path with `📁`),
/// goes on `--resume` as a torn ASCII line does (it stopped the resume: "stream
/// did not contain valid UTF-8").
#[test]
fn a_log_torn_inside_a_character_resumes() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    run(t, "r");
    let log = t.join("r/events.jsonl");
    let mut bytes = std::fs::read(&log).unwrap();
    bytes.extend_from_slice(&"{\"kind\":\"step\",\"corpus\":\"📁".as_bytes()[..27]);
    std::fs::write(&log, &bytes).unwrap();
    ok(&toy(t, &["train", "--resume", "r", "--steps", "3"]));
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).is_ok()), "whole lines only");
}

/// A LoRA run's `from` edited by hand to another base: said as such (it
/// named `--lora`, a flag `train` does not have).
#[test]
fn a_lora_run_on_another_base_is_said_so() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // b2 of another shape (the adapter's own check names a same-shaped base's SHA-256)
    for (name, preset) in [("b1", "smoke"), ("b2", "tiny")] {
        ok(&toy(t, &["train", "--threads", "1", "--preset", preset, "--steps", "1", "--out", name]));
    }
    let lora = ["train", "finetune", "--threads", "1", "--from", "b1/weights/latest", "--lora-rank", "2", "--steps", "2", "--out", "l"];
    ok(&toy(t, &lora));
    let cfg = std::fs::read_to_string(t.join("l/config.toml")).unwrap();
    let from = cfg.lines().find(|l| l.starts_with("from = ")).expect("from in config.toml");
    let other = t.join("b2/weights").join(std::fs::read_link(t.join("b2/weights/latest")).unwrap());
    std::fs::write(t.join("l/config.toml"), cfg.replace(from, &format!("from = {:?}", other.display().to_string()))).unwrap();
    fails(&toy(t, &["train", "--resume", "l", "--steps", "3"]), "train", "is not the base the run started from");
}

/// `toy eval --split val` of a prepared folder reads `val.bin` alone: the
/// same loss without `train.bin` (it had needed it readable, and read all of it).
#[test]
fn eval_of_a_prepared_val_split_needs_no_train_bin() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    prepared_stories(t);
    ok(&toy(t, &["train", "--corpus", "p", "--preset", "smoke", "--steps", "1", "--threads", "1", "--out", "r"]));
    let before = eval_val(t, "r", &[]);
    std::fs::rename(t.join("p/train.bin"), t.join("train.bin.away")).unwrap();
    assert_eq!(eval_val(t, "r", &[]), before);
    fails(&toy(t, &["eval", "r", "--corpus", "p", "--split", "train", "--threads", "1"]), "eval", "train.bin");
}
