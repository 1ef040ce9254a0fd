//! `toy train finetune --from MODEL.gguf`: every weight of an existing llama
//! or qwen2 GGUF (ours or llama.cpp-converted) trained further on a corpus
//! tokenized with the model's own tokenizer, or LoRA adapters on it;
//! `--freeze` keeps parameters fixed by name.

use super::setup::{dedup_targets, finish, model_corpus, record_corpus, resolve, run_dir, Start};
use crate::cli::TrainArgs;
use crate::config::{Recipe, Sampling};
use crate::data::chat_examples::ChatModel;
use crate::data::chat_records::DataFormat;
use crate::data::corpus::GIVE_RAW_TEXT;
use crate::data::tokenizer::Tokenizer;
use crate::error::{input, Result};
use crate::formats::checkpoint::{matrix_dtype, open_model, Checkpoint, BASE_TYPES};
use crate::model::lora::LoraConfig;
use crate::model::Arch;
use crate::train::{train, Init, Outcome, Plan, RunOptions};
use ggml_rs::gguf::GgufFile;
use std::path::Path;

/// Open the base model at `path`: a llama or qwen2 GGUF whose every tensor is
/// of one of [`BASE_TYPES`] and matches its metadata, with a tokenizer this
/// program can run.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming the file: not a GGUF, not
/// llama or qwen2, a tensor type outside [`BASE_TYPES`], a shape that
/// contradicts the metadata, no or an unsupported tokenizer.
pub fn open_base(path: &Path) -> Result<(Checkpoint, Tokenizer)> {
    let p = path.display();
    if path.is_file() && GgufFile::open(path).is_ok_and(|f| crate::formats::adapter::is_adapter(&f)) {
        return Err(input(format!("--from {p}: a LoRA adapter, not a model; merge it first (toy export merge)")));
    }
    let ck = open_model(path).map_err(|e| input(format!("--from {e}")))?;
    if !matches!(ck.config.arch, Arch::Llama | Arch::Qwen2) {
        return Err(input(format!("--from {p}: finetune takes llama and qwen2 models, this one is {}", ck.config.arch.name())));
    }
    if let Some(t) = ck.file.tensors().iter().find(|t| !BASE_TYPES.contains(&t.dtype)) {
        let types: Vec<&str> = BASE_TYPES.iter().map(|t| t.name()).collect();
        return Err(input(format!("--from {p}: tensor {} is {}; toy fine-tunes models of types {}", t.name, t.dtype, types.join(", "))));
    }
    let tok = ck.tokenizer.clone().ok_or_else(|| input(format!("--from {p}: the model carries no tokenizer (tokenizer.ggml.*)")))?;
    Ok((ck, tok))
}

/// Finetune's context when neither --context nor --preset gives one: the
/// model's own, at most this (unsloth's and TRL's usual 1024).
pub const FINETUNE_CONTEXT: usize = 1024;

