//! The named shapes of `--preset`.

use crate::error::{input, Result};
use crate::model::Arch;
use serde::{Deserialize, Serialize};

/// A named model and batch shape.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Preset {
    /// The shape of toy 0.8.0, the Ruby project toy-rs succeeds: d 64, 4 heads, d_ff 128, 2 layers, context 32, batch 1.
    Smoke,
    /// d 128, 4 heads, d_ff 344, 4 layers, context 64, batch 8 (toy train's default): 200 steps in well under a minute on 2 cores.
    Tiny,
    /// d 256, 8 heads, d_ff 688, 6 layers, context 256, batch 32.
    Small,
    /// d 512, 8 heads, d_ff 1376, 8 layers, context 512, batch 32.
    Medium,
    /// GPT-2 124M (Radford et al. 2019; nanoGPT's and llm.c's `d12`): d 768, 12
    /// heads, d_ff 3072, 12 layers, context 1024, batch 16, architecture gpt2,
    /// a BPE of 50257 ids when toy trains its own.
    #[value(name = "gpt2-124m")]
    #[serde(rename = "gpt2-124m")]
    Gpt2_124m,
    /// A llama of GPT-2 124M's shape and cost per token: d 768, 12 heads, d_ff
    /// 2048 (SwiGLU: the same 4.7M weights per layer as GPT-2's 3072-wide MLP),
    /// 12 layers, context 1024, batch 16, a BPE of 50257 ids; 162M parameters
    /// with llama's untied head (124M with --tied).
    #[value(name = "llama-124m")]
    #[serde(rename = "llama-124m")]
    Llama124m,
    /// SmolLM2-135M's shape (Hugging Face 2024): llama, d 576, 9 heads with 3
    /// kv heads, d_ff 1536, 30 layers, tied head, RoPE base 100000, context
    /// 2048 (up to 8192 with --context), batch 8, a BPE of 49152 ids.
    #[value(name = "smollm2-135m")]
    #[serde(rename = "smollm2-135m")]
    Smollm2_135m,
}

impl Preset {
    /// (d_model, n_heads, d_ff, n_layers, context, batch).
    pub fn shape(self) -> (usize, usize, usize, usize, usize, usize) {
        match self {
            Preset::Smoke => (64, 4, 128, 2, 32, 1),
            Preset::Tiny => (128, 4, 344, 4, 64, 8),
            Preset::Small => (256, 8, 688, 6, 256, 32),
            Preset::Medium => (512, 8, 1376, 8, 512, 32),
            Preset::Gpt2_124m => (768, 12, 3072, 12, 1024, 16),
            Preset::Llama124m => (768, 12, 2048, 12, 1024, 16),
            Preset::Smollm2_135m => (576, 9, 1536, 30, 2048, 8),
        }
    }

    /// Key/value heads where the preset groups its queries (GQA), else None
    /// (as many as query heads).
    pub fn kv_heads(self) -> Option<usize> {
        match self {
            Preset::Smollm2_135m => Some(3),
            _ => None,
        }
    }

    /// RoPE's base (θ of Su et al. 2021): 10000 unless the preset's model says otherwise.
    pub fn rope_base(self) -> f32 {
        match self {
            Preset::Smollm2_135m => 100_000.0,
            _ => 10_000.0,
        }
    }

    /// The architecture a preset names (None: any, llama by default).
    pub fn arch(self) -> Option<Arch> {
        match self {
            Preset::Gpt2_124m => Some(Arch::Gpt2),
            Preset::Llama124m | Preset::Smollm2_135m => Some(Arch::Llama),
            _ => None,
        }
    }

    /// The architecture of a run of this preset: `given` (`--arch` or
    /// toy.toml), else the preset's, else llama.
    ///
    /// # Errors
    /// One line when `given` contradicts the preset's architecture.
    pub fn resolve_arch(self, given: Option<Arch>) -> Result<Arch> {
        match (given, self.arch()) {
            (Some(x), Some(p)) if x != p => Err(input(format!(
                "--preset {} is a {} model; it cannot take arch {} (from --arch or toy.toml)",
                self.name(),
                p.name(),
                x.name()
            ))),
            (x, p) => Ok(x.or(p).unwrap_or(Arch::Llama)),
        }
    }

    /// The vocabulary of the BPE toy trains for this preset, when it names one
    /// (GPT-2's 50257); otherwise `--vocab-size`'s default.
    pub fn vocab(self) -> Option<usize> {
        match self {
            Preset::Gpt2_124m | Preset::Llama124m => Some(50257),
            Preset::Smollm2_135m => Some(49152),
            _ => None,
        }
    }

    /// The preset's name.
    pub fn name(self) -> &'static str {
        match self {
            Preset::Smoke => "smoke",
            Preset::Tiny => "tiny",
            Preset::Small => "small",
            Preset::Medium => "medium",
            Preset::Gpt2_124m => "gpt2-124m",
            Preset::Llama124m => "llama-124m",
            Preset::Smollm2_135m => "smollm2-135m",
        }
    }
}
