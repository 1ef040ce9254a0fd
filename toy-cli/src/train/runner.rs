//! The training loop shared by every recipe: sample, step, evaluate, save
//! (checkpoint with resume state), stop cleanly on a signal. What it does goes
//! to a [`Sink`] as [`Event`]s; it writes no file of the run itself.

use super::batches::{batch_at, eval_starts, Batch, Sampler};
use super::chat_windows::ChatRun;
use super::events::{self, Event, Phase, RunEnd, Sink, Snapshot, Totals};
use super::parallel::Trainer;
use super::schedule::Cosine;
use super::step::{EvalStep, StepStats};
use super::{End, Outcome, RunOptions};
use crate::config::TrainConfig;
use crate::data::Corpus;
use crate::error::{runtime, Error, Result};
use crate::formats::state::Progress;
use crate::formats::Provenance;
use crate::model::Weights;
use crate::run::events::now_rfc3339;
use crate::run::RunDir;
use ggml_rs::optim::AdamWState;
use std::sync::atomic::Ordering;

/// What became of one step.
enum Stepped {
    /// The update was applied.
    Applied(StepStats),
    /// Not finite, skipped (`--skip-nonfinite`): the step counts, nothing changed.
    Skipped,
    /// A signal stopped it between micro-batches: nothing applied, its windows put back.
    Stopped,
}

/// Everything the loop works on.
pub struct Loop<'l, 'a> {
    pub cfg: &'l TrainConfig,
    pub corpus: &'l Corpus,
    /// The run's id and folder, for messages and the outcome (the loop
    /// writes through `sink`).
    pub run: &'l RunDir,
    pub opts: &'l RunOptions,
    pub sink: &'l mut dyn Sink,
    pub train: &'l mut Trainer<'a>,
    pub eval: Option<&'l mut EvalStep<'a>>,
    pub validation: &'l Validation,
    /// The windows of a chat corpus (then batches come from them, not the token stream).
    pub chat: Option<&'l ChatRun>,
    pub weights: &'l Weights<'a>,
    pub moments: &'l AdamWState<'a>,
    pub sampler: &'l mut Sampler,
    /// Steps already done (resuming).
    pub start_step: u64,
    pub prov: &'l dyn Fn(u64) -> Provenance,
    /// The first replica's device and its memory at the start (for `run_end`).
    pub memory: (&'l super::memory::DeviceMemory, &'l ggml_rs::Backend),
}

/// The validation set of a run.
pub enum Validation {
    /// Windows of the validation token stream at these offsets, read at every evaluation.
    Stream(Vec<usize>),
    /// A chat corpus's validation windows, batched once.
    Chat(Vec<Batch>),
}

impl Validation {
    /// The validation set of `corpus` (`chat`: its windows) for `cfg`, at
    /// most `cfg.eval_windows` windows, and the evaluation graph's batch size
    /// (0: nothing to evaluate).
    pub fn new(cfg: &TrainConfig, corpus: &Corpus, chat: Option<&ChatRun>) -> (Validation, usize) {
        let max = if cfg.eval_windows == 0 { usize::MAX } else { cfg.eval_windows };
        match chat {
            Some(c) => {
                let eb = cfg.batch.min(c.val.len().min(max));
                (Validation::Chat(c.val.batches(eb, max)), eb)
            }
            None => {
                let starts = eval_starts(corpus.val.len(), cfg.model.context, max);
                let eb = cfg.batch.min(starts.len());
                (Validation::Stream(starts), eb)
            }
        }
    }
}

impl Loop<'_, '_> {
    /// The validation batches (read before any is evaluated, so a corpus that
    /// cannot be read is told apart from a failing evaluation). A last batch
    /// of fewer windows is filled with windows that score nothing (targets −1),
    /// so every window counts, as in `toy eval`.
    fn val_batches(&self) -> Result<Vec<Batch>> {
        let Some(ev) = self.eval.as_deref() else { return Ok(Vec::new()) };
        match self.validation {
            Validation::Stream(starts) => starts
                .chunks(ev.b)
                .map(|chunk| {
                    let mut bt = batch_at(&self.corpus.val, chunk, ev.t)?;
                    bt.tokens.resize(ev.b * ev.t, 0);
                    bt.targets.resize(ev.b * ev.t, -1);
                    Ok(bt)
                })
                .collect(),
            Validation::Chat(batches) => Ok(batches.clone()),
        }
    }

