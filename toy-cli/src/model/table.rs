//! One table per architecture lists its parameter tensors once: llama.cpp's
//! GGUF name, the shape in ggml `ne` order as a function of the
//! [`ModelConfig`], the role, weight decay, LoRA and how the checkpoint stores
//! it. Everything else is derived from it: the parameter count, allocation
//! ([`super::Weights::from_table`]), initialization, the optimizer's groups,
//! the LoRA targets, and the checkpoint layout ([`Table::stored`]) that writing,
//! reading and the shape checks follow (as llm.c's `fill_in_parameter_sizes`).

use super::{Batch, ModelConfig, Weights};
use ggml_rs::{Context, Result, Tensor};

/// What a parameter is to the model; it decides the default initialization,
/// weight decay and, for a LoRA base, the type in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// A table whose rows are looked up by id: `[d, rows]`.
    Embedding,
    /// The weight of a product `W·x`: `[in, out]`.
    Matrix,
    /// A normalization's gain `[n]`.
    Gain,
    /// An additive bias `[n]`, of a product or of a normalization.
    Bias,
}

/// Starting values (GPT-2's scheme as nanoGPT applies it, see [`super::init`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Init {
    /// N(0, 0.02).
    Normal,
    /// N(0, 0.02/√(2·n_layers)): projections into the residual stream
    /// (Radford et al. 2019, §2.3).
    Residual,
    /// N(0, 1/√ne0): a projection lens, which keeps the projected table's scale.
    Lens,
    /// 1 (gains).
    Ones,
    /// 0 (biases).
    Zeros,
}

/// Whether a LoRA adapter may target a matrix (`--lora-targets`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lora {
    /// Never.
    No,
    /// When named.
    Yes,
    /// When named, and when `--lora-targets` is not given.
    ByDefault,
}

/// One parameter tensor of an architecture.
#[derive(Clone, Copy, Debug)]
pub struct Spec {
    /// llama.cpp's GGUF name; in a block, after `blk.N.` (`attn_q.weight`).
    pub name: &'static str,
    /// The shape in ggml `ne` order (`[in, out]` for a matrix).
    pub ne: fn(&ModelConfig) -> Vec<usize>,
    /// Whether a model of this configuration has it (an untied head, a lens).
    pub present: fn(&ModelConfig) -> bool,
    pub role: Role,
    /// In AdamW's weight-decay group (matrices and tables, as nanoGPT's
    /// `configure_optimizers` decides by dimension).
    pub decay: bool,
    pub init: Init,
    pub lora: Lora,
    /// Not written itself but multiplied into this table: `table·lensᵀ`
    /// ([`crate::formats::checkpoint::fold_lens`]), which is what the checkpoint holds.
    pub folded_into: Option<&'static str>,
}

fn always(_: &ModelConfig) -> bool {
    true
}

impl Spec {
    const fn new(name: &'static str, role: Role, ne: fn(&ModelConfig) -> Vec<usize>) -> Spec {
        let (decay, init) = match role {
            Role::Embedding | Role::Matrix => (true, Init::Normal),
            Role::Gain => (false, Init::Ones),
            Role::Bias => (false, Init::Zeros),
        };
        Spec { name, ne, present: always, role, decay, init, lora: Lora::No, folded_into: None }
    }

    /// A table `[d, rows]`.
    pub const fn embedding(name: &'static str, ne: fn(&ModelConfig) -> Vec<usize>) -> Spec {
        Spec::new(name, Role::Embedding, ne)
    }

    /// A matrix `[in, out]`.
    pub const fn matrix(name: &'static str, ne: fn(&ModelConfig) -> Vec<usize>) -> Spec {
        Spec::new(name, Role::Matrix, ne)
    }

    /// A normalization gain `[n]`.
    pub const fn gain(name: &'static str, ne: fn(&ModelConfig) -> Vec<usize>) -> Spec {
        Spec::new(name, Role::Gain, ne)
    }

    /// A bias `[n]`.
    pub const fn bias(name: &'static str, ne: fn(&ModelConfig) -> Vec<usize>) -> Spec {
        Spec::new(name, Role::Bias, ne)
    }

    /// With LoRA targeting `lora`.
    pub const fn lora(self, lora: Lora) -> Spec {
        Spec { lora, ..self }
    }

    /// Initialized as a residual projection ([`Init::Residual`]).
    pub const fn residual(self) -> Spec {
        Spec { init: Init::Residual, ..self }
    }

    /// Present only where `present` holds.
    pub const fn when(self, present: fn(&ModelConfig) -> bool) -> Spec {
        Spec { present, ..self }
    }

    /// A projection lens folded into `table` in checkpoints ([`Init::Lens`]).
    pub const fn lens_of(self, table: &'static str) -> Spec {
        Spec { folded_into: Some(table), init: Init::Lens, ..self }
    }

    /// The name without its `.weight`/`.bias` suffix (`attn_q`), as LoRA targets name it.
    pub fn stem(&self) -> &'static str {
        self.name.rsplit_once('.').map_or(self.name, |(s, _)| s)
    }

    /// A normalization's tensor: llama.cpp names every normalization `…_norm`.
    pub fn is_norm(&self) -> bool {
        self.stem().ends_with("_norm")
    }
}

/// A checkpoint tensor that holds several parameters of a block stacked along
/// their last dimension (gpt2's `attn_qkv` = q|k|v, as llama.cpp expects).
#[derive(Clone, Copy, Debug)]
pub struct Fused {
    /// The checkpoint's name, after `blk.N.`.
    pub name: &'static str,
    /// The parameters, after `blk.N.`, in the order they are stacked.
    pub parts: &'static [&'static str],
}

