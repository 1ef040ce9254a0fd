//! The third reliability pass, data side (issue 19), one test per class: a
//! prepared corpus that changes under training, symlink loops in corpus
//! folders, concurrent or killed `toy prep`s, planted links in run and prep
//! folders, and the small ones (a UTF-8 BOM, a literal `<|endoftext|>` in a
//! JSON Lines record, a torn last line of `events.jsonl`). Processes are
//! waited on through `events.jsonl`, never on fixed sleeps alone.

use crate::common::process::{fails_with, ok, wait_for};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use toy::data::{load_corpus, CorpusOptions};

fn toy(dir: &Path) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_toy"));
    c.env_remove("TOY_RUN_ID").current_dir(dir);
    c
}

fn train(dir: &Path, out: &str, extra: &[&str]) -> Command {
    let mut c = toy(dir);
    c.args(["train", "--threads", "1", "--log-every", "1000", "--preset", "smoke", "--out", out]).args(extra);
    c
}

fn prep(dir: &Path, input: &str, out: &str, extra: &[&str]) -> Command {
    let mut c = toy(dir);
    c.args(["prep", input, "--vocab-size", "300", "--out", out]).args(extra);
    c
}

fn run(c: &mut Command) -> Output {
    c.output().unwrap()
}

/// Every id of `t`.
fn ids_of(t: &toy::data::Tokens) -> Vec<u32> {
    t.to_vec().unwrap()
}

fn latest_step(run: &Path) -> Option<u64> {
    let l = std::fs::read_link(run.join("weights/latest")).ok()?;
    l.to_str()?.strip_prefix("step_")?.strip_suffix(".gguf")?.parse().ok()
}

/// `n` short documents separated by `<|endoftext|>` lines.
fn documents(n: usize) -> String {
    (0..n)
        .map(|i| format!("Note {i}: the cat sat on mat {} and looked at bird {}.\n", i % 7, i % 5))
        .collect::<Vec<_>>()
        .join("<|endoftext|>\n")
}

/// A prepared corpus `p` of a small text, in `dir`.
fn prepared(dir: &Path) {
    std::fs::write(dir.join("notes.txt"), documents(200)).unwrap();
    ok(&run(&mut prep(dir, "notes.txt", "p", &[])));
}

