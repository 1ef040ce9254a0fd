//! Windows of T+1 tokens drawn from a token stream.

use crate::data::Tokens;
use crate::formats::state::SamplerState;
use rand::Rng as _;

/// One batch: B windows, inputs `t0..t(T−1)` and targets `t1..tT` of each,
/// flattened sequence-major (`b·T + t`), as i32 for ggml.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Batch {
    pub tokens: Vec<i32>,
    pub targets: Vec<i32>,
}

/// Build a batch from the start offsets of its windows (each read once).
///
/// # Errors
/// [`Error::Runtime`](crate::error::Error::Runtime) naming the corpus file
/// when it changed since it was checked ([`Tokens::window`]).
pub fn batch_at(data: &Tokens, starts: &[usize], t: usize) -> crate::error::Result<Batch> {
    let mut tokens = Vec::with_capacity(starts.len() * t);
    let mut targets = Vec::with_capacity(starts.len() * t);
    for &s in starts {
        let w = data.window(s, t + 1)?;
        tokens.extend(w[..t].iter().map(|&x| x as i32));
        targets.extend(w[1..].iter().map(|&x| x as i32));
    }
    Ok(Batch { tokens, targets })
}

/// The weight of each of `chunks` equal slices of `targets` (the micro-batches
/// of a step, or their parts on data-parallel replicas) in the step's loss
/// `Σ wᵢ·lossᵢ`: the slice's counted targets (those in `[0, vocab)`, as the
/// cross-entropy counts them; −1 marks a masked one) over those of the whole
/// step. Each `lossᵢ` being a mean over its slice's counted targets, the sum is
/// the mean over all of them: the loss of one batch holding every slice
/// (Hugging Face's accumulation with masked labels). With every target counted
/// the weights are `1/chunks`; with none counted, too (every loss and gradient
/// is then 0). `chunks` must divide `targets.len()`.
pub fn target_weights(targets: &[i32], chunks: usize, vocab: usize) -> Vec<f32> {
    debug_assert!(chunks > 0 && targets.len() % chunks == 0, "{} targets in {chunks} slices", targets.len());
    let counted = |s: &[i32]| s.iter().filter(|&&y| y >= 0 && (y as usize) < vocab).count();
    let counts: Vec<usize> = targets.chunks_exact((targets.len() / chunks).max(1)).map(counted).collect();
    let total: usize = counts.iter().sum();
    if total == 0 {
        return vec![1.0 / chunks as f32; chunks];
    }
    counts.iter().map(|&c| (c as f64 / total as f64) as f32).collect()
}

/// The generator behind batch order: ChaCha12 with a seekable position, so a
/// resumed run continues the exact sequence.
pub type Rng = rand_chacha::ChaCha12Rng;

fn rng_state(rng: &Rng) -> (String, String) {
    let seed: String = rng.get_seed().iter().map(|b| format!("{b:02x}")).collect();
    (seed, rng.get_word_pos().to_string())
}

fn rng_restore(seed: &str, word_pos: &str) -> Option<Rng> {
    use rand::SeedableRng;
    if seed.len() != 64 {
        return None;
    }
    let mut s = [0u8; 32];
    for (i, b) in s.iter_mut().enumerate() {
        *b = u8::from_str_radix(&seed[2 * i..2 * i + 2], 16).ok()?;
    }
    let mut rng = Rng::from_seed(s);
    rng.set_word_pos(word_pos.parse().ok()?);
    Some(rng)
}

/// How a run picks the windows of each step.
pub enum Sampler {
    /// Uniformly random windows, with replacement (nanoGPT's `get_batch`).
    Random { rng: Rng, t: usize, b: usize },
    /// Non-overlapping windows walking the split in order, wrapping at its end
    /// (one epoch). In order, the split is cut into `b` contiguous lanes and row
    /// `k` of every step takes the next window of lane `k` (the layout of
    /// PyTorch's word-language-model `batchify`), so one step's rows come from
    /// `b` distant places instead of one stretch of text; the last
    /// `n mod b` windows of the `n` in a split are left out. Shuffled, every
    /// epoch takes all `n` windows in a fresh random order.
    Stream { rng: Rng, epoch_start: Box<Rng>, t: usize, b: usize, epoch: u64, index: u64, shuffle: bool, order: Vec<u32> },
}

