//! The fourteenth reliability pass (a new user's trial, stop 55): a run
//! folder asked for under a file names the file, and a refused `--epochs`
//! too large to train prints its figures in exponent form.

use crate::common::process::{fails, toy};

#[test]
fn a_run_folder_under_a_file_names_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("notes.txt"), "not a folder").unwrap();
    // it said "cannot read notes.txt/run/weights: Not a directory"
    let args = ["train", "--preset", "smoke", "--steps", "1", "--threads", "1", "--out", "notes.txt/run"];
    fails(&toy(t, &args), "train", "run folder notes.txt/run: notes.txt is not a folder");
    assert_eq!(std::fs::read_to_string(t.join("notes.txt")).unwrap(), "not a folder");
}

#[test]
fn too_many_epochs_are_refused_in_exponent_form() {
    let tmp = tempfile::tempdir().unwrap();
    let out = toy(tmp.path(), &["train", "--preset", "smoke", "--epochs", "1e300", "--threads", "1", "--out", "r"]);
    // it wrote both figures out: ~300 and ~280 digits
    fails(&out, "train", "--epochs 1e300: ");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("steps are too many (at most 2^53)") && err.len() < 200, "{err}");
    assert!(!tmp.path().join("r").exists(), "a refused run leaves no folder");
}
