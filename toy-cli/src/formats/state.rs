//! Resume state: `weights/step_<N>.state.gguf` beside each checkpoint holds
//! everything a run needs to continue exactly — every weight as trained
//! (unfolded), the AdamW moments, the optimizer step count and the sampler's
//! position. The checkpoint itself stays a plain llama.cpp model.

use crate::error::{input, runtime, Result};
use crate::model::Weights;
use ggml_rs::gguf::{GgufFile, GgufWriter};
use ggml_rs::optim::AdamWState;
use ggml_rs::{DType, Tensor};
use std::path::{Path, PathBuf};

/// Format tag of state files.
pub const FORMAT: &str = "toy-rs/state-v1";

/// A sampler's position, saved in checkpoints' state files to resume.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct SamplerState {
    /// ChaCha seed, hex.
    pub seed: String,
    /// ChaCha word position (u128, decimal).
    pub word_pos: String,
    /// Streaming samplers: the epoch, and the position within it (steps when
    /// in order, windows when shuffled).
    pub epoch: u64,
    pub index: u64,
}

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

/// The checkpoint `weights/step_<N>.gguf` of the state `weights/step_<N>.state.gguf`
/// ([`state_path`]'s inverse), also when `state` is a link to it (`weights/latest`
/// pointed at the state); another name is returned as it is.
pub fn checkpoint_of(state: &Path) -> PathBuf {
    let beside = |p: &Path| {
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        name.strip_suffix(".state.gguf").map(|stem| p.with_file_name(format!("{stem}.gguf")))
    };
    if let Some(c) = beside(state) {
        return c;
    }
    // a relative link target is relative to the link's folder (join keeps an absolute one)
    let target = std::fs::read_link(state).ok().map(|t| match state.parent() {
        Some(d) => d.join(t),
        None => t,
    });
    target.as_deref().and_then(beside).unwrap_or_else(|| state.to_path_buf())
}

fn key(i: usize, t: Tensor<'_>, suffix: &str) -> String {
    let n = format!("{}{suffix}", t.name());
    if n.len() < 64 {
        n
    } else {
        format!("p{i}{suffix}")
    }
}

/// Whether the state holds `p`: every weight as trained, except a LoRA run's
/// frozen base, which is read again from the base model on resume.
fn in_state(w: &Weights<'_>, p: &crate::model::Param<'_>) -> bool {
    p.trainable || w.config().lora.is_none()
}

/// Write the state to `path`, a new file (a temporary the caller renames into
/// place), for the weights and moments as they are now,
/// paired with the checkpoint of run `run_id` that carries `save_id` (see [`check_pair`]).
pub fn save(path: &Path, w: &Weights<'_>, moments: &AdamWState<'_>, p: &Progress, run_id: &str, save_id: &str) -> Result<()> {
    let mut g = GgufWriter::new();
    g.set("toy.state.format", FORMAT)?;
    g.set("toy.state.run_id", run_id)?;
    g.set("toy.state.save_id", save_id)?;
    g.set("toy.state.step", p.step)?;
    g.set("toy.state.opt_t", p.opt_t)?;
    g.set("toy.state.sampler", serde_json::to_string(&p.sampler).expect("serializable"))?;
    for (i, prm) in w.params().iter().enumerate().filter(|(_, p)| in_state(w, p)) {
        g.add_tensor(&key(i, prm.tensor, ""), prm.tensor)?;
    }
    for (i, (prm, m, v)) in moments.entries().iter().enumerate() {
        g.add_tensor(&key(i, *prm, ".adam_m"), *m)?;
        g.add_tensor(&key(i, *prm, ".adam_v"), *v)?;
    }
    g.write_new(path).map_err(|e| runtime(format!("cannot write resume state: {e}")))
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
        // A NaN or an infinity in a moment (a negative second moment) would
        // surface a step later as a non-finite loss blamed on --lr. Checked on
        // the mapped bytes (states are f32), which load_into then copies.
        let v = name.ends_with(".adam_v");
        let data = if info.dtype == DType::F32 { f.tensor_data(name)? } else { &[] };
        let values = data.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        if let Some((i, x)) = values.enumerate().find(|(_, x)| !x.is_finite() || (v && *x < 0.0)) {
            return Err(bad(format!("tensor {name} holds {x} at element {i}; the resume state is broken")));
        }
        Ok(f.load_into(name, t)?)
    };
    for (i, prm) in w.params().iter().enumerate().filter(|(_, p)| in_state(w, p)) {
        load(&key(i, prm.tensor, ""), prm.tensor)?;
    }
    for (i, (prm, m, v)) in moments.entries().iter().enumerate() {
        load(&key(i, *prm, ".adam_m"), *m)?;
        load(&key(i, *prm, ".adam_v"), *v)?;
    }
    let sampler: SamplerState = serde_json::from_str(f.get_str("toy.state.sampler")?).map_err(|e| bad(format!("sampler state: {e}")))?;
    Ok(Progress { step: f.get_u64("toy.state.step")?, opt_t: f.get_u64("toy.state.opt_t")?, sampler })
}

