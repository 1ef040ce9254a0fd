//! Gradient accumulation (`--grad-accum N`): N micro-batches of `--batch B`
//! take the same optimizer steps as one batch of N·B (loss and gradient norm
//! to 1e-6, each weight tensor to 1e-6 of its norm, LoRA adapters 1e-5), for
//! a from-scratch llama, a LoRA finetune and two CPU replicas; the accumulators start from zero at every optimizer step (a
//! step that kept the last one's gradients would leave the weights apart
//! from step 2 on); a resumed run keeps N; N = 0 is refused.

use crate::common::process::{fails, ok, toy};
use ggml_rs::gguf::GgufFile;
use std::path::Path;
use toy_stories as stories;

/// The smoke shape at a short context, one thread, evaluation only at the ends.
const QUICK: &[&str] = &["--preset", "smoke", "--context", "16", "--threads", "1", "--log-every", "1000", "--eval-every", "0"];

/// `toy train [RECIPE ARGS] --out OUT` with the quick settings and `extra`.
fn train(dir: &Path, recipe: &[&str], out: &str, extra: &[&str]) {
    ok(&toy(dir, &[&["train"], recipe, &["--out", out], QUICK, extra].concat()));
}

fn events(run: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// `(step, loss, grad_norm, tokens)` of every `step` event.
fn steps(run: &Path) -> Vec<(u64, f64, f64, u64)> {
    let f = |e: &serde_json::Value, k: &str| e[k].as_f64().unwrap();
    events(run)
        .iter()
        .filter(|e| e["kind"] == "step")
        .map(|e| (e["step"].as_u64().unwrap(), f(e, "loss"), f(e, "grad_norm"), e["tokens"].as_u64().unwrap()))
        .collect()
}

/// The step events of runs `a` and `b` agree to 1e-6 (losses and gradient
/// norms relative, the same tokens per step), and every tensor of their
/// latest checkpoints to `weights_tol`: `‖a − b‖ ≤ weights_tol·‖b‖`. Not
/// element by element: a micro-batch's gradients are summed in another order
/// than one batch's, an element whose gradient cancels to near zero keeps no
/// relative precision in f32, and AdamW's normalised update moves it by a
/// whole step anyway (after 3 steps of a smoke llama some elements differ by
/// 1e-3 of themselves, 3e-7 absolute, while whole tensors agree to 2e-7).
fn same_run(a: &Path, b: &Path, n_steps: u64, weights_tol: f64) {
    let tol = 1e-6;
    let rel = |x: f64, y: f64| (x - y).abs() / y.abs();
    let (sa, sb) = (steps(a), steps(b));
    assert_eq!((sa.len() as u64, sb.len() as u64), (n_steps, n_steps), "{sa:?} {sb:?}");
    for (x, y) in sa.iter().zip(&sb) {
        assert_eq!((x.0, x.3), (y.0, y.3), "step and tokens");
        assert!(rel(x.1, y.1) <= tol && rel(x.2, y.2) <= tol, "step {}: loss, grad_norm {x:?} vs {y:?}", x.0);
    }
    let (fa, fb) = (GgufFile::open(a.join("weights/latest")).unwrap(), GgufFile::open(b.join("weights/latest")).unwrap());
    let mut worst = 0f64;
    for info in fb.tensors() {
        let (x, y) = (fa.tensor_f32(&info.name).unwrap(), fb.tensor_f32(&info.name).unwrap());
        assert_eq!(x.len(), y.len(), "{}", info.name);
        let diff: f64 = x.iter().zip(&y).map(|(&p, &q)| (p as f64 - q as f64).powi(2)).sum();
        let norm: f64 = y.iter().map(|&q| (q as f64).powi(2)).sum();
        let r = (diff / norm.max(f64::MIN_POSITIVE)).sqrt();
        assert!(r <= weights_tol, "{}: ‖a − b‖ / ‖b‖ = {r:.2e}", info.name);
        worst = worst.max(r);
    }
    assert!(!fb.tensors().is_empty());
    println!("{}: largest ‖a − b‖ / ‖b‖ of a tensor {worst:.2e}", a.display());
}

#[test]
fn micro_batches_equal_one_larger_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // Three optimizer steps of 6 sequences, with the warmup's rising learning
    // rate and gradient clipping at 1.0 (the default) on the summed gradient.
    let args = ["--steps", "3", "--warmup-steps", "2"];
    train(t, &[], "big", &[&args[..], &["--batch", "6"]].concat());
    train(t, &[], "accum", &[&args[..], &["--batch", "2", "--grad-accum", "3"]].concat());
    same_run(&t.join("accum"), &t.join("big"), 3, 1e-6);
    let tokens = steps(&t.join("accum"))[0].3;
    assert_eq!(tokens, 6 * 16, "a step counts every micro-batch's tokens");
    // Two CPU replicas, each accumulating 3 micro-batches of 1 sequence.
    train(t, &[], "dp", &[&args[..], &["--batch", "2", "--grad-accum", "3", "--device", "cpu,cpu"]].concat());
    same_run(&t.join("dp"), &t.join("big"), 3, 1e-6);
}

