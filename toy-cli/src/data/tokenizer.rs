//! Tokenizers: a plain byte-level one (256 ids, one per byte) and a byte-level
//! BPE trained with the Hugging Face `tokenizers` crate (GPT-2 style: the
//! `ByteLevel` pre-tokenizer without a prefix space, the `ByteLevel` decoder,
//! and one special token, `<|endoftext|>`).
//!
//! Both are written into checkpoints as llama.cpp's `gpt2` tokenizer
//! (`tokenizer.ggml.*` keys) and rebuilt from those keys, so a checkpoint alone
//! is enough to tokenize.

pub use super::presplit::PreSplit;
use crate::error::{input, runtime, Result};
use ggml_rs::gguf::{Array, GgufFile, GgufWriter, Value};
use sha2::{Digest, Sha256};
use std::collections::HashSet;
use std::path::Path;
use std::sync::Arc;
use tokenizers::models::bpe::{Vocab, BPE};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::{AddedToken, NormalizerWrapper, PostProcessorWrapper, TokenizerImpl};

/// The end-of-text token of BPE tokenizers, and the line that separates documents.
pub const EOT: &str = "<|endoftext|>";

/// The tokens that end a document, the first one a vocabulary has being its
/// end-of-text id: [`EOT`] (GPT-2, SmolLM2, Qwen2) or Llama 3's `<|end_of_text|>`.
pub const END_OF_TEXT: [&str; 2] = [EOT, "<|end_of_text|>"];

/// Default vocabulary size of a BPE trained on the fly for a raw text corpus.
pub const DEFAULT_VOCAB_SIZE: usize = 1024;

/// The largest BPE `--vocab-size` (2^20 ids; the trainer allocates per id, and
/// no corpus toy trains on needs more).
pub const MAX_VOCAB_SIZE: usize = 1 << 20;

/// Longest pre-token, in bytes, that BPE training sees whole (longer ones are
/// cut into pieces of this length for training only).
pub const MAX_TRAIN_WORD: usize = 64;

/// llama.cpp's `llama_token_type`: a normal token.
pub const TOKEN_TYPE_NORMAL: i32 = 1;
/// llama.cpp's `llama_token_type`: a control token (`<|endoftext|>`).
pub const TOKEN_TYPE_CONTROL: i32 = 3;
/// llama.cpp's `llama_token_type`: a user-defined token, matched whole in any
/// text, special tokens parsed or not (Qwen2's `[PAD151646]`…).
pub const TOKEN_TYPE_USER_DEFINED: i32 = 4;

pub(super) type Hf = TokenizerImpl<BPE, NormalizerWrapper, PreTokenizerWrapper, PostProcessorWrapper, ByteLevel>;

/// A trained byte-level BPE: the `tokenizers` object, its end-of-text id,
/// control token ids, pre-tokenizer and its `tokenizer.json` text.
#[derive(Debug)]
pub struct Bpe {
    hf: Hf,
    /// `hf` with its special tokens read as text (documents, see [`Tokenizer::encode_document`]).
    plain: Hf,
    eot: u32,
    control: HashSet<u32>,
    pre: PreSplit,
    json: String,
    /// llama.cpp's token types, in id order, when read from a GGUF (written
    /// back as they were).
    types: Option<Vec<i32>>,
    /// The BOS that starts every document, when the GGUF asks for one
    /// (`tokenizer.ggml.add_bos_token`, true in Llama 3's files).
    bos: Option<u32>,
}

/// Turns text into token ids and back.
#[derive(Clone, Debug)]
pub enum Tokenizer {
    /// One id per byte (0..=255), no merges.
    Bytes,
    /// Byte-level BPE (see [`Bpe`]).
    Bpe(Arc<Bpe>),
}

/// Control tokens that end a chat turn in the templates llama.cpp knows (its
/// end-of-generation list in `llama-vocab.cpp`).
pub const END_OF_TURN: [&str; 8] =
    ["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>", "<|return|>", "<EOT>"];

