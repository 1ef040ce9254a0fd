//! The parameter tensors of a model, allocated from its architecture's
//! [`Table`], and what the optimizer, initialization and checkpoints need to
//! know of each.

use super::attention::{causal_attention, Attention};
use super::lora::{self, Adapter};
pub use super::operand::{matrix, operand, weight_operand, Compact};
use super::table::{Init, Lora, Role, Spec, Table};
use super::{Batch, ModelConfig};
use ggml_rs::{Context, DType, Result, Tensor};

/// A parameter tensor with the facts the optimizer and the checkpoint need.
#[derive(Clone, Copy, Debug)]
pub struct Param<'w> {
    pub tensor: Tensor<'w>,
    /// Trained (false for a frozen donor table, a LoRA base, `--freeze`).
    pub trainable: bool,
    /// In the weight-decay group (matrices, as nanoGPT's `configure_optimizers`).
    pub decay: bool,
    /// Starting values.
    pub init: Init,
}

/// What a training graph keeps in bf16 under `--dtype bf16` (PyTorch
/// autocast's choices; toy-rs patches 0041-0045, CUDA only). All off by default.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Autocast {
    /// The head's `[V, T·B]` logits (patch 0041): the loss reads them into f32
    /// and their gradient is bf16, in their memory. Half the bytes of the
    /// largest tensor of a step at real vocabularies (3.3 GB f32 at GPT-2 124M).
    pub logits: bool,
    /// The blocks' products' inputs: norm, GELU and SwiGLU outputs
    /// ([`Block::product_input`], patch 0042).
    pub inputs: bool,
    /// The fused attention's q, k and v ([`Block::attention`], patch 0043).
    pub attention: bool,
    /// The feed-forward's activation inputs, SwiGLU's gate and up and GELU's
    /// input ([`Block::swiglu`], [`Block::gelu`], patches 0044 and 0045): the
    /// activation reads them cast to bf16, its backward reads the bf16 copies,
    /// and its bf16 output is the down projection's input.
    pub activations: bool,
    /// SwiGLU's gate and up projections write bf16 (`ggml_mul_mat_bf16`,
    /// [`Block::gated`], patch 0048) where they are plain products (no
    /// adapter, no bias), with [`activations`](Self::activations): no f32
    /// projections and no casts, and SWIGLU_BACK writes their gradients in
    /// bf16, as autocast's linears do; with [`activations`](Self::activations)
    /// GPT-2's GELU takes a bf16 gradient and gives one ([`Block::gelu`],
    /// patch 0094). CUDA only (the CPU has no bf16 result).
    pub outputs: bool,
    /// The attention's q, k and v projections write bf16 (`ggml_mul_mat_bf16`,
    /// [`Block::qkv_bf16`], patch 0076) where they have no bias, with
    /// [`attention`](Self::attention) and the fused attention: q and k's ropes
    /// read and write bf16, and the ropes' backward gives the products bf16
    /// gradients. CUDA only (the CPU has no bf16 result).
    pub qkv: bool,
    /// With [`activations`](Self::activations), GELU's bf16 output is computed
    /// again in the backward for the down projection's weight gradient instead
    /// of living from the forward to the backward ([`Block::gelu`], patch 0062):
    /// a layer keeps `[d_ff, T·B]` bf16 once (GELU's input), as PyTorch's
    /// compiled step does.
    pub recompute: bool,
    /// A LoRA-adapted product's input gradient goes through its weight with
    /// the update merged, `W + scale·B·A` ([`lora::merged_weight`], patch
    /// 0066), instead of two more narrow products and a sum per adapter; the
    /// adapter's products read a detached input and only give `A` and `B`
    /// their gradients. Not a bf16 setting: f32 graphs take it too.
    pub merged_lora: bool,
    /// The trainable f32 matrices (the blocks' and the head's) are cast to
    /// bf16 once a graph (a step's, or a micro-batch's where a step
    /// accumulates), and every product reads that copy: the forward's and
    /// the backward's that multiply by the matrix (the gradient of its input),
    /// as autocast's cache of cast weights does for a step. A training graph
    /// makes the copies first ([`ggml_rs::Graph::hoist_param_casts`]), where
    /// CUDA converts them in a few list launches (toy-rs patch 0057), and the
    /// gradients come back through the casts in f32. Without it each bf16
    /// product converts its f32 matrix itself, twice a step. Costs 2 bytes a
    /// weight from the graph's start to the backward. CUDA only.
    pub weights: bool,
}

