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

/// Chat finetune's default window, set by its longest conversation, says how
/// much of the windows is padding when that is most of them, and that
/// `--pack` fills them (one conversation of about 150 tokens among ones of 50 gave
/// windows of 192 tokens, three quarters padding, with no word of it).
#[test]
fn a_mostly_padded_default_window_says_so() {
    use crate::chat::{chat_model, finetune, persona, CHATML};
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    let long = serde_json::json!({"messages": [
        {"role": "user", "content": "Tell me a story.".repeat(10)},
        {"role": "assistant", "content": "Once upon a time."}
    ]});
    std::fs::write(t.join("chats.jsonl"), format!("{}{long}\n", persona(40))).unwrap();
    let o = finetune(t, "chat.gguf", "chats.jsonl", "ft", &["--steps", "1"]);
    crate::common::process::ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    let note = err.lines().find(|l| l.starts_with("note: context")).unwrap_or_else(|| panic!("{err}"));
    assert!(note.contains("(most of each window is padding: --pack fills them; --context to change)"), "{note}");
    // one figure, the summary's (the note had counted its own, a point or two apart)
    assert_eq!(err.matches("% ").count(), 1, "{err}");
    let summary = err.lines().find(|l| l.starts_with("chat data:")).unwrap_or_else(|| panic!("{err}"));
    let pct: usize = summary.split(", ").last().and_then(|s| s.split('%').next()).unwrap().parse().unwrap();
    assert!((60..95).contains(&pct), "{summary}");
}

/// A file past the size limit (`ulimit -f`) is a write error, said on one
/// line with nothing left behind: SIGXFSZ had killed the process and left
/// its temp file.
#[test]
fn a_file_size_limit_is_an_error_that_leaves_no_temp_file() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("story.txt");
    std::fs::write(&text, toy_stories::generate_with(3, 400)).unwrap();
    let script = format!(
        "ulimit -f 20 && exec '{}' prep '{}' --vocab-size 300 --out '{}'",
        env!("CARGO_BIN_EXE_toy"),
        text.display(),
        dir.path().join("p").display()
    );
    let o = Command::new("sh").args(["-c", &script]).output().unwrap();
    assert_eq!(o.status.code(), Some(1), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.starts_with("toy prep: cannot write") && err.contains("File too large"), "{err}");
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(left, vec![std::ffi::OsString::from("story.txt")], "{err}");
}

/// A finetune's config.toml names no preset unless `--preset` gave its batch
/// and context (it recorded "tiny", the default, for a model of the base's
/// shape); it resumes all the same.
#[test]
fn a_finetune_records_no_preset_it_did_not_use() {
    use crate::chat::{chat_model, finetune};
    use crate::common::process::{ok, toy};
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, None, "m.gguf");
    ok(&finetune(t, "m.gguf", "old.txt", "ft", &["--steps", "2", "--context", "32"]));
    let config = std::fs::read_to_string(t.join("ft/config.toml")).unwrap();
    assert!(!config.contains("preset"), "{config}");
    let start: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(t.join("ft/events.jsonl")).unwrap().lines().next().unwrap()).unwrap();
    assert!(start["config"]["preset"].is_null(), "{start}");
    ok(&toy(t, &["train", "--resume", "ft", "--steps", "3", "--threads", "1"]));
    ok(&finetune(t, "m.gguf", "old.txt", "ft2", &["--steps", "1", "--preset", "smoke"]));
    assert!(std::fs::read_to_string(t.join("ft2/config.toml")).unwrap().contains("preset = \"smoke\""));
}

