//! `toy debug`: dumps for the PyTorch parity harness (`scripts/parity/`),
//! benchmarks, token ids for the llama.cpp tokenizer check, and chat data as
//! finetune masks it. Hidden from the main help.

use crate::cli::{BenchArgs, ChatMasksArgs, DebugArgs, DebugCommand, DumpArgs, TokenizeArgs};
use crate::error::{input, runtime, Result};
use crate::formats::checkpoint::{open_checkpoint, write_model};
use crate::formats::Provenance;
use crate::model::attention::Attention;
use crate::run::batches::Recorded;
use crate::train::backends_for;
use crate::train::step::{capacity, with_loaded, EvalStep, GradStep, LoadFor};
use ggml_rs::gguf::GgufWriter;
use ggml_rs::Context;

/// Peak resident memory of this process in bytes (Linux `VmHWM`), if known.
pub fn peak_rss() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    line.split_whitespace().nth(1)?.parse::<u64>().ok().map(|kb| kb * 1024)
}

/// `toy debug bench`'s device (`cpu` unless given) and the step's precision.
struct BenchDevice {
    name: String,
    threads: usize,
    dtype: crate::config::Dtype,
    precision: crate::config::MatmulPrecision,
}

impl BenchDevice {
    fn of(a: &crate::cli::DeviceArgs) -> BenchDevice {
        let name = a.device.clone().unwrap_or_else(|| "cpu".into());
        let dtype = crate::config::Dtype::resolve(a.dtype, a.matmul_precision.is_some(), &name);
        BenchDevice { threads: a.threads.unwrap_or(0), dtype, precision: a.matmul_precision.unwrap_or_default(), name }
    }
}

/// The run a `debug bench` times: the preset for its architecture (the
/// preset's, else `--arch`, else llama) and vocabulary, with the overrides.
fn bench_config(a: &BenchArgs, device: &str) -> Result<crate::config::TrainConfig> {
    let arch = a.preset.resolve_arch(a.arch)?;
    let vocab = a.vocab.or(a.preset.vocab()).unwrap_or(4096);
    if vocab < 2 {
        return Err(input(format!("--vocab {vocab}: a model needs at least 2 token ids")));
    }
    let mut cfg = crate::config::TrainConfig::from_preset(a.preset, arch, vocab);
    cfg.attention = a.device.attention.unwrap_or_else(|| crate::model::attention::Attention::default_for(device));
    if let Some(b) = a.batch {
        cfg.batch = b;
    }
    if let Some(t) = a.context {
        let max = crate::commands::setup::MAX_CONTEXT;
        if t > max {
            return Err(input(format!("--context {t} is larger than the maximum {max}")));
        }
        cfg.model.context = t;
    }
    cfg.device = device.to_string();
    cfg.validate()?;
    Ok(cfg)
}

/// With `--from`: the model `a.from` names, and `cfg` made its fine-tuning run
/// (its shape and weights, LoRA under `--lora-rank`, the context capped by the
/// model's), as `toy train finetune` makes it.
fn bench_base(a: &BenchArgs, cfg: &mut crate::config::TrainConfig) -> Result<Option<crate::formats::checkpoint::Checkpoint>> {
    use crate::commands::finetune;
    let Some(from) = &a.from else { return Ok(None) };
    // the refusal names --from, as finetune's does
    let path = crate::files::resolve_model(from).map_err(|e| crate::error::input(format!("--from {e}")))?;
    // What finetune takes: llama and qwen2 models (not an adapter), of the types it reads.
    let (ck, _) = finetune::open_base(&path)?;
    let base = &ck.config;
    let context = a.context.unwrap_or(cfg.model.context.min(base.context));
    finetune::check_context(context, base, &path)?;
    let lora = a.lora_rank.map(|rank| finetune::lora_on(base, rank, None, a.lora_targets.as_deref()));
    let note;
    (cfg.model, note) = finetune::finetune_model(&ck, cfg, context, lora);
    if let Some(note) = note {
        crate::note!("{note}");
    }
    cfg.recipe = crate::config::Recipe::Finetune;
    cfg.validate()?;
    Ok(Some(ck))
}

