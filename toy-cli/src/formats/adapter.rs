//! LoRA adapter files in llama.cpp's own layout (`llama-adapter.cpp`):
//! `general.type = "adapter"`, `general.architecture` the base's (`llama`,
//! `qwen2`: llama.cpp refuses an adapter of another architecture),
//! `adapter.type = "lora"`, `adapter.lora.alpha` (f32), and for every adapted
//! matrix `blk.N.T.weight` the pair `blk.N.T.weight.lora_a` `[in, rank]` and
//! `….lora_b` `[rank, out]` (ggml `ne` order), so `llama-cli -m BASE --lora
//! ADAPTER` runs it. toy adds `toy.lora.base` (the base model's path) and its
//! run keys, which llama.cpp ignores.

use super::Provenance;
use crate::error::{input, Result};
use crate::model::lora::LoraConfig;
use crate::model::{ModelConfig, Weights};
use ggml_rs::gguf::{GgufFile, GgufWriter};
use ggml_rs::DType;
use std::path::{Path, PathBuf};

/// An open adapter, checked against the base it is for.
pub struct AdapterFile {
    pub file: GgufFile,
    pub config: LoraConfig,
}

/// Write the adapters of `w` (a LoRA model) to `path`, atomically.
pub fn write_adapter(path: &Path, w: &Weights<'_>, prov: &Provenance, base: &str) -> Result<()> {
    let lora = w.config().lora.as_ref().ok_or_else(|| input("the model has no LoRA adapters"))?;
    let mut g = GgufWriter::new();
    g.set("general.type", "adapter")?;
    g.set("general.architecture", w.config().arch.name())?;
    g.set("general.name", if prov.name.is_empty() { "toy-lora" } else { prov.name.as_str() })?;
    g.set("adapter.type", "lora")?;
    g.set("adapter.lora.alpha", lora.alpha)?;
    g.set("toy.checkpoint_format", super::FORMAT)?;
    g.set("toy.lora.base", base)?;
    if !prov.lora_base_sha256.is_empty() {
        g.set("toy.lora.base_sha256", prov.lora_base_sha256.as_str())?;
    }
    g.set("toy.run_id", prov.run_id.as_str())?;
    g.set("toy.step", prov.step)?;
    if !prov.save_id.is_empty() {
        g.set("toy.save_id", prov.save_id.as_str())?;
    }
    for ad in w.adapters() {
        for t in [ad.a, ad.b] {
            let v = t.read::<f32>()?;
            if v.iter().any(|x| !x.is_finite()) {
                return Err(crate::error::runtime(format!("{} is not finite; not writing {}", t.name(), path.display())));
            }
            g.add_tensor(&t.name(), t)?;
        }
    }
    Ok(g.write(path)?)
}

/// Hex SHA-256 of the file at `path` (the identity of a LoRA run's base).
pub fn file_sha256(path: &Path) -> Result<String> {
    use sha2::{Digest, Sha256};
    let mut f = std::fs::File::open(path).map_err(|e| input(format!("cannot read {}: {e}", path.display())))?;
    let mut h = Sha256::new();
    std::io::copy(&mut f, &mut h).map_err(|e| input(format!("cannot read {}: {e}", path.display())))?;
    Ok(h.finalize().iter().map(|b| format!("{b:02x}")).collect())
}

/// Check the base file `base` against the one the adapter `a` (at `adapter`)
/// records (`toy.lora.base_sha256`). Another file is refused when `strict`
/// (the base a run or an adapter names itself: it changed since) and noted
/// otherwise: a base the user names may be another quantization of the same
/// model, which is how adapters trained over a quantized base are used
/// (llama.cpp applies an adapter to any base of the right shapes).
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input): `strict` and another file, or
/// `base` unreadable.
pub fn check_base(a: &AdapterFile, adapter: &Path, base: &Path, strict: bool) -> Result<()> {
    let Ok(want) = a.file.get_str("toy.lora.base_sha256") else { return Ok(()) };
    let have = file_sha256(base)?;
    if have == want {
        return Ok(());
    }
    let (want, have) = (&want[..want.len().min(12)], &have[..12]);
    if strict {
        return Err(input(format!(
            "{}: its base {} is not the file it was trained on (sha256 {have}…, not {want}…): another model of the same shape?",
            adapter.display(),
            base.display(),
        )));
    }
    crate::note!(
        "note: --lora {} was trained on a base with sha256 {want}…; {} is {have}…: fine for another quantization of the same model, meaningless for another model of the same shape",
        adapter.display(),
        base.display()
    );
    Ok(())
}

/// Whether the GGUF at `f` is an adapter (`general.type = "adapter"`).
pub fn is_adapter(f: &GgufFile) -> bool {
    f.get_str("general.type").ok() == Some("adapter")
}

/// The base model the adapter `f` at `path` records (`toy.lora.base`, relative
/// to the adapter's folder), as it names it; `None` when it records none.
pub fn recorded_base(f: &GgufFile, path: &Path) -> Option<PathBuf> {
    let recorded = f.get_str("toy.lora.base").ok()?;
    Some(path.parent().unwrap_or(Path::new(".")).join(recorded))
}

