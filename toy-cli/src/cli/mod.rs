//! Command-line arguments (clap). Parsing only: the commands live in `commands/`.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

mod debug;
mod help;
mod train;
pub use debug::{BenchArgs, ChatMasksArgs, DebugArgs, DebugCommand, DumpArgs, DumpLogitsArgs, TokenizeArgs};
pub use help::command_for;
pub use train::{
    BatchArgs, DataArgs, DeviceArgs, FinetuneArgs, Flag, FlagValue, LogArgs, OptimArgs, ShapeArgs, Shown, TrainArgs, WarmStartArgs,
};

/// Train llama-, qwen2- and GPT-2-shaped language models on ggml: from scratch,
/// warm-started, or fine-tuned (every weight or LoRA) from a GGUF.
#[derive(Parser, Debug)]
#[command(name = "toy", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Load ggml backend modules (libggml-cuda.so, ...) from this folder; also
    /// $TOY_BACKEND_DIR. Needs a build with `--features dynamic`. Commands that
    /// compute nothing (prep, new, describe, export, debug tokenize/chat-masks)
    /// do not load them.
    #[arg(long = "backend-dir", global = true)]
    pub backend_dir: Option<PathBuf>,
}

#[derive(Subcommand, Debug)]
pub enum Command {
    /// Train a model (default recipe: from-scratch) and write a run folder.
    Train(Box<TrainArgs>),
    /// Sample text from a checkpoint (a .gguf file or a run folder).
    Generate(GenerateArgs),
    /// Loss and perplexity of a checkpoint on a corpus.
    Eval(EvalArgs),
    /// Show the metadata and tensors of a GGUF file.
    Describe(DescribeArgs),
    /// List the backends and devices ggml can use, with their memory.
    Devices(DevicesArgs),
    /// Train a byte-level BPE tokenizer on text files and write a prepared corpus.
    Prep(PrepArgs),
    /// Create a project folder (toy.toml, data/, runs/) where `toy train` runs.
    New(NewArgs),
    /// Write models in other forms (`toy export merge`: a base with a LoRA adapter folded in).
    Export(ExportArgs),
    /// Tools: step timing and memory (bench), what chat data trains
    /// (chat-masks), tokenizer ids, and the PyTorch parity checks' dumps.
    Debug(DebugArgs),
}

/// A count (or seed) of `toy train` (`--keep`, `--batch`, ...): config.toml and events.jsonl
/// hold it as a signed 64-bit integer, so larger values are refused as too large.
fn count_u64(text: &str) -> Result<u64, String> {
    use std::num::IntErrorKind;
    let too_large = || format!("too large (at most {})", i64::MAX);
    match text.parse::<u64>() {
        Ok(v) if v <= i64::MAX as u64 => Ok(v),
        Ok(_) => Err(too_large()),
        Err(e) if *e.kind() == IntErrorKind::PosOverflow => Err(too_large()),
        Err(_) if text.trim_start().starts_with('-') => Err("cannot be negative".into()),
        Err(_) => Err("not a whole number".into()),
    }
}

/// A 32-bit float flag: what `f32` parses (inf and NaN too, for the flag's own
/// check to name), but a finite number beyond f32's range (`1e300`) is refused
/// as such instead of becoming inf, and one too small for it (`1e-300`) as
/// such instead of becoming 0.
pub(crate) fn float32(text: &str) -> Result<f32, String> {
    let v: f32 = text.trim().parse().map_err(|_| "not a number".to_string())?;
    match text.trim().parse::<f64>() {
        Ok(w) if w.is_finite() && !v.is_finite() => Err(format!("beyond a 32-bit float's range (±{:e})", f32::MAX)),
        Ok(w) if w != 0.0 && v == 0.0 => Err(format!("too small for a 32-bit float (the smallest is {:e})", f32::from_bits(1))),
        _ => Ok(v),
    }
}

/// A number as f64 (`nan` and `inf` parse, for the flag's own check to name).
pub(crate) fn float64(text: &str) -> Result<f64, String> {
    text.trim().parse().map_err(|_| "not a number".to_string())
}

