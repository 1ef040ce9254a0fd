//! Every malformed file of fixtures/hostile (made by
//! scripts/make-hostile-fixtures.py) gets exit code 2 and one line naming
//! the problem, never a crash.

use std::process::Command;

fn toy() -> Command {
    Command::new(env!("CARGO_BIN_EXE_toy"))
}

#[test]
fn hostile_files_give_one_clear_line() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/hostile");
    let list = std::fs::read_to_string(dir.join("expected.tsv")).unwrap();
    let out_dir = tempfile::tempdir().unwrap();
    let mut n = 0;
    for line in list.lines().filter(|l| !l.starts_with('#') && !l.trim().is_empty()) {
        let cols: Vec<&str> = line.split('\t').collect();
        let (file, kind, expect) = (cols[0], cols[1], cols[2]);
        let path = dir.join(file);
        let out = match kind {
            "model" => toy().args(["generate", path.to_str().unwrap(), "-n", "1"]).output().unwrap(),
            _ => toy()
                .args([
                    "train",
                    "--corpus",
                    path.to_str().unwrap(),
                    "--steps",
                    "1",
                    "--threads",
                    "1",
                    "--vocab-size",
                    "100",
                    "--preset",
                    "smoke",
                ])
                .arg("--out")
                .arg(out_dir.path().join(file))
                .output()
                .unwrap(),
        };
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{file}: exit {:?}, stderr {err}", out.status.code());
        let lines: Vec<&str> = err.lines().filter(|l| !l.trim().is_empty()).collect();
        assert_eq!(lines.len(), 1, "{file}: expected one line, got {err:?}");
        assert!(lines[0].starts_with("toy "), "{file}: {err}");
        assert!(err.contains(expect), "{file}: {err:?} does not mention {expect:?}");
        assert!(!out_dir.path().join(file).join("weights").exists(), "{file}: left a run folder behind");
        n += 1;
    }
    assert!(n >= 20, "only {n} hostile fixtures");
}
