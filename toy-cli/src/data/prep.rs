//! `toy prep`: turn text into a prepared corpus, streaming, in bounded memory.
//!
//! The folder it writes:
//! - `tokenizer.json`: the byte-level BPE trained on the text (Hugging Face format);
//! - `train.bin`, `val.bin`: the token ids of the two splits, packed as
//!   little-endian u32 — the same bytes as toy's i32 `.bin` files, so each is
//!   also a valid toy corpus on its own;
//! - `manifest.json` ([`Manifest`], format `toy/prep-v1`), written last.
//!
//! Two passes over the input ([`sources`](super::sources): text, JSON Lines,
//! folders, `.gz`): the first counts the documents, hashes the files and keeps a
//! seeded uniform sample of documents (at most `--bpe-sample` bytes) for the
//! BPE; the second encodes every document in parallel batches and appends its
//! ids, each document followed by the end-of-text id, to the split a seeded
//! choice by document gave it (default 5% held out). Memory stays bounded by
//! the sample, one batch of documents and the longest line.

pub use super::prepared::{read_manifest, read_prepared, read_prepared_val, Manifest, SourceFile, DTYPE, FORMAT};
use super::sources::{discover, Documents, FileDigest, Source};
use super::text::{held_out, Split};
use super::tokenizer::Tokenizer;
use crate::error::{input, runtime, Error, Result};
use crate::files::is_leftover;
use crate::files::write_atomic;
use crate::rng::SplitMix64;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::Arc;

/// Default `--bpe-sample`: the BPE is trained on at most this many bytes of
/// whole documents, drawn uniformly (see bench/data.md for the measurements
/// behind it).
pub const DEFAULT_BPE_SAMPLE_BYTES: u64 = 64 << 20;

/// Documents are encoded in batches of about this many bytes of text.
const BATCH_BYTES: usize = 16 << 20;

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
    /// The field of a JSON Lines record that holds its text.
    pub text_field: String,
    /// Bytes of documents the BPE is trained on, at most.
    pub bpe_sample_bytes: u64,
    /// Set to a signal number to stop (the output folder is then cleaned up).
    pub stop: Option<Arc<AtomicI32>>,
    /// Show progress bars on stderr.
    pub progress: bool,
}

impl Default for PrepOptions {
    fn default() -> Self {
        PrepOptions {
            vocab_size: super::tokenizer::DEFAULT_VOCAB_SIZE,
            val_fraction: 0.05,
            seed: 0,
            force: false,
            text_field: "text".into(),
            bpe_sample_bytes: DEFAULT_BPE_SAMPLE_BYTES,
            stop: None,
            progress: false,
        }
    }
}

/// An output folder of `toy prep`, locked while this value lives.
pub struct OutDir {
    /// Whether [`check_out_dir`] created the folder.
    pub created: bool,
    /// The outermost of the folders above it that [`check_out_dir`] made.
    pub parents: Option<PathBuf>,
    /// Whether `out/.lock` was made by this prep (not left by an earlier one):
    /// an unfinished prep takes it away with what else it wrote.
    pub lock_made: bool,
    _lock: std::fs::File,
}

/// Whether `out` holds anything but leftovers ([`crate::files::is_leftover`]).
fn holds_files(out: &Path) -> bool {
    std::fs::read_dir(out).map(|d| d.flatten().any(|e| !is_leftover(&e.file_name().to_string_lossy()))).unwrap_or(false)
}

/// The name of a prepared corpus file in `out` that a process holds a shared
/// lock on (a `toy train` reading it: [`PackedFile`](super::tokens::PackedFile)).
fn being_read(out: &Path) -> Option<&'static str> {
    use fs4::FileExt;
    ["train.bin", "val.bin"]
        .into_iter()
        .find(|name| std::fs::File::open(out.join(name)).is_ok_and(|f| matches!(FileExt::try_lock(&f), Err(fs4::TryLockError::WouldBlock))))
}

