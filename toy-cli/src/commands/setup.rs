//! What the training recipes share (`toy train`, `warm-start`, `finetune`
//! and `--resume`): resolving the options into a [`TrainConfig`], the run
//! folder, the corpus and its record in config.toml, and the end of a run.

use crate::cli::TrainArgs;
use crate::config::{Preset, TrainConfig};
use crate::data::chat_examples::{load_chat, ChatModel};
use crate::data::chat_records::DataFormat;
use crate::data::{load_corpus_with, Corpus, CorpusOptions, TextOptions};
use crate::error::{input, Result};
use crate::model::Arch;
use crate::run::identity::{corpus_id, embedded_id};
use crate::run::{make_run_id, RunDir};
use crate::train::Outcome;
use std::path::{Path, PathBuf};

/// Longest context a run accepts (the causal mask alone is context² floats).
pub const MAX_CONTEXT: usize = 8192;

/// The corpus shipped inside the binary (see `data/`).
pub fn default_corpus() -> Result<Corpus> {
    crate::data::embedded::corpus()
}

/// `--epochs`: set `cfg.steps` to ⌈epochs × windows / (batch × grad_accum)⌉,
/// at least 1 (TRL's `num_train_epochs`), where the windows are those of
/// `corpus`'s training split at `cfg`'s context as the loop walks them: a
/// conversation each (or a packed window) for chat data, else `--context`
/// tokens of the text. Returns the note saying what it chose.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) for epochs that are not
/// positive and finite, or both `steps` and `epochs` in toy.toml.
pub fn apply_epochs(a: &TrainArgs, cfg: &mut TrainConfig, corpus: &Corpus) -> Result<Option<String>> {
    let Some(epochs) = a.batch.epochs else { return Ok(None) };
    if a.batch.steps.is_some() {
        return Err(input("toy.toml sets both steps and epochs: keep one"));
    }
    if !(epochs.is_finite() && epochs > 0.0) {
        return Err(input(format!("--epochs {epochs} must be positive and finite")));
    }
    let windows = crate::train::training_windows(cfg, corpus, None);
    let per_step = cfg.batch * cfg.grad_accum;
    let steps = epochs_steps(epochs, windows, per_step);
    if steps >= 2f64.powi(53) {
        // in exponent form: 1e300 epochs has 300 digits written out
        return Err(input(format!("--epochs {epochs:e}: {steps:.3e} steps are too many (at most 2^53)")));
    }
    cfg.steps = steps as u64;
    let plural = |n: u64, what: &str| if n == 1 { format!("1 {what}") } else { format!("{n} {what}s") };
    Ok(Some(format!(
        "note: --epochs {epochs}: {} of {} over the {}",
        plural(cfg.steps, "step"),
        plural(per_step as u64, "window"),
        plural(windows as u64, "training window")
    )))
}

/// ⌈epochs × windows / per_step⌉, at least 1. The tolerance keeps a product
/// that is whole in decimal whole in binary (1.1 × 160 is 176.00000000000003).
fn epochs_steps(epochs: f64, windows: usize, per_step: usize) -> f64 {
    (epochs * windows as f64 / per_step.max(1) as f64 - 1e-9).ceil().max(1.0)
}

