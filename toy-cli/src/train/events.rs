//! What the training loop tells the world: typed [`Event`]s sent to a
//! [`Sink`]. The run folder ([`crate::run::folder::RunFolder`]) is one sink:
//! it writes each event as one line of `events.jsonl` (its `kind`, `t`, then
//! these fields in this order), the checkpoints and their resume state, the
//! loss curve and the recorded batches. The loop itself writes no file of the run.

use super::memory::MemoryReport;
use super::End;
use crate::config::Recipe;
use crate::data::Tokens;
use crate::error::Result;
use crate::formats::state::Progress;
use crate::formats::Provenance;
use crate::model::Weights;
use ggml_rs::optim::AdamWState;
use ggml_rs::Graph;
use serde::Serialize;

/// Where a run receives what its loop does.
pub trait Sink {
    /// The run is set up and its events are about to start: keep its
    /// configuration and, for a new run (`resumed_from` none), its training
    /// `graph`; a run resumed from the checkpoint of step N forgets what it
    /// logged after step N. Called once, before anything else.
    fn begin(&mut self, graph: &Graph<'_>, resumed_from: Option<u64>) -> Result<()>;
    /// Record one event. The run folder also draws its loss curve at a
    /// [`RunEnd`] that is not [`End::Errored`].
    fn send(&mut self, event: Event) -> Result<()>;
    /// Keep the weights before the first step (`--save-initial`): a
    /// checkpoint without resume state, and no event.
    fn save_initial(&mut self, weights: &Weights<'_>, provenance: &Provenance) -> Result<()>;
    /// Keep `snapshot` (checkpoint and resume state as one unit, so that a
    /// checkpoint never lacks its state), then send [`Saved`].
    fn save(&mut self, snapshot: &Snapshot<'_, '_>) -> Result<()>;
    /// The step of the newest complete save, if any.
    fn latest(&self) -> Option<u64>;
    /// Record every step's windows from now on (`--record-batches`): `b`
    /// windows of context `t` a step, after the `done` steps already taken;
    /// `chat`: windows of chat data, whose targets are masked.
    fn record_batches(&mut self, t: usize, b: usize, done: u64, chat: bool) -> Result<()>;
    /// Record one step's windows: those of `window` tokens at `starts` in
    /// `data` (nothing unless [`Sink::record_batches`] was called).
    fn record(&mut self, data: &Tokens, starts: &[usize], window: usize) -> Result<()>;
    /// Record one step's chat windows: `b`'s inputs and targets, `t` each.
    fn record_chat(&mut self, b: &super::batches::Batch, t: usize) -> Result<()>;
}

/// What a save keeps: the weights, the optimizer's moments and how far the
/// loop has got (its step, AdamW's `t`, the sampler).
pub struct Snapshot<'s, 'a> {
    pub weights: &'s Weights<'a>,
    /// AdamW's first and second moments.
    pub moments: &'s AdamWState<'a>,
    /// The step saved, AdamW's `t` and the sampler's state.
    pub progress: Progress,
    /// The checkpoint's metadata (its `save_id` is the sink's to choose).
    pub provenance: Provenance,
}

/// One event of a run. It serialises as its fields alone; [`Event::kind`]
/// names it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(untagged)]
pub enum Event {
    /// A new run starts.
    RunStart(Box<RunStart>),
    /// A run continues from a checkpoint.
    Resume(Box<Resume>),
    /// Graph nodes run on the CPU because the device cannot run them.
    Fallback(Fallback),
    /// A step starts a new pass over the corpus.
    Epoch(Epoch),
    /// An optimizer step was taken.
    Step(Step),
    /// A non-finite step was skipped (`--skip-nonfinite`).
    Skip(Skip),
    /// The validation loss after a step.
    Eval(Eval),
    /// A checkpoint and its resume state were saved.
    Saved(Saved),
    /// The run ended.
    RunEnd(RunEnd),
}

impl Event {
    /// The event's `kind` in `events.jsonl`.
    pub fn kind(&self) -> &'static str {
        match self {
            Event::RunStart(_) => "run_start",
            Event::Resume(_) => "resume",
            Event::Fallback(_) => "fallback",
            Event::Epoch(_) => "epoch",
            Event::Step(_) => "step",
            Event::Skip(_) => "skip",
            Event::Eval(_) => "eval",
            Event::Saved(_) => "checkpoint",
            Event::RunEnd(_) => "run_end",
        }
    }
}

/// The phase of a run an event belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Phase {
    /// Training (`train`), the only phase so far.
    Train,
}