/// Finetune's context when neither --context nor a preset gives one: the
/// model's own up to [`FINETUNE_CONTEXT`]; for chat data that is not packed
/// (one conversation a window, padded), no more than its longest conversation
/// needs, rounded up to a multiple of 64, with a note to print once the run
/// starts (conversations of 40 tokens in windows of 1024 would make a step 25×
/// the work).
fn default_context(base: usize, corpus: &crate::data::Corpus, pack: bool) -> (usize, Option<String>) {
    let cap = base.min(FINETUNE_CONTEXT);
    let Some(chat) = corpus.chat.as_ref().filter(|_| !pack) else { return (cap, None) };
    // (not those with no trained token within `cap`: left out at any window, they need none)
    let within = |e: &&crate::data::chat_examples::Example| crate::train::chat_windows::trains_within(e, cap);
    let lens: Vec<usize> = chat.train.iter().chain(&chat.val).filter(within).map(|e| e.ids.len()).collect();
    let (longest, over) = crate::train::chat_windows::sizing_length(&lens, cap);
    let fit = longest.div_ceil(64).max(1) * 64;
    if fit < cap {
        // Each conversation's window holds `fit` inputs, its own tokens first.
        let filled: usize = lens.iter().map(|&n| n.saturating_sub(1).min(fit)).sum();
        let padding = 100 - (100 * filled).div_ceil(fit * lens.len().max(1));
        let advice = if padding >= 50 {
            // the figure is the chat summary's, counted over the training windows
            "most of each window is padding: --pack fills them; --context to change".to_string()
        } else {
            "--context to change, --pack to fill windows".to_string()
        };
        let left_out = match chat.train.len() + chat.val.len() - lens.len() {
            0 => String::new(),
            1 => format!(", not counting 1 left out (no trained token within {cap} tokens)"),
            d => format!(", not counting {d} left out (no trained token within {cap} tokens)"),
        };
        let note = match over {
            0 => format!("note: context {fit}: the longest conversation is {longest} tokens{left_out} ({advice})"),
            k => format!(
                "note: context {fit}: the longest conversation within {cap} tokens is {longest}; {k} of {} are longer and cut to the window{left_out} ({advice})",
                lens.len()
            ),
        };
        return (fit, Some(note));
    }
    (cap, None)
}

/// Finetune's peak learning rate when neither `--lr` nor toy.toml gives one:
/// LoRA adapters take unsloth's and PEFT's usual 2e-4; every weight of a
/// trained model, TRL's `SFTConfig` default 2e-5 (the from-scratch 1e-3 undoes
/// what the model knows within a few steps).
pub fn default_lr(lora: bool) -> f32 {
    if lora {
        2e-4
    } else {
        2e-5
    }
}

/// The note for a `--preset` (given on the command line) whose model shape is
/// not that of the base `base`: finetune keeps the model's shape and takes only
/// the preset's batch and context (as `debug bench --from` does).
fn preset_note(preset: Option<crate::config::Preset>, base: &crate::model::ModelConfig, batch: usize, context: usize) -> Option<String> {
    let p = preset?;
    let (d, h, f, l, preset_context, _) = p.shape();
    let capped = if context < preset_context { format!(": the preset's {preset_context}, capped by the model's") } else { String::new() };
    ((d, h, f, l) != (base.d_model, base.n_heads, base.d_ff, base.n_layers)).then(|| {
        format!(
            "note: --preset {} gives the batch ({batch}) and the context ({context}{capped}); the model keeps its own shape (d_model {}, {} layers, {} heads, d_ff {})",
            p.name(),
            base.d_model,
            base.n_layers,
            base.n_heads,
            base.d_ff
        )
    })
}

/// Refuse flags that do not apply to what `corpus` holds: `--pack` and
/// `--data-format chat` to text (the embedded corpus), `--text-field` to chat data.
fn check_chat_flags(a: &TrainArgs, corpus: &crate::data::Corpus) -> Result<()> {
    let src = corpus.source.display();
    match &corpus.chat {
        None if a.data.pack => {
            Err(input(format!("--pack packs conversations; {src} holds text, which is cut into windows end to end anyway")))
        }
        Some(_) if a.data.text_field.is_some() => Err(input(format!("--text-field applies to text records; {src} holds chat records"))),
        None if a.data.data_format == Some(DataFormat::Chat) => {
            Err(input(format!("--data-format chat: {src} is text; give --corpus with chat records (JSON Lines)")))
        }
        _ => Ok(()),
    }
}

/// Refuse the flags finetune does not take: the model's shape (it is the
/// base's, at `path`) and the warm-start recipe's.
fn check_flags(a: &TrainArgs, path: &Path) -> Result<()> {
    let given = a.shape.given();
    if !given.is_empty() {
        return Err(input(format!("{}: the model's shape comes from --from {}", given.join(", "), path.display())));
    }
    if a.warm.given().iter().any(|f| f != "--train-table") {
        return Err(input("--donor, --init, --match-by, --lens-init, --donor-width and --shuffle belong to the warm-start recipe"));
    }
    Ok(())
}