/// Tokens llama.cpp makes control tokens by their text whatever their type in
/// the file (`llama_vocab::impl::load` in src/llama-vocab.cpp, "auto-detect
/// special tokens by text": its end-of-turn, end-of-message, fill-in-the-middle
/// and end-of-generation lists), so that a prompt reads them as one token:
/// Qwen2's vocabulary has `</s>` as a normal token, which llama.cpp parses
/// whole where special tokens are parsed.
pub const CONTROL_BY_TEXT: [&str; 57] = [
    "<|eot_id|>",
    "<|im_end|>",
    "<|end|>",
    "<end_of_turn>",
    "<|endoftext|>",
    "<|end_of_text|>",
    "<EOT>",
    "_<EOT>",
    "[EOT]",
    "<｜end▁of▁sentence｜>",
    "<end_of_utterance>",
    "<|eom_id|>",
    "<|fim_prefix|>",
    "<fim-prefix>",
    "<fim_prefix>",
    "<｜fim▁begin｜>",
    "<PRE>",
    "▁<PRE>",
    "<|code_prefix|>",
    "<|prefix|>",
    "<|fim_suffix|>",
    "<fim-suffix>",
    "<fim_suffix>",
    "<｜fim▁hole｜>",
    "<SUF>",
    "▁<SUF>",
    "<|code_suffix|>",
    "<|suffix|>",
    "<|fim_middle|>",
    "<fim-middle>",
    "<fim_middle>",
    "<｜fim▁end｜>",
    "<MID>",
    "▁<MID>",
    "<|code_middle|>",
    "<|middle|>",
    "<|fim_pad|>",
    "<fim-pad>",
    "<fim_pad>",
    "<PAD>",
    "[PAD]",
    "<|fim_repo|>",
    "<|repo_name|>",
    "<fim-repo>",
    "<REPO>",
    "<reponame>",
    "<|file_sep|>",
    "<|return|>",
    "<|call|>",
    "<|flush|>",
    "<|calls|>",
    "</s>",
    "[EOS]",
    "<eos>",
    "<turn|>",
    "<|tool_response>",
    "[e~[",
];

pub(super) fn byte_level() -> ByteLevel {
    ByteLevel::new(false, true, true)
}

pub(super) fn hf_err(what: &str, e: impl std::fmt::Display) -> crate::error::Error {
    runtime(format!("{what}: {e}"))
}

/// Refuse a vocabulary whose ids are not `0..n`, each once (duplicate or
/// missing ids), as every tokenizer is read: from `tokenizer.json`, a
/// checkpoint's keys or training. The token table has one row per id, and a
/// checkpoint stores tokens in id order, so a gap or a repeat cannot be saved.
fn check_ids(hf: &Hf, origin: &str) -> Result<()> {
    let mut vocab: Vec<(u32, String)> = hf.get_vocab(true).into_iter().map(|(t, id)| (id, t)).collect();
    vocab.sort();
    for (i, (id, t)) in vocab.iter().enumerate() {
        if *id as usize != i {
            let why = if i > 0 && vocab[i - 1].0 == *id {
                format!("id {id} is given to both {:?} and {t:?}", vocab[i - 1].1)
            } else {
                format!("{t:?} has id {id}, but id {i} is missing")
            };
            return Err(input(format!("{origin}: token ids must be 0..{} with each id once: {why}", vocab.len())));
        }
    }
    if hf.get_vocab_size(true) != vocab.len() {
        return Err(input(format!("{origin}: {} token ids but {} tokens (an id given twice?)", hf.get_vocab_size(true), vocab.len())));
    }
    Ok(())
}

