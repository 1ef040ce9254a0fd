//! Bad input through the binary: one line `toy <cmd>: ...`, exit code 2, no
//! panic and no half-made output; plus the warm-start recipe and the
//! `toy debug` dump formats the parity harness reads.

use crate::common::process::{fails, toy};
use ggml_rs::gguf::{GgufFile, GgufWriter};
use ggml_rs::DType;
use std::path::Path;
use std::process::Output;

fn ok(o: &Output) {
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

const QUICK: &[&str] = &["--preset", "smoke", "--threads", "1", "--log-every", "1000"];

fn train(dir: &Path, extra: &[&str]) -> Output {
    let mut args = vec!["train"];
    args.extend_from_slice(QUICK);
    args.extend_from_slice(extra);
    toy(dir, &args)
}

/// A misspelled flag keeps clap's tip on the line, and llama.cpp's flags are
/// named with toy's.
#[test]
fn near_misses_and_llama_cpp_flags() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    fails(
        &train(t, &["--stepz", "3"]),
        "train",
        "unexpected argument '--stepz' found; a similar argument exists: '--steps' (see `toy train --help`)",
    );
    fails(&toy(t, &["generate", "m.gguf", "--temp", "0.5"]), "generate", "--temp is llama.cpp's: toy's temperature is --temperature");
    fails(&toy(t, &["generate", "-m", "m.gguf"]), "generate", "-m is llama.cpp's: the model is the first argument");
    fails(&toy(t, &["eval", "m.gguf", "-c", "512"]), "eval", "-c is llama.cpp's: toy's window is --context");
    fails(&toy(t, &["generate", "m.gguf", "-ngl", "99"]), "generate", "-ngl is llama.cpp's: toy runs every layer where --device says");
    // generate has no --context: its hint says how its window is sized
    fails(
        &toy(t, &["generate", "m.gguf", "--ctx-size", "64"]),
        "generate",
        "--ctx-size is llama.cpp's: toy generate's window is the prompt and -n",
    );
    // the Hugging Face Trainer's names, for train
    fails(&train(t, &["--learning-rate", "1e-4"]), "train", "--learning-rate is the Hugging Face Trainer's: toy's is --lr");
    fails(&train(t, &["--num_train_epochs=3"]), "train", "--num_train_epochs is the Hugging Face Trainer's: toy's is --epochs");
    fails(&train(t, &["--max-seq-length", "512"]), "train", "--max-seq-length is the Hugging Face Trainer's: toy's is --context");
}

