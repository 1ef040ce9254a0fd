//! Optimizers built into the training graph: AdamW with parameter groups and
//! SGD, both with optional global-norm gradient clipping.
//!
//! The update runs on the device as part of the graph (`ggml_opt_step_adamw` /
//! `ggml_opt_step_sgd`, in place on each parameter) after the backward pass.
//! Hyper-parameters are small input tensors written before each step, so the
//! learning rate can follow a schedule without rebuilding the graph.
//!
//! A step is [`Optimizer::prepare_step`], [`Graph::compute`],
//! [`Optimizer::finish_step`] (or [`Optimizer::step`], all three): a graph
//! with an optimizer refuses a compute that is not of a prepared step, once.

use crate::context::{Context, Tensor};
use crate::dtype::DType;
use crate::error::{Error, Result};
use crate::graph::Graph;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;

/// AdamW hyper-parameters, with PyTorch's names and defaults
/// (`torch.optim.AdamW`: lr 1e-3, betas (0.9, 0.999), eps 1e-8, weight_decay 0.01).
///
/// The learning rate of each step is the one given to
/// [`Optimizer::prepare_step`], which wins over [`lr`](Self::lr) (so that a
/// schedule can change it without rebuilding the graph).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AdamWConfig {
    /// The base learning rate, checked to be finite and ≥ 0 and otherwise only
    /// kept for the caller (a schedule's peak, say): the steps use the rate
    /// passed to [`Optimizer::prepare_step`], not this one.
    pub lr: f32,
    /// The decay rates (β₁, β₂) of the first and second moment averages, each in `[0, 1)`.
    pub betas: (f32, f32),
    /// Added to `√v̂` in the update's denominator; > 0.
    pub eps: f32,
    /// Decoupled weight decay, checked to be ≥ 0 and otherwise only kept for
    /// the caller: the steps use each [`ParamGroup::weight_decay`], not this one.
    pub weight_decay: f32,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        AdamWConfig { lr: 1e-3, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.01 }
    }
}

/// Parameters that share a weight decay (e.g. matrices decayed, gains and
/// biases not, as nanoGPT's `configure_optimizers` does).
#[derive(Clone, Debug)]
pub struct ParamGroup<'a> {
    /// The parameters (tensors flagged by [`Context::set_param`], each with a gradient).
    pub params: Vec<Tensor<'a>>,
    /// Decoupled weight decay for these parameters (`w ← w·(1 − lr·wd)` each step), ≥ 0.
    pub weight_decay: f32,
}

/// AdamW moment tensors `m` and `v` for a list of parameters. They live in a
/// context the caller allocates on the training device, so they persist across
/// steps and can be saved and restored for resuming.
pub struct AdamWState<'s> {
    entries: Vec<(Tensor<'s>, Tensor<'s>, Tensor<'s>)>,
}

impl<'s> AdamWState<'s> {
    /// Create `m` and `v` (f32, each parameter's shape, named `<param>.m` /
    /// `<param>.v` when that fits) in `ctx`. Allocate `ctx` afterwards; moments
    /// start at zero.
    pub fn new(ctx: &'s Context, params: &[Tensor<'s>]) -> Result<AdamWState<'s>> {
        let mut entries = Vec::with_capacity(params.len());
        for (i, &p) in params.iter().enumerate() {
            let m = ctx.new_tensor(DType::F32, &p.shape())?;
            let v = ctx.new_tensor(DType::F32, &p.shape())?;
            let base = p.name();
            let (mn, vn) = if base.len() + 2 < 64 && !base.is_empty() {
                (format!("{base}.m"), format!("{base}.v"))
            } else {
                (format!("adamw.{i}.m"), format!("adamw.{i}.v"))
            };
            m.set_name(&mn)?;
            v.set_name(&vn)?;
            entries.push((p, m, v));
        }
        Ok(AdamWState { entries })
    }

    /// `(param, m, v)` for every parameter, in creation order.
    pub fn entries(&self) -> &[(Tensor<'s>, Tensor<'s>, Tensor<'s>)] {
        &self.entries
    }

    fn moments(&self, p: Tensor<'_>) -> Option<(Tensor<'s>, Tensor<'s>)> {
        self.entries.iter().find(|(q, _, _)| q.raw() == p.raw()).map(|&(_, m, v)| (m, v))
    }
}

enum Kind {
    AdamW(AdamWConfig),
    Sgd,
}

