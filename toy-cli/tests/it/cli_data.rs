//! `toy prep`, `toy new` and `toy train --corpus` through the binary: exit
//! codes, one-line errors, and the tokenizer keys of a trained checkpoint.
//! Training runs use `--threads 1`: ggml's spinning thread barrier makes a
//! 2-thread step hundreds of times slower on a busy 2-core machine.

use ggml_rs::gguf::{Array, GgufFile, Value};
use std::path::Path;
use std::process::{Command, Output};
use toy_stories as stories;

fn toy(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_toy"))
        .args(args)
        .current_dir(dir)
        .env("GGML_NO_BACKTRACE", "1")
        .env_remove("TOY_RUN_ID")
        .output()
        .unwrap()
}

/// Exit code 2 and one line on stderr starting with `toy <cmd>:`; returns it.
fn fails_with_input(o: &Output, cmd: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr).to_string();
    assert_eq!(o.status.code(), Some(2), "stderr: {err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    assert!(err.starts_with(&format!("toy {cmd}: ")), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    err
}

#[test]
fn prep_from_the_command_line() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("a.txt"), stories::generate_with(1, 30)).unwrap();
    std::fs::write(t.join("b.txt"), stories::generate_with(2, 10)).unwrap();
    let o = toy(t, &["prep", "a.txt", "b.txt", "--vocab-size", "300", "--out", "p", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let m: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(m["format"], "toy/prep-v1");
    assert_eq!(m["n_documents"], 40);
    assert_eq!(m["val_documents"], 2);
    assert_eq!(m["source_files"][1]["path"], "b.txt");

    let e = fails_with_input(&toy(t, &["prep", "a.txt", "--out", "p"]), "prep");
    assert!(e.contains("not empty"), "{e}");
    std::fs::write(t.join("bad.txt"), b"abc\x80").unwrap();
    let e = fails_with_input(&toy(t, &["prep", "bad.txt", "--out", "q"]), "prep");
    assert!(e.contains("bad.txt:1") && e.contains("column 4"), "{e}");
    let e = fails_with_input(&toy(t, &["prep", "a.txt", "--out", "a.txt/q"]), "prep");
    assert!(e.contains("a.txt/q"), "{e}");
    fails_with_input(&toy(t, &["prep", "a.txt", "--out", "q", "--vocab-size", "-3"]), "prep");
    assert!(!t.join("q").exists(), "no partial output");
    // An input that a prep would write over, --force or not, is refused (it was lost: a helper's finding)
    std::fs::copy(t.join("a.txt"), t.join("p/val.bin")).unwrap();
    let e = fails_with_input(&toy(t, &["prep", "p/val.bin", "--out", "p", "--force"]), "prep");
    assert!(e.contains("--out p: its val.bin would replace the input p/val.bin"), "{e}");
    assert_eq!(std::fs::read(t.join("p/val.bin")).unwrap(), std::fs::read(t.join("a.txt")).unwrap());
    // A .txt of whole numbers, which train reads as ids, is text to prep: said
    std::fs::write(t.join("nums.txt"), "137 582 719\n".repeat(50)).unwrap();
    let o = toy(t, &["prep", "nums.txt", "--out", "n"]);
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("note: nums.txt holds whole numbers only: toy prep tokenizes it as text"), "{err}");
}

#[test]
fn train_reports_bad_corpora_in_one_line() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let e = fails_with_input(&toy(t, &["train", "--corpus", "missing.txt", "--steps", "1"]), "train");
    assert!(e.contains("missing.txt"), "{e}");
    std::fs::write(t.join("empty.txt"), "").unwrap();
    let e = fails_with_input(&toy(t, &["train", "--corpus", "empty.txt", "--steps", "1"]), "train");
    assert!(e.contains("empty"), "{e}");
    std::fs::write(t.join("latin1.txt"), b"na\xefve").unwrap();
    let e = fails_with_input(&toy(t, &["train", "--corpus", "latin1.txt", "--steps", "1"]), "train");
    assert!(e.contains("offset 2"), "{e}");

    // A prepared folder whose ids were tampered with.
    std::fs::write(t.join("s.txt"), stories::generate_with(4, 12)).unwrap();
    assert!(toy(t, &["prep", "s.txt", "--vocab-size", "300", "--out", "p"]).status.success());
    let mut bin = std::fs::read(t.join("p/train.bin")).unwrap();
    bin[8..12].copy_from_slice(&5000u32.to_le_bytes());
    std::fs::write(t.join("p/train.bin"), bin).unwrap();
    let e = fails_with_input(&toy(t, &["train", "--corpus", "p", "--steps", "1"]), "train");
    assert!(e.contains("train.bin") && e.contains("token 2") && e.contains("id 5000"), "{e}");
    assert!(!t.join("runs").exists() || std::fs::read_dir(t.join("runs")).unwrap().next().is_none(), "no run folder left behind");
}

#[test]
fn checkpoint_of_a_text_corpus_carries_the_tokenizer() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("s.txt"), stories::generate_with(8, 40)).unwrap();
    let o = toy(t, &["train", "--corpus", "s.txt", "--preset", "smoke", "--steps", "2", "--threads", "1", "--out", "run", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let f = GgufFile::open(t.join("run/weights/step_2.gguf")).unwrap();
    assert_eq!(f.get("tokenizer.ggml.model"), Some(&Value::String("gpt2".into())));
    assert_eq!(f.get("tokenizer.ggml.pre"), Some(&Value::String("gpt-2".into())));
    let n = match f.get("tokenizer.ggml.tokens") {
        Some(Value::Array(Array::String(v))) => v.len(),
        other => panic!("tokens: {other:?}"),
    };
    assert_eq!(f.tensor("token_embd.weight").unwrap().ne[1] as usize, n);
    assert!(matches!(f.get("tokenizer.ggml.merges"), Some(Value::Array(Array::String(m))) if m.len() == n - 257));
    assert!(matches!(f.get("tokenizer.ggml.token_type"), Some(Value::Array(Array::I32(v))) if v.len() == n && v[0] == 3));
    assert_eq!(f.get("tokenizer.ggml.eos_token_id"), Some(&Value::U32(0)));

    // The checkpoint alone tokenizes as the corpus did.
    let ck = toy::formats::checkpoint::open_checkpoint(&t.join("run/weights/step_2.gguf")).unwrap();
    let text = std::fs::read_to_string(t.join("s.txt")).unwrap();
    let c = toy::data::load_corpus(&t.join("s.txt"), &Default::default()).unwrap();
    let sample = &text[..500];
    assert_eq!(ck.tokenizer.unwrap().encode(sample).unwrap(), c.tokenizer.unwrap().encode(sample).unwrap());
}

#[test]
fn new_project_trains_with_no_arguments() {
    let tmp = tempfile::tempdir().unwrap();
    let o = toy(tmp.path(), &["new", "proj"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let dir = tmp.path().join("proj");
    let o = toy(&dir, &["train", "--preset", "smoke", "--steps", "2", "--threads", "1", "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let run_dir = dir.join(s["run_dir"].as_str().unwrap());
    assert!(run_dir.starts_with(dir.join("runs")) && run_dir.join("weights/step_2.gguf").is_file(), "{run_dir:?}");
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    assert!(events.contains("data/default"), "the run read the project's corpus");

    fails_with_input(&toy(tmp.path(), &["new", "proj"]), "new");
    assert!(toy(tmp.path(), &["new", "proj", "--force"]).status.success());
}
