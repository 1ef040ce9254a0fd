//! The GPT-2 architecture (Radford et al. 2019): token and learned position
//! embeddings, pre-LayerNorm blocks with gain and bias, attention and MLP with
//! biases, GELU (tanh form), final LayerNorm, output tied to the token table.
//!
//! q, k and v are separate parameters here (their gradients stay plain
//! `mul_mat` gradients); checkpoints store them fused as `attn_qkv`, as llama.cpp
//! expects.

use super::table::{Fused, Spec, Table};
use super::{Batch, Weights};
use ggml_rs::{Context, Result, Tensor};

/// GPT-2's parameters (shapes in ggml `ne` order, `[in, out]` for matrices;
/// d = d_model, V = vocab, F = d_ff, C = context).
pub static TABLE: Table = Table {
    first: &[
        // [d, V], also the output head.
        Spec::embedding("token_embd.weight", |c| vec![c.d_model, c.vocab]),
        // [d, C]
        Spec::embedding("position_embd.weight", |c| vec![c.d_model, c.context]),
    ],
    blocks: &[
        Spec::gain("attn_norm.weight", |c| vec![c.d_model]),
        Spec::bias("attn_norm.bias", |c| vec![c.d_model]),
        Spec::matrix("attn_q.weight", |c| vec![c.d_model, c.d_model]),
        Spec::bias("attn_q.bias", |c| vec![c.d_model]),
        Spec::matrix("attn_k.weight", |c| vec![c.d_model, c.d_model]),
        Spec::bias("attn_k.bias", |c| vec![c.d_model]),
        Spec::matrix("attn_v.weight", |c| vec![c.d_model, c.d_model]),
        Spec::bias("attn_v.bias", |c| vec![c.d_model]),
        Spec::matrix("attn_output.weight", |c| vec![c.d_model, c.d_model]).residual(),
        Spec::bias("attn_output.bias", |c| vec![c.d_model]),
        Spec::gain("ffn_norm.weight", |c| vec![c.d_model]),
        Spec::bias("ffn_norm.bias", |c| vec![c.d_model]),
        Spec::matrix("ffn_up.weight", |c| vec![c.d_model, c.d_ff]),
        Spec::bias("ffn_up.bias", |c| vec![c.d_ff]),
        Spec::matrix("ffn_down.weight", |c| vec![c.d_ff, c.d_model]).residual(),
        Spec::bias("ffn_down.bias", |c| vec![c.d_model]),
    ],
    last: &[Spec::gain("output_norm.weight", |c| vec![c.d_model]), Spec::bias("output_norm.bias", |c| vec![c.d_model])],
    // [d, 3d] and [3d]: q|k|v stacked along ne1.
    fused: &[
        Fused { name: "attn_qkv.weight", parts: &["attn_q.weight", "attn_k.weight", "attn_v.weight"] },
        Fused { name: "attn_qkv.bias", parts: &["attn_q.bias", "attn_k.bias", "attn_v.bias"] },
    ],
    hidden,
    head,
};

/// The output head `[d, vocab]`: the token table (tied).
pub fn head<'w>(w: &Weights<'w>) -> Result<Tensor<'w>> {
    w.tensor("token_embd.weight")
}

/// `γ ⊙ norm(x) + β` over `ne0` (Ba et al. 2016), gain and bias `[d]`, as one
/// node whose backward recomputes `norm(x)` (patch 0036).
fn layer_norm<'a>(ctx: &'a Context, x: Tensor<'a>, gain: Tensor<'a>, bias: Tensor<'a>, eps: f32) -> Result<Tensor<'a>> {
    ctx.norm_gain_bias(x, gain, bias, eps)
}

/// The last hidden states `[d, T, B]`, normalized, before the head.
pub fn hidden<'a>(w: &Weights<'a>, ctx: &'a Context, x: Batch<'a>) -> Result<Tensor<'a>> {
    let c = w.config();
    let (d, t, b) = (c.d_model as i64, x.t as i64, x.b as i64);
    let (dh, heads, eps) = (c.d_head() as i64, c.n_heads as i64, c.norm_eps);
    let tok = ctx.reshape(ctx.get_rows(w.tensor("token_embd.weight")?, x.tokens)?, &[d, t, b])?; // [d, T, B]
    let pos = ctx.get_rows(w.tensor("position_embd.weight")?, ctx.view(x.pos, &[t], &[], 0)?)?; // [d, T]
    let mut h = ctx.add(tok, pos)?;
    for (layer, blk) in w.blocks().iter().enumerate() {
        let norm = |stem: &str, x| layer_norm(ctx, x, blk.tensor(&format!("{stem}.weight"))?, blk.tensor(&format!("{stem}.bias"))?, eps);
        let lin = |stem: &str, x| blk.linear(ctx, stem, 1.0, x); // W·x + b
        let a = blk.product_input(ctx, norm("attn_norm", h)?)?; // [d, T, B], bf16 under autocast
        let split = |stem: &str| -> Result<Tensor<'a>> {
            // [d_head, heads, T, B], cast right after its product where the attention reads bf16
            blk.attention_operand(ctx, ctx.reshape(lin(stem, a)?, &[dh, heads, t, b])?, &x)
        };
        let att = blk.attention(ctx, [split("attn_q")?, split("attn_k")?, split("attn_v")?], &x, layer)?; // [d, T, B]
        h = ctx.add(h, lin("attn_output", att)?)?;
        let m = blk.product_input(ctx, norm("ffn_norm", h)?)?;
        let u = blk.gelu(ctx, lin("ffn_up", m)?)?; // [d_ff, T, B]
        h = ctx.add(h, lin("ffn_down", u)?)?;
    }
    layer_norm(ctx, h, w.tensor("output_norm.weight")?, w.tensor("output_norm.bias")?, eps)
    // [d, T, B]
}
