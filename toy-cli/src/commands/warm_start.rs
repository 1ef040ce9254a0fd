//! `toy train warm-start --donor MODEL.gguf`: a llama student whose token
//! table comes from a donor model through a trainable projection lens, trained
//! on the corpus streamed in order, epoch after epoch.

use super::setup::resolve;
use crate::cli::TrainArgs;
use crate::config::{Recipe, Sampling, TrainConfig};
use crate::data::Corpus;
use crate::donor::{LensInit, MatchBy, TableInit};
use crate::error::{input, Result};
use crate::model::Arch;
use crate::train::{Init, Plan};
use std::path::{Path, PathBuf};

/// The `--init`, `--match-by` and `--lens-init` of a warm-start run: those
/// given, else the defaults (the donor's table, matched by token text, a PCA
/// lens; a random lens for a random table, which has no principal directions
/// to take).
pub fn resolved(init: Option<TableInit>, match_by: Option<MatchBy>, lens_init: Option<LensInit>) -> (TableInit, MatchBy, LensInit) {
    let init = init.unwrap_or(TableInit::Donor);
    let lens = lens_init.unwrap_or(if init == TableInit::Donor { LensInit::Pca } else { LensInit::Random });
    (init, match_by.unwrap_or(MatchBy::Token), lens)
}

/// The file `p` names as a donor (a run folder: its newest checkpoint), with
/// links and `..` resolved; `p` itself when it names none.
fn donor_file(p: &Path) -> PathBuf {
    let file = crate::files::file_or_run(p, "--donor").unwrap_or_else(|_| p.to_path_buf());
    std::fs::canonicalize(&file).unwrap_or(file)
}

/// Refuse, before the donor is read or a BPE trained, a warm-start run for
/// `a` without a donor, or whose student cannot take a projection lens: not
/// a llama (`--arch`, or the preset's architecture), or a tied output head
/// (`--tied`, or the preset's).
pub fn check_student(a: &TrainArgs) -> Result<()> {
    if a.warm.donor.is_none() {
        return Err(input("warm-start needs --donor MODEL.gguf"));
    }
    let preset = a.batch.preset.unwrap_or(crate::config::Preset::Tiny);
    let arch = preset.resolve_arch(a.shape.arch)?;
    if arch != Arch::Llama {
        return Err(input(match a.shape.arch {
            Some(_) => "warm-start trains a llama student (--arch llama)".to_string(),
            None => format!(
                "--preset {} is a {} model; warm-start trains a llama student (smoke, tiny, small, medium or llama-124m)",
                preset.name(),
                arch.name()
            ),
        }));
    }
    if a.shape.tied {
        return Err(input(
            "warm-start's projection lens needs an untied output head (the head cannot be the donor-width table): drop --tied",
        ));
    }
    if preset == crate::config::Preset::Smollm2_135m {
        return Err(input(
            "--preset smollm2-135m ties its output head to the token table, and warm-start's projection lens needs an untied head; for SmolLM2's shape untied, give it on another preset: --preset medium --d-model 576 --heads 9 --kv-heads 3 --d-ff 1536 --layers 30 --rope-base 100000 --context 2048 --batch 8 --vocab-size 49152",
        ));
    }
    Ok(())
}

/// The donor of a warm-start run for `a` (whose `--donor-width` it sets to
/// the donor's, and `--donor`, `--init`, `--match-by` and `--lens-init` to
/// the file and values the run uses, as config.toml records them), matched
/// to the tokens of `corpus`. The caller has run [`check_student`] on `a`.
pub fn donor(a: &mut TrainArgs, corpus: &Corpus) -> Result<crate::donor::Donor> {
    let path = a.warm.donor.clone().ok_or_else(|| input("warm-start needs --donor MODEL.gguf"))?;
    // The donor decides the table width; the lens maps it to d_model.
    let probe = crate::donor::DonorOptions {
        path: &path,
        init: TableInit::Scratch,
        match_by: MatchBy::Index,
        lens_init: LensInit::Random,
        width: a.warm.donor_width,
        norm_eps: 1e-5,
    };
    let width = crate::donor::load(&probe, None, 1, 1, 0)?.width;
    a.warm.donor_width = Some(width);
    let cfg = resolve(a, corpus.vocab_size)?;
    if a.warm.init == Some(TableInit::Scratch) && a.warm.lens_init == Some(LensInit::Pca) {
        return Err(input("--lens-init pca needs the donor's table (--init donor)"));
    }
    let (init, match_by, lens_init) = resolved(a.warm.init, a.warm.match_by, a.warm.lens_init);
    let opts = crate::donor::DonorOptions { path: &path, init, match_by, lens_init, width: Some(width), norm_eps: cfg.model.norm_eps };
    let tokens = corpus.tokenizer.as_ref().and_then(|t| t.tokens());
    let mut d = crate::donor::load(&opts, tokens.as_deref(), cfg.model.vocab, cfg.model.d_model, cfg.seed)?;
    let file = donor_file(&path);
    d.sha256 = Some(crate::formats::adapter::file_sha256(&file)?);
    (a.warm.init, a.warm.match_by, a.warm.lens_init) = (Some(init), Some(match_by), Some(lens_init));
    a.warm.donor = Some(file);
    if let Some(r) = &d.report {
        if !a.json {
            crate::outln!("{}", r.line(&crate::output::shown(&path)));
        }
    }
    Ok(d)
}

/// The plan of a warm-start run from donor `d`; `cfg` records the recipe, the
/// donor's SHA-256 and its stream of windows (`shuffle`: in a fresh order
/// every epoch). A stream walks the data once per epoch: the run evaluates
/// and reports by epoch too.
pub fn plan<'d>(d: &'d crate::donor::Donor, cfg: &mut TrainConfig, shuffle: bool) -> Plan<'d> {
    cfg.recipe = Recipe::WarmStart;
    cfg.sampling = Sampling::Stream { shuffle };
    cfg.donor_sha256 = d.sha256.clone();
    Plan { recipe: Recipe::WarmStart, init: Init::Donor(d), sampling: cfg.sampling, resume: None }
}

/// A warm-start run's config.toml (`cfg`) as `--resume` compares flags with
/// it, and `a` with its `--donor` taken as the run's where it names the
/// recorded file: a run from before the resolved values were recorded gets
/// the defaults it used for `--init`, `--match-by` and `--lens-init`; a
/// `--donor` naming the recorded file another way (its run folder, a link)
/// is the run's, and one at another path with the recorded SHA-256 is the
/// donor moved (recorded from now on). The donor file is not needed to go
/// on (the resume state holds the table and lens): a file is only read when
/// `--donor` names another path.
pub fn resumed(a: &TrainArgs, cfg: &mut TrainConfig) -> TrainArgs {
    let mut a = a.clone();
    if cfg.recipe != Recipe::WarmStart {
        return a;
    }
    let (init, match_by, lens_init) = resolved(cfg.donor_init, cfg.match_by, cfg.lens_init);
    (cfg.donor_init, cfg.match_by, cfg.lens_init) = (Some(init), Some(match_by), Some(lens_init));
    let (Some(given), Some(recorded)) = (a.warm.donor.as_ref(), cfg.donor.as_ref()) else { return a };
    let file = donor_file(given);
    if file == donor_file(Path::new(recorded)) {
        a.warm.donor = Some(PathBuf::from(recorded));
    } else if file.is_file()
        && cfg.donor_sha256.as_ref().is_some_and(|sha| crate::formats::adapter::file_sha256(&file).is_ok_and(|now| now == *sha))
    {
        cfg.donor = Some(file.display().to_string());
        a.warm.donor = Some(file);
    }
    a
}
