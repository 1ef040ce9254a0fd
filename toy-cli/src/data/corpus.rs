//! Corpus readers. What `path` holds decides how it is read:
//!
//! - a folder with `manifest.json`: a prepared corpus (`toy prep`);
//! - `*.bin`: toy's headerless little-endian i32 ids; the last `val_fraction`
//!   of the tokens is the validation split;
//! - `*.txt` whose every non-empty line is only integers: toy's id file, one
//!   sequence per line; the last `val_fraction` of the lines is the validation
//!   split (of the tokens when there is one line);
//! - anything else: raw UTF-8 text, documents separated by `<|endoftext|>`
//!   lines — or JSON Lines (`.jsonl`, one document per record), a folder of
//!   text or JSON Lines files, `.gz` of these (see [`super::sources`]) —
//!   tokenized with [`TextOptions::tokenizer`] or — when none is given — a
//!   byte-level BPE of [`DEFAULT_VOCAB_SIZE`] ids trained on the text itself
//!   (fewer when the text is too small); 5% of the documents are held out.

use super::chat_examples::ChatCorpus;
use super::prep::read_prepared;
use super::sources::{discover, format_of, Documents, Format};
use super::text::{encode_documents, pieces, read_text, split_documents, split_documents_ids, split_tail, Split, CHUNK_BYTES};
use super::tokenizer::{Tokenizer, DEFAULT_VOCAB_SIZE};
use super::tokens::Tokens;
use crate::error::{input, Result};
use std::path::{Path, PathBuf};

/// Token ids split for training and validation, and how to read them back.
#[derive(Clone, Debug)]
pub struct Corpus {
    /// In memory, or mapped from a prepared folder's `train.bin`.
    pub train: Tokens,
    pub val: Tokens,
    pub vocab_size: usize,
    /// The tokenizer, when the corpus came from text or a prepared folder.
    pub tokenizer: Option<Tokenizer>,
    /// Where it came from.
    pub source: PathBuf,
    /// Conversations, when the corpus is chat data: `train` and `val` then
    /// hold their ids end to end (for counts), and batches come from these.
    pub chat: Option<ChatCorpus>,
    /// UTF-8 bytes of the documents read from text (each document's bytes
    /// after trimming, plus one for its end of text), for bits per byte;
    /// `None` for ids, prepared folders and chat data.
    pub text_bytes: Option<usize>,
}

impl Corpus {
    /// The corpus of the chat examples `chat` from `source`, tokenized with `tok`.
    pub fn of_chat(chat: ChatCorpus, tok: &Tokenizer, source: &Path) -> Corpus {
        let ids =
            |v: &[super::chat_examples::Example]| -> Tokens { v.iter().flat_map(|e| e.ids.iter().copied()).collect::<Vec<u32>>().into() };
        Corpus {
            train: ids(&chat.train),
            val: ids(&chat.val),
            vocab_size: tok.vocab_size(),
            tokenizer: Some(tok.clone()),
            source: source.to_path_buf(),
            chat: Some(chat),
            text_bytes: None,
        }
    }

    /// Refuse a corpus whose ids come from another tokenizer than `tok` (a
    /// prepared folder carries its own): they mean other tokens to the model.
    /// `advice` ends the refusal ([`GIVE_RAW_TEXT`] where the caller may take
    /// the raw text instead).
    ///
    /// # Errors
    /// [`Error::Input`](crate::error::Error::Input) naming the corpus.
    pub fn check_tokenizer(&self, tok: &Tokenizer, advice: &str) -> Result<()> {
        match &self.tokenizer {
            Some(theirs) if theirs.tokens() != tok.tokens() => {
                let (a, b) = (theirs.vocab_size(), tok.vocab_size());
                let sizes = if a == b { format!("{a} ids each, other tokens") } else { format!("{a} vs {b} ids") };
                Err(input(format!(
                    "--corpus {}: prepared with another tokenizer than the model's ({sizes}); {advice}",
                    self.source.display()
                )))
            }
            _ => Ok(()),
        }
    }
}

