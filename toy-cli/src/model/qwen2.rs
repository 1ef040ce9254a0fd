//! The qwen2 architecture (Qwen2, Qwen2.5): llama's blocks with a bias on
//! each of the q, k and v products, and RoPE in NEOX mode, as llama.cpp runs
//! `qwen2` GGUFs (src/models/qwen2.cpp; `llama_model_rope_type` in
//! src/llama-model.cpp gives `LLAMA_ROPE_TYPE_NEOX`: dimension `i` is rotated
//! with `i + d_head/2`, not with its neighbour). The head is untied unless the
//! file has no `output.weight` (Qwen2-0.5B ties it).

use super::llama::{self, kv_width, q_width};
use super::table::{Lora, Spec, Table};
use super::{Batch, Weights};
use ggml_rs::{Context, Result, RopeMode, Tensor};

/// qwen2's parameters (shapes in ggml `ne` order, `[in, out]` for matrices;
/// d = d_model, F = d_ff, Q = [`q_width`], KV = [`kv_width`]); the tensors
/// outside the blocks are llama's.
pub static TABLE: Table = Table {
    first: llama::TABLE.first,
    blocks: &[
        Spec::gain("attn_norm.weight", |c| vec![c.d_model]),
        Spec::matrix("attn_q.weight", |c| vec![c.d_model, q_width(c)]).lora(Lora::ByDefault),
        Spec::bias("attn_q.bias", |c| vec![q_width(c)]),
        Spec::matrix("attn_k.weight", |c| vec![c.d_model, kv_width(c)]).lora(Lora::ByDefault),
        Spec::bias("attn_k.bias", |c| vec![kv_width(c)]),
        Spec::matrix("attn_v.weight", |c| vec![c.d_model, kv_width(c)]).lora(Lora::ByDefault),
        Spec::bias("attn_v.bias", |c| vec![kv_width(c)]),
        Spec::matrix("attn_output.weight", |c| vec![q_width(c), c.d_model]).lora(Lora::ByDefault).residual(),
        Spec::gain("ffn_norm.weight", |c| vec![c.d_model]),
        Spec::matrix("ffn_gate.weight", |c| vec![c.d_model, c.d_ff]).lora(Lora::Yes),
        Spec::matrix("ffn_up.weight", |c| vec![c.d_model, c.d_ff]).lora(Lora::Yes),
        Spec::matrix("ffn_down.weight", |c| vec![c.d_ff, c.d_model]).lora(Lora::Yes).residual(),
    ],
    last: &[],
    fused: &[],
    hidden,
    head: llama::head,
};

/// The last hidden states `[d, T, B]`, normalized, before the head: llama's
/// pass ([`llama::pass`], which adds the biases where the table has them) with
/// NEOX RoPE.
pub fn hidden<'a>(w: &Weights<'a>, ctx: &'a Context, x: Batch<'a>) -> Result<Tensor<'a>> {
    llama::pass(w, ctx, x, RopeMode::Neox)
}
