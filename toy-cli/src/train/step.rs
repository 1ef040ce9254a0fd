//! The compute graphs of training: one step (forward, cross-entropy, backward,
//! clipping, AdamW) and the validation loss, each built and allocated once;
//! and [`with_loaded`], a checkpoint's weights on a device for the graphs of
//! `eval`, `generate` and `debug`.

use crate::model::attention::Attention;
use crate::model::operand::cast_once;
use crate::model::{Batch, Param, Weights};
use ggml_rs::optim::{AdamWConfig, AdamWState, Optimizer, ParamGroup};
use ggml_rs::{Backend, Context, DType, Graph, MulMatGrad, Result, Tensor};
use std::sync::atomic::AtomicI32;

/// Constants every graph of a run shares, in a context allocated on the device.
pub struct Consts<'c> {
    /// i32 `[T·B_max]` = 0..T repeated B_max times: the position of every token
    /// of a batch, sequence-major (batches of B ≤ B_max take a prefix view).
    pub pos: Tensor<'c>,
    /// f32 `[T, T]`, 0 where key ≤ query, −∞ above: the reference attention's
    /// mask, `None` for the fused attention, which masks by position (a
    /// context of 60,000 made it 14 GB).
    pub mask: Option<Tensor<'c>>,
    /// How the graphs built on these constants compute attention (set by
    /// [`Consts::with_attention`]: the mask exists for the reference alone).
    attention: Attention,
    /// The window `T` of the positions.
    t: usize,
}

impl<'c> Consts<'c> {
    /// The inputs of a forward pass over `b` sequences of `t` tokens.
    pub fn batch<'a>(&self, ctx: &'a Context, tokens: Tensor<'a>, t: usize, b: usize) -> Result<Batch<'a>>
    where
        'c: 'a,
    {
        let pos = ctx.view(self.pos, &[(t * b) as i64], &[], 0)?;
        // A window shorter than the constants' (a decoder's prompt): the top-left of the
        // mask, made contiguous (the masked softmax takes no strided mask).
        let mask = match self.mask {
            Some(m) if (t as i64) < m.ne()[0] => Some(ctx.cont(ctx.view(m, &[t as i64, t as i64], &[m.nb()[1]], 0)?)?),
            m => m,
        };
        Ok(Batch { tokens, pos, mask, t, b, attention: self.attention, cache: None })
    }

