//! Training: the recipes' setup ([`train`]) and the shared loop (`runner`).
//! `from-scratch` trains a freshly initialised model on random windows of a
//! corpus; `warm-start` starts from a donor's embeddings and streams the corpus.

pub mod batches;
mod runner;
pub mod schedule;
pub mod state;
pub mod step;

use crate::checkpoint::{write_checkpoint, Provenance};
use crate::config::{MatmulPrecision, TrainConfig};
use crate::data::Corpus;
use crate::error::{input, runtime, Result};
use crate::model::{init::init_weights, Weights};
use crate::run::events::{now_rfc3339, EventLog, SCHEMA};
use crate::run::{flow, git_info, host_info, write_atomic, RunDir};
use batches::{eval_starts, Sampler};
use ggml_rs::optim::{AdamWConfig, AdamWState};
use ggml_rs::{Backend, Context};
use serde_json::json;
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
    /// Set to a signal number (SIGINT, SIGTERM) to stop after the current step.
    pub stop: Option<Arc<AtomicI32>>,
}

/// What a finished (or interrupted) run reports.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    pub run_id: String,
    pub run_dir: std::path::PathBuf,
    pub steps: u64,
    pub final_loss: f32,
    pub val_loss: Option<f32>,
    /// `completed` or `interrupted`.
    pub reason: String,
    pub tokens_per_second: f64,
    pub wall_seconds: f64,
}

/// The backends of a run: the chosen device first (its f32 matrix products at
/// `precision` where it has the choice), the CPU last.
pub fn backends_for(device: &str, threads: usize, precision: MatmulPrecision) -> Result<Vec<Backend>> {
    ggml_rs::backend::load_default_backends();
    let cpu = Backend::cpu().map_err(|e| runtime(e.to_string()))?;
    cpu.set_n_threads(if threads == 0 { ggml_rs::backend::default_n_threads() } else { threads });
    let dev = device.trim().to_lowercase();
    if dev == "cpu" {
        return Ok(vec![cpu]);
    }
    let main = Backend::by_name(&dev).map_err(|e| input(format!("--device {device}: {e}")))?;
    if main.is_cpu() {
        return Ok(vec![cpu]);
    }
    main.set_matmul_precision(precision.ggml());
    Ok(vec![main, cpu])
}

/// How the weights start.
#[derive(Clone, Copy, Debug)]
pub enum Init<'p> {
    /// GPT-2-style random initialisation from the seed.
    Random,
    /// Random, then the token table (and lens) from a donor.
    Donor(&'p crate::donor::Donor),
}

/// What a run does, beyond its configuration.
#[derive(Clone, Debug)]
pub struct Plan<'p> {
    /// `from-scratch` or `warm-start` (recorded in events).
    pub recipe: &'static str,
    pub init: Init<'p>,
    /// Walk the corpus in order (with per-epoch shuffling) instead of random windows.
    pub stream: Option<bool>,
    /// Continue from this checkpoint's resume state.
    pub resume: Option<PathBuf>,
}

impl Plan<'_> {
    /// A new from-scratch run.
    pub fn from_scratch() -> Plan<'static> {
        Plan { recipe: "from-scratch", init: Init::Random, stream: None, resume: None }
    }
}

/// Train a new model on `corpus` as `cfg` says, writing the run into `run`.
pub fn from_scratch(cfg: &TrainConfig, corpus: &Corpus, run: &RunDir, opts: &RunOptions) -> Result<Outcome> {
    train(&Plan::from_scratch(), cfg, corpus, run, opts)
}