/// [`count_u64`] for `usize` fields.
fn count_usize(text: &str) -> Result<usize, String> {
    count_u64(text).and_then(|v| usize::try_from(v).map_err(|_| format!("too large (at most {})", usize::MAX)))
}

#[derive(Args, Debug)]
pub struct DevicesArgs {
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// Where `toy generate` and `toy eval` run a model (defaults of their own:
/// the CPU, f32 products at TF32 on CUDA; `toy train` has [`DeviceArgs`]).
#[derive(Args, Debug, Clone)]
pub struct RunOnArgs {
    /// Device: cpu, cuda, cuda:N, metal.
    #[arg(long, default_value = "cpu")]
    pub device: String,
    /// CPU threads (default: all cores; 0 too). On a machine that other work
    /// keeps busy give fewer: ggml's threads wait for one another at every op.
    #[arg(long, default_value_t = 0, hide_default_value = true, value_parser = count_usize)]
    pub threads: usize,
    /// f32 matrix products on CUDA: highest (f32) or high (TF32 tensor cores);
    /// no effect on the CPU.
    #[arg(long = "matmul-precision", value_enum, default_value = "high")]
    pub matmul_precision: crate::config::MatmulPrecision,
}

#[derive(Args, Debug, Clone)]
#[command(allow_negative_numbers = true)]
pub struct GenerateArgs {
    /// Checkpoint (.gguf) or run folder (uses weights/latest).
    pub model: PathBuf,
    /// A LoRA adapter (llama.cpp's layout) to apply on the model.
    #[arg(long)]
    pub lora: Option<PathBuf>,
    /// Text to continue.
    #[arg(long, default_value = "Once upon a time")]
    pub prompt: String,
    /// Token ids to continue instead of text (separated by spaces or commas).
    #[arg(long = "prompt-ids", conflicts_with = "prompt")]
    pub prompt_ids: Option<String>,
    /// A user message to answer: the model's chat template
    /// (`tokenizer.chat_template`) turns it into the prompt, with the opening
    /// of the assistant's turn.
    #[arg(long, conflicts_with_all = ["prompt", "prompt_ids"])]
    pub chat: Option<String>,
    /// With --chat: a system message before the user's.
    #[arg(long, requires = "chat")]
    pub system: Option<String>,
    /// Tokens to generate (llama.cpp's -n, --n-predict).
    #[arg(short = 'n', long = "n-predict", alias = "n", default_value_t = 100, value_parser = count_usize)]
    pub n: usize,
    /// Softmax temperature (0: greedy).
    #[arg(long, default_value_t = 0.8, conflicts_with = "greedy", value_parser = float32)]
    pub temperature: f32,
    /// Sample among the k most likely tokens (0: all).
    #[arg(long = "top-k", default_value_t = 40, value_parser = count_usize, conflicts_with = "greedy")]
    pub top_k: usize,
    /// Nucleus sampling threshold.
    #[arg(long = "top-p", default_value_t = 0.95, conflicts_with = "greedy", value_parser = float32)]
    pub top_p: f32,
    /// Always take the most likely token.
    #[arg(long)]
    pub greedy: bool,
    /// Keep generating past the end-of-generation tokens (end of text, the
    /// GGUF's eos/eot/eom ids, a chat template's end of turn).
    #[arg(long = "ignore-eot")]
    pub ignore_eot: bool,
    /// Sampling seed.
    #[arg(long, default_value_t = 0, value_parser = count_u64)]
    pub seed: u64,
    /// Where the model runs.
    #[command(flatten)]
    pub on: RunOnArgs,
    /// Print JSON {text, ids, n_prompt} instead of streaming text: `ids` are the
    /// prompt's `n_prompt` ids then the generated ones; `text` is what the
    /// stream shows (the prompt and its continuation; with --chat the reply alone).
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
#[command(allow_negative_numbers = true)]
pub struct EvalArgs {
    /// A LoRA adapter (llama.cpp's layout) to apply on the model.
    #[arg(long)]
    pub lora: Option<PathBuf>,
    /// Checkpoint (.gguf) or run folder.
    pub model: PathBuf,
    /// Raw text (tokenized with the checkpoint's tokenizer), a prepared folder, toy's .bin/.txt ids,
    /// or JSON Lines: text records, or chat data scored on the assistant's tokens only.
    #[arg(long)]
    pub corpus: PathBuf,
    /// How JSON Lines records are read, as `toy train finetune` reads them:
    /// auto (per file, from its first record), chat, or text.
    #[arg(long = "data-format", value_enum)]
    pub data_format: Option<crate::data::chat_records::DataFormat>,
    /// Tokens per window (default: the longest the text fills, at most the
    /// model's context; chat data: each conversation among those of about its
    /// length, in a window of their longest).
    #[arg(long, value_parser = count_usize)]
    pub context: Option<usize>,
    /// The field of JSON Lines records that holds their text (a `.jsonl`
    /// corpus; default `text`).
    #[arg(long = "text-field")]
    pub text_field: Option<String>,
    /// Windows per batch.
    #[arg(long, default_value_t = 8, value_parser = count_usize)]
    pub batch: usize,
    /// Evaluate at most this many windows (0: all, as `toy train
    /// --eval-windows 0`; the default).
    #[arg(long = "max-windows", value_parser = count_usize)]
    pub max_windows: Option<usize>,
    /// The part of the corpus to score: all (a prepared folder's train then
    /// val), train, or val: what training holds out (a prepared folder's
    /// val.bin; of text, ids or chat data the same documents, lines or
    /// conversations as `toy train`). A run's val_loss is the first
    /// `--eval-windows` windows of val, 32 by default, which `--max-windows 32`
    /// scores at the run's `--context` (chat data: unpacked runs).
    #[arg(long, value_enum, default_value_t = Split::All)]
    pub split: Split,
    /// Where the model runs.
    #[command(flatten)]
    pub on: RunOnArgs,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

/// The part of a corpus that `toy eval --split` scores.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Split {
    /// All of it (a prepared folder: train.bin, then val.bin).
    All,
    /// What training trains on (a prepared folder: train.bin).
    Train,
    /// What training holds out (a prepared folder: val.bin).
    Val,
}

#[derive(Args, Debug)]
pub struct ExportArgs {
    #[command(subcommand)]
    pub command: ExportCommand,
}

#[derive(Subcommand, Debug)]
pub enum ExportCommand {
    /// Fold a LoRA adapter into its base: W + (alpha/rank)·B·A, written in the base's types.
    Merge(MergeArgs),
}

#[derive(Args, Debug, Clone)]
pub struct MergeArgs {
    /// The base model (a llama or qwen2 GGUF; f32, f16, bf16 or quantized
    /// matrices). Default: the base the adapter records (a LoRA run's
    /// `--from`), as `toy generate` and `eval` find it.
    #[arg(long)]
    pub base: Option<PathBuf>,
    /// The adapter (llama.cpp's LoRA layout), or a LoRA run folder (its
    /// `weights/latest`).
    #[arg(long)]
    pub lora: PathBuf,
    /// Where to write the merged model (an existing file there is replaced,
    /// once the new one is whole).
    #[arg(long)]
    pub out: PathBuf,
    /// The merged model's type: `same` (each tensor in the base's type) or one
    /// type for every matrix, quantized by ggml's own quantizers as
    /// llama.cpp's llama-quantize does (no importance matrix; a matrix whose
    /// rows do not split into the type's blocks falls back as llama-quantize
    /// does: q4_k to q5_0, q5_k to q5_1, q6_k to q8_0, others to f16; the
    /// output head, or a tied token_embd, q6_k under a coarser type; norms
    /// and other vectors stay f32). Default: `same`, except q8_0 when an
    /// adapted matrix is of a 4- or 5-bit type (its grid rounds most of a
    /// LoRA update away; give `same` to keep each matrix's type).
    #[arg(long = "type", value_name = "TYPE", value_enum)]
    pub dtype: Option<ExportType>,
}

/// The tensor type of `toy export merge --type` (llama.cpp's names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ExportType {
    /// Each tensor in the base's type.
    Same,
    F32,
    F16,
    Bf16,
    #[value(name = "q8_0")]
    Q8_0,
    #[value(name = "q4_0")]
    Q4_0,
    #[value(name = "q4_1")]
    Q4_1,
    #[value(name = "q5_0")]
    Q5_0,
    #[value(name = "q5_1")]
    Q5_1,
    #[value(name = "q4_k")]
    Q4K,
    #[value(name = "q5_k")]
    Q5K,
    #[value(name = "q6_k")]
    Q6K,
}

impl ExportType {
    /// The ggml type and llama.cpp's `general.file_type` number for it
    /// (`llama_ftype`; the k-quants as their `_S` variants, one type
    /// throughout); `None` for `same`.
    pub fn dtype(self) -> Option<(ggml_rs::DType, u32)> {
        use ggml_rs::DType as D;
        Some(match self {
            ExportType::Same => return None,
            ExportType::F32 => (D::F32, 0),
            ExportType::F16 => (D::F16, 1),
            ExportType::Bf16 => (D::BF16, 32),
            ExportType::Q8_0 => (D::Q8_0, 7),
            ExportType::Q4_0 => (D::Q4_0, 2),
            ExportType::Q4_1 => (D::Q4_1, 3),
            ExportType::Q5_0 => (D::Q5_0, 8),
            ExportType::Q5_1 => (D::Q5_1, 9),
            ExportType::Q4K => (D::Q4K, 14),
            ExportType::Q5K => (D::Q5K, 16),
            ExportType::Q6K => (D::Q6K, 18),
        })
    }
}

#[derive(Args, Debug, Clone)]
pub struct DescribeArgs {
    /// A GGUF file or run folder.
    pub model: PathBuf,
    /// Print JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
#[command(allow_negative_numbers = true)]
pub struct PrepArgs {
    /// Inputs: UTF-8 text files (documents separated by lines that are exactly
    /// `<|endoftext|>`; each file ends a document), JSON Lines (`.jsonl`, one
    /// document per record), folders of those, and their `.gz`.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Largest vocabulary the BPE may learn, `<|endoftext|>` and the 256 bytes
    /// included (at least 257; fewer ids when the text is small).
    #[arg(long = "vocab-size", default_value_t = crate::data::tokenizer::DEFAULT_VOCAB_SIZE, value_parser = count_usize)]
    pub vocab_size: usize,
    /// Output folder: tokenizer.json, train.bin, val.bin (little-endian u32 ids), manifest.json.
    #[arg(long)]
    pub out: PathBuf,
    /// Fraction of the documents held out for validation, in [0, 1).
    #[arg(long = "val-fraction", default_value_t = 0.05)]
    pub val_fraction: f64,
    /// Seed of the choice of validation documents.
    #[arg(long, default_value_t = 0, value_parser = count_u64)]
    pub seed: u64,
    /// Write into a non-empty output folder.
    #[arg(long)]
    pub force: bool,
    /// The field of a JSON Lines record (`.jsonl`) that holds its text
    /// (default `text`).
    #[arg(long = "text-field")]
    pub text_field: Option<String>,
    /// Train the BPE on a uniform sample of at most this many MB of the
    /// documents (the whole text when smaller).
    #[arg(long = "bpe-sample", default_value_t = (crate::data::prep::DEFAULT_BPE_SAMPLE_BYTES >> 20) as f64)]
    pub bpe_sample: f64,
    /// Print the manifest as JSON.
    #[arg(long)]
    pub json: bool,
}

#[derive(Args, Debug, Clone)]
pub struct NewArgs {
    /// The project folder to create.
    pub dir: PathBuf,
    /// Write into a non-empty folder (replacing toy.toml and data/default).
    #[arg(long)]
    pub force: bool,
}
