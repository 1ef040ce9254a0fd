//! Checkpoints: standard GGUF files in llama.cpp's layout (`llama`, `qwen2` or `gpt2`)
//! with the tokenizer embedded, and reading them back into a model.

use super::{Provenance, FORMAT};
use crate::data::Tokenizer;
use crate::error::{input, Result};
use crate::model::table::{Stored, StoredFrom, Table};
use crate::model::{Arch, ModelConfig, Weights};
use ggml_rs::gguf::{GgufFile, GgufWriter};
use ggml_rs::DType;
use ggml_rs::Tensor;
use std::path::Path;

/// Where the values written for a parameter come from: the parameter itself
/// (a checkpoint) or something of the same shape (its gradient, for `toy debug`).
pub type Source<'s> = &'s dyn Fn(Tensor<'_>) -> Result<Vec<f32>>;

/// The parameter's own values.
pub fn own_values(t: Tensor<'_>) -> Result<Vec<f32>> {
    Ok(t.read::<f32>()?)
}

/// `token_embd = E·Pᵀ`: fold a lens `P` `[w, d]` into a donor table `E` `[w, V]`,
/// giving `[d, V]` (f64 accumulation).
pub fn fold_lens(table: &[f32], lens: &[f32], w: usize, d: usize) -> Vec<f32> {
    let v = table.len() / w;
    let mut out = vec![0f32; v * d];
    for (row, o) in table.chunks_exact(w).zip(out.chunks_exact_mut(d)) {
        for (r, out_r) in o.iter_mut().enumerate() {
            let p = &lens[r * w..(r + 1) * w];
            *out_r = row.iter().zip(p).map(|(&a, &b)| a as f64 * b as f64).sum::<f64>() as f32;
        }
    }
    debug_assert_eq!(out.len(), v * d);
    out
}

/// Write the checkpoint tensor `st` of `w`, its values from `src`.
fn add(g: &mut GgufWriter, w: &Weights<'_>, st: &Stored, src: Source<'_>) -> Result<()> {
    let param = |name: &str| param_of(w, name);
    match &st.source {
        StoredFrom::Param(name) => {
            let t = param(name)?;
            let v = src(t)?;
            finite(&st.name, &v)?;
            Ok(g.add_tensor_data(&st.name, &t.shape(), &v)?)
        }
        StoredFrom::Stacked(parts) => {
            let mut v = Vec::new();
            for p in parts {
                v.extend(src(param(p)?)?);
            }
            finite(stem(&st.name), &v)?;
            Ok(g.add_tensor_data(&st.name, &ne_i64(&st.ne), &v)?)
        }
        StoredFrom::Folded { table, lens } => {
            let (table, lens) = (param(table)?, param(lens)?);
            let folded = fold_lens(&src(table)?, &src(lens)?, lens.ne()[0] as usize, lens.ne()[1] as usize);
            finite(&st.name, &folded)?;
            Ok(g.add_tensor_data(&st.name, &ne_i64(&st.ne), &folded)?)
        }
    }
}

fn ne_i64(ne: &[usize]) -> Vec<i64> {
    ne.iter().map(|&n| n as i64).collect()
}

/// `blk.0.attn_qkv` of `blk.0.attn_qkv.weight`: how messages name a fused tensor.
fn stem(name: &str) -> &str {
    name.rsplit_once('.').map_or(name, |(s, _)| s)
}

/// Refuse to write non-finite values: a checkpoint of diverged weights would
/// replace a good one.
fn finite(name: &str, v: &[f32]) -> Result<()> {
    if let Some(i) = v.iter().position(|x| !x.is_finite()) {
        return Err(crate::error::runtime(format!("{name}[{i}] is {}: refusing to write a non-finite checkpoint", v[i])));
    }
    Ok(())
}

fn hparams(g: &mut GgufWriter, c: &ModelConfig) -> Result<()> {
    let a = c.arch.name();
    let u = |n: usize| n as u32;
    g.set("general.architecture", a)?;
    g.set(&format!("{a}.vocab_size"), u(c.vocab))?;
    g.set(&format!("{a}.context_length"), u(c.context))?;
    g.set(&format!("{a}.embedding_length"), u(c.d_model))?;
    g.set(&format!("{a}.feed_forward_length"), u(c.d_ff))?;
    g.set(&format!("{a}.block_count"), u(c.n_layers))?;
    g.set(&format!("{a}.attention.head_count"), u(c.n_heads))?;
    match c.arch {
        Arch::Llama | Arch::Qwen2 => {
            g.set(&format!("{a}.attention.head_count_kv"), u(c.n_kv_heads))?;
            g.set(&format!("{a}.attention.layer_norm_rms_epsilon"), c.norm_eps)?;
            g.set(&format!("{a}.rope.freq_base"), c.rope_base)?;
            // llama.cpp's converter writes it for llama, not for qwen2 (whose
            // loader takes the head width when it is absent).
            if c.arch == Arch::Llama {
                g.set("llama.rope.dimension_count", u(c.d_head()))?;
            }
        }
        Arch::Gpt2 => g.set("gpt2.attention.layer_norm_epsilon", c.norm_eps)?,
    }
    Ok(())
}

/// `ModelConfig::validate`'s message `m` with its fields named by the GGUF
/// keys of architecture `a` that gave them (`context` is
/// `llama.context_length`), as the file's reader knows them.
fn gguf_names(m: &str, a: &str) -> String {
    let keys = [
        ("n_kv_heads", "attention.head_count_kv"),
        ("n_heads", "attention.head_count"),
        ("n_layers", "block_count"),
        ("d_model", "embedding_length"),
        ("d_ff", "feed_forward_length"),
        ("context", "context_length"),
    ];
    let words: Vec<String> =
        m.split(' ').map(|w| keys.iter().find(|(k, _)| *k == w).map_or_else(|| w.to_string(), |(_, g)| format!("{a}.{g}"))).collect();
    words.join(" ")
}

/// Keys of a base model that a finetuned checkpoint keeps (see
/// [`Provenance::base_keys`](super::Provenance::base_keys)): the chat template `toy generate --chat` and
/// chat data render with, the special-token ids (an instruct model's EOS
/// is its end of turn, e.g. SmolLM2's `<|im_end|>`, not the end of text),
/// whether a prompt gets a BOS or EOS, and the licence and maker.
pub const BASE_KEYS: [&str; 11] = [
    "tokenizer.chat_template",
    "tokenizer.ggml.bos_token_id",
    "tokenizer.ggml.eos_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.eom_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.unknown_token_id",
    // Whether llama.cpp adds a BOS (true in Llama 3's files) or an EOS to a prompt.
    "tokenizer.ggml.add_bos_token",
    "tokenizer.ggml.add_eos_token",
    // A fine-tune is the base's derivative: its licence and maker stay said.
    "general.license",
    "general.organization",
];

/// Write `w` (allocated) with `tok` and `prov` to `path`, a new file (a
/// temporary the caller renames into place: `GgufWriter::write_new`).
pub fn write_checkpoint(path: &Path, w: &Weights<'_>, tok: Option<&Tokenizer>, prov: &Provenance) -> Result<()> {
    if w.config().lora.is_some() {
        // A LoRA run's checkpoints are its adapters; the base stays where it is.
        return super::adapter::write_adapter(path, w, prov, &prov.lora_base);
    }
    write_model(path, w, tok, prov, &own_values)
}

/// Write a model-shaped GGUF whose tensor values come from `src` (llama.cpp names
/// and layout, as [`write_checkpoint`]).
pub fn write_model(path: &Path, w: &Weights<'_>, tok: Option<&Tokenizer>, prov: &Provenance, src: Source<'_>) -> Result<()> {
    let c = w.config();
    let mut g = GgufWriter::new();
    hparams(&mut g, c)?;
    g.set("general.name", if prov.name.is_empty() { "toy" } else { prov.name.as_str() })?;
    g.set("general.file_type", 0u32)?; // all f32
    g.set("toy.checkpoint_format", FORMAT)?;
    g.set("toy.run_id", prov.run_id.as_str())?;
    g.set("toy.step", prov.step)?;
    if !prov.save_id.is_empty() {
        g.set("toy.save_id", prov.save_id.as_str())?;
    }
    g.set("toy.tied", c.tied)?;
    if let Some(t) = tok {
        t.write_gguf(&mut g)?;
    }
    for (k, v) in &prov.base_keys {
        g.set(k, v.clone())?;
    }
    for st in w.table().stored(c) {
        add(&mut g, w, &st, src)?;
    }
    g.write_new(path).map_err(|e| crate::error::runtime(format!("cannot write checkpoint: {e}")))
}

/// A checkpoint opened for reading.
pub struct Checkpoint {
    pub file: GgufFile,
    pub config: ModelConfig,
    pub tokenizer: Option<Tokenizer>,
    pub step: u64,
    /// LoRA adapters applied on top (`config.lora` says their shape).
    pub adapter: Option<super::adapter::AdapterFile>,
}

fn need_u(f: &GgufFile, key: &str) -> Result<usize> {
    Ok(f.get_u64(key)? as usize)
}

/// The model shape a llama, qwen2 or gpt2 GGUF's keys describe, checked
/// against its tensors ([`check_shapes`]); `what` names the file in messages.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming `what`: an architecture
/// other than llama/qwen2/gpt2, a missing key or `token_embd.weight`, an
/// impossible shape, or a tensor whose shape contradicts the keys.
pub fn model_config(file: &GgufFile, what: &str) -> Result<ModelConfig> {
    let name = file.get_str("general.architecture")?;
    let arch =
        Arch::from_name(name).ok_or_else(|| input(format!("{what}: architecture {name:?} is not supported (llama, qwen2 or gpt2)")))?;
    let a = arch.name();
    let embd = file.tensor("token_embd.weight").ok_or_else(|| input(format!("{what}: no token_embd.weight tensor")))?;
    let d_model = need_u(file, &format!("{a}.embedding_length"))?;
    let n_heads = need_u(file, &format!("{a}.attention.head_count"))?;
    let n_layers = need_u(file, &format!("{a}.block_count"))?;
    let n_kv_heads = super::checks::optional_count(file, &format!("{a}.attention.head_count_kv"), n_heads, what)?;
    let d_ff = need_u(file, &format!("{a}.feed_forward_length"))?;
    let context = need_u(file, &format!("{a}.context_length"))?;
    let config = ModelConfig {
        n_kv_heads,
        rope_base: super::checks::optional(file, &format!("{a}.rope.freq_base"), 10_000.0, what)? as f32,
        norm_eps: match arch {
            Arch::Llama | Arch::Qwen2 => {
                super::checks::optional(file, &format!("{a}.attention.layer_norm_rms_epsilon"), 1e-5, what)? as f32
            }
            Arch::Gpt2 => super::checks::optional(file, "gpt2.attention.layer_norm_epsilon", 1e-5, what)? as f32,
        },
        tied: file.tensor("output.weight").is_none(),
        ..ModelConfig::new(arch, embd.ne[1] as usize, d_model, n_layers, n_heads, d_ff, context)
    };
    config.validate().map_err(|m| input(format!("{what}: {}", gguf_names(&m, a))))?;
    super::checks::check_attention_keys(file, &config, what)?;
    check_shapes(file, &config, what)?;
    super::checks::check_vocab_key(file, &config, what)?;
    Ok(config)
}

/// Every tensor of a `c`-shaped model as checkpoints lay them out (llama.cpp's
/// names and order, from the architecture's table), with its shape in ggml
/// `ne` order; `output.weight` is listed for untied models only.
pub fn expected_shapes(c: &ModelConfig) -> Vec<(String, Vec<i64>)> {
    expected_shapes_of(c.arch.table(), c)
}

/// [`expected_shapes`] of the architecture `table` lists.
pub fn expected_shapes_of(table: &Table, c: &ModelConfig) -> Vec<(String, Vec<i64>)> {
    table.stored(c).into_iter().map(|st| (st.name, ne_i64(&st.ne))).collect()
}

/// Refuse a file whose tensors contradict the shape `c` read from its keys: a
/// missing or differently shaped tensor (a transposed matrix included), or a
/// block past `block_count`.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming `what` and the tensor.
pub fn check_shapes(file: &GgufFile, c: &ModelConfig, what: &str) -> Result<()> {
    check_shapes_of(c.arch.table(), file, c, what)
}

/// [`check_shapes`] against the tensors `table` lists.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming `what` and the tensor.
pub fn check_shapes_of(table: &Table, file: &GgufFile, c: &ModelConfig, what: &str) -> Result<()> {
    for (name, shape) in expected_shapes_of(table, c) {
        let info = file.tensor(&name).ok_or_else(|| input(format!("{what}: missing tensor {name}")))?;
        // GGUF stores ggml_n_dims dimensions: trailing 1s are not written ([64, 1] is [64])
        if info.shape() != without_trailing_ones(&shape) {
            return Err(input(format!(
                "{what}: tensor {name} is {:?}, but the file's keys (width {}, {} heads, {} kv heads, feed-forward {}, vocabulary {}) make it {shape:?}",
                info.shape(),
                c.d_model,
                c.n_heads,
                c.n_kv_heads,
                c.d_ff,
                c.vocab
            )));
        }
    }
    for t in file.tensors() {
        let block = t.name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|n| n.parse::<usize>().ok());
        if let Some(b) = block.filter(|&b| b >= c.n_layers) {
            return Err(input(format!("{what}: tensor {} belongs to block {b}, but block_count is {}", t.name, c.n_layers)));
        }
    }
    Ok(())
}

