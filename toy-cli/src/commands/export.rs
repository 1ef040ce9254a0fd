//! `toy export merge [--base MODEL.gguf] --lora ADAPTER.gguf --out MERGED.gguf
//! [--type T]`: every adapted matrix becomes `W + (alpha/rank)·B·A` (f64
//! sums), written back in the base's own type (f32, f16, bf16, q8_0 or q6_k;
//! q8_0 for a 4- or 5-bit base: its own grid rounds much of an update away) or in
//! `--type`'s; every other tensor and every key of the base are copied as
//! they are, or converted to `--type`. A merged value that is not finite
//! in the base's type (an f16 overflows above 65504) is a failure: nothing is
//! written.

use crate::cli::{ExportArgs, ExportCommand, ExportType, MergeArgs};
use crate::error::{input, runtime, Result};
use crate::formats::adapter::open_adapter;
use crate::formats::checkpoint::open_checkpoint;
use ggml_rs::gguf::GgufWriter;
use ggml_rs::DType;
use std::path::PathBuf;

/// Run `toy export ...`; returns the path written.
pub fn run(a: &ExportArgs) -> Result<PathBuf> {
    match &a.command {
        ExportCommand::Merge(m) => merge(m),
    }
}

/// `W` `[n_in, n_out]` (row-major `[n_out][n_in]`) plus `scale·B·A`, with
/// `A` `[n_in, r]` and `B` `[r, n_out]` in ggml `ne` order.
pub fn merged(w: &[f32], a: &[f32], b: &[f32], n_in: usize, r: usize, scale: f32) -> Vec<f32> {
    let n_out = w.len() / n_in;
    let mut out = w.to_vec();
    for o in 0..n_out {
        for i in 0..n_in {
            let d: f64 = (0..r).map(|j| b[o * r + j] as f64 * a[j * n_in + i] as f64).sum();
            out[o * n_in + i] = (w[o * n_in + i] as f64 + scale as f64 * d) as f32;
        }
    }
    out
}

/// `values` as the bytes of `dtype` (f32, f16 or bf16). Errors: the first
/// element and its value that is not finite in `dtype` (an f16 overflows above
/// 65504), or `None` for another type.
fn in_dtype(values: &[f32], dtype: DType) -> Result<Vec<u8>, Option<(usize, f32)>> {
    let bad = |i: usize| Some((i, values[i]));
    match dtype {
        DType::F32 => match values.iter().position(|x| !x.is_finite()) {
            Some(i) => Err(bad(i)),
            None => Ok(values.iter().flat_map(|x| x.to_le_bytes()).collect()),
        },
        DType::F16 => {
            let h: Vec<half::f16> = values.iter().map(|&x| half::f16::from_f32(x)).collect();
            match h.iter().position(|x| !x.is_finite()) {
                Some(i) => Err(bad(i)),
                None => Ok(h.iter().flat_map(|x| x.to_le_bytes()).collect()),
            }
        }
        DType::BF16 => {
            let h: Vec<half::bf16> = values.iter().map(|&x| half::bf16::from_f32(x)).collect();
            match h.iter().position(|x| !x.is_finite()) {
                Some(i) => Err(bad(i)),
                None => Ok(h.iter().flat_map(|x| x.to_le_bytes()).collect()),
            }
        }
        _ => Err(None),
    }
}

/// The type a tensor `ne` of type `base` is written in under `--type`
/// `target` (None: `same`): vectors (norms and biases, `matrix` false; a
/// one-row matrix, which GGUF stores as `[n]`, is a matrix) f32, as llama.cpp's
/// quantizer keeps them; the output head (`head`: output.weight, or a tied
/// token_embd) q6_k when the target is coarser; matrices the target, or
/// where their rows do not split into its blocks of 256 what llama.cpp's
/// quantizer falls back to (q4_K to q5_0, q5_K to q5_1, q6_K to q8_0), else
/// f16.
fn out_type(target: Option<DType>, base: DType, ne: &[i64], head: bool, matrix: bool) -> DType {
    let Some(t) = target else { return base };
    if !matrix {
        return DType::F32;
    }
    // The output head (a tied token_embd too): q6_k under a coarser target, as
    // llama-quantize writes it (llama_tensor_get_type).
    let t = if head && is_coarse(t) { DType::Q6K } else { t };
    let fallback = match t {
        DType::Q4K => DType::Q5_0,
        DType::Q5K => DType::Q5_1,
        DType::Q6K => DType::Q8_0,
        _ => DType::F16,
    };
    [t, fallback, DType::F16].into_iter().find(|d| ne[0] % d.block_size() == 0).unwrap_or(DType::F32)
}