    /// The mean loss over `batches`: each batch's mean (over its targets that
    /// are not −1) weighted by how many it counts, so the result is the mean
    /// over every scored token (for chat data the assistant-only loss).
    fn val_loss(&mut self, batches: &[Batch]) -> Result<Option<f32>> {
        let Some(ev) = self.eval.as_deref_mut() else { return Ok(None) };
        let (mut sum, mut n) = (0f64, 0f64);
        for bt in batches {
            let w = bt.targets.iter().filter(|&&x| x >= 0).count() as f64;
            if w > 0.0 {
                sum += ev.loss(&bt.tokens, &bt.targets)? as f64 * w;
                n += w;
            }
        }
        Ok((n > 0.0).then(|| (sum / n) as f32))
    }

    /// Validation loss, or the run ended by [`Self::corpus_failed`] at `done`.
    fn evaluate(&mut self, done: u64, loss: f32) -> Result<Option<f32>> {
        match self.val_batches() {
            Ok(b) => self.val_loss(&b),
            Err(e) => Err(self.corpus_failed(e, done, loss)),
        }
    }

    /// End the run on a corpus that can no longer be read (a prepared corpus
    /// truncated or rewritten under it): save step `done` (unless it is saved
    /// already), so `--resume` continues once the corpus is back, and say so.
    fn corpus_failed(&mut self, e: Error, done: u64, loss: f32) -> Error {
        let saved = if self.sink.latest() == Some(done) { Ok(()) } else { self.save(done) };
        let _ = self.end(End::Errored, done, loss, 1);
        match saved {
            Ok(()) => runtime(format!(
                "{e}; saved weights/step_{done}.gguf (restore the corpus, then continue with: toy train --resume {})",
                self.run.path.display()
            )),
            Err(s) => runtime(format!("{e}; the checkpoint of step {done} failed too: {s}")),
        }
    }

    /// The next step's windows of `t` tokens (recorded when asked) and whether
    /// they start an epoch. A corpus that cannot be read ends the run through
    /// [`Self::corpus_failed`] at `done`, with the sampler put back so that
    /// checkpoint resumes with these windows.
    fn next_batch(&mut self, t: usize, done: u64, loss: f32) -> Result<(Batch, bool)> {
        if let Some(c) = self.chat {
            let (windows, new_epoch) = self.sampler.next_windows(c.train.len() as u64);
            let b = c.train.batch(&windows);
            if self.opts.record_batches {
                self.sink.record_chat(&b, t)?;
            }
            return Ok((b, new_epoch));
        }
        let before = self.sampler.state();
        let len = self.corpus.train.len();
        let (starts, new_epoch) = self.sampler.next_starts(len);
        let record = self.opts.record_batches;
        let read = batch_at(&self.corpus.train, &starts, t).and_then(|b| {
            if record {
                self.sink.record(&self.corpus.train, &starts, t + 1).map(|()| b)
            } else {
                Ok(b)
            }
        });
        match read {
            Ok(b) => Ok((b, new_epoch)),
            Err(e) => {
                self.sampler.restore(&before, len).map_err(runtime)?;
                Err(self.corpus_failed(e, done, loss))
            }
        }
    }

    /// Save step `step` (checkpoint and resume state as one unit, see [`Sink::save`]).
    fn save(&mut self, step: u64) -> Result<()> {
        let progress = Progress { step, opt_t: self.train.step_count(), sampler: self.sampler.state() };
        let snapshot = Snapshot { weights: self.weights, moments: self.moments, progress, provenance: (self.prov)(step) };
        self.sink.save(&snapshot)
    }

    /// `run_end` of a run stopped by an error (`reason`) after step `step`.
    fn end(&mut self, reason: End, step: u64, loss: f32, code: i32) -> Result<()> {
        self.sink.send(Event::RunEnd(RunEnd {
            ended_at: now_rfc3339(),
            reason,
            final_step: step,
            final_loss: loss,
            totals: None,
            exit_code: code,
            device_used_bytes: self.memory.0.used_since_start(self.memory.1),
        }))
    }
}

/// What the loop shows on the terminal: a progress bar (stderr a terminal)
/// with loss lines above it, loss lines alone, or nothing (`--json`).
struct Report {
    bar: Option<indicatif::ProgressBar>,
    quiet: bool,
}

impl Report {
    fn new(opts: &RunOptions, steps: u64, start_step: u64) -> Report {
        let bar = (opts.progress && !opts.quiet).then(|| {
            let pb = crate::output::progress_bar(steps, "{bar:30} {pos}/{len} {msg} [{elapsed_precise} < {eta_precise}]");
            pb.set_position(start_step);
            pb
        });
        Report { bar, quiet: opts.quiet }
    }

