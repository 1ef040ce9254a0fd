//! Data-parallel training over several devices of one host (PyTorch DDP's
//! scheme): one full replica of weights and AdamW state per device, the global
//! batch split evenly, each replica's gradients of its weighted loss (its
//! share of the step's counted targets: `1/n` when every target counts)
//! accumulated over the step's micro-batches, summed across devices (ggml's
//! all-reduce where the backend has one, a host-side sum otherwise), then the
//! same update on every replica. The weights stay equal, so checkpoints,
//! resume state and validation come from the first replica.

use super::batches::target_weights;
use super::step::{check_chunks, stopped, StepStats, TrainStep};
use crate::error::{runtime, Result};
use ggml_rs::comm::{AllReduceKind, Comm};
use ggml_rs::{Graph, Tensor};
use std::sync::atomic::AtomicI32;

/// A training step on one device, or on several in data parallel.
pub enum Trainer<'a> {
    /// Boxed: a `TrainStep` is large and a run holds one `Trainer` for its whole life.
    Single(Box<TrainStep<'a>>),
    Parallel(DataParallel<'a>),
}

impl<'a> Trainer<'a> {
    /// One optimizer step on `tokens`/`targets` at learning rate `lr`: the
    /// step's whole batch, sequence-major, as micro-batches of `--batch`
    /// sequences one after another, each split evenly over the replicas. Every
    /// slice is weighted by its counted targets ([`target_weights`]), so the
    /// step equals one batch holding them all. The loss before the update.
    ///
    /// # Errors
    /// A runtime error when the batch is not whole micro-batches; as
    /// [`step_weighted`](Self::step_weighted).
    pub fn step(&mut self, tokens: &[i32], targets: &[i32], lr: f32) -> Result<StepStats> {
        Ok(self.step_unless(tokens, targets, lr, None)?.expect("no stop flag, no early end"))
    }

    /// [`step`](Self::step) that gives up between micro-batches once `stop`
    /// holds a signal's number: `None` then, nothing applied
    /// ([`TrainStep::step_unless`]).
    ///
    /// # Errors
    /// As [`step`](Self::step).
    pub fn step_unless(&mut self, tokens: &[i32], targets: &[i32], lr: f32, stop: Option<&AtomicI32>) -> Result<Option<StepStats>> {
        let (chunk, vocab) = (self.lead().chunk(), self.lead().vocab());
        let chunks = tokens.len() / chunk.max(1);
        if chunks == 0 || chunks * chunk != tokens.len() || targets.len() != tokens.len() {
            return Err(runtime(format!("a batch of {} tokens is not whole micro-batches of {chunk}", tokens.len())));
        }
        let weights = target_weights(targets, chunks, vocab);
        match self {
            Trainer::Single(s) => Ok(s.step_unless(tokens, targets, &weights, lr, stop)?),
            Trainer::Parallel(p) => p.step(tokens, targets, &weights, lr, stop),
        }
    }

    /// [`step`](Self::step) with the weights given: one per slice of
    /// [`TrainStep::chunk`] tokens, in order (micro-batch after micro-batch;
    /// within one, replica after replica); the step's loss is
    /// `Σ weights[i] · loss_i`, and its gradient is what the update applies.
    ///
    /// # Errors
    /// A runtime error when the slices do not match the weights, or (several
    /// replicas) are not whole micro-batches; a device error from ggml.
    pub fn step_weighted(&mut self, tokens: &[i32], targets: &[i32], weights: &[f32], lr: f32) -> Result<StepStats> {
        match self {
            Trainer::Single(s) => Ok(s.step(tokens, targets, weights, lr)?),
            Trainer::Parallel(p) => Ok(p.step(tokens, targets, weights, lr, None)?.expect("no stop flag, no early end")),
        }
    }

    fn lead(&self) -> &TrainStep<'a> {
        match self {
            Trainer::Single(s) => s,
            Trainer::Parallel(p) => &p.replicas[0].step,
        }
    }

    /// The first (or only) replica's step.
    pub fn first(&mut self) -> &mut TrainStep<'a> {
        match self {
            Trainer::Single(s) => s,
            Trainer::Parallel(p) => &mut p.replicas[0].step,
        }
    }

    /// The graph of the first replica (flow.json, placements).
    pub fn graph(&self) -> &Graph<'a> {
        self.lead().graph()
    }

    /// Optimizer steps taken.
    pub fn step_count(&mut self) -> u64 {
        self.first().optimizer().step_count()
    }

    /// Which all-reduce sums the replicas' gradients (`none` for one device or a host-side sum).
    pub fn allreduce_kind(&self) -> AllReduceKind {
        match self {
            Trainer::Single(_) => AllReduceKind::None,
            Trainer::Parallel(p) => p.allreduce_kind(),
        }
    }

    /// Set the optimizer step count of every replica (resuming).
    pub fn set_step_count(&mut self, t: u64) {
        match self {
            Trainer::Single(s) => s.optimizer().set_step_count(t),
            Trainer::Parallel(p) => p.replicas.iter_mut().for_each(|r| r.step.optimizer().set_step_count(t)),
        }
    }
}

