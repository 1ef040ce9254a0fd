//! Training: the recipes' setup ([`train`]) and the shared loop (`runner`),
//! which sends what it does as [`events::Event`]s to a [`events::Sink`] (the
//! run folder, [`crate::run::folder::RunFolder`]).
//! `from-scratch` trains a freshly initialised model on random windows of a
//! corpus; `warm-start` starts from a donor's embeddings and streams the corpus.

pub mod batches;
pub mod chat_windows;
pub mod decoder;
pub(crate) mod dequant;
pub mod devices;
pub mod events;
pub mod memory;
mod outcome;
pub mod parallel;
mod provenance;
mod runner;
pub mod schedule;
pub mod step;

use crate::config::{Recipe, Sampling, TrainConfig};
use crate::data::Corpus;
use crate::error::{input, Result};
use crate::formats::state;
use crate::model::{init::init_weights, Weights};
use crate::run::events::{now_rfc3339, SCHEMA};
use crate::run::folder::RunFolder;
use crate::run::{git_info, host_info, RunDir};
use batches::Sampler;
use chat_windows::ChatRun;
use events::{Event, Phase, RunStart, Sink};
use ggml_rs::comm::{AllReduceKind, Comm};
use ggml_rs::optim::{AdamWConfig, AdamWState};
use ggml_rs::{Backend, Context};
pub use outcome::{summary_without_outcome, End, Outcome};
use parallel::{DataParallel, Replica, Trainer};
pub use provenance::model_name;
use provenance::{carried_keys, provenance};
use runner::Validation;
use std::path::PathBuf;
use std::sync::atomic::AtomicI32;
use std::sync::Arc;
use step::{capacity, Consts, EvalStep, OptSettings, TrainStep};

/// How a run reports and what it writes besides the essentials.
#[derive(Clone, Debug, Default)]
pub struct RunOptions {
    /// Print nothing on stdout (the caller prints a JSON summary).
    pub quiet: bool,
    /// Show a progress bar (stderr is a terminal).
    pub progress: bool,
    /// Write `weights/step_0.gguf` before the first step.
    pub save_initial: bool,
    /// Record every step's windows in `batches.bin` / `batches.json`.
    pub record_batches: bool,
    /// Keep only the last K checkpoints (0: keep all).
    pub keep: usize,
    /// Skip steps whose loss or gradients are not finite instead of stopping.
    pub skip_nonfinite: bool,
    /// How the warm-up was given, if it was (`--warmup-steps`, or toy.toml's
    /// `warmup_steps`): a warm-up longer than the run is then noted, naming it.
    pub warmup_given: Option<&'static str>,
    /// Set to a signal number (SIGINT, SIGTERM) to stop after the current step.
    pub stop: Option<Arc<AtomicI32>>,
    /// A line for stdout (unless `quiet`) once the run is set up and its
    /// start logged: a refusal before then prints only itself.
    pub announce: Option<String>,
    /// Notes for stderr at the same moment (what the recipe chose for the
    /// user: a finetune's context, a base dequantized to f32).
    pub notes: Vec<String>,
}

/// The backends of a single-device command (`eval`, `generate`, `debug`): the
/// chosen device first (its f32 matrix products at `precision` where it has the
/// choice), the CPU (`threads` threads, 0: all cores) last.
pub fn backends_for(device: &str, threads: usize, precision: ggml_rs::MatmulPrecision) -> Result<Vec<Backend>> {
    let dev = device.trim().to_lowercase();
    if dev.contains(',') {
        return Err(input(format!("--device {device}: this command runs on one device")));
    }
    devices::replica_backends(&dev, threads, precision)
}

