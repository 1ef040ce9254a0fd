//! `toy train warm-start --donor MODEL.gguf`: a llama student whose token
//! table comes from a donor model through a trainable projection lens, trained
//! on the corpus streamed in order, epoch after epoch.

use super::setup::resolve;
use crate::cli::TrainArgs;
use crate::config::{Recipe, Sampling, TrainConfig};
use crate::data::Corpus;
use crate::error::{input, Result};
use crate::model::Arch;
use crate::train::{Init, Plan};

/// The donor of a warm-start run for `a` (whose `--donor-width` it sets to
/// the donor's), matched to the tokens of `corpus`.
pub fn donor(a: &mut TrainArgs, corpus: &Corpus) -> Result<crate::donor::Donor> {
    let path = a.warm.donor.clone().ok_or_else(|| input("warm-start needs --donor MODEL.gguf"))?;
    if a.shape.arch.is_some_and(|x| x != Arch::Llama) {
        return Err(input("warm-start trains a llama student (--arch llama)"));
    }
    // The donor decides the table width; the lens maps it to d_model.
    let probe = crate::donor::DonorOptions {
        path: &path,
        init: crate::donor::TableInit::Scratch,
        match_by: crate::donor::MatchBy::Index,
        lens_init: crate::donor::LensInit::Random,
        width: a.warm.donor_width,
    };
    let width = crate::donor::load(&probe, None, 1, 1, 0)?.width;
    a.warm.donor_width = Some(width);
    let cfg = resolve(a, corpus.vocab_size)?;
    if a.warm.init == Some(crate::donor::TableInit::Scratch) && a.warm.lens_init == Some(crate::donor::LensInit::Pca) {
        return Err(input("--lens-init pca needs the donor's table (--init donor)"));
    }
    let opts = crate::donor::DonorOptions {
        path: &path,
        init: a.warm.init.unwrap_or(crate::donor::TableInit::Donor),
        match_by: a.warm.match_by.unwrap_or(crate::donor::MatchBy::Token),
        lens_init: a.warm.lens_init.unwrap_or(crate::donor::LensInit::Pca),
        width: Some(width),
    };
    let tokens = corpus.tokenizer.as_ref().and_then(|t| t.tokens());
    let d = crate::donor::load(&opts, tokens.as_deref(), cfg.model.vocab, cfg.model.d_model, cfg.seed)?;
    if let Some(r) = &d.report {
        if !a.json {
            crate::outln!(
                "donor {}: {} of {} student tokens matched ({:.1}%)",
                crate::output::shown(&path),
                r.matched,
                r.total,
                100.0 * r.match_rate
            );
        }
    }
    Ok(d)
}

/// The plan of a warm-start run from donor `d`; `cfg` records the recipe and
/// its stream of windows (`shuffle`: in a fresh order every epoch). A stream
/// walks the data once per epoch: the run evaluates and reports by epoch too.
pub fn plan<'d>(d: &'d crate::donor::Donor, cfg: &mut TrainConfig, shuffle: bool) -> Plan<'d> {
    cfg.recipe = Recipe::WarmStart;
    cfg.sampling = Sampling::Stream { shuffle };
    Plan { recipe: Recipe::WarmStart, init: Init::Donor(d), sampling: cfg.sampling, resume: None }
}
