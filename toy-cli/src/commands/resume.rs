//! `toy train --resume`: what must hold again when a run goes on (the corpus
//! it started on, its own tokenizer, the options fixed when it started), and
//! the flags that start a run that saved nothing again from step 0.

use super::setup::{dedup_targets, is_embedded, load_training_corpus, model_corpus};
use crate::cli::TrainArgs;
use crate::config::{Recipe, Sampling, TrainConfig};
use crate::data::chat_examples::ChatModel;
use crate::data::Corpus;
use crate::error::{input, Result};
use crate::formats::checkpoint::open_checkpoint;
use crate::run::identity::{corpus_id, embedded_id};
use clap::ValueEnum;
use std::path::{Path, PathBuf};

/// Refuse to resume the run in `dir` on a corpus whose input changed since it
/// started, unless `allow` (`--allow-corpus-change`): then, as for a run whose
/// config.toml predates the check, record the corpus as it is now.
pub fn check_corpus(cfg: &mut TrainConfig, dir: &Path, allow: bool) -> Result<()> {
    let path = PathBuf::from(&cfg.corpus);
    let now = if is_embedded(&cfg.corpus) {
        // Another build of toy may carry another built-in corpus.
        embedded_id()
    } else if !path.exists() {
        return Err(input(format!("--resume {}: its corpus {} does not exist any more", dir.display(), path.display())));
    } else {
        corpus_id(&path)?
    };
    if let (Some(sha), Some(bytes)) = (&cfg.corpus_sha256, cfg.corpus_bytes) {
        if *sha != now.sha256 && !allow {
            return Err(input(format!(
                "--resume {}: the corpus {} changed since the run started ({bytes} bytes, sha256 {}… then; {} bytes, sha256 {}… now); give --allow-corpus-change to go on with it, tokenized with the run's own tokenizer",
                dir.display(),
                path.display(),
                &sha[..sha.len().min(12)],
                now.bytes,
                &now.sha256[..12]
            )));
        }
    }
    (cfg.corpus_bytes, cfg.corpus_sha256) = (Some(now.bytes), Some(now.sha256));
    Ok(())
}

/// The corpus of the run configured by `cfg`, resumed from the checkpoint
/// `ck`: text is tokenized with the checkpoint's own tokenizer (a BPE is
/// never trained again on resume), and a prepared folder must carry it.
pub fn corpus(cfg: &TrainConfig, ck: &Path) -> Result<Corpus> {
    let path = Path::new(&cfg.corpus);
    let opened = open_checkpoint(ck)?;
    match &opened.tokenizer {
        Some(tok) => {
            // A LoRA run's checkpoint opens on its base file: the template and ids are the base's.
            let model = ChatModel { file: &opened.file, tok };
            model_corpus(Some(path), &model, cfg.model.vocab, &cfg.text_field, cfg.data_format)
        }
        None if cfg.recipe == Recipe::Finetune => Err(input(format!("{}: no tokenizer to read the corpus with", ck.display()))),
        // Token ids (toy's .bin/.txt files): no tokenizer to keep.
        None => load_training_corpus(Some(path), Some(cfg.model.vocab), None, &cfg.text_field),
    }
}

fn name<T: ValueEnum>(v: &T) -> String {
    v.to_possible_value().map(|p| p.get_name().to_string()).unwrap_or_default()
}

/// The options of `a` fixed when the run of `cfg` started (recipe, donor,
/// lens, base model, LoRA, what it records) that contradict it, each as
/// `--flag GIVEN (the run has RUN)`; equal values are fine.
pub fn recipe_conflicts(a: &TrainArgs, cfg: &TrainConfig) -> Vec<String> {
    let m = &cfg.model;
    let on = |b: bool| if b { "on" } else { "off" }.to_string();
    let path = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf()).display().to_string();
    let lora = m.lora.as_ref();
    let checks: [(&str, Option<String>, String); 14] = [
        ("the recipe", a.recipe.as_ref().map(name), cfg.recipe.name().to_string()),
        ("--donor", a.donor.as_deref().map(path), cfg.donor.clone().unwrap_or_default()),
        ("--init", a.init.as_ref().map(name), cfg.donor_init.as_ref().map(name).unwrap_or_default()),
        ("--match-by", a.match_by.as_ref().map(name), cfg.match_by.as_ref().map(name).unwrap_or_default()),
        ("--lens-init", a.lens_init.as_ref().map(name), cfg.lens_init.as_ref().map(name).unwrap_or_default()),
        ("--donor-width", a.donor_width.map(|w| w.to_string()), m.donor_width.map(|w| w.to_string()).unwrap_or_default()),
        ("--train-table", a.train_table.then(|| on(true)), on(!m.freeze_table && m.donor_width.is_some())),
        ("--shuffle", a.shuffle.then(|| on(true)), on(cfg.sampling == Sampling::Stream { shuffle: true })),
        ("--save-initial", a.save_initial.then(|| on(true)), on(cfg.save_initial)),
        ("--record-batches", a.record_batches.then(|| on(true)), on(cfg.record_batches)),
        ("--from", a.from.as_deref().map(path), cfg.from.clone().unwrap_or_default()),
        ("--lora-rank", a.lora_rank.map(|r| r.to_string()), lora.map(|l| l.rank.to_string()).unwrap_or_default()),
        ("--lora-alpha", a.lora_alpha.map(|x| x.to_string()), lora.map(|l| l.alpha.to_string()).unwrap_or_default()),
        (
            "--lora-targets",
            a.lora_targets.as_deref().map(|t| dedup_targets(t).join(",")),
            lora.map(|l| l.targets.join(",")).unwrap_or_default(),
        ),
    ];
    checks
        .into_iter()
        .filter_map(|(flag, given, run)| {
            let g = given.filter(|g| *g != run)?;
            Some(format!("{flag} {g} (the run has {})", if run.is_empty() { "none" } else { &run }))
        })
        .collect()
}

