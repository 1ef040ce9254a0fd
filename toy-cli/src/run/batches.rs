//! `batches.bin` and `batches.json`: every step's windows of a run
//! (`--record-batches`), and reading them back (`toy debug`).

use crate::data::Tokens;
use crate::train::batches::{batch_at, Batch};

/// Records every step's windows with their layout in `batches.json`, so
/// another implementation can replay the exact run. `batches.bin` is
/// step-major, then sequence, in one of two layouts ([`Layout::format`]):
///
/// - [`TEXT_BATCHES`] (text): u32 little-endian, the `T + 1` tokens of each
///   window (inputs `t0..t(T−1)`, targets `t1..tT`);
/// - [`CHAT_BATCHES`] (chat data, whose targets are masked): i32
///   little-endian, each window's `T` input ids then its `T` targets, −1
///   where the loss counts nothing (prompts, padding; see
///   `crate::train::chat_windows`). PyTorch's `cross_entropy(..., ignore_index=-1)`
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
            self.window.saturating_sub(1).saturating_mul(2)
        } else {
            self.window
        }
    }

    /// Why this build cannot read a recording of this layout back
    /// ([`Recorded`]), if it cannot.
    fn unknown(&self) -> Option<String> {
        if !matches!((self.format.as_str(), self.dtype.as_str()), (TEXT_BATCHES, "u32") | (CHAT_BATCHES, "i32")) {
            return Some(format!(
                "format {:?} with dtype {:?} (known: {TEXT_BATCHES:?} with u32, {CHAT_BATCHES:?} with i32)",
                self.format, self.dtype
            ));
        }
        if self.window < 2 {
            return Some(format!("window {} (at least 2: a token and its next)", self.window));
        }
        (self.batch == 0).then(|| "batch 0".to_string())
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
        let path = dir.join("batches.bin");
        let fail = |e: std::io::Error| crate::error::runtime(format!("cannot open {}: {e}", path.display()));
        // Refused before anything is written: a failed resume leaves the run as it was.
        let want = done * (layout.values_per_window() * b * 4) as u64;
        let have = std::fs::symlink_metadata(&path).map(|m| m.len()).unwrap_or(0);
        if have < want {
            return Err(crate::error::input(format!(
                "{} holds {} bytes, fewer than the {want} of the {done} steps done; the recording cannot go on",
                path.display(),
                have
            )));
        }
        let text = serde_json::to_string_pretty(&layout).expect("serializable");
        crate::files::write_atomic(&dir.join("batches.json"), text.as_bytes())?;
        let mut file = crate::files::no_follow(std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true))
            .open(&path)
            .map_err(|e| crate::files::open_error(&path, e))?;
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
    /// Read `batches.bin` and the `batches.json` beside it (`bin` may be the
    /// run folder that holds them).
    pub fn open(bin: &std::path::Path) -> crate::error::Result<Recorded> {
        use crate::error::input;
        let bin = if bin.is_dir() { bin.join("batches.bin") } else { bin.to_path_buf() };
        if !bin.exists() {
            return Err(input(format!("{}: no such file (a run's batches.bin, from --record-batches)", bin.display())));
        }
        if !bin.is_file() {
            return Err(input(format!("{}: not a regular file (a run's batches.bin, from --record-batches)", bin.display())));
        }
        let bin = bin.as_path();
        let json = bin.with_file_name("batches.json");
        let text = std::fs::read_to_string(&json).map_err(|e| {
            input(format!("{}: no layout beside it ({}: {e}); a run's batches.bin, from --record-batches?", bin.display(), json.display()))
        })?;
        let layout: Layout = serde_json::from_str(&text).map_err(|e| input(format!("{}: {e}", json.display())))?;
        if let Some(why) = layout.unknown() {
            return Err(input(format!("{}: a layout this build does not read: {why}", json.display())));
        }
        let bytes = std::fs::read(bin).map_err(|e| input(format!("{}: {e}", bin.display())))?;
        let Some(per_step) = layout.values_per_window().checked_mul(layout.batch).and_then(|n| n.checked_mul(4)) else {
            return Err(input(format!(
                "{}: {} windows of {} ids is more than this machine can address",
                json.display(),
                layout.batch,
                layout.values_per_window()
            )));
        };
        if per_step == 0 || bytes.len() % per_step != 0 || bytes.is_empty() {
            return Err(input(format!(
                "{}: {} bytes, not whole steps of {per_step} bytes ({} windows of {} ids) as {} says",
                bin.display(),
                bytes.len(),
                layout.batch,
                layout.values_per_window(),
                json.display()
            )));
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
