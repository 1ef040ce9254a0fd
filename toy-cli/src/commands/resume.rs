//! `toy train --resume`: what must hold again when a run goes on (the corpus
//! it started on, its own tokenizer, the options fixed when it started), and
//! the flags that start a run that saved nothing again from step 0.

use super::setup::{is_embedded, load_training_corpus, model_corpus};
use crate::cli::{
    BatchArgs, DataArgs, DeviceArgs, FinetuneArgs, FlagValue, LogArgs, OptimArgs, ShapeArgs, Shown, TrainArgs, WarmStartArgs,
};
use crate::config::{Recipe, Sampling, TrainConfig};
use crate::data::chat_examples::ChatModel;
use crate::data::Corpus;
use crate::error::{input, Error, Result};
use crate::formats::checkpoint::{open_checkpoint_on, Checkpoint};
use crate::run::identity::{corpus_id, embedded_id};
use std::path::{Path, PathBuf};

/// Refuse a run's config.toml whose recipe and base disagree (a hand edit): a
/// finetune run names the model it started from (`from`, which a LoRA run's
/// adapters need under them), and only a finetune run has a base or adapters.
///
/// # Errors
/// [`crate::error::Error::Input`] saying which key is missing or contradicts.
pub fn check_recipe(cfg: &TrainConfig, dir: &Path) -> Result<()> {
    let at = || format!("--resume {}: config.toml", dir.display());
    if cfg.recipe == Recipe::Finetune && cfg.from.is_none() {
        return Err(input(format!("{} has recipe = \"finetune\" but no `from` (the model the run started from)", at())));
    }
    if cfg.recipe != Recipe::Finetune && (cfg.from.is_some() || cfg.model.lora.is_some()) {
        let what = if cfg.model.lora.is_some() { "LoRA adapters" } else { "a `from` model" };
        return Err(input(format!(
            "{} has recipe = \"{}\" but {what}, which only a finetune run has (recipe = \"finetune\"?)",
            at(),
            cfg.recipe.name()
        )));
    }
    Ok(())
}

/// Refuse to resume the run in `dir` on a corpus whose input changed since it
/// started, unless `allow` (`--allow-corpus-change`): then, as for a run whose
/// config.toml predates the check, record the corpus as it is now.
pub fn check_corpus(cfg: &mut TrainConfig, dir: &Path, allow: bool) -> Result<()> {
    let path = PathBuf::from(&cfg.corpus);
    let now = if is_embedded(&cfg.corpus) {
        // Another build of toy may carry another built-in corpus.
        embedded_id()
    } else if !path.exists() {
        return Err(input(format!(
            "--resume {}: its corpus {} does not exist any more (moved? give --corpus at its new path)",
            dir.display(),
            path.display()
        )));
    } else {
        corpus_id(&path)?
    };
    // no corpus key: the built-in corpus, as in runs from before it was recorded
    let name = if cfg.corpus.is_empty() { "(built-in: config.toml names none)".to_string() } else { path.display().to_string() };
    let refuse = |what: String| {
        input(format!(
            "--resume {}: the corpus {name} changed since the run started ({what}); give --allow-corpus-change to go on with it, tokenized with the run's own tokenizer",
            dir.display()
        ))
    };
    if let (Some(sha), Some(bytes)) = (&cfg.corpus_sha256, cfg.corpus_bytes) {
        if *sha != now.sha256 && !allow {
            return Err(refuse(format!(
                "{bytes} bytes, sha256 {}… then; {} bytes, sha256 {}… now",
                short(sha),
                now.bytes,
                short(&now.sha256)
            )));
        }
    }
    // Runs from before the token files were recorded have nothing to check here.
    if let Some(then) = cfg.corpus_ids_sha256.as_ref().filter(|&t| now.ids_sha256.as_ref() != Some(t)) {
        if !allow {
            let now = now.ids_sha256.as_deref().map_or_else(|| "none".to_string(), |s| format!("{}…", short(s)));
            return Err(refuse(format!(
                "its token files {} were rewritten: sha256 {}… then; {now} now",
                crate::run::identity::PREPARED_IDS.join(" and "),
                short(then)
            )));
        }
    }
    (cfg.corpus_bytes, cfg.corpus_sha256, cfg.corpus_ids_sha256) = (Some(now.bytes), Some(now.sha256), now.ids_sha256);
    Ok(())
}

