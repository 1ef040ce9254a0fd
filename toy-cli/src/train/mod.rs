//! Training recipes. `from_scratch` trains a freshly initialised model on
//! random windows of a corpus; every recipe shares the loop in [`run_loop`].

pub mod batches;
pub mod schedule;
pub mod step;

use crate::checkpoint::{write_checkpoint, Provenance};
use crate::config::TrainConfig;
use crate::data::Corpus;
use crate::error::{input, runtime, Error, Result};
use crate::model::{init::init_weights, Weights};
use crate::run::events::{now_rfc3339, EventLog, SCHEMA};
use crate::run::{flow, git_info, host_info, plot, write_atomic, RunDir};
use batches::{batch_at, eval_starts, RandomWindows};
use ggml_rs::optim::{AdamWConfig, AdamWState};
use ggml_rs::{Backend, Context};
use schedule::Cosine;
use serde_json::json;
use std::sync::atomic::{AtomicI32, Ordering};
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

/// The backends of a run: the chosen device first, the CPU last.
pub fn backends_for(device: &str, threads: usize) -> Result<Vec<Backend>> {
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
    Ok(vec![main, cpu])
}

/// Train a new model on `corpus` as `cfg` says, writing the run into `run`.
pub fn from_scratch(cfg: &TrainConfig, corpus: &Corpus, run: &RunDir, opts: &RunOptions) -> Result<Outcome> {
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
    let backends = backends_for(&cfg.device, cfg.threads)?;
    let device = backends[0].clone();

    // Weights, optimizer moments and constants: one context on the device.
    let wctx = Context::new(capacity(cfg.model.n_layers))?;
    let weights = Weights::new(&wctx, &cfg.model)?;
    let trainable: Vec<_> = weights.params().into_iter().filter(|p| p.trainable).map(|p| p.tensor).collect();
    for &p in &trainable {
        wctx.set_param(p)?;
    }
    let state = AdamWState::new(&wctx, &trainable)?;
    let consts = Consts::new(&wctx, t, cfg.model.vocab)?;
    wctx.allocate(&device).map_err(|e| runtime(e.to_string()))?;
    consts.fill()?;
    init_weights(&weights, cfg.seed)?;

    let opt = OptSettings {
        adamw: AdamWConfig { lr: cfg.lr, betas: cfg.betas, eps: cfg.eps, weight_decay: cfg.weight_decay },
        grad_clip: (cfg.grad_clip > 0.0).then_some(cfg.grad_clip),
    };
    // Compute contexts outlive every graph built in them.
    let cctx = Context::new(capacity(cfg.model.n_layers) * 2)?;
    let ectx = Context::new(capacity(cfg.model.n_layers))?;
    let mut train = TrainStep::new(&cctx, &weights, &state, &consts, t, cfg.batch, opt, &backends).map_err(|e| runtime(format!("cannot build the training step: {e}")))?;
    let val_starts = eval_starts(corpus.val.len(), t, cfg.eval_windows);
    let eb = cfg.batch.min(val_starts.len()).max(1);
    let mut eval = if val_starts.is_empty() { None } else { Some(EvalStep::new(&ectx, &weights, &consts, t, eb, &backends).map_err(|e| runtime(e.to_string()))?) };

    let mut log = EventLog::open(&run.path.join("events.jsonl"))?;
    flow::write_flow(&run.path, train.graph())?;
    let config_toml = toml::to_string(cfg).map_err(|e| runtime(e.to_string()))?;
    write_atomic(&run.path.join("config.toml"), config_toml.as_bytes())?;
    let m = &cfg.model;
    log.emit(
        "run_start",
        json!({
            "schema": SCHEMA,
            "started_at": now_rfc3339(),
            "run_id": run.id,
            "phase": "train",
            "recipe": "from-scratch",
            "host": host_info(),
            "backend": { "kind": device.device().backend_name().to_lowercase(), "device": device.name(), "description": device.device().description() },
            "git": git_info(),
            "model": { "arch": m.arch.name(), "name": format!("toy-{}", cfg.preset.name()), "vocab": m.vocab, "d_model": m.d_model,
                       "n_layers": m.n_layers, "n_heads": m.n_heads, "n_kv": m.n_kv_heads, "d_head": m.d_head(), "d_ff": m.d_ff,
                       "n_params": m.n_params() },
            "config": { "context": t, "batch": cfg.batch, "steps": cfg.steps, "lr": cfg.lr, "min_lr": cfg.min_lr,
                        "warmup_steps": cfg.warmup_steps, "betas": [cfg.betas.0, cfg.betas.1], "eps": cfg.eps,
                        "weight_decay": cfg.weight_decay, "grad_clip": cfg.grad_clip, "seed": cfg.seed,
                        "preset": cfg.preset.name(), "corpus": corpus.source.display().to_string(),
                        "train_tokens": corpus.train.len(), "val_tokens": corpus.val.len() },
        }),
    )?;
    let fallbacks = train.graph().cpu_fallbacks();
    if !fallbacks.is_empty() {
        let ops: Vec<String> = fallbacks.iter().map(|p| p.op.clone()).collect::<std::collections::BTreeSet<_>>().into_iter().collect();
        eprintln!("toy train: warning: {} graph nodes run on the CPU because {} cannot run them ({})", fallbacks.len(), device.name(), ops.join(", "));
        log.emit("fallback", json!({ "device": device.name(), "n_nodes": fallbacks.len(), "ops": ops }))?;
    }
    let prov = |step| Provenance { run_id: run.id.clone(), step, name: format!("toy-{}-{}", m.arch.name(), cfg.preset.name()) };
    if opts.save_initial {
        write_checkpoint(&run.checkpoint_path(0), &weights, corpus.tokenizer.as_ref(), &prov(0))?;
    }

    let mut ctx = LoopState {
        cfg,
        corpus,
        run,
        opts,
        log: &mut log,
        train: &mut train,
        eval: eval.as_mut(),
        val_starts: &val_starts,
        weights: &weights,
    };
    run_loop(&mut ctx, &prov)
}