/// One block's tensors (`blk.N.*`), in the table's block order.
pub struct Block<'w> {
    table: &'static Table,
    /// `table.blocks`' tensors; `None` where absent for the config.
    tensors: Vec<Option<Tensor<'w>>>,
    /// The low-rank adapter of each of `table.blocks`, where LoRA targets it.
    lora: Vec<Option<Adapter<'w>>>,
    /// How products read compact matrices ([`Compact`]).
    compact: Compact,
    /// What this block keeps in bf16 ([`Weights::set_autocast`]).
    autocast: Autocast,
}

fn missing(name: &str) -> ggml_rs::Error {
    ggml_rs::Error::Tensor { name: name.to_string(), msg: "not a parameter of this model".into() }
}

impl<'w> Block<'w> {
    fn index(&self, name: &str) -> Option<usize> {
        self.table.blocks.iter().position(|s| s.name == name)
    }

    /// The matrix `{stem}.weight` and its index in the table's block order
    /// (where its adapter, if any, sits in `self.lora`).
    fn matrix(&self, stem: &str) -> Result<(usize, Tensor<'w>)> {
        let name = format!("{stem}.weight");
        let k = self.index(&name).ok_or_else(|| missing(&name))?;
        Ok((k, self.tensors[k].ok_or_else(|| missing(&name))?))
    }