/// The first 12 characters of a hex digest, as messages show it (whole
/// characters: a hand-edited config.toml may hold any text there).
fn short(sha: &str) -> &str {
    sha.char_indices().nth(12).map_or(sha, |(i, _)| &sha[..i])
}

/// The checkpoint `ck` of the run in `dir` (a LoRA run's adapter on the base
/// the run has now: `--from` may have moved it), checked against the model its
/// config.toml (`cfg`) describes, which a hand edit may have changed: the same
/// shape and adapters (fewer layers or targets would train part of the
/// checkpoint and save an adapter toy cannot read back), the same tied head,
/// RoPE base and norm epsilon, and the checkpoint's context (a finetune
/// run's: one its base takes, as `--context` is checked for a new run).
///
/// # Errors
/// [`crate::error::Error::Input`] naming the first field that differs.
pub fn checkpoint(cfg: &TrainConfig, ck: &Path, dir: &Path) -> Result<Checkpoint> {
    let at = || format!("--resume {}: config.toml", dir.display());
    let base = cfg.from.as_deref().map(Path::new).filter(|_| cfg.model.lora.is_some());
    let opened = open_checkpoint_on(ck, base).map_err(|e| {
        // An adapter refused by its base: a base other than the one the run
        // started from is said as such (the refusal names --lora, a flag of eval).
        let sha = |p: &Path| crate::formats::adapter::file_sha256(p).ok();
        match (base, &cfg.from_sha256) {
            (Some(b), Some(want)) if e.to_string().contains("--lora ") && sha(b).is_some_and(|got| got != *want) => input(format!(
                "{}'s from {} is not the base the run started from (its SHA-256 differs from from_sha256 {}…)",
                at(),
                b.display(),
                &want[..want.len().min(12)]
            )),
            _ => e,
        }
    })?;
    let (m, c) = (&cfg.model, &opened.config);
    let fields = [
        ("vocab", m.vocab, c.vocab),
        ("d_model", m.d_model, c.d_model),
        ("n_layers", m.n_layers, c.n_layers),
        ("n_heads", m.n_heads, c.n_heads),
        ("n_kv_heads", m.n_kv_heads, c.n_kv_heads),
        ("d_ff", m.d_ff, c.d_ff),
    ];
    if m.arch != c.arch {
        return Err(input(format!("{}'s arch {} is not the checkpoint's {}", at(), m.arch.name(), c.arch.name())));
    }
    if let Some((name, want, got)) = fields.iter().find(|f| f.1 != f.2) {
        return Err(input(format!("{}'s {name} {want} is not the checkpoint's {got} ({})", at(), ck.display())));
    }
    let targets = |l: &Option<crate::model::lora::LoraConfig>| {
        l.as_ref().map(|l| (l.rank, l.targets.iter().cloned().collect::<std::collections::BTreeSet<_>>()))
    };
    if targets(&m.lora) != targets(&c.lora) {
        let say = |l: &Option<crate::model::lora::LoraConfig>| {
            l.as_ref().map_or("no adapters".to_string(), |l| format!("rank {} on {}", l.rank, l.targets.join(",")))
        };
        return Err(input(format!("{}'s LoRA ({}) is not the checkpoint's ({})", at(), say(&m.lora), say(&c.lora))));
    }
    // The model's own numbers: a tied head dropped the trained output.weight, and
    // another RoPE base or norm epsilon changed the model's arithmetic, silently.
    if m.tied != c.tied {
        let say = |t: bool| if t { "tied (the head is the token table)" } else { "not tied (the head is output.weight)" };
        return Err(input(format!("{}'s head is {}; the checkpoint's is {} ({})", at(), say(m.tied), say(c.tied), ck.display())));
    }
    let floats = [("rope_base", m.rope_base, c.rope_base), ("norm_eps", m.norm_eps, c.norm_eps)];
    if let Some((name, want, got)) = floats.iter().find(|f| f.1.to_bits() != f.2.to_bits()) {
        return Err(input(format!("{}'s {name} {want} is not the checkpoint's {got} ({})", at(), ck.display())));
    }
    // A from-scratch or warm-start run's checkpoint records the context it trains
    // at; a finetune run's (whole model or adapters) its base's, which the run may
    // train below.
    if cfg.recipe != Recipe::Finetune && m.context != c.context {
        return Err(input(format!("{}'s context {} is not the checkpoint's {} ({})", at(), m.context, c.context, ck.display())));
    }
    if m.context == 0 || m.context > c.context {
        return Err(input(format!("{}'s context {}: the model takes 1 to {} tokens", at(), m.context, c.context)));
    }
    // A LoRA checkpoint records its base's SHA-256 (toy.lora.base_sha256), which
    // config.toml's from_sha256 (what a moved --from is checked against) must be.
    if let (Some(sha), Some(adapter)) = (&cfg.from_sha256, &opened.adapter) {
        if let Ok(recorded) = adapter.file.get_str("toy.lora.base_sha256") {
            if !recorded.is_empty() && recorded != *sha {
                return Err(input(format!(
                    "{}'s from_sha256 {}… is not the base the checkpoint records ({}…)",
                    at(),
                    &sha[..sha.len().min(12)],
                    &recorded[..recorded.len().min(12)]
                )));
            }
        }
    }
    Ok(opened)
}