/// What `debug bench` measured: the timed steps' and their all-reduces'
/// milliseconds, and the last step's loss.
struct Timings {
    step_ms: Vec<f64>,
    allreduce_ms: Vec<f64>,
    last_loss: f32,
}

/// Run `total_steps` steps of `step` on random tokens, timing those after the first `warmup`.
fn time_steps(
    step: &mut crate::train::parallel::Trainer<'_>,
    cfg: &crate::config::TrainConfig,
    warmup: usize,
    total_steps: usize,
) -> Result<Timings> {
    use rand::{Rng, SeedableRng};
    let (n, vocab) = (cfg.model.context * cfg.batch, cfg.model.vocab as i32);
    let mut rng = rand::rngs::StdRng::seed_from_u64(0);
    let mut out = Timings { step_ms: Vec::new(), allreduce_ms: Vec::new(), last_loss: 0.0 };
    for i in 0..total_steps {
        let tokens: Vec<i32> = (0..n).map(|_| rng.random_range(0..vocab)).collect();
        let targets: Vec<i32> = (0..n).map(|_| rng.random_range(0..vocab)).collect();
        let t0 = std::time::Instant::now();
        out.last_loss = step.step(&tokens, &targets, cfg.lr)?.loss;
        if i >= warmup {
            out.step_ms.push(t0.elapsed().as_secs_f64() * 1e3);
            if let crate::train::parallel::Trainer::Parallel(p) = &*step {
                out.allreduce_ms.push(p.last_allreduce_s * 1e3);
            }
        }
    }
    if !out.last_loss.is_finite() {
        return Err(runtime(format!("the loss of the last step is not finite ({})", out.last_loss)));
    }
    Ok(out)
}

/// The median of `v`: the middle value, or the mean of the two middle values
/// for an even count (as Python's `statistics.median`, which the benchmark
/// scripts use for the anchors); 0 when empty.
fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => 0.0,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

/// `toy debug bench`: time training steps on random tokens and print one JSON object.
fn bench(a: &BenchArgs) -> Result<()> {
    use crate::train::step::OptSettings;
    use crate::train::{build_trainer, devices, Init, Plan, ReplicaState};
    use ggml_rs::optim::AdamWConfig;
    if a.steps == 0 {
        return Err(input("--steps must be at least 1"));
    }
    let Some(total_steps) = a.warmup.checked_add(a.steps) else {
        return Err(input(format!("--warmup {} + --steps {} is too large", a.warmup, a.steps)));
    };
    let dev = BenchDevice::of(&a.device);
    let mut cfg = bench_config(a, &dev.name)?;
    cfg.dtype = dev.dtype; // what the run would record (and what casts a frozen base's weights)
    let base = bench_base(a, &mut cfg)?;
    let plan = match &base {
        Some(ck) => Plan { init: Init::Model(ck), recipe: cfg.recipe, ..Plan::from_scratch() },
        None => Plan::from_scratch(),
    };
    let (t, b) = (cfg.model.context, cfg.batch);
    let devs = devices::parse(&dev.name)?;
    let n = devs.len();
    if b % n != 0 {
        return Err(input(format!("--batch {b} does not divide evenly over the {n} devices of --device {}", dev.name)));
    }
    dev.dtype.check_device(&dev.name, "--dtype")?;
    crate::error::set_oom_advice("use a smaller --batch, --context or --preset");
    let backends = devices::backends(&devs, dev.threads, dev.dtype.precision(dev.precision))?;
    let memory = crate::train::memory::DeviceMemory::start(&backends[0][0]);
    let wctxs = (0..n).map(|_| Context::new(capacity(cfg.model.n_layers))).collect::<ggml_rs::Result<Vec<_>>>()?;
    let cctxs = (0..n).map(|_| Context::new(capacity(cfg.model.n_layers) * 2)).collect::<ggml_rs::Result<Vec<_>>>()?;
    let mut states = Vec::with_capacity(n);
    for (wctx, bk) in wctxs.iter().zip(&backends) {
        states.push(ReplicaState::new(wctx, &cfg, &plan, &bk[0], n > 1)?);
    }
    let opt = OptSettings {
        adamw: AdamWConfig { lr: cfg.lr, betas: cfg.betas, eps: cfg.eps, weight_decay: cfg.weight_decay },
        grad_clip: Some(cfg.grad_clip),
    };
    let mut step = build_trainer(&cctxs, &states, &backends, t, b / n, opt)?;
    let times = time_steps(&mut step, &cfg, a.warmup, total_steps)?;
    let med = median(&times.step_ms);
    let graph = step.graph();
    let buffers: serde_json::Map<String, serde_json::Value> =
        graph.buffer_sizes().into_iter().map(|(k, v)| (k, serde_json::json!(v))).collect();
    let fallbacks: Vec<String> = graph.cpu_fallbacks().into_iter().map(|p| format!("{}:{}", p.op, p.name)).collect();
    crate::say!(
        "{}",
        serde_json::json!({
            "format": "toy/bench-v1", "preset": a.preset.name(), "arch": cfg.model.arch.name(), "device": backends[0][0].name(),
            "from": a.from, "lora_rank": a.lora_rank, "n_trainable": states[0].n_trainable(),
            "devices": devs, "allreduce": step.allreduce_kind().name(), "allreduce_ms_median": median(&times.allreduce_ms),
            "matmul_precision": dev.precision.name(), "dtype": dev.dtype.name(), "attention": cfg.attention.name(),
            "batch": b, "context": t, "vocab": cfg.model.vocab, "n_params": cfg.model.n_params(),
            "step_ms": times.step_ms, "median_ms": med, "tokens_per_step": t * b,
            "tokens_per_s": (t * b) as f64 / (med / 1e3).max(1e-12),
            "weights_bytes": wctxs[0].allocated_bytes(), "compute_bytes": buffers, "peak_rss_bytes": peak_rss(),
            "device_buffers_bytes": wctxs[0].allocated_bytes() + crate::train::memory::compute_bytes(&backends[0][0], graph),
            "device_used_bytes": memory.used_since_start(&backends[0][0]),
            "n_splits": graph.n_splits(), "cpu_fallbacks": fallbacks, "last_loss": times.last_loss,
        })
    )
}

