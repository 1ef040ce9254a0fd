//! Resume state: `weights/step_<N>.state.gguf` beside each checkpoint holds
//! everything a run needs to continue exactly — every weight as trained
//! (unfolded), the AdamW moments, the optimizer step count and the sampler's
//! position. The checkpoint itself stays a plain llama.cpp model.

use super::batches::SamplerState;
use crate::error::{input, runtime, Result};
use crate::model::Weights;
use ggml_rs::gguf::{GgufFile, GgufWriter};
use ggml_rs::optim::AdamWState;
use ggml_rs::Tensor;
use std::path::{Path, PathBuf};

/// Format tag of state files.
pub const FORMAT: &str = "toy-rs/state-v1";

/// The counters of a run at a checkpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Progress {
    /// Steps completed.
    pub step: u64,
    /// AdamW's `t`.
    pub opt_t: u64,
    pub sampler: SamplerState,
}

/// `weights/step_<N>.state.gguf` for checkpoint `weights/step_<N>.gguf`.
pub fn state_path(checkpoint: &Path) -> PathBuf {
    checkpoint.with_extension("state.gguf")
}

fn key(i: usize, t: Tensor<'_>, suffix: &str) -> String {
    let n = format!("{}{suffix}", t.name());
    if n.len() < 64 {
        n
    } else {
        format!("p{i}{suffix}")
    }
}

/// Write the state (atomically) for the weights and moments as they are now.
pub fn save(path: &Path, w: &Weights<'_>, moments: &AdamWState<'_>, p: &Progress) -> Result<()> {
    let mut g = GgufWriter::new();
    g.set("toy.state.format", FORMAT)?;
    g.set("toy.state.step", p.step)?;
    g.set("toy.state.opt_t", p.opt_t)?;
    g.set("toy.state.sampler", serde_json::to_string(&p.sampler).expect("serializable"))?;
    for (i, prm) in w.params().iter().enumerate() {
        g.add_tensor(&key(i, prm.tensor, ""), prm.tensor)?;
    }
    for (i, (prm, m, v)) in moments.entries().iter().enumerate() {
        g.add_tensor(&key(i, *prm, ".adam_m"), *m)?;
        g.add_tensor(&key(i, *prm, ".adam_v"), *v)?;
    }
    g.write(path).map_err(|e| runtime(format!("cannot write resume state: {e}")))
}

/// Restore weights and moments from `path`; returns the counters.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming the file when it is
/// missing, malformed, or does not match the model.
pub fn load(path: &Path, w: &Weights<'_>, moments: &AdamWState<'_>) -> Result<Progress> {
    if !path.is_file() {
        return Err(input(format!("{}: no resume state beside the checkpoint", path.display())));
    }
    let f = GgufFile::open(path)?;
    if f.get_str("toy.state.format").ok() != Some(FORMAT) {
        return Err(input(format!("{}: not a toy resume state ({FORMAT})", path.display())));
    }
    let bad = |why: String| input(format!("{}: {why}", path.display()));
    let load = |name: &str, t: Tensor<'_>| -> Result<()> {
        let info = f.tensor(name).ok_or_else(|| bad(format!("missing tensor {name}")))?;
        if info.shape() != t.shape() {
            return Err(bad(format!("tensor {name} is {:?}, the model needs {:?}", info.shape(), t.shape())));
        }
        Ok(f.load_into(name, t)?)
    };
    for (i, prm) in w.params().iter().enumerate() {
        load(&key(i, prm.tensor, ""), prm.tensor)?;
    }
    for (i, (prm, m, v)) in moments.entries().iter().enumerate() {
        load(&key(i, *prm, ".adam_m"), *m)?;
        load(&key(i, *prm, ".adam_v"), *v)?;
    }
    let sampler: SamplerState = serde_json::from_str(f.get_str("toy.state.sampler")?).map_err(|e| bad(format!("sampler state: {e}")))?;
    Ok(Progress { step: f.get_u64("toy.state.step")?, opt_t: f.get_u64("toy.state.opt_t")?, sampler })
}