/// `run_start`: what a new run is (schema `toy/v1`).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunStart {
    pub schema: &'static str,
    /// RFC 3339, UTC.
    pub started_at: String,
    pub run_id: String,
    pub phase: Phase,
    pub recipe: Recipe,
    pub host: Host,
    pub backend: Backend,
    pub git: Option<Git>,
    pub model: Model,
    pub config: Config,
    pub memory: MemoryReport,
    /// The chat corpus's windows, or null for text.
    pub chat: Option<Chat>,
    /// warm-start with the donor's table: how many student tokens found a
    /// donor row ([`crate::donor::MatchReport`]); absent in other runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub donor: Option<crate::donor::MatchReport>,
}

/// The machine a run started on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Host {
    pub name: String,
    pub os: &'static str,
    pub arch: &'static str,
}

/// The git checkout around the folder a run started in.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Git {
    pub sha: Option<String>,
    /// None on a detached HEAD.
    pub branch: Option<String>,
}

/// The devices a run trains on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Backend {
    /// The first device's backend, lower case (`cpu`, `cuda`, ...).
    pub kind: String,
    pub device: String,
    pub description: String,
    /// Every device of `--device`.
    pub devices: Vec<String>,
    /// How replicas sum their gradients.
    pub allreduce: &'static str,
}

/// The model's shape.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Model {
    pub arch: &'static str,
    /// `general.name`.
    pub name: String,
    pub vocab: usize,
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    pub n_kv: usize,
    pub d_head: usize,
    pub d_ff: usize,
    pub n_params: usize,
}

/// The training configuration and the corpus's size.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Config {
    pub context: usize,
    pub batch: usize,
    pub grad_accum: usize,
    pub steps: u64,
    pub lr: f32,
    pub min_lr: f32,
    pub warmup_steps: u64,
    pub betas: [f32; 2],
    pub eps: f32,
    pub weight_decay: f32,
    pub grad_clip: f32,
    pub seed: u64,
    pub matmul_precision: &'static str,
    pub dtype: &'static str,
    pub attention: &'static str,
    /// The preset; none (null) for a finetune that no `--preset` gave its batch and context.
    pub preset: Option<&'static str>,
    /// The corpus's path.
    pub corpus: String,
    /// Tokens of the training and validation splits.
    pub train_tokens: usize,
    pub val_tokens: usize,
}

/// A chat corpus's windows (`run_start`'s `chat`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Chat {
    /// What the records are (`messages`, `sharegpt`, `prompt-completion`, `alpaca`).
    pub records: String,
    /// Several conversations a window (`--pack`).
    pub pack: bool,
    /// Conversations in both splits.
    pub conversations: usize,
    /// Of them, cut to the window.
    pub truncated: usize,
    /// Of them, left out: no trained token within the window.
    pub dropped: usize,
    /// Windows of the training split.
    pub train_windows: usize,
    /// Windows held out for the validation loss.
    pub val_windows: usize,
    /// Tokens trained on (counted targets) in the training windows.
    pub trained_tokens: usize,
}

/// `resume`: a run continues after `from_step` steps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Resume {
    /// RFC 3339, UTC.
    pub resumed_at: String,
    pub from_step: u64,
    /// The steps it now runs to.
    pub steps: u64,
    pub backend: ResumeBackend,
    pub dtype: &'static str,
    pub matmul_precision: &'static str,
    pub attention: &'static str,
    pub memory: MemoryReport,
}

/// The device a resumed run trains on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ResumeBackend {
    pub device: String,
}

/// `fallback`: `n_nodes` graph nodes (of the ops `ops`) run on the CPU.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Fallback {
    pub device: String,
    pub n_nodes: usize,
    pub ops: Vec<String>,
}

/// `epoch`: step `step` starts epoch `epoch`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Epoch {
    pub step: u64,
    pub epoch: u64,
}