/// `toy debug tokenize`: the ids of `--text` with the tokenizer of `model`,
/// written as little-endian i32 (with -1 after each line under `--lines`).
fn tokenize(a: &TokenizeArgs) -> Result<()> {
    let model = crate::files::resolve_model(&a.model)?;
    crate::files::check_out(&a.out, &[&model, &a.text], "the ids")?;
    crate::signals::remove_on_interrupt("debug", &a.out);
    let what = model.display();
    let file = ggml_rs::gguf::GgufFile::open(&model).map_err(|e| input(e.to_string()))?;
    crate::formats::checkpoint::refuse_state(&file, &model)?;
    let tok = crate::data::Tokenizer::read_gguf(&file)?.ok_or_else(|| input(format!("{what}: no tokenizer (tokenizer.ggml.*)")))?;
    let bytes = crate::files::read_regular(&a.text, "--text")?;
    let text = String::from_utf8(bytes)
        .map_err(|e| input(format!("{}: not UTF-8 text (invalid byte at offset {})", a.text.display(), e.utf8_error().valid_up_to())))?;
    let encode_whole = |t: &str| if a.special { tok.encode(t) } else { tok.encode_document(t) };
    let encode = |t: &str| crate::data::text::encode_in_pieces(t, crate::data::text::CHUNK_BYTES, encode_whole);
    let pieces: Vec<&str> = if a.lines { text.split_inclusive('\n').collect() } else { vec![text.as_str()] };
    let mut ids: Vec<i32> = Vec::new();
    for p in pieces {
        ids.extend(encode(p)?.into_iter().map(|i| i as i32));
        if a.lines {
            ids.push(-1);
        }
    }
    let out: Vec<u8> = ids.iter().flat_map(|i| i.to_le_bytes()).collect();
    crate::files::make_parent(&a.out)?;
    crate::files::write_atomic(&a.out, &out)?;
    crate::say!(
        "{}",
        serde_json::json!({ "format": "toy/debug-v1", "ids": ids.iter().filter(|&&i| i >= 0).count(), "bytes": text.len(), "out": a.out })
    )
}

