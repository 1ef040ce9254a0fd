//! Training a byte-level BPE (the `tokenizers` crate's `BpeTrainer`), with the
//! trainer's memory bounded: it keeps every distinct pre-token with its pair
//! positions, about 200 bytes for each byte of distinct pre-tokens. English
//! repeats its words, so 64 MB of it holds a few MB of distinct ones; text
//! without spaces (Chinese, Japanese, minified code) is nearly all distinct,
//! and 12 MB of it took 1.66 GB. So the trainer reads documents only until
//! their distinct pre-tokens reach [`MAX_TRAIN_DISTINCT_BYTES`].

use super::tokenizer::{byte_level, hf_err, Bpe, Hf, PreSplit, Tokenizer, EOT, MAX_TRAIN_WORD, MAX_VOCAB_SIZE};
use crate::error::{input, Result};
use std::collections::HashSet;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::sync::Arc;
use tokenizers::models::bpe::{BpeTrainerBuilder, BPE};
use tokenizers::{AddedToken, OffsetReferential, OffsetType, PreTokenizedString, PreTokenizer, Trainer};

/// The most bytes of distinct pre-tokens (as [`distinct_bytes`] estimates them)
/// a BPE is trained on: `toy prep` of 24 MB of Chinese, cut there, peaked at 1.7 GB.
pub const MAX_TRAIN_DISTINCT_BYTES: usize = 8 << 20;

impl Tokenizer {
    /// Train a byte-level BPE of at most `vocab_size` ids on `docs` (fewer when
    /// the text has too few repeated pairs). Ids: `<|endoftext|>` = 0, the 256
    /// byte symbols in code-point order, then the merges in the order learned.
    /// Deterministic: the same documents give the same `tokenizer.json`.
    ///
    /// Reads `docs` in order until their distinct pre-tokens pass
    /// [`MAX_TRAIN_DISTINCT_BYTES`], and prints a note on stderr when it stops
    /// before the end (pass a uniform sample, as `toy prep` does, so that the
    /// documents read are one too).
    ///
    /// # Errors
    /// [`Error::Input`](crate::error::Error::Input) when `vocab_size` is below 257.
    pub fn train_bpe<S: AsRef<str> + Send>(docs: impl Iterator<Item = S> + Send, vocab_size: usize) -> Result<Tokenizer> {
        let (tok, cut) = train_bpe_within(docs, vocab_size, MAX_TRAIN_DISTINCT_BYTES)?;
        if let Some(read) = cut {
            crate::note!("{}", cut_note(read));
        }
        Ok(tok)
    }
}

/// What a training cut at [`MAX_TRAIN_DISTINCT_BYTES`] after `read` bytes says.
pub fn cut_note(read: usize) -> String {
    format!(
        "note: the BPE was trained on the first {:.1} MB of its text (a uniform sample): their distinct words reach {} MB, \
         the most the trainer takes (its memory grows with them; text without spaces is nearly all distinct)",
        read as f64 / 1e6,
        MAX_TRAIN_DISTINCT_BYTES >> 20
    )
}

/// [`Tokenizer::train_bpe`] reading `docs` until their distinct pre-tokens pass
/// `budget` bytes; with the bytes read when it stopped before the end.
pub fn train_bpe_within<S: AsRef<str> + Send>(
    docs: impl Iterator<Item = S> + Send,
    vocab_size: usize,
    budget: usize,
) -> Result<(Tokenizer, Option<usize>)> {
    if vocab_size < 257 {
        return Err(input(format!(
            "--vocab-size {vocab_size} is too small: a byte-level BPE needs at least 257 ids (256 bytes and {EOT})"
        )));
    }
    if vocab_size > MAX_VOCAB_SIZE {
        return Err(input(format!("--vocab-size {vocab_size} is too large (at most {MAX_VOCAB_SIZE})")));
    }
    let alphabet: HashSet<char> = (0..=255u8).map(super::tokenizer::byte_to_unicode).collect();
    let mut trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab_size)
        .min_frequency(2)
        .show_progress(false)
        .special_tokens(vec![AddedToken::from(EOT, true)])
        .initial_alphabet(alphabet)
        .build();
    let mut seen = Distinct::default();
    let (mut read, mut cut) = (0usize, false);
    let docs = docs.take_while(|d| {
        if seen.bytes > budget {
            cut = true;
            return false;
        }
        read += d.as_ref().len();
        seen.add(d.as_ref());
        true
    });
    // What `TokenizerImpl::train` does, except that pre-tokens longer than
    // MAX_TRAIN_WORD bytes reach the trainer in pieces: its work grows with
    // the square of a word's length (a 2 MB line of letters ran for an hour),
    // and merges longer than that are not worth learning. Encoding is
    // unchanged, so llama.cpp still tokenizes as toy does.
    let pre = byte_level();
    trainer
        .feed(docs, |seq| {
            let mut pts = PreTokenizedString::from(seq);
            pre.pre_tokenize(&mut pts)?;
            let mut words = Vec::new();
            for (w, _, _) in pts.get_splits(OffsetReferential::Original, OffsetType::Byte) {
                if w.len() <= MAX_TRAIN_WORD {
                    words.push(w.to_owned());
                } else {
                    let chars: Vec<char> = w.chars().collect();
                    words.extend(chars.chunks(MAX_TRAIN_WORD).map(|c| c.iter().collect::<String>()));
                }
            }
            Ok(words)
        })
        .map_err(|e| hf_err("BPE training failed", e))?;
    let mut model = BPE::default();
    let special = trainer.train(&mut model).map_err(|e| hf_err("BPE training failed", e))?;
    let mut hf = Hf::new(model);
    hf.with_pre_tokenizer(Some(PreSplit::Gpt2.pre_tokenizer()));
    hf.with_decoder(Some(byte_level()));
    hf.add_special_tokens(&special);
    let tok = Tokenizer::Bpe(Arc::new(Bpe::new(hf, "training", PreSplit::Gpt2)?));
    Ok((tok, cut.then_some(read)))
}