    /// The tensor named `name` (after `blk.N.`), if the model has it.
    pub fn get(&self, name: &str) -> Option<Tensor<'w>> {
        self.index(name).and_then(|k| self.tensors[k])
    }

    /// The tensor named `name` (after `blk.N.`).
    ///
    /// # Errors
    /// [`ggml_rs::Error::Tensor`] when the model does not have it.
    pub fn tensor(&self, name: &str) -> Result<Tensor<'w>> {
        self.get(name).ok_or_else(|| missing(name))
    }

    /// `x` `[in, T, B]` as the input of this block's products: itself, or cast
    /// to bf16 under [`Autocast::inputs`]. A product then reads the
    /// bf16 copy as it is, forward and backward, and the f32 `x` dies after the
    /// cast where nothing else reads it (a norm's or GELU's output): what
    /// autocast saves for a linear's backward, at half the bytes.
    pub fn product_input<'a>(&self, ctx: &'a Context, x: Tensor<'a>) -> Result<Tensor<'a>> {
        if self.autocast.inputs && x.dtype() != DType::BF16 {
            ctx.cast(x, DType::BF16)
        } else {
            Ok(x)
        }
    }

    /// SwiGLU `silu(gate) ⊙ up` of `[d_ff, T, B]` f32 projections, as the down
    /// projection's input: f32 (or bf16 under [`Autocast::inputs`], see
    /// [`product_input`](Self::product_input)). Under [`Autocast::activations`]
    /// it reads `gate` and `up` cast to bf16 and is bf16 itself: the f32
    /// projections die after the casts, the backward (ggml's `SWIGLU_BACK`,
    /// toy-rs patch 0044) reads the bf16 copies, and no cast follows.
    pub fn swiglu<'a>(&self, ctx: &'a Context, gate: Tensor<'a>, up: Tensor<'a>) -> Result<Tensor<'a>> {
        if self.autocast.activations {
            return ctx.swiglu_split(ctx.cast(gate, DType::BF16)?, ctx.cast(up, DType::BF16)?);
        }
        self.product_input(ctx, ctx.swiglu_split(gate, up)?)
    }

    /// `swiglu(W_gate·x, W_up·x)` for `x` `[d, T, B]`: `[d_ff, T, B]`, the down
    /// projection's input. Under [`Autocast::outputs`] and
    /// [`Autocast::activations`], with neither product biased and `x` a
    /// contiguous bf16 product input, the products write bf16 themselves
    /// (`ggml_mul_mat_bf16` of `[d, T·B]`, patch 0048), plus an adapter's bf16
    /// term where LoRA targets them ([`lora::term_bf16`], patch 0055), and the
    /// SwiGLU reads them as they are; else [`swiglu`](Self::swiglu) of two
    /// [`linear`](Self::linear)s.
    pub fn gated<'a>(&self, ctx: &'a Context, scale: f32, x: Tensor<'a>) -> Result<Tensor<'a>>
    where
        'w: 'a,
    {
        let (a, ne) = (self.autocast, x.ne());
        if a.outputs
            && a.activations
            && x.dtype() == DType::BF16
            && x.is_contiguous()
            && self.unbiased("ffn_gate")
            && self.unbiased("ffn_up")
        {
            let x2 = ctx.reshape(x, &[ne[0], ne[1] * ne[2] * ne[3]])?; // [d, T·B]
            let product = |stem: &str| -> Result<Tensor<'a>> {
                let y = self.bf16_product(ctx, stem, scale, x2)?; // bf16 [d_ff, T·B]
                ctx.reshape(y, &[y.ne()[0], ne[1], ne[2], ne[3]])
            };
            return ctx.swiglu_split(product("ffn_gate")?, product("ffn_up")?);
        }
        self.swiglu(ctx, self.linear(ctx, "ffn_gate", scale, x)?, self.linear(ctx, "ffn_up", scale, x)?)
    }

    /// The matrix `w` as a product's operand: its bf16 copy of the step under
    /// [`Autocast::weights`] where it is a trainable f32 matrix, else as
    /// [`Compact`] says ([`operand`]).
    fn operand<'a>(&self, ctx: &'a Context, w: Tensor<'a>) -> Result<Tensor<'a>> {
        weight_operand(ctx, w, self.compact, self.autocast)
    }

    /// Whether the block has the matrix `{stem}.weight` and no `{stem}.bias`.
    fn unbiased(&self, stem: &str) -> bool {
        self.index(&format!("{stem}.weight")).is_some() && self.get(&format!("{stem}.bias")).is_none()
    }

    /// `t` (q, k or v `[d_head, heads, T, B]`) as [`attention`](Self::attention)
    /// reads it: cast to bf16 where that attention reads bf16 q, k and v, else
    /// as it is. A caller that casts each right after its biased product
    /// (GPT-2) lets CUDA write the product, its bias and the cast as one bf16
    /// GEMM (toy-rs patch 0093); [`attention`](Self::attention) passes its
    /// q, k and v through this too, and so takes such a cast as it is.
    pub fn attention_operand<'a>(&self, ctx: &'a Context, t: Tensor<'a>, x: &Batch<'a>) -> Result<Tensor<'a>> {
        if self.bf16_attention(x, t.ne()[0]) && t.dtype() != DType::BF16 {
            ctx.cast(t, DType::BF16)
        } else {
            Ok(t)
        }
    }

    /// Whether the attention of `x` with heads of `dh` reads bf16 q, k and v
    /// ([`Autocast::attention`]): the fused attention without a key/value
    /// cache, at the head sizes of CUDA's flash kernels (64, 128).
    fn bf16_attention(&self, x: &Batch<'_>, dh: i64) -> bool {
        self.autocast.attention && x.attention == Attention::Fused && x.cache.is_none() && (dh == 64 || dh == 128)
    }

    /// `W·x` of the matrix `{stem}.weight` `[in, out]` and a bf16 `x` `[in, T·B]`
    /// as a bf16 product `[out, T·B]` (`mul_mat_bf16`), plus an adapter's bf16
    /// term where LoRA targets `W`, added first so that the sum is the product's
    /// epilogue (patch 0055); the product's input gradient through the merged
    /// weight under [`Autocast::merged_lora`]. CUDA only (the CPU has no bf16
    /// result).
    fn bf16_product<'a>(&self, ctx: &'a Context, stem: &str, scale: f32, x: Tensor<'a>) -> Result<Tensor<'a>>
    where
        'w: 'a,
    {
        let (k, w) = self.matrix(stem)?;
        let (merged, xa) = self.adapter_input(ctx, k, x)?;
        let term = self.lora[k].map(|l| lora::term_bf16(ctx, l, scale, xa)).transpose()?; // bf16 [out, T·B]
        let op = self.operand(ctx, w)?; // [in, out]
        let y = match merged {
            Some(l) => ctx.mul_mat_bf16_backward_weight(op, x, lora::merged_weight(ctx, w, op, self.compact, l, scale)?)?,
            None => ctx.mul_mat_bf16(op, x)?, // bf16 [out, T·B]
        };
        match term {
            Some(t) => ctx.add(t, y),
            None => Ok(y),
        }
    }

    /// The attention's q, k and v of a bf16 `a` `[d, T·B]` as bf16 products
    /// `[H·dh, T·B]`, `[Hkv·dh, T·B]`, `[Hkv·dh, T·B]` (`mul_mat_bf16`, patch
    /// 0076) under [`Autocast::qkv`] and [`Autocast::attention`] where the fused
    /// attention takes them (no key/value cache, `dh` 64 or 128), `a` is
    /// contiguous and none has a bias (an adapter's term is added in bf16,
    /// [`bf16_product`](Self::bf16_product)); else `None`, and the caller takes
    /// [`linear`](Self::linear)'s f32 products.
    ///
    /// # Errors
    /// A ggml-rs error from building the products (a matrix the table lacks).
    pub fn qkv_bf16<'a>(&self, ctx: &'a Context, a: Tensor<'a>, x: &Batch<'a>, dh: i64, scale: f32) -> Result<Option<[Tensor<'a>; 3]>>
    where
        'w: 'a,
    {
        let takes = self.autocast.qkv && self.bf16_attention(x, dh) && a.dtype() == DType::BF16 && a.is_contiguous();
        if !(takes && ["attn_q", "attn_k", "attn_v"].into_iter().all(|stem| self.unbiased(stem))) {
            return Ok(None);
        }
        let product = |stem: &str| self.bf16_product(ctx, stem, scale, a);
        Ok(Some([product("attn_q")?, product("attn_k")?, product("attn_v")?]))
    }

    /// GELU (tanh form) of an f32 `[d_ff, T, B]` projection, as the down
    /// projection's input; as [`swiglu`](Self::swiglu), under
    /// [`Autocast::activations`] it reads `x` cast to bf16 and is bf16 (its
    /// backward reads the bf16 copy, toy-rs patch 0045), and with
    /// [`Autocast::recompute`] computed again for the down projection's weight
    /// gradient (patch 0062). Under [`Autocast::outputs`] too (CUDA), its
    /// gradient is bf16, as autocast's backward keeps it (patch 0094): the
    /// down projection writes it in bf16, the GELU's backward reads it and
    /// writes the up projection's output gradient in bf16, which that
    /// projection's bias gradient and both its backward products read.
    pub fn gelu<'a>(&self, ctx: &'a Context, x: Tensor<'a>) -> Result<Tensor<'a>> {
        if self.autocast.activations {
            let y = ctx.gelu(ctx.cast(x, DType::BF16)?)?;
            let y = if self.autocast.outputs { ctx.bf16_gradient(y)? } else { y };
            return if self.autocast.recompute { ctx.recompute_in_backward(y) } else { Ok(y) };
        }
        self.product_input(ctx, ctx.gelu(x)?)
    }

    /// Causal attention ([`causal_attention`]) of `q` `[d_head, n_head, T, B]`
    /// and `k`, `v` `[d_head, n_kv, T, B]`, f32; returns `[d_head·n_head, T, B]`.
    /// Under [`Autocast::attention`], a fused attention without a
    /// cache reads them cast to bf16 where CUDA's flash kernels take them
    /// (toy-rs patch 0043: head sizes 64 and 128). Those kernels round them
    /// to bf16 anyway; the op then keeps the bf16 copies for its backward and
    /// the f32 tensors die after the casts (half the bytes, as autocast keeps
    /// a linear's bf16 output for SDPA's backward), and the kernels read the
    /// casts where they lie (patch 0046: no padded copies of their own).
    ///
    /// The result is the output projection's input, so under
    /// [`Autocast::inputs`] it is cast to bf16 as
    /// [`product_input`](Self::product_input) casts the others: the projection
    /// reads that copy forward and backward (its weight gradient), where it
    /// converted the f32 output itself each time (CUDA). The fused attention
    /// of bf16 q, k and v writes a bf16 output itself (patch 0073), which
    /// needs no cast and which its backward reads.
    pub fn attention<'a>(&self, ctx: &'a Context, [q, k, v]: [Tensor<'a>; 3], x: &Batch<'a>, layer: usize) -> Result<Tensor<'a>> {
        // (q, k and v of qkv_bf16, or cast by the caller, are bf16 already)
        let [q, k, v] = [q, k, v].map(|t| self.attention_operand(ctx, t, x));
        self.product_input(ctx, causal_attention(ctx, q?, k?, v?, x, layer)?)
    }

    /// The adapter of `self.tensors[k]` where its product's input gradient goes
    /// through the merged weight ([`Autocast::merged_lora`], patch 0066), and
    /// what the adapter's products read: `detach(x)` then, else `x`.
    fn adapter_input<'a>(&self, ctx: &'a Context, k: usize, x: Tensor<'a>) -> Result<(Option<Adapter<'a>>, Tensor<'a>)>
    where
        'w: 'a,
    {
        match self.lora[k].filter(|_| self.autocast.merged_lora) {
            Some(l) => Ok((Some(l), ctx.detach(x)?)),
            None => Ok((None, x)),
        }
    }

    /// `W·x`, plus `scale·B·(A·x)` where an adapter targets `W`, plus `b` where
    /// the table has `{stem}.bias`: `[in, ...] → [out, ...]`, with `W` the
    /// matrix `{stem}.weight` `[in, out]`.
    ///
    /// A contiguous `x` `[in, T, B]` is multiplied as `[in, T·B]`: one product
    /// instead of B (on CUDA a batched GEMM and its pointer-array kernel per
    /// product), the same dot products.
    pub fn linear<'a>(&self, ctx: &'a Context, stem: &str, scale: f32, x: Tensor<'a>) -> Result<Tensor<'a>>
    where
        'w: 'a,
    {
        self.linear_onto(ctx, stem, scale, x, None)
    }

    /// `r + linear(x)` for a residual stream `r` `[out, T, B]`: as
    /// [`Block::linear`], with `r` added to `W·x` before the adapter's term, so
    /// that on CUDA both sums run as GEMM epilogues (patch 0037), where
    /// `r + (W·x + B·A·x)` left one separate pass over `[out, T·B]`.
    pub fn linear_onto<'a>(&self, ctx: &'a Context, stem: &str, scale: f32, x: Tensor<'a>, r: Option<Tensor<'a>>) -> Result<Tensor<'a>>
    where
        'w: 'a,
    {
        let (k, w) = self.matrix(stem)?;
        let ne = x.ne();
        let fold = ne[2] * ne[3] > 1 && x.is_contiguous();
        let x2 = if fold { ctx.reshape(x, &[ne[0], ne[1] * ne[2] * ne[3]])? } else { x }; // [in, T·B]
        let r2 = match r {
            Some(r) if fold && r.is_contiguous() => Some(ctx.reshape(r, &[r.ne()[0], ne[1] * ne[2] * ne[3]])?), // [out, T·B]
            Some(r) if !fold => Some(r),
            Some(r) => return ctx.add(r, self.linear_onto(ctx, stem, scale, x, None)?),
            None => None,
        };
        let (merged, xa) = self.adapter_input(ctx, k, x2)?;
        let term = self.lora[k].map(|l| lora::term(ctx, l, scale, xa, self.autocast)).transpose()?; // built before W's product
        let y = lora::linear(ctx, (w, self.operand(ctx, w)?), term, x2, r2, self.compact, merged.map(|l| (l, scale)))?;
        let y = match self.get(&format!("{stem}.bias")) {
            Some(b) => ctx.add(y, b)?,
            None => y,
        };
        if fold {
            ctx.reshape(y, &[y.ne()[0], ne[1], ne[2], ne[3]]) // [out, T, B]
        } else {
            Ok(y)
        }
    }
}

