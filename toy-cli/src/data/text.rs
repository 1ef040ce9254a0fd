//! Raw text: reading UTF-8 files, splitting them into documents on
//! `<|endoftext|>` lines, tokenizing documents and holding some out for
//! validation.

use super::tokenizer::{Tokenizer, EOT};
use crate::error::{input, Result};
use crate::rng::SplitMix64;
use std::path::Path;

/// Documents longer than this are tokenized in pieces (see [`encode_document`]).
pub const CHUNK_BYTES: usize = 1 << 20;

/// Read `path` as UTF-8 text, without a leading byte order mark.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming the file when it is
/// missing or unreadable, and the byte offset of the first invalid byte when it
/// is not UTF-8.
pub fn read_text(path: &Path) -> Result<String> {
    let bytes = std::fs::read(path).map_err(|e| input(format!("cannot read {}: {e}", path.display())))?;
    let mut text = String::from_utf8(bytes)
        .map_err(|e| input(format!("{}: not UTF-8 text (invalid byte at offset {})", path.display(), e.utf8_error().valid_up_to())))?;
    // A byte order mark is not text (as `toy prep` reads files, see `sources`).
    if text.starts_with(BOM) {
        text.drain(..BOM.len_utf8());
    }
    Ok(text)
}

/// The UTF-8 byte order mark some editors write at the start of a file.
pub const BOM: char = '\u{feff}';

/// The documents of `text`: the pieces between lines that are exactly
/// `<|endoftext|>` (a trailing `\r` is allowed), with surrounding whitespace
/// trimmed; empty documents are dropped.
pub fn split_documents(text: &str) -> Vec<&str> {
    let mut docs = Vec::new();
    let mut start = 0;
    let mut pos = 0;
    for line in text.split_inclusive('\n') {
        let bare = line.trim_end_matches('\n').trim_end_matches('\r');
        if bare == EOT {
            docs.push(&text[start..pos]);
            start = pos + line.len();
        }
        pos += line.len();
    }
    docs.push(&text[start..]);
    docs.into_iter().map(str::trim).filter(|d| !d.is_empty()).collect()
}

/// No tokenizer call sees more than this many bytes of a document without a
/// newline to cut it at: it is cut before a space between words, which changes
/// no id, or, without one, anyway (see [`fallback_cut`]). A tokenizer call
/// takes ~100 bytes of memory per byte it is given (a 200 MB line of one letter
/// took 21 GB; at 2 MB, a line of words took ~600 MB to prepare against ~140
/// MB for the same text in lines), so this is kept small.
pub const MAX_UNCUT_BYTES: usize = 256 << 10;

/// Byte offsets where `doc` can be cut, about `chunk` bytes apart: just after
/// a `\n` that has non-whitespace on both sides (the `ByteLevel`
/// pre-tokenizer's regex makes such a newline a piece of its own, and no
/// pattern joins it to what follows), or, after `max_uncut` bytes without one,
/// where [`fallback_cut`] says.
fn cut_points(doc: &str, chunk: usize, max_uncut: usize) -> Vec<usize> {
    let b = doc.as_bytes();
    let mut cuts = Vec::new();
    let mut last = 0;
    for (i, &c) in b.iter().enumerate().take(b.len().saturating_sub(1)).skip(1) {
        if i + 1 - last >= chunk && c == b'\n' && between_non_whitespace(doc, i) {
            cuts.push(i + 1);
            last = i + 1;
        } else if i - last >= max_uncut {
            last = fallback_cut(doc, last, i);
            cuts.push(last);
        }
    }
    cuts
}

/// Whether the byte at `i` of `text` has a character on each side and
/// neither is whitespace, in Unicode's sense (`White_Space`, the pre-tokenizers'
/// `\s`): a `\n` followed by U+00A0 is no cut, as `\s+` joins the two.
fn between_non_whitespace(text: &str, i: usize) -> bool {
    let before = text[..i].chars().next_back();
    let after = text.get(i + 1..).and_then(|t| t.chars().next());
    matches!((before, after), (Some(a), Some(b)) if !a.is_whitespace() && !b.is_whitespace())
}