/// `ne` without its trailing 1s, keeping at least one dimension (ggml's `ggml_n_dims`).
fn without_trailing_ones(ne: &[i64]) -> &[i64] {
    let n = ne.iter().rposition(|&d| d != 1).map_or(1, |i| i + 1).min(ne.len());
    &ne[..n]
}

/// Open `path` and read the model shape from its keys, checking every tensor against it.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming the file when it is not
/// a GGUF file or not a llama/qwen2/gpt2 model this program can run.
pub fn open_checkpoint(path: &Path) -> Result<Checkpoint> {
    open_checkpoint_on(path, None)
}

/// [`open_checkpoint`], with a LoRA adapter applied to `base` instead of the
/// base it names (a LoRA run resumed with its base at a new path, which
/// `--resume` has checked by its SHA-256). A model file ignores `base`.
pub fn open_checkpoint_on(path: &Path, base: Option<&Path>) -> Result<Checkpoint> {
    if !path.exists() {
        return Err(input(format!("{}: no such checkpoint file", path.display())));
    }
    if !path.is_file() {
        return Err(input(format!("{}: not a regular file, not a checkpoint", path.display())));
    }
    let file = GgufFile::open(path)?;
    refuse_state(&file, path)?;
    if super::adapter::is_adapter(&file) {
        // A LoRA run's checkpoint: the adapter, on the base it names (relative to
        // the adapter's folder), which must be a model, not another adapter.
        let named = super::adapter::recorded_base(&file, path).ok_or_else(|| {
            input(format!("{}: a LoRA adapter without toy.lora.base; give the base model and --lora {}", path.display(), path.display()))
        })?;
        let step = file.get_u64("toy.step").unwrap_or(0);
        let moved = if named.exists() {
            String::new()
        } else {
            " (moved? give it with --from to toy train --resume, or give the base model and --lora)".into()
        };
        let base = open_model(base.unwrap_or(&named)).map_err(|e| input(format!("{}: its base model: {e}{moved}", path.display())))?;
        let mut ck = base.with_adapter(path, true)?;
        ck.step = step;
        return Ok(ck);
    }
    model_from(file, path)
}

