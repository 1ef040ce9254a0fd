//! What a model file's keys, tokenizer and tensors must agree on before any
//! command runs it. llama.cpp's loader is the reference: it refuses a llama
//! whose `rope.dimension_count` is not the head width, and it requires the
//! token table to have exactly one row per tokenizer token (`n_vocab` is the
//! token count; converters pad the tokenizer with `[PAD…]` tokens when a model
//! pads its embedding rows, e.g. to a multiple of 64), so toy does the same.

use crate::data::Tokenizer;
use crate::error::{input, Result};
use crate::model::ModelConfig;
use ggml_rs::gguf::{GgufFile, Value};

/// A key's value in a message.
fn shown(v: &Value) -> String {
    (v.as_u64().map(|n| n.to_string()))
        .or_else(|| v.as_f64().map(|f| f.to_string()))
        .or_else(|| v.as_str().map(|s| format!("{s:?}")))
        .unwrap_or_else(|| "not a number".into())
}

/// The number at `key`, `default` when the key is absent; a key that is there
/// but not one number (a string, a per-layer array) is refused rather than
/// replaced by the default.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming `what` and the key.
pub fn optional(file: &GgufFile, key: &str, default: f64, what: &str) -> Result<f64> {
    match file.get(key) {
        None => Ok(default),
        Some(v) => v.as_f64().ok_or_else(|| input(format!("{what}: {key} is not one number (per-layer values are not supported)"))),
    }
}

/// The count at `key` (as [`optional`], for a non-negative integer).
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming `what` and the key.
pub fn optional_count(file: &GgufFile, key: &str, default: usize, what: &str) -> Result<usize> {
    match file.get(key) {
        None => Ok(default),
        Some(v) => {
            Ok(v.as_u64().ok_or_else(|| input(format!("{what}: {key} is not one count (per-layer values are not supported)")))? as usize)
        }
    }
}

/// Refuse llama or qwen2 keys that would change the attention math toy runs:
/// a RoPE dimension count, key or value width other than the head width
/// (llama.cpp refuses the first for both architectures, and its tensor shapes
/// follow the other two), and RoPE scaling (toy runs llama.cpp's RoPE, mode 0
/// for llama and NEOX for qwen2, without scaling).
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming `what` and the key.
pub fn check_attention_keys(file: &GgufFile, c: &ModelConfig, what: &str) -> Result<()> {
    if c.arch.rope().is_none() {
        return Ok(());
    }
    let a = c.arch.name();
    let d_head = c.d_head() as u64;
    for (key, is) in [
        ("rope.dimension_count", "RoPE rotates whole heads (as llama.cpp requires for llama and qwen2 models)"),
        ("attention.key_length", "keys are one head wide"),
        ("attention.value_length", "values are one head wide"),
    ] {
        let key = &format!("{a}.{key}");
        if let Some(v) = file.get(key) {
            match v.as_u64() {
                Some(n) if n == d_head => {}
                None => return Err(input(format!("{what}: {key} is {}, not an unsigned integer", shown(v)))),
                Some(_) => {
                    return Err(input(format!(
                        "{what}: {key} is {}, but the heads are {d_head} wide ({} / {} heads); toy's {is}",
                        shown(v),
                        c.d_model,
                        c.n_heads
                    )))
                }
            }
        }
    }
    let scaling = file.get(&format!("{a}.rope.scaling.type")).map(|v| v.as_str().unwrap_or("?").to_string());
    let factor = [format!("{a}.rope.scaling.factor"), format!("{a}.rope.scale_linear")]
        .into_iter()
        .find_map(|k| file.get(&k).map(|v| (k.clone(), v.as_f64().unwrap_or(f64::NAN))))
        .filter(|&(_, f)| f != 0.0 && f != 1.0);
    if let Some(t) = scaling.filter(|t| t != "none" && t != "linear") {
        return Err(input(format!("{what}: {a}.rope.scaling.type {t:?} is not supported (toy runs RoPE without scaling)")));
    }
    if let Some((k, f)) = factor {
        return Err(input(format!("{what}: {k} is {f}; RoPE scaling is not supported (toy runs RoPE without scaling)")));
    }
    Ok(())
}

/// Refuse a `{arch}.vocab_size` key that contradicts the token table's rows.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming `what`.
pub fn check_vocab_key(file: &GgufFile, c: &ModelConfig, what: &str) -> Result<()> {
    let key = format!("{}.vocab_size", c.arch.name());
    match file.get(&key) {
        Some(v) if v.as_u64().is_none() => Err(input(format!("{what}: {key} is {}, not an unsigned integer", shown(v)))),
        Some(v) if v.as_u64() != Some(c.vocab as u64) => {
            Err(input(format!("{what}: {key} is {}, but token_embd.weight has {} rows", shown(v), c.vocab)))
        }
        _ => Ok(()),
    }
}

/// Refuse a tokenizer that does not fit the model: a token count other than
/// the token table's rows (llama.cpp's rule, see the module), a special token
/// id (`tokenizer.ggml.*_token_id`) outside the tokens, or token keys without
/// `tokenizer.ggml.model`.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming `what` and the key.
pub fn check_tokenizer(file: &GgufFile, tok: Option<&Tokenizer>, vocab: usize, what: &str) -> Result<()> {
    let Some(tok) = tok else {
        if file.get("tokenizer.ggml.tokens").is_some() {
            return Err(input(format!("{what}: tokenizer.ggml.tokens without tokenizer.ggml.model")));
        }
        return Ok(());
    };
    let n = tok.vocab_size();
    if n != vocab {
        return Err(input(format!(
            "{what}: the tokenizer has {n} tokens, but token_embd.weight has {vocab} rows (llama.cpp requires one row per token)"
        )));
    }
    for (k, v) in file.metadata().iter().filter(|(k, _)| k.starts_with("tokenizer.ggml.") && k.ends_with("_token_id")) {
        match v.as_u64() {
            None => return Err(input(format!("{what}: {k} is {}, not an unsigned integer (a token id)", shown(v)))),
            Some(id) if id >= n as u64 => return Err(input(format!("{what}: {k} is {}, outside the tokenizer's {n} tokens", shown(v)))),
            Some(_) => {}
        }
    }
    Ok(())
}

/// Refuse tensors a `c`-shaped model does not have (a variant toy would run
/// without them: RoPE frequency factors, biases, experts...).
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming `what` and the tensor.
pub fn check_no_stray_tensors(file: &GgufFile, c: &ModelConfig, what: &str) -> Result<()> {
    let expected: std::collections::HashSet<String> = super::checkpoint::expected_shapes(c).into_iter().map(|(n, _)| n).collect();
    match file.tensors().iter().find(|t| !expected.contains(&t.name)) {
        Some(t) => Err(input(format!(
            "{what}: tensor {} is not part of a {} model as toy runs it (another variant of the architecture?)",
            t.name,
            c.arch.name()
        ))),
        None => Ok(()),
    }
}
