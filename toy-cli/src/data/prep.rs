//! Prepared corpora (`toy prep`): a folder holding
//!
//! - `tokenizer.json`: the byte-level BPE trained on the text (Hugging Face format);
//! - `train.bin`, `val.bin`: the token ids of the two splits, packed as
//!   little-endian u32 — the same bytes as toy's i32 `.bin` files, so each is
//!   also a valid toy corpus on its own;
//! - `manifest.json` ([`Manifest`], format `toy/prep-v1`), written last.
//!
//! Documents (separated by `<|endoftext|>` lines; each file ends one) are
//! tokenized one by one, each followed by the end-of-text id, and a seeded
//! choice of them (default 5%) forms the validation split.

use super::corpus::Corpus;
use super::text::{encode_documents, read_text, split_documents, split_documents_ids, Split};
use super::tokenizer::{hex, Tokenizer};
use super::tokens::Tokens;
use crate::error::{input, runtime, Result};
use crate::run::write_atomic;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Path, PathBuf};

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
}

/// Settings of `toy prep`.
#[derive(Clone, Debug)]
pub struct PrepOptions {
    /// Largest vocabulary the BPE may learn (at least 257).
    pub vocab_size: usize,
    /// Fraction of the documents held out, in [0, 1).
    pub val_fraction: f64,
    pub seed: u64,
    /// Write into a non-empty folder.
    pub force: bool,
}

/// Make sure `out` can receive a prepared corpus: create it, refuse a
/// non-empty one without `force`, and check that a file can be written there.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) for each of those.
pub fn check_out_dir(out: &Path, force: bool) -> Result<()> {
    let o = out.display();
    if out.exists() && !out.is_dir() {
        return Err(input(format!("--out {o} exists and is not a folder")));
    }
    if !force && std::fs::read_dir(out).map(|mut d| d.next().is_some()).unwrap_or(false) {
        return Err(input(format!("--out {o} is not empty (use --force to write into it)")));
    }
    std::fs::create_dir_all(out).map_err(|e| input(format!("cannot create --out {o}: {e}")))?;
    let probe = out.join(format!(".toy-write-test-{}", std::process::id()));
    std::fs::write(&probe, b"").map_err(|e| input(format!("cannot write into --out {o}: {e}")))?;
    let _ = std::fs::remove_file(&probe);
    Ok(())
}

fn sha256_hex(bytes: &[u8]) -> String {
    hex(&Sha256::digest(bytes))
}

fn pack(ids: &[u32]) -> Vec<u8> {
    ids.iter().flat_map(|i| i.to_le_bytes()).collect()
}

/// Write a prepared corpus of `split` tokenized by `tok` into `out` (which
/// [`check_out_dir`] accepted): the tokenizer and the two `.bin` files, each
/// atomically, then the manifest. A stale manifest is removed first, so an
/// interrupted write never looks complete.
pub fn write_prepared(
    out: &Path,
    tok: &Tokenizer,
    split: &Split,
    n_documents: usize,
    sources: Vec<SourceFile>,
    val_fraction: f64,
    seed: u64,
) -> Result<Manifest> {
    let manifest_path = out.join("manifest.json");
    if manifest_path.exists() {
        std::fs::remove_file(&manifest_path).map_err(|e| runtime(format!("cannot replace {}: {e}", manifest_path.display())))?;
    }
    tok.save(&out.join("tokenizer.json"))?;
    write_atomic(&out.join("train.bin"), &pack(&split.train))?;
    write_atomic(&out.join("val.bin"), &pack(&split.val))?;
    let m = Manifest {
        format: FORMAT.into(),
        vocab_size: tok.vocab_size(),
        dtype: DTYPE.into(),
        train_tokens: split.train.len() as u64,
        val_tokens: split.val.len() as u64,
        n_documents,
        val_documents: split.val_documents,
        val_fraction,
        seed,
        source_files: sources,
        tokenizer_sha256: tok.sha256(),
        eot_id: tok.eot(),
    };
    let mut json = serde_json::to_string_pretty(&m).map_err(|e| runtime(e.to_string()))?;
    json.push('\n');
    write_atomic(&manifest_path, json.as_bytes())?;
    Ok(m)
}