/// Open the adapter at `path` for a base of shape `base`.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming the file: not an adapter
/// or not LoRA, another architecture, a tensor that is not `blk.N.T.weight.lora_a/b`
/// of a matrix the base has, shapes that do not fit the base (an adapter for
/// another base), unequal ranks, targets that differ between blocks, or values
/// that are not f32 and finite.
pub fn open_adapter(path: &Path, base: &ModelConfig) -> Result<AdapterFile> {
    let resolved = crate::files::file_or_run(path, "--lora")?; // a LoRA run's folder: its weights/latest
    let path = resolved.as_path();
    let p = path.display();
    if !path.exists() {
        return Err(input(format!("--lora {p}: no such file")));
    }
    if !path.is_file() {
        return Err(input(format!("--lora {p}: not a regular file")));
    }
    let file = GgufFile::open(path).map_err(|e| input(format!("--lora {e}")))?;
    if file.get("toy.state.format").is_some() {
        let adapter = super::state::checkpoint_of(path);
        return Err(input(format!(
            "--lora {p}: a resume state (optimizer moments, for toy train --resume), not an adapter; its adapter is {}",
            adapter.display()
        )));
    }
    if !is_adapter(&file) || file.get_str("adapter.type").ok() != Some("lora") {
        return Err(input(format!("--lora {p}: not a LoRA adapter (one has general.type \"adapter\" and adapter.type \"lora\")")));
    }
    let arch = base.arch.name();
    match file.get_str("general.architecture") {
        Ok(a) if a == arch => {}
        Ok(a) => return Err(input(format!("--lora {p}: an adapter for {a} models, not for this {arch} model"))),
        Err(_) => return Err(input(format!("--lora {p}: no general.architecture"))),
    }
    let alpha = file.get_f64("adapter.lora.alpha").map_err(|_| input(format!("--lora {p}: no adapter.lora.alpha")))? as f32;
    if !(alpha.is_finite() && alpha > 0.0) {
        return Err(input(format!("--lora {p}: adapter.lora.alpha {alpha} must be positive and finite")));
    }
    let table = base.arch.table();
    let targets = table.lora_targets();
    let other = |why: String| input(format!("--lora {p}: {why} (an adapter for another base?)"));
    let mut per_block: Vec<Vec<String>> = vec![Vec::new(); base.n_layers];
    let mut rank = None;
    for t in file.tensors() {
        let Some(stem) = t.name.strip_suffix(".lora_a") else {
            if !t.name.ends_with(".lora_b") {
                return Err(other(format!("tensor {} is not a .lora_a / .lora_b pair", t.name)));
            }
            continue;
        };
        let parsed = stem.strip_prefix("blk.").and_then(|r| r.split_once('.')).and_then(|(n, rest)| {
            let target = rest.strip_suffix(".weight")?;
            Some((n.parse::<usize>().ok()?, targets.iter().position(|x| *x == target)?))
        });
        let (blk, k) = parsed.ok_or_else(|| other(format!("toy adapts blk.N.{{{}}}.weight, not {stem}", targets.join(","))))?;
        if blk >= base.n_layers {
            return Err(other(format!("{stem}: the base has {} blocks", base.n_layers)));
        }
        let b = file.tensor(&format!("{stem}.lora_b")).ok_or_else(|| other(format!("{stem}.lora_b is missing")))?;
        let ne = table.lora_spec(targets[k]).map(|s| (s.ne)(base)).unwrap_or_default(); // [in, out]
        let (n_in, n_out) = (ne[0], ne[1]);
        let r = t.ne[1] as usize;
        // all four ne: GGUF drops trailing 1s (rank 1's A [in, 1] is stored as [in])
        if t.ne != [n_in as i64, r as i64, 1, 1] || b.ne != [r as i64, n_out as i64, 1, 1] {
            return Err(other(format!("{stem} is [{n_in}, {n_out}] in the base, its adapters are {:?} and {:?}", t.shape(), b.shape())));
        }
        if t.dtype != DType::F32 || b.dtype != DType::F32 {
            return Err(input(format!("--lora {p}: {stem}'s adapters are {}/{}; toy reads f32 adapters", t.dtype, b.dtype)));
        }
        if *rank.get_or_insert(r) != r || r == 0 {
            return Err(input(format!("--lora {p}: adapters of ranks {} and {r}; toy needs one rank", rank.unwrap_or(0))));
        }
        per_block[blk].push(targets[k].to_string());
    }
    for t in file.tensors().iter().filter(|t| t.name.ends_with(".lora_b")) {
        if file.tensor(&t.name.replace(".lora_b", ".lora_a")).is_none() {
            return Err(other(format!("{} has no .lora_a", t.name)));
        }
    }
    let rank = rank.ok_or_else(|| input(format!("--lora {p}: no adapter tensors")))?;
    let order = |t: &String| targets.iter().position(|x| x == t);
    let mut first = per_block[0].clone();
    first.sort_by_key(order);
    for (i, b) in per_block.iter().enumerate() {
        let mut b = b.clone();
        b.sort_by_key(order);
        if b != first {
            return Err(input(format!("--lora {p}: block {i} adapts {b:?}, block 0 {first:?}; toy needs the same targets in every block")));
        }
    }
    let config = LoraConfig { rank, alpha, targets: first };
    config.validate(table, base).map_err(|m| input(format!("--lora {p}: {m}")))?;
    Ok(AdapterFile { file, config })
}

impl AdapterFile {
    /// Copy the adapters into `w` (built with [`AdapterFile::config`]).
    pub fn load(&self, w: &Weights<'_>) -> Result<()> {
        for ad in w.adapters() {
            for t in [ad.a, ad.b] {
                let values = self.file.tensor_f32(&t.name())?;
                if let Some(i) = values.iter().position(|x| !x.is_finite()) {
                    return Err(input(format!(
                        "--lora {}: {} holds a non-finite value at element {i}",
                        self.file.path().display(),
                        t.name()
                    )));
                }
                t.write(&values)?;
            }
        }
        Ok(())
    }
}