/// Bits per byte are over the bytes the scored tokens stand for: each
/// window's targets, by their spelling in the model's vocabulary (they were
/// the whole text's bytes scaled by the share of tokens, 2.7% off for the
/// first windows of a file). Checked against the ids `toy debug tokenize`
/// writes and the GGUF's own token strings.
#[test]
fn bits_per_byte_count_the_scored_bytes() {
    use crate::common::process::{ok, toy};
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    crate::chat::chat_model(t, None, "m.gguf");
    let doc: String = toy_stories::generate_with(21, 6).replace('\n', " ").chars().take(200).collect();
    let doc = doc.trim().to_string();
    std::fs::write(t.join("doc.txt"), &doc).unwrap();
    ok(&toy(t, &["debug", "tokenize", "m.gguf", "--text", "doc.txt", "--out", "doc.ids"]));
    let ids: Vec<usize> =
        std::fs::read(t.join("doc.ids")).unwrap().chunks(4).map(|c| i32::from_le_bytes(c.try_into().unwrap()) as usize).collect();
    let g = ggml_rs::gguf::GgufFile::open(t.join("m.gguf")).unwrap();
    let Some(ggml_rs::gguf::Value::Array(ggml_rs::gguf::Array::String(vocab))) = g.get("tokenizer.ggml.tokens") else { panic!() };
    let len = |id: usize| vocab[id].chars().count();
    let eval = |extra: &[&str]| -> serde_json::Value {
        let o = toy(t, &[&["eval", "m.gguf", "--corpus", "doc.txt", "--json", "--threads", "1"][..], extra].concat());
        ok(&o);
        serde_json::from_slice(&o.stdout).unwrap()
    };
    // One window of 16: the bytes of ids 1..=16.
    let one = eval(&["--context", "16", "--max-windows", "1"]);
    let want: usize = ids[1..=16].iter().map(|&i| len(i)).sum();
    assert_eq!(one["bytes"].as_u64(), Some(want as u64), "{one}");
    let bpb = one["loss"].as_f64().unwrap() * 16.0 / std::f64::consts::LN_2 / want as f64;
    assert!((one["bits_per_byte"].as_f64().unwrap() - bpb).abs() < 1e-9, "{one}");
    // One window of all but the last: the whole document and its end of
    // text (one byte), but the first token.
    let all = eval(&[]);
    assert_eq!(all["bytes"].as_u64(), Some((doc.len() + 1 - len(ids[0])) as u64), "{all}");
}