/// How the weights start.
#[derive(Clone, Copy, Debug)]
pub enum Init<'p> {
    /// GPT-2-style random initialisation from the seed.
    Random,
    /// Random, then the token table (and lens) from a donor.
    Donor(&'p crate::donor::Donor),
    /// Every weight from an existing model (the finetune recipe).
    Model(&'p crate::formats::checkpoint::Checkpoint),
}

/// What a run does, beyond its configuration.
#[derive(Clone, Debug)]
pub struct Plan<'p> {
    /// The recipe (recorded in events).
    pub recipe: Recipe,
    pub init: Init<'p>,
    /// Random windows, or the corpus in order (with per-epoch shuffling or not).
    pub sampling: Sampling,
    /// Continue from this checkpoint's resume state, paired with it and with
    /// steps left (its maker checks both: [`crate::formats::state::check_pair`]).
    pub resume: Option<PathBuf>,
}

impl Plan<'_> {
    /// A new from-scratch run.
    pub fn from_scratch() -> Plan<'static> {
        Plan { recipe: Recipe::FromScratch, init: Init::Random, sampling: Sampling::Random, resume: None }
    }
}

/// Train a new model on `corpus` as `cfg` says, writing the run into `run`.
pub fn from_scratch(cfg: &TrainConfig, corpus: &Corpus, run: &RunDir, opts: &RunOptions) -> Result<Outcome> {
    train(&Plan::from_scratch(), cfg, corpus, run, opts)
}

/// Refuse a configuration or corpus that cannot train: an invalid `cfg`, a
/// training split shorter than one window (text) or without a window
/// (`chat`), ids beyond the vocabulary. Then say on stderr how many
/// conversations of `chat` were cut to fit a window (never silently).
/// `limit`: the largest context the model takes (a finetune base's), if any.
fn check_inputs(cfg: &TrainConfig, corpus: &Corpus, chat: Option<&ChatRun>, limit: Option<usize>) -> Result<()> {
    cfg.validate()?;
    let t = cfg.model.context;
    if chat.is_some_and(|c| c.train.is_empty()) {
        let hint = match limit {
            Some(l) if t >= l => format!("the model's context, {l}, is the largest window: shorten what precedes the answers"),
            Some(l) => format!("use a larger --context, up to the model's {l}"),
            None => "use a larger --context".to_string(),
        };
        return Err(input(format!(
            "no conversation of the training split of {} has a trained token within its first {} tokens (a window of {t} and its next token; {hint})",
            corpus.source.display(),
            t + 1
        )));
    }
    if chat.is_none() && corpus.train.len() < t + 1 {
        return Err(input(format!(
            "the training split of {} has {} tokens, fewer than one window of context + 1 = {} (use a smaller --context or more text)",
            corpus.source.display(),
            corpus.train.len(),
            t + 1
        )));
    }
    if corpus.vocab_size > cfg.model.vocab {
        return Err(input(format!("the corpus uses {} ids but the model vocabulary is {}", corpus.vocab_size, cfg.model.vocab)));
    }
    if let Some(note) = chat.and_then(ChatRun::note) {
        crate::note!("{note}");
    }
    Ok(())
}

/// What the first events of a run (or of a resumed run) describe.
struct Start<'s, 'p> {
    plan: &'s Plan<'p>,
    cfg: &'s TrainConfig,
    corpus: &'s Corpus,
    run: &'s RunDir,
    devices: &'s [String],
    device: &'s Backend,
    train: &'s Trainer<'s>,
    memory: &'s memory::DeviceMemory,
    wctx: &'s Context,
    start_step: u64,
    chat: Option<&'s ChatRun>,
}