/// Class 1: a memory-mapped corpus that changes under training. Truncating
/// `train.bin` mid-run (a SIGBUS through the map before) or rewriting
/// `val.bin` in place with ids outside the vocabulary ends the run with one
/// line naming the file, exit 1, and a checkpoint that `--resume` continues
/// once the corpus is back.
#[test]
fn mmap_corpus_changed_under_training() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    prepared(t);
    let (train_bin, val_bin) = (t.join("p/train.bin"), t.join("p/val.bin"));
    let (train_bytes, val_bytes) = (std::fs::read(&train_bin).unwrap(), std::fs::read(&val_bin).unwrap());
    for (i, (file, eval_every)) in [(&train_bin, "0"), (&val_bin, "1")].into_iter().enumerate() {
        let out = format!("r{i}");
        let r = t.join(&out);
        let mut child = train(t, &out, &["--corpus", "p", "--steps", "100000", "--eval-every", eval_every, "--save-every", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(&r, "step", 3, &mut child);
        if file == &train_bin {
            std::fs::OpenOptions::new().write(true).open(file).unwrap().set_len(0).unwrap();
        } else {
            // Same size, new ids: `cat other.bin > val.bin` while it trains.
            let f = std::fs::OpenOptions::new().write(true).open(file).unwrap();
            std::io::Write::write_all(&mut &f, &vec![0xFFu8; val_bytes.len()]).unwrap();
        }
        let o = child.wait_with_output().unwrap();
        let name = file.file_name().unwrap().to_str().unwrap();
        let err = fails_with(&o, 1, name);
        assert!(err.contains("--resume"), "{err}");
        let step = latest_step(&r).expect("a checkpoint of the last finished step");
        assert!(step >= 3, "step {step}");
        let end: serde_json::Value =
            serde_json::from_str(std::fs::read_to_string(r.join("events.jsonl")).unwrap().lines().last().unwrap()).unwrap();
        assert_eq!((end["reason"].as_str(), end["final_step"].as_u64()), (Some("errored"), Some(step)));
        std::fs::write(&train_bin, &train_bytes).unwrap();
        std::fs::write(&val_bin, &val_bytes).unwrap();
        let more = (step + 2).to_string();
        ok(&run(toy(t).args(["train", "--resume", &out, "--threads", "1", "--steps", &more])));
        assert_eq!(latest_step(&r), Some(step + 2));
    }
}

/// Class 7: corpus folders that link back into themselves. Each file is read
/// once (by device and inode, however many links lead to it), and a link to a
/// folder being walked is skipped with a note instead of being walked again.
#[test]
fn corpus_folder_symlink_loops() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let d = t.join("d");
    std::fs::create_dir_all(d.join("sub")).unwrap();
    std::fs::write(d.join("a.txt"), documents(20)).unwrap();
    std::fs::write(d.join("sub/b.txt"), documents(5)).unwrap();
    std::os::unix::fs::symlink("../d", d.join("self")).unwrap();
    std::os::unix::fs::symlink("..", d.join("sub/up")).unwrap();
    std::os::unix::fs::symlink("a.txt", d.join("again.txt")).unwrap();
    std::os::unix::fs::symlink("sub", d.join("sub2")).unwrap();
    let o = run(&mut prep(t, "d", "p", &[]));
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("loop"), "a note on the loop: {err:?}");
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(t.join("p/manifest.json")).unwrap()).unwrap();
    assert_eq!(m["n_documents"].as_u64(), Some(25), "each file once");
    assert_eq!(m["source_files"].as_array().unwrap().len(), 2);
    // Training on the folder itself reads the same documents.
    let mut c = load_corpus(&d, &CorpusOptions { val_fraction: 0.0, ..Default::default() }).unwrap();
    let tok = c.tokenizer.take().unwrap();
    let eot = tok.eot().unwrap();
    assert_eq!(ids_of(&c.train).iter().filter(|&&i| i == eot).count(), 25);
}

/// Holds an advisory lock on `path` (as another toy would) until dropped.
fn hold_lock(path: &Path) -> std::fs::File {
    use fs4::FileExt;
    let f = std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(path).unwrap();
    FileExt::try_lock(&f).unwrap();
    std::fs::write(path, format!("{}\n", std::process::id())).unwrap();
    f
}

/// Class 8: `toy prep` locks its output folder. A prep into a folder another
/// prep holds gets one line and exit 2; of two preps started together at most
/// one succeeds and its corpus is whole; the temporaries of a killed prep are
/// removed by the next one instead of making the folder "not empty".
#[test]
fn prep_output_folder_is_locked() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("a.txt"), documents(300)).unwrap();
    std::fs::write(t.join("b.txt"), documents(40)).unwrap();
    std::fs::create_dir(t.join("held")).unwrap();
    let lock = hold_lock(&t.join("held/.lock"));
    fails_with(&run(&mut prep(t, "a.txt", "held", &[])), 2, "in use by process");
    drop(lock);
    ok(&run(&mut prep(t, "a.txt", "held", &[])));

    let spawn = |input: &str| prep(t, input, "both", &[]).stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
    let (a, b) = (spawn("a.txt"), spawn("b.txt"));
    let (a, b) = (a.wait_with_output().unwrap(), b.wait_with_output().unwrap());
    assert!(!(a.status.success() && b.status.success()), "two preps into one folder both reported success");
    let loser = if a.status.success() { &b } else { &a };
    let err = fails_with(loser, 2, "both");
    assert!(err.contains("in use") || err.contains("not empty"), "{err}");
    let m: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(t.join("both/manifest.json")).unwrap()).unwrap();
    let winner = if a.status.success() { 300 } else { 40 };
    assert_eq!(m["n_documents"].as_u64(), Some(winner));
    load_corpus(&t.join("both"), &CorpusOptions::default()).unwrap();

    // What a `kill -9` during prep leaves behind.
    let k = t.join("killed");
    std::fs::create_dir(&k).unwrap();
    for f in [".train.bin.tmp-4194000", ".val.bin.tmp-4194000", ".toy-write-test-4194000", ".lock"] {
        std::fs::write(k.join(f), b"123").unwrap();
    }
    ok(&run(&mut prep(t, "b.txt", "killed", &[])));
    let left: Vec<String> = std::fs::read_dir(&k).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(!left.iter().any(|n| n.contains(".tmp-") || n.contains("write-test")), "{left:?}");
}

