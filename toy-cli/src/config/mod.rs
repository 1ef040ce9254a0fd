//! Presets and the resolved training configuration (preset < `toy.toml` < flags).

use crate::data::chat_records::DataFormat;
use crate::error::{input, Result};
use crate::model::{short_f32, Arch, ModelConfig};
use recipe::{recorded_recipe, stream_deserialize, stream_serialize};
use serde::{Deserialize, Serialize};

mod preset;
mod recipe;
pub use preset::Preset;
pub use recipe::{Recipe, Sampling};

/// Precision of f32 matrix products (`--matmul-precision`), PyTorch's names
/// (`torch.set_float32_matmul_precision`). Only CUDA has a choice; the CPU
/// computes in f32 whatever is asked.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum MatmulPrecision {
    /// Full f32.
    Highest,
    /// TF32 tensor cores on CUDA (ggml's, llama.cpp's and nanoGPT's default).
    #[default]
    High,
}

impl MatmulPrecision {
    /// ggml-rs's value.
    pub fn ggml(self) -> ggml_rs::MatmulPrecision {
        match self {
            MatmulPrecision::Highest => ggml_rs::MatmulPrecision::Highest,
            MatmulPrecision::High => ggml_rs::MatmulPrecision::High,
        }
    }

    /// The name (`highest`, `high`).
    pub fn name(self) -> &'static str {
        self.ggml().name()
    }
}

/// The precision of a training step (`--dtype`), with PyTorch autocast's
/// semantics: with `bf16` the matrix products (forward and backward) take
/// bf16 inputs and accumulate and return f32 (ggml patch 0018 on CUDA; the
/// products that only read the `[T, T]` attention scores stay TF32, where the
/// conversion would cost more than it saves); weights, gradients, AdamW
/// moments, norms, softmax, cross-entropy and the loss stay f32, and
/// checkpoints are f32.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    /// f32 throughout (matrix products as `--matmul-precision` says).
    #[default]
    F32,
    /// bf16 matrix products, f32 accumulation (CUDA only).
    Bf16,
}

impl Dtype {
    /// The name (`f32`, `bf16`).
    pub fn name(self) -> &'static str {
        match self {
            Dtype::F32 => "f32",
            Dtype::Bf16 => "bf16",
        }
    }

    /// The dtype of a run: `given` (`--dtype`), else f32 when
    /// `--matmul-precision` was given (it asks for f32 products), else
    /// [`default_for`](Self::default_for) `device`.
    pub fn resolve(given: Option<Dtype>, matmul_precision_given: bool, device: &str) -> Dtype {
        given.unwrap_or_else(|| if matmul_precision_given { Dtype::F32 } else { Dtype::default_for(device) })
    }

    /// The default on `device`: bf16 where every device is CUDA, else f32.
    pub fn default_for(device: &str) -> Dtype {
        let d = device.trim().to_lowercase();
        if d.split(',').all(|x| x.trim().starts_with("cuda")) {
            Dtype::Bf16
        } else {
            Dtype::F32
        }
    }

    /// The precision the device's matrix products run at, given
    /// `--matmul-precision` `p` (which only applies to f32).
    pub fn precision(self, p: MatmulPrecision) -> ggml_rs::MatmulPrecision {
        match self {
            Dtype::F32 => p.ggml(),
            Dtype::Bf16 => ggml_rs::MatmulPrecision::Medium,
        }
    }

    /// Refuse bf16 on a device without the bf16 products; `from` says where
    /// the dtype came from (`--dtype`, or also toy.toml and a run's config.toml).
    pub fn check_device(self, device: &str, from: &str) -> Result<()> {
        if self == Dtype::Bf16 && Dtype::default_for(device) != Dtype::Bf16 {
            return Err(input(format!(
                "dtype bf16 (from {from}) needs CUDA devices, not --device {device}: ggml has no faster bf16 matrix product there; use --dtype f32"
            )));
        }
        Ok(())
    }
}