impl Sampler {
    /// Random windows of `t + 1` tokens, `b` per step, from `seed`.
    pub fn random(seed: u64, t: usize, b: usize) -> Sampler {
        use rand::SeedableRng;
        // A stream apart from the one that initialises the weights.
        Sampler::Random { rng: Rng::seed_from_u64(seed ^ 0x5eed_ba7c_4e55_0001), t, b }
    }

    /// Streamed windows (see [`Sampler::Stream`]).
    pub fn stream(seed: u64, t: usize, b: usize, shuffle: bool) -> Sampler {
        use rand::SeedableRng;
        let rng = Rng::seed_from_u64(seed ^ 0x5eed_ba7c_4e55_0002);
        Sampler::Stream { epoch_start: Box::new(rng.clone()), rng, t, b, epoch: 0, index: 0, shuffle, order: Vec::new() }
    }

    /// Start offsets of the next step's windows in a split of `len` tokens
    /// (`len ≥ t + 1`), and whether a new epoch began during this step.
    pub fn next_starts(&mut self, len: usize) -> (Vec<usize>, bool) {
        match self {
            Sampler::Random { rng, t, b } => {
                let hi = len - *t; // exclusive: s + t + 1 <= len
                ((0..*b).map(|_| rng.random_range(0..hi)).collect(), false)
            }
            Sampler::Stream { t, .. } => {
                let t = *t;
                let (windows, wrapped) = self.next_windows(((len - 1) / t) as u64);
                (windows.into_iter().map(|w| w * t).collect(), wrapped)
            }
        }
    }

    /// Indices of the next step's windows out of `n ≥ 1` (a split cut into
    /// `n` windows, or `n` conversation windows), and whether a new epoch
    /// began during this step. Random sampling draws them uniformly.
    pub fn next_windows(&mut self, n: u64) -> (Vec<usize>, bool) {
        match self {
            Sampler::Random { rng, b, .. } => ((0..*b).map(|_| rng.random_range(0..n) as usize).collect(), false),
            Sampler::Stream { rng, epoch_start, b, epoch, index, shuffle, order, .. } => {
                let mut wrapped = false;
                if !*shuffle {
                    // `index` counts steps into the epoch; lane k holds windows k·m .. (k+1)·m.
                    let m = (n / *b as u64).max(1);
                    if *index >= m {
                        *index = 0;
                        *epoch += 1;
                        wrapped = true;
                    }
                    let windows = (0..*b as u64).map(|k| ((k * m + *index) % n) as usize).collect();
                    *index += 1;
                    return (windows, wrapped);
                }
                let mut windows = Vec::with_capacity(*b);
                for _ in 0..*b {
                    if *index >= n {
                        *index = 0;
                        *epoch += 1;
                        order.clear();
                        wrapped = true;
                    }
                    if order.is_empty() {
                        **epoch_start = rng.clone();
                        *order = shuffled(rng, n);
                    }
                    windows.push(order[*index as usize] as usize);
                    *index += 1;
                }
                (windows, wrapped)
            }
        }
    }

    /// The current epoch (0 for random sampling).
    pub fn epoch(&self) -> u64 {
        match self {
            Sampler::Random { .. } => 0,
            Sampler::Stream { epoch, .. } => *epoch,
        }
    }

    /// The position to save.
    pub fn state(&self) -> SamplerState {
        match self {
            Sampler::Random { rng, .. } => {
                let (seed, word_pos) = rng_state(rng);
                SamplerState { seed, word_pos, epoch: 0, index: 0 }
            }
            Sampler::Stream { rng, epoch_start, epoch, index, shuffle, .. } => {
                // A shuffled epoch is rebuilt from the generator as it was at its start.
                let (seed, word_pos) = rng_state(if *shuffle { epoch_start } else { rng });
                SamplerState { seed, word_pos, epoch: *epoch, index: *index }
            }
        }
    }