struct LoopState<'l, 'a> {
    cfg: &'l TrainConfig,
    corpus: &'l Corpus,
    run: &'l RunDir,
    opts: &'l RunOptions,
    log: &'l mut EventLog,
    train: &'l mut TrainStep<'a>,
    eval: Option<&'l mut EvalStep<'a>>,
    val_starts: &'l [usize],
    weights: &'l Weights<'a>,
}

impl LoopState<'_, '_> {
    fn val_loss(&mut self) -> Result<Option<f32>> {
        let Some(ev) = self.eval.as_deref_mut() else { return Ok(None) };
        let (t, b) = (ev.t, ev.b);
        let mut sum = 0f64;
        let mut n = 0;
        for chunk in self.val_starts.chunks_exact(b) {
            let bt = batch_at(&self.corpus.val, chunk, t);
            sum += ev.loss(&bt.tokens, &bt.targets)? as f64;
            n += 1;
        }
        Ok((n > 0).then(|| (sum / n as f64) as f32))
    }
}

fn run_loop(s: &mut LoopState<'_, '_>, prov: &dyn Fn(u64) -> Provenance) -> Result<Outcome> {
    let cfg = s.cfg;
    let t = cfg.model.context;
    let sched = Cosine { lr: cfg.lr, min_lr: cfg.min_lr, warmup_steps: cfg.warmup_steps.min(cfg.steps), steps: cfg.steps };
    let mut sampler = RandomWindows::new(cfg.seed, t, cfg.batch);
    let mut recorder = if s.opts.record_batches { Some(batches::Recorder::create(&s.run.path, t, cfg.batch)?) } else { None };
    let mut train_curve = Vec::new();
    let mut val_curve = Vec::new();
    let bar = if s.opts.progress && !s.opts.quiet {
        let pb = indicatif::ProgressBar::new(cfg.steps);
        pb.set_style(
            indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} {msg} [{elapsed_precise} < {eta_precise}]").unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        Some(pb)
    } else {
        None
    };
    let say = |line: String| {
        if s.opts.quiet {
            return;
        }
        match &bar {
            Some(pb) => pb.println(line),
            None => println!("{line}"),
        }
    };

    let v0 = s.val_loss()?;
    if let Some(v) = v0 {
        s.log.emit("eval", json!({ "phase": "train", "step": 0, "val_loss": v }))?;
        val_curve.push((0, v));
        say(format!("step 0: val_loss={v}"));
    }
    let start = std::time::Instant::now();
    let mut last_loss = f32::NAN;
    let mut last_val = v0;
    let mut done = 0u64;
    let mut reason = "completed";
    let mut saved_at = None;
    for step in 1..=cfg.steps {
        let t0 = std::time::Instant::now();
        let starts = sampler.next_starts(s.corpus.train.len());
        let b = batch_at(&s.corpus.train, &starts, t);
        if let Some(r) = recorder.as_mut() {
            r.record(&s.corpus.train, &starts, t + 1)?;
        }
        let lr = sched.at(step);
        let st = s.train.step(&b.tokens, &b.targets, lr)?;
        let wall_us = t0.elapsed().as_micros() as u64;
        done = step;
        last_loss = st.loss;
        if !st.loss.is_finite() || st.grad_norm.is_some_and(|g| !g.is_finite()) {
            s.log.emit("run_end", json!({ "ended_at": now_rfc3339(), "reason": "errored", "final_step": step, "final_loss": st.loss, "exit_code": 1 }))?;
            return Err(runtime(format!("the loss became non-finite ({}) at step {step}; no checkpoint of these weights was written (try a lower --lr)", st.loss)));
        }
        let mut ev = json!({ "phase": "train", "step": step, "loss": st.loss, "lr": lr, "tokens": cfg.tokens_per_step(), "wall_us": wall_us });
        if let Some(g) = st.grad_norm {
            ev["grad_norm"] = json!(g);
        }
        s.log.emit("step", ev)?;
        train_curve.push((step, st.loss));
        if let Some(pb) = &bar {
            let tps = (step * cfg.tokens_per_step()) as f64 / start.elapsed().as_secs_f64().max(1e-9);
            pb.set_position(step);
            pb.set_message(format!("loss {:.4} · {:.0} tok/s", st.loss, tps));
        }
        if cfg.log_every > 0 && (step % cfg.log_every == 0 || step == cfg.steps) {
            say(format!("step {step}: loss={}", st.loss));
        }
        let stop = s.opts.stop.as_ref().map(|f| f.load(Ordering::SeqCst)).unwrap_or(0);
        let last = step == cfg.steps || stop != 0;
        if (cfg.eval_every > 0 && step % cfg.eval_every == 0) || last {
            if let Some(v) = s.val_loss()? {
                s.log.emit("eval", json!({ "phase": "train", "step": step, "val_loss": v }))?;
                val_curve.push((step, v));
                last_val = Some(v);
                say(format!("step {step}: val_loss={v}"));
            }
        }
        if (cfg.save_every > 0 && step % cfg.save_every == 0) || last {
            let path = s.run.checkpoint_path(step);
            write_checkpoint(&path, s.weights, s.corpus.tokenizer.as_ref(), &prov(step))?;
            s.run.set_latest(step)?;
            s.log.emit("checkpoint", json!({ "step": step, "path": format!("weights/step_{step}.gguf") }))?;
            saved_at = Some(step);
        }
        if stop != 0 {
            reason = "interrupted";
            break;
        }
    }
    if let Some(pb) = &bar {
        pb.finish_and_clear();
    }
    let wall = start.elapsed().as_secs_f64();
    let tps = (done * cfg.tokens_per_step()) as f64 / wall.max(1e-9);
    let code = match reason {
        "interrupted" => s.opts.stop.as_ref().map(|f| 128 + f.load(Ordering::SeqCst)).unwrap_or(130),
        _ => 0,
    };
    s.log.emit(
        "run_end",
        json!({ "ended_at": now_rfc3339(), "reason": reason, "final_step": done, "final_loss": last_loss, "val_loss": last_val,
                "checkpoint_step": saved_at, "tokens_per_second": tps, "wall_seconds": wall, "exit_code": code }),
    )?;
    let title = format!("{} — {} {}", s.run.id, cfg.model.arch.name(), cfg.preset.name());
    plot::plot_losses(&s.run.path.join("loss.svg"), &title, &train_curve, &val_curve)?;
    let out = Outcome {
        run_id: s.run.id.clone(),
        run_dir: s.run.path.clone(),
        steps: done,
        final_loss: last_loss,
        val_loss: last_val,
        reason: reason.into(),
        tokens_per_second: tps,
        wall_seconds: wall,
    };
    if reason == "interrupted" {
        let sig = s.opts.stop.as_ref().map(|f| f.load(Ordering::SeqCst)).unwrap_or(2);
        say(format!("interrupted at step {done}; checkpoint weights/step_{done}.gguf written"));
        return Err(Error::Interrupted(sig));
    }
    Ok(out)
}