/// The weights of a model: every tensor of its table that the config has.
pub struct Weights<'w> {
    cfg: ModelConfig,
    table: &'static Table,
    /// `table.first`'s tensors; `None` where absent for the config.
    first: Vec<Option<Tensor<'w>>>,
    blocks: Vec<Block<'w>>,
    /// `table.last`'s tensors.
    last: Vec<Option<Tensor<'w>>>,
    /// How products read compact matrices ([`Compact`]).
    compact: Compact,
    /// What a training graph keeps in bf16 ([`Weights::set_autocast`]).
    autocast: Autocast,
}

/// The type of a frozen LoRA base's matrices and tables (or, for inference,
/// [`ModelConfig::stored_types`], any model's): the base file's
/// ([`ModelConfig::base_dtype`], [`ModelConfig::base_dtype_except`]), else f32.
/// Gains, biases and a lens stay f32.
fn dtype(s: &Spec, cfg: &ModelConfig, name: &str) -> DType {
    let big = matches!(s.role, Role::Matrix | Role::Embedding) && s.folded_into.is_none();
    if !big || (cfg.lora.is_none() && !cfg.stored_types) {
        return DType::F32;
    }
    let kept = cfg.base_dtype_except.get(name).or(cfg.base_dtype.as_ref());
    kept.and_then(|t| DType::from_name(t)).unwrap_or(DType::F32)
}