    /// Continue from a saved position, in a split of `len` tokens (the same
    /// split the state was saved with).
    pub fn restore(&mut self, st: &SamplerState, len: usize) -> Result<(), String> {
        let n = match self {
            Sampler::Random { .. } => 0,
            Sampler::Stream { t, .. } => ((len - 1) / *t) as u64,
        };
        self.restore_windows(st, n)
    }

    /// Continue from a saved position over `n` windows (as many as when the
    /// state was saved).
    pub fn restore_windows(&mut self, st: &SamplerState, n: u64) -> Result<(), String> {
        let r = rng_restore(&st.seed, &st.word_pos).ok_or("bad sampler state")?;
        match self {
            Sampler::Random { rng, .. } => *rng = r,
            Sampler::Stream { rng, epoch_start, epoch, index, shuffle, order, .. } => {
                *rng = r;
                *epoch = st.epoch;
                *index = st.index;
                order.clear();
                if *shuffle {
                    **epoch_start = rng.clone();
                    *order = shuffled(rng, n);
                }
            }
        }
        Ok(())
    }
}

fn shuffled(rng: &mut Rng, n: u64) -> Vec<u32> {
    use rand::seq::SliceRandom;
    let mut v: Vec<u32> = (0..n as u32).collect();
    v.shuffle(rng);
    v
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

/// Records every step's windows with their layout in `batches.json`, so
/// another implementation can replay the exact run. `batches.bin` is
/// step-major, then sequence, in one of two layouts ([`Layout::format`]):
///
/// - [`TEXT_BATCHES`] (text): u32 little-endian, the `T + 1` tokens of each
///   window (inputs `t0..t(T−1)`, targets `t1..tT`);
/// - [`CHAT_BATCHES`] (chat data, whose targets are masked): i32
///   little-endian, each window's `T` input ids then its `T` targets, −1
///   where the loss counts nothing (prompts, padding; see
///   `super::chat_windows`). PyTorch's `cross_entropy(..., ignore_index=-1)`
///   takes them as they are.
pub struct Recorder {
    file: std::io::BufWriter<std::fs::File>,
}

/// [`Layout::format`] of text windows (u32 tokens).
pub const TEXT_BATCHES: &str = "toy/batches-v1";
/// [`Layout::format`] of chat windows (i32 inputs, then i32 targets with −1).
pub const CHAT_BATCHES: &str = "toy/chat-batches-v1";

/// The layout written to `batches.json`.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Layout {
    /// [`TEXT_BATCHES`] or [`CHAT_BATCHES`].
    pub format: String,
    /// `u32` (text) or `i32` (chat).
    pub dtype: String,
    /// Tokens per window (context + 1).
    pub window: usize,
    /// Windows per step.
    pub batch: usize,
}

impl Layout {
    /// The layout of windows of context `t`, `b` per step; `chat`: inputs and masked targets.
    pub fn new(t: usize, b: usize, chat: bool) -> Layout {
        let (format, dtype) = if chat { (CHAT_BATCHES, "i32") } else { (TEXT_BATCHES, "u32") };
        Layout { format: format.into(), dtype: dtype.into(), window: t + 1, batch: b }
    }

    /// Values (4 bytes each) per window: `T + 1` tokens, or `T` inputs and `T` targets.
    pub fn values_per_window(&self) -> usize {
        if self.format == CHAT_BATCHES {
            2 * self.window.saturating_sub(1)
        } else {
            self.window
        }
    }

    /// A layout this build reads back ([`Recorded`]).
    fn known(&self) -> bool {
        self.window >= 2
            && self.batch > 0
            && matches!((self.format.as_str(), self.dtype.as_str()), (TEXT_BATCHES, "u32") | (CHAT_BATCHES, "i32"))
    }
}