/// `step`: optimizer step `step` at learning rate `lr`.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Step {
    pub phase: Phase,
    pub step: u64,
    /// The loss before the step's update.
    pub loss: f32,
    pub lr: f32,
    /// Tokens the step trained on.
    pub tokens: u64,
    /// Microseconds the step took, batch included.
    pub wall_us: u64,
    /// The global gradient norm before clipping, when measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grad_norm: Option<f32>,
}

/// `skip`: step `step` was not applied (its loss or gradients were not finite).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Skip {
    pub step: u64,
    pub loss: f32,
    pub grad_norm: Option<f32>,
    /// Always `non-finite`.
    pub reason: &'static str,
}

/// `eval`: the validation loss after step `step` (0: before the first).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Eval {
    pub phase: Phase,
    pub step: u64,
    pub val_loss: f32,
}

/// `checkpoint`: step `step` was saved at `path` (relative to the run folder).
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Saved {
    pub step: u64,
    pub path: String,
}

/// `run_end`: why and where a run ended.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct RunEnd {
    /// RFC 3339, UTC.
    pub ended_at: String,
    pub reason: End,
    /// The last step done (its update applied).
    pub final_step: u64,
    pub final_loss: f32,
    /// What a run that was not stopped by an error measured.
    #[serde(flatten)]
    pub totals: Option<Totals>,
    pub exit_code: i32,
    /// See [`super::memory::DeviceMemory::used_since_start`].
    pub device_used_bytes: Option<usize>,
}

/// The measures of a run that completed or was interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub struct Totals {
    /// The last validation loss.
    pub val_loss: Option<f32>,
    /// The step `val_loss` is of: `final_step`, but for a run a signal stopped
    /// between micro-batches or while it wrote a checkpoint (no validation then,
    /// so that the stop is quick).
    pub val_step: Option<u64>,
    /// Window positions computed per second of [`Self::wall_seconds`]: the
    /// steps' `batch·context·grad_accum`, a chat window's padding included
    /// (validation and checkpoints take part of that time).
    pub tokens_per_second: f64,
    /// Seconds from the first step's start (after the step-0 validation) to
    /// the run's end.
    pub wall_seconds: f64,
}

/// A sink that keeps what it is sent, for tests of the loop.
#[cfg(test)]
#[derive(Default)]
pub struct Memory {
    /// Every event, saves included (as [`Saved`]).
    pub events: Vec<Event>,
}

#[cfg(test)]
impl Sink for Memory {
    fn begin(&mut self, _graph: &Graph<'_>, _resumed_from: Option<u64>) -> Result<()> {
        Ok(())
    }
    fn send(&mut self, event: Event) -> Result<()> {
        self.events.push(event);
        Ok(())
    }
    fn save_initial(&mut self, _weights: &Weights<'_>, _provenance: &Provenance) -> Result<()> {
        Ok(())
    }
    fn save(&mut self, s: &Snapshot<'_, '_>) -> Result<()> {
        let step = s.progress.step;
        self.send(Event::Saved(Saved { step, path: format!("weights/step_{step}.gguf") }))
    }
    fn latest(&self) -> Option<u64> {
        self.events.iter().rev().find_map(|e| if let Event::Saved(s) = e { Some(s.step) } else { None })
    }
    fn record_chat(&mut self, _b: &super::batches::Batch, _t: usize) -> Result<()> {
        Ok(())
    }

    fn record_batches(&mut self, _t: usize, _b: usize, _done: u64, _chat: bool) -> Result<()> {
        Ok(())
    }
    fn record(&mut self, _data: &Tokens, _starts: &[usize], _window: usize) -> Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// The fields of `e` as `events.jsonl` writes them (after `kind` and `t`).
    fn text(e: &Event) -> String {
        serde_json::to_value(e).unwrap().to_string()
    }