/// The corpus of the run configured by `cfg`, resumed from the checkpoint
/// `ck`: text is tokenized with the checkpoint's own tokenizer (a BPE is
/// never trained again on resume), and a prepared folder must carry it.
pub fn corpus(cfg: &TrainConfig, ck: &Path, opened: &Checkpoint) -> Result<Corpus> {
    let path = Path::new(&cfg.corpus);
    match &opened.tokenizer {
        Some(tok) => {
            // A LoRA run's checkpoint opens on its base file: the template and ids are the base's.
            let model = ChatModel { file: &opened.file, tok };
            // The corpus of a run is its own: it cannot take the raw text instead.
            let mismatch = format!(
                "a resumed run reads its own corpus only: prepare it as before (toy prep of the same text, --vocab-size {})",
                cfg.model.vocab
            );
            model_corpus(Some(path), &model, cfg.model.vocab, &cfg.text_field, cfg.data_format, &mismatch)
        }
        None if cfg.recipe == Recipe::Finetune => Err(input(format!("{}: no tokenizer to read the corpus with", ck.display()))),
        // Token ids (toy's .bin/.txt files): no tokenizer to keep.
        None => load_training_corpus(Some(path), Some(cfg.model.vocab), None, &cfg.text_field),
    }
}

/// Flags `--resume` takes: they change how the run goes on, not what it computes.
pub const RESUME_FLAGS: [&str; 12] = [
    "--steps",
    "--device",
    "--threads",
    "--matmul-precision",
    "--dtype",
    "--attention",
    "--eval-every",
    "--eval-windows",
    "--save-every",
    "--log-every",
    "--keep",
    "--skip-nonfinite",
];

/// Refuse a resumed run's bf16 on a device without bf16 products, naming where
/// each side came from: `--dtype` or `--device` given now, else the run's
/// config.toml (as `TrainConfig::validate` would, without its "from --dtype,
/// toy.toml or the run's config.toml").
///
/// # Errors
/// [`Error::Input`] naming the run folder.
pub fn check_dtype(cfg: &TrainConfig, a: &TrainArgs, dir: &Path) -> Result<()> {
    use crate::config::Dtype;
    if cfg.dtype != Dtype::Bf16 || Dtype::default_for(&cfg.device) == Dtype::Bf16 {
        return Ok(());
    }
    let (dtype_given, device_given) = (a.device.dtype.is_some(), a.device.device.is_some());
    let device = &cfg.device;
    let advice = match (dtype_given, device_given) {
        (true, false) => format!(
            "--dtype bf16 needs a CUDA device, and the run trains on {device} (its config.toml): add --device cuda, or use --dtype f32"
        ),
        (false, true) => format!(
            "the run trains in bf16 (its config.toml), which needs a CUDA device, not --device {device}: add --dtype f32 to go on in f32"
        ),
        (true, true) => format!("--dtype bf16 needs a CUDA device, not --device {device}: use --dtype f32"),
        (false, false) => {
            format!("its config.toml has dtype bf16 on device {device}; bf16 needs a CUDA device: add --device cuda, or --dtype f32")
        }
    };
    Err(input(format!("--resume {}: {advice}", dir.display())))
}