/// The last offset `i` in `from..end` (and `1..text.len() - 1`) where
/// `text` has the ASCII whitespace byte `c` with non-whitespace on both sides
/// ([`between_non_whitespace`]; searched with `str::rfind`, which is fast
/// even in unoptimised builds).
pub fn last_between(text: &str, c: u8, from: usize, end: usize) -> Option<usize> {
    let b = text.as_bytes();
    let mut end = end.min(b.len().saturating_sub(1));
    while end > from.max(1) {
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        let i = text[..end].rfind(c as char)?;
        if i < from.max(1) {
            return None;
        }
        if between_non_whitespace(text, i) {
            return Some(i);
        }
        end = i;
    }
    None
}

/// Bytes of one pre-token that the BPE is given at most: a stretch with no
/// place to cut it exactly is cut this often (about 6 MB of the tokenizer's
/// memory each).
pub const MAX_WORD_BYTES: usize = 64 << 10;

/// A cut of `text[from..end]` where no newline allows one (`from < end`):
/// before its last space that has non-whitespace on both sides, which changes
/// nothing either (every pre-token of the gpt-2 regex that holds non-whitespace
/// ends before a space, and one space starts the next), else at the last
/// character boundary within [`MAX_WORD_BYTES`] of `from`, which splits one
/// pre-token in two. Returns an offset in `from + 1..=end`.
pub fn fallback_cut(text: &str, from: usize, end: usize) -> usize {
    if let Some(i) = last_between(text, b' ', from + 1, end) {
        return i;
    }
    let end = end.min(from + MAX_WORD_BYTES);
    (from + 1..=end).rev().find(|&i| text.is_char_boundary(i)).unwrap_or(end)
}

/// Token ids of one document, tokenized in pieces of about `chunk` bytes
/// (cut only where it changes nothing, see `cut_points`).
pub fn encode_document(tok: &Tokenizer, doc: &str, chunk: usize) -> Result<Vec<u32>> {
    encode_in_pieces(doc, chunk, |p| tok.encode_document(p))
}

/// `encode` (a tokenizer's, with or without its special tokens) over `text`
/// in pieces of about `chunk` bytes, cut where it changes nothing
/// (`cut_points`: after a newline between non-whitespace, which no special
/// token holds): a prompt or text of any length takes the memory of one
/// piece's tokenization, not ~100 bytes a byte of the whole.
pub fn encode_in_pieces(text: &str, chunk: usize, encode: impl Fn(&str) -> Result<Vec<u32>>) -> Result<Vec<u32>> {
    if text.len() <= chunk {
        return encode(text);
    }
    let mut ids = Vec::with_capacity(text.len() / 3);
    for piece in pieces(text, chunk) {
        ids.extend(encode(piece)?);
    }
    Ok(ids)
}

/// Token ids of `text` with its special tokens parsed (a prompt, a rendered
/// chat), tokenized in pieces of [`CHUNK_BYTES`] ([`encode_in_pieces`]).
pub fn encode_with_special(tok: &Tokenizer, text: &str) -> Result<Vec<u32>> {
    encode_in_pieces(text, CHUNK_BYTES, |p| tok.encode(p))
}

/// `doc` cut at `cut_points` about `chunk` bytes apart: what the tokenizer
/// (and the BPE trainer) is given of a long document.
pub fn pieces(doc: &str, chunk: usize) -> impl Iterator<Item = &str> + Send {
    let cuts = if doc.len() <= chunk { Vec::new() } else { cut_points(doc, chunk, MAX_UNCUT_BYTES.max(chunk)) };
    let bounds: Vec<usize> = [0].into_iter().chain(cuts).chain([doc.len()]).collect();
    (0..bounds.len() - 1).map(move |k| &doc[bounds[k]..bounds[k + 1]])
}

/// Token ids of each document, each followed by the end-of-text id (a newline
/// for the byte tokenizer, which has none), and preceded by the model's BOS
/// where its GGUF asks for one ([`Tokenizer::bos_first`]).
pub fn encode_documents(tok: &Tokenizer, docs: &[&str]) -> Result<Vec<Vec<u32>>> {
    let end = match tok.eot() {
        Some(e) => vec![e],
        None => tok.encode("\n")?,
    };
    docs.iter()
        .map(|d| {
            let mut ids: Vec<u32> = tok.bos_first().into_iter().collect();
            ids.extend(encode_document(tok, d, CHUNK_BYTES)?);
            ids.extend_from_slice(&end);
            Ok(ids)
        })
        .collect()
}