/// `values` (rows of `ne0`) as the bytes of `dtype`: [`in_dtype`] for f32,
/// f16 and bf16, ggml's quantizers otherwise. Errors as [`in_dtype`]'s.
fn encode(values: &[f32], dtype: DType, ne0: i64) -> Result<Vec<u8>, Option<(usize, f32)>> {
    if matches!(dtype, DType::F32 | DType::F16 | DType::BF16) {
        return in_dtype(values, dtype);
    }
    if let Some((i, &x)) = values.iter().enumerate().find(|(_, x)| !x.is_finite()) {
        return Err(Some((i, x)));
    }
    dtype.quantize(values, ne0 as usize).map_err(|_| None)
}

/// Refuse an input tensor (`name` of the file `what`) holding a non-finite value.
fn broken(values: &[f32], what: &str, name: &str) -> Result<()> {
    match values.iter().position(|x| !x.is_finite()) {
        Some(i) => Err(input(format!("{what}: tensor {name} holds a non-finite value at element {i}; the file is broken"))),
        None => Ok(()),
    }
}

/// Keys of a run's checkpoint that say which run and save it is: a merged
/// model is neither, so they are not copied.
const RUN_KEYS: [&str; 3] = ["toy.run_id", "toy.save_id", "toy.step"];

/// `--type`, or its default for the base `f` and adapter `ad`: `same` for an
/// f32, f16, bf16, q8_0 or q6_k base; q8_0 when an adapted matrix is of a 4-
/// or 5-bit type, with the
/// note that says so (a QLoRA-style update is small against a 4- or 5-bit
/// grid's steps: written back in the base's type, most of it rounds away).
fn merge_type(m: &MergeArgs, f: &ggml_rs::gguf::GgufFile, ad: &ggml_rs::gguf::GgufFile) -> (ExportType, Option<String>) {
    if let Some(t) = m.dtype {
        return (t, None);
    }
    // The adapted matrices' types that round an update away (q8_0 and q6_k keep it).
    let mut coarse: Vec<&str> = f
        .tensors()
        .iter()
        .filter(|t| is_coarse(t.dtype) && ad.tensor(&format!("{}.lora_a", t.name)).is_some())
        .map(|t| t.dtype.name())
        .collect();
    coarse.sort_unstable();
    coarse.dedup();
    if coarse.is_empty() {
        return (ExportType::Same, None);
    }
    let note = format!(
        "note: the adapted matrices are {}; wrote q8_0, which keeps the adapter's update (--type same keeps each matrix's type, whose rounding can lose much of it)",
        coarse.join(", ")
    );
    (ExportType::Q8_0, Some(note))
}

/// A quantized type whose steps are as large as much of a LoRA update (all
/// but q8_0 and q6_k: see [`coarse_note`]'s measurements).
fn is_coarse(dtype: DType) -> bool {
    dtype.is_quantized() && !matches!(dtype, DType::Q8_0 | DType::Q6K)
}

/// The note for a merge written in 4- or 5-bit types, where
/// requantizing each block moves its weights by steps as large as most of a
/// LoRA update's entries. Measured (SmolLM2-135M-Instruct Q4_1, an adapter of
/// rank 16 trained to a held-out chat loss of 0.033): merged in q4_1 1.54,
/// q5_1 0.30, q5_k 0.12, q4_0 0.087, q5_0 0.075, q4_k 0.041; in q8_0 0.037,
/// q6_k 0.029, f16 0.033 (the base alone: 2.62).
/// `types`: the coarse types the adapted matrices were written in, each once.
fn coarse_note(types: &[DType]) -> Option<String> {
    let names: Vec<&str> = types.iter().map(|t| t.name()).collect();
    (!names.is_empty()).then(|| {
        format!(
            "note: {} rounds the merged weights by steps as large as much of a LoRA update: compare `toy eval` of the merged model with the base and --lora; q8_0, q6_k or f16 keep the update",
            names.join(" and ")
        )
    })
}