/// `e`, an error of a resumed run's `TrainConfig::validate` (whose messages
/// name flags), said of the run's config.toml where the values came from it:
/// every flag named that the resume was not given (all but
/// [`RESUME_FLAGS`] contradict the run if given) becomes config.toml's key
/// (`--lr NaN must be ...` → `--resume DIR: config.toml: lr NaN must be ...`;
/// `--lora-rank` → `lora.rank`), as is one that names no flag (`n_layers must
/// be at least 1`). Other errors are returned as they are.
pub fn config_error(e: Error, a: &TrainArgs, dir: &Path) -> Error {
    let Error::Input(m) = &e else { return e };
    let flags = a.flags();
    let given = |flag: &str| flags.iter().any(|f| f.given && f.flag == flag);
    let mut out = String::with_capacity(m.len());
    let (mut renamed, mut kept) = (false, false);
    let mut rest = m.as_str();
    while let Some(at) = rest.find("--") {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 2..];
        let len = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '-')).unwrap_or(tail.len());
        let flag = &rest[at..at + 2 + len];
        if len == 0 || given(flag) {
            kept |= len > 0;
            out.push_str(flag);
        } else {
            renamed = true;
            match &tail[..len] {
                "lora-rank" | "lora-alpha" | "lora-targets" => out.push_str(&format!("lora.{}", &tail[5..len])),
                key => out.push_str(&key.replace('-', "_")),
            }
        }
        rest = &tail[len..];
    }
    out.push_str(rest);
    // Only flags the resume was given: theirs. No flag at all (`bad model
    // shape: n_layers ...`): config.toml's, the only other source.
    if !renamed && kept {
        return e;
    }
    input(format!("--resume {}: config.toml: {out}", dir.display()))
}

/// The flags of `a` that contradict the run configured by `cfg` (all but
/// [`RESUME_FLAGS`]), each as `--flag GIVEN (the run has RUN)`; flags equal
/// to the run's (see [`run_args`]) are fine.
pub fn conflicts(a: &TrainArgs, cfg: &TrainConfig) -> Vec<String> {
    let conflict = |given: FlagValue, run: FlagValue| {
        let shown = if run.value.is_empty() { "none" } else { &run.value };
        (given.key != run.key).then(|| format!("{} {} (the run has {shown})", given.flag, given.value))
    };
    // Targets are a set: compared in one order (PEFT's names taken for ours).
    let sorted = |t: Option<Vec<String>>| {
        t.map(|mut t| {
            t.sort();
            t
        })
    };
    let mut a = a.clone();
    a.finetune.lora_targets = sorted(a.finetune.lora_targets.as_deref().map(|t| super::finetune::lora_targets(cfg.model.arch, t)));
    let mut run = run_args(cfg);
    run.finetune.lora_targets = sorted(run.finetune.lora_targets.take());
    let mut out = Vec::new();
    if let Some(r) = a.recipe.filter(|r| *r != cfg.recipe) {
        out.push(format!("the recipe {} (the run has {})", r.shown(), cfg.recipe.shown()));
    }
    for (given, run) in a.flags().into_iter().zip(run.flags()) {
        if given.given && !RESUME_FLAGS.contains(&given.flag.as_str()) {
            out.extend(conflict(given, run));
        }
    }
    if a.out.is_some() {
        out.push("--out (the run folder is --resume's)".into());
    }
    out
}

