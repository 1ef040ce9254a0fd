//! `toy new <dir>`: a project folder where `toy train` runs with no arguments:
//!
//! - `toy.toml`: a `[train]` table with the resolved defaults (the preset's
//!   shape keys are written commented out, so that `--preset` still changes
//!   the shape);
//! - `data/default-corpus.txt`: the embedded stories, and `data/default/`: the
//!   same stories prepared with the embedded tokenizer (what `toy.toml` trains on);
//! - `runs/`: where runs go.

use crate::cli::{NewArgs, TrainArgs};
use crate::commands::setup::resolve;
use crate::config::TrainConfig;
use crate::data::embedded;
use crate::data::prep::{check_out_dir, write_prepared, SourceFile};
use crate::data::tokenizer::hex;
use crate::error::{input, Result};
use crate::files::write_atomic;
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

/// Where `toy.toml` points `corpus`, relative to the project folder.
pub const CORPUS_DIR: &str = "data/default";
/// The corpus text, relative to the project folder.
pub const CORPUS_TEXT: &str = "data/default-corpus.txt";

/// The `toy.toml` of a new project for configuration `c`.
pub fn toml_text(c: &TrainConfig) -> String {
    let m = &c.model;
    format!(
        r#"# toy project: `toy train` in this folder reads the [train] table below.
# Keys are the long flags of `toy train` with `_` for `-` (not out, json or
# resume, which name one run); flags on the command line win over this file. Relative paths are relative to this folder.

[train]
corpus = "{CORPUS_DIR}"
# preset = "{preset}"  (the default: from scratch its shape, batch and context; finetune takes only its batch and context)
steps = {steps}
# epochs = 3  (instead of steps: passes over the training data; remove steps)
seed = {seed}
eval_every = {eval_every}
save_every = {save_every}
log_every = {log_every}
device = "{device}"
threads = {threads}

# The optimizer's defaults depend on the recipe (uncomment a key to set it for
# every recipe): from scratch lr {lr:?}; finetune 2e-4 with LoRA, 2e-5 for every weight.
# recipe = "finetune"  (with from = "MODEL.gguf"; or "warm-start" with donor = ...)
# lr = {lr:?}
# min_lr = {min_lr}  (default: lr / 10)
# warmup_steps = {warmup}
# weight_decay = {wd:?}
# grad_clip = {clip:?}
# grad_accum = {grad_accum}  (micro-batches of `batch` sequences per optimizer step)

# The preset's shape (finetune takes the model's). Uncomment a key to override
# it (it then also overrides --preset on the command line).
# arch = "{arch}"
# tied = {tied}
# batch = {batch}
# context = {context}
# d_model = {d_model}
# layers = {layers}
# heads = {heads}
# kv_heads = {kv_heads}
# d_ff = {d_ff}
# norm_eps = {eps:?}
# rope_base = {rope:?}
"#,
        preset = c.preset_name(),
        arch = m.arch.name(),
        steps = c.steps,
        seed = c.seed,
        lr = c.lr,
        min_lr = format!("{:.6}", c.min_lr).trim_end_matches('0'),
        warmup = c.warmup_steps,
        wd = c.weight_decay,
        clip = c.grad_clip,
        eval_every = c.eval_every,
        save_every = c.save_every,
        log_every = c.log_every,
        device = c.device,
        threads = c.threads,
        tied = m.tied,
        batch = c.batch,
        grad_accum = c.grad_accum,
        context = m.context,
        d_model = m.d_model,
        layers = m.n_layers,
        heads = m.n_heads,
        kv_heads = m.n_kv_heads,
        d_ff = m.d_ff,
        eps = m.norm_eps,
        rope = m.rope_base,
    )
}

fn check_dir(dir: &Path, force: bool) -> Result<()> {
    crate::files::refuse_parent_dir_of_missing(dir, "folder")?;
    let d = dir.display();
    if dir.exists() && !dir.is_dir() {
        return Err(input(format!("{d} exists and is not a folder")));
    }
    if !force && std::fs::read_dir(dir).map(|mut e| e.next().is_some()).unwrap_or(false) {
        return Err(input(format!("{d} is not empty (use --force to write into it)")));
    }
    std::fs::create_dir_all(dir.join("runs")).map_err(|e| input(format!("cannot create {d}: {e}")))
}

/// Run `toy new` with `args`; returns the project folder.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) when the folder is not empty
/// (without `--force`) or cannot be written; what was written into a folder
/// that was empty is then removed.
pub fn run(args: &NewArgs) -> Result<PathBuf> {
    let dir = &args.dir;
    let existed = dir.is_dir();
    let was_empty = std::fs::read_dir(dir).map(|mut e| e.next().is_none()).unwrap_or(true);
    // A run folder a toy train is writing in (or a prep's --out) is not a project's.
    crate::files::refuse_locked(dir, "the folder")?;
    check_dir(dir, args.force)?;
    let made = write_project(dir);
    if made.is_err() && was_empty {
        // Nothing of the user's was there: leave nothing half-made (a full disk).
        if existed {
            crate::files::empty_folder(dir);
        } else {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
    made.map(|_| dir.clone())
}

/// The project's files in `dir` (see the module's doc).
fn write_project(dir: &Path) -> Result<()> {
    let (tok, split, n_docs) = embedded::split()?;
    let cfg = resolve(&TrainArgs::default(), tok.vocab_size())?;
    let prepared = dir.join(CORPUS_DIR);
    // Its messages name prep's --out, which new has not: name the folder.
    let _locked = check_out_dir(&prepared, true).map_err(|e| match e {
        crate::error::Error::Input(m) => input(m.replacen("--out ", "", 1)),
        e => e,
    })?;
    write_atomic(&dir.join(CORPUS_TEXT), embedded::TEXT.as_bytes())?;
    let source = SourceFile {
        path: CORPUS_TEXT.into(),
        bytes: embedded::TEXT.len() as u64,
        sha256: hex(&Sha256::digest(embedded::TEXT.as_bytes())),
    };
    write_prepared(&prepared, &tok, &split, n_docs, vec![source], embedded::VAL_FRACTION, embedded::SEED)?;
    write_atomic(&dir.join("toy.toml"), toml_text(&cfg).as_bytes())
}
