//! Models: the hyper-parameters ([`ModelConfig`]), the parameter tensors of each
//! architecture and their forward passes.

pub mod attention;
pub mod gpt2;
pub mod init;
pub mod llama;
pub mod lora;
pub mod operand;
pub mod qwen2;
pub mod table;
pub mod weights;

pub use weights::{Block, Param, Weights};

use ggml_rs::{RopeMode, Tensor};
use serde::{Deserialize, Serialize};

/// Which transformer family.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Arch {
    /// llama / SmolLM2: RMSNorm, RoPE, SwiGLU, no biases.
    Llama,
    /// GPT-2: learned positions, LayerNorm, GELU, biases, tied head.
    Gpt2,
    /// Qwen2: llama with biases on q, k and v, and NEOX RoPE.
    Qwen2,
}

impl Arch {
    /// The name used in GGUF (`general.architecture`) and run ids.
    pub fn name(self) -> &'static str {
        match self {
            Arch::Llama => "llama",
            Arch::Gpt2 => "gpt2",
            Arch::Qwen2 => "qwen2",
        }
    }

    /// The architecture whose GGUF name (`general.architecture`) is `name`.
    pub fn from_name(name: &str) -> Option<Arch> {
        [Arch::Llama, Arch::Gpt2, Arch::Qwen2].into_iter().find(|a| a.name() == name)
    }

    /// How the architecture rotates queries and keys, as llama.cpp's
    /// `llama_model_rope_type` (src/llama-model.cpp) decides for its GGUFs:
    /// mode 0 for llama, NEOX for qwen2; `None` for GPT-2 (learned positions).
    pub fn rope(self) -> Option<RopeMode> {
        match self {
            Arch::Llama => Some(RopeMode::Normal),
            Arch::Qwen2 => Some(RopeMode::Neox),
            Arch::Gpt2 => None,
        }
    }

    /// Whether LoRA adapters apply (the table names matrices they may target).
    pub fn takes_lora(self) -> bool {
        !self.table().lora_targets().is_empty()
    }

    /// The architecture's parameter table.
    pub fn table(self) -> &'static table::Table {
        match self {
            Arch::Llama => &llama::TABLE,
            Arch::Gpt2 => &gpt2::TABLE,
            Arch::Qwen2 => &qwen2::TABLE,
        }
    }
}

/// The shape of a model (the fields nanoGPT keeps in `GPTConfig`). Fields that
/// one architecture does not use are ignored by it (GPT-2 has no RoPE and no
/// grouped-query attention).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelConfig {
    pub arch: Arch,
    /// Vocabulary size.
    pub vocab: usize,
    /// Residual stream width.
    pub d_model: usize,
    pub n_layers: usize,
    pub n_heads: usize,
    /// Key/value heads (llama and qwen2 GQA); equal to `n_heads` for multi-head attention.
    pub n_kv_heads: usize,
    /// Feed-forward width.
    pub d_ff: usize,
    /// Maximum sequence length (GPT-2: rows of the position table).
    pub context: usize,
    /// RoPE base θ (llama, qwen2).
    #[serde(serialize_with = "short_f32")]
    pub rope_base: f32,
    /// Epsilon of RMSNorm (llama, qwen2) / LayerNorm (GPT-2).
    #[serde(serialize_with = "short_f32")]
    pub norm_eps: f32,
    /// Output head shares the token embedding (always true for GPT-2).
    pub tied: bool,
    /// Projection lens: token table of this width projected to `d_model` (llama).
    pub donor_width: Option<usize>,
    /// With a lens, keep the token table fixed (only the lens learns).
    #[serde(default = "yes")]
    pub freeze_table: bool,
    /// Parameters kept fixed: those whose name contains one of these
    /// (`--freeze token_embd,blk.0.`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub freeze: Vec<String>,
    /// Low-rank adapters on a frozen base (llama, qwen2; the finetune recipe).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lora: Option<lora::LoraConfig>,
    /// With LoRA, the frozen base's matrices and token table stay in memory in
    /// the base file's types: this one (ggml's name: `f16`, `bf16`, `q8_0`,
    /// `q4_1`, `q4_K`...) for most of them, [`base_dtype_except`](Self::base_dtype_except)
    /// for the rest; f32 when absent. Each product dequantizes its matrix to f32
    /// for the time of the product ([`weights::matrix`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_dtype: Option<String>,
    /// The base's tensors whose type is not `base_dtype`, by GGUF name
    /// (`token_embd.weight = "q8_0"` in SmolLM2's Q4_1 file).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub base_dtype_except: std::collections::BTreeMap<String, String>,
    /// For graphs without a backward only, never saved: the matrices and
    /// token table stay in `base_dtype`/`base_dtype_except` without LoRA too
    /// (a quantized llama-family GGUF run by `toy generate` and `toy eval`).
    #[serde(skip)]
    pub stored_types: bool,
}

fn yes() -> bool {
    true
}

impl ModelConfig {
    /// A model of this shape with the defaults of everything else: as many
    /// kv heads as heads, RoPE base 10000, norm epsilon 1e-5, the head tied
    /// for GPT-2 only, no lens, no frozen parameters, no LoRA, f32 weights.
    pub fn new(arch: Arch, vocab: usize, d_model: usize, n_layers: usize, n_heads: usize, d_ff: usize, context: usize) -> ModelConfig {
        ModelConfig {
            arch,
            vocab,
            d_model,
            n_layers,
            n_heads,
            n_kv_heads: n_heads,
            d_ff,
            context,
            rope_base: 10_000.0,
            norm_eps: 1e-5,
            tied: arch == Arch::Gpt2,
            donor_width: None,
            freeze_table: true,
            freeze: Vec::new(),
            lora: None,
            base_dtype: None,
            base_dtype_except: Default::default(),
            stored_types: false,
        }
    }