impl Recorder {
    /// Start recording into `dir` after `done` steps: a resumed run's
    /// recording goes on from its checkpoint (the steps recorded after it,
    /// done again, are cut); one that lacks steps before it is refused.
    /// `chat`: the windows of a chat corpus ([`CHAT_BATCHES`]).
    pub fn create(dir: &std::path::Path, t: usize, b: usize, done: u64, chat: bool) -> crate::error::Result<Recorder> {
        use std::io::{Seek, SeekFrom};
        let layout = Layout::new(t, b, chat);
        let text = serde_json::to_string_pretty(&layout).expect("serializable");
        crate::files::write_atomic(&dir.join("batches.json"), text.as_bytes())?;
        let path = dir.join("batches.bin");
        let fail = |e: std::io::Error| crate::error::runtime(format!("cannot open {}: {e}", path.display()));
        let mut file = crate::files::no_follow(std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true))
            .open(&path)
            .map_err(|e| crate::files::open_error(&path, e))?;
        let want = done * (layout.values_per_window() * b * 4) as u64;
        let have = file.metadata().map_err(fail)?.len();
        if have < want {
            return Err(crate::error::input(format!(
                "{} holds {} bytes, fewer than the {want} of the {done} steps done; the recording cannot go on",
                path.display(),
                have
            )));
        }
        file.set_len(want).map_err(fail)?;
        file.seek(SeekFrom::End(0)).map_err(fail)?;
        Ok(Recorder { file: std::io::BufWriter::new(file) })
    }

    /// Append the windows starting at `starts` (each `window` tokens) of `data`.
    pub fn record(&mut self, data: &Tokens, starts: &[usize], window: usize) -> crate::error::Result<()> {
        use std::io::Write;
        for &s in starts {
            for id in data.window(s, window)? {
                self.file.write_all(&id.to_le_bytes()).map_err(|e| crate::error::runtime(format!("cannot record batches: {e}")))?;
            }
        }
        self.file.flush().map_err(|e| crate::error::runtime(format!("cannot record batches: {e}")))
    }

    /// Append the windows of the chat batch `b` (`t` inputs and targets each).
    pub fn record_chat(&mut self, b: &Batch, t: usize) -> crate::error::Result<()> {
        use std::io::Write;
        let fail = |e: std::io::Error| crate::error::runtime(format!("cannot record batches: {e}"));
        for (inputs, targets) in b.tokens.chunks(t).zip(b.targets.chunks(t)) {
            for v in inputs.iter().chain(targets) {
                self.file.write_all(&v.to_le_bytes()).map_err(fail)?;
            }
        }
        self.file.flush().map_err(fail)
    }
}