#[test]
fn lora_micro_batches_equal_one_larger_batch() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    train(t, &[], "base", &["--steps", "1"]);
    let lora = ["--from", "base/weights/latest", "--lora-rank", "2", "--lr", "0.01", "--steps", "3", "--warmup-steps", "0"];
    train(t, &["finetune"], "big", &[&lora[..], &["--batch", "6"]].concat());
    train(t, &["finetune"], "accum", &[&lora[..], &["--batch", "2", "--grad-accum", "3"]].concat());
    // The adapters' B starts at zero: its norm is all update, where rounding
    // shows most (2.8e-6 measured): 1e-5 for them.
    same_run(&t.join("accum"), &t.join("big"), 3, 1e-5);
    let adapter = GgufFile::open(t.join("accum/weights/latest")).unwrap();
    assert_eq!(adapter.get_str("adapter.type").unwrap(), "lora");
    assert!(adapter.tensor_f32("blk.0.attn_q.weight.lora_b").unwrap().iter().any(|&x| x != 0.0), "the adapters trained");
}

#[test]
fn resume_keeps_grad_accum() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    // A constant learning rate: the schedule does not depend on --steps.
    std::fs::write(t.join("toy.toml"), "[train]\ngrad_accum = 2\n").unwrap();
    let args = ["--batch", "2", "--lr", "0.002", "--min-lr", "0.002", "--warmup-steps", "0"];
    train(t, &[], "whole", &[&args[..], &["--steps", "4"]].concat());
    train(t, &[], "cut", &[&args[..], &["--steps", "2"]].concat());
    let text = std::fs::read_to_string(t.join("cut/config.toml")).unwrap();
    assert!(text.lines().any(|l| l == "grad_accum = 2"), "toy.toml's grad_accum is recorded: {text}");
    let start = events(&t.join("cut")).into_iter().find(|e| e["kind"] == "run_start").unwrap();
    assert_eq!(start["config"]["grad_accum"], 2);
    // Resumed without toy.toml: config.toml, not toy.toml, says what the run is.
    std::fs::remove_file(t.join("toy.toml")).unwrap();
    ok(&toy(t, &["train", "--resume", "cut", "--steps", "4", "--threads", "1"]));
    let (a, b) = (steps(&t.join("whole")), steps(&t.join("cut")));
    assert_eq!(a.len(), 4);
    assert_eq!(a, b[b.len() - 4..], "the resumed run continues the same curve");
    assert!(a.iter().all(|s| s.3 == 2 * 2 * 16), "{a:?}");
    fails(&toy(t, &["train", "--resume", "cut", "--steps", "5", "--grad-accum", "3"]), "train", "--grad-accum 3 (the run has 2)");
}

#[test]
fn zero_micro_batches_are_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    fails(
        &toy(t, &[&["train", "--out", "r", "--steps", "1"], QUICK, &["--grad-accum", "0"]].concat()),
        "train",
        "--grad-accum must be at least 1",
    );
    assert!(!t.join("r").exists(), "no run folder is left");
    std::fs::write(t.join("toy.toml"), "[train]\ngrad_accum = 0\n").unwrap();
    fails(&toy(t, &[&["train", "--out", "r", "--steps", "1"], QUICK].concat()), "train", "--grad-accum must be at least 1");
    let huge = (1u64 << 40).to_string();
    fails(
        &toy(t, &[&["train", "--out", "r", "--steps", "1", "--grad-accum", &huge], QUICK].concat()),
        "train",
        "tokens per optimizer step",
    );
}

/// More sequences per optimizer step than the training split holds (100000
/// micro-batches of one window, on the embedded corpus's 5,000 windows of 16
/// tokens) is refused in one line that names the largest --grad-accum that
/// fits, before a run folder exists; so is one on a finetune run.
#[test]
fn a_step_larger_than_the_data_is_noted_whether_batch_or_accumulation() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    std::fs::write(t.join("small.txt"), stories::generate_with(3, 2)).unwrap();
    // --batch 4 × --grad-accum 8 and --batch 32 are the same step (see above):
    // both run, and both say that a step goes over the data more than once.
    for (out, extra) in [("a", ["--batch", "4", "--grad-accum", "8"]), ("b", ["--batch", "32", "--grad-accum", "1"])] {
        let o = toy(t, &[&["train", "--corpus", "small.txt", "--out", out, "--steps", "1"], QUICK, &extra].concat());
        ok(&o);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(err.contains("note: each optimizer step takes 32 sequences") && err.contains("windows of 16 tokens"), "{err}");
    }
}