/// ggml's `GGML_QNT_VERSION`: the version of the quantized block layouts,
/// which llama.cpp's files record as `general.quantization_version`.
const GGML_QNT_VERSION: u32 = 2;

/// The base model the adapter at `lora` (a file or a LoRA run folder) records
/// (`toy.lora.base`, relative to the adapter's folder), for a merge without `--base`.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input): not an adapter, an adapter
/// that records no base, or a base no longer where it records.
fn recorded_base(lora: &std::path::Path) -> Result<PathBuf> {
    let path = crate::files::file_or_run(lora, "--lora")?;
    let file = ggml_rs::gguf::GgufFile::open(&path).map_err(|e| input(format!("--lora {}: {e}", lora.display())))?;
    if !crate::formats::adapter::is_adapter(&file) {
        return Err(input(format!("--lora {}: not a LoRA adapter (a model is --base's)", lora.display())));
    }
    let named = crate::formats::adapter::recorded_base(&file, &path).ok_or_else(|| {
        input(format!("--lora {}: the adapter records no base model (toy.lora.base); give --base MODEL.gguf", lora.display()))
    })?;
    if !named.exists() {
        return Err(input(format!(
            "--lora {}: its base model {} is gone (moved?); give --base MODEL.gguf",
            lora.display(),
            named.display()
        )));
    }
    Ok(named)
}