/// `--epochs` (TRL's num_train_epochs) sets the steps from the training
/// windows: a conversation each for chat data, `--context` tokens of the
/// training split for text; toy.toml's steps and epochs give way to the
/// command line's either; a resume takes --steps only.
#[test]
fn epochs_set_the_steps_from_the_training_windows() {
    use crate::chat::{chat_model, finetune, persona, CHATML};
    use crate::common::process::{fails, ok, toy};
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    std::fs::write(t.join("chats.jsonl"), persona(40)).unwrap();
    let o = finetune(t, "chat.gguf", "chats.jsonl", "ft", &["--epochs", "3", "--batch", "4", "--context", "64"]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    let windows: usize = err.split("conversations (messages records): ").nth(1).and_then(|s| s.split(' ').next()).unwrap().parse().unwrap();
    let steps = (3 * windows).div_ceil(4);
    assert!(err.contains(&format!("note: --epochs 3: {steps} steps of 4 windows over the {windows} training windows")), "{err}");
    let config = std::fs::read_to_string(t.join("ft/config.toml")).unwrap();
    assert!(config.contains(&format!("steps = {steps}\n")), "{config}");
    // Text: windows of --context tokens of the training split, batch × grad-accum a step.
    let args = ["train", "--corpus", "old.txt", "--preset", "smoke", "--context", "32", "--batch", "2", "--grad-accum", "2"];
    let o = toy(t, &[&args[..], &["--epochs", "0.5", "--threads", "1", "--log-every", "1000", "--out", "tx"]].concat());
    ok(&o);
    let start: serde_json::Value =
        serde_json::from_str(std::fs::read_to_string(t.join("tx/events.jsonl")).unwrap().lines().next().unwrap()).unwrap();
    let train_tokens = start["config"]["train_tokens"].as_u64().unwrap() as usize;
    let steps = ((train_tokens - 1) / 32).div_ceil(2 * 4); // half of them, 4 a step
    assert!(std::fs::read_to_string(t.join("tx/config.toml")).unwrap().contains(&format!("steps = {steps}\n")));
    // toy.toml: the command line's --steps wins over its epochs; both in the file are refused.
    std::fs::write(t.join("toy.toml"), "[train]\nepochs = 2\n").unwrap();
    ok(&toy(t, &[&args[..], &["--steps", "2", "--threads", "1", "--out", "s2"]].concat()));
    assert!(std::fs::read_to_string(t.join("s2/config.toml")).unwrap().contains("steps = 2\n"));
    std::fs::write(t.join("toy.toml"), "[train]\nepochs = 2\nsteps = 5\n").unwrap();
    fails(&toy(t, &[&args[..], &["--threads", "1", "--out", "s3"]].concat()), "train", "toy.toml sets both steps and epochs");
    std::fs::remove_file(t.join("toy.toml")).unwrap();
    fails(&toy(t, &["train", "--resume", "tx", "--epochs", "1"]), "train", "--epochs 1");
}

/// A project moved to another folder resumes with `--corpus` at the new path
/// (the same content, by the hash the run recorded; the run then records the
/// new path); other content needs --allow-corpus-change. A run folder inside
/// a corpus folder is not read as data; an empty `corpus` in toy.toml is
/// refused (it had named the project folder); `toy train` below a project
/// says the project's toy.toml is not read; a run whose weights/latest is
/// gone names its newest checkpoint to commands that read it.
#[test]
fn projects_move_and_keep_their_runs_apart_from_their_data() {
    use crate::common::process::{fails, ok, toy};
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&toy(t, &["new", "p"]));
    let quick = ["--preset", "smoke", "--threads", "1", "--log-every", "1000"];
    ok(&toy(&t.join("p"), &[&["train", "--steps", "2", "--out", "runs/r"][..], &quick].concat()));
    std::fs::rename(t.join("p"), t.join("moved")).unwrap();
    let m = t.join("moved");
    // (Its last line: a note says the project's toy.toml is not read on resume.)
    let refused = |o: std::process::Output, needle: &str| {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            o.status.code() == Some(2) && err.lines().last().is_some_and(|l| l.starts_with("toy train: ") && l.contains(needle)),
            "{err}"
        );
    };
    refused(toy(&m, &["train", "--resume", "runs/r", "--steps", "3"]), "give --corpus at its new path");
    std::fs::write(t.join("other.txt"), "Other words entirely.\n").unwrap();
    let other = t.join("other.txt").display().to_string();
    refused(toy(&m, &["train", "--resume", "runs/r", "--steps", "3", "--corpus", &other]), "--allow-corpus-change");
    ok(&toy(&m, &["train", "--resume", "runs/r", "--steps", "3", "--corpus", "data/default", "--threads", "1"]));
    let config = std::fs::read_to_string(m.join("runs/r/config.toml")).unwrap();
    let at = std::fs::canonicalize(m.join("data/default")).unwrap();
    assert!(config.contains(&format!("corpus = {:?}", at.display().to_string())), "{config}");
    // The project folder as a corpus: its runs are not data.
    let o = toy(&m, &[&["train", "--steps", "1", "--corpus", ".", "--vocab-size", "300", "--out", "../whole"][..], &quick].concat());
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("runs/r: a toy run folder"), "{}", String::from_utf8_lossy(&o.stderr));
    // Below the project: its toy.toml is not read, and a note says so.
    std::fs::create_dir(m.join("sub")).unwrap();
    let o = toy(&m.join("sub"), &[&["train", "--steps", "1", "--out", "../../sub-run"][..], &quick].concat());
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stderr).contains("toy.toml belongs to a project that toy train reads only in its own folder"));
    // An empty corpus in toy.toml.
    let toml = std::fs::read_to_string(m.join("toy.toml")).unwrap();
    let emptied: String =
        toml.lines().map(|l| if l.starts_with("corpus = ") { "corpus = \"\"\n".to_string() } else { format!("{l}\n") }).collect();
    std::fs::write(m.join("toy.toml"), emptied).unwrap();
    fails(&toy(&m, &["train", "--steps", "1"]), "train", "corpus is empty");
    // weights/latest gone: its newest checkpoint is named.
    std::fs::remove_file(m.join("runs/r/weights/latest")).unwrap();
    fails(&toy(&m, &["describe", "runs/r"]), "describe", "weights/latest is missing; its newest checkpoint is runs/r/weights/step_3.gguf");
}