/// Make sure `out` can receive a prepared corpus: create it, refuse a
/// non-empty one without `force`, lock it (`out/.lock`, as `toy train` locks
/// run folders) so a second prep into it is refused, remove what a prep that
/// died there left (with the lock held, no one else is writing them), and
/// check that a file can be written there.
///
/// # Errors
/// [`Error::Input`] for each of those, and for a
/// folder another process holds.
pub fn check_out_dir(out: &Path, force: bool) -> Result<OutDir> {
    crate::files::refuse_parent_dir_of_missing(out, "--out")?;
    let o = out.display();
    if out.exists() && !out.is_dir() {
        return Err(input(format!("--out {o} exists and is not a folder")));
    }
    let not_empty = || input(format!("--out {o} is not empty (use --force to write into it)"));
    if !force && holds_files(out) {
        return Err(not_empty());
    }
    // Whether this process made the folder, decided by one create_dir: of two
    // preps racing to a new folder only one made it, and only the one holding
    // the lock may take it away again (the other removed the winner's lock
    // and folder, and both failed).
    let mut parents = None;
    if let Some(parent) = out.parent().filter(|p| !p.as_os_str().is_empty()) {
        let above = crate::files::nearest_existing(out);
        if !above.is_dir() {
            return Err(input(format!("--out {o}: {} is not a folder", above.display())));
        }
        parents = crate::files::outermost_missing(parent);
        std::fs::create_dir_all(parent).map_err(|e| input(format!("cannot create --out {o}: {e}")))?;
    }
    let created = match std::fs::create_dir(out) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists && out.is_dir() => false,
        Err(e) => return Err(input(format!("cannot create --out {o}: {e}"))),
    };
    // The folders made for `out`, out first (empty unless another prep holds it: then it stays).
    let remove_made = || {
        if created {
            crate::files::remove_made_folder(out, parents.as_deref());
        }
    };
    let lock_made = !out.join(".lock").exists();
    let lock = crate::files::lock(out, "--out", "a toy prep writing into it").inspect_err(|_| remove_made())?;
    let undo = |e: Error| {
        if created || lock_made {
            let _ = std::fs::remove_file(out.join(".lock"));
        }
        remove_made();
        e
    };
    if let Ok(rd) = std::fs::read_dir(out) {
        for e in rd.flatten().filter(|e| e.file_name() != ".lock" && is_leftover(&e.file_name().to_string_lossy())) {
            let _ = std::fs::remove_file(e.path());
        }
    }
    // Another prep may have finished here between the first look and the lock.
    if !force && holds_files(out) {
        return Err(not_empty());
    }
    if let Some(read) = being_read(out) {
        return Err(undo(input(format!(
            "--out {o}: {read} is being read by a running toy train (--force would change the corpus under the run); wait for it or stop it"
        ))));
    }
    let probe = out.join(format!(".toy-write-test-{}", std::process::id()));
    if let Err(e) = crate::files::create_fresh(&probe) {
        return Err(undo(input(format!("cannot write into --out {o}: {e}"))));
    }
    let _ = std::fs::remove_file(&probe);
    Ok(OutDir { created, parents, lock_made, _lock: lock })
}

fn pack(ids: &[u32]) -> Vec<u8> {
    ids.iter().flat_map(|i| i.to_le_bytes()).collect()
}

/// Write the manifest of a prepared corpus in `out` whose other files are in place.
fn write_manifest(out: &Path, m: &Manifest) -> Result<()> {
    let mut json = serde_json::to_string_pretty(m).map_err(|e| runtime(e.to_string()))?;
    json.push('\n');
    write_atomic(&out.join("manifest.json"), json.as_bytes())
}

/// Write a prepared corpus of `split` (in memory) tokenized by `tok` into `out`
/// (which [`check_out_dir`] accepted): the tokenizer and the two `.bin` files,
/// each atomically, then the manifest. A stale manifest is removed first, so an
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
    remove_stale_manifest(out)?;
    // A failure (a full disk) leaves none of the files, not a tokenizer without a manifest.
    let guard = Cleanup {
        out: out.to_path_buf(),
        created: false,
        parents: None,
        files: ["tokenizer.json", "train.bin", "val.bin"].iter().map(|n| out.join(n)).collect(),
        done: false,
    };
    tok.save(&out.join("tokenizer.json"))?;
    write_atomic(&out.join("train.bin"), &pack(&split.train))?;
    write_atomic(&out.join("val.bin"), &pack(&split.val))?;
    let m = manifest(
        tok,
        split.train.len() as u64,
        split.val.len() as u64,
        n_documents,
        split.val_documents,
        sources,
        val_fraction,
        seed,
        None,
    );
    write_manifest(out, &m)?;
    guard.commit();
    Ok(m)
}