/// The names of `c`'s matrices: the tensors with two dimensions in the
/// architecture's table, one of them maybe 1 (GGUF stores `[64, 1]` as
/// `[64]`, so a stored shape cannot tell a one-row matrix from a norm).
pub fn matrix_names(c: &ModelConfig) -> std::collections::HashSet<String> {
    expected_shapes(c).into_iter().filter(|(_, ne)| ne.len() >= 2).map(|(name, _)| name).collect()
}

/// Whether the tensor `name` stored as `ne` is a matrix: one of `matrices`
/// ([`matrix_names`]; a one-row matrix is stored as a vector) or stored with
/// more than one row.
pub fn is_matrix(matrices: &std::collections::HashSet<String>, name: &str, ne: &[i64]) -> bool {
    matrices.contains(name) || ne.iter().skip(1).any(|&n| n != 1)
}

/// The types a frozen LoRA base keeps from the model `c` in `f` (its matrices
/// and token table, [`is_matrix`]):
/// the most common one, and the tensors of another type by name
/// ([`ModelConfig::base_dtype`], [`ModelConfig::base_dtype_except`]);
/// `(None, {})` when they are all f32.
pub fn matrix_dtype(f: &GgufFile, c: &ModelConfig) -> (Option<String>, std::collections::BTreeMap<String, String>) {
    let matrices = matrix_names(c);
    let big: Vec<_> = f.tensors().iter().filter(|t| is_matrix(&matrices, &t.name, &t.ne)).collect();
    if big.iter().all(|t| t.dtype == DType::F32) {
        return (None, Default::default());
    }
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for t in &big {
        *counts.entry(t.dtype.name()).or_default() += 1;
    }
    let most = counts.iter().max_by_key(|(_, &n)| n).map_or("f32", |(&name, _)| name);
    let except = big.iter().filter(|t| t.dtype.name() != most).map(|t| (t.name.clone(), t.dtype.name().to_string())).collect();
    (Some(most.to_string()), except)
}