/// Everything a training run needs, resolved. Serialized to `config.toml` in
/// the run folder, which `--resume` reads back (an unknown key is refused).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainConfig {
    /// The preset the shape, batch and context came from; none for a finetune
    /// that no `--preset` gave its batch and context (its shape is its base's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preset: Option<Preset>,
    pub model: ModelConfig,
    /// Sequences per micro-batch (one forward and backward pass).
    pub batch: usize,
    /// Micro-batches per optimizer step (gradient accumulation): a step sees
    /// `batch × grad_accum` sequences; runs from before `--grad-accum` took 1.
    #[serde(default = "one")]
    pub grad_accum: usize,
    /// Optimizer steps.
    pub steps: u64,
    pub seed: u64,
    /// Peak learning rate.
    #[serde(serialize_with = "short_f32")]
    pub lr: f32,
    /// Final learning rate of the cosine schedule.
    #[serde(serialize_with = "short_f32")]
    pub min_lr: f32,
    pub warmup_steps: u64,
    #[serde(serialize_with = "short_f32_pair")]
    pub betas: (f32, f32),
    #[serde(serialize_with = "short_f32")]
    pub eps: f32,
    /// Applied to matrices only.
    #[serde(serialize_with = "short_f32")]
    pub weight_decay: f32,
    /// Global-norm clipping threshold (0 disables).
    #[serde(serialize_with = "short_f32")]
    pub grad_clip: f32,
    /// Validation loss every N steps (0: only at the start and end).
    pub eval_every: u64,
    /// Windows of the validation split each validation loss reads, from its
    /// start (0: all of them).
    pub eval_windows: usize,
    /// Checkpoint every N steps (0: only at the end).
    pub save_every: u64,
    /// Print a loss line every N steps.
    pub log_every: u64,
    /// `cpu`, `cuda`, `cuda:N`, `metal`.
    pub device: String,
    /// CPU threads (0: all cores).
    pub threads: usize,
    /// f32 matrix products on CUDA: `highest` (f32) or `high` (TF32).
    #[serde(default)]
    pub matmul_precision: MatmulPrecision,
    /// The step's precision (`f32`, or `bf16` matrix products on CUDA); runs
    /// from before `--dtype` were f32.
    #[serde(default)]
    pub dtype: Dtype,
    /// How attention is computed (`reference`, `fused`); runs from before
    /// `--attention` used the reference.
    #[serde(default)]
    pub attention: crate::model::attention::Attention,
    /// The corpus path (`<embedded>` for the built-in one), to resume with.
    #[serde(default)]
    pub corpus: String,
    /// The text field of a JSON Lines corpus.
    #[serde(default = "default_text_field")]
    pub text_field: String,
    /// How a JSON Lines corpus's records are read (`--data-format`; absent: auto).
    #[serde(default, skip_serializing_if = "is_auto")]
    pub data_format: DataFormat,
    /// Chat data: several conversations per window (`--pack`; absent: off).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub pack: bool,
    /// `from-scratch`, `warm-start` or `finetune`.
    #[serde(default, deserialize_with = "recorded_recipe")]
    pub recipe: Recipe,
    /// finetune: the model the run started from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from: Option<String>,
    /// finetune: hex SHA-256 of that model's file (a resumed LoRA run refuses another base).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub from_sha256: Option<String>,
    /// Random windows, or the corpus streamed (config.toml's `stream`:
    /// `"in-order"` or `"shuffled"` per epoch; absent for random windows).
    #[serde(rename = "stream", default, serialize_with = "stream_serialize", deserialize_with = "stream_deserialize")]
    pub sampling: Sampling,
    /// Bytes of the corpus's input (its file or files; a prepared folder's
    /// manifest.json; the built-in corpus's text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpus_bytes: Option<u64>,
    /// Hex SHA-256 of that input: `--resume` refuses a corpus that changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpus_sha256: Option<String>,
    /// A prepared folder's: hex SHA-256 of its `train.bin` and `val.bin`
    /// (`run::identity::PREPARED_IDS`), which its manifest does not cover.
    /// Absent in runs started before it was recorded: nothing to check.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub corpus_ids_sha256: Option<String>,
    /// Keep only the newest K checkpoints (0: all).
    #[serde(default)]
    pub keep: usize,
    /// Skip steps whose loss or gradients are not finite instead of stopping.
    #[serde(default)]
    pub skip_nonfinite: bool,
    /// Every step's windows are recorded in `batches.bin`.
    #[serde(default)]
    pub record_batches: bool,
    /// The initial weights were written as `weights/step_0.gguf`.
    #[serde(default)]
    pub save_initial: bool,
    /// warm-start: the donor file the token table came from (a run folder given
    /// as `--donor` recorded as its checkpoint's file).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub donor: Option<String>,
    /// warm-start: hex SHA-256 of that file (checked where a resume reads it again).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub donor_sha256: Option<String>,
    /// warm-start: the token table from the donor or random (`--init`; runs
    /// from before the resolved values were recorded: absent for the default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub donor_init: Option<crate::donor::TableInit>,
    /// warm-start: donor rows matched to tokens by text or index (`--match-by`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub match_by: Option<crate::donor::MatchBy>,
    /// warm-start: how the projection lens started (`--lens-init`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lens_init: Option<crate::donor::LensInit>,
}

