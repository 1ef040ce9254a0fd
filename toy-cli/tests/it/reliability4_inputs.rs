//! Issue 19's third reliability pass, inputs side: a tokenizer is checked when
//! it is read, a BPE that reaches fewer ids than asked for says so,
//! `--text-field` without JSON Lines input is refused, and a `toy.toml` or a
//! corpus folder entry that is not a regular file is refused, naming it.

use sha2::{Digest, Sha256};
use std::path::Path;
use std::process::{Command, Output};

fn toy(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_toy"));
    c.env_remove("TOY_RUN_ID").current_dir(dir);
    c
}

fn train(dir: &Path, extra: &[&str]) -> Output {
    toy(dir)
        .args(["train", "--threads", "1", "--log-every", "1000", "--preset", "smoke", "--steps", "2", "--out", "run"])
        .args(extra)
        .output()
        .unwrap()
}

/// One line on stderr containing `needle`, exit 2, no panic.
fn fails(o: &Output, needle: &str) -> String {
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err:?}");
    assert!(err.contains(needle) && !err.contains("panicked"), "{err:?} lacks {needle:?}");
    err.into_owned()
}

fn ok(o: &Output) -> String {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn text(dir: &Path, name: &str) {
    let s: String = (0..200).map(|i| format!("the cat {i} sat on the mat and the dog ran.\n")).collect();
    std::fs::write(dir.join(name), s).unwrap();
}

fn prep(dir: &Path, input: &str, out: &str, extra: &[&str]) -> Output {
    toy(dir).args(["prep", input, "--vocab-size", "300", "--out", out]).args(extra).output().unwrap()
}

/// Rewrite the tokenizer of the prepared folder `tk` with `edit` applied to
/// its vocabulary, and the manifest's sha256 to match.
fn tamper(tk: &Path, edit: impl Fn(&mut serde_json::Map<String, serde_json::Value>)) {
    let mut t: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(tk.join("tokenizer.json")).unwrap()).unwrap();
    edit(t["model"]["vocab"].as_object_mut().unwrap());
    let json = serde_json::to_string(&t).unwrap();
    std::fs::write(tk.join("tokenizer.json"), &json).unwrap();
    let mut m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(tk.join("manifest.json")).unwrap()).unwrap();
    m["tokenizer_sha256"] = Sha256::digest(json.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>().into();
    std::fs::write(tk.join("manifest.json"), m.to_string()).unwrap();
}

/// Class: a malformed `tokenizer.json` (duplicate or non-contiguous ids) is
/// refused when it is read (exit 2, naming the file), not at the first save.
#[test]
fn bad_tokenizer_json_refused_when_read() {
    let d = tempfile::tempdir().unwrap();
    text(d.path(), "w.txt");
    ok(&prep(d.path(), "w.txt", "TK", &[]));
    let tk = d.path().join("TK");
    let good = (std::fs::read(tk.join("tokenizer.json")).unwrap(), std::fs::read(tk.join("manifest.json")).unwrap());
    let dup: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>) = &|v| {
        let last = v.iter().max_by_key(|(_, id)| id.as_u64()).map(|(k, _)| k.clone()).unwrap();
        v.insert(last, 5.into());
    };
    let gap: &dyn Fn(&mut serde_json::Map<String, serde_json::Value>) = &|v| {
        let last = v.iter().max_by_key(|(_, id)| id.as_u64()).map(|(k, _)| k.clone()).unwrap();
        v.insert(last, 100_000.into());
    };
    for edit in [dup, gap] {
        std::fs::write(tk.join("tokenizer.json"), &good.0).unwrap();
        std::fs::write(tk.join("manifest.json"), &good.1).unwrap();
        tamper(&tk, edit);
        fails(&train(d.path(), &["--corpus", "TK"]), "tokenizer.json");
        assert!(!d.path().join("run").exists(), "no run is left");
    }
}