/// The types a frozen base may keep in memory and ggml dequantizes on every
/// backend toy trains on: f32, f16, bf16, the legacy quants and the k-quants.
pub const BASE_TYPES: [DType; 13] = [
    DType::F32,
    DType::F16,
    DType::BF16,
    DType::Q8_0,
    DType::Q4_0,
    DType::Q4_1,
    DType::Q5_0,
    DType::Q5_1,
    DType::Q2K,
    DType::Q3K,
    DType::Q4K,
    DType::Q5K,
    DType::Q6K,
];

/// Refuse the file `f` (at `path`) when it is a resume state (`toy.state.*`),
/// which a command took for a model, naming its checkpoint.
pub fn refuse_state(f: &GgufFile, path: &Path) -> Result<()> {
    if f.get("toy.state.format").is_none() {
        return Ok(());
    }
    Err(input(format!(
        "{}: a resume state (optimizer moments, for toy train --resume), not a model; its checkpoint is {}",
        path.display(),
        super::state::checkpoint_of(path).display()
    )))
}

/// Open the model at `path`, refusing an adapter or a resume state.
pub fn open_model(path: &Path) -> Result<Checkpoint> {
    if !path.exists() {
        return Err(input(format!("{}: no such checkpoint file", path.display())));
    }
    let file = GgufFile::open(path)?;
    refuse_state(&file, path)?;
    if super::adapter::is_adapter(&file) {
        return Err(input(format!("{}: a LoRA adapter, not a model", path.display())));
    }
    model_from(file, path)
}