    /// Create (unallocated) constants for batches of up to `b_max` sequences of
    /// `t` tokens, attention computed the reference way ([`Consts::with_attention`]).
    pub fn new(ctx: &'c Context, t: usize, b_max: usize) -> Result<Consts<'c>> {
        Self::with_attention(ctx, t, b_max, Default::default())
    }

    /// As [`Consts::new`], for graphs whose attention is computed as `attention`
    /// says: the `[T, T]` mask only for the reference.
    pub fn with_attention(ctx: &'c Context, t: usize, b_max: usize, attention: Attention) -> Result<Consts<'c>> {
        let mask = match attention {
            Attention::Reference => Some(ctx.new_tensor_2d(DType::F32, t as i64, t as i64)?.set_name("causal_mask")?),
            Attention::Fused => None,
        };
        let t = t.max(1);
        Ok(Consts { pos: ctx.new_tensor_1d(DType::I32, (t * b_max.max(1)) as i64)?.set_name("pos")?, mask, attention, t })
    }

    /// How the graphs built on these constants compute attention.
    pub fn attention(&self) -> Attention {
        self.attention
    }

    /// Write the values, once the context is allocated: the mask a few rows
    /// at a time, without a host copy of its `T²` values.
    pub fn fill(&self) -> Result<()> {
        let (t, n) = (self.t, self.pos.ne()[0] as usize);
        self.pos.write(&(0..n).map(|i| (i % t) as i32).collect::<Vec<i32>>())?;
        let Some(mask) = self.mask else {
            return Ok(());
        };
        let t = mask.ne()[0] as usize;
        let rows = (1usize << 20).div_ceil(t.max(1)); // ~4 MB a write
        for r0 in (0..t).step_by(rows) {
            let r1 = (r0 + rows).min(t);
            // row r (a query) holds its keys j: 0 where j ≤ r, else −∞
            let block: Vec<f32> = (r0 * t..r1 * t).map(|i| if i % t <= i / t { 0.0 } else { f32::NEG_INFINITY }).collect();
            mask.write_range(r0 * t, &block)?;
        }
        Ok(())
    }
}

/// Inputs and loss of a forward pass with cross-entropy.
struct LossGraph<'a> {
    tokens: Tensor<'a>,
    /// i32 `[T·B]`: the next token of every position, −1 where it does not count.
    targets: Tensor<'a>,
    logits: Tensor<'a>,
    loss: Tensor<'a>,
}

/// The head's rows are padded to a multiple of this when training (llm.c pads
/// GPT-2's 50257 to 50304): with an odd leading dimension cuBLAS runs align-1
/// kernels, 10× slower at GPT-2 124M.
pub const HEAD_ROWS_MULTIPLE: i64 = 128;

/// The loss of a batch of `b` sequences of `t` tokens. In a `training` graph
/// an f32 head runs on `[d, Vp]`, its rows zero-padded to
/// [`HEAD_ROWS_MULTIPLE`], and the loss ignores the padding columns (the
/// logits are then `[Vp, T·B]`); with [`Autocast::logits`](crate::model::weights::Autocast::logits)
/// the logits are bf16.
fn loss_graph<'a>(ctx: &'a Context, w: &Weights<'a>, c: &Consts<'a>, t: usize, b: usize, training: bool) -> Result<LossGraph<'a>> {
    let v = w.config().vocab as i64;
    let n = (t * b) as i64;
    let tokens = ctx.new_tensor_1d(DType::I32, n)?.set_name("tokens")?.set_input();
    let targets = ctx.new_tensor_1d(DType::I32, n)?.set_name("targets")?.set_input();
    let h = w.hidden(ctx, c.batch(ctx, tokens, t, b)?)?;
    let h = ctx.reshape(h, &[h.ne()[0], n])?; // [d, T, B] as [d, T·B]: the head is one product, not B
    let head = w.head()?; // [d, V]
    let pad_head = training && head.dtype() == DType::F32; // a frozen base's head (LoRA) is read as it is
    let vp = if pad_head { (v + HEAD_ROWS_MULTIPLE - 1) / HEAD_ROWS_MULTIPLE * HEAD_ROWS_MULTIPLE } else { v };
    let head = match vp > v {
        // a trained head's padded copy cast to bf16 once for both its products under autocast's
        // weights (hoisted with the other casts: Graph::hoist_param_casts)
        true => {
            let padded = ctx.pad(head, [0, vp - v, 0, 0])?;
            if cast_once(head, w.autocast()) {
                ctx.cast(padded, DType::BF16)?
            } else {
                padded
            }
        }
        false => w.operand(ctx, head)?,
    }; // [d, Vp]
    let bf16 = training && w.autocast().logits && matches!(head.dtype(), DType::F32 | DType::BF16);
    let logits = if bf16 { ctx.mul_mat_bf16(head, h)? } else { ctx.mul_mat(head, h)? }.set_name("logits")?; // [Vp, T·B]
    let loss = ctx.cross_entropy_loss_ids_ext(logits, targets, v)?.set_name("loss")?.set_output(); // [1]
    Ok(LossGraph { tokens, targets, logits, loss })
}

impl LossGraph<'_> {
    fn write(&self, tokens: &[i32], targets: &[i32]) -> Result<()> {
        self.tokens.write(tokens)?;
        self.targets.write(targets)
    }
}

/// Capacity (tensors, graph nodes) for a model of `n_layers` layers, with room for backward.
pub fn capacity(n_layers: usize) -> usize {
    4096 + 2048 * n_layers
}

/// The largest gradient branch (values a node) that a training step's graph
/// flags for a side stream (`Graph::flag_side_branches`, toy-rs patch 0060):
/// LoRA's adapter gradients (`[in, r]`, `[r, out]`), which alone fill a small
/// part of a GPU, and the weight gradients of models that small; not those of
/// SmolLM2-135M or GPT-2 124M. `TOY_CUDA_0060_MAX` sets it for A/B runs.
fn side_branch_max() -> usize {
    std::env::var("TOY_CUDA_0060_MAX").ok().and_then(|v| v.parse().ok()).unwrap_or(1 << 16)
}

