//! Choosing the next token from logits: greedy, temperature, top-k, top-p
//! (nucleus sampling, Holtzman et al. 2020), as Hugging Face `generate` applies them.

use rand::Rng;

/// How to pick tokens.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Sampling {
    /// Softmax temperature; 0 means greedy (argmax).
    pub temperature: f32,
    /// Keep only the k most likely tokens (0: all).
    pub top_k: usize,
    /// Keep the smallest set of tokens whose probability reaches p (1: all).
    pub top_p: f32,
}

impl Default for Sampling {
    fn default() -> Self {
        Sampling { temperature: 0.8, top_k: 40, top_p: 0.95 }
    }
}

/// Index of the largest logit (first on ties).
pub fn argmax(logits: &[f32]) -> usize {
    logits.iter().enumerate().fold((0, f32::NEG_INFINITY), |(bi, bv), (i, &v)| if v > bv { (i, v) } else { (bi, bv) }).0
}

/// Pick the next token from `logits` (one per vocabulary entry).
pub fn sample(logits: &[f32], s: &Sampling, rng: &mut impl Rng) -> usize {
    if s.temperature <= 0.0 || s.top_k == 1 {
        return argmax(logits);
    }
    let mut idx: Vec<usize> = (0..logits.len()).filter(|&i| logits[i].is_finite()).collect();
    if idx.is_empty() {
        return argmax(logits);
    }
    idx.sort_by(|&a, &b| logits[b].total_cmp(&logits[a]));
    if s.top_k > 0 {
        idx.truncate(s.top_k);
    }
    let max = logits[idx[0]];
    let mut p: Vec<f64> = idx.iter().map(|&i| (((logits[i] - max) / s.temperature) as f64).exp()).collect();
    let total: f64 = p.iter().sum();
    p.iter_mut().for_each(|x| *x /= total);
    if s.top_p < 1.0 {
        let mut acc = 0.0;
        let keep = p.iter().position(|&x| {
            acc += x;
            acc >= s.top_p as f64
        });
        let keep = keep.map(|k| k + 1).unwrap_or(p.len());
        p.truncate(keep);
        idx.truncate(keep);
    }
    let total: f64 = p.iter().sum();
    let mut r = rng.random::<f64>() * total;
    for (k, &x) in p.iter().enumerate() {
        if r < x {
            return idx[k];
        }
        r -= x;
    }
    idx[p.len() - 1]
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn greedy_and_filters() {
        let l = [0.0, 3.0, 1.0, 2.5];
        let mut rng = rand::rngs::StdRng::seed_from_u64(0);
        assert_eq!(sample(&l, &Sampling { temperature: 0.0, top_k: 0, top_p: 1.0 }, &mut rng), 1);
        for _ in 0..100 {
            let k = sample(&l, &Sampling { temperature: 1.0, top_k: 2, top_p: 1.0 }, &mut rng);
            assert!(k == 1 || k == 3);
            assert_eq!(sample(&l, &Sampling { temperature: 1.0, top_k: 0, top_p: 0.1 }, &mut rng), 1);
        }
    }
}
