//! The thirteenth reliability pass (a new user's trial, stop 54): a model
//! with a dimension of size 1 (context 1, feed-forward 1, LoRA rank 1) is
//! read back from the checkpoints it wrote (GGUF drops trailing 1s: `[64, 1]`
//! is stored as `[64]`, and the shape check had refused its own files), and
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