/// Set up the model, optimizer and graphs for `plan`, then run the loop.
pub fn train(plan: &Plan<'_>, cfg: &TrainConfig, corpus: &Corpus, run: &RunDir, opts: &RunOptions) -> Result<Outcome> {
    cfg.validate()?;
    let t = cfg.model.context;
    if corpus.train.len() < t + 1 {
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
    let backends = backends_for(&cfg.device, cfg.threads, cfg.matmul_precision)?;
    let device = backends[0].clone();

    // Weights, optimizer moments and constants: one context on the device.
    let wctx = Context::new(capacity(cfg.model.n_layers))?;
    let weights = Weights::new(&wctx, &cfg.model)?;
    let trainable: Vec<_> = weights.params().into_iter().filter(|p| p.trainable).map(|p| p.tensor).collect();
    for &p in &trainable {
        wctx.set_param(p)?;
    }
    let moments = AdamWState::new(&wctx, &trainable)?;
    let accumulators: Option<Vec<_>> = if opts.skip_nonfinite {
        Some(
            trainable
                .iter()
                .enumerate()
                .map(|(i, p)| wctx.new_tensor(ggml_rs::DType::F32, &p.shape())?.set_name(&format!("grad_acc.{i}")))
                .collect::<ggml_rs::Result<_>>()?,
        )
    } else {
        None
    };
    let consts = Consts::new(&wctx, t, cfg.batch, cfg.model.vocab)?;
    wctx.allocate(&device).map_err(|e| runtime(e.to_string()))?;
    consts.fill()?;
    init_weights(&weights, cfg.seed)?;
    if let Init::Donor(d) = plan.init {
        d.apply(&weights)?;
    }
    let mut sampler = match plan.stream {
        Some(shuffle) => Sampler::stream(cfg.seed, t, cfg.batch, shuffle),
        None => Sampler::random(cfg.seed, t, cfg.batch),
    };
    let mut start_step = 0;
    let mut opt_t = 0;
    if let Some(ck) = &plan.resume {
        let p = state::load(&state::state_path(ck), &weights, &moments)?;
        sampler.restore(&p.sampler, corpus.train.len()).map_err(|e| input(format!("{}: {e}", ck.display())))?;
        start_step = p.step;
        opt_t = p.opt_t;
        if start_step >= cfg.steps {
            return Err(input(format!("the run already completed {start_step} of {} steps; give a larger --steps to continue", cfg.steps)));
        }
    }

    let opt = OptSettings {
        adamw: AdamWConfig { lr: cfg.lr, betas: cfg.betas, eps: cfg.eps, weight_decay: cfg.weight_decay },
        grad_clip: (cfg.grad_clip > 0.0).then_some(cfg.grad_clip),
        skip_nonfinite: opts.skip_nonfinite,
    };
    // Compute contexts outlive every graph built in them.
    let cctx = Context::new(capacity(cfg.model.n_layers) * 2)?;
    let ectx = Context::new(capacity(cfg.model.n_layers))?;
    let mut train = TrainStep::new(&cctx, &weights, &moments, &consts, t, cfg.batch, opt, accumulators.as_deref(), &backends)
        .map_err(|e| runtime(format!("cannot build the training step: {e}")))?;
    train.optimizer().set_step_count(opt_t);
    let val_starts = eval_starts(corpus.val.len(), t, cfg.eval_windows);
    let eb = cfg.batch.min(val_starts.len()).max(1);
    let mut eval = if val_starts.is_empty() {
        None
    } else {
        Some(EvalStep::new(&ectx, &weights, &consts, t, eb, &backends).map_err(|e| runtime(e.to_string()))?)
    };

    let mut log = EventLog::open(&run.path.join("events.jsonl"))?;
    let m = &cfg.model;
    if plan.resume.is_none() {
        flow::write_flow(&run.path, train.graph())?;
        let config_toml = toml::to_string(cfg).map_err(|e| runtime(e.to_string()))?;
        write_atomic(&run.path.join("config.toml"), config_toml.as_bytes())?;
        log.emit(
            "run_start",
            json!({
                "schema": SCHEMA,
                "started_at": now_rfc3339(),
                "run_id": run.id,
                "phase": "train",
                "recipe": plan.recipe,
                "host": host_info(),
                "backend": { "kind": device.device().backend_name().to_lowercase(), "device": device.name(), "description": device.device().description() },
                "git": git_info(),
                "model": { "arch": m.arch.name(), "name": format!("toy-{}", cfg.preset.name()), "vocab": m.vocab, "d_model": m.d_model,
                           "n_layers": m.n_layers, "n_heads": m.n_heads, "n_kv": m.n_kv_heads, "d_head": m.d_head(), "d_ff": m.d_ff,
                           "n_params": m.n_params() },
                "config": { "context": t, "batch": cfg.batch, "steps": cfg.steps, "lr": cfg.lr, "min_lr": cfg.min_lr,
                            "warmup_steps": cfg.warmup_steps, "betas": [cfg.betas.0, cfg.betas.1], "eps": cfg.eps,
                            "weight_decay": cfg.weight_decay, "grad_clip": cfg.grad_clip, "seed": cfg.seed,
                            "matmul_precision": cfg.matmul_precision.name(),
                            "preset": cfg.preset.name(), "corpus": corpus.source.display().to_string(),
                            "train_tokens": corpus.train.len(), "val_tokens": corpus.val.len() },
            }),
        )?;
    } else {
        log.emit(
            "resume",
            json!({ "resumed_at": now_rfc3339(), "from_step": start_step, "steps": cfg.steps, "backend": { "device": device.name() } }),
        )?;
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
        log.emit("fallback", json!({ "device": device.name(), "n_nodes": fallbacks.len(), "ops": ops }))?;
    }
    let prov = |step| Provenance { run_id: run.id.clone(), step, name: format!("toy-{}-{}", m.arch.name(), cfg.preset.name()) };
    if opts.save_initial && plan.resume.is_none() {
        write_checkpoint(&run.checkpoint_path(0), &weights, corpus.tokenizer.as_ref(), &prov(0))?;
    }
    runner::run(runner::Loop {
        cfg,
        corpus,
        run,
        opts,
        log: &mut log,
        train: &mut train,
        eval: eval.as_mut(),
        val_starts: &val_starts,
        weights: &weights,
        moments: &moments,
        sampler: &mut sampler,
        start_step,
        prov: &prov,
    })
}
