//! `toy train`'s arguments, in groups: each group is one clap `Args` struct,
//! flattened into [`TrainArgs`] (and, for [`DeviceArgs`], into `toy debug
//! bench`), and read from `toy.toml`'s `[train]` table under the same names.
//! [`flag_group!`] gives every group the same two operations, so a new flag is
//! declared once: filling the flags not given from `toy.toml`, and listing
//! the flags with their values (what `--resume` and the recipes check).

use super::{count_u64, count_usize};
use crate::config::{Dtype, MatmulPrecision, Preset, Recipe};
use crate::data::chat_records::DataFormat;
use crate::donor::{LensInit, MatchBy, TableInit};
use crate::model::attention::Attention;
use crate::model::Arch;
use clap::Args;
use std::path::PathBuf;

/// One flag's value as a group holds it: `Option<T>` (given or not) or a
/// switch (`bool`).
pub trait Flag {
    /// Whether the flag was given (a switch: whether it is on).
    fn given(&self) -> bool;
    /// The value as a message shows it (`""` when not given; a switch: `on` or `off`).
    fn shown(&self) -> String;
    /// The value as two of them compare: [`shown`](Self::shown), a path made absolute.
    fn key(&self) -> String {
        self.shown()
    }
    /// Take `file`'s value (toy.toml's) where this one was not given.
    fn or_from(&mut self, file: &Self);
}

/// A flag's value type, as a message shows it.
pub trait Shown {
    /// The value as the flag takes it (an enum's name, a list with commas).
    fn shown(&self) -> String;
    /// The value as two of them compare: [`shown`](Self::shown), a path made absolute.
    fn key(&self) -> String {
        self.shown()
    }
}

impl<T: Shown + Clone> Flag for Option<T> {
    fn given(&self) -> bool {
        self.is_some()
    }
    fn shown(&self) -> String {
        self.as_ref().map(Shown::shown).unwrap_or_default()
    }
    fn key(&self) -> String {
        self.as_ref().map(Shown::key).unwrap_or_default()
    }
    fn or_from(&mut self, file: &Self) {
        if self.is_none() {
            self.clone_from(file);
        }
    }
}

impl Flag for bool {
    fn given(&self) -> bool {
        *self
    }
    fn shown(&self) -> String {
        if *self { "on" } else { "off" }.to_string()
    }
    fn or_from(&mut self, file: &Self) {
        *self |= *file;
    }
}

macro_rules! shown_by_display {
    ($($t:ty),*) => { $( impl Shown for $t { fn shown(&self) -> String { self.to_string() } } )* };
}
shown_by_display!(u64, usize, f32, f64, String);

macro_rules! shown_by_value_name {
    ($($t:ty),*) => { $( impl Shown for $t {
        fn shown(&self) -> String {
            clap::ValueEnum::to_possible_value(self).map(|p| p.get_name().to_string()).unwrap_or_default()
        }
    } )* };
}
shown_by_value_name!(Preset, Arch, DataFormat, MatmulPrecision, Attention, Dtype, TableInit, MatchBy, LensInit, Recipe);

impl Shown for PathBuf {
    fn shown(&self) -> String {
        self.display().to_string()
    }
    fn key(&self) -> String {
        std::fs::canonicalize(self).unwrap_or_else(|_| self.clone()).display().to_string()
    }
}

impl Shown for Vec<String> {
    fn shown(&self) -> String {
        self.join(",")
    }
}

/// One flag of a group: its name (`--d-model`), whether it was given, and its value.
#[derive(Clone, Debug, PartialEq)]
pub struct FlagValue {
    /// `--` and the field's name with `-` for `_`.
    pub flag: String,
    /// Given on the command line or in `toy.toml` (a switch: on).
    pub given: bool,
    /// As a message shows it ([`Flag::shown`]).
    pub value: String,
    /// As values compare ([`Flag::key`]).
    pub key: String,
}