#[test]
fn flags_and_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    fails(&train(t, &["--steps", "0", "--out", "a"]), "train", "--steps");
    fails(&train(t, &["--steps", "-3", "--out", "a"]), "train", "'-3' for '--steps <STEPS>': cannot be negative");
    fails(&train(t, &["--batch", "1.5", "--out", "a"]), "train", "not a whole number");
    // A negative value in exponent form is the flag's value, refused by the flag's own check.
    fails(&train(t, &["--lr", "-1e-3", "--out", "a"]), "train", "--lr -0.001 must be positive");
    fails(&train(t, &["--lr", "fast", "--out", "a"]), "train", "fast");
    fails(&train(t, &["--context", "100000", "--out", "a"]), "train", "--context 100000");
    fails(&train(t, &["--heads", "3", "--out", "a"]), "train", "divisible");
    fails(&train(t, &["--device", "cuda", "--out", "a"]), "train", "no cuda device or backend found");
    fails(&train(t, &["--resume", "nowhere"]), "train", "--resume nowhere: no such run folder");
    // A flag clap refuses points to the help of the subcommand given, under the command's prefix.
    fails(&toy(t, &["debug", "bench", "--vocab", "x"]), "debug", "(see `toy debug bench --help`)");
    fails(&toy(t, &["export", "merge", "--type", "q9"]), "export", "(see `toy export merge --help`)");
    fails(&toy(t, &["debug", "bench", "--preset", "tiny", "--vocab", "1"]), "debug", "at least 2 token ids");
    std::fs::create_dir(t.join("empty")).unwrap();
    fails(&train(t, &["--resume", "empty"]), "train", "an empty folder, not a run folder");
    std::fs::write(t.join("file"), "x").unwrap();
    fails(&train(t, &["--steps", "1", "--out", "file/run"]), "train", "file/run");
    fails(&train(t, &["--steps", "1", "--out", "file"]), "train", "is a file");
    // A run that fails before saving leaves neither its folder nor the parents it made.
    std::fs::create_dir(t.join("kept")).unwrap();
    fails(&train(t, &["--steps", "1", "--batch", "500000", "--out", "kept/new/deeper/run"]), "train", "out of memory");
    assert!(t.join("kept").is_dir() && !t.join("kept/new").exists());
    let o = toy(t, &["bogus"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.code() == Some(2) && err.starts_with("toy: unrecognized subcommand") && err.contains("`toy --help`"), "{err}");
    fails(&toy(t, &["eval", "r"]), "eval", "--corpus <CORPUS>");
    // An argument that is not UTF-8 is clap's one line, not a panic.
    #[cfg(unix)]
    {
        use std::os::unix::ffi::OsStrExt;
        let bad = std::ffi::OsStr::from_bytes(b"\xff");
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_toy")).arg("train").arg(bad).current_dir(t).output().unwrap();
        fails(&o, "train", "invalid value");
    }
    // Each optimizer setting is refused by its own flag's name.
    fails(&train(t, &["--grad-clip", "nan", "--out", "a"]), "train", "--grad-clip NaN");
    fails(&train(t, &["--grad-clip", "-1", "--out", "a"]), "train", "--grad-clip -1");
    fails(&train(t, &["--weight-decay", "inf", "--out", "a"]), "train", "--weight-decay inf");
    fails(&train(t, &["--min-lr", "1", "--out", "a"]), "train", "--min-lr 1 must be between 0 and --lr");
    // Counts that config.toml (signed 64-bit) cannot hold, and those past u64.
    for flag in ["--seed", "--steps", "--save-every", "--eval-every", "--log-every", "--warmup-steps"] {
        fails(&toy(t, &["train", "--preset", "smoke", flag, "9223372036854775808", "--out", "a"]), "train", flag);
        fails(&toy(t, &["train", "--preset", "smoke", flag, "18446744073709551616", "--out", "a"]), "train", "18446744073709551616");
    }
    fails(&train(t, &["--d-model", "1000000", "--out", "a"]), "train", "d_model");
    fails(&train(t, &["--d-model", "16384", "--layers", "1000", "--out", "a"]), "train", "GiB");
    fails(&train(t, &["--train-table", "--out", "a"]), "train", "--train-table");
    // Without --out the run would go to runs/<id>: nothing may be left there either.
    fails(&train(t, &["--device", "cuda"]), "train", "no cuda device");
    assert!(!t.join("a").exists() && !t.join("runs").exists(), "bad input left a run folder");
}

#[test]
fn generate_and_eval_refuse_bad_checkpoints() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, &["--steps", "2", "--out", "r"]));
    let good = std::fs::read(t.join("r/weights/step_2.gguf")).unwrap();
    std::fs::write(t.join("truncated.gguf"), &good[..good.len() / 2]).unwrap();
    std::fs::write(t.join("text.gguf"), "hello").unwrap();
    for f in ["truncated.gguf", "text.gguf", "missing.gguf"] {
        fails(&toy(t, &["generate", f, "-n", "1"]), "generate", f);
        fails(&toy(t, &["eval", f, "--corpus", "r/config.toml"]), "eval", f);
    }
    fails(&toy(t, &["generate", "r", "--temperature=-1"]), "generate", "--temperature -1");
    fails(&toy(t, &["generate", "r", "--top-p", "1.5"]), "generate", "--top-p 1.5 must be in (0, 1]");
    fails(&toy(t, &["generate", "r", "--chat", "hi"]), "generate", "no chat template");
    fails(&toy(t, &["generate", "r", "-n", "-1"]), "generate", "cannot be negative");
    fails(&toy(t, &["generate", "r", "--top-k", "-1"]), "generate", "cannot be negative");
    let lora = |targets: &str| toy(t, &["train", "finetune", "--from", "r", "--lora-rank", "2", "--lora-targets", targets, "--out", "f"]);
    fails(&lora("all-linear,attn_q"), "train", "all-linear names every matrix; give it alone");
    fails(&lora("nonsense"), "train", "PEFT's q_proj ... down_proj, or all-linear");
    assert!(!t.join("f").exists());
    fails(&toy(t, &["eval", "r", "--corpus", "missing.txt"]), "eval", "missing.txt");
    fails(&toy(t, &["eval", "r", "--corpus", "r/config.toml", "--batch", "0"]), "eval", "--batch");
    fails(&toy(t, &["eval", "r", "--corpus", "r/config.toml", "--context", "100000"]), "eval", "longer than the model's context");
    // eval says its window: the longest the text fills, at most the model's context.
    std::fs::write(t.join("short.txt"), "a b").unwrap();
    let o = toy(t, &["eval", "r", "--corpus", "short.txt", "--json", "--threads", "1"]);
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(v["context"].as_u64().unwrap() >= 1 && v["tokens"] == v["context"], "{v}");
    let o = toy(t, &["generate", "r", "-n", "5", "--json", "--seed", "1"]);
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["format"], "toy/generate-v1");
}

