//! Fine-tuning a quantized GGUF: LoRA keeps the base in its own types and
//! computes exactly what LoRA over the dequantized f32 copy computes; full
//! fine-tuning dequantizes it once, with a note.

use crate::common::process::{fails, ok, toy};
use crate::common::{eval_loss, rewrite_gguf};
use ggml_rs::gguf::{GgufFile, GgufWriter};
use ggml_rs::DType;
use std::path::Path;
use toy_stories as stories;

const QUICK: &[&str] = &["--preset", "smoke", "--threads", "1", "--log-every", "1000"];

/// A smoke llama trained on some stories (`base/`), and `new.txt` to tune on.
fn base(dir: &Path) {
    std::fs::write(dir.join("old.txt"), stories::generate_with(11, 60)).unwrap();
    let mut args = vec!["train", "--corpus", "old.txt", "--vocab-size", "300", "--steps", "20", "--out", "base"];
    args.extend_from_slice(QUICK);
    ok(&toy(dir, &args));
    std::fs::write(dir.join("new.txt"), stories::generate_with(5, 40)).unwrap();
}

/// SmolLM2's Q4_1 file's mix: a q8_0 token table, q4_1 matrices.
fn q4_1_mix(name: &str) -> DType {
    if name == "token_embd.weight" {
        DType::Q8_0
    } else {
        DType::Q4_1
    }
}

fn lora(dir: &Path, from: &str, out: &str) {
    let mut a = vec!["train", "finetune", "--from", from, "--lora-rank", "4", "--lr", "0.01", "--corpus", "new.txt"];
    a.extend_from_slice(&["--steps", "6", "--eval-every", "3", "--record-batches", "--out", out]);
    a.extend_from_slice(QUICK);
    ok(&toy(dir, &a));
}

fn values(run: &Path, kind: &str, key: &str) -> Vec<f64> {
    let text = std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    text.lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["kind"] == kind)
        .map(|e| e[key].as_f64().unwrap())
        .collect()
}