fn create<'w>(ctx: &'w Context, cfg: &ModelConfig, s: &Spec, name: &str) -> Result<Option<Tensor<'w>>> {
    if !(s.present)(cfg) {
        return Ok(None);
    }
    let ne: Vec<i64> = (s.ne)(cfg).iter().map(|&n| n as i64).collect();
    Ok(Some(ctx.new_tensor(dtype(s, cfg, name), &ne)?.set_name(name)?))
}

impl<'w> Weights<'w> {
    /// Create the (unallocated) parameter tensors of `cfg` in `ctx`, named as in
    /// llama.cpp's GGUF files, from the table of `cfg.arch`.
    pub fn new(ctx: &'w Context, cfg: &ModelConfig) -> Result<Weights<'w>> {
        Weights::from_table(ctx, cfg, cfg.arch.table())
    }

    /// Create the (unallocated) parameter tensors that `table` lists for `cfg`,
    /// with the adapters `cfg.lora` asks for (`A` `[in, rank]`, `B` `[rank, out]`).
    pub fn from_table(ctx: &'w Context, cfg: &ModelConfig, table: &'static Table) -> Result<Weights<'w>> {
        let blocks = (0..cfg.n_layers)
            .map(|i| {
                let mut lora = vec![None; table.blocks.len()];
                if let Some(l) = &cfg.lora {
                    for (k, s) in table.blocks.iter().enumerate() {
                        if s.lora != Lora::No && l.targets(s.stem()) {
                            let ne = (s.ne)(cfg);
                            lora[k] = Some(lora::new_adapter(ctx, i, s.stem(), ne[0], ne[1], l.rank)?);
                        }
                    }
                }
                let tensors = table.blocks.iter().map(|s| create(ctx, cfg, s, &format!("blk.{i}.{}", s.name))).collect::<Result<_>>()?;
                Ok(Block { table, tensors, lora, compact: Compact::F32, autocast: Autocast::default() })
            })
            .collect::<Result<Vec<_>>>()?;
        let first = table.first.iter().map(|s| create(ctx, cfg, s, s.name)).collect::<Result<_>>()?;
        let last = table.last.iter().map(|s| create(ctx, cfg, s, s.name)).collect::<Result<_>>()?;
        Ok(Weights { cfg: cfg.clone(), table, first, blocks, last, compact: Compact::F32, autocast: Autocast::default() })
    }