/// Optimizer settings of a run.
#[derive(Clone, Copy, Debug)]
pub struct OptSettings {
    pub adamw: AdamWConfig,
    /// Global-norm clip (None: no clipping).
    pub grad_clip: Option<f32>,
}

/// The training step: one graph doing forward, backward and update, or (split,
/// when gradient accumulators are given) a backward graph that adds each
/// micro-batch's weighted gradients into the accumulators and a separate update
/// graph that reads them once per optimizer step.
pub struct TrainStep<'a> {
    lg: LossGraph<'a>,
    /// The split graphs: the update (declared before `graph`, whose gradients it
    /// reads), the sum of the squared accumulated gradients, and the f32 `[1]`
    /// input that weights the micro-batch's loss in the backward.
    split: Option<Split<'a>>,
    graph: Graph<'a>,
    opt: Optimizer<'a>,
    /// Tokens of one call of the graph (`T·B` of its batches).
    chunk: usize,
    /// Vocabulary: targets in `[0, vocab)` count in the loss.
    vocab: usize,
}

/// What the split graphs add to a [`TrainStep`].
struct Split<'a> {
    update: Graph<'a>,
    sumsq: Tensor<'a>,
    weight: Tensor<'a>,
}

/// Per-step numbers read back from the device.
#[derive(Clone, Copy, Debug)]
pub struct StepStats {
    /// Loss before this step's update.
    pub loss: f32,
    /// Global gradient norm before clipping (when clipping or checking).
    pub grad_norm: Option<f32>,
    /// The update was skipped because loss or gradients were not finite.
    pub skipped: bool,
}

/// Whether `stop` holds a signal's number (`toy train`'s stop request).
pub(crate) fn stopped(stop: Option<&AtomicI32>) -> bool {
    stop.is_some_and(|s| s.load(std::sync::atomic::Ordering::SeqCst) != 0)
}