#[test]
fn lora_over_a_quantized_base_equals_lora_over_its_dequantized_copy() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    rewrite_gguf(&t.join("base/weights/latest"), &t.join("q.gguf"), q4_1_mix);
    // The same values in f32: what the quantized file dequantizes to.
    rewrite_gguf(&t.join("q.gguf"), &t.join("d.gguf"), |_| DType::F32);
    lora(t, "q.gguf", "lq");
    lora(t, "d.gguf", "ld");
    let cfg = std::fs::read_to_string(t.join("lq/config.toml")).unwrap();
    assert!(cfg.contains("base_dtype = \"q4_1\"") && cfg.contains("\"token_embd.weight\" = \"q8_0\""), "{cfg}");
    for (kind, key) in [("step", "loss"), ("step", "grad_norm"), ("eval", "val_loss")] {
        let (q, d) = (values(&t.join("lq"), kind, key), values(&t.join("ld"), kind, key));
        assert_eq!(q.len(), d.len());
        for (a, b) in q.iter().zip(&d) {
            assert!((a - b).abs() <= 1e-6 * b.abs().max(1.0), "{kind} {key}: {q:?} against {d:?}");
        }
    }
    // The adapter applies over the quantized base as it trained; it learned.
    let tuned = eval_loss(t, &["q.gguf", "--lora", "lq/weights/latest"]);
    assert!(tuned < eval_loss(t, &["q.gguf"]), "{tuned}");
    // A LoRA run's folder stands for its weights/latest.
    assert_eq!(eval_loss(t, &["q.gguf", "--lora", "lq"]), tuned);
    // Without an adapter, eval keeps the file's q4_1/q8_0 in memory and computes
    // what the f32 copy gives; generate multiplies them as stored (llama.cpp's way).
    let (q, d) = (eval_loss(t, &["q.gguf"]), eval_loss(t, &["d.gguf"]));
    assert!((q - d).abs() <= 1e-6 * d.abs(), "{q} against {d}");
    ok(&toy(t, &["generate", "q.gguf", "--prompt", "Once", "-n", "8", "--greedy", "--threads", "1"]));
    assert!((tuned - eval_loss(t, &["d.gguf", "--lora", "ld/weights/latest"])).abs() < 1e-5);
    // Merged and written q8_0: close to the merged model.
    ok(&toy(t, &["export", "merge", "--base", "q.gguf", "--lora", "lq/weights/latest", "--type", "q8_0", "--out", "m8.gguf"]));
    assert_eq!(GgufFile::open(t.join("m8.gguf")).unwrap().tensor("blk.0.attn_q.weight").unwrap().dtype, DType::Q8_0);
    assert!((eval_loss(t, &["m8.gguf"]) - tuned).abs() < 2e-2);
    // Without --type a quantized base's merge is q8_0 (its own 4-bit grid rounds
    // much of an update away), said in a note; --type same keeps q4_1, with a note.
    let merge = |extra: &[&str], out: &str| {
        let mut a = vec!["export", "merge", "--base", "q.gguf", "--lora", "lq/weights/latest", "--out", out];
        a.extend_from_slice(extra);
        let o = toy(t, &a);
        ok(&o);
        let ty = GgufFile::open(t.join(out)).unwrap().tensor("blk.0.attn_q.weight").unwrap().dtype;
        (ty, String::from_utf8_lossy(&o.stderr).into_owned())
    };
    let (ty, err) = merge(&[], "md.gguf");
    assert_eq!(ty, DType::Q8_0);
    assert!(err.contains("the adapted matrices are q4_1; wrote q8_0"), "{err}");
    let (ty, err) = merge(&["--type", "same"], "ms.gguf");
    assert_eq!(ty, DType::Q4_1);
    assert!(err.contains("note: q4_1 rounds the merged weights"), "{err}");
    assert!(merge(&["--type", "q8_0"], "m8b.gguf").1.is_empty());
    // Without --base, the base the run's adapter records (as generate and eval find it): the same file
    ok(&toy(t, &["export", "merge", "--lora", "lq", "--type", "q8_0", "--out", "m8c.gguf"]));
    assert_eq!(std::fs::read(t.join("m8c.gguf")).unwrap(), std::fs::read(t.join("m8.gguf")).unwrap());
    let o = toy(t, &["export", "merge", "--base", "lq", "--lora", "lq", "--out", "m8d.gguf"]);
    fails(&o, "export", "a LoRA adapter, not a model (an adapter or a LoRA run is --lora's");
    fails(&toy(t, &["export", "merge", "--lora", "q.gguf", "--out", "m8d.gguf"]), "export", "not a LoRA adapter (a model is --base's)");
    assert!(!t.join("m8d.gguf").exists());
    // dump-logits --stored-types multiplies the base as stored (q4_1 by q8_1
    // activations, as llama.cpp and generate do): close to, not equal to, the
    // dequantized arithmetic. Gradients have no such mode.
    let dump = |extra: &[&str], out: &str| {
        let mut a = vec!["debug", "dump-logits", "lq/weights/latest", "--batches", "lq/batches.bin", "--out", out];
        a.extend_from_slice(extra);
        ok(&toy(t, &a));
        let f = GgufFile::open(t.join(out)).unwrap();
        f.tensor_f32("logits").unwrap()
    };
    let (deq, stored) = (dump(&[], "deq.gguf"), dump(&["--stored-types"], "stored.gguf"));
    let top = deq.iter().fold(0f32, |m, x| m.max(x.abs()));
    let diff = deq.iter().zip(&stored).fold(0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(diff > 0.0 && diff < 5e-2 * top, "max |d| {diff} of max |logit| {top}");
    let o = toy(t, &["debug", "dump-grads", "lq/weights/latest", "--batches", "lq/batches.bin", "--out", "g.gguf", "--stored-types"]);
    fails(&o, "debug", "unexpected argument '--stored-types' found");
    assert!(!t.join("g.gguf").exists());
}

#[test]
fn full_finetuning_dequantizes_the_base_with_a_note() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    rewrite_gguf(&t.join("base/weights/latest"), &t.join("q.gguf"), |_| DType::Q8_0);
    let mut a = vec!["train", "finetune", "--from", "q.gguf", "--corpus", "new.txt", "--steps", "2", "--out", "f"];
    a.extend_from_slice(QUICK);
    let o = toy(t, &a);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("note: the base's matrices are q8_0; full fine-tuning trains them in f32"), "{err}");
    let w = GgufFile::open(t.join("f/weights/latest")).unwrap();
    assert_eq!(w.tensor("blk.0.attn_q.weight").unwrap().dtype, DType::F32);
}