/// The flags that say what the run configured by `cfg` computes: the inverse
/// of [`resolve`](super::setup::resolve), every value the run's.
pub fn run_args(cfg: &TrainConfig) -> TrainArgs {
    let m = &cfg.model;
    let lora = m.lora.as_ref();
    TrainArgs {
        recipe: Some(cfg.recipe),
        data: DataArgs {
            corpus: Some(PathBuf::from(&cfg.corpus)),
            text_field: Some(cfg.text_field.clone()),
            data_format: Some(cfg.data_format),
            pack: cfg.pack,
        },
        batch: BatchArgs {
            preset: cfg.preset,
            steps: Some(cfg.steps),
            epochs: None,
            seed: Some(cfg.seed),
            batch: Some(cfg.batch),
            grad_accum: Some(cfg.grad_accum),
            context: Some(m.context),
        },
        shape: ShapeArgs {
            arch: Some(m.arch),
            d_model: Some(m.d_model),
            layers: Some(m.n_layers),
            heads: Some(m.n_heads),
            kv_heads: Some(m.n_kv_heads),
            d_ff: Some(m.d_ff),
            vocab_size: Some(m.vocab),
            norm_eps: Some(m.norm_eps),
            rope_base: m.arch.rope().map(|_| m.rope_base), // gpt2 has none (--rope-base is refused there)
            tied: m.tied,
        },
        optim: OptimArgs {
            lr: Some(cfg.lr),
            min_lr: Some(cfg.min_lr),
            warmup_steps: Some(cfg.warmup_steps),
            weight_decay: Some(cfg.weight_decay),
            grad_clip: Some(cfg.grad_clip),
            freeze: (!m.freeze.is_empty()).then(|| m.freeze.clone()),
        },
        log: LogArgs {
            eval_every: Some(cfg.eval_every),
            eval_windows: Some(cfg.eval_windows),
            save_every: Some(cfg.save_every),
            log_every: Some(cfg.log_every),
            save_initial: cfg.save_initial,
            record_batches: cfg.record_batches,
            keep: Some(cfg.keep),
            skip_nonfinite: cfg.skip_nonfinite,
        },
        device: DeviceArgs {
            device: Some(cfg.device.clone()),
            threads: Some(cfg.threads),
            matmul_precision: Some(cfg.matmul_precision),
            attention: Some(cfg.attention),
            dtype: Some(cfg.dtype),
        },
        warm: WarmStartArgs {
            donor: cfg.donor.as_ref().map(PathBuf::from),
            init: cfg.donor_init,
            match_by: cfg.match_by,
            lens_init: cfg.lens_init,
            donor_width: m.donor_width,
            train_table: m.donor_width.is_some() && !m.freeze_table,
            shuffle: cfg.sampling == Sampling::Stream { shuffle: true },
        },
        finetune: FinetuneArgs {
            from: cfg.from.as_ref().map(PathBuf::from),
            lora_rank: lora.map(|l| l.rank),
            lora_alpha: lora.map(|l| l.alpha),
            lora_targets: lora.map(|l| l.targets.clone()),
        },
        ..Default::default()
    }
}

/// `a` with a `--from` that names the finetune run's base at a new path (a
/// file, or a run folder's `weights/latest`; the
/// same bytes: its SHA-256 is the one the run recorded) taken into `cfg`, so
/// that the run goes on from the moved file and records it in its next
/// checkpoints; `a` as it is otherwise.
///
/// # Errors
/// [`crate::error::Error::Input`] when that file's SHA-256 differs from the run's.
pub fn moved_base(a: &TrainArgs, cfg: &mut TrainConfig, dir: &Path) -> Result<TrainArgs> {
    let mut a = a.clone();
    let (Some(new), Some(old), Some(sha)) = (a.finetune.from.as_ref(), cfg.from.as_ref(), cfg.from_sha256.as_ref()) else {
        return Ok(a);
    };
    // A run folder, as finetune's --from takes: its weights/latest.
    let given = new.clone();
    let file = crate::files::file_or_run(&given, &format!("--resume {}: --from", dir.display()))?;
    let new = std::fs::canonicalize(&file).unwrap_or(file);
    if new == Path::new(old) {
        a.finetune.from = Some(new); // as the run recorded it
        return Ok(a);
    }
    if !new.is_file() {
        let what = if new.exists() { "not a regular file" } else { "no such file" };
        return Err(input(format!("--resume {}: --from {}: {what}", dir.display(), given.display())));
    }
    if crate::formats::adapter::file_sha256(&new)? != *sha {
        return Err(input(format!(
            "--resume {}: --from {} is not the run's base {old}: its SHA-256 differs from the one the run recorded",
            dir.display(),
            given.display()
        )));
    }
    cfg.from = Some(new.display().to_string());
    a.finetune.from = Some(new);
    Ok(a)
}

