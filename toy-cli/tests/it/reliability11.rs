//! The eleventh reliability pass (a new user's trial, stop 52): a run a signal
//! stops between micro-batches says which step its last validation is of, `toy eval`'s truncation note on chat data counts the whole file, and
//! Alpaca records (`instruction`, `input`, `output`) are chat data.

use crate::chat::{chat_model, finetune, CHATML};
use crate::common::process::{ok, signal_at, toy};

/// An output path through a folder that does not exist and `..`
/// (`nosub/../run`) names, once that folder is made, what the path without
/// them names: refused, as the plain path is, with nothing made.
#[test]
fn outputs_through_a_missing_folder_and_dotdot_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&toy(t, &["train", "--threads", "1", "--preset", "smoke", "--steps", "1", "--out", "run"]));
    std::fs::write(t.join("s.txt"), "once upon a time\n").unwrap();
    let cases: [&[&str]; 3] = [
        &["train", "--threads", "1", "--preset", "smoke", "--steps", "1", "--out", "nosub/../run"],
        &["debug", "tokenize", "run", "--text", "s.txt", "--out", "nosub/../s.txt"],
        &["prep", "s.txt", "--out", "nosub/../run"],
    ];
    for args in cases {
        let o = toy(t, args);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains("`..` leaves nosub, which does not exist") && err.lines().count() == 1, "{err}");
        assert!(!t.join("nosub").exists(), "{args:?}");
    }
    assert_eq!(std::fs::read_to_string(t.join("s.txt")).unwrap(), "once upon a time\n");
    assert!(!std::fs::read_to_string(t.join("run/config.toml")).unwrap().is_empty());
}

/// A signal before the first step (here during step 0's validation over a
/// long split, `--eval-windows 0`) ends the run there, with step 0 saved: no
/// step runs after it, as one more step and its validation did before.
#[test]
fn a_signal_before_the_first_step_ends_the_run_at_step_0() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // 1M ids: a validation split of 100,000 tokens, seconds of validation at the tiny preset.
    let ids: Vec<String> = (0..1_000_000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 24).to_string()).collect();
    std::fs::write(t.join("ids.txt"), ids.join(" ")).unwrap();
    let args = ["train", "--threads", "1", "--preset", "tiny", "--steps", "3", "--eval-windows", "0", "--corpus", "ids.txt"];
    let (out, err) = signal_at(t, &args, "early", "run_start", "-TERM");
    assert_eq!(out.status.code(), Some(143), "{err}");
    assert!(err.contains("interrupted at step 0; saved weights/step_0.gguf"), "{err}");
    let events = std::fs::read_to_string(t.join("early/events.jsonl")).unwrap();
    assert!(!events.contains("\"kind\":\"step\""), "{events}");
    assert!(t.join("early/weights/step_0.gguf").is_file());
}