/// `toy debug chat-masks`: the first conversations of a chat corpus as
/// `toy train finetune` renders them for a model, trained tokens between ⟦ ⟧
/// (or, with `--json`, their ids and flags).
fn chat_masks(a: &ChatMasksArgs) -> Result<()> {
    use crate::data::chat_examples::{load_chat, ChatModel};
    let ck = open_checkpoint(&crate::files::resolve_model(&a.model)?)?; // a run folder: its weights/latest
    let tok = ck.tokenizer.as_ref().ok_or_else(|| input(format!("{}: the model carries no tokenizer", a.model.display())))?;
    let model = ChatModel { file: &ck.file, tok };
    let chat = load_chat(&a.corpus, crate::data::chat_records::DataFormat::Chat, &model, 0.0, 0)?.unwrap_or_default();
    for (i, ex) in chat.train.iter().take(a.n).enumerate() {
        if a.json {
            crate::say!("{}", serde_json::json!({ "conversation": i + 1, "ids": ex.ids, "trained": ex.trained }))?;
            continue;
        }
        let trained = ex.trained.iter().skip(1).filter(|&&b| b).count();
        crate::say!("conversation {}: {} tokens, {trained} trained", i + 1, ex.ids.len())?;
        let mut text = String::new();
        let mut start = 0;
        while start < ex.ids.len() {
            let on = ex.trained[start];
            let end = (start..ex.ids.len()).find(|&j| ex.trained[j] != on).unwrap_or(ex.ids.len());
            let piece = tok.decode(&ex.ids[start..end])?;
            text += &if on { format!("⟦{piece}⟧") } else { piece };
            start = end;
        }
        crate::say!("{text}")?;
    }
    Ok(())
}

/// Run a `toy debug` subcommand.
pub fn run(args: &DebugArgs) -> Result<()> {
    match &args.command {
        DebugCommand::Bench(a) => bench(a),
        DebugCommand::Tokenize(a) => tokenize(a),
        DebugCommand::ChatMasks(a) => chat_masks(a),
        DebugCommand::DumpGrads(a) => dump(a, Dump::Grads),
        DebugCommand::DumpLogits(a) => dump(&a.dump, if a.stored_types { Dump::StoredLogits } else { Dump::Logits }),
    }
}

/// What `toy debug dump-*` writes.
#[derive(Clone, Copy, PartialEq)]
enum Dump {
    /// dump-grads: the loss and every parameter's gradient.
    Grads,
    /// dump-logits: the logits of the training graph (a compact base dequantized).
    Logits,
    /// dump-logits --stored-types: the logits of the decoding graph.
    StoredLogits,
}

