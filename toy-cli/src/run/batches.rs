//! `batches.bin` and `batches.json`: every step's windows of a run
//! (`--record-batches`), and reading them back (`toy debug`).

use crate::data::Tokens;
use crate::train::batches::{batch_at, Batch};

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
    /// Start recording into `dir` after `done` steps: a resumed run's
    /// recording goes on from its checkpoint (the steps recorded after it,
    /// done again, are cut); one that lacks steps before it is refused.
    pub fn create(dir: &std::path::Path, t: usize, b: usize, done: u64) -> crate::error::Result<Recorder> {
        use std::io::{Seek, SeekFrom};
        let layout = Layout { format: "toy/batches-v1".into(), dtype: "u32".into(), window: t + 1, batch: b };
        let text = serde_json::to_string_pretty(&layout).expect("serializable");
        crate::files::write_atomic(&dir.join("batches.json"), text.as_bytes())?;
        let path = dir.join("batches.bin");
        let fail = |e: std::io::Error| crate::error::runtime(format!("cannot open {}: {e}", path.display()));
        let mut file = crate::files::no_follow(std::fs::OpenOptions::new().create(true).truncate(false).read(true).write(true))
            .open(&path)
            .map_err(|e| crate::files::open_error(&path, e))?;
        let want = done * ((t + 1) * b * 4) as u64;
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
        let per_step = layout.window.checked_mul(layout.batch).and_then(|n| n.checked_mul(4)).unwrap_or(0);
        if layout.format != "toy/batches-v1"
            || layout.window < 2
            || layout.batch == 0
            || per_step == 0
            || bytes.len() % per_step != 0
            || bytes.is_empty()
        {
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
        let chunk = Tokens::from(self.windows[(step - 1) * w * b..step * w * b].to_vec());
        let starts: Vec<usize> = (0..b).map(|i| i * w).collect();
        batch_at(&chunk, &starts, w - 1)
    }
}