#[allow(clippy::too_many_arguments)]
fn manifest(
    tok: &Tokenizer,
    train_tokens: u64,
    val_tokens: u64,
    n_documents: usize,
    val_documents: usize,
    source_files: Vec<SourceFile>,
    val_fraction: f64,
    seed: u64,
    bpe_sample_bytes: Option<u64>,
) -> Manifest {
    Manifest {
        format: FORMAT.into(),
        vocab_size: tok.vocab_size(),
        dtype: DTYPE.into(),
        train_tokens,
        val_tokens,
        n_documents,
        val_documents,
        val_fraction,
        seed,
        source_files,
        tokenizer_sha256: tok.sha256(),
        eot_id: tok.eot(),
        bpe_sample_bytes,
    }
}

fn remove_stale_manifest(out: &Path) -> Result<()> {
    let p = out.join("manifest.json");
    if p.exists() {
        std::fs::remove_file(&p).map_err(|e| runtime(format!("cannot replace {}: {e}", p.display())))?;
    }
    Ok(())
}

/// Removes what an unfinished prep wrote (temporary files, a tokenizer without a
/// manifest, the folder when it created it) unless [`commit`](Self::commit)ted.
struct Cleanup {
    out: PathBuf,
    created: bool,
    parents: Option<PathBuf>,
    files: Vec<PathBuf>,
    done: bool,
}

impl Cleanup {
    fn commit(mut self) {
        self.done = true;
    }
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        for f in &self.files {
            let _ = std::fs::remove_file(f);
        }
        if self.created {
            crate::files::remove_made_folder(&self.out, self.parents.as_deref());
        }
    }
}

fn check_stop(stop: &Option<Arc<AtomicI32>>) -> Result<()> {
    match stop.as_ref().map(|s| s.load(Ordering::SeqCst)).unwrap_or(0) {
        0 => Ok(()),
        sig => Err(Error::Interrupted(sig, "interrupted; nothing was written".into())),
    }
}

fn bar(show: bool, total: u64, what: &str) -> Option<indicatif::ProgressBar> {
    show.then(|| {
        crate::output::progress_bar(
            total,
            &format!("{what:<9} {{bar:30}} {{bytes}}/{{total_bytes}} {{bytes_per_sec}} {{msg}} [{{elapsed_precise}} < {{eta_precise}}]"),
        )
    })
}

/// What the first pass learns: documents, files, and the BPE sample.
struct Scan {
    n_docs: usize,
    digests: Vec<FileDigest>,
    /// (key, document, piece) of the sampled pieces; the smallest keys win.
    sample: std::collections::BinaryHeap<(u64, usize, String)>,
    sample_bytes: u64,
}

/// First pass: count documents and keep the pieces with the smallest seeded keys
/// up to `budget` bytes, and at least one (a uniform sample of the text, the
/// same for every run).
fn scan(sources: &[Source], opts: &PrepOptions, total: u64) -> Result<Scan> {
    let mut docs = Documents::new(sources, &opts.text_field);
    let pb = bar(opts.progress, total, "reading");
    let mut sample = std::collections::BinaryHeap::new();
    let (mut bytes, mut piece_no) = (0u64, 0u64);
    let key_seed = opts.seed ^ 0xB9E5_3C1F_5A77_D00D;
    while let Some(p) = docs.next() {
        let p = p?;
        piece_no += 1;
        let key = SplitMix64::new(key_seed ^ piece_no.wrapping_mul(0x9E37_79B9_7F4A_7C15)).next_u64();
        bytes += p.text.len() as u64;
        sample.push((key, p.doc, p.text));
        // At least one piece, however small the budget: a BPE trained on nothing has no merges.
        while bytes > opts.bpe_sample_bytes && sample.len() > 1 {
            let Some((_, _, t)) = sample.pop() else { break };
            bytes -= t.len() as u64;
        }
        if piece_no % 1024 == 0 {
            check_stop(&opts.stop)?;
            if let Some(pb) = &pb {
                pb.set_position(docs.bytes_read.load(Ordering::Relaxed));
                pb.set_message(format!("{} documents", docs.documents()));
            }
        }
    }
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    Ok(Scan { n_docs: docs.documents(), digests: docs.digests().to_vec(), sample, sample_bytes: bytes })
}