/// [`Corpus::check_tokenizer`]'s advice where a command may read the raw text.
pub const GIVE_RAW_TEXT: &str = "give the raw text instead";

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

/// How to read raw text.
#[derive(Clone, Debug)]
pub struct TextOptions {
    /// Tokenize with this (e.g. a checkpoint's) instead of training a BPE.
    pub tokenizer: Option<Tokenizer>,
    /// Vocabulary size of the BPE trained when no tokenizer is given.
    pub bpe_vocab_size: usize,
    /// Seed of the choice of validation documents.
    pub seed: u64,
    /// The text field of JSON Lines records.
    pub text_field: String,
}

impl Default for TextOptions {
    fn default() -> Self {
        TextOptions { tokenizer: None, bpe_vocab_size: DEFAULT_VOCAB_SIZE, seed: 0, text_field: "text".into() }
    }
}

/// Refuse `--text-field` when none of `paths` holds JSON Lines input (`.jsonl`,
/// `.ndjson`, their `.gz`): on a text file, a prepared folder or the embedded
/// corpus (no `paths`) it would be ignored. Paths that cannot be read are left
/// to the loader to report.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming the inputs.
pub fn check_text_field(paths: &[PathBuf], field: Option<&str>) -> Result<()> {
    let Some(field) = field else { return Ok(()) };
    let json_lines = |p: &PathBuf| {
        let prepared = super::prepared::is_prepared(p);
        !prepared && discover(std::slice::from_ref(p)).map_or(true, |s| s.iter().any(|s| s.format == Format::JsonLines))
    };
    if paths.iter().any(json_lines) {
        return Ok(());
    }
    let what = match paths {
        [] => "the embedded corpus".to_string(),
        _ => paths.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(", "),
    };
    Err(input(format!("--text-field {field:?} applies to JSON Lines input (.jsonl, .ndjson), and {what} holds none")))
}

/// Read the corpus at `path` (see the module documentation for the formats).
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming the file for a missing,
/// empty or malformed corpus, or ids outside the vocabulary (with their position).
pub fn load_corpus(path: &Path, opts: &CorpusOptions) -> Result<Corpus> {
    load_corpus_with(path, opts, &TextOptions::default())
}

/// [`load_corpus`] with options for raw text.
pub fn load_corpus_with(path: &Path, opts: &CorpusOptions, text: &TextOptions) -> Result<Corpus> {
    let p = path.display();
    if !path.exists() {
        return Err(input(format!("corpus {p} does not exist")));
    }
    if !(0.0..1.0).contains(&opts.val_fraction) {
        return Err(input(format!("the validation fraction must be in [0, 1), not {}", opts.val_fraction)));
    }
    if super::prepared::is_prepared(path) {
        return read_prepared(path);
    }
    if !path.is_dir() && !path.is_file() {
        return Err(input(format!("corpus {p} is not a regular file or a folder")));
    }
    let ext = path.extension().and_then(|e| e.to_str()).unwrap_or("");
    let corpus = |split: Split, vocab_size, tokenizer, text_bytes| Corpus {
        train: split.train.into(),
        val: split.val.into(),
        vocab_size,
        tokenizer,
        source: path.to_path_buf(),
        chat: None,
        text_bytes,
    };
    // A folder of text files, JSON Lines, gzip: documents through `sources`.
    let (format, gzip) = format_of(path);
    if path.is_dir() || gzip || format == Format::JsonLines {
        let docs = read_documents(path, &text.text_field)?;
        if docs.is_empty() {
            return Err(input(format!("corpus {p} has no text")));
        }
        let docs: Vec<&str> = docs.iter().map(String::as_str).collect();
        let bytes = document_bytes(&docs);
        return encode_text(docs, text, opts).map(|(s, v, t)| corpus(s, v, Some(t), Some(bytes)));
    }
    if ext == "bin" {
        let bytes = std::fs::read(path).map_err(|e| input(format!("cannot read corpus {p}: {e}")))?;
        let ids = parse_bin(&bytes, path)?;
        let vocab = check_vocab(&ids, opts.vocab_size, |i| format!("{p}: token {i}"))?;
        return Ok(corpus(split_tail(ids, opts.val_fraction), vocab, None, None));
    }
    let source = read_text(path)?;
    if source.trim().is_empty() {
        return Err(input(format!("corpus {p} is empty")));
    }
    if ext == "txt" {
        if let Some(lines) = parse_id_lines(&source, path)? {
            let vocab = match opts.vocab_size {
                Some(v) => {
                    let mut all = lines.iter().flat_map(|(n, l)| l.iter().map(move |&(id, col)| (*n, col, id)));
                    if let Some((line, col, id)) = all.find(|&(_, _, id)| id as usize >= v) {
                        return Err(input(format!("{p}:{line}:{col}: id {id} is outside the vocabulary of {v} ({AS_IDS})")));
                    }
                    v
                }
                None => {
                    let all = lines.iter().flat_map(|(n, l)| l.iter().map(move |&(id, col)| (id as usize + 1, *n, col)));
                    let (v, line, col) = all.max_by_key(|x| x.0).unwrap_or((1, 0, 0));
                    note_big_vocab(&format!("{p}:{line}:{col}"), v);
                    v
                }
            };
            crate::note!("note: {p}: {AS_IDS}");
            return Ok(corpus(split_lines(lines, opts.val_fraction), vocab, None, None));
        }
    }
    let docs = split_documents(&source);
    if docs.is_empty() {
        return Err(input(format!("corpus {p} has no text besides <|endoftext|> lines")));
    }
    let bytes = document_bytes(&docs);
    encode_text(docs, text, opts).map(|(s, v, t)| corpus(s, v, Some(t), Some(bytes)))
}