impl<'a> TrainStep<'a> {
    /// Build and allocate the step graph(s) for micro-batches of `b` sequences
    /// of `t` tokens. With `accumulators` (one allocated f32 tensor per
    /// trainable parameter, in [`Weights::params`] order) the graphs are split:
    /// needed to accumulate micro-batches, to skip non-finite steps and to sum
    /// the gradients of data-parallel replicas.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        ctx: &'a Context,
        w: &Weights<'a>,
        state: &AdamWState<'a>,
        consts: &Consts<'a>,
        t: usize,
        b: usize,
        opt: OptSettings,
        accumulators: Option<&[Tensor<'a>]>,
        backends: &[Backend],
    ) -> Result<TrainStep<'a>> {
        let lg = loss_graph(ctx, w, consts, t, b, true)?;
        let grad_mode = backends.first().map(MulMatGrad::for_backend).unwrap_or_default();
        let mut graph = Graph::with_grads(ctx, capacity(w.config().n_layers))?;
        graph.set_mul_mat_grad(grad_mode);
        let params: Vec<Param<'a>> = w.params().into_iter().filter(|p| p.trainable).collect();
        let group = |decay: bool| ParamGroup {
            params: params.iter().filter(|p| p.decay == decay).map(|p| p.tensor).collect(),
            weight_decay: if decay { opt.adamw.weight_decay } else { 0.0 },
        };
        let groups: Vec<ParamGroup<'a>> = [group(true), group(false)].into_iter().filter(|g| !g.params.is_empty()).collect();
        let (chunk, vocab) = (t * b, w.config().vocab);
        let Some(accs) = accumulators else {
            graph.expand(lg.loss)?;
            graph.build_backward(lg.loss)?;
            let o = Optimizer::adamw(ctx, &mut graph, state, &groups, opt.adamw, opt.grad_clip)?;
            graph.hoist_param_casts()?; // the bf16 copies of LoRA's factors in one run (CUDA: one launch)
            graph.flag_side_branches(side_branch_max())?; // LoRA's weight gradients beside the rest (CUDA)
            graph.allocate(backends)?;
            return Ok(TrainStep { lg, split: None, graph, opt: o, chunk, vocab });
        };
        // Split: weighted gradients added into the accumulators (and their
        // squared norm) first; the update, reading the accumulators (after an
        // all-reduce between replicas), once per optimizer step.
        let pairs: Vec<_> = params.iter().map(|p| p.tensor).zip(accs.iter().copied()).collect();
        let weight = ctx.new_tensor_1d(DType::F32, 1)?.set_name("loss_weight")?.set_input();
        graph.expand(lg.loss)?;
        graph.build_backward_accumulate(ctx.mul(lg.loss, weight)?, &pairs)?;
        let sumsq = sum_of_squares(ctx, &graph, &params)?;
        graph.expand(sumsq)?;
        graph.hoist_param_casts()?;
        graph.allocate(backends)?;
        let ordered: Vec<Tensor<'a>> = groups
            .iter()
            .flat_map(|g| g.params.iter())
            .map(|p| pairs.iter().find(|(q, _)| q == p).expect("every param has an accumulator").1)
            .collect();
        let mut update = Graph::new(ctx, capacity(w.config().n_layers))?;
        let o = Optimizer::adamw_accumulated(ctx, &mut update, &ordered, state, &groups, opt.adamw, opt.grad_clip)?;
        update.allocate(backends)?;
        Ok(TrainStep { lg, split: Some(Split { update, sumsq, weight }), graph, opt: o, chunk, vocab })
    }

    /// Tokens of one micro-batch of this step's graph (`T·B`).
    pub fn chunk(&self) -> usize {
        self.chunk
    }

    /// The model's vocabulary: targets in `[0, vocab)` count in the loss.
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// One optimizer step over `weights.len()` micro-batches: `tokens` and
    /// `targets` hold them one after another ([`chunk`](Self::chunk) tokens
    /// each), and the step's loss is `Σ weights[i] · loss_i` (see
    /// [`target_weights`](super::batches::target_weights)), whose gradient
    /// is accumulated before the update at learning rate `lr`. The update is
    /// skipped (split mode) when the loss or the gradients are not finite.
    ///
    /// # Errors
    /// [`ggml_rs::Error::Compute`] when the lengths do not match
    /// `weights.len()` micro-batches, or the one-graph step (no accumulators)
    /// is given more than one micro-batch or a weight other than 1.
    pub fn step(&mut self, tokens: &[i32], targets: &[i32], weights: &[f32], lr: f32) -> Result<StepStats> {
        Ok(self.step_unless(tokens, targets, weights, lr, None)?.expect("no stop flag, no early end"))
    }

    /// [`step`](Self::step) that gives up before a micro-batch other than the
    /// first once `stop` holds a non-zero value (a signal, `toy train`):
    /// `None` then, with nothing applied (the weights and the optimizer's state
    /// are as before the step; the partial gradient sums are dropped).
    ///
    /// # Errors
    /// As [`step`](Self::step).
    pub fn step_unless(
        &mut self,
        tokens: &[i32],
        targets: &[i32],
        weights: &[f32],
        lr: f32,
        stop: Option<&AtomicI32>,
    ) -> Result<Option<StepStats>> {
        check_chunks(tokens, targets, weights, self.chunk)?;
        if self.split.is_none() {
            if weights != [1.0] {
                return Err(ggml_rs::Error::Compute("the one-graph step takes one micro-batch of weight 1".into()));
            }
            self.lg.write(tokens, targets)?;
            self.opt.prepare_step(lr)?;
            self.graph.compute()?;
            let loss = self.lg.loss.scalar()?;
            self.opt.finish_step();
            return Ok(Some(StepStats { loss, grad_norm: self.opt.grad_norm().map(|g| g.scalar()).transpose()?, skipped: false }));
        }
        let mut loss = 0f64;
        let micro = tokens.chunks_exact(self.chunk).zip(targets.chunks_exact(self.chunk));
        for (i, ((x, y), &wt)) in micro.zip(weights).enumerate() {
            if i > 0 && stopped(stop) {
                return Ok(None);
            }
            self.start_backward(x, y, wt, i == 0)?;
            loss += wt as f64 * self.finish_backward()? as f64;
        }
        let (loss, norm) = (loss as f32, self.sumsq()?.sqrt());
        if !loss.is_finite() || !norm.is_finite() {
            return Ok(Some(StepStats { loss, grad_norm: Some(norm), skipped: true }));
        }
        self.start_update(lr)?;
        self.finish_update();
        Ok(Some(StepStats { loss, grad_norm: Some(norm), skipped: false }))
    }

    fn split(&self) -> Result<&Split<'a>> {
        self.split.as_ref().ok_or_else(not_split)
    }

    /// Split mode: write one micro-batch and start its forward and backward,
    /// adding `weight` × its gradient into the accumulators (without waiting
    /// for a device). `first` zeroes the accumulators before: the first
    /// micro-batch of every optimizer step must set it, or the step would add
    /// the last step's gradients again.
    pub fn start_backward(&mut self, tokens: &[i32], targets: &[i32], weight: f32, first: bool) -> Result<()> {
        self.split()?.weight.write(&[weight])?;
        self.lg.write(tokens, targets)?;
        if first {
            self.graph.reset_grads()?;
        }
        self.graph.compute_async()
    }

    /// Split mode: wait for [`start_backward`](Self::start_backward); the
    /// micro-batch's loss (unweighted: its mean over its counted targets).
    pub fn finish_backward(&mut self) -> Result<f32> {
        self.split()?;
        self.graph.synchronize();
        self.lg.loss.scalar()
    }

    /// Split mode: the sum of the squared accumulated gradients, after
    /// [`finish_backward`](Self::finish_backward).
    pub fn sumsq(&self) -> Result<f32> {
        self.split()?.sumsq.scalar()
    }

    /// Split mode: write the hyper-parameters for learning rate `lr` and start
    /// the update from the accumulators.
    pub fn start_update(&mut self, lr: f32) -> Result<()> {
        let Some(s) = &mut self.split else { return Err(not_split()) };
        self.opt.prepare_step(lr)?;
        s.update.compute_async()
    }

    /// Split mode: wait for the update and count the step.
    pub fn finish_update(&mut self) {
        if let Some(s) = &self.split {
            s.update.synchronize();
        }
        self.opt.finish_step();
    }

    /// The graph, for describing it (`flow.json`) and reporting placements.
    pub fn graph(&self) -> &Graph<'a> {
        &self.graph
    }

    /// The optimizer (its step count is needed to resume).
    pub fn optimizer(&mut self) -> &mut Optimizer<'a> {
        &mut self.opt
    }

    /// The loss tensor.
    pub fn loss(&self) -> Tensor<'a> {
        self.lg.loss
    }
}

