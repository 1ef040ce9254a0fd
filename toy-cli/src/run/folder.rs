//! The run folder as the training loop's [`Sink`]: `events.jsonl`,
//! `config.toml`, `flow.json`, the checkpoint + resume state pairs in
//! `weights/` (with `latest` and pruning), `loss.svg` and the recorded
//! batches.

use super::batches::Recorder;
use super::events::{purge_after, read_events, EventLog};
use super::{flow, plot, RunDir};
use crate::config::TrainConfig;
use crate::data::{Tokenizer, Tokens};
use crate::error::{runtime, Result};
use crate::files::write_atomic;
use crate::formats::checkpoint::write_checkpoint;
use crate::formats::{state, Provenance};
use crate::model::Weights;
use crate::train::events::{Event, Saved, Sink, Snapshot};
use crate::train::End;
use ggml_rs::Graph;
use std::path::Path;

/// An open run folder receiving a run's events.
pub struct RunFolder<'r> {
    run: &'r RunDir,
    cfg: &'r TrainConfig,
    tokenizer: Option<&'r Tokenizer>,
    /// Keep only the last `keep` checkpoints (0: all).
    keep: usize,
    /// Opened by [`Sink::begin`].
    log: Option<EventLog>,
    /// The `(step, loss)` and `(step, val_loss)` of this process's events, for the plot.
    train: Vec<(u64, f32)>,
    val: Vec<(u64, f32)>,
    /// `batches.bin`, when recording.
    recorder: Option<Recorder>,
    /// A resumed run's `config.toml`, written with its first checkpoint: a
    /// resume that saves nothing leaves the run's configuration as it was.
    config_pending: bool,
}

impl<'r> RunFolder<'r> {
    /// `config.toml`: the run's configuration, written whole (temp file, rename).
    fn write_config(&self) -> Result<()> {
        let config_toml = toml::to_string(self.cfg).map_err(|e| runtime(e.to_string()))?;
        write_atomic(&self.run.path.join("config.toml"), config_toml.as_bytes())
    }

    /// The sink of a run of `cfg` into `run`, whose checkpoints carry
    /// `tokenizer`; nothing is written before [`Sink::begin`].
    pub fn new(run: &'r RunDir, cfg: &'r TrainConfig, tokenizer: Option<&'r Tokenizer>, keep: usize) -> RunFolder<'r> {
        RunFolder { run, cfg, tokenizer, keep, log: None, train: Vec::new(), val: Vec::new(), recorder: None, config_pending: false }
    }

    /// `loss.svg`, from the whole event log (so a resumed run plots all of it),
    /// or from this process's events when the log cannot be read.
    fn plot(&self) -> Result<()> {
        let (mut train, mut val) = (self.train.clone(), self.val.clone());
        if let Ok(events) = read_events(&self.run.path.join("events.jsonl")) {
            let f = |e: &serde_json::Value, k: &str| e.get(k).and_then(|v| v.as_f64()).map(|v| v as f32);
            let pick = |kind: &str, key: &str| -> Vec<(u64, f32)> {
                events.iter().filter(|e| e["kind"] == kind).filter_map(|e| Some((e["step"].as_u64()?, f(e, key)?))).collect()
            };
            // A resume drops what came after its checkpoint (`purge_after`); should a
            // step still repeat (a log edited by hand), the later value wins.
            let dedup = |v: Vec<(u64, f32)>| v.into_iter().collect::<std::collections::BTreeMap<_, _>>().into_iter().collect::<Vec<_>>();
            let (all_t, all_v) = (dedup(pick("step", "loss")), dedup(pick("eval", "val_loss")));
            if all_t.len() >= train.len() {
                train = all_t;
                val = all_v;
            }
        }
        // A finetune keeps its base's shape, whatever preset gave its batch: named by the model.
        let what = match self.cfg.recipe {
            crate::config::Recipe::Finetune => crate::train::model_name(self.cfg),
            _ => format!("{} {}", self.cfg.model.arch.name(), self.cfg.preset_name()),
        };
        let title = format!("{} — {what}", self.run.id);
        plot::plot_losses(&self.run.path.join("loss.svg"), &title, &train, &val)
    }

    /// Write the checkpoint and state of `s` to temporaries, then rename the
    /// state into place and then the checkpoint; on failure remove both
    /// temporaries (and a state left without its checkpoint).
    fn write_pair(&self, s: &Snapshot<'_, '_>, path: &Path, save_id: &str) -> Result<()> {
        let state_path = state::state_path(path);
        let (tmp_ck, tmp_st) = (crate::files::temp_path(path), crate::files::temp_path(&state_path));
        let mut prov = s.provenance.clone();
        prov.save_id = save_id.to_string();
        let written = (|| -> Result<()> {
            state::save(&tmp_st, s.weights, s.moments, &s.progress, &self.run.id, save_id)?;
            write_checkpoint(&tmp_ck, s.weights, self.tokenizer, &prov)?;
            let rename =
                |from: &Path, to: &Path| std::fs::rename(from, to).map_err(|e| runtime(format!("cannot write {}: {e}", to.display())));
            rename(&tmp_st, &state_path)?;
            rename(&tmp_ck, path)
        })();
        if written.is_err() {
            let _ = std::fs::remove_file(&tmp_st);
            let _ = std::fs::remove_file(&tmp_ck);
            if !path.is_file() {
                let _ = std::fs::remove_file(&state_path);
            }
        }
        written
    }
}

impl Sink for RunFolder<'_> {
    /// Open `events.jsonl` (appending), write `config.toml` and `flow.json`
    /// for a new run; a resumed run first drops the events it logged after
    /// the step it resumes from ([`purge_after`]: a killed run's steps after
    /// its last checkpoint, which it takes again), and writes `config.toml`
    /// (the resume flags taken hold for the next resume) with its first checkpoint.
    fn begin(&mut self, graph: &Graph<'_>, resumed_from: Option<u64>) -> Result<()> {
        let path = self.run.path.join("events.jsonl");
        if let Some(step) = resumed_from {
            purge_after(&path, step)?;
        }
        self.log = Some(EventLog::open(&path)?);
        if resumed_from.is_some() {
            self.config_pending = true;
        } else {
            self.write_config()?;
            flow::write_flow(&self.run.path, graph)?;
        }
        Ok(())
    }