/// A GGUF whose token table is `dtype` `[w, v]` with `bytes`.
fn donor_file(path: &Path, dtype: DType, ne: &[i64], bytes: Vec<u8>) {
    let mut g = GgufWriter::new();
    g.set("general.architecture", "llama").unwrap();
    g.set("llama.embedding_length", ne[0] as u32).unwrap();
    g.add_tensor_bytes("token_embd.weight", dtype, ne, bytes).unwrap();
    g.write(path).unwrap();
}

#[test]
fn warm_start_checks_donors_and_writes_a_plain_llama() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // The project makes its own donor: a wider model trained on the default corpus.
    ok(&train(t, &["--d-model", "32", "--steps", "3", "--out", "donor"]));
    let donor = t.join("donor/weights/latest");
    let d = donor.to_str().unwrap();
    // 45 steps of 64 windows of 32 tokens pass the end of the corpus once.
    let o = train(t, &["warm-start", "--donor", d, "--steps", "45", "--batch", "64", "--out", "w", "--lens-init", "pca"]);
    ok(&o);
    assert!(String::from_utf8_lossy(&o.stdout).contains("student tokens matched (100.0%)"));
    let f = GgufFile::open(t.join("w/weights/latest")).unwrap();
    assert_eq!(f.get_str("general.architecture").unwrap(), "llama");
    assert_eq!(f.tensor("token_embd.weight").unwrap().shape(), vec![64, 1024], "the lens is folded into a [d_model, vocab] table");
    assert!(f.tensor("lens.weight").is_none());
    ok(&toy(t, &["generate", "w", "-n", "3", "--threads", "1"]));
    let events = std::fs::read_to_string(t.join("w/events.jsonl")).unwrap();
    assert!(events.contains("\"recipe\":\"warm-start\"") && events.contains("\"kind\":\"epoch\""), "no epoch event");

    // A run folder as --donor: its weights/latest; a folder that is not one is named as such.
    ok(&train(t, &["warm-start", "--donor", "donor", "--steps", "1", "--out", "w2"]));
    std::fs::create_dir(t.join("plain")).unwrap();
    fails(&train(t, &["warm-start", "--donor", "plain", "--steps", "1", "--out", "x"]), "train", "a folder without weights/latest");
    // A run folder that has not saved its first checkpoint; a LoRA run (an adapter).
    std::fs::create_dir(t.join("early")).unwrap();
    std::fs::copy(t.join("donor/config.toml"), t.join("early/config.toml")).unwrap();
    fails(&train(t, &["warm-start", "--donor", "early", "--steps", "1", "--out", "x"]), "train", "the run has saved no checkpoint yet");
    ok(&toy(t, &["train", "finetune", "--from", "donor", "--lora-rank", "2", "--steps", "1", "--out", "lo", "--threads", "1"]));
    fails(&train(t, &["warm-start", "--donor", "lo", "--steps", "1", "--out", "x"]), "train", "a LoRA adapter, not a model");
    fails(&train(t, &["warm-start", "--steps", "1", "--out", "x"]), "train", "--donor");
    fails(&train(t, &["warm-start", "--donor", "donor/config.toml", "--steps", "1", "--out", "x"]), "train", "bad magic");
    fails(
        &train(t, &["warm-start", "--donor", d, "--donor-width", "48", "--steps", "1", "--out", "x"]),
        "train",
        "does not match the donor's embedding width 32",
    );
    let mut g = GgufWriter::new();
    g.set("general.architecture", "llama").unwrap();
    g.add_tensor_data("output.weight", &[4, 4], &[0f32; 16]).unwrap();
    g.write(t.join("noembd.gguf")).unwrap();
    fails(&train(t, &["warm-start", "--donor", "noembd.gguf", "--steps", "1", "--out", "x"]), "train", "no token_embd.weight");
    // q4_0 blocks: 32 values in 18 bytes.
    donor_file(&t.join("q4.gguf"), DType::Q4_0, &[32, 8], vec![0u8; 8 * 18]);
    fails(&train(t, &["warm-start", "--donor", "q4.gguf", "--steps", "1", "--out", "x"]), "train", "only f32, f16, bf16 and q8_0");
    fails(&train(t, &["--donor", d, "--steps", "1", "--out", "x"]), "train", "warm-start");
    fails(
        &train(t, &["warm-start", "--donor", d, "--init", "scratch", "--lens-init", "pca", "--steps", "1", "--out", "x"]),
        "train",
        "--init donor",
    );
    assert!(!t.join("x").exists());
}

