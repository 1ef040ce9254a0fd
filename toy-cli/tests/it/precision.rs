//! `--dtype`, the 124M presets and the memory figures of a run, through the
//! binary (CPU only here: bf16 needs CUDA and is refused on the CPU).

use crate::common::process::{fails, toy};
use serde_json::Value;
use std::path::Path;

fn events(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("events.jsonl")).unwrap().lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

#[test]
fn dtype_is_recorded_and_bf16_needs_cuda() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let quick = ["train", "--preset", "smoke", "--threads", "1", "--steps", "2", "--eval-every", "0"];
    fails(
        &toy(t, &[&quick[..], &["--dtype", "bf16", "--out", "a"]].concat()),
        "train",
        "dtype bf16 (from --dtype, toy.toml or the run's config.toml) needs CUDA",
    );
    assert!(!t.join("a").exists(), "a refused run leaves no folder");
    fails(&toy(t, &[&quick[..], &["--dtype", "f16", "--out", "a"]].concat()), "train", "f16");
    // debug bench reads no toml: its message names --dtype alone.
    fails(
        &toy(t, &["debug", "bench", "--preset", "smoke", "--steps", "1", "--dtype", "bf16"]),
        "debug",
        "dtype bf16 (from --dtype) needs CUDA",
    );

    let o = toy(t, &[&quick[..], &["--out", "r"]].concat());
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let config = std::fs::read_to_string(t.join("r/config.toml")).unwrap();
    assert!(config.contains("dtype = \"f32\""), "{config}");
    let ev = events(&t.join("r"));
    let start = ev.iter().find(|e| e["kind"] == "run_start").unwrap();
    assert_eq!(start["config"]["dtype"], "f32");
    let m = &start["memory"];
    let (w, c, b) = (m["weights_bytes"].as_u64().unwrap(), m["compute_bytes"].as_u64().unwrap(), m["buffers_bytes"].as_u64().unwrap());
    assert!(w > 0 && c > 0 && b == w + c, "{m}");
    assert!(m["device_used_bytes"].is_null(), "the CPU reports no device memory: {m}");
    let end = ev.iter().find(|e| e["kind"] == "run_end").unwrap();
    assert!(end.get("device_used_bytes").is_some(), "{end}");

    // --resume keeps the run's dtype and refuses bf16 on the CPU.
    fails(
        &toy(t, &["train", "--resume", "r", "--steps", "3", "--dtype", "bf16"]),
        "train",
        "--dtype bf16 needs a CUDA device, and the run trains on cpu (its config.toml)",
    );
    let o = toy(t, &["train", "--resume", "r", "--steps", "3", "--threads", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read_to_string(t.join("r/config.toml")).unwrap().contains("dtype = \"f32\""));

    // A config.toml from before --dtype (no key) resumes as f32.
    let old: String = std::fs::read_to_string(t.join("r/config.toml"))
        .unwrap()
        .lines()
        .filter(|l| !l.starts_with("dtype"))
        .map(|l| format!("{l}\n"))
        .collect();
    std::fs::write(t.join("r/config.toml"), old).unwrap();
    let o = toy(t, &["train", "--resume", "r", "--steps", "4", "--threads", "1"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

#[test]
fn presets_at_real_scale() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let help = String::from_utf8(toy(t, &["train", "--help"]).stdout).unwrap();
    assert!(help.contains("gpt2-124m") && help.contains("llama-124m"), "{help}");
    fails(&toy(t, &["train", "--preset", "gpt2-124m", "--arch", "llama", "--out", "a"]), "train", "is a gpt2 model");
    fails(&toy(t, &["debug", "bench", "--preset", "llama-124m", "--arch", "gpt2"]), "debug", "is a llama model");
    // The preset's model (124M parameters) on a short batch: GPT-2's architecture and vocabulary.
    let o = toy(
        t,
        &["debug", "bench", "--preset", "gpt2-124m", "--batch", "1", "--context", "8", "--steps", "1", "--warmup", "0", "--threads", "1"],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!((d["arch"].as_str(), d["vocab"].as_u64(), d["dtype"].as_str()), (Some("gpt2"), Some(50257), Some("f32")));
    assert!(d["device_buffers_bytes"].as_u64().unwrap() > 0);
    // Loss near ln(50257) at the start (random weights of std 0.02).
    let loss = d["last_loss"].as_f64().unwrap();
    assert!((loss - (50257f64).ln()).abs() < 0.5, "loss {loss}");
}

#[test]
fn a_preset_vocabulary_sizes_only_a_bpe_toy_trains() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let small = ["--layers", "1", "--d-model", "32", "--heads", "2", "--d-ff", "64", "--batch", "1", "--context", "16"];
    let run = |corpus: &[&str], out: &str| {
        let args =
            [&["train", "--preset", "llama-124m", "--steps", "1", "--eval-every", "0", "--threads", "1", "--out", out][..], &small, corpus]
                .concat();
        let o = toy(t, &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let c = std::fs::read_to_string(t.join(out).join("config.toml")).unwrap();
        c.lines().find(|l| l.starts_with("vocab = ")).unwrap().trim_start_matches("vocab = ").parse::<usize>().unwrap()
    };
    // The embedded corpus and a prepared one keep their ids.
    assert_eq!(run(&[], "e"), 1024);
    let text: String = (0..400).map(|i| format!("Tom saw a red ball number {} and Sue ran to the park. ", i % 37)).collect();
    std::fs::write(t.join("s.txt"), text).unwrap();
    let o = toy(t, &["prep", "s.txt", "--vocab-size", "300", "--out", "p"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(run(&["--corpus", "p"], "r1"), 300);
    // Its ids, as an id file: the largest id + 1, not 50257.
    assert!(run(&["--corpus", "p/train.bin"], "r2") <= 300);
    // Raw text: the BPE aims at the preset's 50257 (fewer, with a note, for a small text).
    let o = toy(
        t,
        &[
            &["train", "--preset", "llama-124m", "--steps", "1", "--eval-every", "0", "--threads", "1", "--out", "r3", "--corpus", "s.txt"]
                [..],
            &small,
        ]
        .concat(),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("fewer than the 50257 of the preset"));
}

#[test]
fn fused_attention_trains_like_the_reference() {
    let tmp = tempfile::tempdir().unwrap();
    let t = tmp.path();
    let losses = |arch: &str, attention: &str| -> Vec<f64> {
        let out = format!("{arch}-{attention}");
        // llama with grouped-query heads (4 query heads on 2 kv heads).
        let gqa: &[&str] = if arch == "llama" { &["--kv-heads", "2"] } else { &[] };
        let args = [
            &["train", "--arch", arch, "--preset", "smoke", "--steps", "12", "--eval-every", "0", "--threads", "1"][..],
            gqa,
            &["--attention", attention, "--out", &out],
        ]
        .concat();
        let o = toy(t, &args);
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let ev = events(&t.join(&out));
        let start = ev.iter().find(|e| e["kind"] == "run_start").unwrap();
        assert_eq!(start["config"]["attention"], attention);
        ev.iter().filter(|e| e["kind"] == "step").map(|e| e["loss"].as_f64().unwrap()).collect()
    };
    for arch in ["llama", "gpt2"] {
        let (r, f) = (losses(arch, "reference"), losses(arch, "fused"));
        assert_eq!(r.len(), 12);
        for (a, b) in r.iter().zip(&f) {
            assert!((a - b).abs() / a < 1e-5, "{arch}: reference {a} against fused {b}");
        }
    }
    fails(&toy(t, &["train", "--attention", "flash", "--out", "x"]), "train", "flash");
    // Without --attention the CPU takes the fused op.
    let o = toy(t, &["train", "--preset", "smoke", "--steps", "1", "--eval-every", "0", "--threads", "1", "--out", "default"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let start = events(&t.join("default")).into_iter().find(|e| e["kind"] == "run_start").unwrap();
    assert_eq!(start["config"]["attention"], "fused");
}
