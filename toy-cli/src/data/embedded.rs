//! The default corpus compiled into the binary, so `toy train` runs with no
//! arguments: `data/default-corpus.txt` (written by the `toy-stories` crate) and
//! `data/tokenizer.json` (a byte-level BPE of 1024 ids that `toy prep` trained
//! on it; see `scripts/gen-default-corpus.sh`).

use super::corpus::Corpus;
use super::text::{encode_documents, split_documents, split_documents_ids, Split};
use super::tokenizer::Tokenizer;
use crate::error::Result;

/// The text of the default corpus (`data/default-corpus.txt`).
pub const TEXT: &str = include_str!("../../../data/default-corpus.txt");

/// The tokenizer of the default corpus (`data/tokenizer.json`).
pub const TOKENIZER_JSON: &str = include_str!("../../../data/tokenizer.json");

/// Vocabulary size the default tokenizer was trained with.
pub const VOCAB_SIZE: usize = 1024;

/// Seed and validation fraction of the default split (as `toy prep`'s defaults).
pub const SEED: u64 = 0;
/// Fraction of the stories held out for validation.
pub const VAL_FRACTION: f64 = 0.05;

/// The default tokenizer.
pub fn tokenizer() -> Result<Tokenizer> {
    Tokenizer::from_json(TOKENIZER_JSON, "<embedded tokenizer.json>")
}

/// The default corpus tokenized and split as `toy prep` would (5% of the
/// stories held out), with its tokenizer, and the number of stories.
pub fn split() -> Result<(Tokenizer, Split, usize)> {
    let tok = tokenizer()?;
    let docs = split_documents(TEXT);
    let ids = encode_documents(&tok, &docs)?;
    Ok((tok, split_documents_ids(ids, VAL_FRACTION, SEED), docs.len()))
}

/// The default corpus's text tokenized with `tok` (a model's own tokenizer),
/// split as [`split`] does.
pub fn corpus_with(tok: Tokenizer) -> Result<Corpus> {
    let docs = split_documents(TEXT);
    let s = split_documents_ids(encode_documents(&tok, &docs)?, VAL_FRACTION, SEED);
    Ok(embedded(tok, s))
}

/// The default corpus.
pub fn corpus() -> Result<Corpus> {
    let (tok, s, _) = split()?;
    Ok(embedded(tok, s))
}

/// The default corpus with a byte-level BPE of `vocab` ids trained on its
/// text (`--vocab-size`), as a raw text corpus gets; its own tokenizer when
/// `vocab` is [`VOCAB_SIZE`].
pub fn corpus_with_vocab(vocab: usize) -> Result<Corpus> {
    if vocab == VOCAB_SIZE {
        return corpus();
    }
    let docs = split_documents(TEXT);
    corpus_with(Tokenizer::train_bpe(docs.iter(), vocab)?)
}

/// The corpus of the embedded text's split `s`, tokenized with `tok`.
fn embedded(tok: Tokenizer, s: Split) -> Corpus {
    Corpus {
        train: s.train.into(),
        val: s.val.into(),
        vocab_size: tok.vocab_size(),
        tokenizer: Some(tok),
        source: "<embedded>".into(),
        chat: None,
        text_bytes: None,
    }
}
