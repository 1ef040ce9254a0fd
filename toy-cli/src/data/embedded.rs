//! The default corpus compiled into the binary, so `toy train` runs with no arguments.

use super::corpus::{Corpus, CorpusOptions};
use super::tokenizer::Tokenizer;
use crate::error::Result;

/// The text of the default corpus (`data/default-corpus.txt`).
pub const TEXT: &str = include_str!("../../../data/default-corpus.txt");

/// The default corpus, tokenized, split 95/5.
pub fn corpus() -> Result<Corpus> {
    let tok = Tokenizer::Bytes;
    let ids = tok.encode(TEXT)?;
    let opts = CorpusOptions::default();
    let n_val = (ids.len() as f64 * opts.val_fraction) as usize;
    let split = ids.len() - n_val;
    Ok(Corpus { train: ids[..split].to_vec(), val: ids[split..].to_vec(), vocab_size: tok.vocab_size(), tokenizer: Some(tok), source: "<embedded>".into() })
}