/// The first documents of the text corpus `path` (a text file, a folder, JSON
/// Lines, gzip), tokenized in order with `text.tokenizer` until they hold at
/// least `min_tokens` ids (or all of them), none held out: the start of what
/// [`load_corpus_with`] gives without a validation fraction, for `toy eval
/// --max-windows`, whose windows read the start only (a long corpus was
/// tokenized whole for a few windows). `None`, having tokenized nothing, for
/// what is not text (a prepared folder, token ids) or without a tokenizer,
/// and for text that `load_corpus_with` refuses: the caller loads it whole.
///
/// # Errors
/// What reading and tokenizing the documents returns.
pub fn load_text_prefix(path: &Path, text: &TextOptions, min_tokens: usize) -> Result<Option<Corpus>> {
    let Some(tok) = &text.tokenizer else { return Ok(None) };
    if !path.exists() || super::prepared::is_prepared(path) {
        return Ok(None);
    }
    let (format, gzip) = format_of(path);
    let (owned, source);
    let docs: Vec<&str> = if path.is_dir() || gzip || format == Format::JsonLines {
        owned = read_documents(path, &text.text_field)?;
        owned.iter().map(String::as_str).collect()
    } else if path.is_file() && path.extension().and_then(|e| e.to_str()) != Some("bin") {
        source = read_text(path)?;
        if source.trim().is_empty() || parse_id_lines(&source, path)?.is_some() {
            return Ok(None);
        }
        split_documents(&source)
    } else {
        return Ok(None);
    };
    let mut ids: Vec<u32> = Vec::new();
    let mut used = 0;
    while used < docs.len() && ids.len() < min_tokens {
        ids.extend(encode_documents(tok, &docs[used..used + 1])?.into_iter().flatten());
        used += 1;
    }
    if used == 0 {
        return Ok(None);
    }
    Ok(Some(Corpus {
        train: ids.into(),
        val: Vec::new().into(),
        vocab_size: tok.vocab_size(),
        tokenizer: Some(tok.clone()),
        source: path.to_path_buf(),
        chat: None,
        text_bytes: Some(document_bytes(&docs[..used])),
    }))
}

/// Fisher–Yates with a fixed seed (SplitMix64): the same text, the same order.
fn shuffle<T>(v: &mut [T]) {
    let mut rng = crate::rng::SplitMix64::new(0x05ee_db9e);
    for i in (1..v.len()).rev() {
        v.swap(i, (rng.next_u64() % (i as u64 + 1)) as usize);
    }
}