/// Class 10: toy never writes through a link planted in a run or prep folder:
/// a `.lock`, `events.jsonl` or temporary that links elsewhere is refused
/// (one line, exit 2) or replaced, and the file it points to is untouched.
#[test]
fn planted_links_are_not_followed() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let victim = t.join("victim.txt");
    std::fs::write(&victim, "precious\n").unwrap();
    std::fs::write(t.join("a.txt"), documents(30)).unwrap();
    ok(&run(&mut train(t, "r", &["--corpus", "a.txt", "--steps", "2"])));
    let r = t.join("r");

    std::fs::remove_file(r.join(".lock")).unwrap();
    std::os::unix::fs::symlink(&victim, r.join(".lock")).unwrap();
    fails_with(&run(toy(t).args(["train", "--resume", "r", "--threads", "1", "--steps", "3"])), 2, ".lock");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    std::fs::remove_file(r.join(".lock")).unwrap();

    let events = std::fs::read(r.join("events.jsonl")).unwrap();
    std::fs::remove_file(r.join("events.jsonl")).unwrap();
    std::os::unix::fs::symlink(&victim, r.join("events.jsonl")).unwrap();
    fails_with(&run(toy(t).args(["train", "--resume", "r", "--threads", "1", "--steps", "3"])), 2, "events.jsonl");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
    std::fs::remove_file(r.join("events.jsonl")).unwrap();
    std::fs::write(r.join("events.jsonl"), events).unwrap();

    // A link planted at the temporary's name (pids are guessable): replaced, not written through.
    let tmp_name = r.join(format!(".config.toml.tmp-{}", std::process::id()));
    std::os::unix::fs::symlink(&victim, &tmp_name).unwrap();
    toy::files::write_atomic(&r.join("config.toml"), std::fs::read(r.join("config.toml")).unwrap().as_slice()).unwrap();
    assert!(!tmp_name.exists() && !tmp_name.is_symlink());
    ok(&run(toy(t).args(["train", "--resume", "r", "--threads", "1", "--steps", "3"])));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");

    std::fs::create_dir(t.join("p")).unwrap();
    std::os::unix::fs::symlink(&victim, t.join("p/.lock")).unwrap();
    fails_with(&run(&mut prep(t, "a.txt", "p", &[])), 2, ".lock");
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "precious\n");
}

