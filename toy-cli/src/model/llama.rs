//! The llama architecture (SmolLM2 family): pre-norm blocks with RMSNorm,
//! RoPE (ggml mode 0, as llama.cpp's `llama` expects), multi-head or
//! grouped-query causal attention, SwiGLU feed-forward, no biases.

use super::attention::rope;
use super::table::{Lora, Spec, Table};
use super::{Batch, ModelConfig, Weights};
use ggml_rs::{Context, Result, RopeMode, Tensor};

/// Width of the query heads, `n_heads·d_head`.
pub fn q_width(c: &ModelConfig) -> usize {
    c.n_heads * c.d_head()
}

/// Width of the key/value heads, `n_kv_heads·d_head`.
pub fn kv_width(c: &ModelConfig) -> usize {
    c.n_kv_heads * c.d_head()
}

/// The token table's width: `d_model`, or the donor's under a projection lens.
fn table_width(c: &ModelConfig) -> usize {
    c.donor_width.unwrap_or(c.d_model)
}

/// llama's parameters (shapes in ggml `ne` order, `[in, out]` for matrices;
/// d = d_model, V = vocab, F = d_ff, Q = [`q_width`], KV = [`kv_width`]).
pub static TABLE: Table = Table {
    first: &[
        // [d, V], or [donor_width, V] under a lens (frozen unless --train-table).
        Spec::embedding("token_embd.weight", |c| vec![table_width(c), c.vocab]),
        // toy's projection lens [donor_width, d]; checkpoints hold token_embd·lensᵀ.
        Spec::matrix("lens.weight", |c| vec![table_width(c), c.d_model]).when(|c| c.donor_width.is_some()).lens_of("token_embd.weight"),
        Spec::gain("output_norm.weight", |c| vec![c.d_model]),
        // [d, V]; absent when the head is tied to token_embd.
        Spec::matrix("output.weight", |c| vec![c.d_model, c.vocab]).when(|c| !c.tied),
    ],
    blocks: &[
        Spec::gain("attn_norm.weight", |c| vec![c.d_model]),
        Spec::matrix("attn_q.weight", |c| vec![c.d_model, q_width(c)]).lora(Lora::ByDefault),
        Spec::matrix("attn_k.weight", |c| vec![c.d_model, kv_width(c)]).lora(Lora::ByDefault),
        Spec::matrix("attn_v.weight", |c| vec![c.d_model, kv_width(c)]).lora(Lora::ByDefault),
        Spec::matrix("attn_output.weight", |c| vec![q_width(c), c.d_model]).lora(Lora::ByDefault).residual(),
        Spec::gain("ffn_norm.weight", |c| vec![c.d_model]),
        Spec::matrix("ffn_gate.weight", |c| vec![c.d_model, c.d_ff]).lora(Lora::Yes),
        Spec::matrix("ffn_up.weight", |c| vec![c.d_model, c.d_ff]).lora(Lora::Yes),
        Spec::matrix("ffn_down.weight", |c| vec![c.d_ff, c.d_model]).lora(Lora::Yes).residual(),
    ],
    last: &[],
    fused: &[],
    hidden,
    head,
};

/// The output head `[d, vocab]`: `output.weight`, or the token table when tied.
pub fn head<'w>(w: &Weights<'w>) -> Result<Tensor<'w>> {
    w.get("output.weight").map_or_else(|| w.tensor("token_embd.weight"), Ok)
}

/// The last hidden states `[d, T, B]`, normalized, before the head, with
/// RoPE in mode 0 (llama.cpp's for `llama`); see [`pass`].
pub fn hidden<'a>(w: &Weights<'a>, ctx: &'a Context, x: Batch<'a>) -> Result<Tensor<'a>> {
    pass(w, ctx, x, RopeMode::Normal)
}