impl Bpe {
    pub(super) fn new(hf: Hf, origin: &str, pre: PreSplit) -> Result<Bpe> {
        check_ids(&hf, origin)?;
        let eot = END_OF_TEXT
            .iter()
            .find_map(|t| hf.token_to_id(t))
            .ok_or_else(|| input(format!("{origin}: the tokenizer has no end-of-text token ({})", END_OF_TEXT.join(" or "))))?;
        let json = hf.to_string(true).map_err(|e| hf_err("cannot serialize the tokenizer", e))?;
        let control = hf.get_added_tokens_decoder().into_iter().filter(|(_, t)| t.special).map(|(id, _)| id).collect();
        let mut plain = hf.clone();
        plain.set_encode_special_tokens(true);
        Ok(Bpe { hf, plain, eot, control, pre, json, types: None, bos: None })
    }

    /// Tokens in id order (GPT-2 byte-to-unicode form, as `tokenizer.json` stores them).
    ///
    /// # Errors
    /// [`Error::Runtime`](crate::error::Error::Runtime) when the ids are not `0..n`.
    pub fn tokens(&self) -> Result<Vec<String>> {
        let mut vocab: Vec<(String, u32)> = self.hf.get_vocab(true).into_iter().collect();
        vocab.sort_by_key(|(_, id)| *id);
        for (i, (t, id)) in vocab.iter().enumerate() {
            if *id as usize != i {
                return Err(runtime(format!("tokenizer ids are not contiguous: {t:?} has id {id}, expected {i}")));
            }
        }
        Ok(vocab.into_iter().map(|(t, _)| t).collect())
    }

    /// Tokens in id order and merges (`"a b"`) in rank order, read back from
    /// the serialized model (the `tokenizers` crate keeps its merges private).
    pub fn tokens_and_merges(&self) -> Result<(Vec<String>, Vec<String>)> {
        let model = serde_json::to_value(self.hf.get_model()).map_err(|e| hf_err("cannot serialize the BPE model", e))?;
        let merges = model
            .get("merges")
            .and_then(|m| m.as_array())
            .ok_or_else(|| runtime("the BPE model has no merges"))?
            .iter()
            .map(|m| match m {
                serde_json::Value::String(s) => Some(s.clone()),
                serde_json::Value::Array(p) => match (p.first().and_then(|a| a.as_str()), p.get(1).and_then(|b| b.as_str())) {
                    (Some(a), Some(b)) => Some(format!("{a} {b}")),
                    _ => None,
                },
                _ => None,
            })
            .collect::<Option<Vec<String>>>()
            .ok_or_else(|| runtime("the BPE model has a malformed merge"))?;
        Ok((self.tokens()?, merges))
    }
}