/// `run_start` of a new run.
fn run_start(s: &Start<'_, '_>) -> RunStart {
    let Start { plan, cfg, corpus, run, devices, device, train, memory, wctx, chat, .. } = *s;
    let m = &cfg.model;
    RunStart {
        schema: SCHEMA,
        started_at: now_rfc3339(),
        run_id: run.id.clone(),
        phase: Phase::Train,
        recipe: plan.recipe,
        host: host_info(),
        backend: events::Backend {
            kind: device.device().backend_name().to_lowercase(),
            device: device.name(),
            description: device.device().description(),
            devices: devices.to_vec(),
            allreduce: train.allreduce_kind().name(),
        },
        git: git_info(),
        model: events::Model {
            arch: m.arch.name(),
            name: model_name(cfg),
            vocab: m.vocab,
            d_model: m.d_model,
            n_layers: m.n_layers,
            n_heads: m.n_heads,
            n_kv: m.n_kv_heads,
            d_head: m.d_head(),
            d_ff: m.d_ff,
            n_params: m.n_params(),
        },
        config: events::Config {
            context: m.context,
            batch: cfg.batch,
            grad_accum: cfg.grad_accum,
            steps: cfg.steps,
            lr: cfg.lr,
            min_lr: cfg.min_lr,
            warmup_steps: cfg.warmup_steps,
            betas: [cfg.betas.0, cfg.betas.1],
            eps: cfg.eps,
            weight_decay: cfg.weight_decay,
            grad_clip: cfg.grad_clip,
            seed: cfg.seed,
            matmul_precision: cfg.matmul_precision.name(),
            dtype: cfg.dtype.name(),
            attention: cfg.attention.name(),
            preset: cfg.preset.map(crate::config::Preset::name),
            corpus: corpus.source.display().to_string(),
            train_tokens: corpus.train.len(),
            val_tokens: corpus.val.len(),
        },
        memory: memory.report(device, wctx, train.graph()),
        chat: chat.map(ChatRun::event),
        donor: if let Init::Donor(d) = plan.init { d.report.clone() } else { None },
    }
}

/// The training windows of `corpus` at `cfg`'s context as the loop walks
/// them: one a conversation of chat data (a packed window with `--pack`; a
/// conversation cut to nothing trained is left out), else `--context` tokens
/// of the text. `chat`: the run's windows of chat data, when built already.
pub fn training_windows(cfg: &TrainConfig, corpus: &Corpus, chat: Option<&ChatRun>) -> usize {
    let t = cfg.model.context.max(1);
    match (&corpus.chat, chat) {
        (Some(_), Some(run)) => run.train.len(),
        (Some(c), None) => ChatRun::new(c, t, cfg.pack).train.len(),
        (None, _) => corpus.train.len().saturating_sub(1) / t,
    }
}

/// A note when an optimizer step takes more sequences (`--batch` ×
/// `--grad-accum`) than the training split of `corpus` holds at `cfg`'s
/// context (windows of text, or conversations): every step then goes over the
/// same data more than once, at the cost of as many passes. Allowed (a batch
/// larger than the data is, in PyTorch too), but never silent; printed once
/// the run has started, so that a run refused later says one line.
fn oversized_step_note(cfg: &TrainConfig, corpus: &Corpus, chat: Option<&ChatRun>) -> Option<String> {
    let t = cfg.model.context;
    let held = training_windows(cfg, corpus, chat);
    let s = if held == 1 { "" } else { "s" };
    let what = match (&corpus.chat, cfg.pack) {
        (Some(_), false) => format!("conversation{s}"),
        (Some(_), true) => format!("packed window{s}"),
        (None, _) => format!("window{s} of {t} tokens"),
    };
    let wanted = cfg.batch.saturating_mul(cfg.grad_accum);
    // held == 0: too little data for one window, which is refused.
    if held == 0 || wanted <= held {
        return None;
    }
    let how = if cfg.grad_accum > 1 {
        format!("--batch {} × --grad-accum {}", cfg.batch, cfg.grad_accum)
    } else {
        format!("--batch {}", cfg.batch)
    };
    Some(format!(
        "note: each optimizer step takes {wanted} sequences ({how}), more than the {held} {what} of the training split of {}: every step goes over them {:.1} times",
        crate::output::shown(&corpus.source),
        wanted as f64 / held as f64
    ))
}