/// `a` with a `--corpus` that names the run's corpus at a new path (a moved
/// project: the same content, as the run recorded its hash; or, with
/// `--allow-corpus-change`, other content) taken into `cfg`, so the run goes
/// on with it and records it; `a` as it is otherwise.
///
/// # Errors
/// [`crate::error::Error::Input`] when the path does not exist, or holds
/// other content and `--allow-corpus-change` is not given.
pub fn moved_corpus(a: &TrainArgs, cfg: &mut TrainConfig, dir: &Path) -> Result<TrainArgs> {
    let mut a = a.clone();
    let (Some(given), Some(sha), Some(bytes)) = (a.data.corpus.clone(), cfg.corpus_sha256.clone(), cfg.corpus_bytes) else {
        return Ok(a);
    };
    if is_embedded(&cfg.corpus) {
        return Ok(a);
    }
    let new = std::fs::canonicalize(&given).unwrap_or_else(|_| given.clone());
    if new == Path::new(&cfg.corpus) {
        return Ok(a);
    }
    if !new.exists() {
        return Err(input(format!("--resume {}: --corpus {}: no such file or folder", dir.display(), given.display())));
    }
    let now = corpus_id(&new)?;
    let same = now.sha256 == sha && now.bytes == bytes && cfg.corpus_ids_sha256.as_ref().is_none_or(|i| now.ids_sha256.as_ref() == Some(i));
    if !same && !a.allow_corpus_change {
        return Err(input(format!(
            "--resume {}: --corpus {} is not the run's corpus {}: its content differs from what the run recorded (give --allow-corpus-change to go on with it)",
            dir.display(),
            given.display(),
            cfg.corpus
        )));
    }
    cfg.corpus = new.display().to_string();
    a.data.corpus = Some(new);
    Ok(a)
}

/// The flags that start the run configured by `cfg` (read from `dir`'s
/// config.toml, resume flags taken) again from step 0 in `dir`: it saved no
/// checkpoint. A finetune run's base, and a warm-start run's donor, must be
/// the file it started from.
pub fn restart_args(a: &TrainArgs, cfg: &TrainConfig, dir: &Path) -> Result<TrainArgs> {
    // A run starting again reads its base or donor again: the same bytes.
    let changed = |file: &str, sha: &str| -> Result<bool> { Ok(crate::formats::adapter::file_sha256(Path::new(file))? != sha) };
    if let (Some(from), Some(sha)) = (&cfg.from, &cfg.from_sha256) {
        if changed(from, sha)? {
            return Err(input(format!("--resume {}: its base model {from} changed since the run started", dir.display())));
        }
    }
    if let (Some(donor), Some(sha)) = (&cfg.donor, &cfg.donor_sha256) {
        if Path::new(donor).is_file() && changed(donor, sha)? {
            return Err(input(format!(
                "--resume {}: its donor {donor} changed since the run started (its SHA-256 differs)",
                dir.display()
            )));
        }
    }
    let mut r = run_args(cfg);
    let finetune = cfg.recipe == Recipe::Finetune;
    if is_embedded(&cfg.corpus) {
        (r.data.corpus, r.shape.vocab_size) = (None, None);
    }
    if finetune {
        // A finetune run's shape comes from its base model, which refuses shape flags.
        r.shape = ShapeArgs::default();
        (r.warm.donor_width, r.warm.train_table) = (None, false);
    } else {
        r.data.data_format = None;
    }
    // The default text field is no flag the user gave (chat data refuses --text-field).
    if cfg.text_field == "text" {
        r.data.text_field = None;
    }
    (r.out, r.json) = (Some(dir.to_path_buf()), a.json);
    Ok(r)
}