    fn say(&self, line: String) {
        match (&self.bar, self.quiet) {
            (_, true) => {}
            (Some(pb), _) => pb.println(line),
            (None, _) => crate::outln!("{line}"),
        }
    }

    /// Move the bar to `step`, showing `loss` and `tps` tokens per second.
    fn progress(&self, step: u64, loss: f32, tps: f64) {
        if let Some(pb) = &self.bar {
            pb.set_position(step);
            pb.set_message(format!("loss {loss:.4} · {tps:.0} tok/s"));
        }
    }
}

/// What the loop has done so far.
struct Tally {
    /// The last step done (its update applied, or skipped as non-finite).
    done: u64,
    /// Steps of this run whose update was applied.
    applied: u64,
    /// The loss of the last applied step.
    last_loss: f32,
    last_val: Option<f32>,
    /// The step of the last validation, if any ran: the last step, but for a
    /// run a signal stopped between micro-batches or during a checkpoint.
    val_step: Option<u64>,
}

impl Loop<'_, '_> {
    /// Evaluate after `step` (training loss `loss`), and log and show it.
    fn eval_at(&mut self, step: u64, loss: f32, tally: &mut Tally, report: &Report) -> Result<()> {
        tally.val_step = Some(step);
        if let Some(v) = self.evaluate(step, loss)? {
            // Diverged weights (a finite training loss, then an update too large): never
            // printed, logged or saved, as a non-finite training loss is not.
            if !v.is_finite() {
                self.end(End::Errored, step, loss, 1)?;
                return Err(runtime(format!(
                    "the validation loss is {v} after step {step}: the weights diverged; stopped without writing a checkpoint of them (try a lower --lr)"
                )));
            }
            self.sink.send(Event::Eval(events::Eval { phase: Phase::Train, step, val_loss: v }))?;
            tally.last_val = Some(v);
            report.say(format!("step {step}: val_loss={v}"));
        }
        Ok(())
    }

    /// Optimizer step `step` at learning rate `lr`: its batch (all its
    /// micro-batches), the update and its `step` event; [`Stepped::Skipped`]
    /// when it was skipped as non-finite (`--skip-nonfinite`), an error ending
    /// the run when it is non-finite otherwise; [`Stepped::Stopped`] when a
    /// signal stopped it between micro-batches (its windows put back).
    fn train_step(&mut self, step: u64, lr: f32, tally: &Tally, report: &Report) -> Result<Stepped> {
        let t0 = std::time::Instant::now();
        let before = self.sampler.state();
        let (b, new_epoch) = self.next_batch(self.cfg.model.context, tally.done, tally.last_loss)?;
        let Some(st) = self.train.step_unless(&b.tokens, &b.targets, lr, self.opts.stop.as_deref())? else {
            // Stopped between micro-batches: the step runs again, on the same windows, on --resume.
            match self.chat {
                Some(c) => self.sampler.restore_windows(&before, c.train.len() as u64),
                None => self.sampler.restore(&before, self.corpus.train.len()),
            }
            .map_err(runtime)?;
            report.say(format!("step {step}: stopped between its micro-batches; it runs again on --resume"));
            return Ok(Stepped::Stopped);
        };
        if new_epoch {
            self.sink.send(Event::Epoch(events::Epoch { step, epoch: self.sampler.epoch() }))?;
        }
        let wall_us = t0.elapsed().as_micros() as u64;
        if st.skipped && self.opts.skip_nonfinite {
            let skip = events::Skip { step, loss: st.loss, grad_norm: st.grad_norm, reason: "non-finite" };
            self.sink.send(Event::Skip(skip))?;
            let norm = st.grad_norm.map_or_else(|| "not computed".to_string(), |g| g.to_string());
            report.say(format!("step {step}: skipped (loss {}, gradient norm {norm}: not finite)", st.loss));
            return Ok(Stepped::Skipped);
        }
        // Split graphs skip a non-finite update; without --skip-nonfinite that ends the run too.
        if st.skipped || !st.loss.is_finite() || st.grad_norm.is_some_and(|g| !g.is_finite()) {
            self.end(End::Errored, step, st.loss, 1)?;
            let norm = st.grad_norm.map_or_else(String::new, |g| format!(", gradient norm {g}"));
            return Err(runtime(format!(
                "the loss or gradient became non-finite (loss {}{norm}) at step {step}; stopped without writing a checkpoint of these weights (try a lower --lr, or --skip-nonfinite)",
                st.loss
            )));
        }
        let tokens = self.cfg.tokens_per_step();
        let ev = events::Step { phase: Phase::Train, step, loss: st.loss, lr, tokens, wall_us, grad_norm: st.grad_norm };
        self.sink.send(Event::Step(ev))?;
        Ok(Stepped::Applied(st))
    }

