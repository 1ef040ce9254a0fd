//! The sixth reliability pass (fresh users' trials, stop 48): temporaries a
//! killed writer left, inputs that are not regular files, broken resume
//! states, and messages that named the wrong source or no remedy.

use crate::common::process::{fails, ok, toy};
use ggml_rs::gguf::{GgufFile, GgufWriter};
use std::path::Path;
use std::process::Command;

/// A smoke run in `dir/R` of `steps` steps, saving every step, its batches recorded.
fn trained(dir: &Path, steps: &str) {
    let args = ["train", "--preset", "smoke", "--steps", steps, "--save-every", "1", "--keep", "0"];
    ok(&toy(dir, &[&args[..], &["--threads", "1", "--log-every", "1000", "--record-batches", "--out", "R"]].concat()));
}

/// A process id that no process has now (a child that ran and was reaped).
fn dead_pid() -> u32 {
    let mut c = Command::new("true").spawn().unwrap();
    let pid = c.id();
    c.wait().unwrap();
    pid
}

/// A writer killed mid-write leaves `.NAME.tmp-PID`; the next write of NAME
/// removes it, and leaves a live process's temporary alone.
#[test]
fn the_next_write_removes_a_dead_writers_temporary() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    trained(t, "1");
    let (dead, live) = (t.join(format!(".d.gguf.tmp-{}", dead_pid())), t.join(format!(".d.gguf.tmp-{}", std::process::id())));
    std::fs::write(&dead, b"half").unwrap();
    std::fs::write(&live, b"busy").unwrap();
    ok(&toy(t, &["debug", "dump-logits", "R", "--batches", "R/batches.bin", "--out", "d.gguf", "--threads", "1"]));
    assert!(!dead.exists() && live.exists() && t.join("d.gguf").is_file());
}

/// A FIFO given as a file to read is refused at once (reading it waited for a
/// writer for ever); a batch layout this build cannot read says why.
#[test]
fn fifos_and_bad_layouts_are_named() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    trained(t, "1");
    assert!(Command::new("mkfifo").arg(t.join("fifo")).status().unwrap().success());
    fails(&toy(t, &["debug", "tokenize", "R", "--text", "fifo", "--out", "ids.bin"]), "debug", "--text fifo: not a regular file");
    let dump = |batches: &str| toy(t, &["debug", "dump-logits", "R", "--batches", batches, "--out", "d.gguf", "--threads", "1"]);
    fails(&dump("fifo"), "debug", "fifo: not a regular file");
    let o = toy(t, &["debug", "dump-logits", "R", "--batches", "R/batches.bin", "--out", "fifo", "--threads", "1"]);
    fails(&o, "debug", "--out fifo: exists and is a FIFO, not a regular file");
    fails(&toy(t, &["debug", "tokenize", "R", "--text", "R/config.toml", "--out", "R"]), "debug", "--out R: exists and is a folder");
    let json = std::fs::read_to_string(t.join("R/batches.json")).unwrap();
    let mut layout: serde_json::Value = serde_json::from_str(&json).unwrap();
    layout["window"] = 1.into();
    std::fs::write(t.join("R/batches.json"), layout.to_string()).unwrap();
    fails(&dump("R/batches.bin"), "debug", "a layout this build does not read: window 1 (at least 2");
    assert!(!t.join("d.gguf").exists());
}

/// A resume state with a NaN moment is refused as it loads, naming the file
/// and the tensor (it surfaced a step later as a loss blamed on --lr); one
/// whose state is gone names the intact checkpoint to resume from.
#[test]
fn a_broken_or_missing_resume_state_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    trained(t, "3");
    let state = t.join("R/weights/step_3.state.gguf");
    let f = GgufFile::open(&state).unwrap();
    let mut g = GgufWriter::new();
    for (k, v) in f.metadata() {
        if k != "general.alignment" {
            g.set(k, v.clone()).unwrap();
        }
    }
    let moment = f.tensors().iter().find(|i| i.name.ends_with(".adam_m")).unwrap().name.clone();
    for info in f.tensors() {
        let mut v = f.tensor_f32(&info.name).unwrap();
        if info.name == moment {
            v[1] = f32::NAN;
        }
        g.add_tensor_data(&info.name, &info.shape(), &v).unwrap();
    }
    drop(f);
    g.write(&state).unwrap();
    let resume = || toy(t, &["train", "--resume", "R", "--steps", "5", "--threads", "1"]);
    let broken = format!("tensor {moment} holds NaN at element 1; the resume state is broken; step_2.gguf is intact: to resume from it");
    fails(&resume(), "train", &broken);
    std::fs::remove_file(&state).unwrap();
    fails(&resume(), "train", "has no resume state beside it; step_2.gguf is intact: to resume from it, run ln -sfn step_2.gguf");
    // A state given where a model goes says what it is, to every command.
    let st = "R/weights/step_2.state.gguf";
    let said = "a resume state (optimizer moments, for toy train --resume), not a model; its checkpoint is R/weights/step_2.gguf";
    fails(&toy(t, &["generate", st, "-n", "1"]), "generate", said);
    fails(&toy(t, &["train", "warm-start", "--donor", st, "--match-by", "index", "--preset", "smoke", "--steps", "1"]), "train", said);
    fails(&toy(t, &["train", "finetune", "--from", st, "--steps", "1"]), "train", said);
    fails(&toy(t, &["debug", "tokenize", st, "--text", "R/config.toml", "--out", "ids.bin"]), "debug", said);
}