    /// Let the products read compact matrices (quantized, f16, bf16) in their
    /// stored type: ggml's `mul_mat` of that type, as llama.cpp runs them (for
    /// q4_1 the activations are rounded to q8_1), instead of a dequantized f32
    /// copy per product. For graphs without a backward only: ggml has no
    /// gradient through such a product.
    pub fn multiply_in_stored_types(&mut self) {
        self.set_compact(Compact::Stored);
    }

    /// Keep in bf16 what `a` says (the head's logits, the blocks' product,
    /// attention and activation inputs), for bf16 products on CUDA.
    pub fn set_autocast(&mut self, a: Autocast) {
        self.autocast = a;
        for b in &mut self.blocks {
            b.autocast = a;
        }
    }

    /// What [`set_autocast`](Self::set_autocast) set.
    pub fn autocast(&self) -> Autocast {
        self.autocast
    }

    /// How the products read the matrices kept in a compact type ([`Compact`];
    /// [`Compact::F32`] unless set).
    pub fn set_compact(&mut self, how: Compact) {
        self.compact = how;
        for b in &mut self.blocks {
            b.compact = how;
        }
    }

    /// `w` (one of these weights) as a product's operand, as
    /// [`Weights::set_compact`] and [`Autocast::weights`] say.
    pub fn operand<'a>(&self, ctx: &'a Context, w: Tensor<'a>) -> Result<Tensor<'a>> {
        weight_operand(ctx, w, self.compact, self.autocast)
    }

