//! The eighth reliability pass (fresh users' trials, stop 49): figures a run
//! prints checked against the commands that should agree with them.

use crate::common::process::{ok, toy};
use std::path::Path;

/// The last line of a `--json` command's stdout, parsed.
pub(crate) fn json(o: &std::process::Output) -> serde_json::Value {
    ok(o);
    let out = String::from_utf8_lossy(&o.stdout);
    serde_json::from_str(out.trim().lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// 160 generated stories (seed 5) in `t/s.txt`, prepared into `t/p` (a
/// vocabulary of 300).
pub(crate) fn prepared_stories(t: &Path) {
    std::fs::write(t.join("s.txt"), toy_stories::generate_with(5, 160)).unwrap();
    ok(&toy(t, &["prep", "s.txt", "--vocab-size", "300", "--out", "p"]));
}

/// `toy eval RUN --corpus p --split val` with `extra`: its loss.
pub(crate) fn eval_val(t: &Path, run: &str, extra: &[&str]) -> f64 {
    let args = ["eval", run, "--corpus", "p", "--split", "val", "--json", "--threads", "1"];
    json(&toy(t, &[&args[..], extra].concat()))["loss"].as_f64().unwrap()
}

/// A run's validation loss is the mean over `--eval-windows` windows (32 by
/// default; 0: all) of the split, each counted once even when the batch does not
/// divide them (a batch of 5 scored 30 of 32), as `toy eval --split val
/// --max-windows N` computes it; `--resume` takes the flag.
#[test]
fn a_runs_val_loss_is_toy_evals_over_its_windows() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    prepared_stories(t);
    let train = |out: &str, extra: &[&str]| {
        let args =
            ["train", "--corpus", "p", "--preset", "smoke", "--batch", "5", "--steps", "1", "--threads", "1", "--json", "--out", out];
        json(&toy(t, &[&args[..], extra].concat()))["val_loss"].as_f64().unwrap()
    };
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-6 * b.abs();
    let (run, eval) = (train("r32", &[]), eval_val(t, "r32", &["--max-windows", "32"]));
    assert!(close(run, eval), "run {run} vs toy eval {eval}");
    assert!(!close(eval, eval_val(t, "r32", &["--max-windows", "30"])), "the split is too short to tell 30 windows from 32");
    let (all, eval_all) = (train("rall", &["--eval-windows", "0"]), eval_val(t, "rall", &[]));
    assert!(close(all, eval_all) && !close(all, run), "run {all} vs toy eval {eval_all} (32 windows: {run})");
    let o = toy(t, &["train", "--resume", "r32", "--steps", "2", "--eval-windows", "7", "--threads", "1", "--json"]);
    let resumed = json(&o)["val_loss"].as_f64().unwrap();
    assert!(close(resumed, eval_val(t, "r32", &["--max-windows", "7"])), "{resumed}");
    assert!(std::fs::read_to_string(t.join("r32/config.toml")).unwrap().contains("eval_windows = 7"));
}

/// `--split` of raw text and of chat data holds out what training holds out:
/// `toy eval RUN --corpus TEXT --split val --max-windows 32` is the run's
/// val_loss (was: refused, "not a prepared folder"), and so is a finetune's over
/// its held-out conversations.
#[test]
fn eval_splits_text_and_chat_data_as_training_does() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("s.txt"), toy_stories::generate_with(5, 160)).unwrap();
    let args = ["train", "--corpus", "s.txt", "--vocab-size", "300", "--preset", "smoke", "--steps", "1", "--threads", "1"];
    let run = json(&toy(t, &[&args[..], &["--json", "--out", "r"]].concat()))["val_loss"].as_f64().unwrap();
    let eval = |corpus: &str, split: &str, extra: &[&str]| {
        let args = ["eval", "r", "--corpus", corpus, "--split", split, "--json", "--threads", "1"];
        json(&toy(t, &[&args[..], extra].concat()))
    };
    let val = eval("s.txt", "val", &["--max-windows", "32"])["loss"].as_f64().unwrap();
    assert!((run - val).abs() <= 1e-6 * run, "run {run} vs toy eval {val}");
    // Bits per byte of a split: over its share of the text's bytes (was: the whole text's, ~20× too few bits).
    let bpb = |split: &str| eval("s.txt", split, &["--context", "16"])["bits_per_byte"].as_f64().unwrap();
    let (bpb_all, bpb_val) = (bpb("all"), bpb("val"));
    assert!(bpb_val > 0.5 * bpb_all && bpb_val < 2.0 * bpb_all, "val {bpb_val} vs all {bpb_all}");
    let tokens = |split: &str| eval("s.txt", split, &["--context", "16"])["tokens"].as_u64().unwrap();
    let (all, train, held) = (tokens("all"), tokens("train"), tokens("val"));
    assert!(held > 0 && train > held && all > train, "all {all}, train {train}, val {held}");
    std::fs::write(t.join("one.txt"), "A short line.\n").unwrap();
    let o = toy(t, &["eval", "r", "--corpus", "one.txt", "--split", "val"]);
    crate::common::process::fails(&o, "eval", "--split val: one.txt is too short to hold any of it out");

    crate::chat::chat_model(t, Some(crate::chat::CHATML), "chat.gguf");
    std::fs::write(t.join("chats.jsonl"), crate::chat::persona(60)).unwrap();
    let o = crate::chat::finetune(t, "chat.gguf", "chats.jsonl", "ft", &["--steps", "1", "--context", "64", "--json"]);
    let run = json(&o)["val_loss"].as_f64().unwrap();
    let chat = |split: &str| {
        let args = ["eval", "ft", "--corpus", "chats.jsonl", "--split", split, "--context", "64", "--json", "--threads", "1"];
        json(&toy(t, &args))
    };
    let (val, all) = (chat("val"), chat("all"));
    assert!((run - val["loss"].as_f64().unwrap()).abs() <= 1e-5 * run, "run {run} vs toy eval {val}");
    assert!(val["chat"]["windows"].as_u64() < all["chat"]["windows"].as_u64(), "{val} vs {all}");
}