fn short_f32_pair<S: serde::Serializer>(x: &(f32, f32), s: S) -> std::result::Result<S::Ok, S::Error> {
    use serde::ser::SerializeTuple;
    let mut t = s.serialize_tuple(2)?;
    t.serialize_element(&crate::model::as_written(x.0))?;
    t.serialize_element(&crate::model::as_written(x.1))?;
    t.end()
}

fn one() -> usize {
    1
}

fn is_auto(f: &DataFormat) -> bool {
    *f == DataFormat::Auto
}

fn default_text_field() -> String {
    "text".into()
}

impl TrainConfig {
    /// The preset's name, or "custom" where none is recorded.
    pub fn preset_name(&self) -> &'static str {
        self.preset.map_or("custom", Preset::name)
    }

    /// The defaults of `preset` for `arch` with vocabulary `vocab`.
    pub fn from_preset(preset: Preset, arch: Arch, vocab: usize) -> TrainConfig {
        let (d, h, f, l, t, b) = preset.shape();
        TrainConfig {
            preset: Some(preset),
            model: ModelConfig {
                n_kv_heads: preset.kv_heads().unwrap_or(h),
                rope_base: preset.rope_base(),
                tied: arch == Arch::Gpt2 || preset == Preset::Smollm2_135m,
                ..ModelConfig::new(arch, vocab, d, l, h, if arch == Arch::Gpt2 { 4 * d } else { f }, t)
            },
            batch: b,
            grad_accum: 1,
            steps: 200,
            seed: 0,
            lr: 1e-3,
            min_lr: 1e-4,
            warmup_steps: 20,
            betas: (0.9, 0.95),
            eps: 1e-8,
            weight_decay: 0.1,
            grad_clip: 1.0,
            eval_every: 100,
            eval_windows: 32,
            save_every: 0,
            log_every: 1,
            device: "cpu".into(),
            threads: 0,
            matmul_precision: MatmulPrecision::High,
            dtype: Dtype::F32,
            attention: Default::default(),
            corpus: String::new(),
            text_field: default_text_field(),
            data_format: DataFormat::Auto,
            pack: false,
            recipe: Recipe::FromScratch,
            from: None,
            from_sha256: None,
            sampling: Sampling::Random,
            corpus_bytes: None,
            corpus_sha256: None,
            corpus_ids_sha256: None,
            keep: 0,
            skip_nonfinite: false,
            record_batches: false,
            save_initial: false,
            donor: None,
            donor_sha256: None,
            donor_init: None,
            match_by: None,
            lens_init: None,
        }
    }

    /// Check everything a run depends on; messages name the flag.
    pub fn validate(&self) -> Result<()> {
        self.model.validate().map_err(|m| input(format!("bad model shape: {m}")))?;
        // config.toml and events.jsonl hold them as signed 64-bit integers.
        let counts = [
            ("--seed", self.seed),
            ("--steps", self.steps),
            ("--warmup-steps", self.warmup_steps),
            ("--eval-every", self.eval_every),
            ("--save-every", self.save_every),
            ("--log-every", self.log_every),
        ];
        if let Some((flag, v)) = counts.iter().find(|(_, v)| *v > i64::MAX as u64) {
            return Err(input(format!("{flag} {v} is too large (at most {})", i64::MAX)));
        }
        if self.steps == 0 {
            return Err(input("--steps must be at least 1"));
        }
        if let Some(l) = &self.model.lora {
            if !self.model.arch.takes_lora() {
                return Err(input(format!("LoRA {}", crate::model::lora::ARCHS)));
            }
            l.validate(self.model.arch.table(), &self.model).map_err(input)?;
        }
        if !self.model.freeze.is_empty() {
            // The checkpoint's names, and a projection lens (trained, folded into the table there).
            let names: Vec<String> = self
                .model
                .arch
                .table()
                .stored(&self.model)
                .into_iter()
                .flat_map(|st| match st.source {
                    crate::model::table::StoredFrom::Folded { lens, .. } => vec![st.name, lens],
                    _ => vec![st.name],
                })
                .collect();
            if let Some(p) = self.model.freeze.iter().find(|p| p.is_empty() || !names.iter().any(|n| n.contains(p.as_str()))) {
                let lens = if self.model.donor_width.is_some() { ", lens.weight" } else { "" };
                return Err(input(format!(
                    "--freeze {p:?} matches no parameter (names look like token_embd.weight, blk.0.attn_q.weight{lens})"
                )));
            }
            if names.iter().all(|n| self.model.freeze.iter().any(|p| n.contains(p.as_str()))) {
                return Err(input("--freeze leaves no parameter to train"));
            }
        }
        self.validate_batch()?;
        self.dtype.check_device(&self.device, "--dtype, toy.toml or the run's config.toml")?;
        self.validate_optim()?;
        // Weights, gradients and two AdamW moments, f32: refuse what cannot fit
        // before anything is created.
        let bytes = 16.0 * self.model.n_params() as f64;
        if let Some(total) = physical_memory() {
            if bytes > total as f64 {
                return Err(input(format!(
                    "the model needs {:.1} GiB for weights, gradients and AdamW state; this machine has {:.1} GiB",
                    bytes / (1u64 << 30) as f64,
                    total as f64 / (1u64 << 30) as f64
                )));
            }
        }
        Ok(())
    }

    /// The learning rates and AdamW's settings, each refused by its own flag's name.
    fn validate_optim(&self) -> Result<()> {
        if !(self.lr > 0.0 && self.lr.is_finite()) {
            return Err(input(format!("--lr {} must be positive and finite", self.lr)));
        }
        if !(self.min_lr >= 0.0 && self.min_lr <= self.lr) {
            return Err(input(format!("--min-lr {} must be between 0 and --lr {}", self.min_lr, self.lr)));
        }
        let finite_nonneg = |x: f32| x.is_finite() && x >= 0.0;
        if !finite_nonneg(self.weight_decay) {
            return Err(input(format!("--weight-decay {} must be finite and non-negative", self.weight_decay)));
        }
        if !finite_nonneg(self.grad_clip) {
            return Err(input(format!("--grad-clip {} must be finite and non-negative (0: no clipping)", self.grad_clip)));
        }
        let (b1, b2) = self.betas;
        if !((0.0..1.0).contains(&b1) && (0.0..1.0).contains(&b2) && self.eps > 0.0 && self.eps.is_finite()) {
            return Err(input(format!("AdamW betas {:?} must be in [0, 1) and eps {} positive", self.betas, self.eps)));
        }
        Ok(())
    }

    /// Refuse an empty batch, no micro-batch, and more tokens than a pass
    /// ([`MAX_TOKENS_PER_STEP`]) or an optimizer step
    /// ([`MAX_TOKENS_PER_OPTIMIZER_STEP`]) may hold.
    fn validate_batch(&self) -> Result<()> {
        if self.batch == 0 {
            return Err(input("--batch must be at least 1"));
        }
        if self.grad_accum == 0 {
            return Err(input("--grad-accum must be at least 1"));
        }
        // Checked: a product that wraps would pass as small.
        let per_pass = self.model.context.checked_mul(self.batch);
        if per_pass.is_none_or(|n| n > MAX_TOKENS_PER_STEP) {
            return Err(input(format!(
                "--batch {} × --context {} is too large (at most {MAX_TOKENS_PER_STEP} tokens per step)",
                self.batch, self.model.context
            )));
        }
        if per_pass.and_then(|n| n.checked_mul(self.grad_accum)).is_none_or(|n| n > MAX_TOKENS_PER_OPTIMIZER_STEP) {
            return Err(input(format!(
                "--grad-accum {} × --batch {} × --context {} is too large (at most {MAX_TOKENS_PER_OPTIMIZER_STEP} tokens per optimizer step)",
                self.grad_accum, self.batch, self.model.context
            )));
        }
        Ok(())
    }

    /// Sequences per optimizer step (`batch × grad_accum`).
    pub fn sequences_per_step(&self) -> usize {
        self.batch * self.grad_accum
    }

    /// Tokens processed per optimizer step (every micro-batch's).
    pub fn tokens_per_step(&self) -> u64 {
        (self.model.context * self.sequences_per_step()) as u64
    }
}