    // The `json!` objects the loop wrote before its events were typed: the
    // same keys in the same order, f32 values widened to f64 alike.
    #[test]
    fn steps_evals_and_skips_as_before() {
        let (loss, lr, g) = (2.1f32, 0.1f32, 0.3f32);
        let step = Step { phase: Phase::Train, step: 3, loss, lr, tokens: 64, wall_us: 1200, grad_norm: Some(g) };
        let old = json!({ "phase": "train", "step": 3u64, "loss": loss, "lr": lr, "tokens": 64u64, "wall_us": 1200u64, "grad_norm": g });
        assert_eq!(text(&Event::Step(step)), old.to_string());
        assert!(old.to_string().contains("2.0999999046325684"), "{old}");
        let plain = Step { grad_norm: None, ..step };
        let old = json!({ "phase": "train", "step": 3u64, "loss": loss, "lr": lr, "tokens": 64u64, "wall_us": 1200u64 });
        assert_eq!(text(&Event::Step(plain)), old.to_string());
        let eval = Eval { phase: Phase::Train, step: 0, val_loss: f32::NAN };
        assert_eq!(text(&Event::Eval(eval)), json!({ "phase": "train", "step": 0u64, "val_loss": f32::NAN }).to_string());
        let skip = Skip { step: 4, loss: f32::INFINITY, grad_norm: None, reason: "non-finite" };
        let old = json!({ "step": 4u64, "loss": f32::INFINITY, "grad_norm": None::<f32>, "reason": "non-finite" });
        assert_eq!(text(&Event::Skip(skip)), old.to_string());
        assert_eq!(text(&Event::Epoch(Epoch { step: 9, epoch: 2 })), json!({ "step": 9u64, "epoch": 2u64 }).to_string());
        let saved = Saved { step: 9, path: "weights/step_9.gguf".into() };
        assert_eq!(text(&Event::Saved(saved)), json!({ "step": 9u64, "path": "weights/step_9.gguf" }).to_string());
        let fallback = Fallback { device: "CUDA0".into(), n_nodes: 2, ops: vec!["OUT_PROD".into()] };
        let old = json!({ "device": "CUDA0", "n_nodes": 2usize, "ops": ["OUT_PROD"] });
        assert_eq!(text(&Event::Fallback(fallback)), old.to_string());
    }

