//! `toy prep`: train a byte-level BPE on text files and write a prepared corpus
//! (see [`crate::data::prep`]).

use crate::cli::PrepArgs;
use crate::data::prep::{prep, Manifest, PrepOptions};
use crate::error::Result;

/// Run `toy prep` with `args`.
pub fn run(args: &PrepArgs) -> Result<Manifest> {
    let opts = PrepOptions { vocab_size: args.vocab_size, val_fraction: args.val_fraction, seed: args.seed, force: args.force };
    prep(&args.files, &args.out, &opts)
}