/// Resolve the full configuration for `a` and a corpus of `vocab` ids.
pub fn resolve(a: &TrainArgs, vocab: usize) -> Result<TrainConfig> {
    let preset = a.batch.preset.unwrap_or(Preset::Tiny);
    let arch = preset.resolve_arch(a.shape.arch)?;
    let mut c = TrainConfig::from_preset(preset, arch, vocab);
    let m = &mut c.model;
    macro_rules! set {
        ($($src:expr => $dst:expr),*) => { $( if let Some(v) = $src { $dst = v; } )* };
    }
    let (s, b, o, l) = (&a.shape, &a.batch, &a.optim, &a.log);
    set!(s.d_model => m.d_model, s.layers => m.n_layers, s.heads => m.n_heads, s.d_ff => m.d_ff, b.context => m.context, s.norm_eps => m.norm_eps, s.rope_base => m.rope_base);
    // The preset's kv heads hold while --heads keeps the preset's heads.
    m.n_kv_heads = a.shape.kv_heads.unwrap_or(if a.shape.heads.is_some() { m.n_heads } else { m.n_kv_heads });
    if a.shape.tied {
        m.tied = true;
    }
    m.donor_width = a.warm.donor_width;
    m.freeze_table = !a.warm.train_table;
    m.freeze = a.optim.freeze.clone().unwrap_or_default();
    if arch == Arch::Gpt2 && a.shape.d_ff.is_none() {
        m.d_ff = 4 * m.d_model;
    }
    set!(b.batch => c.batch, b.grad_accum => c.grad_accum, b.steps => c.steps, b.seed => c.seed);
    set!(o.lr => c.lr, o.warmup_steps => c.warmup_steps, o.weight_decay => c.weight_decay, o.grad_clip => c.grad_clip);
    set!(l.eval_every => c.eval_every, l.save_every => c.save_every, l.log_every => c.log_every, a.device.threads => c.threads);
    set!(l.eval_windows => c.eval_windows);
    // lr / 10 of the decimal given (1e-3 → 1e-4, not f32's 0.000100000005).
    c.min_lr = a.optim.min_lr.unwrap_or((crate::model::as_written(c.lr) / 10.0) as f32);
    if a.log.log_every.is_none() {
        // A terminal shows the progress bar: a loss line every 10 steps above it.
        // Scripts reading a pipe get every step, as before.
        use std::io::IsTerminal;
        c.log_every = if std::io::stdout().is_terminal() { 10 } else { 1 };
    }
    if let Some(d) = &a.device.device {
        c.device = d.clone();
    }
    if let Some(p) = a.device.matmul_precision {
        c.matmul_precision = p;
    }
    c.attention = a.device.attention.unwrap_or_else(|| crate::model::attention::Attention::default_for(&c.device));
    // An explicit --matmul-precision asks for f32 products (PyTorch's
    // set_float32_matmul_precision applies outside autocast).
    c.dtype = crate::config::Dtype::resolve(a.device.dtype, a.device.matmul_precision.is_some(), &c.device);
    // Options that shape the run besides the model and schedule, for --resume.
    (c.keep, c.skip_nonfinite, c.record_batches, c.save_initial) =
        (a.log.keep.unwrap_or(0), a.log.skip_nonfinite, a.log.record_batches, a.log.save_initial);
    c.donor = a.warm.donor.as_ref().map(|p| std::fs::canonicalize(p).unwrap_or_else(|_| p.clone()).display().to_string());
    (c.donor_init, c.match_by, c.lens_init) = (a.warm.init, a.warm.match_by, a.warm.lens_init);
    if c.model.context > MAX_CONTEXT {
        return Err(input(format!("--context {} is larger than the maximum {MAX_CONTEXT}", c.model.context)));
    }
    if arch == Arch::Gpt2 && a.shape.kv_heads.is_some_and(|k| k != c.model.n_heads) {
        return Err(input("--kv-heads is a llama and qwen2 option; gpt2 uses multi-head attention"));
    }
    if arch == Arch::Gpt2 && a.shape.rope_base.is_some() {
        return Err(input("--rope-base is a llama and qwen2 option; gpt2 has learned positions, not RoPE"));
    }
    c.validate()?;
    Ok(c)
}

/// Refuse a run id (`TOY_RUN_ID`) that is not one plain path component: empty, `.`, `..`,
/// with a separator or a control character, or starting with `-` (read as a
/// flag by the tools the id is given to).
pub fn check_run_id(id: &str) -> Result<()> {
    let mut parts = Path::new(id).components();
    let single = matches!((parts.next(), parts.next()), (Some(std::path::Component::Normal(n)), None) if n == id);
    if !single || id.starts_with('-') || id.chars().any(|c| c.is_control() || c == '/' || c == '\\') {
        return Err(input(format!(
            "TOY_RUN_ID \"{}\" must be one plain folder name: not empty, `.` or `..`, no `/`, no control characters, not starting with `-`",
            crate::output::one_line(id)
        )));
    }
    Ok(())
}

/// Pick the run folder: `--out`, or `runs/<id>` with the id from `TOY_RUN_ID` or
/// the template; `restart`: `--out`, a run that saved nothing, starts again.
pub fn run_dir(out: Option<&PathBuf>, arch: Arch, restart: bool) -> Result<RunDir> {
    let runs = PathBuf::from("runs");
    let env_id = match std::env::var("TOY_RUN_ID") {
        Err(std::env::VarError::NotUnicode(v)) => {
            return Err(input(format!("TOY_RUN_ID \"{}\" is not UTF-8", crate::output::shown(Path::new(&v)))));
        }
        r => r.ok().filter(|s| !s.trim().is_empty()),
    };
    let id = match (out, &env_id) {
        (Some(p), _) => p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "run".into()),
        (None, Some(id)) => {
            check_run_id(id)?;
            id.clone()
        }
        (None, None) => make_run_id("{arch}-{date}-{seq}", arch.name(), &runs),
    };
    if id.contains('/') || id == ".." {
        return Err(input(format!("run id \"{}\" must be a plain name", crate::output::one_line(&id))));
    }
    let path = out.cloned().unwrap_or_else(|| runs.join(&id));
    let run = RunDir::create(id, path, restart)?;
    if restart {
        run.clear_logs();
    }
    Ok(run)
}