/// The model shape and tokenizer of the model file `file` (at `path`), with
/// everything checked that every command loading a model relies on: the keys
/// against the tensors ([`model_config`]), no tensor the model does not have,
/// and the tokenizer against the token table ([`super::checks::check_tokenizer`]).
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming the file.
pub fn check_model(file: &GgufFile, path: &Path) -> Result<(ModelConfig, Option<Tokenizer>)> {
    let what = path.display().to_string();
    let config = model_config(file, &what)?;
    super::checks::check_no_stray_tensors(file, &config, &what)?;
    let tokenizer = Tokenizer::read_gguf(file)?;
    super::checks::check_tokenizer(file, tokenizer.as_ref(), config.vocab, &what)?;
    Ok((config, tokenizer))
}

fn model_from(file: GgufFile, path: &Path) -> Result<Checkpoint> {
    let (config, tokenizer) = check_model(&file, path)?;
    let step = file.get_u64("toy.step").unwrap_or(0);
    Ok(Checkpoint { file, config, tokenizer, step, adapter: None })
}

impl std::fmt::Debug for Checkpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Checkpoint").field("path", &self.file.path()).field("config", &self.config).field("step", &self.step).finish()
    }
}

impl Checkpoint {
    /// Apply the LoRA adapter at `path` (checked against this model) on top: a
    /// base the user names, so a base other than the adapter's own is noted,
    /// not refused ([`super::adapter::check_base`]).
    ///
    /// # Errors
    /// [`Error::Input`](crate::error::Error::Input): a second adapter, a base
    /// whose architecture takes no adapters (gpt2), or what
    /// [`super::adapter::open_adapter`] refuses.
    pub fn with_lora(self, path: &Path) -> Result<Checkpoint> {
        self.with_adapter(path, false)
    }