#[test]
fn debug_dumps_have_the_layout_the_parity_harness_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, &["--steps", "3", "--out", "r", "--save-initial", "--record-batches"]));
    let layout: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(t.join("r/batches.json")).unwrap()).unwrap();
    assert_eq!((layout["window"].as_u64(), layout["batch"].as_u64()), (Some(33), Some(1)));
    assert_eq!(std::fs::metadata(t.join("r/batches.bin")).unwrap().len(), 3 * 33 * 4);
    let o = toy(t, &["debug", "dump-grads", "r/weights/step_0.gguf", "--batches", "r/batches.bin", "--out", "g.gguf"]);
    ok(&o);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let loss = v["loss"].as_f64().unwrap();
    let events = std::fs::read_to_string(t.join("r/events.jsonl")).unwrap();
    let step1: serde_json::Value =
        events.lines().map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()).find(|e| e["kind"] == "step").unwrap();
    let run_loss = step1["loss"].as_f64().unwrap();
    assert!((loss - run_loss).abs() < 1e-5 * run_loss, "the dump's loss {loss} is not the run's step-1 loss {run_loss}");
    let ck = GgufFile::open(t.join("r/weights/step_0.gguf")).unwrap();
    let g = GgufFile::open(t.join("g.gguf")).unwrap();
    let names = |f: &GgufFile| f.tensors().iter().map(|x| (x.name.clone(), x.ne)).collect::<Vec<_>>();
    assert_eq!(names(&ck), names(&g), "gradients come in the checkpoint's names and shapes");
    ok(&toy(t, &["debug", "dump-logits", "r/weights/step_0.gguf", "--batches", "r/batches.bin", "--step", "2", "--out", "l.gguf"]));
    let l = GgufFile::open(t.join("l.gguf")).unwrap();
    assert_eq!(l.tensor("logits").unwrap().shape(), vec![1024, 32]);
    assert!(l.get_f64("toy.loss").unwrap() > 0.0);
    // A file that is not a recording is named as the user gave it.
    let o = toy(t, &["debug", "dump-logits", "r", "--batches", "r/weights/step_0.gguf", "--out", "m.gguf"]);
    fails(&o, "debug", "r/weights/step_0.gguf: no layout beside it");
    assert!(!t.join("m.gguf").exists());
}

