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

/// Records every step's windows (`batches.bin`: u32 little-endian, step-major,
/// then sequence, then the T+1 tokens of the window) with their layout in
/// `batches.json`, so another implementation can replay the exact run.
pub struct Recorder {
    file: std::io::BufWriter<std::fs::File>,
}

/// The layout written to `batches.json`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Layout {
    pub format: String,
    pub dtype: String,
    /// Tokens per window (context + 1).
    pub window: usize,
    /// Windows per step.
    pub batch: usize,
}

impl Recorder {
    /// Start recording into `dir` (appending to an existing recording when resuming).
    pub fn create(dir: &std::path::Path, t: usize, b: usize) -> crate::error::Result<Recorder> {
        let layout = Layout { format: "toy/batches-v1".into(), dtype: "u32".into(), window: t + 1, batch: b };
        let text = serde_json::to_string_pretty(&layout).expect("serializable");
        crate::run::write_atomic(&dir.join("batches.json"), text.as_bytes())?;
        let path = dir.join("batches.bin");
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|e| crate::error::runtime(format!("cannot open {}: {e}", path.display())))?;
        Ok(Recorder { file: std::io::BufWriter::new(file) })
    }

    /// Append the windows starting at `starts` (each `window` tokens) of `data`.
    pub fn record(&mut self, data: &[u32], starts: &[usize], window: usize) -> crate::error::Result<()> {
        use std::io::Write;
        for &s in starts {
            for &x in &data[s..s + window] {
                self.file.write_all(&x.to_le_bytes()).map_err(|e| crate::error::runtime(format!("cannot record batches: {e}")))?;
            }
        }
        self.file.flush().map_err(|e| crate::error::runtime(format!("cannot record batches: {e}")))
    }
}

/// Recorded batches read back.
pub struct Recorded {
    pub layout: Layout,
    windows: Vec<u32>,
}

impl Recorded {
    /// Read `batches.bin` and the `batches.json` beside it.
    pub fn open(bin: &std::path::Path) -> crate::error::Result<Recorded> {
        use crate::error::input;
        let json = bin.with_file_name("batches.json");
        let layout: Layout = serde_json::from_str(&std::fs::read_to_string(&json).map_err(|e| input(format!("{}: {e}", json.display())))?)
            .map_err(|e| input(format!("{}: {e}", json.display())))?;
        let bytes = std::fs::read(bin).map_err(|e| input(format!("{}: {e}", bin.display())))?;
        let per_step = layout.window * layout.batch * 4;
        if layout.format != "toy/batches-v1" || layout.window < 2 || layout.batch == 0 || bytes.len() % per_step != 0 || bytes.is_empty() {
            return Err(input(format!("{}: not a batch recording matching {}", bin.display(), json.display())));
        }
        let windows = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Ok(Recorded { layout, windows })
    }

    /// Number of recorded steps.
    pub fn steps(&self) -> usize {
        self.windows.len() / (self.layout.window * self.layout.batch)
    }

    /// The batch of step `step` (1-based).
    pub fn batch(&self, step: usize) -> crate::error::Result<Batch> {
        if step == 0 || step > self.steps() {
            return Err(crate::error::input(format!("step {step} is not recorded (1..={})", self.steps())));
        }
        let (w, b) = (self.layout.window, self.layout.batch);
        let chunk = &self.windows[(step - 1) * w * b..step * w * b];
        let starts: Vec<usize> = (0..b).map(|i| i * w).collect();
        Ok(batch_at(chunk, &starts, w - 1))
    }
}