/// Bytes of `docs` as [`Corpus::text_bytes`] counts them: each one's, plus one
/// for its end of text.
fn document_bytes(docs: &[&str]) -> usize {
    docs.iter().map(|d| d.len() + 1).sum()
}

/// Tokenize documents (with `text.tokenizer`, or a BPE trained on them) and split them.
fn encode_text(docs: Vec<&str>, text: &TextOptions, opts: &CorpusOptions) -> Result<(Split, usize, Tokenizer)> {
    let tok = match &text.tokenizer {
        Some(t) => t.clone(),
        // In pieces (the pre-tokenizer's memory grows with what it is given at
        // once), in a fixed shuffled order: the trainer stops at a budget of
        // distinct words, and what it reads must be a uniform sample of the
        // text, not its start; where it reads everything, the order changes
        // nothing (it counts words).
        None => {
            let mut all: Vec<&str> = docs.iter().flat_map(|d| pieces(d, CHUNK_BYTES)).collect();
            shuffle(&mut all);
            Tokenizer::train_bpe(all.into_iter(), text.bpe_vocab_size)?
        }
    };
    let ids = encode_documents(&tok, &docs)?;
    let vocab = tok.vocab_size();
    Ok((split_documents_ids(ids, opts.val_fraction, text.seed), vocab, tok))
}

/// The documents of `path` (a folder, JSON Lines, gzip; see [`super::sources`]), whole.
pub fn read_documents(path: &Path, text_field: &str) -> Result<Vec<String>> {
    let sources = discover(&[path.to_path_buf()])?;
    let mut docs: Vec<String> = Vec::new();
    let mut open = false;
    for piece in Documents::new(&sources, text_field) {
        let piece = piece?;
        if open {
            docs.last_mut().expect("an open document").push_str(&piece.text);
        } else {
            docs.push(piece.text);
        }
        open = !piece.last;
    }
    Ok(docs)
}

/// Ids of a `.bin` file (headerless little-endian i32).
fn parse_bin(bytes: &[u8], path: &Path) -> Result<Vec<u32>> {
    let p = path.display();
    if bytes.is_empty() {
        return Err(input(format!("corpus {p} is empty")));
    }
    if bytes.len() % 4 != 0 {
        return Err(input(format!("{p}: {} bytes is not a whole number of i32 ids", bytes.len())));
    }
    bytes
        .chunks_exact(4)
        .enumerate()
        .map(|(i, c)| {
            let v = i32::from_le_bytes([c[0], c[1], c[2], c[3]]);
            u32::try_from(v).map_err(|_| input(format!("{p}: token {i} (byte offset {}) is the negative id {v}", i * 4)))
        })
        .collect()
}

/// The vocabulary size: `given`, or the largest id + 1. `what(i)` names
/// position `i` in the error for an id outside a given vocabulary, and in the
/// note printed when the largest id makes a vocabulary above [`BIG_VOCAB`].
fn check_vocab(ids: &[u32], given: Option<usize>, what: impl Fn(usize) -> String) -> Result<usize> {
    match given {
        Some(v) => match ids.iter().position(|&x| x as usize >= v) {
            Some(i) => Err(input(format!("{}: id {} is outside the vocabulary of {v}", what(i), ids[i]))),
            None => Ok(v),
        },
        None => match ids.iter().enumerate().max_by_key(|&(_, &x)| x) {
            // a vocabulary ggml's i32 ids cannot index: a corrupt or foreign file, named here
            Some((i, &m)) if m as usize >= i32::MAX as usize => {
                Err(input(format!("{}: id {m} is beyond any vocabulary toy can train (ids below {})", what(i), i32::MAX)))
            }
            Some((i, &m)) => {
                note_big_vocab(&what(i), m as usize + 1);
                Ok(m as usize + 1)
            }
            None => Ok(1),
        },
    }
}

