//! Helpers shared by the integration tests.
#![allow(dead_code)]

pub mod process;
pub mod reference;

use toy::model::{Arch, ModelConfig, Weights};

/// A model small enough for f64 finite differences: grouped-query attention
/// for llama and qwen2 (4 heads over 2 kv heads), plain multi-head for gpt2.
pub fn tiny(arch: Arch) -> ModelConfig {
    ModelConfig {
        arch,
        vocab: 37,
        d_model: 16,
        n_layers: 2,
        n_heads: 4,
        n_kv_heads: if arch == Arch::Gpt2 { 4 } else { 2 },
        d_ff: 24,
        context: 8,
        rope_base: 10_000.0,
        norm_eps: 1e-5,
        tied: arch == Arch::Gpt2,
        donor_width: None,
        freeze_table: true,
        freeze: Vec::new(),
        lora: None,
        base_dtype: None,
        base_dtype_except: Default::default(),
    }
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