/// Class: a BPE that ends up with fewer ids than `--vocab-size` says so in one
/// note; and one line longer than `--bpe-sample` is still sampled (it was
/// left out, and the BPE had the 257 base ids only, without a word).
#[test]
fn bpe_short_of_vocab_size_says_so() {
    let d = tempfile::tempdir().unwrap();
    // One line of ~200 KB of varied words, a sample of 0.1 MiB.
    let line: String = (0..40_000u32).map(|i| format!("w{} ", (i * 7919) % 977)).collect();
    std::fs::write(d.path().join("w.txt"), &line).unwrap();
    let o = toy(d.path()).args(["prep", "w.txt", "--vocab-size", "1024", "--bpe-sample", "0.1", "--out", "PV"]).output().unwrap();
    let err = ok(&o);
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(d.path().join("PV/manifest.json")).unwrap()).unwrap();
    assert_eq!(m["vocab_size"].as_u64(), Some(1024), "{err:?}");
    assert!(!err.contains("note:"), "{err:?}");
    // Too little text for the vocabulary: one note with the ids reached.
    std::fs::write(d.path().join("s.txt"), "ab ab ab\n").unwrap();
    let err = ok(&toy(d.path()).args(["prep", "s.txt", "--vocab-size", "1024", "--out", "PS"]).output().unwrap());
    assert_eq!(err.lines().filter(|l| l.starts_with("note:") && l.contains("1024")).count(), 1, "{err:?}");
}

/// Class: `--text-field` where no JSON Lines input is involved (a `.txt`
/// file, a prepared folder, the embedded corpus) is refused in train, eval
/// and prep; with a `.jsonl` input it is taken.
#[test]
fn text_field_without_json_lines_refused() {
    let d = tempfile::tempdir().unwrap();
    text(d.path(), "w.txt");
    std::fs::write(d.path().join("r.jsonl"), "{\"body\": \"the cat sat on the mat\"}\n".repeat(50)).unwrap();
    fails(&prep(d.path(), "w.txt", "P1", &["--text-field", "body"]), "--text-field");
    assert!(!d.path().join("P1").exists());
    ok(&prep(d.path(), "r.jsonl", "PJ", &["--text-field", "body"]));
    for corpus in ["w.txt", "PJ"] {
        fails(&train(d.path(), &["--corpus", corpus, "--text-field", "body"]), "--text-field");
    }
    fails(&train(d.path(), &["--text-field", "body"]), "--text-field");
    ok(&train(d.path(), &["--corpus", "w.txt"]));
    let ck = d.path().join("run/weights/latest");
    let eval = |c: &str| toy(d.path()).args(["eval"]).arg(&ck).args(["--corpus", c, "--text-field", "body"]).output().unwrap();
    fails(&eval("w.txt"), "--text-field");
}

/// Class: a `toy.toml` that is not a regular file (a folder, a dangling link,
/// a FIFO) is refused, naming it; a missing one is fine.
#[cfg(unix)]
#[test]
fn toy_toml_not_a_regular_file_refused() {
    let d = tempfile::tempdir().unwrap();
    std::fs::create_dir(d.path().join("toy.toml")).unwrap();
    fails(&train(d.path(), &[]), "toy.toml");
    std::fs::remove_dir(d.path().join("toy.toml")).unwrap();
    std::os::unix::fs::symlink("nowhere.toml", d.path().join("toy.toml")).unwrap();
    fails(&train(d.path(), &[]), "toy.toml");
    std::fs::remove_file(d.path().join("toy.toml")).unwrap();
    assert!(Command::new("mkfifo").arg(d.path().join("toy.toml")).status().unwrap().success());
    fails(&train(d.path(), &[]), "toy.toml");
    assert!(!d.path().join("run").exists());
    // A syntax error is one line too (toml's message has two).
    std::fs::remove_file(d.path().join("toy.toml")).unwrap();
    std::fs::write(d.path().join("toy.toml"), "[train\nsteps = 3\n").unwrap();
    let err = fails(&train(d.path(), &[]), "invalid table header");
    assert!(!err.contains("\\n"), "{err:?}");
    // A resumed run takes everything from its config.toml: a broken toy.toml
    // beside it does not stop it.
    std::fs::rename(d.path().join("toy.toml"), d.path().join("broken")).unwrap();
    ok(&train(d.path(), &[]));
    std::fs::rename(d.path().join("broken"), d.path().join("toy.toml")).unwrap();
    ok(&toy(d.path()).args(["train", "--resume", "run", "--steps", "3", "--threads", "1"]).output().unwrap());
    // A bad value from toy.toml is named as a flag, and said to come from toy.toml;
    // the same value on the command line is not.
    std::fs::write(d.path().join("toy.toml"), "[train]\nbatch = 0\n").unwrap();
    let o = toy(d.path()).args(["train", "--preset", "smoke", "--steps", "1", "--out", "t1"]).output().unwrap();
    fails(&o, "--batch must be at least 1 (set in toy.toml)");
    let o = toy(d.path()).args(["train", "--preset", "smoke", "--steps", "1", "--batch", "0", "--out", "t2"]).output().unwrap();
    assert!(!fails(&o, "--batch must be at least 1").contains("toy.toml"));
}

