//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod process;
pub mod reference;

use toy::model::{Arch, ModelConfig, Weights};

/// A model small enough for f64 finite differences: grouped-query attention
/// for llama and qwen2 (4 heads over 2 kv heads), plain multi-head for gpt2.
pub fn tiny(arch: Arch) -> ModelConfig {
    let n_kv_heads = if arch == Arch::Gpt2 { 4 } else { 2 };
    ModelConfig { n_kv_heads, ..ModelConfig::new(arch, 37, 16, 2, 4, 24, 8) }
}

/// The weights as f64 by name (ggml layout).
pub fn weight_map(w: &Weights<'_>) -> reference::WeightMap {
    w.params().iter().map(|p| (p.tensor.name(), p.tensor.read::<f32>().unwrap().into_iter().map(f64::from).collect())).collect()
}

/// Deterministic pseudo-random token sequences: (inputs, targets) pairs.
pub fn sequences(vocab: usize, t: usize, b: usize, seed: u64) -> Vec<(Vec<usize>, Vec<usize>)> {
    let mut s = seed.wrapping_mul(6364136223846793005).wrapping_add(1);
    let mut next = || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((s >> 33) % vocab as u64) as usize
    };
    (0..b)
        .map(|_| {
            let w: Vec<usize> = (0..=t).map(|_| next()).collect();
            (w[..t].to_vec(), w[1..].to_vec())
        })
        .collect()
}

/// Flattened i32 inputs and targets of `seqs`, as the step graphs take them.
pub fn flat(seqs: &[(Vec<usize>, Vec<usize>)]) -> (Vec<i32>, Vec<i32>) {
    let tokens = seqs.iter().flat_map(|(x, _)| x.iter().map(|&v| v as i32)).collect();
    let targets = seqs.iter().flat_map(|(_, y)| y.iter().map(|&v| v as i32)).collect();
    (tokens, targets)
}

/// Copy the model GGUF at `from` to `to`: each tensor with more than one row
/// in the type `typed` gives for its name (ggml's own conversion,
/// `DType::quantize`), the others f32, every key but the alignment kept.
pub fn rewrite_gguf(from: &std::path::Path, to: &std::path::Path, typed: impl Fn(&str) -> ggml_rs::DType) {
    use ggml_rs::{gguf::GgufFile, gguf::GgufWriter, DType};
    let b = GgufFile::open(from).unwrap();
    let mut g = GgufWriter::new();
    for (k, v) in b.metadata() {
        if k != "general.alignment" {
            g.set(k, v.clone()).unwrap();
        }
    }
    for info in b.tensors() {
        let v = b.tensor_f32(&info.name).unwrap();
        let ty = if info.ne[1] > 1 { typed(&info.name) } else { DType::F32 };
        if ty == DType::F32 {
            g.add_tensor_data(&info.name, &info.shape(), &v).unwrap();
        } else {
            g.add_tensor_bytes(&info.name, ty, &info.shape(), ty.quantize(&v, info.ne[0] as usize).unwrap()).unwrap();
        }
    }
    g.write(to).unwrap();
}

/// `toy eval ARGS --corpus new.txt` (40 windows, one thread) in `dir`: the loss.
pub fn eval_loss(dir: &std::path::Path, args: &[&str]) -> f64 {
    let mut a = vec!["eval"];
    a.extend_from_slice(args);
    a.extend_from_slice(&["--corpus", "new.txt", "--max-windows", "40", "--json", "--threads", "1"]);
    let o = process::toy(dir, &a);
    process::ok(&o);
    serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()["loss"].as_f64().unwrap()
}