/// A `.bin` being written through a buffer, to a temporary name.
struct BinWriter {
    tmp: PathBuf,
    file: std::io::BufWriter<std::fs::File>,
    tokens: u64,
}

impl BinWriter {
    fn create(tmp: PathBuf) -> Result<BinWriter> {
        let f = crate::files::create_fresh(&tmp).map_err(|e| runtime(format!("cannot write {}: {e}", tmp.display())))?;
        Ok(BinWriter { tmp, file: std::io::BufWriter::with_capacity(1 << 20, f), tokens: 0 })
    }

    fn push(&mut self, ids: &[u32]) -> Result<()> {
        self.file.write_all(&pack(ids)).map_err(|e| runtime(format!("cannot write {}: {e}", self.tmp.display())))?;
        self.tokens += ids.len() as u64;
        Ok(())
    }

    fn finish(self) -> Result<(PathBuf, u64)> {
        let f = self.file.into_inner().map_err(|e| runtime(format!("cannot write {}: {e}", self.tmp.display())))?;
        f.sync_all().map_err(|e| runtime(format!("cannot write {}: {e}", self.tmp.display())))?;
        Ok((self.tmp, self.tokens))
    }
}

/// Second pass: encode every piece in parallel batches and append the ids to
/// the split of its document. Returns the validation documents seen.
fn encode(
    sources: &[Source],
    tok: &Tokenizer,
    held: &[bool],
    opts: &PrepOptions,
    train: &mut BinWriter,
    val: &mut BinWriter,
    total: u64,
) -> Result<usize> {
    let end: Vec<u32> = match tok.eot() {
        Some(e) => vec![e],
        None => tok.encode("\n")?,
    };
    let mut docs = Documents::new(sources, &opts.text_field);
    let pb = bar(opts.progress, total, "encoding");
    let t0 = std::time::Instant::now();
    let mut batch: Vec<super::sources::Piece> = Vec::new();
    let (mut batch_bytes, mut val_docs, mut tokens) = (0usize, 0usize, 0u64);
    let mut flush = |batch: &mut Vec<super::sources::Piece>, tokens: &mut u64, val_docs: &mut usize| -> Result<()> {
        let texts: Vec<&str> = batch.iter().map(|p| p.text.as_str()).collect();
        let ids = tok.encode_batch(&texts)?;
        for (p, ids) in batch.iter().zip(ids) {
            let w = if held[p.doc] { &mut *val } else { &mut *train };
            w.push(&ids)?;
            *tokens += ids.len() as u64;
            if p.last {
                w.push(&end)?;
                *tokens += end.len() as u64;
                *val_docs += held[p.doc] as usize;
            }
        }
        batch.clear();
        Ok(())
    };
    while let Some(p) = docs.next() {
        let p = p?;
        if p.doc >= held.len() {
            return Err(input("the input changed between the two passes of toy prep (more documents the second time)"));
        }
        batch_bytes += p.text.len();
        batch.push(p);
        if batch_bytes >= BATCH_BYTES {
            check_stop(&opts.stop)?;
            flush(&mut batch, &mut tokens, &mut val_docs)?;
            batch_bytes = 0;
            if let Some(pb) = &pb {
                pb.set_position(docs.bytes_read.load(Ordering::Relaxed));
                pb.set_message(format!("{:.0} tokens/s", tokens as f64 / t0.elapsed().as_secs_f64().max(1e-9)));
            }
        }
    }
    flush(&mut batch, &mut tokens, &mut val_docs)?;
    if let Some(pb) = pb {
        pb.finish_and_clear();
    }
    Ok(val_docs)
}