/// The `--json` summary's seed is the run's, wherever it came from (a resume
/// takes it from config.toml).
#[test]
fn the_summary_gives_the_runs_seed() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let args = ["train", "--preset", "smoke", "--steps", "1", "--seed", "7", "--threads", "1", "--out", "R", "--json"];
    assert_eq!(json(&toy(t, &args))["seed"], 7);
    let o = toy(t, &["train", "--resume", "R", "--steps", "2", "--threads", "1", "--json"]);
    assert_eq!(json(&o)["seed"], 7);
}

/// A prompt longer than the context: the note says what each token sees (the
/// window restarts from its last half when full), not only the first one.
#[test]
fn a_long_prompts_note_says_how_the_window_goes_on() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&toy(t, &["train", "--preset", "smoke", "--steps", "1", "--threads", "1", "--out", "R"]));
    let prompt = "Once upon a time there was a cat. ".repeat(20);
    let o = toy(t, &["generate", "R", "--prompt", &prompt, "-n", "3", "--greedy", "--threads", "1"]);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("the first token sees the last 32, and as the window is full it restarts from its last 16"), "{err}");
}

/// A `toy new` project sets no key that belongs to one recipe: `finetune` in
/// it takes the model's shape and finetune's own learning rate.
#[test]
fn a_new_project_finetunes_with_finetunes_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&toy(t, &["train", "--preset", "smoke", "--steps", "1", "--threads", "1", "--out", "base"]));
    ok(&toy(t, &["new", "p"]));
    let p = t.join("p");
    let args = ["train", "finetune", "--from", "../base", "--steps", "1", "--threads", "1", "--out"];
    ok(&toy(&p, &[&args[..], &["ft"]].concat()));
    let lora = toy(&p, &[&args[..], &["lo", "--lora-rank", "2"]].concat());
    ok(&lora);
    let cfg = |run: &str| std::fs::read_to_string(p.join(run).join("config.toml")).unwrap();
    let lr = |run: &str| cfg(run).lines().find_map(|l| l.strip_prefix("lr = ").map(|v| v.parse::<f64>().unwrap())).unwrap();
    assert_eq!((lr("ft"), lr("lo")), (2e-5, 2e-4));
    // And a preset of another architecture is the preset's.
    let small = "train --preset gpt2-124m --d-model 32 --layers 1 --heads 2 --context 16 --batch 1 --steps 1 --threads 1 --out g";
    ok(&toy(&p, &small.split(' ').collect::<Vec<_>>()));
    assert!(cfg("g").contains("arch = \"gpt2\""));
}

/// toy.toml takes a list key in the flag's comma form too; the command-line
/// flags that are no project key are named as such; a LoRA run's resume state
/// given as --lora names its adapter.
#[test]
fn toml_lists_command_line_keys_and_a_state_as_lora() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&toy(t, &["train", "--preset", "smoke", "--steps", "1", "--threads", "1", "--out", "base"]));
    std::fs::write(t.join("toy.toml"), "[train]\nlora_targets = \"attn_q, ffn_up\"\nlora_rank = 2\nsteps = 1\nthreads = 1\n").unwrap();
    ok(&toy(t, &["train", "finetune", "--from", "base", "--save-every", "1", "--out", "lo"]));
    let cfg = std::fs::read_to_string(t.join("lo/config.toml")).unwrap();
    assert!(cfg.contains("targets = [\"attn_q\", \"ffn_up\"]"), "{cfg}");
    // An empty entry is refused as the flag's is (was: silently nothing frozen).
    std::fs::write(t.join("toy.toml"), "[train]\nfreeze = \",\"\nsteps = 1\n").unwrap();
    crate::common::process::fails(&toy(t, &["train", "--out", "x"]), "train", "--freeze \"\" matches no parameter");
    std::fs::write(t.join("toy.toml"), "[train]\njson = true\n").unwrap();
    crate::common::process::fails(
        &toy(t, &["train"]),
        "train",
        "line 2 (`json = true`): `json` is not a [train] key: give --json on the command line",
    );
    std::fs::remove_file(t.join("toy.toml")).unwrap();
    let o = toy(t, &["generate", "base", "--lora", "lo/weights/step_1.state.gguf", "-n", "1", "--threads", "1"]);
    crate::common::process::fails(
        &o,
        "generate",
        "a resume state (optimizer moments, for toy train --resume), not an adapter; its adapter is lo/weights/step_1.gguf",
    );
}