/// A group of flags: the struct as written, and `or_from` / `flags` over every field
/// (a field `d_model` is the flag `--d-model`).
macro_rules! flag_group {
    ($(#[$sm:meta])* pub struct $name:ident { $( $(#[$fm:meta])* pub $f:ident : $t:ty, )* }) => {
        $(#[$sm])*
        pub struct $name { $( $(#[$fm])* pub $f: $t, )* }

        impl $name {
            /// Take `toy.toml`'s value of every flag not given.
            pub fn or_from(&mut self, file: &Self) {
                $( Flag::or_from(&mut self.$f, &file.$f); )*
            }

            /// Every flag of the group with its value.
            pub fn flags(&self) -> Vec<FlagValue> {
                vec![$( FlagValue {
                    flag: format!("--{}", stringify!($f).replace('_', "-")),
                    given: Flag::given(&self.$f),
                    value: Flag::shown(&self.$f),
                    key: Flag::key(&self.$f),
                }, )*]
            }

            /// The flags given, by name.
            pub fn given(&self) -> Vec<String> {
                self.flags().into_iter().filter(|f| f.given).map(|f| f.flag).collect()
            }
        }
    };
}

/// `toy train [RECIPE]` and `toy.toml`'s `[train]`: the recipe, the groups,
/// and the options that say how to run rather than what (`--out`, `--json`,
/// `--resume`, `--allow-corpus-change`; not read from `toy.toml`).
#[derive(Args, Debug, Default, Clone, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
#[command(allow_negative_numbers = true)]
pub struct TrainArgs {
    /// Recipe (toy.toml: `recipe = "finetune"`; the command line wins).
    #[arg(value_enum)]
    pub recipe: Option<Recipe>,
    #[command(flatten)]
    #[serde(flatten)]
    pub data: DataArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub batch: BatchArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub shape: ShapeArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub optim: OptimArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub log: LogArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub device: DeviceArgs,
    /// Run folder (default: `runs/{arch}-{date}-{seq}`, or `runs/$TOY_RUN_ID`).
    #[arg(long)]
    #[serde(skip)]
    pub out: Option<PathBuf>,
    /// Print a JSON summary instead of loss lines.
    #[arg(long)]
    #[serde(skip)]
    pub json: bool,
    /// Continue the run in this folder from its latest checkpoint (same
    /// configuration; --steps may extend it, --device may change).
    #[arg(long)]
    #[serde(skip)]
    pub resume: Option<PathBuf>,
    /// With --resume: go on with a corpus whose input changed since the run
    /// started (it is tokenized with the run's own tokenizer).
    #[arg(long = "allow-corpus-change")]
    #[serde(skip)]
    pub allow_corpus_change: bool,
    #[command(flatten)]
    #[serde(flatten)]
    pub warm: WarmStartArgs,
    #[command(flatten)]
    #[serde(flatten)]
    pub finetune: FinetuneArgs,
}

impl TrainArgs {
    /// Flags win over `toy.toml` (`file`).
    pub fn or_from(&mut self, file: &TrainArgs) {
        self.recipe = self.recipe.or(file.recipe);
        self.data.or_from(&file.data);
        // --steps and --epochs say one thing: the one given here wins over the file's either.
        let (steps, epochs) = (self.batch.steps.is_some(), self.batch.epochs.is_some());
        self.batch.or_from(&file.batch);
        if steps || epochs {
            (self.batch.steps, self.batch.epochs) = if steps { (self.batch.steps, None) } else { (None, self.batch.epochs) };
        }
        self.shape.or_from(&file.shape);
        self.optim.or_from(&file.optim);
        self.log.or_from(&file.log);
        self.device.or_from(&file.device);
        self.warm.or_from(&file.warm);
        self.finetune.or_from(&file.finetune);
    }

    /// Every flag of every group with its value (not the recipe, `--out`,
    /// `--json`, `--resume` and `--allow-corpus-change`, which say how to run
    /// rather than what).
    pub fn flags(&self) -> Vec<FlagValue> {
        [
            self.data.flags(),
            self.batch.flags(),
            self.shape.flags(),
            self.optim.flags(),
            self.log.flags(),
            self.device.flags(),
            self.warm.flags(),
            self.finetune.flags(),
        ]
        .concat()
    }
}

flag_group! {
    /// The training data.
    #[derive(Args, Debug, Default, Clone, serde::Deserialize)]
    #[serde(default)]
    #[command(next_help_heading = "Data")]
    pub struct DataArgs {
        /// Corpus: a prepared folder (`toy prep`), toy's `.bin` / `.txt` id files,
        /// or raw UTF-8 text (a byte-level BPE of 1024 ids is trained on it).
        /// Default: the embedded corpus.
        #[arg(long)]
        pub corpus: Option<PathBuf>,
        /// The field of JSON Lines records that holds their text (a `.jsonl` corpus).
        #[arg(long = "text-field")]
        pub text_field: Option<String>,
        /// finetune: how JSON Lines records are read. auto: per file, from its first
        /// record ("messages" or ShareGPT's "conversations": conversations, "prompt"
        /// and "completion": pairs, Alpaca's "instruction", "input" and "output":
        /// instructions, else text); chat: conversations, pairs or instructions only;
        /// text: every record is text.
        /// Chat data is rendered with the model's chat template; only the
        /// assistant's tokens are trained.
        #[arg(long = "data-format", value_enum)]
        pub data_format: Option<DataFormat>,
        /// finetune, chat data: pack several conversations into each window,
        /// separated by the model's EOS (default: one conversation per window, padded).
        /// As in TRL's packing without padding-free attention, a conversation
        /// attends to the ones before it in its window, validation included:
        /// val_loss is then not `toy eval`'s (one conversation a window).
        #[arg(long)]
        pub pack: bool,
    }
}

flag_group! {
    /// The preset, the length of the run and its batches: what every recipe takes.
    #[derive(Args, Debug, Default, Clone, serde::Deserialize)]
    #[serde(default)]
    #[command(next_help_heading = "Run and batch")]
    pub struct BatchArgs {
        /// Model and batch shape preset (default tiny). finetune keeps the model's shape; its
        /// batch, and its context when --preset is given, come from the preset.
        #[arg(long, value_enum)]
        pub preset: Option<Preset>,
        /// Training steps (optimizer steps; default 200).
        #[arg(long, value_parser = count_u64)]
        pub steps: Option<u64>,
        /// Passes over the training windows instead of --steps (TRL's
        /// num_train_epochs; fractions allowed): --steps becomes
        /// ⌈epochs × windows / (batch × grad-accum)⌉, as config.toml records it.
        /// A window: a conversation (or a packed window) of chat data, else
        /// --context tokens of the training split.
        #[arg(long, conflicts_with = "steps", value_parser = super::float64)]
        pub epochs: Option<f64>,
        /// Seed of the initial weights and of the batch order (default 0).
        #[arg(long, value_parser = count_u64)]
        pub seed: Option<u64>,
        /// Sequences per micro-batch, one forward and backward pass (default: the preset's).
        #[arg(long, value_parser = count_usize)]
        pub batch: Option<usize>,
        /// Micro-batches of --batch sequences per optimizer step (gradient
        /// accumulation; default 1): a step's loss and gradient are those of one
        /// batch of all of them, so --steps, the schedule and clipping count
        /// optimizer steps.
        #[arg(long = "grad-accum", value_parser = count_usize)]
        pub grad_accum: Option<usize>,
        /// Tokens per sequence, the context length (default: the preset's; finetune: the
        /// model's, at most 1024, or the longest conversation of chat data).
        #[arg(long, value_parser = count_usize)]
        pub context: Option<usize>,
    }
}

flag_group! {
    /// The model's shape: finetune takes it from its base model instead.
    #[derive(Args, Debug, Default, Clone, serde::Deserialize)]
    #[serde(default)]
    #[command(next_help_heading = "Model shape (from scratch, warm-start)")]
    pub struct ShapeArgs {
        /// Architecture (default: the preset's, else llama).
        #[arg(long, value_enum)]
        pub arch: Option<Arch>,
        /// Residual width (default: the preset's).
        #[arg(long = "d-model", value_parser = count_usize)]
        pub d_model: Option<usize>,
        /// Transformer blocks (default: the preset's).
        #[arg(long, value_parser = count_usize)]
        pub layers: Option<usize>,
        /// Attention heads (default: the preset's).
        #[arg(long, value_parser = count_usize)]
        pub heads: Option<usize>,
        /// Key/value heads, grouped-query attention; llama and qwen2 (default: --heads, or the preset's).
        #[arg(long = "kv-heads", value_parser = count_usize)]
        pub kv_heads: Option<usize>,
        /// Feed-forward width (default: the preset's; gpt2: 4 × d_model).
        #[arg(long = "d-ff", value_parser = count_usize)]
        pub d_ff: Option<usize>,
        /// Vocabulary: of the BPE trained on the fly for raw text and for the
        /// embedded corpus (default 1024, the embedded tokenizer's), or of toy's id
        /// files (default: the largest id + 1; larger ids are an error).
        #[arg(long = "vocab-size", value_parser = count_usize)]
        pub vocab_size: Option<usize>,
        /// RMSNorm/LayerNorm epsilon (default 1e-5).
        #[arg(long = "norm-eps", value_parser = super::float32)]
        pub norm_eps: Option<f32>,
        /// RoPE base, llama and qwen2 (default 10000; smollm2-135m: 100000).
        #[arg(long = "rope-base", value_parser = super::float32)]
        pub rope_base: Option<f32>,
        /// Share the output head with the token embedding (llama; gpt2 always ties).
        #[arg(long)]
        pub tied: bool,
    }
}

flag_group! {
    /// AdamW, its schedule, and which parameters it trains.
    #[derive(Args, Debug, Default, Clone, serde::Deserialize)]
    #[serde(default)]
    #[command(next_help_heading = "Optimizer")]
    pub struct OptimArgs {
        /// Peak learning rate. Default 1e-3; finetune: 2e-4 with --lora-rank,
        /// else 2e-5 (every weight of a trained model).
        #[arg(long, allow_hyphen_values = true, value_parser = super::float32)]
        pub lr: Option<f32>,
        /// Final learning rate of the cosine schedule (default: --lr / 10).
        #[arg(long = "min-lr", allow_hyphen_values = true, value_parser = super::float32)]
        pub min_lr: Option<f32>,
        /// Linear warmup steps (default 20).
        #[arg(long = "warmup-steps", value_parser = count_u64)]
        pub warmup_steps: Option<u64>,
        /// AdamW weight decay, matrices only (default 0.1).
        #[arg(long = "weight-decay", allow_hyphen_values = true, value_parser = super::float32)]
        pub weight_decay: Option<f32>,
        /// Global gradient-norm clip (default 1.0; 0 disables).
        #[arg(long = "grad-clip", allow_hyphen_values = true, value_parser = super::float32)]
        pub grad_clip: Option<f32>,
        /// Keep these parameters fixed: names containing any of the comma-separated
        /// patterns (`--freeze token_embd,blk.0.`).
        #[arg(long, value_delimiter = ',')]
        #[serde(default, deserialize_with = "comma_list")]
        pub freeze: Option<Vec<String>>,
    }
}

flag_group! {
    /// What a run reports and writes besides its final weights.
    #[derive(Args, Debug, Default, Clone, serde::Deserialize)]
    #[serde(default)]
    #[command(next_help_heading = "Logging and checkpoints")]
    pub struct LogArgs {
        /// Validation loss every N steps, and before the first step and after
        /// the last one (or the one a stop signal ends the run on; not on a stop
        /// between micro-batches or during a checkpoint, which is quick instead:
        /// `val_step` in `--json` says which step `val_loss` is of) (default
        /// 100; 0: only those two).
        #[arg(long = "eval-every", value_parser = count_u64)]
        pub eval_every: Option<u64>,
        /// Windows of the validation split each validation loss reads, from its
        /// start (default 32, as nanoGPT's eval_iters; 0: the whole split).
        /// For a prepared folder (`toy prep`), `toy eval RUN --corpus C --split val
        /// --max-windows N` gives the same figure.
        #[arg(long = "eval-windows", value_parser = count_usize)]
        pub eval_windows: Option<usize>,
        /// Checkpoint every N steps (default 0: only at the end).
        #[arg(long = "save-every", value_parser = count_u64)]
        pub save_every: Option<u64>,
        /// Print a loss line every N steps (default: 10 on a terminal, every step when piped; 0: none, validation lines still print).
        #[arg(long = "log-every", value_parser = count_u64)]
        pub log_every: Option<u64>,
        /// Write weights/step_0.gguf (the initial weights) too.
        #[arg(long = "save-initial")]
        pub save_initial: bool,
        /// Record every step's token windows in batches.bin (for replaying the run elsewhere).
        #[arg(long = "record-batches")]
        pub record_batches: bool,
        /// Keep only the newest K checkpoints (default 0: all); step 0's
        /// (`--save-initial`) is kept besides them.
        #[arg(long, value_parser = count_usize)]
        pub keep: Option<usize>,
        /// Skip a step whose loss or gradients are not finite (and log it) instead of stopping.
        #[arg(long = "skip-nonfinite")]
        pub skip_nonfinite: bool,
    }
}

flag_group! {
    /// Where and at what precision a step runs (`toy train`, `toy debug bench`).
    #[derive(Args, Debug, Default, Clone, serde::Deserialize)]
    #[serde(default)]
    #[command(next_help_heading = "Device and precision")]
    pub struct DeviceArgs {
        /// Device: cpu, cuda, cuda:N, metal; or several for data-parallel
        /// training on one host (cuda:0,cuda:1, cuda:all, cpu,cpu; train only).
        #[arg(long)]
        pub device: Option<String>,
        /// CPU threads (default: all cores; 0 too). On a machine that other work keeps
        /// busy give fewer: ggml's threads wait for one another at every op.
        #[arg(long, value_parser = count_usize)]
        pub threads: Option<usize>,
        /// f32 matrix products on CUDA: highest (f32) or high (TF32 tensor cores);
        /// no effect on the CPU. Given, it implies --dtype f32 unless --dtype says
        /// otherwise.
        #[arg(long = "matmul-precision", value_enum)]
        pub matmul_precision: Option<MatmulPrecision>,
        /// Attention: reference (scores, masked softmax and product as separate
        /// ops, the [T, T] scores kept for the backward) or fused (one op that
        /// stores no [T, T] tensor: memory O(T) per row). Default: fused on the
        /// CPU and CUDA, reference elsewhere (train: --resume keeps the run's).
        #[arg(long, value_enum)]
        pub attention: Option<Attention>,
        /// Step precision, PyTorch autocast's: bf16 (matrix products with bf16
        /// inputs and f32 accumulation, except those that only read the attention
        /// scores, which stay TF32; their inputs, the fused attention's q, k, v
        /// and the logits kept in bf16;
        /// weights, gradients, optimizer state, norms, softmax and the loss's
        /// arithmetic in f32; CUDA only) or f32. Default: bf16 on CUDA, f32
        /// elsewhere (train: --resume keeps the run's).
        #[arg(long, value_enum)]
        pub dtype: Option<Dtype>,
    }
}

flag_group! {
    /// The warm-start recipe's donor and the projection lens.
    #[derive(Args, Debug, Default, Clone, serde::Deserialize)]
    #[serde(default)]
    #[command(next_help_heading = "Warm-start")]
    pub struct WarmStartArgs {
        /// warm-start: the donor model (a llama, qwen2 or gpt2 GGUF; f32/f16/bf16/q8_0 embeddings).
        #[arg(long)]
        pub donor: Option<PathBuf>,
        /// warm-start: take the token table from the donor, or start it random ("scratch").
        #[arg(long, value_enum)]
        pub init: Option<TableInit>,
        /// warm-start: match donor rows to student tokens by token text or by index.
        #[arg(long = "match-by", value_enum)]
        pub match_by: Option<MatchBy>,
        /// warm-start: initialise the lens with the donor table's principal directions
        /// (default) or randomly.
        #[arg(long = "lens-init", value_enum)]
        pub lens_init: Option<LensInit>,
        /// Width of the token table behind a projection lens (llama); with --donor it
        /// must equal the donor's width.
        #[arg(long = "donor-width", value_parser = count_usize)]
        pub donor_width: Option<usize>,
        /// Train the token table behind the lens too (default: frozen).
        #[arg(long = "train-table")]
        pub train_table: bool,
        /// warm-start: shuffle the order of the streamed windows every epoch.
        #[arg(long)]
        pub shuffle: bool,
    }
}

flag_group! {
    /// The finetune recipe's base model and its LoRA adapters.
    #[derive(Args, Debug, Default, Clone, serde::Deserialize)]
    #[serde(default)]
    #[command(next_help_heading = "Finetune and LoRA")]
    pub struct FinetuneArgs {
        /// finetune: the model to start from: a llama or qwen2 GGUF with a
        /// gpt2-style BPE tokenizer, in f32, f16, bf16 or a quantized type (q8_0,
        /// q4_0, q4_1, q5_0, q5_1, q2_K..q6_K; LoRA keeps it so, full fine-tuning
        /// dequantizes it).
        #[arg(long)]
        pub from: Option<PathBuf>,
        /// finetune: train low-rank adapters of this rank on the frozen base
        /// instead of every weight (LoRA).
        #[arg(long = "lora-rank", value_parser = count_usize)]
        pub lora_rank: Option<usize>,
        /// finetune: LoRA's alpha; the update is scaled by alpha / rank (default: the rank).
        #[arg(long = "lora-alpha", value_parser = super::float32)]
        pub lora_alpha: Option<f32>,
        /// finetune: the matrices that get adapters, out of attn_q, attn_k, attn_v,
        /// attn_output, ffn_gate, ffn_up, ffn_down (PEFT's q_proj ... down_proj too),
        /// or all-linear (default: the four attention ones).
        #[arg(long = "lora-targets", value_delimiter = ',')]
        #[serde(default, deserialize_with = "comma_list")]
        pub lora_targets: Option<Vec<String>>,
    }
}

/// A list key of `toy.toml` in either form: an array of strings, or the flag's
/// own comma-separated string (`lora_targets = "all-linear"`, `freeze = "a,b"`).
fn comma_list<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<String>>, D::Error> {
    #[derive(serde::Deserialize)]
    #[serde(untagged, expecting = "a string (comma-separated) or an array of strings")]
    enum List {
        One(String),
        Many(Vec<String>),
    }
    Ok(Some(match <List as serde::Deserialize>::deserialize(d)? {
        // Split as the flag is (`value_delimiter`): an empty entry is refused where the flag's is.
        List::One(s) => s.split(',').map(|x| x.trim().to_string()).collect(),
        List::Many(v) => v,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `flag_group!` names a field's flag after the field: every name it gives
    /// must be a long flag clap knows, and every flag but the five that say how
    /// to run must belong to a group.
    #[test]
    fn group_flags_are_the_clap_flags() {
        let cmd = <TrainArgs as clap::Args>::augment_args(clap::Command::new("train"));
        let longs: Vec<String> = cmd.get_arguments().filter_map(|a| a.get_long()).map(|l| format!("--{l}")).collect();
        let flags: Vec<String> = TrainArgs::default().flags().into_iter().map(|f| f.flag).collect();
        for f in &flags {
            assert!(longs.contains(f), "{f} is not a flag of toy train");
        }
        let outside: Vec<&String> = longs.iter().filter(|l| !flags.contains(l)).collect();
        assert_eq!(outside, ["--out", "--json", "--resume", "--allow-corpus-change"]);
    }

    /// toy.toml fills what the command line left out; a switch on in either is on.
    #[test]
    fn flags_win_over_toy_toml() {
        let mut a = TrainArgs::default();
        a.batch.steps = Some(5);
        let file: TrainArgs = toml::from_str("steps = 9\nlr = 0.5\ntied = true\n").unwrap();
        a.or_from(&file);
        assert_eq!((a.batch.steps, a.optim.lr, a.shape.tied), (Some(5), Some(0.5), true));
        assert_eq!(a.shape.given(), ["--tied"]);
        assert!(toml::from_str::<TrainArgs>("out = \"x\"\n").is_err(), "--out is not read from toy.toml");
    }
}