    /// Width of one attention head.
    pub fn d_head(&self) -> usize {
        self.d_model / self.n_heads
    }

    /// Check the shape is consistent; the message names the offending field.
    pub fn validate(&self) -> Result<(), String> {
        let positive = [
            ("vocab", self.vocab),
            ("d_model", self.d_model),
            ("n_layers", self.n_layers),
            ("n_heads", self.n_heads),
            ("n_kv_heads", self.n_kv_heads),
            ("d_ff", self.d_ff),
            ("context", self.context),
        ];
        if let Some((k, _)) = positive.iter().find(|(_, v)| *v == 0) {
            return Err(format!("{k} must be at least 1"));
        }
        if self.d_model % self.n_heads != 0 {
            return Err(format!("d_model {} is not divisible by n_heads {}", self.d_model, self.n_heads));
        }
        if self.n_heads % self.n_kv_heads != 0 {
            return Err(format!("n_heads {} is not a multiple of n_kv_heads {}", self.n_heads, self.n_kv_heads));
        }
        if self.arch.rope().is_some() && self.d_head() % 2 != 0 {
            return Err(format!("RoPE needs an even head width, d_model/n_heads = {}", self.d_head()));
        }
        if self.arch == Arch::Gpt2 && (self.n_kv_heads != self.n_heads || self.donor_width.is_some()) {
            return Err("gpt2 has no grouped-query attention and no projection lens".into());
        }
        if self.donor_width == Some(0) {
            return Err("donor width must be at least 1".into());
        }
        if self.donor_width.is_some() && self.tied {
            return Err("a projection lens needs an untied output head".into());
        }
        if !(self.norm_eps > 0.0 && self.norm_eps.is_finite()) {
            return Err(format!("norm_eps {} must be positive and finite", self.norm_eps));
        }
        if !(self.rope_base > 1.0 && self.rope_base.is_finite()) {
            return Err(format!("rope_base {} must be above 1 and finite", self.rope_base));
        }
        if self.vocab > i32::MAX as usize || self.context > (1 << 20) {
            return Err("vocab or context too large".into());
        }
        // Bounds that keep every size computed from the shape far from overflow.
        let limits = [
            ("d_model", self.d_model, 1 << 16),
            ("d_ff", self.d_ff, 1 << 18),
            ("n_layers", self.n_layers, 1 << 10),
            ("donor width", self.donor_width.unwrap_or(0), 1 << 16),
        ];
        if let Some((what, v, max)) = limits.iter().find(|(_, v, max)| v > max) {
            return Err(format!("{what} {v} is too large (at most {max})"));
        }
        Ok(())
    }

    /// Check that every name of [`base_dtype_except`](Self::base_dtype_except)
    /// is a tensor of the model's table: what a run's config.toml may say (a
    /// base file's own extra tensors, which toy ignores, are not checked).
    ///
    /// # Errors
    /// The first name that is not, in a message.
    pub fn check_base_dtype_names(&self) -> Result<(), String> {
        if self.base_dtype_except.is_empty() {
            return Ok(());
        }
        let names: std::collections::HashSet<String> =
            crate::formats::checkpoint::expected_shapes(self).into_iter().map(|(n, _)| n).collect();
        match self.base_dtype_except.keys().find(|k| !names.contains(*k)) {
            Some(k) => Err(format!("base_dtype_except names {k:?}, which is not a tensor of this model")),
            None => Ok(()),
        }
    }

    /// Number of parameters, from the architecture's table
    /// ([`table::Table::n_params`]: a donor table under a lens is not counted).
    pub fn n_params(&self) -> usize {
        self.arch.table().n_params(self)
    }
}

/// Inputs of a forward pass, all in the compute context.
#[derive(Clone, Copy, Debug)]
pub struct Batch<'a> {
    /// Token ids, i32 `[T·B]` (sequence-major: token t of sequence b at `b·T + t`).
    pub tokens: Tensor<'a>,
    /// Position of every token, i32 `[T·B]` (`0..T` repeated B times).
    pub pos: Tensor<'a>,
    /// Causal mask, f32 `[T, T]`: 0 where key ≤ query, −∞ above; the
    /// reference attention's, `None` where the attention is fused.
    pub mask: Option<Tensor<'a>>,
    /// Sequence length T.
    pub t: usize,
    /// Sequences B.
    pub b: usize,
    /// How attention is computed.
    pub attention: attention::Attention,
    /// A key/value cache (sampling), else `None` (training, evaluation).
    pub cache: Option<attention::CacheStep<'a>>,
}

/// An f32 as the f64 of the shortest decimal that reads back to it (`0.001`,
/// not the f64 widening `0.0010000000474974513`): the value as it was written.
pub fn as_written(x: f32) -> f64 {
    x.to_string().parse::<f64>().unwrap_or(x as f64)
}

/// Serialize an f32 [`as_written`], so config.toml shows values as given.
pub fn short_f32<S: serde::Serializer>(x: &f32, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_f64(as_written(*x))
}

#[cfg(test)]
mod autocast_tests;