/// A training and a validation stream of ids.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Split {
    pub train: Vec<u32>,
    pub val: Vec<u32>,
    /// Documents in the validation stream (0 when it was split by tokens).
    pub val_documents: usize,
}

/// Which of `n` documents are held out: `round(n · fraction)` of them, at least
/// one and at most `n - 1` when `fraction` > 0 and `n` ≥ 2, chosen by a seeded
/// SplitMix64 key per document (stable across versions and platforms).
pub fn held_out(n: usize, fraction: f64, seed: u64) -> Vec<bool> {
    let mut out = vec![false; n];
    if n < 2 || fraction <= 0.0 {
        return out;
    }
    let k = ((n as f64 * fraction).round() as usize).clamp(1, n - 1);
    let mut keyed: Vec<(u64, usize)> =
        (0..n).map(|i| (SplitMix64::new(seed ^ (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)).next_u64(), i)).collect();
    keyed.sort_unstable();
    for &(_, i) in &keyed[..k] {
        out[i] = true;
    }
    out
}

/// Concatenate documents into the two streams, keeping their order. A single
/// document is split by tokens instead: its last `fraction` goes to validation.
pub fn split_documents_ids(docs: Vec<Vec<u32>>, fraction: f64, seed: u64) -> Split {
    if docs.len() == 1 {
        let ids = docs.into_iter().next().unwrap_or_default();
        return split_tail(ids, fraction);
    }
    let mask = held_out(docs.len(), fraction, seed);
    let mut s = Split::default();
    for (d, val) in docs.into_iter().zip(mask) {
        if val {
            s.val.extend(d);
            s.val_documents += 1;
        } else {
            s.train.extend(d);
        }
    }
    s
}