/// The llama family's pass up to the head: the last hidden states `[d, T, B]`,
/// normalized (shapes annotated for d = d_model, H = heads), with RoPE in
/// `mode`. Products go through [`super::Block::linear`], so a table with
/// biases on them (qwen2's q/k/v) or LoRA adapters runs with this same pass.
pub fn pass<'a>(w: &Weights<'a>, ctx: &'a Context, x: Batch<'a>, mode: RopeMode) -> Result<Tensor<'a>> {
    let c = w.config();
    let (d, t, b) = (c.d_model as i64, x.t as i64, x.b as i64);
    let (dh, eps) = (c.d_head() as i64, c.norm_eps);
    let s = c.lora.as_ref().map_or(1.0, |l| l.scale());
    let mut h = ctx.get_rows(w.tensor("token_embd.weight")?, x.tokens)?; // [d or donor, T·B]
    if let Some((lens, _)) = w.lens() {
        h = ctx.mul_mat(lens, h)?; // [d, T·B]
    }
    // The residual stream stays [d, T·B]: each residual sum then adds h itself
    // (no reshape of it), so that the backward reaches that sum before h's norm
    // and the norm's backward adds h's gradient in its own pass (patch 0047)
    // instead of an ADD after it.
    let (hq, hkv) = (c.n_heads as i64, c.n_kv_heads as i64);
    for (layer, blk) in w.blocks().iter().enumerate() {
        let a = blk.product_input(ctx, ctx.rms_norm_gain(h, blk.tensor("attn_norm.weight")?, eps)?)?; // [d, T·B]
        let lin = |stem: &str, x| blk.linear(ctx, stem, s, x);
        // q [H·dh, T·B], k and v [Hkv·dh, T·B]
        let [q, k, v] = match blk.qkv_bf16(ctx, a, &x, dh, s)? {
            Some(qkv) => qkv, // bf16 (patch 0076)
            None => [lin("attn_q", a)?, lin("attn_k", a)?, lin("attn_v", a)?],
        };
        // RoPE over [dh, heads, T·B] with per-token positions: its backward then
        // receives a contiguous gradient (through the reshape), which CUDA needs.
        let q = rope(ctx, ctx.reshape(q, &[dh, hq, t * b])?, x.pos, mode, c.rope_base)?;
        let k = rope(ctx, ctx.reshape(k, &[dh, hkv, t * b])?, x.pos, mode, c.rope_base)?;
        let q = ctx.reshape(q, &[dh, hq, t, b])?; // [dh, H, T, B]
        let k = ctx.reshape(k, &[dh, hkv, t, b])?;
        let v = ctx.reshape(v, &[dh, hkv, t, b])?;
        let att = blk.attention(ctx, [q, k, v], &x, layer)?; // [H·dh, T, B]
        let att = ctx.reshape(att, &[dh * hq, t * b])?; // [H·dh, T·B]
        h = blk.linear_onto(ctx, "attn_output", s, att, Some(h))?; // h + W_o·att (+ LoRA), [d, T·B]

        let m = blk.product_input(ctx, ctx.rms_norm_gain(h, blk.tensor("ffn_norm.weight")?, eps)?)?;
        let g = blk.gated(ctx, s, m)?; // [d_ff, T·B]
        h = blk.linear_onto(ctx, "ffn_down", s, g, Some(h))?;
    }
    let out = ctx.rms_norm_gain(h, w.tensor("output_norm.weight")?, eps)?; // [d, T·B]
    ctx.reshape(out, &[d, t, b]) // [d, T, B]
}

#[cfg(test)]
mod tests {
    use crate::model::{lora::LoraConfig, Arch, ModelConfig, Weights};
    use crate::train::step::{capacity, Consts, Forward, GradStep};
    use ggml_rs::{sys, Backend, Context};