fn not_split() -> ggml_rs::Error {
    ggml_rs::Error::Compute("this needs the split training graphs (gradient accumulators)".into())
}

/// `Σ_p Σ grad(p)²` over `params`, a node of `graph` (whose backward is built).
fn sum_of_squares<'a>(ctx: &'a Context, graph: &Graph<'a>, params: &[Param<'a>]) -> Result<Tensor<'a>> {
    let mut sumsq: Option<Tensor<'a>> = None;
    for p in params {
        let g = graph.grad(p.tensor).ok_or_else(|| ggml_rs::Error::Backward(format!("no gradient for {}", p.tensor.name())))?;
        let s = ctx.sum(ctx.sqr(g)?)?;
        sumsq = Some(match sumsq {
            None => s,
            Some(acc) => ctx.add(acc, s)?,
        });
    }
    Ok(sumsq.ok_or_else(|| ggml_rs::Error::Backward("nothing to train".into()))?.set_output())
}

/// Refuse `tokens`/`targets` that are not `weights.len()` chunks of `chunk` tokens.
pub(crate) fn check_chunks(tokens: &[i32], targets: &[i32], weights: &[f32], chunk: usize) -> Result<()> {
    if weights.is_empty() || tokens.len() != targets.len() || tokens.len() != weights.len() * chunk {
        return Err(ggml_rs::Error::Compute(format!(
            "{} tokens and {} targets are not {} micro-batches of {chunk}",
            tokens.len(),
            targets.len(),
            weights.len()
        )));
    }
    Ok(())
}

