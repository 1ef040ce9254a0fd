//! What a finished (or interrupted) run reports: its outcome, the `--json`
//! summary, and the command's result.

use super::events;
use crate::error::{Error, Result};

/// How a run ended: `run_end`'s `reason` in events.jsonl.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum End {
    /// Every step ran.
    Completed,
    /// A signal stopped it after a step (and a save).
    Interrupted,
    /// An error stopped it.
    Errored,
}

/// What a finished (or interrupted) run reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub run_id: String,
    pub run_dir: std::path::PathBuf,
    pub steps: u64,
    /// The run's seed (from the flags, toy.toml, or its config.toml on resume).
    pub seed: u64,
    pub final_loss: f32,
    pub val_loss: Option<f32>,
    /// The step `val_loss` is of (see [`events::Totals::val_step`]).
    pub val_step: Option<u64>,
    /// Completed, or interrupted by a signal.
    pub reason: End,
    pub tokens_per_second: f64,
    pub wall_seconds: f64,
    /// Chat data: `run_start`'s `chat` (its split: the training windows and
    /// their trained tokens apart from the held-out ones).
    pub chat: Option<events::Chat>,
    /// warm-start: `run_start`'s `donor` (the donor match report).
    pub donor: Option<crate::donor::MatchReport>,
    /// The signal that interrupted the run (`reason` is `Interrupted`), else 0.
    pub signal: i32,
}

impl Outcome {
    /// The `--json` summary (`toy/train-v1`): printed for an interrupted run
    /// too, with its `reason` and the step it saved.
    pub fn summary(&self) -> serde_json::Value {
        let mut s = serde_json::json!({ "format": "toy/train-v1", "run_id": self.run_id, "run_dir": self.run_dir,
                                        "steps": self.steps, "seed": self.seed, "final_loss": self.final_loss,
                                        "val_loss": self.val_loss, "val_step": self.val_step, "reason": self.reason });
        if let Some(c) = &self.chat {
            s["chat"] = serde_json::json!(c);
        }
        if let Some(d) = &self.donor {
            s["donor"] = serde_json::json!(d);
        }
        s
    }

    /// The run as the command's result: an interrupted one is
    /// [`Error::Interrupted`] (exit 128 + the signal), saying where it saved
    /// and how to go on.
    pub fn into_result(self) -> Result<Outcome> {
        if self.reason != End::Interrupted {
            return Ok(self);
        }
        Err(Error::Interrupted(
            self.signal,
            format!(
                "interrupted at step {}; saved weights/step_{}.gguf (continue with: toy train --resume {})",
                self.steps,
                self.steps,
                self.run_dir.display()
            ),
        ))
    }
}

/// The `--json` object (`toy/train-v1`) of a command that ended without an
/// outcome: refused, failed, or stopped by a signal before its run returned
/// (`reason` "errored" or "interrupted", the error line, the exit code).
pub fn summary_without_outcome(reason: &str, error: &str, exit_code: i32) -> serde_json::Value {
    serde_json::json!({ "format": "toy/train-v1", "reason": reason, "error": error, "exit_code": exit_code })
}