    /// The model's configuration.
    pub fn config(&self) -> &ModelConfig {
        &self.cfg
    }

    /// The architecture's table the weights were made from.
    pub fn table(&self) -> &'static Table {
        self.table
    }

    /// The blocks, in order.
    pub fn blocks(&self) -> &[Block<'w>] {
        &self.blocks
    }

    /// The tensor named `name` outside the blocks, if the model has it.
    pub fn get(&self, name: &str) -> Option<Tensor<'w>> {
        self.globals().find(|(s, _)| s.name == name)?.1
    }

    /// The specs outside the blocks with their tensors, `first` then `last`.
    fn globals(&self) -> impl Iterator<Item = (&'static Spec, Option<Tensor<'w>>)> + '_ {
        let t = self.table;
        t.first.iter().zip(self.first.iter().copied()).chain(t.last.iter().zip(self.last.iter().copied()))
    }

    /// The tensor named `name` outside the blocks.
    ///
    /// # Errors
    /// [`ggml_rs::Error::Tensor`] when the model does not have it.
    pub fn tensor(&self, name: &str) -> Result<Tensor<'w>> {
        self.get(name).ok_or_else(|| missing(name))
    }

    /// The parameter of GGUF name `name` (`blk.N.…` in block N), if the model has it.
    pub fn param(&self, name: &str) -> Option<Tensor<'w>> {
        let in_block =
            name.strip_prefix("blk.").and_then(|r| r.split_once('.')).and_then(|(n, rest)| Some((n.parse::<usize>().ok()?, rest)));
        match in_block {
            Some((i, rest)) => self.blocks.get(i)?.get(rest),
            None => self.get(name),
        }
    }

    /// The projection lens `[donor_width, d]` and the table `[donor_width, vocab]`
    /// it projects, when the model has one.
    pub fn lens(&self) -> Option<(Tensor<'w>, Tensor<'w>)> {
        let (s, lens) = self.globals().find(|(s, t)| s.folded_into.is_some() && t.is_some())?;
        Some((lens?, self.get(s.folded_into?)?))
    }

    /// The low-rank adapters, block by block in table order (none without LoRA).
    pub fn adapters(&self) -> Vec<Adapter<'w>> {
        self.blocks.iter().flat_map(|b| b.lora.iter().flatten().copied()).collect()
    }

    fn param_of(&self, s: &Spec, t: Tensor<'w>) -> Param<'w> {
        let lensed = self.cfg.freeze_table && self.table.lens_of(s.name, &self.cfg).is_some();
        Param { tensor: t, trainable: self.cfg.lora.is_none() && !lensed, decay: s.decay, init: s.init }
    }

    /// Every parameter tensor, in a fixed order ([`Table`]'s parameter order),
    /// then the adapters. A table under a lens is frozen when
    /// `cfg.freeze_table`, with LoRA only the adapters train, and parameters
    /// whose name contains a `cfg.freeze` pattern are frozen.
    pub fn params(&self) -> Vec<Param<'w>> {
        let t = self.table;
        let of = |specs: &'static [Spec], tensors: &[Option<Tensor<'w>>]| -> Vec<Param<'w>> {
            specs.iter().zip(tensors).filter_map(|(s, g)| g.map(|g| self.param_of(s, g))).collect()
        };
        let mut v = of(t.first, &self.first);
        for b in &self.blocks {
            let (norms, rest): (Vec<_>, Vec<_>) = t.blocks.iter().zip(&b.tensors).partition(|(s, _)| s.is_norm());
            v.extend(norms.into_iter().chain(rest).filter_map(|(s, g)| g.map(|g| self.param_of(s, g))));
        }
        v.extend(of(t.last, &self.last));
        for ad in self.adapters() {
            v.extend([ad.a, ad.b].map(|t| Param { tensor: t, trainable: true, decay: true, init: Init::Normal }));
        }
        let freeze = &self.cfg.freeze;
        if !freeze.is_empty() {
            for p in &mut v {
                let name = p.tensor.name();
                if freeze.iter().any(|pat| name.contains(pat.as_str())) {
                    p.trainable = false;
                }
            }
        }
        v
    }

    /// Logits f32 `[vocab, T, B]` for `batch`, built in `ctx`.
    pub fn forward<'a>(&self, ctx: &'a Context, batch: Batch<'a>) -> Result<Tensor<'a>>
    where
        'w: 'a,
    {
        ctx.mul_mat(self.operand(ctx, self.head()?)?, self.hidden(ctx, batch)?)
        // [vocab, T, B]
    }

    /// The normalized last hidden states f32 `[d, T, B]` (what the head reads).
    pub fn hidden<'a>(&self, ctx: &'a Context, batch: Batch<'a>) -> Result<Tensor<'a>>
    where
        'w: 'a,
    {
        (self.table.hidden)(self, ctx, batch)
    }

    /// The output head `[d, vocab]` (the token table when tied): f32, or a
    /// frozen base's type (a product takes it through [`matrix`]).
    pub fn head(&self) -> Result<Tensor<'w>> {
        (self.table.head)(self)
    }
}