/// `toy prep`: train a byte-level BPE on `files`, tokenize them and write a
/// prepared corpus into `out`.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) for a missing, non-UTF-8 or
/// empty input, bad options, or an output folder that is not empty (without
/// `force`) or cannot be written.
pub fn prep(files: &[PathBuf], out: &Path, opts: &PrepOptions) -> Result<Manifest> {
    if files.is_empty() {
        return Err(input("no input files (give one or more text files)"));
    }
    if !(0.0..1.0).contains(&opts.val_fraction) {
        return Err(input(format!("--val-fraction must be in [0, 1), not {}", opts.val_fraction)));
    }
    if opts.vocab_size > u32::MAX as usize {
        return Err(input(format!("--vocab-size {} is too large", opts.vocab_size)));
    }
    let mut texts = Vec::with_capacity(files.len());
    let mut sources = Vec::with_capacity(files.len());
    for f in files {
        if !f.is_file() {
            return Err(input(format!("{} does not exist or is not a file", f.display())));
        }
        let text = read_text(f)?;
        sources.push(SourceFile { path: f.display().to_string(), bytes: text.len() as u64, sha256: sha256_hex(text.as_bytes()) });
        texts.push(text);
    }
    let docs: Vec<&str> = texts.iter().flat_map(|t| split_documents(t)).collect();
    if docs.is_empty() {
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        return Err(input(format!("no text in {} (empty, or only <|endoftext|> lines)", names.join(", "))));
    }
    check_out_dir(out, opts.force)?;
    let tok = Tokenizer::train_bpe(docs.iter().copied(), opts.vocab_size)?;
    let ids = encode_documents(&tok, &docs)?;
    let split = split_documents_ids(ids, opts.val_fraction, opts.seed);
    write_prepared(out, &tok, &split, docs.len(), sources, opts.val_fraction, opts.seed)
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

/// The ids of a packed `.bin` file of a prepared corpus, memory-mapped (read in
/// place, never copied), after checking its size against the manifest's count
/// and every id against the vocabulary. The check reads the file through a
/// buffer, not the map, so the mapped pages stay out of the process's memory
/// until training touches them.
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
    // SAFETY: a read-only mapping. As with every mapped reader (ggml-rs maps
    // GGUF files the same way), another process truncating the file meanwhile
    // could fault; its size was checked just above.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| input(format!("cannot map {p}: {e}")))?;
    if map.len() as u64 != len {
        return Err(input(format!("{p} changed while it was read")));
    }
    Ok(Tokens::mapped(std::sync::Arc::new(map), 0, count as usize, width))
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
    let m = read_manifest(dir)?;
    let d = dir.display();
    let tok = Tokenizer::load(&dir.join("tokenizer.json"))?;
    if tok.sha256() != m.tokenizer_sha256 {
        return Err(input(format!("{d}/tokenizer.json does not match manifest.json (sha256 {} ≠ {})", tok.sha256(), m.tokenizer_sha256)));
    }
    if tok.vocab_size() != m.vocab_size {
        return Err(input(format!("{d}: the tokenizer has {} ids but manifest.json says {}", tok.vocab_size(), m.vocab_size)));
    }
    let train = read_packed(&dir.join("train.bin"), &m.dtype, m.train_tokens, m.vocab_size)?;
    let val = read_packed(&dir.join("val.bin"), &m.dtype, m.val_tokens, m.vocab_size)?;
    if train.is_empty() {
        return Err(input(format!("corpus {d} is empty (train.bin holds no tokens)")));
    }
    Ok(Corpus { train, val, vocab_size: m.vocab_size, tokenizer: Some(tok), source: dir.to_path_buf() })
}