/// Refuse a resume state that was not written with `checkpoint`: its step, run
/// and save id (`toy.state.*` against the checkpoint's `toy.step`, `toy.run_id`,
/// `toy.save_id`) must agree, so a state from another step or run cannot rewind
/// the run; and the checkpoint must be one of run `run_id`'s own, when known
/// (a pair copied in from another run is refused).
///
/// Returns the step both hold.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming both files and the key
/// that differs.
pub fn check_pair(checkpoint: &Path, run_id: Option<&str>) -> Result<u64> {
    let sp = state_path(checkpoint);
    if !sp.is_file() {
        return Err(input(format!("{}: no resume state beside the checkpoint", sp.display())));
    }
    let (ck, st) = (GgufFile::open(checkpoint)?, GgufFile::open(&sp)?);
    if st.get_str("toy.state.format").ok() != Some(FORMAT) {
        return Err(input(format!("{}: not a toy resume state ({FORMAT})", sp.display())));
    }
    let differs = |what: &str, a: String, b: String| {
        input(format!(
            "{} does not belong to {}: its {what} is {a}, the checkpoint's {b} (a state from another step or run; refusing to resume from it)",
            sp.display(),
            checkpoint.display()
        ))
    };
    let (s_step, c_step) = (st.get_u64("toy.state.step")?, ck.get_u64("toy.step").ok());
    if Some(s_step) != c_step {
        let c_step = c_step.map_or_else(|| "missing (not a checkpoint toy train wrote)".to_string(), |s| s.to_string());
        return Err(differs("step", s_step.to_string(), c_step));
    }
    let get = |f: &GgufFile, k: &str| f.get_str(k).map(str::to_string).unwrap_or_default();
    let (s_run, c_run) = (get(&st, "toy.state.run_id"), get(&ck, "toy.run_id"));
    if !s_run.is_empty() && s_run != c_run {
        return Err(differs("run", s_run, c_run));
    }
    if let Some(run_id) = run_id.filter(|r| !c_run.is_empty() && c_run != *r) {
        return Err(input(format!(
            "{} was written by run {c_run}, not by this run ({run_id}): refusing to resume from another run's checkpoint",
            checkpoint.display()
        )));
    }
    let (s_id, c_id) = (get(&st, "toy.state.save_id"), get(&ck, "toy.save_id"));
    if s_id != c_id {
        return Err(differs("save id", s_id, c_id));
    }
    Ok(s_step)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_checkpoint_of_a_state_is_found_through_a_link_to_it() {
        let w = Path::new("run/weights");
        assert_eq!(checkpoint_of(&w.join("step_8.state.gguf")), w.join("step_8.gguf"));
        assert_eq!(checkpoint_of(&w.join("step_8.gguf")), w.join("step_8.gguf"));
        let dir = tempfile::tempdir().unwrap();
        let latest = dir.path().join("latest");
        std::os::unix::fs::symlink("step_8.state.gguf", &latest).unwrap();
        assert_eq!(checkpoint_of(&latest), dir.path().join("step_8.gguf"));
        let other = dir.path().join("other");
        std::os::unix::fs::symlink("step_8.gguf", &other).unwrap();
        assert_eq!(checkpoint_of(&other), other);
    }
}