/// Begin `sink` and send `run_start` for a new run, `resume` for a resumed
/// one, and `fallback` (with a warning) when graph nodes run on the CPU.
fn log_start(sink: &mut dyn Sink, s: &Start<'_, '_>) -> Result<()> {
    let Start { plan, cfg, corpus, device, train, memory, wctx, start_step, chat, .. } = *s;
    crate::output::release_notes(); // the checks are over: the run starts
    sink.begin(train.graph(), plan.resume.is_some().then_some(start_step))?;
    if let Some(c) = chat.filter(|_| plan.resume.is_none()) {
        eprintln!("{}", c.summary());
    }
    if let Some(note) = oversized_step_note(cfg, corpus, chat) {
        crate::note!("{note}");
    }
    if plan.resume.is_none() {
        sink.send(Event::RunStart(Box::new(run_start(s))))?;
    } else {
        sink.send(Event::Resume(Box::new(events::Resume {
            resumed_at: now_rfc3339(),
            from_step: start_step,
            steps: cfg.steps,
            backend: events::ResumeBackend { device: device.name() },
            dtype: cfg.dtype.name(),
            matmul_precision: cfg.matmul_precision.name(),
            attention: cfg.attention.name(),
            memory: memory.report(device, wctx, train.graph()),
        })))?;
    }
    let fallbacks = train.graph().cpu_fallbacks();
    if !fallbacks.is_empty() {
        let ops: Vec<String> = fallbacks.iter().map(|p| p.op.clone()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        eprintln!(
            "toy train: warning: {} graph nodes run on the CPU because {} cannot run them ({})",
            fallbacks.len(),
            device.name(),
            ops.join(", ")
        );
        sink.send(Event::Fallback(events::Fallback { device: device.name(), n_nodes: fallbacks.len(), ops }))?;
    }
    Ok(())
}

/// Load the resume state of `plan.resume` (if any) into every replica and
/// the sampler; the step and AdamW count to continue from (0, 0 for a new run).
fn restore(
    plan: &Plan<'_>,
    corpus: &Corpus,
    run: &RunDir,
    states: &[ReplicaState<'_>],
    sampler: &mut Sampler,
    chat: Option<&ChatRun>,
) -> Result<(u64, u64)> {
    // The pair and the steps left were checked where the plan was made (`toy train --resume`).
    let Some(ck) = &plan.resume else { return Ok((0, 0)) };
    let mut p = None;
    for st in states {
        // A state that does not load (broken, another shape): the checkpoint before it may be whole.
        let loaded = state::load(&state::state_path(ck), &st.weights, &st.moments).map_err(|e| match e {
            crate::error::Error::Input(m) => input(format!("{m}{}", run.fall_back_from(ck))),
            e => e,
        });
        p = Some(loaded?);
    }
    let p = p.expect("at least one replica");
    let restored = match chat {
        Some(c) => sampler.restore_windows(&p.sampler, c.train.len() as u64),
        None => sampler.restore(&p.sampler, corpus.train.len()),
    };
    restored.map_err(|e| input(format!("{}: {e}", ck.display())))?;
    Ok((p.step, p.opt_t))
}

/// Set up the model, optimizer and graphs for `plan`, then run the loop into
/// the run folder `run`.
pub fn train(plan: &Plan<'_>, cfg: &TrainConfig, corpus: &Corpus, run: &RunDir, opts: &RunOptions) -> Result<Outcome> {
    let mut folder = RunFolder::new(run, cfg, corpus.tokenizer.as_ref(), opts.keep);
    train_into(plan, cfg, corpus, run, opts, &mut folder)
}

/// [`train`], sending what the run does to `sink` (`run` names it in
/// messages and the outcome, and holds `--record-batches`' recording).
pub fn train_into(
    plan: &Plan<'_>,
    cfg: &TrainConfig,
    corpus: &Corpus,
    run: &RunDir,
    opts: &RunOptions,
    sink: &mut dyn Sink,
) -> Result<Outcome> {
    let t = cfg.model.context;
    let chat = corpus.chat.as_ref().map(|c| ChatRun::new(c, t, cfg.pack));
    let limit = match plan.init {
        Init::Model(ck) => Some(ck.config.context),
        _ => None,
    };
    check_inputs(cfg, corpus, chat.as_ref(), limit)?;
    let (devices, all_backends) = devices::replicas(cfg)?;
    let n = devices.len();
    let backends = all_backends[0].clone();
    let device = backends[0].clone();
    let memory = memory::DeviceMemory::start(&device);

    // Per replica: weights, optimizer moments, gradient accumulators and
    // constants in one context on its device; the graphs in a compute context.
    let wctxs = (0..n).map(|_| Context::new(capacity(cfg.model.n_layers))).collect::<ggml_rs::Result<Vec<_>>>()?;
    let cctxs = (0..n).map(|_| Context::new(capacity(cfg.model.n_layers) * 2)).collect::<ggml_rs::Result<Vec<_>>>()?;
    // Split graphs (gradients into accumulators, then the update) to skip
    // non-finite steps, sum replicas, or accumulate micro-batches.
    let split = opts.skip_nonfinite || n > 1 || cfg.grad_accum > 1;
    let mut states = Vec::with_capacity(n);
    for (wctx, bk) in wctxs.iter().zip(&all_backends) {
        states.push(ReplicaState::new(wctx, cfg, plan, &bk[0], split)?);
    }
    let mut sampler = sampler(plan, cfg, chat.is_some());
    let (start_step, opt_t) = restore(plan, corpus, run, &states, &mut sampler, chat.as_ref())?;

    let opt = OptSettings {
        adamw: AdamWConfig { lr: cfg.lr, betas: cfg.betas, eps: cfg.eps, weight_decay: cfg.weight_decay },
        grad_clip: (cfg.grad_clip > 0.0).then_some(cfg.grad_clip),
    };
    let ectx = Context::new(capacity(cfg.model.n_layers))?;
    let mut train =
        build_trainer(&cctxs, &states, &all_backends, t, cfg.batch / n, opt).map_err(|e| crate::error::building("the training step", e))?;
    train.set_step_count(opt_t);
    let (weights, moments) = (&states[0].weights, &states[0].moments);
    let (validation, eb) = Validation::new(cfg, corpus, chat.as_ref());
    let mut eval = eval_step(&ectx, &states[0], t, eb, &backends)?;

    let (wctx, chat) = (&wctxs[0], chat.as_ref());
    let start =
        Start { plan, cfg, corpus, run, devices: &devices, device: &device, train: &train, memory: &memory, wctx, start_step, chat };
    if opts.record_batches {
        // before the run's start or resume is logged: a recording that cannot go on
        // refuses the resume with the run as it was
        sink.record_batches(cfg.model.context, cfg.sequences_per_step(), start_step, chat.is_some())?;
    }
    log_start(sink, &start)?;
    announce(opts);
    let base_keys = carried_keys(plan)?;
    let name = model_name(cfg); // it may read the base's header: once, not per save
    let prov = |step| provenance(&run.id, &name, cfg, &base_keys, step);
    if opts.save_initial && plan.resume.is_none() {
        sink.save_initial(weights, &prov(0))?;
    }
    let (memory, sampler, train, eval) = ((&memory, &device), &mut sampler, &mut train, eval.as_mut());
    runner::run(runner::Loop {
        cfg,
        corpus,
        run,
        opts,
        sink,
        train,
        eval,
        validation: &validation,
        chat,
        weights,
        moments,
        sampler,
        start_step,
        prov: &prov,
        memory,
    })
}

/// The run's announce line (stdout, unless quiet) and notes (stderr), said
/// once its start is logged.
fn announce(opts: &RunOptions) {
    if let (Some(line), false) = (&opts.announce, opts.quiet) {
        crate::outln!("{line}");
    }
    for note in &opts.notes {
        crate::note!("{note}");
    }
}

/// The order of a run's windows, a step's micro-batches drawn as one batch of
/// them all would be: a chat corpus's conversation windows are walked in a
/// fresh random order every epoch, text as `plan` says.
fn sampler(plan: &Plan<'_>, cfg: &TrainConfig, chat: bool) -> Sampler {
    let (t, b) = (cfg.model.context, cfg.sequences_per_step());
    match plan.sampling {
        _ if chat => Sampler::stream(cfg.seed, t, b, true),
        Sampling::Stream { shuffle } => Sampler::stream(cfg.seed, t, b, shuffle),
        Sampling::Random => Sampler::random(cfg.seed, t, b),
    }
}

/// The validation graph on the first replica's weights, in batches of `b`
/// windows of `t` tokens (None when `b` is 0: no validation windows).
fn eval_step<'a>(ctx: &'a Context, st: &ReplicaState<'a>, t: usize, b: usize, backends: &[Backend]) -> Result<Option<EvalStep<'a>>> {
    if b == 0 {
        return Ok(None);
    }
    let step = EvalStep::new(ctx, &st.weights, &st.consts, t, b, backends);
    Ok(Some(step.map_err(|e| crate::error::building("the validation step", e))?))
}

/// One replica's tensors that outlive its graphs, in a context allocated on its device.
pub(crate) struct ReplicaState<'w> {
    weights: Weights<'w>,
    moments: AdamWState<'w>,
    /// One f32 tensor per trainable parameter when the step graphs are split.
    accumulators: Option<Vec<ggml_rs::Tensor<'w>>>,
    consts: Consts<'w>,
}

impl<'w> ReplicaState<'w> {
    /// Elements of the parameters the step trains (all of them, or a LoRA run's adapters).
    pub(crate) fn n_trainable(&self) -> u64 {
        self.weights.params().iter().filter(|p| p.trainable).map(|p| p.tensor.nelements() as u64).sum()
    }

    /// Create, allocate on `device` and initialise (random from the seed, then
    /// the donor's table) the tensors of one replica.
    pub(crate) fn new(wctx: &'w Context, cfg: &TrainConfig, plan: &Plan<'_>, device: &Backend, split: bool) -> Result<ReplicaState<'w>> {
        // Under bf16 (autocast), each off by its variable for A/B runs: a frozen base's compact
        // matrices are loaded in bf16 where a step's copies fit (TOY_BASE_CAST_PER_STEP: cast
        // once a step, patch 0061; TOY_NO_0061: for each product), else cast to bf16 for each
        // product (TOY_NO_0040_CAST: to f32, as on the CPU; patch 0040), the head writes bf16 logits (TOY_F32_LOGITS; patch 0041), the blocks keep their
        // products' inputs in bf16 (TOY_F32_INPUTS; patch 0042) and their attention's q, k and v
        // (TOY_F32_ATTENTION; patch 0043), their SwiGLU's or GELU's inputs (TOY_F32_ACTIVATIONS;
        // patches 0044, 0045), and SwiGLU's gate and up products write bf16 (TOY_F32_OUTPUTS;
        // patch 0048, CUDA only: the CPU has no bf16 product result), and so do the attention's q, k and v
        // (TOY_NO_0076; patch 0076, CUDA only), and GELU's bf16 output is
        // computed again in the backward (TOY_NO_0062; patch 0062), and the trainable f32 matrices
        // are cast to bf16 once a step (TOY_WEIGHT_CAST_PER_PRODUCT: each product converts its
        // own, twice a step; CUDA only). Opt-in until timed on a GPU:
        // a LoRA product's input gradient through its weight with the update merged (TOY_0066;
        // patch 0066; f32 too, where the CPU runs it for checks).
        let autocast = |off: &str| cfg.dtype == crate::config::Dtype::Bf16 && std::env::var_os(off).is_none();
        let per_step = ["TOY_NO_0061", "TOY_BASE_CAST_PER_STEP"].iter().any(|v| std::env::var_os(v).is_some());
        let bf16_base = match autocast("TOY_NO_0040_CAST") && !per_step {
            true => dequant::bf16_base(&cfg.model, device, wctx.capacity())?,
            false => None,
        };
        let mut weights = Weights::new(wctx, bf16_base.as_ref().unwrap_or(&cfg.model))?;
        if autocast("TOY_NO_0040_CAST") {
            weights.set_compact(dequant::bf16_compact(&weights, device, std::env::var_os("TOY_NO_0061").is_none()));
        }
        weights.set_autocast(crate::model::weights::Autocast {
            logits: autocast("TOY_F32_LOGITS"),
            inputs: autocast("TOY_F32_INPUTS"),
            attention: autocast("TOY_F32_ATTENTION"),
            activations: autocast("TOY_F32_ACTIVATIONS"),
            outputs: autocast("TOY_F32_OUTPUTS") && !device.is_cpu(),
            qkv: autocast("TOY_NO_0076") && !device.is_cpu(),
            recompute: autocast("TOY_NO_0062"),
            merged_lora: std::env::var_os("TOY_0066").is_some(),
            weights: autocast("TOY_WEIGHT_CAST_PER_PRODUCT") && !device.is_cpu(),
        });
        let trainable: Vec<_> = weights.params().into_iter().filter(|p| p.trainable).map(|p| p.tensor).collect();
        for &p in &trainable {
            wctx.set_param(p)?;
        }
        let moments = AdamWState::new(wctx, &trainable)?;
        let accumulators = if split {
            Some(
                trainable
                    .iter()
                    .enumerate()
                    .map(|(i, p)| wctx.new_tensor(ggml_rs::DType::F32, &p.shape())?.set_name(&format!("grad_acc.{i}")))
                    .collect::<ggml_rs::Result<Vec<_>>>()?,
            )
        } else {
            None
        };
        let consts = Consts::with_attention(wctx, cfg.model.context, cfg.batch, cfg.attention)?;
        wctx.allocate(device).map_err(|e| crate::error::building("the weights", e))?;
        consts.fill()?;
        match plan.init {
            Init::Model(ck) => {
                ck.load_weights(&weights)?;
                if ck.adapter.is_none() {
                    crate::model::lora::init_adapters(&weights.adapters(), cfg.seed)?;
                }
            }
            Init::Donor(d) => {
                init_weights(&weights, cfg.seed)?;
                d.apply(&weights)?;
            }
            Init::Random => init_weights(&weights, cfg.seed)?,
        }
        Ok(ReplicaState { weights, moments, accumulators, consts })
    }
}

