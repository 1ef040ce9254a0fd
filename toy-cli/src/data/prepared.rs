//! Reading a prepared corpus (`toy prep`'s folder): the manifest, the
//! tokenizer it names, and the two token files, read in place.

use super::corpus::Corpus;
use super::tokenizer::Tokenizer;
use super::tokens::{PackedFile, Tokens};
use crate::error::{input, Result};
use serde::{Deserialize, Serialize};
use std::path::Path;

/// `format` of a [`Manifest`].
pub const FORMAT: &str = "toy/prep-v1";

/// The element type of `train.bin` / `val.bin` written by this version.
pub const DTYPE: &str = "u32";

/// One input file of a prepared corpus.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SourceFile {
    /// As given on the command line.
    pub path: String,
    pub bytes: u64,
    /// Hex SHA-256 of the file.
    pub sha256: String,
}

/// `manifest.json` of a prepared corpus.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    /// [`FORMAT`].
    pub format: String,
    pub vocab_size: usize,
    /// Element type of the `.bin` files, little-endian: `u32` (or `u16` when read).
    pub dtype: String,
    pub train_tokens: u64,
    pub val_tokens: u64,
    pub n_documents: usize,
    /// Documents in the validation split (0 when one document was split by tokens).
    pub val_documents: usize,
    pub val_fraction: f64,
    /// Seed of the choice of validation documents.
    pub seed: u64,
    pub source_files: Vec<SourceFile>,
    /// Hex SHA-256 of `tokenizer.json`.
    pub tokenizer_sha256: String,
    /// Id of `<|endoftext|>`, which ends every document in the `.bin` files.
    pub eot_id: Option<u32>,
    /// Bytes of text the BPE was trained on (a sample of the documents).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bpe_sample_bytes: Option<u64>,
}

/// Whether `path` is a prepared corpus: a folder holding `manifest.json`
/// (the last file `toy prep` writes).
pub fn is_prepared(path: &Path) -> bool {
    path.is_dir() && path.join("manifest.json").is_file()
}

/// Read `dir/manifest.json`.
pub fn read_manifest(dir: &Path) -> Result<Manifest> {
    let path = dir.join("manifest.json");
    let text = std::fs::read_to_string(&path).map_err(|e| input(format!("cannot read {}: {e}", path.display())))?;
    let m: Manifest = serde_json::from_str(&text).map_err(|e| input(format!("{}: not a toy/prep-v1 manifest: {e}", path.display())))?;
    if m.format != FORMAT {
        return Err(input(format!("{}: format {:?} is not {FORMAT}", path.display(), m.format)));
    }
    Ok(m)
}

/// The ids of a packed `.bin` file of a prepared corpus, read in place as
/// training needs them (never copied whole), after checking its size against
/// the manifest's count and every id against the vocabulary. Later reads check
/// that the file has not changed since ([`PackedFile`]).
fn read_packed(path: &Path, dtype: &str, count: u64, vocab: usize) -> Result<Tokens> {
    let p = path.display();
    let width: usize = match dtype {
        "u32" => 4,
        "u16" => 2,
        other => return Err(input(format!("{p}: dtype {other:?} is not u16 or u32"))),
    };
    let file = std::fs::File::open(path).map_err(|e| input(format!("cannot read {p}: {e}")))?;
    let meta = file.metadata().map_err(|e| input(format!("cannot read {p}: {e}")))?;
    if !meta.is_file() {
        return Err(input(format!("{p} is not a regular file")));
    }
    let len = meta.len();
    if Some(len) != count.checked_mul(width as u64) {
        return Err(input(format!("{p}: {len} bytes, but the manifest says {count} {dtype} tokens")));
    }
    if len == 0 {
        return Ok(Tokens::default());
    }
    // Size and time as checked: later reads compare against them.
    let packed = PackedFile::new(file.try_clone().map_err(|e| input(format!("cannot read {p}: {e}")))?, path, width, vocab)?;
    let mut reader = std::io::BufReader::with_capacity(1 << 20, &file);
    let mut buf = vec![0u8; 1 << 20];
    let mut i = 0u64;
    loop {
        let n = read_full(&mut reader, &mut buf).map_err(|e| input(format!("cannot read {p}: {e}")))?;
        if n == 0 {
            break;
        }
        for c in buf[..n - n % width].chunks_exact(width) {
            let id = if width == 4 { u32::from_le_bytes([c[0], c[1], c[2], c[3]]) } else { u16::from_le_bytes([c[0], c[1]]) as u32 };
            if id as usize >= vocab {
                return Err(input(format!("{p}: token {i} is id {id}, outside the vocabulary of {vocab}")));
            }
            i += 1;
        }
    }
    let tokens = Tokens::packed(std::sync::Arc::new(packed), 0, count as usize)?;
    // A change during the check shows now (its size or time moved).
    tokens.window(0, 1).map_err(|e| input(e.to_string()))?;
    Ok(tokens)
}

/// Read until `buf` is full or the end of the file; the bytes read.
fn read_full(r: &mut impl std::io::Read, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match r.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// Read the prepared corpus in `dir`, checking the tokenizer's hash, the
/// files' sizes and every id against the manifest.
pub fn read_prepared(dir: &Path) -> Result<Corpus> {
    read_splits(dir, true)
}

/// [`read_prepared`] of `val.bin` alone (`train` empty; `train.bin` is not
/// read): what `toy eval --split val` scores.
pub fn read_prepared_val(dir: &Path) -> Result<Corpus> {
    read_splits(dir, false)
}

fn read_splits(dir: &Path, with_train: bool) -> Result<Corpus> {
    let m = read_manifest(dir)?;
    let d = dir.display();
    let tok = Tokenizer::load(&dir.join("tokenizer.json"))?;
    if tok.sha256() != m.tokenizer_sha256 {
        return Err(input(format!("{d}/tokenizer.json does not match manifest.json (sha256 {} ≠ {})", tok.sha256(), m.tokenizer_sha256)));
    }
    if tok.vocab_size() != m.vocab_size {
        return Err(input(format!("{d}: the tokenizer has {} ids but manifest.json says {}", tok.vocab_size(), m.vocab_size)));
    }
    let train = match with_train {
        true => read_packed(&dir.join("train.bin"), &m.dtype, m.train_tokens, m.vocab_size)?,
        false => Tokens::default(),
    };
    let val = read_packed(&dir.join("val.bin"), &m.dtype, m.val_tokens, m.vocab_size)?;
    if with_train && train.is_empty() {
        return Err(input(format!("corpus {d} is empty (train.bin holds no tokens)")));
    }
    Ok(Corpus { train, val, vocab_size: m.vocab_size, tokenizer: Some(tok), source: dir.to_path_buf(), chat: None, text_bytes: None })
}
