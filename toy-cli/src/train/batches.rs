//! Windows of T+1 tokens drawn from a token stream.

use rand::{Rng, SeedableRng};

/// One batch: B windows, inputs `t0..t(T−1)` and targets `t1..tT` of each,
/// flattened sequence-major (`b·T + t`), as i32 for ggml.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub tokens: Vec<i32>,
    pub targets: Vec<i32>,
}

/// Build a batch from the start offsets of its windows.
pub fn batch_at(data: &[u32], starts: &[usize], t: usize) -> Batch {
    let mut tokens = Vec::with_capacity(starts.len() * t);
    let mut targets = Vec::with_capacity(starts.len() * t);
    for &s in starts {
        tokens.extend(data[s..s + t].iter().map(|&x| x as i32));
        targets.extend(data[s + 1..s + t + 1].iter().map(|&x| x as i32));
    }
    Batch { tokens, targets }
}

/// Uniformly random windows (with replacement), from a seeded generator: the
/// same seed gives the same sequence of batches.
pub struct RandomWindows {
    rng: rand::rngs::StdRng,
    t: usize,
    b: usize,
}

impl RandomWindows {
    /// Windows of `t + 1` tokens, `b` per batch.
    pub fn new(seed: u64, t: usize, b: usize) -> RandomWindows {
        // A stream apart from the one that initialises the weights.
        RandomWindows { rng: rand::rngs::StdRng::seed_from_u64(seed ^ 0x5eed_ba7c_4e55_0001), t, b }
    }

    /// Start offsets of the next batch's windows in a stream of `len` tokens
    /// (`len` must be at least `t + 1`).
    pub fn next_starts(&mut self, len: usize) -> Vec<usize> {
        let hi = len - self.t; // exclusive: s + t + 1 <= len
        (0..self.b).map(|_| self.rng.random_range(0..hi)).collect()
    }

    /// The generator's state, for resuming.
    pub fn rng(&self) -> &rand::rngs::StdRng {
        &self.rng
    }

    /// Replace the generator's state, when resuming.
    pub fn set_rng(&mut self, rng: rand::rngs::StdRng) {
        self.rng = rng;
    }
}

/// Up to `max` non-overlapping windows covering `len` tokens from the start,
/// for a validation loss that is the same at every evaluation.
pub fn eval_starts(len: usize, t: usize, max: usize) -> Vec<usize> {
    if len < t + 1 {
        return Vec::new();
    }
    let n = ((len - 1) / t).min(max);
    (0..n).map(|i| i * t).collect()
}