/// Forward and backward without an update: the loss, logits and every
/// parameter's gradient for one batch (for `toy debug` and parity checks).
pub struct GradStep<'a> {
    lg: LossGraph<'a>,
    graph: Graph<'a>,
}

impl<'a> GradStep<'a> {
    /// Build and allocate the graph for batches of `b` sequences of `t` tokens.
    pub fn new(ctx: &'a Context, w: &Weights<'a>, consts: &Consts<'a>, t: usize, b: usize, backends: &[Backend]) -> Result<GradStep<'a>> {
        let lg = loss_graph(ctx, w, consts, t, b, false)?;
        lg.logits.set_output();
        let mut graph = Graph::with_grads(ctx, capacity(w.config().n_layers))?;
        graph.set_mul_mat_grad(backends.first().map(MulMatGrad::for_backend).unwrap_or_default());
        graph.expand(lg.loss)?;
        graph.build_backward(lg.loss)?;
        graph.hoist_param_casts()?; // as a training step's graph
        for p in w.params() {
            if let Some(g) = graph.grad(p.tensor) {
                g.set_output();
            }
        }
        graph.allocate(backends)?;
        Ok(GradStep { lg, graph })
    }

    /// Compute loss and gradients for one batch; returns the loss.
    pub fn compute(&mut self, tokens: &[i32], targets: &[i32]) -> Result<f32> {
        self.lg.write(tokens, targets)?;
        self.graph.compute()?;
        self.lg.loss.scalar()
    }

    /// The gradient of `param` (after [`compute`](Self::compute)).
    pub fn grad(&self, param: Tensor<'_>) -> Option<Tensor<'a>> {
        self.graph.grad(param)
    }

    /// Logits `[V, T·B]` of the last batch.
    pub fn logits(&self) -> Tensor<'a> {
        self.lg.logits
    }

    /// The graph.
    pub fn graph(&self) -> &Graph<'a> {
        &self.graph
    }
}

/// A forward-only graph computing the loss (and logits) of a batch.
pub struct EvalStep<'a> {
    lg: LossGraph<'a>,
    graph: Graph<'a>,
    pub t: usize,
    pub b: usize,
}

impl<'a> EvalStep<'a> {
    /// Build and allocate a loss graph for batches of `b` sequences of `t` tokens.
    pub fn new(ctx: &'a Context, w: &Weights<'a>, consts: &Consts<'a>, t: usize, b: usize, backends: &[Backend]) -> Result<EvalStep<'a>> {
        let lg = loss_graph(ctx, w, consts, t, b, false)?;
        lg.logits.set_output();
        let mut graph = Graph::new(ctx, capacity(w.config().n_layers))?;
        graph.expand(lg.loss)?;
        graph.allocate(backends)?;
        Ok(EvalStep { lg, graph, t, b })
    }

    /// Mean cross-entropy of the batch.
    pub fn loss(&mut self, tokens: &[i32], targets: &[i32]) -> Result<f32> {
        self.lg.write(tokens, targets)?;
        self.graph.compute()?;
        self.lg.loss.scalar()
    }

    /// The logits of the last computed batch, `[V, T·B]`.
    pub fn logits(&self) -> Tensor<'a> {
        self.lg.logits
    }

    /// The graph.
    pub fn graph(&self) -> &Graph<'a> {
        &self.graph
    }
}

/// A forward-only graph producing the logits (no loss) of a whole window at
/// once: the reference that sampling's key/value cache ([`super::decoder`]) is
/// tested against.
pub struct Forward<'a> {
    tokens: Tensor<'a>,
    logits: Tensor<'a>,
    graph: Graph<'a>,
    pub t: usize,
}