/// One replica: its step graphs and its gradient accumulators (in the order of
/// the trainable parameters).
pub struct Replica<'a> {
    pub step: TrainStep<'a>,
    pub accumulators: Vec<Tensor<'a>>,
}

/// Replicas on several devices and how their gradients are summed.
pub struct DataParallel<'a> {
    replicas: Vec<Replica<'a>>,
    comm: Option<Comm>,
    kind: AllReduceKind,
    /// Seconds spent in the last step's all-reduce.
    pub last_allreduce_s: f64,
}

impl<'a> DataParallel<'a> {
    /// Replicas whose steps were built in split mode (with accumulators);
    /// `comm`, when the devices have one.
    pub fn new(replicas: Vec<Replica<'a>>, comm: Option<Comm>, kind: AllReduceKind) -> DataParallel<'a> {
        let kind = if comm.is_some() { kind } else { AllReduceKind::None };
        DataParallel { replicas, comm, kind, last_allreduce_s: 0.0 }
    }

    /// Which all-reduce sums the gradients (`none`: on the host).
    pub fn allreduce_kind(&self) -> AllReduceKind {
        self.kind
    }

    /// Number of replicas.
    pub fn len(&self) -> usize {
        self.replicas.len()
    }

    /// Whether there is no replica (never, for a built `DataParallel`).
    pub fn is_empty(&self) -> bool {
        self.replicas.is_empty()
    }

    /// Every micro-batch's slices through the replicas' backward graphs (each
    /// replica accumulating its own), then one all-reduce and the same update
    /// on every replica; skipped when the loss or a gradient is not finite.
    /// `None` when `stop` ended it between micro-batches ([`TrainStep::step_unless`]).
    fn step(&mut self, tokens: &[i32], targets: &[i32], weights: &[f32], lr: f32, stop: Option<&AtomicI32>) -> Result<Option<StepStats>> {
        let (n, chunk) = (self.replicas.len(), self.replicas[0].step.chunk());
        check_chunks(tokens, targets, weights, chunk)?;
        if weights.len() % n != 0 {
            return Err(runtime(format!("{} slices of a batch do not split over {n} replicas", weights.len())));
        }
        let (mut loss, mut finite) = (0f64, true);
        for micro in 0..weights.len() / n {
            if micro > 0 && stopped(stop) {
                return Ok(None);
            }
            for (r, rep) in self.replicas.iter_mut().enumerate() {
                let c = micro * n + r;
                let at = c * chunk..(c + 1) * chunk;
                rep.step.start_backward(&tokens[at.clone()], &targets[at], weights[c], micro == 0)?;
            }
            for (r, rep) in self.replicas.iter_mut().enumerate() {
                loss += weights[micro * n + r] as f64 * rep.step.finish_backward()? as f64;
            }
        }
        for rep in &self.replicas {
            finite &= rep.step.sumsq()?.is_finite();
        }
        let loss = loss as f32;
        if !finite || !loss.is_finite() {
            return Ok(Some(StepStats { loss, grad_norm: None, skipped: true }));
        }
        let t0 = std::time::Instant::now();
        self.allreduce()?;
        self.last_allreduce_s = t0.elapsed().as_secs_f64();
        for r in &mut self.replicas {
            r.step.start_update(lr)?;
        }
        for r in &mut self.replicas {
            r.step.finish_update();
        }
        let grad_norm = self.replicas[0].step.optimizer().grad_norm().map(|g| g.scalar()).transpose()?;
        Ok(Some(StepStats { loss, grad_norm, skipped: false }))
    }

    /// Sum every parameter's accumulator over the replicas, in place.
    fn allreduce(&mut self) -> Result<()> {
        let n_params = self.replicas[0].accumulators.len();
        for i in 0..n_params {
            let ts: Vec<Tensor<'a>> = self.replicas.iter().map(|r| r.accumulators[i]).collect();
            if let Some(c) = &self.comm {
                if c.allreduce(&ts)? {
                    continue;
                }
            }
            host_sum(&ts)?;
        }
        Ok(())
    }
}

/// `tensors[k] ← Σ_j tensors[j]` for every k, through host memory, in replica
/// order (so the sum does not depend on timing).
fn host_sum(tensors: &[Tensor<'_>]) -> Result<()> {
    let mut sum = tensors[0].read::<f32>()?;
    for t in &tensors[1..] {
        let v = t.read::<f32>()?;
        if v.len() != sum.len() {
            return Err(runtime(format!("replica gradients of {} differ in size", t.name())));
        }
        sum.iter_mut().zip(v).for_each(|(s, x)| *s += x);
    }
    for t in tensors {
        t.write(&sum)?;
    }
    Ok(())
}
