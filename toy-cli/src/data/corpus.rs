//! Corpus readers: raw UTF-8 text, toy's `.bin` (headerless little-endian i32
//! ids) and `.txt` id files (one sequence per line, ids separated by spaces).

use super::tokenizer::Tokenizer;
use crate::error::{input, Result};
use std::path::{Path, PathBuf};

/// Token ids split for training and validation, and how to read them back.
#[derive(Clone, Debug)]
pub struct Corpus {
    pub train: Vec<u32>,
    pub val: Vec<u32>,
    pub vocab_size: usize,
    /// The tokenizer, when the corpus came from text.
    pub tokenizer: Option<Tokenizer>,
    /// Where it came from.
    pub source: PathBuf,
}

/// How to read a corpus.
#[derive(Clone, Debug)]
pub struct CorpusOptions {
    /// Fraction of the corpus held out for validation (by documents when known).
    pub val_fraction: f64,
    /// Vocabulary size for id files (default: largest id + 1).
    pub vocab_size: Option<usize>,
}

impl Default for CorpusOptions {
    fn default() -> Self {
        CorpusOptions { val_fraction: 0.05, vocab_size: None }
    }
}

/// Read the corpus at `path`.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming the file for a missing,
/// empty or malformed corpus, or ids outside the vocabulary.
pub fn load_corpus(path: &Path, opts: &CorpusOptions) -> Result<Corpus> {
    if !path.exists() {
        return Err(input(format!("corpus {} does not exist", path.display())));
    }
    let bytes = std::fs::read(path).map_err(|e| input(format!("cannot read corpus {}: {e}", path.display())))?;
    if bytes.is_empty() {
        return Err(input(format!("corpus {} is empty", path.display())));
    }
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let (ids, tokenizer) = if ext == "bin" {
        if bytes.len() % 4 != 0 {
            return Err(input(format!("{}: {} bytes is not a whole number of i32 ids", path.display(), bytes.len())));
        }
        let ids = bytes
            .chunks_exact(4)
            .enumerate()
            .map(|(i, c)| {
                let v = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
                u32::try_from(v).map_err(|_| input(format!("{}: negative id {v} at position {i}", path.display())))
            })
            .collect::<Result<Vec<u32>>>()?;
        (ids, None)
    } else {
        let text = String::from_utf8(bytes).map_err(|e| input(format!("{}: not UTF-8 text (invalid byte at offset {})", path.display(), e.utf8_error().valid_up_to())))?;
        let tok = Tokenizer::Bytes;
        (tok.encode(&text)?, Some(tok))
    };
    let vocab_size = match (&tokenizer, opts.vocab_size) {
        (Some(t), _) => t.vocab_size(),
        (None, Some(v)) => v,
        (None, None) => ids.iter().max().map(|&m| m as usize + 1).unwrap_or(1),
    };
    if let Some((i, &bad)) = ids.iter().enumerate().find(|(_, &x)| x as usize >= vocab_size) {
        return Err(input(format!("{}: id {bad} at position {i} is outside the vocabulary of {vocab_size}", path.display())));
    }
    let n_val = ((ids.len() as f64) * opts.val_fraction) as usize;
    let split = ids.len() - n_val;
    Ok(Corpus { train: ids[..split].to_vec(), val: ids[split..].to_vec(), vocab_size, tokenizer, source: path.to_path_buf() })
}