    /// [`Self::save`] step `step`, or end the run saying which checkpoint is left.
    fn save_or_end(&mut self, step: u64, loss: f32) -> Result<()> {
        let Err(e) = self.save(step) else { return Ok(()) };
        let _ = self.end(End::Errored, step, loss, 1);
        let kept = match self.sink.latest() {
            Some(s) => format!("the last good checkpoint, step_{s}.gguf, is untouched"),
            None => "no checkpoint was written".to_string(),
        };
        Err(runtime(format!("{e}; {kept}")))
    }

    /// The error ending a run whose every step, up to `step`, was skipped as
    /// non-finite: it trained nothing, so it saves nothing.
    fn all_skipped(&mut self, step: u64) -> Error {
        let _ = self.end(End::Errored, step, f32::NAN, 1);
        let n = step - self.start_step;
        runtime(format!(
            "all {n} steps of this run were skipped as non-finite (--skip-nonfinite), so it trained nothing and saved no checkpoint (try a lower --lr)"
        ))
    }

    /// `run_end` (and so `loss.svg`) and the outcome of a loop that ran for `wall` seconds.
    fn finish(&mut self, tally: Tally, reason: End, wall: f64) -> Result<Outcome> {
        let (cfg, done) = (self.cfg, tally.done);
        let tps = ((done - self.start_step) * cfg.tokens_per_step()) as f64 / wall.max(1e-9);
        let sig = self.opts.stop.as_ref().map(|f| f.load(Ordering::SeqCst)).unwrap_or(0);
        let code = if reason == End::Interrupted { 128 + sig } else { 0 };
        let val_step = tally.last_val.and(tally.val_step);
        self.sink.send(Event::RunEnd(RunEnd {
            ended_at: now_rfc3339(),
            reason,
            final_step: done,
            final_loss: tally.last_loss,
            totals: Some(Totals { val_loss: tally.last_val, val_step, tokens_per_second: tps, wall_seconds: wall }),
            exit_code: code,
            device_used_bytes: self.memory.0.used_since_start(self.memory.1),
        }))?;
        Ok(Outcome {
            run_id: self.run.id.clone(),
            run_dir: self.run.path.clone(),
            steps: done,
            seed: cfg.seed,
            final_loss: tally.last_loss,
            val_loss: tally.last_val,
            val_step,
            reason,
            tokens_per_second: tps,
            wall_seconds: wall,
            chat: self.chat.map(ChatRun::event),
            donor: None,
            signal: if reason == End::Interrupted { sig } else { 0 },
        })
    }
}

/// The notes on a run's schedule and validation, said as it starts: a
/// warm-up as long as the run, a validation split too short or missing.
fn notes(l: &Loop<'_, '_>) {
    let cfg = l.cfg;
    if let Some(how) = l.opts.warmup_given.filter(|_| cfg.warmup_steps > cfg.steps && l.start_step == 0) {
        crate::note!(
            "note: {how} {} is more than --steps {}: the learning rate rises for the whole run and reaches --lr {:e} only at its last step",
            cfg.warmup_steps,
            cfg.steps,
            cfg.lr
        );
    } else if l.opts.warmup_given.is_none() && cfg.warmup_steps >= cfg.steps && cfg.steps >= 10 && l.start_step == 0 {
        // (Not for smoke runs of a few steps, where a decay means little.)
        crate::note!(
            "note: the default warm-up ({} steps) covers the whole run of {}: the learning rate rises to --lr {:e} at the last step and never decays (--warmup-steps {} warms up over a tenth)",
            cfg.warmup_steps,
            cfg.steps,
            cfg.lr,
            cfg.steps / 10
        );
    }
    if matches!(l.validation, Validation::Stream(s) if s.is_empty()) && !l.corpus.val.is_empty() {
        crate::note!(
            "note: the validation split ({} tokens) is shorter than one window of {} and its next token: no validation loss (a larger corpus or a smaller --context gives one)",
            l.corpus.val.len(),
            cfg.model.context
        );
    }
    if matches!(l.validation, Validation::Stream(_)) && l.corpus.val.is_empty() && l.start_step == 0 && cfg.eval_every > 0 {
        crate::note!("note: the corpus holds nothing out (no validation split, e.g. prepared with --val-fraction 0): no validation loss");
    }
    if matches!(&l.validation, Validation::Chat(b) if b.is_empty()) && l.start_step == 0 && cfg.eval_every > 0 {
        // (the conversations held out: both splits' less the training split's)
        match l.chat.map_or(0, |c| c.fit.conversations - c.train_fit.conversations) {
            0 => crate::note!(
                "note: the chat corpus holds too few conversations to keep any for validation: no validation loss (more conversations give one)"
            ),
            n => crate::note!(
                "note: {} held out for validation, but {} no trained token within the window of {} tokens (--context): no validation loss (a larger --context gives one)",
                if n == 1 { "1 conversation is".to_string() } else { format!("{n} conversations are") },
                if n == 1 { "it has" } else { "none has" },
                cfg.model.context
            ),
        }
    }
}