    /// One line of `events.jsonl`; after a `run_end` that is not errored, `loss.svg`.
    fn send(&mut self, event: Event) -> Result<()> {
        let log = self.log.as_mut().ok_or_else(|| runtime("the run folder received an event before the run began"))?;
        log.emit(&event)?;
        match event {
            Event::Step(s) => self.train.push((s.step, s.loss)),
            Event::Eval(e) => self.val.push((e.step, e.val_loss)),
            Event::RunEnd(e) if e.reason != End::Errored => self.plot()?,
            _ => {}
        }
        Ok(())
    }

    /// `weights/step_0.gguf`.
    fn save_initial(&mut self, weights: &Weights<'_>, provenance: &Provenance) -> Result<()> {
        let path = self.run.checkpoint_path(0);
        let tmp = crate::files::temp_path(&path);
        let written = write_checkpoint(&tmp, weights, self.tokenizer, provenance)
            .and_then(|_| std::fs::rename(&tmp, &path).map_err(|e| runtime(format!("cannot write {}: {e}", path.display()))));
        match written {
            Ok(()) => {
                if let Ok(d) = std::fs::File::open(self.run.path.join("weights")) {
                    let _ = d.sync_all();
                }
                Ok(())
            }
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                Err(e)
            }
        }
    }

    /// `weights/step_<N>.gguf` and its `.state.gguf` as one unit (see
    /// `write_pair`: a checkpoint never lacks its state, and a failure
    /// leaves neither), then `weights/latest` moves, the `checkpoint` event,
    /// and pruning. A second signal does not cut it ([`crate::signals::critical`]).
    fn save(&mut self, s: &Snapshot<'_, '_>) -> Result<()> {
        let _section = crate::signals::critical();
        let step = s.progress.step;
        let path = self.run.checkpoint_path(step);
        let save_id = format!("{:016x}", rand::random::<u64>());
        if self.config_pending {
            self.write_config()?;
            self.config_pending = false;
        }
        self.write_pair(s, &path, &save_id)?;
        if let Ok(d) = std::fs::File::open(self.run.path.join("weights")) {
            let _ = d.sync_all();
        }
        self.run.set_latest(step)?;
        self.send(Event::Saved(Saved { step, path: format!("weights/step_{step}.gguf") }))?;
        if self.keep > 0 {
            prune(self.run, self.keep);
        }
        crate::signals::saved();
        Ok(())
    }

    /// The step of the checkpoint `weights/latest` names.
    fn latest(&self) -> Option<u64> {
        let path = self.run.latest()?;
        let name = path.file_name()?.to_str()?;
        let step = super::checkpoint_step(name)?;
        (path == self.run.checkpoint_path(step)).then_some(step)
    }

    /// `batches.json` and `batches.bin` (see [`Recorder::create`]).
    fn record_batches(&mut self, t: usize, b: usize, done: u64, chat: bool) -> Result<()> {
        self.recorder = Some(Recorder::create(&self.run.path, t, b, done, chat)?);
        Ok(())
    }

    fn record(&mut self, data: &Tokens, starts: &[usize], window: usize) -> Result<()> {
        self.recorder.as_mut().map_or(Ok(()), |r| r.record(data, starts, window))
    }

    fn record_chat(&mut self, b: &crate::train::batches::Batch, t: usize) -> Result<()> {
        self.recorder.as_mut().map_or(Ok(()), |r| r.record_chat(b, t))
    }
}

/// Delete all but the newest `keep` checkpoints (and their states), never `step_0`.
fn prune(run: &RunDir, keep: usize) {
    let dir = run.path.join("weights");
    let Ok(rd) = std::fs::read_dir(&dir) else { return };
    let mut steps: Vec<u64> = rd.flatten().filter_map(|e| super::checkpoint_step(e.file_name().to_str()?)).filter(|&s| s > 0).collect();
    steps.sort_unstable();
    let n = steps.len().saturating_sub(keep);
    for s in &steps[..n] {
        let p = run.checkpoint_path(*s);
        let _ = std::fs::remove_file(state::state_path(&p));
        let _ = std::fs::remove_file(p);
    }
}