/// The most tokens one forward and backward pass may hold (`--batch` × `--context`).
pub const MAX_TOKENS_PER_STEP: usize = 1 << 24;

/// The most tokens one optimizer step may hold (× `--grad-accum`): their ids
/// are read onto the host at once, 8 bytes a token with the targets.
pub const MAX_TOKENS_PER_OPTIMIZER_STEP: usize = 1 << 28;

/// Total physical memory in bytes, where the system says (Linux: /proc/meminfo).
fn physical_memory() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = text.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dtype_defaults_to_bf16_only_where_every_device_is_cuda() {
        assert_eq!(Dtype::default_for("cuda"), Dtype::Bf16);
        assert_eq!(Dtype::default_for(" CUDA:0,cuda:1 "), Dtype::Bf16);
        assert_eq!(Dtype::default_for("cuda:0,cpu"), Dtype::F32);
        assert_eq!(Dtype::default_for("cpu"), Dtype::F32);
        assert_eq!(Dtype::default_for("metal"), Dtype::F32);
        assert!(Dtype::Bf16.check_device("cpu", "--dtype").is_err());
        assert!(Dtype::Bf16.check_device("cuda:0", "--dtype").is_ok());
        assert!(Dtype::F32.check_device("cpu", "--dtype").is_ok());
        assert_eq!(Dtype::Bf16.precision(MatmulPrecision::Highest), ggml_rs::MatmulPrecision::Medium);
        assert_eq!(Dtype::F32.precision(MatmulPrecision::Highest), ggml_rs::MatmulPrecision::Highest);
    }

    #[test]
    fn arch_and_dtype_resolution() {
        assert_eq!(Preset::Gpt2_124m.resolve_arch(None).unwrap(), Arch::Gpt2);
        assert_eq!(Preset::Gpt2_124m.resolve_arch(Some(Arch::Gpt2)).unwrap(), Arch::Gpt2);
        let e = Preset::Gpt2_124m.resolve_arch(Some(Arch::Llama)).unwrap_err().to_string();
        assert!(e.contains("gpt2-124m is a gpt2 model") && e.contains("toy.toml"), "{e}");
        assert_eq!(Preset::Small.resolve_arch(None).unwrap(), Arch::Llama);
        assert_eq!(Preset::Small.resolve_arch(Some(Arch::Gpt2)).unwrap(), Arch::Gpt2);
        // --dtype wins; an explicit --matmul-precision asks for f32; else the device's default.
        assert_eq!(Dtype::resolve(Some(Dtype::Bf16), true, "cpu"), Dtype::Bf16);
        assert_eq!(Dtype::resolve(None, true, "cuda"), Dtype::F32);
        assert_eq!(Dtype::resolve(None, false, "cuda"), Dtype::Bf16);
        assert_eq!(Dtype::resolve(None, false, "cpu"), Dtype::F32);
    }

    #[test]
    fn real_scale_presets_name_their_architecture_and_vocabulary() {
        let g = TrainConfig::from_preset(Preset::Gpt2_124m, Arch::Gpt2, 50257);
        assert_eq!((g.model.d_model, g.model.n_layers, g.model.n_heads, g.model.d_ff), (768, 12, 12, 3072));
        assert_eq!((g.model.context, g.batch), (1024, 16));
        // GPT-2 124M: 124,439,808 parameters with its tied head and 1024 positions.
        assert_eq!(g.model.n_params(), 124_439_808);
        assert_eq!((Preset::Gpt2_124m.arch(), Preset::Llama124m.arch(), Preset::Small.arch()), (Some(Arch::Gpt2), Some(Arch::Llama), None));
        assert_eq!((Preset::Gpt2_124m.vocab(), Preset::Tiny.vocab()), (Some(50257), None));
        let l = TrainConfig::from_preset(Preset::Llama124m, Arch::Llama, 50257);
        assert_eq!(l.model.d_ff, 2048);
        assert_eq!(l.model.n_params(), 162_148_608);
        // SmolLM2-135M's published count, 134,515,008, with its 3 kv heads and tied head.
        let m = TrainConfig::from_preset(Preset::Smollm2_135m, Arch::Llama, 49152);
        assert_eq!((m.model.n_heads, m.model.n_kv_heads, m.model.tied, m.model.rope_base), (9, 3, true, 100_000.0));
        assert_eq!(m.model.n_params(), 134_515_008);
    }
}