    /// [`with_lora`](Self::with_lora), refusing a base file other than the one
    /// the adapter records when `strict` (the base an adapter names itself).
    fn with_adapter(mut self, path: &Path, strict: bool) -> Result<Checkpoint> {
        if self.adapter.is_some() {
            return Err(input(format!("--lora {}: the model already carries an adapter", path.display())));
        }
        if !self.config.arch.takes_lora() {
            return Err(input(format!("--lora {}: {}", path.display(), crate::model::lora::ARCHS)));
        }
        let a = super::adapter::open_adapter(path, &self.config)?;
        super::adapter::check_base(&a, path, self.file.path(), strict)?;
        self.config.lora = Some(a.config.clone());
        (self.config.base_dtype, self.config.base_dtype_except) = matrix_dtype(&self.file, &self.config);
        self.adapter = Some(a);
        Ok(self)
    }

    fn load(&self, name: &str, t: Tensor<'_>) -> Result<()> {
        let info = self.file.tensor(name).ok_or_else(|| input(format!("{}: missing tensor {name}", self.file.path().display())))?;
        if info.shape() != t.shape() {
            return Err(input(format!(
                "{}: tensor {name} has shape {:?}, expected {:?}",
                self.file.path().display(),
                info.shape(),
                t.shape()
            )));
        }
        // Values read once, checked, then uploaded (a kept f16 matrix as its bytes).
        // A broken model is the file's fault, not the corpus's or the prompt's.
        let values = self.file.tensor_f32(name)?;
        if let Some(i) = values.iter().position(|x| !x.is_finite()) {
            return Err(input(format!(
                "{}: tensor {name} holds a non-finite value at element {i}; the model is broken",
                self.file.path().display()
            )));
        }
        match t.dtype() {
            DType::F32 => Ok(t.write(&values)?),
            // a compact base loaded in bf16 for a bf16 step (train/dequant.rs): rounded to nearest
            DType::BF16 if info.dtype != DType::BF16 => Ok(t.write(&values.into_iter().map(half::bf16::from_f32).collect::<Vec<_>>())?),
            _ => Ok(self.file.load_into(name, t)?),
        }
    }

    /// Copy the weights into `w` (allocated, built from [`Checkpoint::config`]
    /// with any table), tensor by tensor as its table lays out the checkpoint.
    pub fn load_weights(&self, w: &Weights<'_>) -> Result<()> {
        if w.lens().is_some() {
            return Err(input("a checkpoint holds a folded table; load it into a model without a lens"));
        }
        for st in w.table().stored(w.config()) {
            match &st.source {
                StoredFrom::Param(name) => self.load(&st.name, param_of(w, name)?)?,
                StoredFrom::Stacked(parts) => self.load_stacked(&st.name, parts, w)?,
                StoredFrom::Folded { .. } => unreachable!("a model without a lens folds nothing"),
            }
        }
        match &self.adapter {
            Some(a) => a.load(w),
            None => Ok(()),
        }
    }

    /// Split the fused tensor `name` into the parameters `parts` of `w`.
    fn load_stacked(&self, name: &str, parts: &[String], w: &Weights<'_>) -> Result<()> {
        let path = self.file.path().display();
        let tensors = parts.iter().map(|p| param_of(w, p)).collect::<Result<Vec<_>>>()?;
        let values = self.file.tensor_f32(name)?;
        if values.len() != tensors.iter().map(|t| t.nelements() as usize).sum::<usize>() {
            return Err(input(format!("{path}: {} has the wrong size", stem(name))));
        }
        if values.iter().any(|x| !x.is_finite()) {
            return Err(input(format!("{path}: tensor {} holds a non-finite value; the model is broken", stem(name))));
        }
        let mut at = 0;
        for t in tensors {
            let n = t.nelements() as usize;
            t.write(&values[at..at + n])?;
            at += n;
        }
        Ok(())
    }
}

fn param_of<'w>(w: &Weights<'w>, name: &str) -> Result<Tensor<'w>> {
    w.param(name).ok_or_else(|| crate::error::runtime(format!("{name} is not a parameter of the model")))
}

#[cfg(test)]
mod tests {
    /// A file's shape error names the GGUF key, not toy's field.
    #[test]
    fn shape_errors_name_the_gguf_keys() {
        assert_eq!(super::gguf_names("context must be at least 1", "llama"), "llama.context_length must be at least 1");
        assert_eq!(
            super::gguf_names("n_heads 6 is not a multiple of n_kv_heads 4", "qwen2"),
            "qwen2.attention.head_count 6 is not a multiple of qwen2.attention.head_count_kv 4"
        );
    }
}