    /// Every sum of a product (the residual stream's, a LoRA adapter's) comes
    /// right after the product in the graph, maybe through a reshape of it:
    /// what CUDA needs to run the sum as the product's GEMM epilogue (patch
    /// 0037). A node in between (a reshape of the other addend) made each a
    /// pass of its own over `[d, T·B]`.
    #[test]
    fn sums_of_products_follow_their_products() {
        for lora in [false, true] {
            let mut c = ModelConfig::new(Arch::Llama, 61, 32, 2, 4, 48, 8);
            c.n_kv_heads = 2;
            if lora {
                let targets = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"];
                c.lora = Some(LoraConfig { rank: 4, alpha: 8.0, targets: targets.iter().map(|s| s.to_string()).collect() });
            }
            let backend = Backend::cpu().unwrap();
            let wctx = Context::new(capacity(c.n_layers)).unwrap();
            let w = Weights::new(&wctx, &c).unwrap();
            let consts = Consts::new(&wctx, c.context, 1).unwrap();
            wctx.allocate(&backend).unwrap();
            let fctx = Context::new(capacity(c.n_layers)).unwrap();
            let fwd = Forward::new(&fctx, &w, &consts, c.context, &[backend]).unwrap();
            let nodes = fwd.graph().nodes();
            let product = |t: &ggml_rs::Tensor<'_>| {
                let s = if t.op() == sys::GGML_OP_RESHAPE { t.srcs()[0] } else { *t };
                s.op() == sys::GGML_OP_MUL_MAT
            };
            let mut sums = 0;
            for (i, n) in nodes.iter().enumerate().filter(|(_, n)| n.op() == sys::GGML_OP_ADD) {
                let srcs = n.srcs();
                if !srcs.iter().any(product) {
                    continue;
                }
                sums += 1;
                // (W·x + r) + B·(s·A·x): the adapter's product is the one right before
                let follows = srcs.iter().any(|s| product(s) && nodes[i - 1] == *s);
                assert!(follows, "lora {lora}: {} follows none of its products", n.name());
            }
            // Two residual sums per layer, and with LoRA one adapter sum per adapted matrix.
            assert_eq!(sums, 2 * c.n_layers + if lora { 7 * c.n_layers } else { 0 }, "lora {lora}");
        }
    }

    /// Each block norm's backward (NORM_GAIN_BACK, patch 0047) adds the residual
    /// stream's gradient in its own pass: the residual sums read h itself, so the
    /// backward reaches them first. Through a reshape of h it came after the
    /// norm, and an ADD of [d, T·B] followed each of the 2·layers norms.
    #[test]
    fn block_norms_add_the_residual_gradient_themselves() {
        let mut c = ModelConfig::new(Arch::Llama, 61, 32, 3, 4, 48, 8);
        c.n_kv_heads = 2;
        let backend = Backend::cpu().unwrap();
        let wctx = Context::new(capacity(c.n_layers)).unwrap();
        let w = Weights::new(&wctx, &c).unwrap();
        for p in w.params() {
            wctx.set_param(p.tensor).unwrap();
        }
        let consts = Consts::new(&wctx, c.context, 2).unwrap();
        wctx.allocate(&backend).unwrap();
        let cctx = Context::new(capacity(c.n_layers)).unwrap();
        let gs = GradStep::new(&cctx, &w, &consts, c.context, 2, &[backend]).unwrap();
        let nodes = gs.graph().nodes();
        let backs: Vec<_> = nodes.iter().filter(|n| n.op() == sys::GGML_OP_NORM_GAIN_BACK).collect();
        // the block norms, and the output norm (h's one reader there: nothing to add)
        assert_eq!(backs.len(), 2 * c.n_layers + 1);
        assert_eq!(backs.iter().filter(|n| n.srcs().len() == 4).count(), 2 * c.n_layers);
        let d = c.d_model as i64;
        let adds = nodes.iter().filter(|n| {
            n.op() == sys::GGML_OP_ADD
                && ggml_rs::Tensor::ne(n)[0] == d
                && n.srcs().iter().any(|s| s.op() == sys::GGML_OP_VIEW && s.srcs()[0].op() == sys::GGML_OP_NORM_GAIN_BACK)
        });
        assert_eq!(adds.count(), 0, "an ADD of a norm's gradient");
    }
}