/// Whether `path` is a `.txt` whose first 64 KiB (whole lines) hold whole
/// numbers only: `toy train` and `eval` read such a file as token ids
/// (`toy prep`, which tokenizes text, notes that it reads it as text).
pub fn reads_as_ids(path: &Path) -> bool {
    use std::io::Read as _;
    if path.extension().and_then(|e| e.to_str()) != Some("txt") {
        return false;
    }
    let mut head = Vec::new();
    let Ok(f) = std::fs::File::open(path) else { return false };
    if f.take(1 << 16).read_to_end(&mut head).is_err() {
        return false;
    }
    let whole = match head.iter().rposition(|&b| b == b'\n') {
        Some(i) if head.len() == 1 << 16 => &head[..=i],
        _ => &head[..],
    };
    let text = String::from_utf8_lossy(whole);
    !text.trim().is_empty() && matches!(parse_id_lines(&text, path), Ok(Some(_)))
}

/// How a `.txt` of whole numbers only is read, said when it is.
const AS_IDS: &str =
    "read as toy's token ids, one sequence per line, as it holds whole numbers only; to read it as text, give it another extension (e.g. .md)";

/// Vocabularies above this (Gemma's is 256,000) are noted when read off an id file.
const BIG_VOCAB: usize = 262_144;

/// A note when `vocab`, the largest id + 1 read at `at` (a path with a line and
/// column, or a token), is above [`BIG_VOCAB`]: larger than any tokenizer's,
/// more likely a typo than a vocabulary.
fn note_big_vocab(at: &str, vocab: usize) {
    if vocab > BIG_VOCAB {
        crate::note!("note: {at}: id {} makes the vocabulary {vocab} (the largest id + 1); give --vocab-size if it is a typo", vocab - 1);
    }
}

/// A parsed id line: its 1-based number and its ids with their 1-based columns.
type IdLine = (usize, Vec<(u32, usize)>);

/// The lines of a toy id file, or `None` when `text` is not one (some
/// non-empty line holds something other than integers).
///
/// # Errors
/// A negative id or one too large for 32 bits, naming `line:column`.
fn parse_id_lines(text: &str, path: &Path) -> Result<Option<Vec<IdLine>>> {
    let mut lines = Vec::new();
    for (n, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let mut ids = Vec::new();
        let mut col = 0;
        for word in line.split(|c: char| c.is_ascii_whitespace()) {
            let start = col;
            col += word.len() + 1;
            if word.is_empty() {
                continue;
            }
            let digits = word.strip_prefix('-').unwrap_or(word);
            // The column in characters: the line up to here is ids and ASCII whitespace
            // (any other word ended the parse), so it is the byte offset + 1.
            let at = || format!("{}:{}:{}", path.display(), n + 1, start + 1);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
                // One pass over the words: how many there are, how many are ids, and
                // whether all are numbers.
                let numeric = |w: &str| w.parse::<f64>().is_ok() && w.bytes().any(|b| b.is_ascii_digit());
                let (n, ids, all_numeric) = text.split_ascii_whitespace().fold((0usize, 0usize, true), |(n, k, all), w| {
                    (n + 1, k + usize::from(w.bytes().all(|b| b.is_ascii_digit())), all && numeric(w))
                });
                // Numbers only, some not whole: a broken id file, not text.
                if numeric(word) && all_numeric {
                    return Err(input(format!("{}: {word} is not a token id (an id file holds whole numbers)", at())));
                }
                // Nine words in ten ids: an id file with a typo, not text to train a BPE on.
                if n >= 10 && ids * 10 >= n * 9 {
                    return Err(input(format!(
                        "{}: {word:?} is not a token id, though {ids} of the file's {n} words are (an id file holds whole numbers; to train on it as text, give it another extension, e.g. .md)",
                        at()
                    )));
                }
                return Ok(None);
            }
            if word.starts_with('-') {
                return Err(input(format!("{}: negative id {word}", at())));
            }
            let id: u32 = word.parse().map_err(|_| input(format!("{}: id {word} is too large", at())))?;
            ids.push((id, start + 1));
        }
        lines.push((n + 1, ids));
    }
    Ok(if lines.is_empty() { None } else { Some(lines) })
}