/// Load the corpus at `path` (the built-in one when `None`); `vocab`
/// (`--vocab-size`) sizes the BPE trained for raw text, or bounds the ids of id
/// files; `bpe_default` (a preset's vocabulary) sizes that BPE when `vocab` is
/// not given, and nothing else (a prepared corpus or id file keeps its ids).
pub fn load_training_corpus(path: Option<&Path>, vocab: Option<usize>, bpe_default: Option<usize>, text_field: &str) -> Result<Corpus> {
    if vocab == Some(0) {
        // (ids read from an id file may be fewer than a byte-level BPE's 257)
        return Err(input("--vocab-size must be at least 1 (a BPE that toy trains needs at least 257 ids)"));
    }
    match path {
        None => embedded_corpus(vocab),
        Some(p) if p.as_os_str() == "<embedded>" || p.as_os_str().is_empty() => embedded_corpus(vocab),
        Some(p) => {
            let text = TextOptions {
                bpe_vocab_size: vocab.or(bpe_default).unwrap_or(TextOptions::default().bpe_vocab_size),
                text_field: text_field.to_string(),
                ..Default::default()
            };
            let c = load_corpus_with(p, &CorpusOptions { vocab_size: vocab, ..Default::default() }, &text)?;
            let prepared = crate::data::prepared::is_prepared(p);
            if let Some(v) = vocab.filter(|&v| prepared && v != c.vocab_size) {
                return Err(input(format!("--vocab-size {v} contradicts {}, prepared with {} ids", p.display(), c.vocab_size)));
            }
            let target = vocab.or(bpe_default).unwrap_or(TextOptions::default().bpe_vocab_size);
            if let Some(v) = Some(target).filter(|&v| !prepared && c.tokenizer.is_some() && c.vocab_size < v) {
                let what = match (vocab, bpe_default) {
                    (Some(_), _) => "--vocab-size",
                    (None, Some(_)) => "the preset",
                    (None, None) => "the default",
                };
                crate::note!(
                    "note: the BPE trained on {} has {} ids, fewer than the {v} of {what}: the text has too few repeated pairs",
                    p.display(),
                    c.vocab_size
                );
            }
            Ok(c)
        }
    }
}

/// The embedded corpus, with a BPE of `vocab` ids trained on its text when
/// `--vocab-size` asks for other than its own 1024.
fn embedded_corpus(vocab: Option<usize>) -> Result<Corpus> {
    match vocab {
        Some(v) => {
            let c = crate::data::embedded::corpus_with_vocab(v)?;
            if c.vocab_size < v {
                crate::note!(
                    "note: the BPE trained on the built-in corpus has {} ids, fewer than the {v} of --vocab-size: the text has too few repeated pairs",
                    c.vocab_size
                );
            }
            Ok(c)
        }
        None => default_corpus(),
    }
}

/// Print the run's summary line, or — for a run that saved no checkpoint (bad
/// input, no memory for the step, divergence or a full disk before its first
/// save) — remove its folder, saying so when it had trained.
pub fn finish(a: &TrainArgs, run: &RunDir, out: Result<Outcome>) -> Result<Outcome> {
    use crate::error::Error;
    let out = out.map_err(|e| {
        if matches!(e, Error::Interrupted(..)) || run.has_checkpoint() {
            return e;
        }
        // Nothing to resume from: no dead folder is left behind.
        let trained = run.has_progress();
        let note = format!("; {}", run.remove());
        match e {
            Error::Runtime(m) if trained => Error::Runtime(m + &note),
            Error::Input(m) if trained => Error::Input(m + &note),
            other => other,
        }
    });
    let out = out?;
    if !a.json && out.reason != crate::train::End::Interrupted {
        crate::outln!("run {} → {}", crate::output::one_line(&out.run_id), crate::output::shown(&out.run_dir));
    }
    Ok(out)
}

