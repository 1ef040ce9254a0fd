//! Tokenizers: a plain byte-level one (256 ids, one per byte).

use crate::error::{input, Result};
use ggml_rs::gguf::{Array, GgufFile, GgufWriter, Value};

/// Turns text into token ids and back.
#[derive(Clone, Debug)]
pub enum Tokenizer {
    /// One id per byte (0..=255), no merges.
    Bytes,
}

impl Tokenizer {
    /// Number of ids.
    pub fn vocab_size(&self) -> usize {
        match self {
            Tokenizer::Bytes => 256,
        }
    }

    /// Token ids of `text`.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>> {
        match self {
            Tokenizer::Bytes => Ok(text.bytes().map(u32::from).collect()),
        }
    }

    /// Text of `ids` (invalid UTF-8 is replaced).
    pub fn decode(&self, ids: &[u32]) -> Result<String> {
        match self {
            Tokenizer::Bytes => {
                let bytes: Vec<u8> = ids.iter().map(|&i| u8::try_from(i).map_err(|_| input(format!("id {i} is not a byte")))).collect::<Result<_>>()?;
                Ok(String::from_utf8_lossy(&bytes).into_owned())
            }
        }
    }

    /// The vocabulary in id order, spelled as in GGUF `tokenizer.ggml.tokens`
    /// (GPT-2 byte-level form).
    pub fn tokens(&self) -> Option<Vec<String>> {
        match self {
            Tokenizer::Bytes => Some((0..=255u8).map(|b| byte_to_unicode(b).to_string()).collect()),
        }
    }

    /// The end-of-text id, if the tokenizer has one.
    pub fn eot(&self) -> Option<u32> {
        None
    }

    /// Write the `tokenizer.ggml.*` keys llama.cpp reads (`gpt2` byte-level BPE).
    pub fn write_gguf(&self, g: &mut GgufWriter) -> Result<()> {
        let tokens: Vec<String> = (0..=255u8).map(|b| byte_to_unicode(b).to_string()).collect();
        g.set("tokenizer.ggml.model", "gpt2")?;
        g.set("tokenizer.ggml.pre", "gpt-2")?;
        g.set("tokenizer.ggml.tokens", Value::Array(Array::String(tokens)))?;
        g.set("tokenizer.ggml.merges", Value::Array(Array::String(Vec::new())))?;
        g.set("tokenizer.ggml.token_type", Value::Array(Array::I32(vec![1; 256])))?;
        Ok(())
    }

    /// The tokenizer stored in a checkpoint, if any.
    pub fn read_gguf(f: &GgufFile) -> Result<Option<Tokenizer>> {
        match f.get("tokenizer.ggml.model").and_then(Value::as_str) {
            None => Ok(None),
            Some("gpt2") => match f.get("tokenizer.ggml.tokens") {
                Some(Value::Array(Array::String(t))) if t.len() == 256 => Ok(Some(Tokenizer::Bytes)),
                _ => Err(input(format!("{}: unsupported tokenizer", f.path().display()))),
            },
            Some(m) => Err(input(format!("{}: tokenizer model {m:?} is not supported", f.path().display()))),
        }
    }
}

/// GPT-2's reversible byte → printable character map (as in its `encoder.py`).
pub fn byte_to_unicode(b: u8) -> char {
    let printable = |x: u8| (b'!'..=b'~').contains(&x) || (0xA1..=0xAC).contains(&x) || (0xAE..=0xFF).contains(&x);
    if printable(b) {
        return char::from(b);
    }
    let n = (0..b).filter(|&x| !printable(x)).count() as u32;
    char::from_u32(256 + n).expect("valid code point")
}