/// An optimizer attached to one training graph.
pub struct Optimizer<'a> {
    kind: Kind,
    /// (weight decay, hyper-parameter input) per group.
    groups: Vec<(f32, Tensor<'a>)>,
    /// (max-norm input, max norm) when clipping.
    clip: Option<(Tensor<'a>, f32)>,
    grad_norm: Option<Tensor<'a>>,
    t: u64,
    /// Where the step stands, shared with the graph that runs it.
    gate: Arc<StepGate>,
}

/// Where an optimizer's step stands, shared with the graph that holds its
/// nodes: [`Graph::compute`] runs it only once prepared, and once only, so
/// that neither unset hyper-parameters (zeros: a 0/0 update, NaN weights and
/// moments) nor a repeated update (same bias correction, uncounted) can pass.
#[derive(Debug)]
pub(crate) struct StepGate(AtomicU8, Vec<usize>);

const IDLE: u8 = 0;
const PREPARED: u8 = 1;
const RAN: u8 = 2;

impl StepGate {
    /// Ok when the step is prepared and has not run.
    pub(crate) fn check(&self) -> Result<()> {
        match self.0.load(Ordering::Acquire) {
            PREPARED => Ok(()),
            IDLE => Err(Error::op(
                "optimizer",
                "no step is prepared: call prepare_step(lr) before each compute of a graph with an optimizer (its update would read unset hyper-parameters)",
            )),
            _ => Err(Error::op(
                "optimizer",
                "the prepared step already ran: call finish_step, then prepare_step, before computing again (the same update would be applied twice)",
            )),
        }
    }

    /// The graph ran the prepared step.
    pub(crate) fn ran(&self) {
        self.0.store(RAN, Ordering::Release);
    }

    /// Whether this optimizer steps the parameter at address `p`.
    pub(crate) fn steps(&self, p: usize) -> bool {
        self.1.contains(&p)
    }
}

impl<'a> Optimizer<'a> {
    /// Attach AdamW to `graph`, whose backward must be built: for every group and
    /// parameter, an `opt_step_adamw` node using the moments in `state`. With
    /// `grad_clip = Some(max_norm)`, gradients are first scaled by
    /// `min(1, max_norm / (‖g‖ + 1e-6))` where ‖g‖ is the global L2 norm over all
    /// groups (as `torch.nn.utils.clip_grad_norm_`).
    ///
    /// # Errors
    /// [`Error::Backward`] when a parameter has no gradient (it does not
    /// influence the loss) or no moments in `state`.
    pub fn adamw(
        ctx: &'a Context,
        graph: &mut Graph<'a>,
        state: &AdamWState<'a>,
        groups: &[ParamGroup<'a>],
        cfg: AdamWConfig,
        grad_clip: Option<f32>,
    ) -> Result<Optimizer<'a>> {
        check_cfg(&cfg)?;
        let grads = collect_grads(graph, groups)?;
        Self::build(ctx, graph, Some(state), groups, grads, Kind::AdamW(cfg), grad_clip)
    }

    /// Attach AdamW to `update`, a separate graph, reading gradients from
    /// accumulators (see [`Graph::build_backward_accumulate`]): allocated leaf
    /// tensors in the same order as the parameters of `groups`. Computing the
    /// backward graph alone then gives loss and gradients without touching the
    /// weights, so a caller can inspect them (e.g. skip a non-finite step) before
    /// computing `update`.
    pub fn adamw_accumulated(
        ctx: &'a Context,
        update: &mut Graph<'a>,
        grads: &[Tensor<'a>],
        state: &AdamWState<'a>,
        groups: &[ParamGroup<'a>],
        cfg: AdamWConfig,
        grad_clip: Option<f32>,
    ) -> Result<Optimizer<'a>> {
        check_cfg(&cfg)?;
        let n: usize = groups.iter().map(|g| g.params.len()).sum();
        if grads.len() != n {
            return Err(Error::Backward(format!("{} gradients for {n} parameters", grads.len())));
        }
        for g in grads {
            if !g.is_allocated() || g.op() != ggml_sys::GGML_OP_NONE {
                return Err(Error::Backward(format!("gradient accumulator {:?} must be an allocated leaf", g.name())));
            }
        }
        Self::build(ctx, update, Some(state), groups, grads.to_vec(), Kind::AdamW(cfg), grad_clip)
    }

    /// Attach plain SGD with decoupled weight decay (`w ← w(1 − lr·wd) − lr·g`).
    pub fn sgd(ctx: &'a Context, graph: &mut Graph<'a>, groups: &[ParamGroup<'a>], grad_clip: Option<f32>) -> Result<Optimizer<'a>> {
        let grads = collect_grads(graph, groups)?;
        Self::build(ctx, graph, None, groups, grads, Kind::Sgd, grad_clip)
    }

    fn build(
        ctx: &'a Context,
        graph: &mut Graph<'a>,
        state: Option<&AdamWState<'a>>,
        groups: &[ParamGroup<'a>],
        grads: Vec<Tensor<'a>>,
        kind: Kind,
        grad_clip: Option<f32>,
    ) -> Result<Optimizer<'a>> {
        if let Some(c) = grad_clip {
            if !(c.is_finite() && c > 0.0) {
                return Err(Error::op("optimizer", format!("grad_clip = {c} must be positive")));
            }
        }
        // A parameter listed twice would take two steps each step.
        let mut seen = std::collections::HashSet::new();
        if let Some(p) = groups.iter().flat_map(|g| &g.params).find(|p| !seen.insert(p.raw())) {
            return Err(Error::Backward(format!(
                "parameter {:?} is listed twice in the groups: it would be updated twice a step",
                p.name()
            )));
        }
        // So would one that another optimizer of this graph steps.
        if let Some(p) = groups.iter().flat_map(|g| &g.params).find(|p| graph.steps_param(p.raw() as usize)) {
            return Err(Error::Backward(format!(
                "parameter {:?} is stepped by another optimizer of this graph: it would be updated twice a step",
                p.name()
            )));
        }
        if let Some(g) = groups.iter().find(|g| !(g.weight_decay.is_finite() && g.weight_decay >= 0.0)) {
            return Err(Error::op("optimizer", format!("weight_decay = {} must be finite and ≥ 0", g.weight_decay)));
        }
        if let (Kind::AdamW(_), Some(st)) = (&kind, state) {
            if let Some(p) = groups.iter().flat_map(|g| &g.params).find(|&&p| st.moments(p).is_none()) {
                return Err(Error::Backward(format!("no AdamW moments for {:?}", p.name())));
            }
        }
        // Nothing joins the graph until every update is built: a refusal leaves it as it was.
        let mut steps = Vec::new();
        // Global gradient norm and clip coefficient, computed in the graph.
        let mut clip = None;
        let mut grad_norm = None;
        let mut coef = None;
        if let Some(max_norm) = grad_clip {
            let mut sumsq: Option<Tensor<'a>> = None;
            for &g in &grads {
                let s = ctx.sum(ctx.sqr(g)?)?;
                sumsq = Some(match sumsq {
                    None => s,
                    Some(acc) => ctx.add(acc, s)?,
                });
            }
            let Some(sumsq) = sumsq else { return Err(Error::Backward("no parameters to optimize".into())) };
            let norm = ctx.sqrt(sumsq)?.set_name("grad_norm")?.set_output();
            let max_in = ctx.new_tensor_1d(DType::F32, 1)?.set_name("grad_clip")?.set_input();
            let c = ctx.clamp(ctx.div(max_in, ctx.scale_bias(norm, 1.0, 1e-6)?)?, 0.0, 1.0)?;
            clip = Some((max_in, max_norm));
            grad_norm = Some(norm);
            coef = Some(c);
        }
        let mut out_groups = Vec::new();
        let mut k = 0;
        for (gi, g) in groups.iter().enumerate() {
            let n_hp = match kind {
                Kind::AdamW(_) => 7,
                Kind::Sgd => 2,
            };
            let hp = ctx.new_tensor_1d(DType::F32, n_hp)?.set_name(&format!("opt.hp.{gi}"))?.set_input();
            for &p in &g.params {
                let mut gr = grads[k];
                k += 1;
                if let Some(c) = coef {
                    gr = ctx.mul(gr, c)?;
                }
                let step = match (&kind, state) {
                    (Kind::AdamW(_), Some(st)) => {
                        let (m, v) = st.moments(p).ok_or_else(|| Error::Backward(format!("no AdamW moments for {:?}", p.name())))?;
                        ctx.opt_step_adamw(p, gr, m, v, hp)?
                    }
                    _ => ctx.opt_step_sgd(p, gr, hp)?,
                };
                steps.push(step);
            }
            out_groups.push((g.weight_decay, hp));
        }
        graph.expand_all(&steps)?;
        let gate = Arc::new(StepGate(AtomicU8::new(IDLE), seen.into_iter().map(|p| p as usize).collect()));
        graph.add_step_gate(gate.clone());
        Ok(Optimizer { kind, groups: out_groups, clip, grad_norm, t: 0, gate })
    }

    /// Write the hyper-parameters of the next step (step `t+1`, bias correction
    /// `1/(1−βᵗ⁺¹)`) with learning rate `lr`, which is the rate the step uses
    /// (not [`AdamWConfig::lr`]). Call after allocating the graph and before
    /// each compute, then [`finish_step`](Self::finish_step) once the step ran.
    ///
    /// # Errors
    /// [`Error::Op`] for a negative or non-finite `lr`, or when the step
    /// prepared before ran and was not finished (without `finish_step` the step
    /// count, and so the bias correction, would stay at step 1 forever); errors
    /// of writing the hyper-parameter inputs (graph not allocated). A step
    /// prepared and not run (its compute failed, say) is prepared again.
    pub fn prepare_step(&mut self, lr: f32) -> Result<()> {
        if !lr.is_finite() || lr < 0.0 {
            return Err(Error::op("optimizer", format!("learning rate {lr} must be finite and ≥ 0")));
        }
        if self.gate.0.load(Ordering::Acquire) == RAN {
            return Err(Error::op(
                "optimizer",
                format!("step {} ran but was not finished: call finish_step after computing each step", self.t.saturating_add(1)),
            ));
        }
        // past i32::MAX steps β^t is 0 in f64 already: the bias corrections are 1
        let t = i32::try_from(self.t.saturating_add(1)).unwrap_or(i32::MAX);
        for &(wd, hp) in &self.groups {
            match self.kind {
                Kind::AdamW(c) => {
                    let (b1, b2) = c.betas;
                    let h1 = 1.0 / (1.0 - (b1 as f64).powi(t));
                    let h2 = 1.0 / (1.0 - (b2 as f64).powi(t));
                    hp.write(&[lr, b1, b2, c.eps, wd, h1 as f32, h2 as f32])?;
                }
                Kind::Sgd => hp.write(&[lr, wd])?,
            }
        }
        if let Some((input, max_norm)) = self.clip {
            input.write(&[max_norm])?;
        }
        self.gate.0.store(PREPARED, Ordering::Release);
        Ok(())
    }

    /// Close the step prepared by [`prepare_step`](Self::prepare_step): when
    /// the graph ran it, the step count goes up by one; a step prepared and
    /// not run is dropped, uncounted. The next step can then be prepared.
    pub fn finish_step(&mut self) {
        if self.gate.0.swap(IDLE, Ordering::AcqRel) == RAN {
            self.t = self.t.saturating_add(1);
        }
    }

    /// One whole step of a graph this optimizer is attached to:
    /// [`prepare_step`](Self::prepare_step) with `lr`, [`Graph::compute`],
    /// [`finish_step`](Self::finish_step). On an error of the compute the
    /// step is not counted and can be tried again (a check that failed ran
    /// nothing; a backend's failure may have updated the parameters in part:
    /// read the error before going on).
    ///
    /// # Errors
    /// [`Error::Op`] for a graph that does not hold this optimizer's nodes;
    /// those of `prepare_step` and of `compute`.
    pub fn step(&mut self, graph: &mut Graph<'a>, lr: f32) -> Result<()> {
        if !graph.has_step_gate(&self.gate) {
            return Err(Error::op("optimizer", "step: the graph is not the one this optimizer was attached to"));
        }
        self.prepare_step(lr)?;
        graph.compute()?;
        self.finish_step();
        Ok(())
    }

    /// Steps taken so far (the `t` of bias correction).
    pub fn step_count(&self) -> u64 {
        self.t
    }

    /// Set the step count, when resuming from saved moments. A step prepared
    /// and not run is dropped (its bias correction was of the old count):
    /// prepare it again.
    pub fn set_step_count(&mut self, t: u64) {
        self.t = t;
        let _ = self.gate.0.compare_exchange(PREPARED, IDLE, Ordering::AcqRel, Ordering::Acquire);
    }

    /// The global gradient norm before clipping (readable after compute), when clipping.
    pub fn grad_norm(&self) -> Option<Tensor<'a>> {
        self.grad_norm
    }
}

/// The gradient of every parameter of `groups`, in order.
fn collect_grads<'a>(graph: &Graph<'a>, groups: &[ParamGroup<'a>]) -> Result<Vec<Tensor<'a>>> {
    let mut grads = Vec::new();
    for g in groups {
        for &p in &g.params {
            let gr = graph.grad(p).ok_or_else(|| {
                Error::Backward(format!(
                    "parameter {:?} has no gradient: it does not influence the loss (or backward was not built)",
                    p.name()
                ))
            })?;
            grads.push(gr);
        }
    }
    Ok(grads)
}

fn check_cfg(c: &AdamWConfig) -> Result<()> {
    let (b1, b2) = c.betas;
    let ok = c.lr.is_finite()
        && c.lr >= 0.0
        && (0.0..1.0).contains(&b1)
        && (0.0..1.0).contains(&b2)
        && c.eps > 0.0
        && c.weight_decay.is_finite()
        && c.weight_decay >= 0.0;
    if !ok {
        return Err(Error::op("adamw", format!("invalid hyper-parameters {c:?} (need lr ≥ 0, 0 ≤ betas < 1, eps > 0, weight_decay ≥ 0)")));
    }
    Ok(())
}
