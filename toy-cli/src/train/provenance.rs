//! What a run's checkpoints say of themselves: their metadata
//! ([`Provenance`]), the keys a finetuned model keeps from its base, and the
//! model's name.

use super::{Init, Plan};
use crate::config::{Recipe, TrainConfig};
use crate::error::Result;
use crate::formats::checkpoint::BASE_KEYS;
use crate::formats::Provenance;

/// The metadata of step `step`'s checkpoint of run `run_id`, named `name`
/// ([`model_name`]; its `save_id` is the sink's to choose).
pub(super) fn provenance(
    run_id: &str,
    name: &str,
    cfg: &TrainConfig,
    base_keys: &[(String, ggml_rs::gguf::Value)],
    step: u64,
) -> Provenance {
    Provenance {
        run_id: run_id.to_string(),
        step,
        name: name.to_string(),
        lora_base: cfg.from.clone().unwrap_or_default(),
        lora_base_sha256: cfg.from_sha256.clone().unwrap_or_default(),
        base_keys: base_keys.to_vec(),
        ..Provenance::default()
    }
}

/// The keys a finetuned model keeps from its base (its chat template and
/// special-token ids, see [`BASE_KEYS`], and its `{arch}.context_length`: the
/// positions the model takes, not the run's shorter training windows): from
/// the base of `plan`, or from the checkpoint it resumes (which kept them).
/// None for other runs.
pub(super) fn carried_keys(plan: &Plan<'_>) -> Result<Vec<(String, ggml_rs::gguf::Value)>> {
    let opened;
    let file = match (&plan.init, &plan.resume) {
        (Init::Model(ck), _) => &ck.file,
        (_, Some(p)) if plan.recipe == Recipe::Finetune => {
            opened = ggml_rs::gguf::GgufFile::open(p)?;
            &opened
        }
        _ => return Ok(Vec::new()),
    };
    let context = file.get_str("general.architecture").ok().map(|a| format!("{a}.context_length"));
    let keys = BASE_KEYS.iter().map(|k| k.to_string()).chain(context);
    Ok(keys.filter_map(|k| Some((k.clone(), file.get(&k)?.clone()))).collect())
}

/// The model's name in events and checkpoints (`general.name`):
/// `toy-<arch>-<preset>`, or for the finetune recipe, whose shape is its
/// base's, `<base name>-finetune` with the base's `general.name` (its file
/// stem where it has none or cannot be read): `SmolLM2 135M Instruct-finetune`.
pub fn model_name(cfg: &TrainConfig) -> String {
    match (cfg.recipe, cfg.from.as_deref()) {
        (Recipe::Finetune, Some(from)) => {
            let named = ggml_rs::gguf::GgufFile::open(from)
                .ok()
                .and_then(|f| f.get("general.name").and_then(|v| v.as_str().map(str::to_string)))
                .filter(|n| !n.trim().is_empty());
            let stem = || std::path::Path::new(from).file_stem().map_or("base".into(), |s| s.to_string_lossy().into_owned());
            format!("{}-finetune", named.unwrap_or_else(stem))
        }
        _ => format!("toy-{}-{}", cfg.model.arch.name(), cfg.preset_name()),
    }
}