/// The hidden states `[d, T, B]` of a model, normalized, before the head.
pub type Hidden = for<'a> fn(&Weights<'a>, &'a Context, Batch<'a>) -> Result<Tensor<'a>>;

/// The output head `[d, vocab]` of a model.
pub type Head = for<'a> fn(&Weights<'a>) -> Result<Tensor<'a>>;

/// An architecture: its parameters and its forward pass.
///
/// The parameter order (initialization, optimizer state, resume files) is
/// `first`, then each block (its normalizations first, then the rest in table
/// order), then `last`. The checkpoint order is `first` and `last`, then each
/// block in table order (llama.cpp's).
#[derive(Debug)]
pub struct Table {
    /// Tensors outside the blocks, before the blocks in the parameter order.
    pub first: &'static [Spec],
    /// The tensors of every block, named `blk.N.{name}`.
    pub blocks: &'static [Spec],
    /// Tensors outside the blocks, after the blocks in the parameter order.
    pub last: &'static [Spec],
    /// Block tensors stored fused in checkpoints.
    pub fused: &'static [Fused],
    /// The forward pass up to the head; it finds its tensors by name.
    pub hidden: Hidden,
    /// The head `[d, vocab]` the logits are computed with.
    pub head: Head,
}

/// Where a checkpoint tensor's values come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StoredFrom {
    /// The parameter of this (full) name.
    Param(String),
    /// These parameters stacked along their last dimension ([`Fused`]).
    Stacked(Vec<String>),
    /// `table·lensᵀ` ([`crate::formats::checkpoint::fold_lens`]).
    Folded { table: String, lens: String },
}

/// One tensor of a checkpoint: full name, shape in ggml `ne` order, source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stored {
    pub name: String,
    pub ne: Vec<usize>,
    pub source: StoredFrom,
}

impl Table {
    /// The specs outside the blocks, in checkpoint order.
    fn globals(&self) -> impl Iterator<Item = &'static Spec> {
        self.first.iter().chain(self.last)
    }

    /// The names LoRA may target (`attn_q`...), in block order.
    pub fn lora_targets(&self) -> Vec<&'static str> {
        self.blocks.iter().filter(|s| s.lora != Lora::No).map(Spec::stem).collect()
    }

    /// The targets when `--lora-targets` is not given.
    pub fn default_lora_targets(&self) -> Vec<&'static str> {
        self.blocks.iter().filter(|s| s.lora == Lora::ByDefault).map(Spec::stem).collect()
    }

    /// The block spec LoRA targets as `target`, if any.
    pub fn lora_spec(&self, target: &str) -> Option<&'static Spec> {
        self.blocks.iter().find(|s| s.lora != Lora::No && s.stem() == target)
    }

    /// Number of parameters of a `c`-shaped model; a table under a lens is
    /// not counted (it comes from the donor), the lens is.
    pub fn n_params(&self, c: &ModelConfig) -> usize {
        let size = |s: &Spec| -> usize {
            if (s.present)(c) && self.lens_of(s.name, c).is_none() {
                (s.ne)(c).iter().product()
            } else {
                0
            }
        };
        self.globals().map(size).sum::<usize>() + c.n_layers * self.blocks.iter().map(size).sum::<usize>()
    }

    /// The present lens folded into `table`, if any.
    pub fn lens_of(&self, table: &str, c: &ModelConfig) -> Option<&'static Spec> {
        self.globals().find(|s| s.folded_into == Some(table) && (s.present)(c))
    }

    /// The checkpoint's tensors for a `c`-shaped model, in file order: every
    /// present spec but a lens, a table under a lens as its fold `[d, vocab]`,
    /// and [`Fused`] parts as one tensor at the place of their first part.
    pub fn stored(&self, c: &ModelConfig) -> Vec<Stored> {
        let mut out = Vec::new();
        for s in self.globals().filter(|s| (s.present)(c) && s.folded_into.is_none()) {
            let name = s.name.to_string();
            out.push(match self.lens_of(s.name, c) {
                Some(lens) => Stored {
                    ne: vec![(lens.ne)(c)[1], (s.ne)(c)[1]],
                    source: StoredFrom::Folded { table: name.clone(), lens: lens.name.to_string() },
                    name,
                },
                None => Stored { ne: (s.ne)(c), source: StoredFrom::Param(name.clone()), name },
            });
        }
        for i in 0..c.n_layers {
            let n = |s: &str| format!("blk.{i}.{s}");
            for s in self.blocks.iter().filter(|s| (s.present)(c)) {
                match self.fused.iter().find(|f| f.parts.contains(&s.name)) {
                    None => out.push(Stored { name: n(s.name), ne: (s.ne)(c), source: StoredFrom::Param(n(s.name)) }),
                    Some(f) if f.parts[0] == s.name => {
                        let nes: Vec<Vec<usize>> = f.parts.iter().map(|p| (self.block_spec(p).ne)(c)).collect();
                        let mut ne = nes[0].clone();
                        *ne.last_mut().expect("a shape") = nes.iter().map(|ne| ne[ne.len() - 1]).sum();
                        out.push(Stored { name: n(f.name), ne, source: StoredFrom::Stacked(f.parts.iter().map(|p| n(p)).collect()) });
                    }
                    Some(_) => {}
                }
            }
        }
        out
    }

    fn block_spec(&self, name: &str) -> &'static Spec {
        self.blocks.iter().find(|s| s.name == name).unwrap_or_else(|| panic!("fused part {name} is not in the table"))
    }
}