/// The last `fraction` of `ids` (rounded down) for validation.
pub fn split_tail(mut ids: Vec<u32>, fraction: f64) -> Split {
    let n_val = ((ids.len() as f64) * fraction.clamp(0.0, 1.0)) as usize;
    let val = ids.split_off(ids.len() - n_val);
    Split { train: ids, val, val_documents: 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The first `n` stories of the embedded corpus, each with its separator line.
    fn first_stories(n: usize) -> String {
        crate::data::embedded::TEXT.split_inclusive("<|endoftext|>\n").take(n).collect()
    }

    #[test]
    fn documents_split_on_exact_lines() {
        let t = "one\ntwo\n<|endoftext|>\n\n<|endoftext|>\r\nthree <|endoftext|>\n<|endoftext|>\n";
        assert_eq!(split_documents(t), vec!["one\ntwo", "three <|endoftext|>"]);
        assert_eq!(split_documents("  \n"), Vec::<&str>::new());
    }

    #[test]
    fn held_out_is_deterministic_and_sized() {
        let a = held_out(100, 0.05, 0);
        assert_eq!(a.iter().filter(|&&v| v).count(), 5);
        assert_eq!(a, held_out(100, 0.05, 0));
        assert_ne!(a, held_out(100, 0.05, 1));
        assert_eq!(held_out(3, 0.01, 0).iter().filter(|&&v| v).count(), 1);
        assert_eq!(held_out(2, 0.99, 0).iter().filter(|&&v| v).count(), 1);
        assert!(held_out(1, 0.5, 0).iter().all(|&v| !v));
    }

    /// A stretch longer than `max_uncut` without a newline is cut before a
    /// space (no id changes), or at a character boundary when it has none.
    #[test]
    fn long_stretches_without_newlines_are_cut() {
        let text = first_stories(30).replace('\n', " ").replace("<|endoftext|>", "x");
        let tok = Tokenizer::train_bpe([text.as_str()].into_iter(), 400).unwrap();
        let cuts = cut_points(&text, 50, 120);
        assert!(cuts.len() > text.len() / 121, "{} cuts", cuts.len());
        let bounds: Vec<usize> = [0].into_iter().chain(cuts.iter().copied()).chain([text.len()]).collect();
        assert!(bounds.windows(2).all(|w| w[0] < w[1] && w[1] - w[0] <= 121), "{bounds:?}");
        let pieces: Vec<u32> = bounds.windows(2).flat_map(|w| tok.encode_document(&text[w[0]..w[1]]).unwrap()).collect();
        assert_eq!(pieces, tok.encode_document(&text).unwrap());
        let solid = "é".repeat(400);
        let cuts = cut_points(&solid, 50, 120);
        assert!(cuts.len() >= 6 && cuts.iter().all(|&c| solid.is_char_boundary(c)), "{cuts:?}");
    }

    /// A newline or space beside Unicode whitespace (U+00A0, U+3000...) is
    /// no cut: the pre-tokenizer's `\s+` joins them, and a cut there had
    /// changed the ids (a fresh user's fuzzing against HF `tokenizers`).
    #[test]
    fn unicode_whitespace_beside_a_newline_is_no_cut() {
        let base = first_stories(20).replace("<|endoftext|>", "x");
        let text = base.replace(".\n", ".\n\u{a0}\u{a0}").replace(", ", ",\u{3000}\n").replace("He ", "He\u{2009} ");
        let tok = Tokenizer::train_bpe([text.as_str()].into_iter(), 400).unwrap();
        let whole = tok.encode_document(&text).unwrap();
        for chunk in [20, 50, 333] {
            let cuts = cut_points(&text, chunk, usize::MAX);
            assert!(cuts.iter().all(|&c| between_non_whitespace(&text, c - 1)), "chunk {chunk}");
            assert_eq!(encode_document(&tok, &text, chunk).unwrap(), whole, "chunk {chunk}");
        }
        // the fallback cut before a space, as `toy prep` and raw corpora take it
        let spaced = text.replace('\n', "\u{a0}");
        let tok = Tokenizer::train_bpe([spaced.as_str()].into_iter(), 400).unwrap();
        let cuts = cut_points(&spaced, 50, 120);
        assert!(!cuts.is_empty());
        let bounds: Vec<usize> = [0].into_iter().chain(cuts).chain([spaced.len()]).collect();
        let pieces: Vec<u32> = bounds.windows(2).flat_map(|w| tok.encode_document(&spaced[w[0]..w[1]]).unwrap()).collect();
        assert_eq!(pieces, tok.encode_document(&spaced).unwrap());
        assert!(!between_non_whitespace("a\n\u{a0}b", 1) && !between_non_whitespace("\u{85}\nb", 2) && between_non_whitespace("é\nb", 2));
    }

    #[test]
    fn chunked_encoding_matches_whole() {
        let text = first_stories(30).replace("\n<|endoftext|>\n", "\n\n  x\n");
        let tok = Tokenizer::train_bpe(split_documents(&text).into_iter(), 400).unwrap();
        let whole = tok.encode(&text).unwrap();
        for chunk in [50, 333, 4096] {
            assert!(!cut_points(&text, chunk, usize::MAX).is_empty());
            assert_eq!(encode_document(&tok, &text, chunk).unwrap(), whole, "chunk {chunk}");
        }
    }

    /// A chat prompt's special tokens survive the cuts: pieces tokenized with
    /// the special tokens parsed give the ids of the whole prompt.
    #[test]
    fn chunked_encoding_with_special_tokens_matches_whole() {
        let text = first_stories(30).replace("\n<|endoftext|>\n", "\n<|endoftext|>\nuser said:\n");
        let tok = Tokenizer::train_bpe(split_documents(&first_stories(30)).into_iter(), 400).unwrap();
        let whole = tok.encode(&text).unwrap();
        let eot = tok.eot().expect("a trained BPE has <|endoftext|>");
        assert!(whole.iter().filter(|&&i| i == eot).count() > 5, "the special token is parsed");
        for chunk in [50, 333, 4096] {
            assert_eq!(encode_in_pieces(&text, chunk, |p| tok.encode(p)).unwrap(), whole, "chunk {chunk}");
        }
    }
}
