//! The recipe of a run and the windows it trains on, with their forms in
//! config.toml (`recipe = "warm-start"`, `stream = "shuffled"`).

use serde::{Deserialize, Serialize};

/// How a model is trained.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Recipe {
    /// Random initialisation, random windows of the corpus.
    #[default]
    FromScratch,
    /// A donor model's token embeddings through a trainable projection lens;
    /// the corpus is streamed in order, epoch after epoch.
    WarmStart,
    /// An existing llama or qwen2 GGUF (`--from`; f16, bf16 or quantized too)
    /// trained further on text or chat data tokenized with its own tokenizer:
    /// every weight, or LoRA adapters over the frozen base (`--lora-rank`).
    Finetune,
}

impl Recipe {
    /// The name on the command line, in config.toml and in events (`from-scratch`, `warm-start`, `finetune`).
    pub fn name(self) -> &'static str {
        match self {
            Recipe::FromScratch => "from-scratch",
            Recipe::WarmStart => "warm-start",
            Recipe::Finetune => "finetune",
        }
    }
}

/// The recipe recorded in a config.toml (absent, in runs from before it was
/// recorded: `from-scratch`); a name toy does not know is refused, where it
/// once read as `from-scratch` and a hand-edited finetune run went on under
/// that name.
pub(super) fn recorded_recipe<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Recipe, D::Error> {
    let name = String::deserialize(d)?;
    <Recipe as clap::ValueEnum>::from_str(&name, false)
        .map_err(|_| serde::de::Error::custom(format!("unknown recipe {name:?}: from-scratch, warm-start or finetune")))
}

/// Which windows of the corpus a run trains on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Sampling {
    /// Random windows (from-scratch, finetune); a chat corpus's conversation
    /// windows in a fresh random order every epoch instead.
    #[default]
    Random,
    /// The corpus in order, epoch after epoch, its windows shuffled per epoch
    /// or not (warm-start).
    Stream { shuffle: bool },
}

/// config.toml's `stream`, the order a streamed corpus is read in: `"in-order"`
/// or `"shuffled"` (per epoch). Runs from before it was named so wrote `false`
/// and `true`, which still read as these.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
enum Order {
    InOrder,
    Shuffled,
}

/// The `stream` value as written now, or as older runs wrote it.
#[derive(Deserialize)]
#[serde(untagged)]
enum Recorded {
    Order(Order),
    Shuffled(bool),
}

impl Sampling {
    /// config.toml's `stream`: absent for random windows, else whether shuffled.
    pub fn recorded(self) -> Option<bool> {
        match self {
            Sampling::Random => None,
            Sampling::Stream { shuffle } => Some(shuffle),
        }
    }

    /// The sampling that config.toml's `stream` records.
    pub fn from_recorded(stream: Option<bool>) -> Sampling {
        stream.map_or(Sampling::Random, |shuffle| Sampling::Stream { shuffle })
    }
}

pub(super) fn stream_serialize<S: serde::Serializer>(x: &Sampling, s: S) -> std::result::Result<S::Ok, S::Error> {
    x.recorded().map(|shuffle| if shuffle { Order::Shuffled } else { Order::InOrder }).serialize(s)
}

pub(super) fn stream_deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Sampling, D::Error> {
    let shuffled = Option::<Recorded>::deserialize(d)?.map(|r| match r {
        Recorded::Order(o) => o == Order::Shuffled,
        Recorded::Shuffled(b) => b,
    });
    Ok(Sampling::from_recorded(shuffled))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Preset, TrainConfig};
    use crate::model::Arch;

    /// config.toml keeps `recipe = "…"` and `stream = "…"` (absent for random
    /// windows); an older run's `stream = true` / `false` reads as before.
    #[test]
    fn recipe_and_sampling_keep_their_config_toml_forms() {
        let mut c = TrainConfig::from_preset(Preset::Smoke, Arch::Llama, 300);
        let text = toml::to_string(&c).unwrap();
        assert!(text.contains("recipe = \"from-scratch\"\n") && !text.contains("stream"), "{text}");
        (c.recipe, c.sampling) = (Recipe::WarmStart, Sampling::Stream { shuffle: true });
        let text = toml::to_string(&c).unwrap();
        assert!(text.contains("recipe = \"warm-start\"\n") && text.contains("stream = \"shuffled\"\n"), "{text}");
        assert_eq!(toml::from_str::<TrainConfig>(&text).unwrap(), c);
        for (old, shuffle) in [("true", true), ("false", false)] {
            let read: TrainConfig = toml::from_str(&text.replace("\"shuffled\"", old)).unwrap();
            assert_eq!(read.sampling, Sampling::Stream { shuffle });
        }
        c.sampling = Sampling::Stream { shuffle: false };
        assert!(toml::to_string(&c).unwrap().contains("stream = \"in-order\"\n"));
        c.sampling = Sampling::Stream { shuffle: true };
        let e = toml::from_str::<TrainConfig>(&text.replace("\"warm-start\"", "\"nonsense\"")).unwrap_err().to_string();
        assert!(e.contains("unknown recipe \"nonsense\": from-scratch, warm-start or finetune"), "{e}");
        // runs from before the recipe was recorded
        let old: TrainConfig = toml::from_str(&text.replace("recipe = \"warm-start\"\n", "")).unwrap();
        assert_eq!((old.recipe, old.sampling), (Recipe::FromScratch, Sampling::Stream { shuffle: true }));
    }
}