/// `toy debug dump-grads` or `dump-logits` (`what`): the loss and every
/// parameter's gradient, or the logits, for one recorded batch, as GGUF.
fn dump(a: &DumpArgs, what: Dump) -> Result<()> {
    let model = crate::files::resolve_model(&a.model)?;
    crate::files::check_out_gguf(&a.out, &[&model, &a.batches], "the dump")?;
    crate::signals::remove_on_interrupt("debug", &a.out);
    let ck = open_checkpoint(&model)?;
    let rec = Recorded::open(&a.batches)?;
    let b = rec.batch(a.step)?;
    check_ids(a, &b.tokens, &b.targets, ck.config.vocab)?;
    let (t, nb) = (rec.layout.window - 1, rec.layout.batch);
    if t > ck.config.context && ck.config.arch == crate::model::Arch::Gpt2 {
        return Err(input(format!("windows of {t} tokens exceed the model's context {}", ck.config.context)));
    }
    let backends = backends_for(&a.device, a.threads, a.matmul_precision.ggml())?;
    if what == Dump::StoredLogits {
        return with_loaded(&ck, &backends[0], (t, nb), Attention::Reference, LoadFor::Decode, |w, consts| {
            let cctx = Context::new(capacity(ck.config.n_layers))?;
            let mut step = EvalStep::new(&cctx, w, consts, t, nb, &backends)?;
            let loss = step.loss(&b.tokens, &b.targets)?;
            write_logits(a, loss, step.logits())
        });
    }
    with_loaded(&ck, &backends[0], (t, nb), Attention::Reference, LoadFor::Gradients, |w, consts| {
        let cctx = Context::new(capacity(ck.config.n_layers) * 2)?;
        let mut gs = GradStep::new(&cctx, w, consts, t, nb, &backends)?;
        let loss = gs.compute(&b.tokens, &b.targets)?;
        if !loss.is_finite() {
            return Err(runtime(format!("the loss of batch {} is not finite ({loss}); not writing {}", a.step, a.out.display())));
        }
        if what == Dump::Grads {
            let prov = Provenance {
                run_id: "debug".into(),
                step: a.step as u64,
                name: "toy-grads".into(),
                save_id: String::new(),
                lora_base: String::new(),
                lora_base_sha256: String::new(),
                base_keys: Vec::new(),
            };
            let src = |p: ggml_rs::Tensor<'_>| -> Result<Vec<f32>> {
                let g = gs.grad(p).ok_or_else(|| input(format!("no gradient for {}", p.name())))?;
                Ok(g.read::<f32>()?)
            };
            if ck.config.lora.is_some() {
                // A LoRA model: the adapters' gradients, under the adapters' names.
                let mut g = GgufWriter::new();
                g.set("toy.loss", loss)?;
                for ad in w.adapters() {
                    for t in [ad.a, ad.b] {
                        let v = src(t)?;
                        if v.iter().any(|x| !x.is_finite()) {
                            return Err(runtime(format!("the gradient of {} is not finite; not writing {}", t.name(), a.out.display())));
                        }
                        g.add_tensor_data(&t.name(), &t.ne(), &v)?;
                    }
                }
                crate::files::make_parent(&a.out)?;
                g.write(&a.out)?;
            } else {
                crate::files::make_parent(&a.out)?;
                write_model(&a.out, w, None, &prov, &src)?;
            }
            crate::say!("{}", serde_json::json!({ "format": "toy/debug-v1", "loss": loss, "out": a.out }))?;
        } else {
            write_logits(a, loss, gs.logits())?;
        }
        Ok(())
    })
}

/// Refuse recorded ids the model cannot read: tokens outside `[0, vocab)`,
/// targets outside `[-1, vocab)` (−1: not trained).
fn check_ids(a: &DumpArgs, tokens: &[i32], targets: &[i32], vocab: usize) -> Result<()> {
    let bad = |ids: &[i32], lo: i32| ids.iter().position(|&x| x < lo || x as i64 >= vocab as i64);
    for (what, ids, lo) in [("token", tokens, 0), ("target", targets, -1)] {
        if let Some(i) = bad(ids, lo) {
            return Err(input(format!(
                "{}: step {}: {what} id {} at position {i} is outside the model's vocabulary of {vocab}",
                a.batches.display(),
                a.step,
                ids[i]
            )));
        }
    }
    Ok(())
}

/// Write `toy.loss` and the logits `[V, T·B]` of a dump as GGUF (refusing
/// non-finite logits), and print the summary line.
fn write_logits(a: &DumpArgs, loss: f32, logits: ggml_rs::Tensor<'_>) -> Result<()> {
    if !loss.is_finite() || logits.read::<f32>()?.iter().any(|x| !x.is_finite()) {
        return Err(runtime(format!("the loss or logits are not finite; not writing {}", a.out.display())));
    }
    let mut g = GgufWriter::new();
    g.set("toy.loss", loss)?;
    g.add_tensor("logits", logits)?;
    crate::files::make_parent(&a.out)?;
    g.write(&a.out)?;
    crate::say!("{}", serde_json::json!({ "format": "toy/debug-v1", "loss": loss, "out": a.out }))
}

#[cfg(test)]
mod tests {
    #[test]
    fn median_of_odd_and_even_counts() {
        assert_eq!(super::median(&[]), 0.0);
        assert_eq!(super::median(&[3.0, 1.0, 2.0]), 2.0);
        assert_eq!(super::median(&[4.0, 1.0, 3.0, 2.0]), 2.5);
    }
}