/// Class: an entry of a corpus folder with an input file's name (`*.txt`)
/// that is a FIFO or a dangling link is refused, naming it, as the same path
/// given directly is (never skipped silently, never read: a FIFO would block).
#[cfg(unix)]
#[test]
fn corpus_folder_fifo_or_dangling_link_refused() {
    let d = tempfile::tempdir().unwrap();
    let c = d.path().join("c");
    std::fs::create_dir(&c).unwrap();
    text(&c, "a.txt");
    assert!(Command::new("mkfifo").arg(c.join("f.txt")).status().unwrap().success());
    fails(&prep(d.path(), "c", "P", &[]), "f.txt");
    fails(&train(d.path(), &["--corpus", "c"]), "f.txt");
    std::fs::remove_file(c.join("f.txt")).unwrap();
    std::os::unix::fs::symlink("gone.txt", c.join("l.txt")).unwrap();
    fails(&prep(d.path(), "c", "P", &[]), "l.txt");
    assert!(!d.path().join("P").exists());
}

/// Class: what a run cannot do as asked is said, not skipped silently: a
/// validation split shorter than one window, a warm-up longer than the run,
/// and an id file whose largest id makes a vocabulary larger than any
/// tokenizer's (a typo, most likely).
#[test]
fn short_validation_and_huge_ids_are_noted() {
    let d = tempfile::tempdir().unwrap();
    std::fs::write(d.path().join("s.txt"), "the cat sat on the mat. ".repeat(20)).unwrap();
    let err = ok(&train(d.path(), &["--corpus", "s.txt", "--vocab-size", "260"]));
    assert!(err.contains("note: the validation split"), "{err}");
    // The default warm-up (20 steps) over a 2-step run is not noted: only one asked for.
    assert!(!err.contains("--warmup-steps"), "{err}");
    // A warm-up longer than the run is followed as asked (as PyTorch's schedulers do), with a note.
    let o = toy(d.path())
        .args(["train", "--corpus", "s.txt", "--vocab-size", "260", "--preset", "smoke"])
        .args(["--steps", "3", "--warmup-steps", "5", "--out", "w"])
        .output()
        .unwrap();
    let err = ok(&o);
    assert!(err.contains("note: --warmup-steps 5 is more than --steps 3") && err.contains("--lr 1e-3"), "{err}");
    let ids: String = (0..300).map(|i| format!("{} ", i % 7)).collect::<String>() + "\n300000\n";
    std::fs::write(d.path().join("ids.txt"), ids).unwrap();
    let o = toy(d.path())
        .args(["train", "--corpus", "ids.txt", "--vocab-size", "9"])
        .args(["--preset", "smoke", "--steps", "1", "--out", "x"])
        .output()
        .unwrap();
    fails(&o, "outside the vocabulary of 9");
    let o =
        toy(d.path()).args(["train", "--corpus", "ids.txt"]).args(["--preset", "smoke", "--steps", "1", "--out", "y"]).output().unwrap();
    let err = ok(&o);
    assert!(err.contains("ids.txt:2:1: id 300000 makes the vocabulary 300001"), "{err}");
    // The same note for a .bin id file, naming the token: with ids in the millions the
    // memory refusal that follows would otherwise never say which id made the vocabulary.
    let bin: Vec<u8> = (0..300u32).map(|i| i % 7).chain([300_000]).flat_map(|x| x.to_le_bytes()).collect();
    std::fs::write(d.path().join("ids.bin"), bin).unwrap();
    let o =
        toy(d.path()).args(["train", "--corpus", "ids.bin"]).args(["--preset", "smoke", "--steps", "1", "--out", "z"]).output().unwrap();
    let err = ok(&o);
    assert!(err.contains("ids.bin: token 300: id 300000 makes the vocabulary 300001"), "{err}");
}