impl Tokenizer {
    /// Token ids of each of `texts` (documents, as [`encode_document`](Self::encode_document)),
    /// encoded in parallel on all cores (the `tokenizers` crate's batch encoding).
    pub fn encode_batch(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>> {
        match self {
            Tokenizer::Bytes => Ok(texts.iter().map(|t| t.bytes().map(u32::from).collect()).collect()),
            // In parallel, each text's ids kept as soon as it is encoded: an
            // `Encoding` (tokens, offsets, masks) takes ~150 bytes a token, and a
            // whole batch of them at once was most of `toy prep`'s memory.
            Tokenizer::Bpe(b) => {
                use rayon::prelude::*;
                texts
                    .par_iter()
                    .map(|t| b.plain.encode_fast(*t, false).map(|e| e.get_ids().to_vec()).map_err(|e| hf_err("cannot tokenize", e)))
                    .collect()
            }
        }
    }

    /// Rebuild a byte-level BPE from its tokens (id order), merges (`"a b"`,
    /// rank order), llama.cpp's token types (one per token; control tokens are
    /// matched only where special tokens are parsed, user-defined ones in any
    /// text, as llama.cpp's `tokenizer_st_partition` does) and pre-tokenizer.
    ///
    /// # Errors
    /// [`Error::Input`](crate::error::Error::Input) naming `origin` when the
    /// tokens repeat, there is not one type per token, a merge is malformed or
    /// names an unknown token, or there is no end-of-text token ([`END_OF_TEXT`]).
    pub fn from_tokens(tokens: &[String], merges: &[String], types: &[i32], pre: PreSplit, origin: &str) -> Result<Tokenizer> {
        if types.len() != tokens.len() {
            return Err(input(format!("{origin}: {} token types for {} tokens", types.len(), tokens.len())));
        }
        let mut vocab = Vocab::default();
        for (i, t) in tokens.iter().enumerate() {
            if vocab.insert(t.clone(), i as u32).is_some() {
                return Err(input(format!("{origin}: token {t:?} appears twice")));
            }
        }
        let merges = merges
            .iter()
            .enumerate()
            .map(|(i, m)| {
                // As llama.cpp: split at the first space after the first byte.
                match m.as_bytes().get(1..).and_then(|r| r.iter().position(|&b| b == b' ')).map(|p| p + 1) {
                    Some(p) => Ok((m[..p].to_string(), m[p + 1..].to_string())),
                    None => Err(input(format!("{origin}: merge {i} ({m:?}) is not two tokens separated by a space"))),
                }
            })
            .collect::<Result<Vec<_>>>()?;
        let bpe = BPE::builder()
            .vocab_and_merges(vocab, merges)
            .ignore_merges(pre.ignore_merges())
            .build()
            .map_err(|e| input(format!("{origin}: bad BPE merges: {e}")))?;
        let mut hf = Hf::new(bpe);
        hf.with_pre_tokenizer(Some(pre.pre_tokenizer()));
        hf.with_decoder(Some(super::presplit::decoder()));
        let of_type = |ty: i32, special: bool| -> Vec<AddedToken> {
            let is = |t: &String, given: i32| match given {
                TOKEN_TYPE_NORMAL if CONTROL_BY_TEXT.contains(&t.as_str()) => ty == TOKEN_TYPE_CONTROL,
                given => given == ty,
            };
            tokens.iter().zip(types).filter(|(t, &given)| is(t, given)).map(|(t, _)| AddedToken::from(t.clone(), special)).collect()
        };
        hf.add_special_tokens(&of_type(TOKEN_TYPE_CONTROL, true));
        hf.add_tokens(&of_type(TOKEN_TYPE_USER_DEFINED, false));
        let mut b = Bpe::new(hf, origin, pre)?;
        b.types = Some(types.to_vec());
        Ok(Tokenizer::Bpe(Arc::new(b)))
    }

    /// Parse a `tokenizer.json` (a byte-level BPE with an end-of-text token
    /// and a pre-tokenizer [`PreSplit::of_json`] recognises).
    ///
    /// # Errors
    /// [`Error::Input`](crate::error::Error::Input) naming `origin` for any
    /// other kind of tokenizer or malformed JSON.
    pub fn from_json(json: &str, origin: &str) -> Result<Tokenizer> {
        let what = "not a byte-level BPE tokenizer.json (BPE model, ByteLevel pre-tokenizer and decoder)";
        let value: serde_json::Value = serde_json::from_str(json).map_err(|e| input(format!("{origin}: {what}: {e}")))?;
        let pre = PreSplit::of_json(&value["pre_tokenizer"])
            .ok_or_else(|| input(format!("{origin}: {what}: pre-tokenizer {} is not one toy runs", value["pre_tokenizer"])))?;
        let hf: Hf = serde_json::from_str(json).map_err(|e| input(format!("{origin}: {what}: {e}")))?;
        let mut b = Bpe::new(hf, origin, pre)?;
        b.json = json.to_string();
        Ok(Tokenizer::Bpe(Arc::new(b)))
    }

    /// Read `path` (a `tokenizer.json`).
    pub fn load(path: &Path) -> Result<Tokenizer> {
        let text = std::fs::read_to_string(path).map_err(|e| input(format!("cannot read tokenizer {}: {e}", path.display())))?;
        Tokenizer::from_json(&text, &path.display().to_string())
    }

    /// The `tokenizer.json` text of a BPE tokenizer.
    pub fn json(&self) -> Option<&str> {
        match self {
            Tokenizer::Bytes => None,
            Tokenizer::Bpe(b) => Some(&b.json),
        }
    }

    /// Hex SHA-256 of [`Tokenizer::json`] (of the text `bytes` for the byte tokenizer).
    pub fn sha256(&self) -> String {
        let mut h = Sha256::new();
        h.update(self.json().unwrap_or("bytes").as_bytes());
        hex(&h.finalize())
    }

    /// Number of ids.
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Bytes => 256,
            Tokenizer::Bpe(b) => b.hf.get_vocab_size(true),
        }
    }

    /// Token ids of `text`; `<|endoftext|>` in the text becomes the end-of-text id.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Bytes => Ok(text.bytes().map(u32::from).collect()),
            Tokenizer::Bpe(b) => Ok(b.hf.encode(text, false).map_err(|e| hf_err("cannot tokenize", e))?.get_ids().to_vec()),
        }
    }

    /// Token ids of the text of a document: `<|endoftext|>` written in it is
    /// text, not the end-of-text id (as llama.cpp tokenizes raw text without
    /// parsing special tokens); documents are ended by their reader, not by
    /// what they contain.
    pub fn encode_document(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Bytes => Ok(text.bytes().map(u32::from).collect()),
            Tokenizer::Bpe(b) => Ok(b.plain.encode(text, false).map_err(|e| hf_err("cannot tokenize", e))?.get_ids().to_vec()),
        }
    }

    /// Text of `ids` (invalid UTF-8 is replaced; `<|endoftext|>` is kept).
    ///
    /// # Errors
    /// [`Error::Input`](crate::error::Error::Input) for an id outside the vocabulary.
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        let n = self.vocab_size();
        if let Some(bad) = ids.iter().find(|&&i| i as usize >= n) {
            return Err(input(format!("id {bad} is outside the vocabulary of {n}")));
        }
        match self {
            Tokenizer::Bytes => {
                let bytes: Vec<u8> = ids.iter().map(|&i| i as u8).collect();
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
            Tokenizer::Bpe(b) => b.hf.decode(ids, false).map_err(|e| hf_err("cannot decode", e)),
        }
    }

    /// The vocabulary in id order, spelled as in GGUF `tokenizer.ggml.tokens`
    /// (GPT-2 byte-level form).
    pub fn tokens(&self) -> Option<Vec<String>> {
        match self {
            Tokenizer::Bytes => Some((0..=255u8).map(|b| byte_to_unicode(b).to_string()).collect()),
            Tokenizer::Bpe(b) => b.tokens().ok(),
        }
    }

    /// The BOS id that starts every document, when the model's GGUF asks for
    /// one (`tokenizer.ggml.add_bos_token`; Hugging Face's tokenizers add it
    /// to each text, llama.cpp to each prompt); `None` for toy's own BPEs.
    pub fn bos_first(&self) -> Option<u32> {
        match self {
            Tokenizer::Bytes => None,
            Tokenizer::Bpe(b) => b.bos,
        }
    }

    /// The end-of-text id, if the tokenizer has one.
    pub fn eot(&self) -> Option<u32> {
        match self {
            Tokenizer::Bytes => None,
            Tokenizer::Bpe(b) => Some(b.eot),
        }
    }

    /// The bytes of text each id stands for, by id, as
    /// [`Corpus::text_bytes`](crate::data::Corpus::text_bytes) counts a text's:
    /// a token's byte-level spelling has a character a byte (a special token
    /// its literal text); the end-of-text id counts 1 (the document end it
    /// marks), a BOS none.
    pub fn byte_lengths(&self) -> Vec<u32> {
        let mut lens: Vec<u32> =
            (0..self.vocab_size() as u32).map(|id| self.token_text(id).map_or(0, |s| s.chars().count() as u32)).collect();
        if let Some(e) = self.eot() {
            lens[e as usize] = 1;
        }
        if let Some(b) = self.bos_first().filter(|&b| Some(b) != self.eot()) {
            lens[b as usize] = 0;
        }
        lens
    }

    /// The text of token `id` as the vocabulary spells it (special tokens
    /// included, e.g. `<|im_end|>`), or `None` outside the vocabulary.
    pub fn token_text(&self, id: u32) -> Option<String> {
        match self {
            Tokenizer::Bytes => u8::try_from(id).ok().map(|b| byte_to_unicode(b).to_string()),
            Tokenizer::Bpe(b) => b.hf.id_to_token(id),
        }
    }

    /// The ids that end generation, as llama.cpp's `llama_vocab_is_eog`
    /// decides: the end-of-text id, the GGUF `f`'s
    /// `tokenizer.ggml.{eos,eot,eom}_token_id`, and the control tokens that end
    /// a chat turn ([`END_OF_TURN`], e.g. SmolLM2's `<|im_end|>`). Sorted,
    /// without repeats; ids outside the vocabulary are left out.
    pub fn end_of_generation(&self, f: &GgufFile) -> Vec<u32> {
        let mut ids: Vec<u32> = self.eot().into_iter().collect();
        for key in ["eos", "eot", "eom"] {
            if let Ok(id) = f.get_u64(&format!("tokenizer.ggml.{key}_token_id")) {
                ids.extend(u32::try_from(id).ok());
            }
        }
        if let Tokenizer::Bpe(b) = self {
            ids.extend(b.control.iter().copied().filter(|&i| b.hf.id_to_token(i).is_some_and(|t| END_OF_TURN.contains(&t.as_str()))));
        }
        ids.retain(|&i| (i as usize) < self.vocab_size());
        ids.sort_unstable();
        ids.dedup();
        ids
    }

    /// Write `tokenizer.json` to `path` atomically (BPE only).
    pub fn save(&self, path: &Path) -> Result<()> {
        let json = self.json().ok_or_else(|| runtime("the byte tokenizer has no tokenizer.json"))?;
        crate::files::write_atomic(path, json.as_bytes())
    }

    /// Write the `tokenizer.ggml.*` keys llama.cpp reads for a `gpt2`
    /// byte-level BPE: model `gpt2`, pre-tokenizer `gpt-2` (llama.cpp's
    /// `LLAMA_VOCAB_PRE_TYPE_GPT2`, whose split regex is the one of HF's
    /// `ByteLevel`), tokens in id order in GPT-2's byte-to-unicode form, merges
    /// as `"a b"`, token types (as read from a GGUF, else 1 normal and 3
    /// control), bos = eos = the
    /// end-of-text id and no automatic BOS/EOS.
    pub fn write_gguf(&self, g: &mut GgufWriter) -> Result<()> {
        let (tokens, merges, eot, pre) = match self {
            Tokenizer::Bytes => ((0..=255u8).map(|b| byte_to_unicode(b).to_string()).collect(), Vec::new(), None, PreSplit::Gpt2),
            Tokenizer::Bpe(b) => {
                let (t, m) = b.tokens_and_merges()?;
                (t, m, Some(b.eot), b.pre)
            }
        };
        let control = |i: u32| Some(i) == eot || matches!(self, Tokenizer::Bpe(b) if b.control.contains(&i));
        let types: Vec<i32> = match self {
            Tokenizer::Bpe(b) if b.types.as_ref().is_some_and(|t| t.len() == tokens.len()) => b.types.clone().unwrap_or_default(),
            _ => (0..tokens.len() as u32).map(|i| if control(i) { TOKEN_TYPE_CONTROL } else { TOKEN_TYPE_NORMAL }).collect(),
        };
        g.set("tokenizer.ggml.model", "gpt2")?;
        g.set("tokenizer.ggml.pre", pre.name())?;
        g.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))?;
        g.set("tokenizer.ggml.token_type", Value::Array(Array::I32(types)))?;
        g.set("tokenizer.ggml.merges", Value::Array(Array::String(merges)))?;
        if let Some(e) = eot {
            g.set("tokenizer.ggml.bos_token_id", e)?;
            g.set("tokenizer.ggml.eos_token_id", e)?;
        }
        let bos = self.bos_first();
        if let Some(b) = bos {
            g.set("tokenizer.ggml.bos_token_id", b)?;
        }
        g.set("tokenizer.ggml.add_bos_token", bos.is_some())?;
        g.set("tokenizer.ggml.add_eos_token", false)?;
        Ok(())
    }

    /// The tokenizer stored in a checkpoint, if any (see [`Tokenizer::write_gguf`]).
    ///
    /// # Errors
    /// [`Error::Input`](crate::error::Error::Input) naming the file for a
    /// tokenizer this program cannot rebuild or malformed keys.
    pub fn read_gguf(f: &GgufFile) -> Result<Option<Tokenizer>> {
        let origin = f.path().display().to_string();
        let model = match f.get("tokenizer.ggml.model") {
            None => return Ok(None),
            Some(v) => v.as_str().ok_or_else(|| input(format!("{origin}: tokenizer.ggml.model is not a string")))?,
        };
        if model != "gpt2" {
            return Err(input(format!("{origin}: tokenizer model {model:?} is not supported (only gpt2 byte-level BPE)")));
        }
        let pre = match f.get("tokenizer.ggml.pre").map(|v| v.as_str()) {
            None => PreSplit::Gpt2,
            Some(name) => name.and_then(PreSplit::from_name).ok_or_else(|| {
                input(format!(
                    "{origin}: pre-tokenizer {:?} (tokenizer.ggml.pre) is not supported ({})",
                    name.unwrap_or("?"),
                    super::presplit::KNOWN
                ))
            })?,
        };
        let strings = |key: &str| -> Result<Vec<String>> {
            match f.get(key) {
                Some(Value::Array(Array::String(v))) => Ok(v.clone()),
                Some(_) => Err(input(format!("{origin}: {key} is not an array of strings"))),
                None => Err(input(format!("{origin}: {key} is missing"))),
            }
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let merges = strings("tokenizer.ggml.merges")?;
        let types: Vec<i32> = match f.get("tokenizer.ggml.token_type") {
            None => vec![TOKEN_TYPE_NORMAL; tokens.len()],
            Some(Value::Array(Array::I32(t))) if t.len() == tokens.len() => t.clone(),
            Some(_) => return Err(input(format!("{origin}: tokenizer.ggml.token_type is not {} i32 values", tokens.len()))),
        };
        let is_bytes =
            tokens.len() == 256 && merges.is_empty() && tokens.iter().enumerate().all(|(i, t)| t.chars().eq([byte_to_unicode(i as u8)]));
        if is_bytes {
            return Ok(Some(Tokenizer::Bytes));
        }
        let mut tok = Tokenizer::from_tokens(&tokens, &merges, &types, pre, &origin)?;
        let add_bos = f.get("tokenizer.ggml.add_bos_token").and_then(Value::as_bool) == Some(true);
        let bos = f.get("tokenizer.ggml.bos_token_id").and_then(Value::as_u64).filter(|&b| (b as usize) < tokens.len());
        if let (true, Some(b), Tokenizer::Bpe(arc)) = (add_bos, bos, &mut tok) {
            Arc::get_mut(arc).expect("a tokenizer just made").bos = Some(b as u32);
        }
        Ok(Some(tok))
    }
}

/// Lower-case hex of `bytes`.
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// GPT-2's reversible byte → printable character map (as in its `encoder.py`).
pub fn byte_to_unicode(b: u8) -> char {
    let printable = |x: u8| (b'!'..=b'~').contains(&x) || (0xA1..=0xAC).contains(&x) || (0xAE..=0xFF).contains(&x);
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).unwrap_or('?')
}