impl<'a> Forward<'a> {
    /// Build and allocate the logits graph for one sequence of `t` tokens.
    pub fn new(ctx: &'a Context, w: &Weights<'a>, consts: &Consts<'a>, t: usize, backends: &[Backend]) -> Result<Forward<'a>> {
        let tokens = ctx.new_tensor_1d(DType::I32, t as i64)?.set_name("tokens")?.set_input();
        let logits = w.forward(ctx, consts.batch(ctx, tokens, t, 1)?)?.set_output(); // [V, T, 1]
        let mut graph = Graph::new(ctx, capacity(w.config().n_layers))?;
        graph.expand(logits)?;
        graph.allocate(backends)?;
        Ok(Forward { tokens, logits, graph, t })
    }

    /// Logits of position `at` after running `tokens` (exactly `t` ids).
    pub fn logits_at(&mut self, tokens: &[i32], at: usize) -> Result<Vec<f32>> {
        self.tokens.write(tokens)?;
        self.graph.compute()?;
        let all = self.logits.read::<f32>()?;
        let v = self.logits.ne()[0] as usize;
        Ok(all[at * v..(at + 1) * v].to_vec())
    }

    /// The graph (for placements).
    pub fn graph(&self) -> &Graph<'a> {
        &self.graph
    }
}

/// What [`with_loaded`] loads a checkpoint for.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum LoadFor {
    /// Gradients: every weight that trains is marked as a parameter (all of a
    /// model's, an adapter's alone over its frozen base).
    Gradients,
    /// Graphs without a backward over many tokens (`toy eval`): a
    /// llama-family file's quantized, f16 or bf16 matrices stay in their
    /// types in memory (where every type is one toy loads compact) and each
    /// product dequantizes its matrix, as training does.
    Inference,
    /// Token-by-token decoding (`toy generate`): as `Inference`, and the
    /// products read the matrices as stored ([`Weights::multiply_in_stored_types`]),
    /// as llama.cpp runs them (faster when one token reads the whole model).
    Decode,
}

/// The config to load `ck` with for `purpose`: without a backward, the file's
/// compact types kept (see [`LoadFor::Inference`]).
fn load_config(ck: &crate::formats::checkpoint::Checkpoint, purpose: LoadFor) -> crate::model::ModelConfig {
    use crate::formats::checkpoint::{matrix_dtype, BASE_TYPES};
    let mut cfg = ck.config.clone();
    // The llama family: gpt2's fused attn_qkv is split on load through f32.
    let compact = ck.file.tensors().iter().all(|t| BASE_TYPES.contains(&t.dtype));
    if purpose != LoadFor::Gradients && cfg.lora.is_none() && cfg.arch.takes_lora() && compact {
        (cfg.base_dtype, cfg.base_dtype_except) = matrix_dtype(&ck.file, &ck.config);
        cfg.stored_types = true;
    }
    cfg
}

/// Load `ck` onto `backend` with constants for up to `b_max` sequences of `t` tokens whose
/// attention is computed as `attention` says, and run `f` with the weights (scoped, since
/// tensors borrow their context), set up for `purpose`.
///
/// # Errors
/// [`crate::error::Error::Input`] (with the command's advice) when the weights and constants do
/// not fit in the device's free memory; what loading or `f` returns.
pub fn with_loaded<R>(
    ck: &crate::formats::checkpoint::Checkpoint,
    backend: &Backend,
    (t, b_max): (usize, usize),
    attention: Attention,
    purpose: LoadFor,
    f: impl FnOnce(&Weights<'_>, &Consts<'_>) -> crate::error::Result<R>,
) -> crate::error::Result<R> {
    let wctx = Context::new(capacity(ck.config.n_layers))?;
    let mut weights = Weights::new(&wctx, &load_config(ck, purpose))?;
    match purpose {
        LoadFor::Gradients => {
            for p in weights.params().into_iter().filter(|p| p.trainable) {
                wctx.set_param(p.tensor)?;
            }
        }
        LoadFor::Inference => {}
        LoadFor::Decode => weights.multiply_in_stored_types(),
    }
    let consts = Consts::with_attention(&wctx, t, b_max, attention)?;
    // out of memory: the command's one line and advice (crate::error's From), status 2
    wctx.allocate(backend)?;
    consts.fill()?;
    ck.load_weights(&weights)?;
    f(&weights, &consts)
}