/// A value from a run's config.toml that fails validation is said of
/// config.toml, even when the message names no flag.
#[test]
fn a_bad_value_in_config_toml_is_said_of_it() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    trained(t, "1");
    let cfg = std::fs::read_to_string(t.join("R/config.toml")).unwrap();
    let edited: String =
        cfg.lines().map(|l| if l.starts_with("n_layers = ") { "n_layers = 0\n".to_string() } else { format!("{l}\n") }).collect();
    std::fs::write(t.join("R/config.toml"), edited).unwrap();
    fails(&toy(t, &["train", "--resume", "R", "--steps", "3", "--threads", "1"]), "train", "--resume R: config.toml: ");
    // A device that cannot be used, opened as the run starts, is said of config.toml too.
    let edited: String =
        cfg.lines().map(|l| if l.starts_with("device = ") { "device = \"tpu\"\n".to_string() } else { format!("{l}\n") }).collect();
    std::fs::write(t.join("R/config.toml"), edited).unwrap();
    let o = toy(t, &["train", "--resume", "R", "--steps", "3", "--threads", "1"]);
    fails(&o, "train", "--resume R: config.toml: device tpu: ");
    assert!(String::from_utf8_lossy(&o.stderr).contains("(--device overrides it on resume)"));
}

/// An empty $TOY_BACKEND_DIR is unset; a set one is named as such, and does
/// not stop the commands that compute nothing.
#[test]
fn toy_backend_dir_is_named_and_empty_is_unset() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let run = |value: &str, args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_toy")).args(args).current_dir(t).env("TOY_BACKEND_DIR", value).output().unwrap()
    };
    trained(t, "1");
    ok(&run("", &["devices"]));
    ok(&run(".", &["new", "p"]));
    ok(&run(".", &["debug", "tokenize", "p/../R", "--text", "p/toy.toml", "--out", "ids.bin"]));
    if cfg!(not(feature = "dynamic")) {
        fails(&run(".", &["devices"]), "devices", "$TOY_BACKEND_DIR: ");
    }
}

/// finetune takes a preset's batch and context, as its help says, whatever the
/// preset's shape, with a note; `toy new`'s follow-up command is quoted for a shell.
#[test]
fn a_finetune_preset_gives_batch_and_context_and_new_quotes_its_path() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    trained(t, "1");
    std::fs::write(t.join("c.txt"), toy_stories::generate_with(3, 30)).unwrap();
    // A preset of another architecture too (gpt2-124m over a llama).
    for (preset, out, batch, ctx) in [("tiny", "F", 8, 64), ("gpt2-124m", "G", 16, 1024)] {
        let args =
            ["train", "finetune", "--from", "R", "--corpus", "c.txt", "--preset", preset, "--steps", "1", "--threads", "1", "--out", out];
        let o = toy(t, &args);
        ok(&o);
        let err = String::from_utf8_lossy(&o.stderr);
        // The values it gives: the context is the preset's capped by the model's 32.
        let note = format!("note: --preset {preset} gives the batch ({batch}) and the context (32: the preset's {ctx}, capped by the model's); the model keeps its own shape (d_model 64");
        assert!(err.contains(&note), "{err}");
    }
    let cfg = std::fs::read_to_string(t.join("G/config.toml")).unwrap();
    assert!(cfg.contains("arch = \"llama\"") && cfg.contains("batch = 16"), "{cfg}");
    let o = toy(t, &["new", "my project"]);
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("(cd 'my project' && toy train)"));
}

/// A recipe chosen by toy.toml and refused for what it lacks says so.
#[test]
fn a_recipe_from_toy_toml_is_named_when_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("toy.toml"), "[train]\nrecipe = \"finetune\"\n").unwrap();
    fails(&toy(t, &["train"]), "train", "finetune needs --from MODEL.gguf (toy.toml sets recipe = \"finetune\")");
    fails(&toy(t, &["train", "warm-start"]), "train", "warm-start needs --donor MODEL.gguf");
    // A value whose message names its key, not its flag, is said of toy.toml too.
    std::fs::write(t.join("toy.toml"), "[train]\ncontext = 0\n").unwrap();
    fails(&toy(t, &["train", "--steps", "1"]), "train", "context must be at least 1 (set in toy.toml)");
    // A wrong type says what to write, not serde's names of Rust types.
    std::fs::write(t.join("toy.toml"), "[train]\nsteps = -5\n").unwrap();
    fails(&toy(t, &["train"]), "train", "line 2 (`steps = -5`): invalid value: integer `-5`, expected a whole number, 0 or more");
    // A number beyond an f32 is refused where it is written, as the flag is, not read as inf.
    std::fs::write(t.join("toy.toml"), "[train]\nsteps = 1\nlr = 1e40\n").unwrap();
    fails(&toy(t, &["train"]), "train", "line 3 (`lr = 1e40`): beyond a 32-bit float's range");
}

/// A folder of text is evaluated with its bits per byte, as its one file is.
#[test]
fn eval_of_a_text_folder_gives_bits_per_byte() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    trained(t, "1");
    std::fs::create_dir(t.join("sf")).unwrap();
    std::fs::write(t.join("sf/story.txt"), toy_stories::generate_with(4, 20)).unwrap();
    let bpb = |corpus: &str| {
        let o = toy(t, &["eval", "R", "--corpus", corpus, "--threads", "1", "--json"]);
        ok(&o);
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["bits_per_byte"].as_f64()
    };
    let file = bpb("sf/story.txt");
    assert!(file.is_some() && bpb("sf") == file);
    // The bytes are the documents' (trimmed), one more each for its end of text:
    // "ab" and "cd é" are 2 + 1 and 5 + 1, whatever surrounds them; the scored
    // targets are all but the first token ("a", context only): 8.
    std::fs::write(t.join("two.txt"), "  ab \n<|endoftext|>\n\ncd é\n\n").unwrap();
    let o = toy(t, &["eval", "R", "--corpus", "two.txt", "--threads", "1", "--json"]);
    ok(&o);
    assert_eq!(serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["bytes"], 8);
}