/// One document split by tokens (as [`super::text::split_tail`]): move the last
/// `fraction` of `train`'s tokens into `val`.
fn split_single_document(train: &Path, val: &Path, tokens: u64, fraction: f64) -> Result<(u64, u64)> {
    let n_val = ((tokens as f64) * fraction.clamp(0.0, 1.0)) as u64;
    let n_train = tokens - n_val;
    let io = |e: std::io::Error| runtime(format!("cannot write {}: {e}", train.display()));
    let mut src = std::fs::File::open(train).map_err(io)?;
    std::io::Seek::seek(&mut src, std::io::SeekFrom::Start(n_train * 4)).map_err(io)?;
    let mut dst = crate::files::create_fresh(val).map_err(io)?;
    std::io::copy(&mut src, &mut dst).map_err(io)?;
    dst.sync_all().map_err(io)?;
    std::fs::OpenOptions::new().write(true).open(train).and_then(|f| f.set_len(n_train * 4)).map_err(io)?;
    Ok((n_train, n_val))
}

/// Refuse what `toy prep` cannot do before reading anything: no inputs, a
/// validation fraction outside [0, 1), a vocabulary outside 257..=max, no BPE sample.
fn check_options(files: &[PathBuf], opts: &PrepOptions) -> Result<()> {
    if files.is_empty() {
        return Err(input("no input files (give one or more text files or folders)"));
    }
    if !(0.0..1.0).contains(&opts.val_fraction) {
        return Err(input(format!("--val-fraction must be in [0, 1), not {}", opts.val_fraction)));
    }
    if opts.vocab_size > super::tokenizer::MAX_VOCAB_SIZE {
        return Err(input(format!("--vocab-size {} is too large (at most {})", opts.vocab_size, super::tokenizer::MAX_VOCAB_SIZE)));
    }
    if opts.vocab_size < 257 {
        return Err(input(format!(
            "--vocab-size {} is too small: a byte-level BPE needs at least 257 ids (256 bytes and <|endoftext|>)",
            opts.vocab_size
        )));
    }
    if opts.bpe_sample_bytes == 0 {
        return Err(input("--bpe-sample must be above 0"));
    }
    Ok(())
}

/// Train the BPE of `opts.vocab_size` ids on `sample` (`sample_bytes` of the
/// `n_docs` documents), saying so under `opts.progress`; with the bytes it was
/// trained on (fewer than `sample_bytes` where the trainer's budget of
/// distinct words cut it, which a note says).
fn train_tokenizer(sample: Vec<String>, sample_bytes: u64, n_docs: usize, opts: &PrepOptions) -> Result<(Tokenizer, u64)> {
    if opts.progress {
        eprintln!("training the BPE on {:.1} MB of {} documents…", sample_bytes as f64 / 1e6, n_docs);
    }
    let t_bpe = std::time::Instant::now();
    let vocab_size = opts.vocab_size;
    let (tok, cut) = crate::signals::interruptible(opts.stop.as_deref(), "training the tokenizer", move || {
        super::bpe_train::train_bpe_within(sample.iter().map(String::as_str), vocab_size, super::bpe_train::MAX_TRAIN_DISTINCT_BYTES)
    })?;
    if let Some(read) = cut {
        crate::note!("{}", super::bpe_train::cut_note(read));
    }
    check_stop(&opts.stop)?;
    if opts.progress {
        eprintln!("trained a BPE of {} ids in {:.1} s", tok.vocab_size(), t_bpe.elapsed().as_secs_f64());
    }
    Ok((tok, cut.map_or(sample_bytes, |r| r as u64)))
}