/// Run the loop from `l.start_step + 1` to `cfg.steps`.
pub fn run(mut l: Loop<'_, '_>) -> Result<Outcome> {
    let cfg = l.cfg;
    let sched = Cosine { lr: cfg.lr, min_lr: cfg.min_lr, warmup_steps: cfg.warmup_steps.min(cfg.steps), steps: cfg.steps };
    notes(&l);
    let report = Report::new(l.opts, cfg.steps, l.start_step);
    let mut tally = Tally { done: l.start_step, applied: 0, last_loss: f32::NAN, last_val: None, val_step: None };
    let stopped = |l: &Loop<'_, '_>| super::step::stopped(l.opts.stop.as_deref());
    if l.start_step == 0 && !stopped(&l) {
        l.eval_at(0, f32::NAN, &mut tally, &report)?;
    }
    let start = std::time::Instant::now();
    let mut reason = End::Completed;
    for step in l.start_step + 1..=cfg.steps {
        // A signal before this step (while the graphs were built, during step 0's validation):
        // the run ends at the step it has, saved, not after one more.
        if stopped(&l) {
            if l.sink.latest() != Some(tally.done) {
                l.save_or_end(tally.done, tally.last_loss)?;
            }
            reason = End::Interrupted;
            break;
        }
        // A skipped step still counts: its checkpoint holds the weights as they were.
        let st = match l.train_step(step, sched.at(step), &tally, &report)? {
            Stepped::Applied(st) => Some(st),
            Stepped::Skipped => None,
            Stepped::Stopped => {
                // Step `tally.done` is what a checkpoint can hold: save it unless it is saved.
                // No validation: a stop between micro-batches is meant to be quick
                // (`val_step` says which step the last `val_loss` is of).
                if l.sink.latest() != Some(tally.done) {
                    l.save_or_end(tally.done, tally.last_loss)?;
                }
                reason = End::Interrupted;
                break;
            }
        };
        tally.done = step;
        if let Some(st) = &st {
            (tally.applied, tally.last_loss) = (tally.applied + 1, st.loss);
            report.progress(
                step,
                st.loss,
                ((step - l.start_step) * cfg.tokens_per_step()) as f64 / start.elapsed().as_secs_f64().max(1e-9),
            );
            if cfg.log_every > 0 && (step % cfg.log_every == 0 || step == cfg.steps) {
                report.say(format!("step {step}: loss={}", st.loss));
            }
        }
        let stop = l.opts.stop.as_ref().map(|f| f.load(Ordering::SeqCst)).unwrap_or(0);
        let last = step == cfg.steps || stop != 0;
        if last && tally.applied == 0 && stop == 0 {
            if let Some(pb) = &report.bar {
                pb.finish_and_clear();
            }
            return Err(l.all_skipped(step));
        }
        if (st.is_some() && cfg.eval_every > 0 && step % cfg.eval_every == 0) || last {
            l.eval_at(step, tally.last_loss, &mut tally, &report)?;
        }
        if (cfg.save_every > 0 && step % cfg.save_every == 0) || last {
            l.save_or_end(step, tally.last_loss)?;
        }
        // Read again: a signal that came during this step's validation or
        // checkpoint makes it the last too (saved now if it is not).
        if stopped(&l) {
            if l.sink.latest() != Some(step) {
                l.save_or_end(step, tally.last_loss)?;
            }
            reason = End::Interrupted;
            break;
        }
    }
    if let Some(pb) = &report.bar {
        pb.finish_and_clear();
    }
    l.finish(tally, reason, start.elapsed().as_secs_f64())
}