fn merge(m: &MergeArgs) -> Result<PathBuf> {
    let base_path = match &m.base {
        Some(b) => crate::files::file_or_run(b, "--base")?,
        None => recorded_base(&m.lora)?,
    };
    let base_shown = base_path.display();
    crate::files::check_out_gguf(&m.out, &[&base_path, &m.lora], "the merged model")?;
    crate::signals::remove_on_interrupt("export", &m.out);
    let base = open_checkpoint(&base_path).map_err(|e| input(format!("--base {e}")))?;
    if base.adapter.is_some() {
        return Err(input(format!(
            "--base {base_shown}: a LoRA adapter, not a model (an adapter or a LoRA run is --lora's; its base is found from it)"
        )));
    }
    if !base.config.arch.takes_lora() {
        return Err(input(format!("--base {base_shown}: {}", crate::model::lora::ARCHS)));
    }
    let ad = open_adapter(&m.lora, &base.config)?;
    let scale = ad.config.scale();
    let f = &base.file;
    let (chosen, default_note) = merge_type(m, f, &ad.file);
    let target = chosen.dtype();
    let mut g = GgufWriter::new();
    for (k, v) in f.metadata() {
        let retyped = target.is_some() && k == "general.file_type";
        if k != "general.alignment" && !RUN_KEYS.contains(&k.as_str()) && !retyped {
            g.set(k, v.clone())?;
        }
    }
    if let Some((_, file_type)) = target {
        g.set("general.file_type", file_type)?;
    }
    // Which adapter this is (as a run's config.toml records its base): its
    // absolute path, and its hash for when the path moves. (A run folder's:
    // the checkpoint its weights/latest names, which open_adapter read.)
    let lora_abs = std::fs::canonicalize(ad.file.path()).unwrap_or_else(|_| ad.file.path().to_path_buf());
    g.set("toy.lora.merged", lora_abs.display().to_string())?;
    g.set("toy.lora.merged_sha256", crate::formats::adapter::file_sha256(&lora_abs)?)?;
    let (base_arg, lora_arg) = (format!("--base {base_shown}"), format!("--lora {}", m.lora.display()));
    let mut fallback = std::collections::BTreeMap::new();
    let (mut coarse, mut head_note, mut quantized) = (Vec::new(), None, false);
    // Every tensor is checked before anything is written (the file is written
    // to a temporary and renamed): a merge never leaves a model toy would refuse.
    let tied = f.tensor("output.weight").is_none();
    let matrices = crate::formats::checkpoint::matrix_names(&base.config);
    for t in f.tensors() {
        let head = t.name == "output.weight" || (tied && t.name == "token_embd.weight");
        let matrix = crate::formats::checkpoint::is_matrix(&matrices, &t.name, &t.ne);
        let dtype = out_type(target.map(|x| x.0), t.dtype, &t.ne, head, matrix);
        let head_q6k = head && target.is_some_and(|(x, _)| is_coarse(x));
        if head_q6k && dtype != DType::Q6K {
            head_note = Some(format!(
                "note: {} written as {dtype}: the output head is q6_k under {}, as llama-quantize writes it, but its rows of {} do not split into q6_k blocks of 256",
                t.name,
                target.map_or("", |(x, _)| x.name()),
                t.ne[0]
            ));
        } else if !head_q6k && target.is_some_and(|(x, _)| matrix && x != dtype) {
            *fallback.entry(dtype.name()).or_insert(0usize) += 1;
        }
        quantized |= dtype.is_quantized();
        let a_name = format!("{}.lora_a", t.name);
        let adapted = ad.file.tensor(&a_name).is_some();
        if !adapted && dtype == t.dtype {
            if matches!(t.dtype, DType::F32 | DType::F16 | DType::BF16) {
                broken(&f.tensor_f32(&t.name)?, &base_arg, &t.name)?;
            }
            g.add_tensor_bytes(&t.name, t.dtype, &t.ne, f.tensor_data(&t.name)?.to_vec())?;
            continue;
        }
        let w = f.tensor_f32(&t.name).map_err(|e| input(format!("{base_arg}: {}: {e}", t.name)))?;
        broken(&w, &base_arg, &t.name)?;
        let update = if adapted {
            let b_name = format!("{}.lora_b", t.name);
            let (av, bv) = (ad.file.tensor_f32(&a_name)?, ad.file.tensor_f32(&b_name)?);
            broken(&av, &lora_arg, &a_name)?;
            broken(&bv, &lora_arg, &b_name)?;
            Some(merged(&w, &av, &bv, t.ne[0] as usize, ad.config.rank, scale))
        } else {
            None
        };
        let out = update.as_deref().unwrap_or(&w);
        let bytes = encode(out, dtype, t.ne[0]).map_err(|e| match e {
            Some((i, x)) => runtime(format!(
                "{}: the merged value at element {i} is not finite in {dtype} ({x:e}; the adapter's scale alpha/rank is {scale:e}); not writing {}",
                t.name,
                m.out.display()
            )),
            None => input(format!("{base_arg}: {} is {}, which toy cannot write", t.name, t.dtype)),
        })?;
        if update.is_some() && is_coarse(dtype) && !coarse.contains(&dtype) {
            coarse.push(dtype);
        }
        g.add_tensor_bytes(&t.name, dtype, &t.ne, bytes)?;
    }
    // A file with quantized tensors says which block layout they follow, as
    // llama-quantize writes it (a toy-trained base has no such key to copy).
    if quantized && f.get_u64("general.quantization_version").is_err() {
        g.set("general.quantization_version", GGML_QNT_VERSION)?;
    }
    // Once every tensor is known good: a note on another base file, never before an error.
    crate::formats::adapter::check_base(&ad, &m.lora, &base_path, false)?;
    let fallback_note = target.filter(|_| !fallback.is_empty()).map(|(d, _)| {
        let list: Vec<String> = fallback.iter().map(|(t, n)| format!("{n} in {t}")).collect();
        format!("note: matrices whose rows do not split into {d} blocks of {}: {}", d.block_size(), list.join(", "))
    });
    crate::files::make_parent(&m.out)?;
    // (The writer's error names the file.)
    g.write(&m.out).map_err(|e| crate::error::runtime(format!("cannot write {e}")))?;
    // Said once the file is written: notes on what it holds, none before an error.
    for note in [fallback_note, default_note, head_note, coarse_note(&coarse)].into_iter().flatten() {
        crate::note!("{note}");
    }
    Ok(m.out.clone())
}