    #[test]
    fn run_ends_as_before() {
        let (loss, val, used) = (1.7f32, 1.9f32, Some(4096usize));
        let end = |totals| RunEnd {
            ended_at: "2026-12-02T07:00:00.000Z".into(),
            reason: End::Errored,
            final_step: 5,
            final_loss: loss,
            totals,
            exit_code: 1,
            device_used_bytes: used,
        };
        let old = json!({ "ended_at": "2026-12-02T07:00:00.000Z", "reason": End::Errored, "final_step": 5u64, "final_loss": loss,
                          "exit_code": 1, "device_used_bytes": used });
        assert_eq!(text(&Event::RunEnd(end(None))), old.to_string());
        let totals = Totals { val_loss: Some(val), val_step: Some(5), tokens_per_second: 1234.5, wall_seconds: 0.25 };
        let old = json!({ "ended_at": "2026-12-02T07:00:00.000Z", "reason": End::Errored, "final_step": 5u64, "final_loss": loss,
                          "val_loss": Some(val), "val_step": 5u64, "tokens_per_second": 1234.5f64, "wall_seconds": 0.25f64, "exit_code": 1,
                          "device_used_bytes": used });
        assert_eq!(text(&Event::RunEnd(end(Some(totals)))), old.to_string());
        let no_val = Totals { val_loss: None, val_step: None, ..totals };
        assert!(text(&Event::RunEnd(end(Some(no_val)))).contains(r#""val_loss":null,"val_step":null,"tokens_per_second""#));
        assert_eq!(Event::RunEnd(end(None)).kind(), "run_end");
    }

    fn memory() -> MemoryReport {
        MemoryReport { weights_bytes: 10, compute_bytes: 20, buffers_bytes: 30, device_used_bytes: None }
    }

    /// A `run_start` of a chat corpus with every field set.
    fn start() -> RunStart {
        let chat = Chat {
            records: "messages".into(),
            pack: true,
            conversations: 4,
            truncated: 1,
            dropped: 0,
            train_windows: 3,
            val_windows: 1,
            trained_tokens: 77,
        };
        RunStart {
            schema: "toy/v1",
            started_at: "2026-12-02T07:00:00.000Z".into(),
            run_id: "llama-20261202-001".into(),
            phase: Phase::Train,
            recipe: Recipe::FromScratch,
            host: Host { name: "h".into(), os: "linux", arch: "x86_64" },
            backend: Backend {
                kind: "cpu".into(),
                device: "CPU".into(),
                description: "a cpu".into(),
                devices: vec!["cpu".into()],
                allreduce: "none",
            },
            git: Some(Git { sha: None, branch: Some("main".into()) }),
            model: Model {
                arch: "llama",
                name: "toy-llama-tiny".into(),
                vocab: 512,
                d_model: 128,
                n_layers: 4,
                n_heads: 4,
                n_kv: 4,
                d_head: 32,
                d_ff: 344,
                n_params: 1000,
            },
            config: Config {
                context: 64,
                batch: 8,
                grad_accum: 1,
                steps: 200,
                lr: 1e-3,
                min_lr: 1e-4,
                warmup_steps: 10,
                betas: [0.9, 0.95],
                eps: 1e-8,
                weight_decay: 0.1,
                grad_clip: 1.0,
                seed: 1337,
                matmul_precision: "default",
                dtype: "f32",
                attention: "plain",
                preset: Some("tiny"),
                corpus: "data/x.txt".into(),
                train_tokens: 900,
                val_tokens: 100,
            },
            memory: memory(),
            chat: Some(chat),
            donor: None,
        }
    }

    #[test]
    fn run_start_as_before() {
        let (lr, min_lr, b0, b1, eps, wd) = (1e-3f32, 1e-4f32, 0.9f32, 0.95f32, 1e-8f32, 0.1f32);
        let old = json!({
            "schema": "toy/v1",
            "started_at": "2026-12-02T07:00:00.000Z",
            "run_id": "llama-20261202-001",
            "phase": "train",
            "recipe": Recipe::FromScratch,
            "host": { "name": "h", "os": "linux", "arch": "x86_64" },
            "backend": { "kind": "cpu", "device": "CPU", "description": "a cpu", "devices": ["cpu"], "allreduce": "none" },
            "git": { "sha": null, "branch": "main" },
            "model": { "arch": "llama", "name": "toy-llama-tiny", "vocab": 512, "d_model": 128, "n_layers": 4, "n_heads": 4, "n_kv": 4,
                       "d_head": 32, "d_ff": 344, "n_params": 1000 },
            "config": { "context": 64, "batch": 8, "grad_accum": 1, "steps": 200u64, "lr": lr, "min_lr": min_lr, "warmup_steps": 10u64,
                        "betas": [b0, b1], "eps": eps, "weight_decay": wd, "grad_clip": 1.0f32, "seed": 1337u64,
                        "matmul_precision": "default", "dtype": "f32", "attention": "plain", "preset": "tiny", "corpus": "data/x.txt",
                        "train_tokens": 900, "val_tokens": 100 },
            "memory": { "weights_bytes": 10, "compute_bytes": 20, "buffers_bytes": 30, "device_used_bytes": null },
            "chat": { "records": "messages", "pack": true, "conversations": 4, "truncated": 1, "dropped": 0, "train_windows": 3,
                      "val_windows": 1, "trained_tokens": 77 },
        });
        assert_eq!(text(&Event::RunStart(Box::new(start()))), old.to_string());
        let text_run = RunStart { chat: None, git: None, ..start() };
        let v = serde_json::to_value(Event::RunStart(Box::new(text_run))).unwrap();
        assert_eq!((&v["chat"], &v["git"]), (&serde_json::Value::Null, &serde_json::Value::Null));
    }

    #[test]
    fn resume_as_before() {
        let resume = Resume {
            resumed_at: "2026-12-02T07:00:00.000Z".into(),
            from_step: 20,
            steps: 40,
            backend: ResumeBackend { device: "CPU".into() },
            dtype: "f32",
            matmul_precision: "default",
            attention: "plain",
            memory: memory(),
        };
        let old = json!({ "resumed_at": "2026-12-02T07:00:00.000Z", "from_step": 20u64, "steps": 40u64, "backend": { "device": "CPU" },
                          "dtype": "f32", "matmul_precision": "default", "attention": "plain",
                          "memory": { "weights_bytes": 10, "compute_bytes": 20, "buffers_bytes": 30, "device_used_bytes": null } });
        assert_eq!(text(&Event::Resume(Box::new(resume))), old.to_string());
    }
}