#[test]
fn a_type_toy_cannot_dequantize_everywhere_is_named() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    // iq4_nl: blocks of 32 values in 18 bytes; ggml type 20.
    let iq4_nl = DType::from_name("iq4_nl").unwrap();
    let b = GgufFile::open(t.join("base/weights/latest")).unwrap();
    let mut g = GgufWriter::new();
    for (k, v) in b.metadata() {
        if k != "general.alignment" {
            g.set(k, v.clone()).unwrap();
        }
    }
    for info in b.tensors() {
        if info.name == "blk.0.ffn_up.weight" {
            let n = (info.ne[0] * info.ne[1]) as usize / 32;
            g.add_tensor_bytes(&info.name, iq4_nl, &info.shape(), vec![0u8; n * 18]).unwrap();
        } else {
            g.add_tensor_data(&info.name, &info.shape(), &b.tensor_f32(&info.name).unwrap()).unwrap();
        }
    }
    g.write(t.join("iq.gguf")).unwrap();
    let o = toy(t, &["train", "finetune", "--from", "iq.gguf", "--lora-rank", "4", "--steps", "1", "--out", "x"]);
    fails(&o, "train", "tensor blk.0.ffn_up.weight is iq4_nl; toy fine-tunes models of types f32, f16, bf16, q8_0");
    assert!(!t.join("x").exists());
}

#[test]
fn debug_bench_times_lora_over_a_quantized_base() {
    // `debug bench --from --lora-rank` builds the step `train finetune` runs:
    // the base's shape and weights, q4_1 kept, only the adapters trained.
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    base(t);
    rewrite_gguf(&t.join("base/weights/latest"), &t.join("q.gguf"), q4_1_mix);
    let bench = |extra: &[&str]| {
        let mut a = vec!["debug", "bench", "--from", "q.gguf", "--batch", "2", "--steps", "1", "--warmup", "0", "--threads", "1"];
        a.extend_from_slice(extra);
        toy(t, &a)
    };
    let o = bench(&["--lora-rank", "4", "--lora-targets", "attn_q,ffn_down"]);
    ok(&o);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let (n, trained) = (d["n_params"].as_u64().unwrap(), d["n_trainable"].as_u64().unwrap());
    // smoke: d 64, 2 layers; rank-4 adapters on attn_q [64, 64] and ffn_down [128, 64].
    assert_eq!(trained, 2 * 4 * ((64 + 64) + (128 + 64)), "{d}");
    assert!(n > trained && d["lora_rank"] == 4 && d["vocab"] == 300 && d["context"] == 32, "{d}");
    assert!(d["last_loss"].as_f64().unwrap().is_finite() && d["cpu_fallbacks"].as_array().unwrap().is_empty(), "{d}");
    // Full fine-tuning of the same file trains every weight (dequantized, with a note).
    let o = bench(&[]);
    ok(&o);
    let d: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(d["n_trainable"], d["n_params"], "{d}");
    // What the model cannot take is refused with one line.
    fails(&bench(&["--context", "33"]), "debug", "takes 1 to 32 tokens");
    fails(&bench(&["--lora-rank", "4", "--lora-targets", "attn_qkv"]), "debug", "--lora-targets");
    fails(&toy(t, &["debug", "bench", "--lora-rank", "4"]), "debug", "--from");
    // What finetune refuses, bench refuses: an adapter (the LoRA run's), a gpt2 model.
    let mut a = vec!["train", "finetune", "--from", "q.gguf", "--lora-rank", "4", "--corpus", "new.txt", "--steps", "1", "--out", "lq"];
    a.extend_from_slice(QUICK);
    ok(&toy(t, &a));
    fails(&toy(t, &["debug", "bench", "--from", "lq", "--lora-rank", "4", "--threads", "1"]), "debug", "a LoRA adapter, not a model");
    let mut a = vec!["train", "--arch", "gpt2", "--corpus", "new.txt", "--vocab-size", "300", "--steps", "1", "--out", "g"];
    a.extend_from_slice(QUICK);
    ok(&toy(t, &a));
    fails(&toy(t, &["debug", "bench", "--from", "g", "--context", "16", "--threads", "1"]), "debug", "takes llama and qwen2");
}