/// The fresh-user trial of stop 39: messages that name what is wrong and what
/// to do, and conflicting or empty sampling input refused instead of ignored.
#[test]
fn trial_39_messages() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    ok(&train(t, &["--steps", "1", "--out", "r"]));
    let qwen2 = Path::new(env!("CARGO_MANIFEST_DIR")).join("../fixtures/qwen2/tiny-qwen2.gguf");
    let q = qwen2.to_str().unwrap();
    fails(&toy(t, &["generate", q, "--chat", " ", "-n", "1"]), "generate", "--chat: the message is empty");
    fails(&toy(t, &["generate", "r", "--prompt-ids", "1,,2", "-n", "1"]), "generate", "an empty place between commas");
    fails(&toy(t, &["generate", "r", "--greedy", "--temperature", "0.5"]), "generate", "--greedy");
    fails(&toy(t, &["generate", "r", "--greedy", "--top-k", "5"]), "generate", "--greedy");
    ok(&toy(t, &["generate", "r", "--prompt-ids", "1, 2", "-n", "1", "--greedy"]));
    fails(&train(t, &["--rope-base", "0", "--out", "a"]), "train", "rope_base 0 must be above 1");
    fails(&train(t, &["--lr", "1e300", "--out", "a"]), "train", "'1e300' for '--lr <LR>': beyond a 32-bit float's range");
    fails(&train(t, &["--lr", "1e-300", "--out", "a"]), "train", "'1e-300' for '--lr <LR>': too small for a 32-bit float");
    fails(&toy(t, &["generate", "r", "--temperature", "-1e39"]), "generate", "beyond a 32-bit float's range");
    fails(&train(t, &["--device", "cpu,cpu", "--out", "a"]), "train", "a batch of 1 (--batch, or the preset's) does not divide");
    // prep's --out through a file, and a prepared folder whose prep never finished.
    std::fs::write(t.join("notes.txt"), "a few words of text. ".repeat(50)).unwrap();
    fails(&toy(t, &["prep", "notes.txt", "--out", "notes.txt/x", "--vocab-size", "260"]), "prep", "notes.txt is not a folder");
    std::fs::create_dir(t.join("half")).unwrap();
    std::fs::write(t.join("half/.train.bin.tmp-1"), b"").unwrap();
    fails(&train(t, &["--corpus", "half", "--out", "a"]), "train", "half is an unfinished toy prep");
    assert!(!t.join("a").exists());
}

/// The fresh-user trial of stop 40: one line where the help was printed, and
/// messages that say what is wrong (not a false or misleading reason).
#[test]
fn trial_40_messages() {
    use crate::common::process::fails_with;
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // A command without its subcommand: what may follow, in one line.
    fails_with(&toy(t, &[]), 2, "toy: a command is needed: train, generate");
    fails(&toy(t, &["export"]), "export", "a subcommand is needed: merge (see `toy export --help`)");
    fails(&toy(t, &["debug"]), "debug", "a subcommand is needed: dump-grads");
    // prep given a finished prepared folder: said to be one (it said "unfinished").
    std::fs::write(t.join("notes.txt"), "a few words of text. ".repeat(60)).unwrap();
    ok(&toy(t, &["prep", "notes.txt", "--out", "pz", "--vocab-size", "260"]));
    fails(&toy(t, &["prep", "pz", "--out", "pz2"]), "prep", "pz is a prepared corpus (toy prep's output), not text");
    fails(&toy(t, &["prep", "notes.txt", "--bpe-sample", "1e10", "--out", "pq"]), "prep", "--bpe-sample 1e10: at most 1e9 MB");
    // gpt2 has no RoPE: --rope-base is refused as --kv-heads is.
    fails(&train(t, &["--arch", "gpt2", "--rope-base", "500", "--out", "g"]), "train", "--rope-base is a llama and qwen2 option");
    // An id file whose ids no vocabulary toy trains can hold names the id.
    let ids: Vec<u8> = [1u32, 2, 3, i32::MAX as u32, 4, 5].iter().flat_map(|v| v.to_le_bytes()).collect();
    std::fs::write(t.join("big.bin"), ids).unwrap();
    fails(&train(t, &["--corpus", "big.bin", "--out", "b"]), "train", "big.bin: token 3: id 2147483647 is beyond any vocabulary");
    // A pretty-printed .json is said to be one, not "EOF while parsing".
    std::fs::write(t.join("m.json"), "{\n  \"a\": 1\n}\n").unwrap();
    fails(&train(t, &["--corpus", "m.json", "--out", "j"]), "train", "m.json:1: a JSON object spread over lines");
    // A run folder is a model for debug chat-masks too (its weights/latest).
    ok(&train(t, &["--steps", "1", "--out", "r"]));
    std::fs::write(
        t.join("chat.jsonl"),
        "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}, {\"role\": \"assistant\", \"content\": \"yo\"}]}\n",
    )
    .unwrap();
    fails(&toy(t, &["debug", "chat-masks", "r", "--corpus", "chat.jsonl"]), "debug", "has no chat template");
    fails(&toy(t, &["generate", "r", "--seed", "-1"]), "generate", "'-1' for '--seed <SEED>': cannot be negative");
    for d in ["pz2", "pq", "g", "b", "j"] {
        assert!(!t.join(d).exists(), "{d} was left behind");
    }
}
