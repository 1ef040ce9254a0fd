//! `toy debug`'s arguments: dumps for the parity harness, the step
//! benchmark, tokenizer ids and chat masks.

use crate::config::Preset;
use crate::model::Arch;
use clap::{Args, Subcommand};
use std::path::PathBuf;

#[derive(Args, Debug)]
pub struct DebugArgs {
    #[command(subcommand)]
    pub command: DebugCommand,
}

#[derive(Subcommand, Debug)]
pub enum DebugCommand {
    /// Loss and every parameter's gradient for one recorded batch, as a model-shaped GGUF.
    DumpGrads(DumpArgs),
    /// Loss and logits `[vocab, T·B]` for one recorded batch, as GGUF.
    DumpLogits(DumpLogitsArgs),
    /// Time training steps on random tokens (used by scripts/bench).
    Bench(BenchArgs),
    /// Token ids of a text file with a GGUF's tokenizer, as little-endian i32
    /// (used by scripts/llamacpp/check-tokenizer.sh).
    Tokenize(TokenizeArgs),
    /// Chat data as `toy train finetune` sees it: each conversation rendered with
    /// the model's chat template, the trained tokens between ⟦ and ⟧.
    ChatMasks(ChatMasksArgs),
}

#[derive(Args, Debug)]
pub struct TokenizeArgs {
    /// A GGUF with a tokenizer (a model, a run folder's latest checkpoint, or a
    /// vocabulary-only file).
    pub model: PathBuf,
    /// A UTF-8 text file to tokenize.
    #[arg(long)]
    pub text: PathBuf,
    /// Output file of ids.
    #[arg(long)]
    pub out: PathBuf,
    /// Read special tokens written in the text as those tokens (as a prompt);
    /// without it they are text (as a corpus document).
    #[arg(long)]
    pub special: bool,
    /// Tokenize each line (with its newline) on its own and write -1 after each.
    #[arg(long)]
    pub lines: bool,
}

#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
pub struct ChatMasksArgs {
    /// The model whose chat template and tokenizer render the data (a GGUF).
    pub model: PathBuf,
    /// Chat data: JSON Lines of {"messages": [...]}, {"conversations": [...]},
    /// {"prompt", "completion"} or {"instruction", "input", "output"}.
    #[arg(long)]
    pub corpus: PathBuf,
    /// Conversations to show, from the first.
    #[arg(short = 'n', long = "count", alias = "n", default_value_t = 3, value_parser = super::count_usize)]
    pub n: usize,
    /// Print one JSON object per conversation (its ids and which are trained).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
#[command(mut_arg("device", |a| a.default_value("cpu")), mut_arg("threads", |a| a.default_value("0").hide_default_value(true)))]
pub struct BenchArgs {
    /// Model and batch shape.
    #[arg(long, value_enum, default_value = "small")]
    pub preset: Preset,
    /// Architecture (default: the preset's, else llama).
    #[arg(long, value_enum)]
    pub arch: Option<Arch>,
    /// Vocabulary size (default: the preset's, else 4096).
    #[arg(long, value_parser = super::count_usize)]
    pub vocab: Option<usize>,
    /// Timed steps.
    #[arg(long, default_value_t = 10, value_parser = super::count_usize)]
    pub steps: usize,
    /// Untimed steps first.
    #[arg(long, default_value_t = 2, value_parser = super::count_usize)]
    pub warmup: usize,
    /// Override the preset's batch.
    #[arg(long, value_parser = super::count_usize)]
    pub batch: Option<usize>,
    /// Override the preset's context.
    #[arg(long, value_parser = super::count_usize)]
    pub context: Option<usize>,
    /// Time fine-tuning steps of this model (a llama or qwen2 GGUF, or a run
    /// folder's weights/latest) as `toy train finetune --from` runs them: its shape,
    /// vocabulary and weights; the preset gives only the batch and the context
    /// (at most the model's).
    #[arg(long, conflicts_with_all = ["arch", "vocab"])]
    pub from: Option<PathBuf>,
    /// With --from: LoRA adapters of this rank (alpha = rank) on its frozen base,
    /// kept in its own type, as `toy train finetune --lora-rank`.
    #[arg(long = "lora-rank", requires = "from", value_parser = super::count_usize)]
    pub lora_rank: Option<usize>,
    /// With --lora-rank: the matrices that get adapters (default: the architecture's).
    #[arg(long = "lora-targets", requires = "lora_rank", value_delimiter = ',')]
    pub lora_targets: Option<Vec<String>>,
    /// Device, threads and precision, as `toy train` takes them.
    #[command(flatten)]
    pub device: super::DeviceArgs,
}

#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
pub struct DumpArgs {
    /// Checkpoint (e.g. a run's weights/step_0.gguf), or a run folder (its weights/latest).
    pub model: PathBuf,
    /// A run's batches.bin (from `toy train --record-batches`).
    #[arg(long)]
    pub batches: PathBuf,
    /// Which recorded step's batch (1-based).
    #[arg(long, default_value_t = 1, value_parser = super::count_usize)]
    pub step: usize,
    /// Output GGUF file.
    #[arg(long)]
    pub out: PathBuf,
    /// Device.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// CPU threads (0: all cores).
    #[arg(long, default_value_t = 0, value_parser = super::count_usize)]
    pub threads: usize,
    /// f32 matrix products on CUDA: highest (f32) or high (TF32).
    #[arg(long = "matmul-precision", value_enum, default_value = "high")]
    pub matmul_precision: crate::config::MatmulPrecision,
}

/// `toy debug dump-logits`: [`DumpArgs`], and how a compact base multiplies.
#[derive(Args, Debug)]
#[command(allow_negative_numbers = true)]
pub struct DumpLogitsArgs {
    #[command(flatten)]
    pub dump: DumpArgs,
    /// Multiply a quantized (or f16/bf16) base's matrices as stored, as `toy
    /// generate` and llama.cpp do (q4_1 by activations rounded to q8_1, ...),
    /// instead of dequantizing each for its product as training does.
    #[arg(long)]
    pub stored_types: bool,
}