/// The LoRA adapters `a` asks for on `base` (`--lora-rank`), or none.
fn lora_config(a: &TrainArgs, base: &crate::model::ModelConfig) -> Result<Option<LoraConfig>> {
    let f = &a.finetune;
    let lora = match (f.lora_rank, f.lora_alpha.is_some() || f.lora_targets.is_some()) {
        (Some(rank), _) => Some(lora_on(base, rank, f.lora_alpha, f.lora_targets.as_deref())),
        (None, true) => return Err(input("--lora-alpha and --lora-targets need --lora-rank")),
        (None, false) => None,
    };
    if lora.is_some() && a.optim.freeze.is_some() {
        return Err(input("--freeze applies to full fine-tuning; with --lora-rank the base is frozen already"));
    }
    Ok(lora)
}

/// Adapters of `rank` on `base` (`--lora-rank`): alpha the rank unless given,
/// `targets` (deduplicated; PEFT's names such as `q_proj` taken for ours,
/// `all-linear` for every matrix) else the architecture's default ones.
pub(crate) fn lora_on(base: &crate::model::ModelConfig, rank: usize, alpha: Option<f32>, targets: Option<&[String]>) -> LoraConfig {
    let default = || base.arch.table().default_lora_targets().into_iter().map(String::from).collect::<Vec<_>>();
    LoraConfig { rank, alpha: alpha.unwrap_or(rank as f32), targets: targets.map_or_else(default, |t| lora_targets(base.arch, t)) }
}

/// The matrices `--lora-targets t` names on `arch`: every one of its table's for
/// `all-linear`, else `t` deduplicated with PEFT's names taken for ours.
pub(crate) fn lora_targets(arch: crate::model::Arch, t: &[String]) -> Vec<String> {
    match t {
        [all] if all == "all-linear" => arch.table().lora_targets().into_iter().map(String::from).collect(),
        _ => dedup_targets(t),
    }
}

/// Refuse a `context` the base at `path` cannot take (0, or above its own).
pub(crate) fn check_context(context: usize, base: &crate::model::ModelConfig, path: &Path) -> Result<()> {
    if context == 0 || context > base.context {
        return Err(input(format!("--context {context}: the model at {} takes 1 to {} tokens", path.display(), base.context)));
    }
    Ok(())
}

/// The model a finetune run of `a` trains: the base `ck` at `context` tokens,
/// with `lora` adapters on its matrices kept in their own type, else every
/// weight in f32; `cfg` resolved from `a` gives `--freeze`.
pub(crate) fn finetune_model(
    ck: &Checkpoint,
    cfg: &crate::config::TrainConfig,
    context: usize,
    lora: Option<LoraConfig>,
) -> (crate::model::ModelConfig, Option<String>) {
    let (base_dtype, base_dtype_except) = matrix_dtype(&ck.file, &ck.config);
    // matrix_dtype says None when every matrix is f32 already.
    let (base_dtype, base_dtype_except, note) = match (&lora, base_dtype) {
        (Some(_), kept) => (kept, base_dtype_except, None),
        (None, kept) => {
            let note = kept
                .map(|t| format!("note: the base's matrices are {t}; full fine-tuning trains them in f32 (--lora-rank keeps them {t})"));
            (None, Default::default(), note)
        }
    };
    let freeze = cfg.model.freeze.clone();
    (crate::model::ModelConfig { context, freeze, lora, base_dtype, base_dtype_except, ..ck.config.clone() }, note)
}