/// The flags that start the run configured by `cfg` (read from `dir`'s
/// config.toml, resume flags taken) again from step 0 in `dir`: it saved no
/// checkpoint. A finetune run's base must be the file it started from.
pub fn restart_args(a: &TrainArgs, cfg: &TrainConfig, dir: &Path) -> Result<TrainArgs> {
    if let (Some(from), Some(sha)) = (&cfg.from, &cfg.from_sha256) {
        if crate::formats::adapter::file_sha256(Path::new(from))? != *sha {
            return Err(input(format!("--resume {}: its base model {from} changed since the run started", dir.display())));
        }
    }
    let m = &cfg.model;
    let finetune = cfg.recipe == Recipe::Finetune;
    // A finetune run's shape comes from its base model, which refuses shape flags.
    let shape = |v: usize| (!finetune).then_some(v);
    Ok(TrainArgs {
        recipe: Some(cfg.recipe),
        corpus: (!is_embedded(&cfg.corpus)).then(|| PathBuf::from(&cfg.corpus)),
        text_field: Some(cfg.text_field.clone()),
        data_format: finetune.then_some(cfg.data_format),
        pack: cfg.pack,
        preset: Some(cfg.preset),
        arch: (!finetune).then_some(m.arch),
        steps: Some(cfg.steps),
        seed: Some(cfg.seed),
        batch: Some(cfg.batch),
        grad_accum: Some(cfg.grad_accum),
        context: Some(m.context),
        d_model: shape(m.d_model),
        layers: shape(m.n_layers),
        heads: shape(m.n_heads),
        kv_heads: shape(m.n_kv_heads),
        d_ff: shape(m.d_ff),
        vocab_size: (!finetune && !is_embedded(&cfg.corpus)).then_some(m.vocab),
        lr: Some(cfg.lr),
        min_lr: Some(cfg.min_lr),
        warmup_steps: Some(cfg.warmup_steps),
        weight_decay: Some(cfg.weight_decay),
        grad_clip: Some(cfg.grad_clip),
        norm_eps: (!finetune).then_some(m.norm_eps),
        rope_base: (!finetune).then_some(m.rope_base),
        tied: !finetune && m.tied,
        eval_every: Some(cfg.eval_every),
        save_every: Some(cfg.save_every),
        log_every: Some(cfg.log_every),
        device: Some(cfg.device.clone()),
        threads: Some(cfg.threads),
        matmul_precision: Some(cfg.matmul_precision),
        dtype: Some(cfg.dtype),
        attention: Some(cfg.attention),
        out: Some(dir.to_path_buf()),
        json: a.json,
        save_initial: cfg.save_initial,
        record_batches: cfg.record_batches,
        resume: None,
        allow_corpus_change: false,
        keep: Some(cfg.keep),
        skip_nonfinite: cfg.skip_nonfinite,
        donor: cfg.donor.as_ref().map(PathBuf::from),
        init: cfg.donor_init,
        match_by: cfg.match_by,
        lens_init: cfg.lens_init,
        donor_width: if finetune { None } else { m.donor_width },
        train_table: !finetune && m.donor_width.is_some() && !m.freeze_table,
        shuffle: cfg.sampling == Sampling::Stream { shuffle: true },
        from: cfg.from.as_ref().map(PathBuf::from),
        freeze: (!m.freeze.is_empty()).then(|| m.freeze.clone()),
        lora_rank: m.lora.as_ref().map(|l| l.rank),
        lora_alpha: m.lora.as_ref().map(|l| l.alpha),
        lora_targets: m.lora.as_ref().map(|l| l.targets.clone()),
    })
}