/// Refuse an input that is one of the files a prep writes into `out` (with
/// `--force` it was overwritten: the text lost, the manifest's hash of a file
/// no longer there).
fn check_inputs_not_outputs(sources: &[super::sources::Source], out: &Path) -> Result<()> {
    let outputs: Vec<(&str, PathBuf)> = ["train.bin", "val.bin", "tokenizer.json", "manifest.json"]
        .into_iter()
        .filter_map(|name| Some((name, std::fs::canonicalize(out.join(name)).ok()?)))
        .collect();
    if outputs.is_empty() {
        return Ok(());
    }
    for s in sources {
        let Ok(p) = std::fs::canonicalize(&s.path) else { continue };
        if let Some((name, _)) = outputs.iter().find(|(_, o)| *o == p) {
            return Err(input(format!(
                "--out {}: its {name} would replace the input {}; write elsewhere",
                out.display(),
                s.path.display()
            )));
        }
    }
    Ok(())
}

/// `toy prep`: train a byte-level BPE on `files` (text, JSON Lines, folders,
/// `.gz`), tokenize them and write a prepared corpus into `out`.
///
/// # Errors
/// [`Error::Input`] for a missing, malformed
/// (non-UTF-8, bad JSON, naming file and line) or empty input, bad options, or
/// an output folder that is not empty (without `force`) or cannot be written;
/// [`Error::Interrupted`] when `opts.stop` is
/// set. Either way nothing that looks like a prepared corpus is left behind.
pub fn prep(files: &[PathBuf], out: &Path, opts: &PrepOptions) -> Result<Manifest> {
    check_options(files, opts)?;
    let sources = discover(files)?;
    let total: u64 = sources.iter().map(|s| s.bytes).sum();
    check_inputs_not_outputs(&sources, out)?;
    let out_dir = check_out_dir(out, opts.force)?;
    let (train_tmp, val_tmp) = (crate::files::temp_path(&out.join("train.bin")), crate::files::temp_path(&out.join("val.bin")));
    let mut temps = vec![train_tmp.clone(), val_tmp.clone()];
    if out_dir.created || out_dir.lock_made {
        temps.push(out.join(".lock"));
    }
    let mut guard =
        Cleanup { out: out.to_path_buf(), created: out_dir.created, parents: out_dir.parents.clone(), files: temps, done: false };

    let scan = scan(&sources, opts, total)?;
    if scan.n_docs == 0 {
        let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
        return Err(input(format!("no text in {} (empty, or only <|endoftext|> lines)", names.join(", "))));
    }
    let sample: Vec<String> = scan.sample.into_sorted_vec().into_iter().map(|(_, _, t)| t).collect();
    let (tok, trained_bytes) = train_tokenizer(sample, scan.sample_bytes, scan.n_docs, opts)?;

    let held = if scan.n_docs == 1 { vec![false] } else { held_out(scan.n_docs, opts.val_fraction, opts.seed) };
    let (mut train, mut val) = (BinWriter::create(train_tmp)?, BinWriter::create(val_tmp)?);
    let val_docs = encode(&sources, &tok, &held, opts, &mut train, &mut val, total)?;
    let (train_tmp, mut n_train) = train.finish()?;
    let (val_tmp, mut n_val) = val.finish()?;
    if scan.n_docs == 1 {
        (n_train, n_val) = split_single_document(&train_tmp, &val_tmp, n_train, opts.val_fraction)?;
    }
    check_stop(&opts.stop)?;
    // From here the folder's old corpus (with --force) is replaced: first its manifest goes.
    remove_stale_manifest(out)?;
    guard.files.push(out.join("tokenizer.json"));
    tok.save(&out.join("tokenizer.json"))?;
    for (tmp, name) in [(&train_tmp, "train.bin"), (&val_tmp, "val.bin")] {
        std::fs::rename(tmp, out.join(name)).map_err(|e| runtime(format!("cannot write {}: {e}", out.join(name).display())))?;
        guard.files.push(out.join(name));
    }
    let digest = |d: &FileDigest| SourceFile { path: d.path.display().to_string(), bytes: d.bytes, sha256: d.sha256.clone() };
    let m = manifest(
        &tok,
        n_train,
        n_val,
        scan.n_docs,
        if scan.n_docs == 1 { 0 } else { val_docs },
        scan.digests.iter().map(digest).collect(),
        opts.val_fraction,
        opts.seed,
        Some(trained_bytes),
    );
    write_manifest(out, &m)?;
    guard.commit();
    Ok(m)
}