/// Recorded batches read back.
pub struct Recorded {
    pub layout: Layout,
    /// The file's values, as written (u32 or i32 bits).
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
        let per_step = layout.values_per_window().checked_mul(layout.batch).and_then(|n| n.checked_mul(4)).unwrap_or(0);
        if !layout.known() || per_step == 0 || bytes.len() % per_step != 0 || bytes.is_empty() {
            return Err(input(format!("{}: not a batch recording matching {}", bin.display(), json.display())));
        }
        let windows = bytes.chunks_exact(4).map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect();
        Ok(Recorded { layout, windows })
    }

    /// Number of recorded steps.
    pub fn steps(&self) -> usize {
        self.windows.len() / (self.layout.values_per_window() * self.layout.batch)
    }

    /// The batch of step `step` (1-based).
    pub fn batch(&self, step: usize) -> crate::error::Result<Batch> {
        if step == 0 || step > self.steps() {
            return Err(crate::error::input(format!("step {step} is not recorded (1..={})", self.steps())));
        }
        let (v, b) = (self.layout.values_per_window(), self.layout.batch);
        let step_values = &self.windows[(step - 1) * v * b..step * v * b];
        if self.layout.format == CHAT_BATCHES {
            let t = v / 2;
            let mut out = Batch { tokens: Vec::with_capacity(t * b), targets: Vec::with_capacity(t * b) };
            for w in step_values.chunks_exact(v) {
                out.tokens.extend(w[..t].iter().map(|&x| x as i32));
                out.targets.extend(w[t..].iter().map(|&x| x as i32));
            }
            return Ok(out);
        }
        let chunk = Tokens::from(step_values.to_vec());
        let starts: Vec<usize> = (0..b).map(|i| i * v).collect();
        batch_at(&chunk, &starts, v - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Window indices (start / t) of the next `steps` steps.
    fn walk(s: &mut Sampler, len: usize, t: usize, steps: usize) -> (Vec<Vec<usize>>, Vec<bool>) {
        (0..steps)
            .map(|_| {
                let (starts, wrapped) = s.next_starts(len);
                (starts.iter().map(|x| x / t).collect::<Vec<_>>(), wrapped)
            })
            .unzip()
    }

    #[test]
    fn micro_batches_weigh_their_counted_targets() {
        // Every target counted: equal weights.
        assert_eq!(target_weights(&[1, 2, 3, 4, 5, 6], 3, 10), [1.0 / 3.0; 3]);
        // Masked (−1) and out-of-vocabulary targets do not count: 2, 1 and 1 of 4.
        assert_eq!(target_weights(&[1, 2, -1, 4, 9, 10], 3, 10), [0.5, 0.25, 0.25]);
        assert_eq!(target_weights(&[-1, -1, 3, 4], 2, 10), [0.0, 1.0]);
        assert_eq!(target_weights(&[-1, -1, -1, -1], 2, 10), [0.5, 0.5]);
        assert_eq!(target_weights(&[7, 8], 1, 10), [1.0]);
    }

    #[test]
    fn in_order_rows_walk_their_lanes() {
        // 3 rows, 10 windows of 4 tokens: lanes of 3 windows, window 9 left out.
        let (t, len) = (4, 41);
        let mut s = Sampler::stream(7, t, 3, false);
        let (w, wrapped) = walk(&mut s, len, t, 4);
        assert_eq!(w, [vec![0, 3, 6], vec![1, 4, 7], vec![2, 5, 8], vec![0, 3, 6]]);
        assert_eq!(wrapped, [false, false, false, true]);
        assert_eq!(s.epoch(), 1);
    }

    #[test]
    fn in_order_with_fewer_windows_than_rows() {
        let (t, len) = (4, 9); // 2 windows, 3 rows
        let mut s = Sampler::stream(7, t, 3, false);
        let (w, wrapped) = walk(&mut s, len, t, 2);
        assert_eq!(w, [vec![0, 1, 0], vec![0, 1, 0]]);
        assert_eq!(wrapped, [false, true]);
    }

    #[test]
    fn shuffled_epochs_are_permutations() {
        let (t, len) = (4, 4 * 12 + 1); // 12 windows, 4 rows: 3 steps per epoch
        let mut s = Sampler::stream(7, t, 4, true);
        let (w, wrapped) = walk(&mut s, len, t, 6);
        let epoch = |r: &[Vec<usize>]| {
            let mut v: Vec<usize> = r.concat();
            v.sort();
            v
        };
        assert_eq!(epoch(&w[..3]), (0..12).collect::<Vec<_>>());
        assert_eq!(epoch(&w[3..]), (0..12).collect::<Vec<_>>());
        assert_ne!(w[..3], w[3..], "a new order every epoch");
        assert_eq!(wrapped, [false, false, false, true, false, false]);
    }

    #[test]
    fn restored_samplers_continue_the_same_sequence() {
        let (t, len) = (4, 4 * 50 + 1);
        for mut s in [Sampler::random(3, t, 4), Sampler::stream(3, t, 4, false), Sampler::stream(3, t, 4, true)] {
            walk(&mut s, len, t, 17);
            let st = s.state();
            let expect = walk(&mut s, len, t, 20);
            let mut r = match s {
                Sampler::Random { .. } => Sampler::random(99, t, 4),
                Sampler::Stream { shuffle, .. } => Sampler::stream(99, t, 4, shuffle),
            };
            r.restore(&st, len).unwrap();
            assert_eq!(walk(&mut r, len, t, 20), expect);
        }
    }
}