/// The training step of every replica (`b` sequences of `t` tokens each): one
/// device's [`TrainStep`], or replicas summing their gradients.
pub(crate) fn build_trainer<'a>(
    cctxs: &'a [Context],
    states: &'a [ReplicaState<'a>],
    backends: &[Vec<Backend>],
    t: usize,
    b: usize,
    opt: OptSettings,
) -> ggml_rs::Result<Trainer<'a>> {
    let mut replicas = Vec::with_capacity(states.len());
    for ((cctx, st), bk) in cctxs.iter().zip(states).zip(backends) {
        let step = TrainStep::new(cctx, &st.weights, &st.moments, &st.consts, t, b, opt, st.accumulators.as_deref(), bk)?;
        replicas.push(Replica { step, accumulators: st.accumulators.clone().unwrap_or_default() });
    }
    if replicas.len() == 1 {
        return Ok(Trainer::Single(Box::new(replicas.pop().expect("one replica").step)));
    }
    let mains: Vec<Backend> = backends.iter().map(|b| b[0].clone()).collect();
    let kind = AllReduceKind::for_devices(&mains[0].device(), mains.len());
    if std::env::var_os("NCCL_NVLS_ENABLE").is_none() {
        // NVLink multicast can take shared GPU hosts out of service; keep it off
        // unless the environment says otherwise (read when NCCL starts, below).
        std::env::set_var("NCCL_NVLS_ENABLE", "0");
    }
    let comm = if mains[0].is_cpu() { None } else { Comm::new(&mains) };
    Ok(Trainer::Parallel(DataParallel::new(replicas, comm, kind)))
}

#[cfg(test)]
mod tests;
