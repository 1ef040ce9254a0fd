//! The thirteenth reliability pass (a new user's trial, stop 54): a model
//! with a dimension of size 1 (context 1, feed-forward 1, LoRA rank 1) is
//! read back from the checkpoints and merges it wrote (GGUF drops trailing 1s:
//! `[64, 1]` is stored as `[64]`; the shape check had refused toy's own files,
//! and a merge had kept such a matrix f32 as if it were a norm), and
//! a resumed run's bf16 on the CPU names where each side came from, and a
//! benchmark's refusals name their flag.

use crate::common::process::{fails, ok, toy};
use std::path::Path;

/// `toy train ARGS --steps 1 --threads 1 --out NAME`, which must succeed.
fn train(t: &Path, name: &str, args: &[&str]) {
    let mut all = vec!["train", "--threads", "1", "--steps", "1", "--out", name];
    all.extend_from_slice(args);
    ok(&toy(t, &all));
}

#[test]
fn checkpoints_with_a_dimension_of_one_load_back() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // context 1: position_embd.weight [64, 1]
    train(t, "ctx1", &["--arch", "gpt2", "--preset", "smoke", "--context", "1"]);
    ok(&toy(t, &["generate", "ctx1", "--prompt", "Once", "-n", "2", "--threads", "1"]));
    ok(&toy(t, &["train", "--resume", "ctx1", "--steps", "2", "--threads", "1"]));
    // feed-forward 1: ffn_gate/ffn_up [64, 1]
    train(t, "ff1", &["--arch", "llama", "--preset", "smoke", "--d-ff", "1"]);
    ok(&toy(t, &["generate", "ff1", "--prompt", "Once", "-n", "2", "--threads", "1"]));
    // merged in a quantized type: those one-row matrices are matrices (they had been kept f32
    // as if they were norms, and the merged file was refused); q4_k falls back to q5_0 for them
    ok(&toy(t, &["train", "finetune", "--from", "ff1", "--lora-rank", "1", "--steps", "1", "--threads", "1", "--out", "ff1-r1"]));
    for ty in ["q8_0", "q4_k"] {
        let out = format!("ff1-{ty}.gguf");
        ok(&toy(t, &["export", "merge", "--base", "ff1", "--lora", "ff1-r1", "--out", &out, "--type", ty]));
        ok(&toy(t, &["generate", &out, "--prompt", "Once", "-n", "2", "--threads", "1"]));
        ok(&toy(
            t,
            &["train", "finetune", "--from", &out, "--lora-rank", "1", "--steps", "1", "--threads", "1", "--out", &format!("again-{ty}")],
        ));
    }
    // LoRA rank 1: each A [in, 1]
    train(t, "base", &["--preset", "smoke"]);
    ok(&toy(t, &["train", "finetune", "--from", "base", "--lora-rank", "1", "--steps", "1", "--threads", "1", "--out", "r1"]));
    ok(&toy(t, &["generate", "base", "--lora", "r1/weights/latest", "--prompt", "Once", "-n", "2", "--threads", "1"]));
    ok(&toy(t, &["train", "--resume", "r1", "--steps", "2", "--threads", "1"]));
}

#[test]
fn a_resumed_runs_bf16_on_the_cpu_names_its_sources() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    train(t, "r", &["--preset", "smoke"]);
    // bf16 from the command line, the CPU from the run: it blamed config.toml for both
    fails(
        &toy(t, &["train", "--resume", "r", "--steps", "2", "--dtype", "bf16"]),
        "train",
        "--resume r: --dtype bf16 needs a CUDA device, and the run trains on cpu (its config.toml): add --device cuda, or use --dtype f32",
    );
    fails(
        &toy(t, &["train", "--resume", "r", "--steps", "2", "--dtype", "bf16", "--device", "cpu"]),
        "train",
        "--dtype bf16 needs a CUDA device, not --device cpu",
    );
}

#[test]
fn bench_refusals_name_their_flag() {
    let tmp = tempfile::tempdir().unwrap();
    fails(
        &toy(tmp.path(), &["debug", "bench", "--from", "nothing-here"]),
        "debug",
        "--from nothing-here: no such checkpoint or run folder",
    );
    // GPT-2 124M at batch 1000: 760 GiB of compute buffers; it said "use a smaller model"
    let args = ["debug", "bench", "--threads", "1", "--steps", "1", "--warmup", "0", "--preset", "gpt2-124m", "--batch", "1000"];
    fails(&toy(tmp.path(), &args), "debug", "(use a smaller --batch, --context or --preset)");
}