/// How a new run comes about: from the command line, or again from step 0
/// in the folder of a run that saved nothing (`--resume`).
#[derive(Clone, Copy, Debug, Default)]
pub struct Start {
    /// `--preset` as given on the command line (toy.toml's sets only the
    /// batch and context of a finetune run).
    pub cli_preset: Option<crate::config::Preset>,
    /// Start again in the existing run folder (`--out`) that saved nothing.
    pub restart: bool,
}

/// Whether a recorded corpus path means the embedded corpus (empty or `<embedded>`).
pub fn is_embedded(corpus: &str) -> bool {
    corpus.is_empty() || corpus == "<embedded>"
}

/// Record the corpus at `path` (`None`: the embedded one) in `cfg`: its
/// absolute path, bytes and SHA-256, and a prepared folder's token files'
/// SHA-256 (see [`corpus_id`]).
pub fn record_corpus(cfg: &mut TrainConfig, path: Option<&Path>) -> Result<()> {
    let id = match path.filter(|p| !is_embedded(&p.to_string_lossy())) {
        None => {
            cfg.corpus = "<embedded>".into();
            embedded_id()
        }
        Some(p) => {
            let id = corpus_id(p)?;
            cfg.corpus = std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string();
            id
        }
    };
    (cfg.corpus_bytes, cfg.corpus_sha256, cfg.corpus_ids_sha256) = (Some(id.bytes), Some(id.sha256), id.ids_sha256);
    Ok(())
}

/// `targets` without repeats or surrounding spaces, in their order, PEFT's
/// names (`q_proj`, ...) taken for llama.cpp's (`attn_q`, ...).
pub fn dedup_targets(targets: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for t in targets {
        let t = t.trim(); // "q_proj, v_proj", as a shell or a PEFT list is often written
        let t = peft_name(t).unwrap_or(t).to_string();
        if !out.contains(&t) {
            out.push(t);
        }
    }
    out
}

/// llama.cpp's name of a matrix that PEFT and unsloth call by the Hugging Face
/// module's name (`q_proj` → `attn_q`), if `name` is one.
fn peft_name(name: &str) -> Option<&'static str> {
    let names = [
        ("q_proj", "attn_q"),
        ("k_proj", "attn_k"),
        ("v_proj", "attn_v"),
        ("o_proj", "attn_output"),
        ("gate_proj", "ffn_gate"),
        ("up_proj", "ffn_up"),
        ("down_proj", "ffn_down"),
    ];
    names.iter().find(|(hf, _)| *hf == name).map(|(_, ours)| *ours)
}

/// The corpus at `path` (the embedded one when `None` or `<embedded>`)
/// tokenized with the tokenizer of `model`; a prepared folder must have been
/// made with it. JSON Lines chat records (`format`, see [`DataFormat`]) are
/// rendered with the model's chat template (see `data::chat_examples`).
/// `mismatch` ends the refusal of a prepared folder made with another
/// tokenizer ([`Corpus::check_tokenizer`]).
pub fn model_corpus(
    path: Option<&Path>,
    model: &ChatModel<'_>,
    vocab: usize,
    text_field: &str,
    format: DataFormat,
    mismatch: &str,
) -> Result<Corpus> {
    let tok = model.tok;
    let path = path.filter(|p| p.as_os_str() != "<embedded>" && !p.as_os_str().is_empty());
    let Some(path) = path else { return crate::data::embedded::corpus_with(tok.clone()) };
    if !path.exists() {
        return Err(input(format!("corpus {} does not exist", path.display())));
    }
    let opts = CorpusOptions { vocab_size: Some(vocab), ..Default::default() };
    if let Some(chat) = load_chat(path, format, model, opts.val_fraction, TextOptions::default().seed)? {
        return Ok(Corpus::of_chat(chat, tok, path));
    }
    let text = TextOptions { tokenizer: Some(tok.clone()), text_field: text_field.to_string(), ..Default::default() };
    let c = load_corpus_with(path, &opts, &text)?;
    c.check_tokenizer(tok, mismatch)?;
    Ok(c)
}

#[cfg(test)]
mod tests {
    /// Whole products stay whole (0.3 × 160 and 1.1 × 160 had taken one step
    /// more); a part of a step is a step; at least one.
    #[test]
    fn epochs_round_up_to_whole_steps() {
        use super::epochs_steps;
        assert_eq!(epochs_steps(1.1, 160, 1), 176.0);
        assert_eq!(epochs_steps(0.3, 160, 1), 48.0);
        assert_eq!(epochs_steps(1.2, 160, 1), 192.0);
        assert_eq!(epochs_steps(3.0, 28, 8), 11.0);
        assert_eq!(epochs_steps(0.001, 5, 8), 1.0);
    }
}