/// Run the finetune recipe for `a`.
pub fn run(a: &TrainArgs, opts: &RunOptions, how: Start) -> Result<Outcome> {
    let from = a.finetune.from.clone().ok_or_else(|| input("finetune needs --from MODEL.gguf"))?;
    let path = crate::files::resolve_model(&from).map_err(|e| input(format!("--from {e}")))?; // a run folder: its weights/latest
    check_flags(a, &path)?;
    // A taken --out is said before the base is loaded or the corpus tokenized.
    if let (Some(out), false) = (&a.out, how.restart) {
        crate::run::RunDir::check_new(out)?;
    }
    // Nothing is written before the run folder: a signal ends the process at once.
    let preparing = crate::signals::preparing("loading the base model");
    let (ck, tok) = open_base(&path)?;
    let base = &ck.config;
    let text_field = a.data.text_field.as_deref().unwrap_or("text");
    let format = a.data.data_format.unwrap_or_default();
    let model = ChatModel { file: &ck.file, tok: &tok };
    let corpus = model_corpus(a.data.corpus.as_deref(), &model, base.vocab, text_field, format, GIVE_RAW_TEXT)?;
    check_chat_flags(a, &corpus)?;
    let lora = lora_config(a, base)?;
    let mut args = a.clone();
    // The base's arch, unless a preset of another arch gives the batch and
    // context (its arch is resolve()'s only; the model is the base's below).
    let other_arch = a.batch.preset.and_then(|p| p.arch()).is_some_and(|p| p != base.arch);
    (args.shape.arch, args.batch.context) = ((!other_arch).then_some(base.arch), None);
    // resolve derives --min-lr from the learning rate
    args.optim.lr = args.optim.lr.or(Some(default_lr(lora.is_some())));
    // --batch and --grad-accum are checked against the finetune's own context,
    // below, not the preset's that resolve() knows of.
    (args.batch.batch, args.batch.grad_accum) = (None, None);
    let mut cfg = resolve(&args, base.vocab)?;
    (cfg.batch, cfg.grad_accum) = (a.batch.batch.unwrap_or(cfg.batch), a.batch.grad_accum.unwrap_or(cfg.grad_accum));
    // --context, else the preset's (flag or toy.toml), else the model's own up to
    // FINETUNE_CONTEXT (SmolLM2's 8192 would be a slow first run), or what chat data needs.
    // (without --context, default_context says what it picked, printed once the run starts)
    let (context, note) = match (a.batch.context, a.batch.preset) {
        (Some(c), _) => (c, None),
        (None, Some(_)) => (cfg.model.context.min(base.context), None),
        (None, None) => default_context(base.context, &corpus, a.data.pack),
    };
    check_context(context, base, &path)?;
    let shape_note = preset_note(how.cli_preset, base, cfg.batch, context);
    let dequantized;
    (cfg.model, dequantized) = finetune_model(&ck, &cfg, context, lora);
    cfg.validate()?;
    cfg.recipe = Recipe::Finetune;
    cfg.preset = a.batch.preset; // the base gives the shape; a preset, if any, the batch and context
    cfg.from = Some(std::fs::canonicalize(&path).unwrap_or_else(|_| path.clone()).display().to_string());
    cfg.from_sha256 = Some(crate::formats::adapter::file_sha256(&path)?);
    record_corpus(&mut cfg, a.data.corpus.as_deref())?;
    cfg.text_field = text_field.to_string();
    (cfg.data_format, cfg.pack) = (format, a.data.pack);
    let epochs = super::setup::apply_epochs(a, &mut cfg, &corpus)?;
    drop(preparing);
    let run = run_dir(a.out.as_ref(), base.arch, how.restart)?;
    let plan = Plan { recipe: Recipe::Finetune, init: Init::Model(&ck), sampling: Sampling::Random, resume: None };
    // Said once the run has started: a refusal before then says only itself.
    let opts = RunOptions { notes: [shape_note, dequantized, note, epochs].into_iter().flatten().collect(), ..opts.clone() };
    finish(a, &run, train(&plan, &cfg, &corpus, &run, &opts))
}