/// An estimate of the distinct pre-tokens of the text added so far: its
/// whitespace-separated words in pieces of at most [`MAX_TRAIN_WORD`] bytes
/// (the trainer's cut), each counted once by a 64-bit hash. Cheaper than the
/// trainer's own pre-tokenizer (GPT-2's split), and near it in bytes: that one
/// also splits letters from punctuation and digits, and keeps a word's
/// leading space.
#[derive(Default)]
struct Distinct {
    hashes: HashSet<u64>,
    bytes: usize,
}

impl Distinct {
    fn add(&mut self, text: &str) {
        for word in text.split_whitespace() {
            let mut rest = word;
            while !rest.is_empty() {
                let mut end = rest.len().min(MAX_TRAIN_WORD);
                while !rest.is_char_boundary(end) {
                    end -= 1;
                }
                let end = if end == 0 { rest.chars().next().map_or(rest.len(), char::len_utf8) } else { end };
                let piece = &rest[..end];
                let mut h = DefaultHasher::new();
                piece.hash(&mut h);
                if self.hashes.insert(h.finish()) {
                    self.bytes += piece.len();
                }
                rest = &rest[end..];
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Documents of distinct made-up words, `n` each.
    fn docs(n_docs: usize, n: usize) -> Vec<String> {
        (0..n_docs).map(|d| (0..n).map(|i| format!("w{d}x{i} the cat")).collect::<Vec<_>>().join(" ")).collect()
    }

    #[test]
    fn training_stops_where_the_distinct_words_pass_the_budget_and_matches_training_on_that_prefix() {
        let docs = docs(40, 50);
        let (cut_tok, cut) = train_bpe_within(docs.iter(), 400, 2000).unwrap();
        let read = cut.expect("the budget is smaller than the text");
        // The documents read: those whose start came before the budget was passed.
        let mut sum = 0;
        let n = docs.iter().take_while(|d| (sum < read).then(|| sum += d.len()).is_some()).count();
        assert!(n > 1 && n < docs.len(), "{n} documents of {}", docs.len());
        let (prefix_tok, none) = train_bpe_within(docs[..n].iter(), 400, usize::MAX).unwrap();
        assert_eq!(none, None);
        assert_eq!(cut_tok.sha256(), prefix_tok.sha256());
        // A budget above the text's distinct words reads it all.
        let (_, all) = train_bpe_within(docs.iter(), 400, 1 << 20).unwrap();
        assert_eq!(all, None);
    }

    /// The trainer counts words: the order the text comes in changes nothing
    /// (what lets `toy train` feed its pieces shuffled).
    #[test]
    fn the_order_of_the_text_changes_nothing() {
        let all = toy_stories::generate_with(3, 400);
        let text = crate::data::text::split_documents(&all);
        assert!(text.len() > 100, "{} documents", text.len());
        let (a, _) = train_bpe_within(text.iter(), 600, usize::MAX).unwrap();
        let (b, _) = train_bpe_within(text.iter().rev(), 600, usize::MAX).unwrap();
        assert_eq!(a.sha256(), b.sha256());
    }

    #[test]
    fn distinct_counts_repeats_once_and_cuts_long_words_on_char_boundaries() {
        let mut d = Distinct::default();
        d.add("the cat the cat");
        assert_eq!(d.bytes, 6);
        let mut d = Distinct::default();
        let long = "字".repeat(30); // 90 bytes: pieces of 63 and 27 bytes
        d.add(&long);
        d.add(&long);
        assert_eq!(d.bytes, 90);
        assert_eq!(d.hashes.len(), 2);
    }
}