/// `--grad-accum 3000` makes step 2 long; a signal during it stops the run
/// between micro-batches, on step 1, at once (no validation), and `--json`
/// and `run_end` say which step their `val_loss` is of: step 0's.
#[test]
fn a_stop_between_micro_batches_says_which_step_its_val_loss_is_of() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let args = ["train", "--threads", "1", "--preset", "smoke", "--steps", "3", "--grad-accum", "3000", "--eval-every", "0", "--json"];
    let (out, err) = signal_at(t, &args, "cut", "step", "-INT");
    assert_eq!(out.status.code(), Some(130), "{err}");
    assert!(err.contains("interrupted at step 1;"), "{err}");
    let events: Vec<serde_json::Value> =
        std::fs::read_to_string(t.join("cut/events.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    let evals: Vec<u64> = events.iter().filter(|e| e["kind"] == "eval").map(|e| e["step"].as_u64().unwrap()).collect();
    assert_eq!(evals, [0], "no validation on a stop between micro-batches");
    let v0 = events.iter().find(|e| e["kind"] == "eval").unwrap()["val_loss"].as_f64();
    let end = events.iter().find(|e| e["kind"] == "run_end").expect("run_end");
    assert_eq!((end["val_loss"].as_f64(), end["val_step"].as_u64(), end["final_step"].as_u64()), (v0, Some(0), Some(1)), "{end}");
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!((summary["val_loss"].as_f64(), summary["val_step"].as_u64(), summary["steps"].as_u64()), (v0, Some(0), Some(1)));
    // A run that completes validates its last step.
    let done = toy(t, &["train", "--threads", "1", "--preset", "smoke", "--steps", "2", "--json", "--out", "done"]);
    let summary: serde_json::Value = serde_json::from_slice(&done.stdout).unwrap();
    assert_eq!(summary["val_step"].as_u64(), Some(2), "{summary}");
}

/// Conversations of very different lengths go to windows of different sizes;
/// only the longest group's window (the model's context) cuts, and the note
/// says how many of all the file's conversations it cut.
#[test]
fn eval_notes_truncation_of_the_whole_file() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    let turn = |q: &str, a: &str| {
        serde_json::json!({"messages": [{"role": "user", "content": q}, {"role": "assistant", "content": a}]}).to_string()
    };
    let long = "the cat sat on the mat and then the dog ran to the tree. ".repeat(40);
    let lines = [turn("Hi?", "Hello."), turn(&long, "Yes."), turn("Who?", "Toy."), turn("A story?", &long), turn("Why?", "Because.")];
    std::fs::write(t.join("mixed.jsonl"), lines.join("\n") + "\n").unwrap();
    let o = toy(t, &["eval", "chat.gguf", "--corpus", "mixed.jsonl", "--threads", "1"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let notes: Vec<&str> = err.lines().filter(|l| l.contains("conversations truncated")).collect();
    assert_eq!(notes.len(), 1, "{err}");
    assert!(notes[0].starts_with("note: 2 of 5 conversations truncated to 257 tokens"), "{err}");
}

/// Alpaca records fine-tune as a user turn (the instruction, a blank line and
/// the input) and an assistant turn under the model's template, the answer
/// alone trained; without a template they are Alpaca's own prompt.
#[test]
fn alpaca_records_are_chat_data() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    let row = |i: &str, x: &str, o: &str| serde_json::json!({"instruction": i, "input": x, "output": o}).to_string() + "\n";
    let rows = [row("Name a colour.", "", "Blue."), row("Add the numbers.", "2 and 2", "4")].concat().repeat(10);
    std::fs::write(t.join("a.jsonl"), rows).unwrap();
    let o = toy(t, &["debug", "chat-masks", "chat.gguf", "--corpus", "a.jsonl"]);
    ok(&o);
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(shown.contains("<|im_start|>user\nAdd the numbers.\n\n2 and 2<|im_end|>"), "{shown}");
    assert!(shown.contains("<|im_start|>assistant\n⟦4<|im_end|>⟧"), "{shown}");
    let o = finetune(t, "chat.gguf", "a.jsonl", "ft", &["--steps", "2"]);
    ok(&o);
    let start = crate::chat::events(&t.join("ft")).into_iter().find(|e| e["kind"] == "run_start").expect("run_start");
    assert_eq!(start["chat"]["records"], "alpaca", "{start}");
    // toy's own models carry no template: Alpaca's prompt, as plain text.
    let o = toy(t, &["debug", "chat-masks", "base/weights/latest", "--corpus", "a.jsonl"]);
    ok(&o);
    let shown = String::from_utf8_lossy(&o.stdout);
    assert!(shown.contains("### Instruction:\nAdd the numbers.\n\n### Input:\n2 and 2\n\n### Response:\n⟦4"), "{shown}");
}

/// A file that starts with Alpaca records holds only them, and half of one
/// (no output) is named as such, not read as text without a "text" field.
#[test]
fn alpaca_files_refuse_other_records_by_name() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    chat_model(t, Some(CHATML), "chat.gguf");
    let alpaca = r#"{"instruction": "Say hi.", "input": "", "output": "Hi."}"#;
    let msgs = r#"{"messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}]}"#;
    std::fs::write(t.join("mixed.jsonl"), format!("{alpaca}\n{msgs}\n")).unwrap();
    let o = toy(t, &["eval", "chat.gguf", "--corpus", "mixed.jsonl"]);
    crate::common::process::fails(
        &o,
        "eval",
        "mixed.jsonl:2: no \"instruction\" and \"output\" fields; the file's first record is an Alpaca record",
    );
    std::fs::write(t.join("half.jsonl"), format!("{}\n{alpaca}\n", r#"{"instruction": "Do.", "input": ""}"#)).unwrap();
    let o = finetune(t, "chat.gguf", "half.jsonl", "h", &["--steps", "1"]);
    crate::common::process::fails(&o, "train", "half.jsonl:1: an Alpaca record needs \"instruction\" and \"output\"");
}

/// `toy export merge`: the temporaries a killed merge left (`GgufWriter`
/// names them `.NAME.tmp-PID-N`) are removed by the next; `--out` into a
/// run's weights folder is refused (a replaced checkpoint broke its
/// `--resume`); a quantized merge of a toy-trained base records
/// `general.quantization_version`, as llama-quantize's files do.
#[test]
fn export_merge_cleans_up_and_keeps_out_of_runs() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let quick = ["--preset", "smoke", "--threads", "1", "--log-every", "1000"];
    ok(&toy(t, &[&["train", "--steps", "2", "--out", "base"][..], &quick].concat()));
    let lora = ["train", "finetune", "--from", "base", "--lora-rank", "2", "--steps", "2", "--out", "lo"];
    ok(&toy(t, &[&lora[..], &quick].concat()));
    // A dead writer's temporary, in the writer's form.
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    dead.wait().unwrap();
    let stale = t.join(format!(".m.gguf.tmp-{}-0", dead.id()));
    std::fs::write(&stale, b"half").unwrap();
    ok(&toy(t, &["export", "merge", "--base", "base", "--lora", "lo", "--out", "m.gguf", "--type", "q8_0"]));
    assert!(!stale.exists(), "a dead writer's temporary was left");
    let m = ggml_rs::gguf::GgufFile::open(t.join("m.gguf")).unwrap();
    assert_eq!(m.get_u64("general.quantization_version").unwrap(), 2);
    let o = toy(t, &["export", "merge", "--base", "base", "--lora", "lo", "--out", "base/weights/step_1.gguf"]);
    crate::common::process::fails(&o, "export", "inside a run's weights folder, which holds its checkpoints");
    // f32 holds nothing quantized: no such key.
    ok(&toy(t, &["export", "merge", "--base", "base", "--lora", "lo", "--out", "f.gguf", "--type", "f32"]));
    assert!(ggml_rs::gguf::GgufFile::open(t.join("f.gguf")).unwrap().get_u64("general.quantization_version").is_err());
}