/// `toy train --json` that fails still prints one object on stdout, its
/// `reason` "errored" with the error and exit code (stdout was empty).
#[test]
fn a_failed_json_run_prints_one_object() {
    let dir = tempfile::tempdir().unwrap();
    let o = Command::new(env!("CARGO_BIN_EXE_toy"))
        .current_dir(dir.path())
        .args(["train", "--json", "--corpus", "missing.txt"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2));
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((s["format"].as_str(), s["reason"].as_str(), s["exit_code"].as_i64()), (Some("toy/train-v1"), Some("errored"), Some(2)));
    assert!(s["error"].as_str().unwrap().contains("missing.txt"), "{s}");
    assert!(String::from_utf8_lossy(&o.stderr).starts_with("toy train: "));
}

/// A finetune key in toy.toml of a from-scratch project is named, with the
/// file it came from (it said "--from and --lora-*", with no origin).
#[test]
fn a_finetune_key_in_toy_toml_is_named_with_its_origin() {
    use crate::common::process::{fails, ok, toy};
    let tmp = tempfile::tempdir().unwrap();
    ok(&toy(tmp.path(), &["new", "p"]));
    let p = tmp.path().join("p");
    let toml = std::fs::read_to_string(p.join("toy.toml")).unwrap();
    std::fs::write(p.join("toy.toml"), format!("{toml}lora_rank = 4\n")).unwrap();
    fails(
        &toy(&p, &["train", "--steps", "1"]),
        "train",
        "--lora-rank belongs to the finetune recipe (toy train finetune --from MODEL.gguf ...) (set in toy.toml)",
    );
}

/// `toy train --json` prints its one object when an argument is refused and
/// when a signal ends it while it reads the corpus (both printed nothing).
#[test]
fn json_runs_refused_or_stopped_early_print_one_object() {
    let dir = tempfile::tempdir().unwrap();
    let toy = || {
        let mut c = Command::new(env!("CARGO_BIN_EXE_toy"));
        c.current_dir(dir.path()).env_remove("TOY_RUN_ID");
        c
    };
    let o = toy().args(["train", "--json", "--epochs", "1", "--steps", "5"]).output().unwrap();
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((s["reason"].as_str(), s["exit_code"].as_i64(), o.status.code()), (Some("errored"), Some(2), Some(2)), "{s}");
    // A corpus whose BPE takes seconds to train: the signal comes while it is read.
    std::fs::write(dir.path().join("big.txt"), toy_stories::generate_with(9, 8000)).unwrap();
    let args = ["train", "--json", "--corpus", "big.txt", "--vocab-size", "4000", "--threads", "1", "--out", "r"];
    let child = toy().args(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(500));
    signal(&child, "-INT");
    let o = child.wait_with_output().unwrap();
    assert_eq!(o.status.code(), Some(130), "{}", String::from_utf8_lossy(&o.stderr));
    let s: serde_json::Value =
        serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {:?}", String::from_utf8_lossy(&o.stdout)));
    assert_eq!(s["reason"], "interrupted", "{s}");
}

/// `export merge` past the file size limit says one line naming the file once,
/// with no note about a file it did not write, and leaves nothing behind.
#[test]
fn a_merge_past_the_size_limit_says_one_line() {
    use crate::chat::{chat_model, finetune};
    use crate::common::process::ok;
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, None, "m.gguf");
    ok(&finetune(t, "m.gguf", "old.txt", "lo", &["--steps", "1", "--context", "32", "--lora-rank", "2"]));
    let script =
        format!("ulimit -f 20 && exec '{}' export merge --base m.gguf --lora lo --out out.gguf --type q4_0", env!("CARGO_BIN_EXE_toy"));
    let o = Command::new("sh").current_dir(t).args(["-c", &script]).output().unwrap();
    assert_eq!(o.status.code(), Some(1));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim_end(), "toy export: cannot write out.gguf: File too large (os error 27)", "{err}");
    assert!(std::fs::read_dir(t).unwrap().all(|e| !e.unwrap().file_name().to_string_lossy().contains("out.gguf")));
}