/// Sequences (lines) in order; the last `fraction` of them for validation
/// (at least one when `fraction` > 0 and there are two or more).
fn split_lines(lines: Vec<IdLine>, fraction: f64) -> Split {
    let ids = |ls: &[IdLine]| -> Vec<u32> { ls.iter().flat_map(|(_, l)| l.iter().map(|&(id, _)| id)).collect() };
    if lines.len() < 2 {
        return split_tail(ids(&lines), fraction);
    }
    let n_val = if fraction > 0.0 { ((lines.len() as f64 * fraction).round() as usize).clamp(1, lines.len() - 1) } else { 0 };
    let cut = lines.len() - n_val;
    Split { train: ids(&lines[..cut]), val: ids(&lines[cut..]), val_documents: n_val }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn id_lines_are_recognised() {
        let p = Path::new("x.txt");
        let l = parse_id_lines("1 2 3\n\n 4  5\n", p).unwrap().unwrap();
        assert_eq!(l, vec![(1, vec![(1, 1), (2, 3), (3, 5)]), (3, vec![(4, 2), (5, 5)])]);
        assert!(parse_id_lines("1 2 three\n", p).unwrap().is_none());
        assert!(parse_id_lines("Once upon a time\n", p).unwrap().is_none());
        // Ids with one typo: refused where it is, not read as text.
        let e = parse_id_lines("1 2 3 4 5\n6 7x 8 9 10 11\n", p).unwrap_err().to_string();
        assert!(e.contains("x.txt:2:3") && e.contains("\"7x\"") && e.contains("10 of the file's 11"), "{e}");
        // Text with numbers in it is text.
        assert!(parse_id_lines("In 1999 there were 3 cats and 12 dogs.\n", p).unwrap().is_none());
        let e = parse_id_lines("1 2\n3 -4\n", p).unwrap_err().to_string();
        assert!(e.contains("x.txt:2:3") && e.contains("negative"), "{e}");
    }

    #[test]
    fn a_text_prefix_is_the_start_of_the_whole() {
        let dir = tempfile::tempdir().unwrap();
        let stories = crate::data::embedded::TEXT;
        let docs: Vec<&str> = split_documents(stories).into_iter().take(40).collect();
        let txt = dir.path().join("s.txt");
        std::fs::write(&txt, docs.join("\n<|endoftext|>\n")).unwrap();
        let jsonl = dir.path().join("s.jsonl");
        let lines: Vec<String> = docs.iter().map(|d| serde_json::json!({ "text": d }).to_string()).collect();
        std::fs::write(&jsonl, lines.join("\n")).unwrap();
        let text = TextOptions { tokenizer: Some(Tokenizer::Bytes), ..Default::default() };
        let whole_opts = CorpusOptions { val_fraction: 0.0, vocab_size: None };
        for path in [&txt, &jsonl] {
            let whole = load_corpus_with(path, &whole_opts, &text).unwrap().train.to_vec().unwrap();
            let part = load_text_prefix(path, &text, 500).unwrap().expect("text").train.to_vec().unwrap();
            assert!(part.len() >= 500 && part.len() < whole.len(), "{}: {} of {}", path.display(), part.len(), whole.len());
            assert_eq!(part[..], whole[..part.len()], "{}", path.display());
            let all = load_text_prefix(path, &text, usize::MAX).unwrap().expect("text").train.to_vec().unwrap();
            assert_eq!(all, whole, "{}: every document", path.display());
        }
        std::fs::write(dir.path().join("ids.txt"), "1 2 3\n4 5\n").unwrap();
        assert!(load_text_prefix(&dir.path().join("ids.txt"), &text, 10).unwrap().is_none(), "token ids are not text");
    }

    #[test]
    fn lines_split_at_line_boundaries() {
        let lines: Vec<IdLine> = (0..10).map(|n| (n + 1, vec![(n as u32, 1)])).collect();
        let s = split_lines(lines, 0.2);
        assert_eq!(s.train, (0..8).collect::<Vec<u32>>());
        assert_eq!(s.val, vec![8, 9]);
    }
}