/// Small ones of issue 19: a UTF-8 byte order mark at the start of a text
/// file or a JSON Lines line is not text (it gave 3 tokens, or a JSON error),
/// the same in `toy prep` and in corpora read by `train`/`eval`.
#[test]
fn byte_order_marks_are_stripped() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let text = documents(40);
    std::fs::write(t.join("plain.txt"), &text).unwrap();
    std::fs::write(t.join("bom.txt"), format!("\u{feff}{text}")).unwrap();
    ok(&run(&mut prep(t, "plain.txt", "plain", &[])));
    ok(&run(&mut prep(t, "bom.txt", "bom", &[])));
    for f in ["train.bin", "val.bin", "tokenizer.json"] {
        assert!(std::fs::read(t.join("plain").join(f)).unwrap() == std::fs::read(t.join("bom").join(f)).unwrap(), "{f} differs");
    }
    let ids = |p: &str| {
        let c = load_corpus(&t.join(p), &CorpusOptions::default()).unwrap();
        (ids_of(&c.train), ids_of(&c.val))
    };
    assert_eq!(ids("plain.txt"), ids("bom.txt"));
    // toy eval counts the text's bytes without the mark: the same bits per byte (stop 47).
    let toy = |args: &[&str]| Command::new(env!("CARGO_BIN_EXE_toy")).current_dir(t).env_remove("TOY_RUN_ID").args(args).output().unwrap();
    ok(&toy(&["train", "--corpus", "plain", "--preset", "smoke", "--steps", "1", "--threads", "1", "--out", "m"]));
    let eval = |f: &str| {
        let o = toy(&["eval", "m", "--corpus", f, "--json", "--threads", "1"]);
        ok(&o);
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        (v["bytes"].as_u64(), v["bits_per_byte"].as_f64())
    };
    let plain = eval("plain.txt");
    assert!(plain.0.is_some_and(|b| b > 0) && plain.1.is_some(), "{plain:?}");
    assert_eq!(eval("bom.txt"), plain);
    let jsonl: String = (0..10).map(|i| format!("{{\"text\": \"record {i}\"}}\n")).collect();
    std::fs::write(t.join("plain.jsonl"), &jsonl).unwrap();
    std::fs::write(t.join("bom.jsonl"), format!("\u{feff}{jsonl}")).unwrap();
    ok(&run(&mut prep(t, "bom.jsonl", "bomj", &[])));
    assert_eq!(ids("plain.jsonl"), ids("bom.jsonl"));
}

/// Small ones of issue 19: `<|endoftext|>` written inside a JSON Lines
/// record (or inside a line of text) is text, as llama.cpp tokenizes raw
/// text without parsing special tokens; only the end of a record, or a line
/// that is exactly `<|endoftext|>` in a text file, is the end-of-text token.
#[test]
fn literal_end_of_text_in_a_document_is_text() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let jsonl: String = (0..10).map(|i| format!("{{\"text\": \"record {i} says <|endoftext|> in the middle\"}}\n")).collect::<String>();
    std::fs::write(t.join("a.jsonl"), &jsonl).unwrap();
    std::fs::write(t.join("a.txt"), (0..10).map(|i| format!("line {i} says <|endoftext|> inline\n<|endoftext|>\n")).collect::<String>())
        .unwrap();
    for (input, out) in [("a.jsonl", "pj"), ("a.txt", "pt")] {
        ok(&run(&mut prep(t, input, out, &[])));
        let c = load_corpus(&t.join(out), &CorpusOptions::default()).unwrap();
        let eot = c.tokenizer.as_ref().unwrap().eot().unwrap();
        let n = ids_of(&c.train).iter().chain(&ids_of(&c.val)).filter(|&&i| i == eot).count();
        assert_eq!(n, 10, "{input}: one end-of-text per document");
        let raw = load_corpus(&t.join(input), &CorpusOptions::default()).unwrap();
        let eot = raw.tokenizer.as_ref().unwrap().eot().unwrap();
        let n = ids_of(&raw.train).iter().chain(&ids_of(&raw.val)).filter(|&&i| i == eot).count();
        assert_eq!(n, 10, "{input} read by train: one end-of-text per document");
    }
}

/// Small ones of issue 19: a resume after a crash that tore the last line of
/// `events.jsonl` ends that line before appending, so every later event is
/// on a line of its own.
#[test]
fn resume_after_a_torn_event_line() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("a.txt"), documents(30)).unwrap();
    ok(&run(&mut train(t, "r", &["--corpus", "a.txt", "--steps", "2"])));
    let events = t.join("r/events.jsonl");
    let mut f = std::fs::OpenOptions::new().append(true).open(&events).unwrap();
    std::io::Write::write_all(&mut f, b"{\"kind\":\"step\",\"t\":1.5,\"ph").unwrap();
    drop(f);
    ok(&run(toy(t).args(["train", "--resume", "r", "--threads", "1", "--steps", "3"])));
    let text = std::fs::read_to_string(&events).unwrap();
    for line in text.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("{line:?}: {e}"));
    }
    assert!(text.contains("\"kind\":\"resume\""), "{text}");
}
