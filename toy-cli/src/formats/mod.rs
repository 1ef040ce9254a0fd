//! The files toy reads and writes beside a run's events: model checkpoints
//! ([`checkpoint`], standard GGUFs in llama.cpp's layout), LoRA adapter GGUFs
//! ([`adapter`]) and the resume state written with each checkpoint
//! ([`state`]). They depend on [`crate::model`] (the tensor tables) and the
//! tokenizer only, never on training.

pub mod adapter;
pub mod checkpoint;
pub mod checks;
pub mod state;

/// Identifies our own keys (`toy.*`) in a checkpoint.
pub const FORMAT: &str = "toy-rs/v1";

/// Where a checkpoint comes from.
#[derive(Clone, Debug, Default)]
pub struct Provenance {
    pub run_id: String,
    pub step: u64,
    /// `general.name`.
    pub name: String,
    /// `toy.save_id`: pairs a checkpoint with the resume state written with it
    /// (empty: not written).
    pub save_id: String,
    /// A LoRA run's base model (`toy.lora.base` in its adapter files).
    pub lora_base: String,
    /// Hex SHA-256 of that base file (`toy.lora.base_sha256`; empty: not written).
    pub lora_base_sha256: String,
    /// Keys a finetuned model keeps from its base model
    /// ([`checkpoint::BASE_KEYS`]: its chat template, special-token ids),
    /// written over the tokenizer's own.
    pub base_keys: Vec<(String, ggml_rs::gguf::Value)>,
}
