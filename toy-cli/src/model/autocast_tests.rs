//! bf16 product inputs (toy-rs patch 0042, [`Block::product_input`](super::weights::Block::product_input))
//! against f32 inputs, on the CPU (which widens a bf16 operand): the same graph
//! but for the rounding of the norm, GELU and SwiGLU outputs that the products
//! read, so loss and gradients agree to bf16's precision, and every parameter
//! still gets its gradient through the casts.

use super::{init::init_weights, lora::LoraConfig, Arch, ModelConfig, Weights};
use crate::train::step::{capacity, Consts, GradStep};
use ggml_rs::{sys, Backend, Context};

/// Loss and every parameter's gradient of one batch, with or without bf16 inputs;
/// and how many casts to bf16 the graph holds.
fn run(c: &ModelConfig, bf16: bool) -> (f32, Vec<Vec<f32>>, usize) {
    let backend = Backend::cpu().unwrap();
    backend.set_n_threads(1);
    let wctx = Context::new(capacity(c.n_layers)).unwrap();
    let mut w = Weights::new(&wctx, c).unwrap();
    w.set_bf16_inputs(bf16);
    let trainable: Vec<_> = w.params().into_iter().filter(|p| p.trainable).map(|p| p.tensor).collect();
    for &p in &trainable {
        wctx.set_param(p).unwrap();
    }
    let (t, b) = (c.context, 2);
    let consts = Consts::new(&wctx, t, b).unwrap();
    wctx.allocate(&backend).unwrap();
    consts.fill().unwrap();
    init_weights(&w, 11).unwrap();
    if c.lora.is_some() {
        // B ≠ 0, so that A has a gradient too
        for p in w.params().iter().filter(|p| p.tensor.name().ends_with("lora_b")) {
            p.tensor.write(&vec![0.01f32; p.tensor.nelements() as usize]).unwrap();
        }
    }
    let cctx = Context::new(capacity(c.n_layers)).unwrap();
    let mut gs = GradStep::new(&cctx, &w, &consts, t, b, &[backend]).unwrap();
    let tokens: Vec<i32> = (0..t * b).map(|i| ((i * 7 + 3) % c.vocab) as i32).collect();
    let targets: Vec<i32> = tokens.iter().map(|&x| (x + 1) % c.vocab as i32).collect();
    let loss = gs.compute(&tokens, &targets).unwrap();
    let grads = trainable.iter().map(|&p| gs.grad(p).expect("a gradient").read_f32().unwrap()).collect();
    let casts = gs.graph().nodes().iter().filter(|n| n.op() == sys::GGML_OP_CPY && n.dtype() == ggml_rs::DType::BF16).count();
    (loss, grads, casts)
}

#[test]
fn bf16_product_inputs_agree_with_f32_inputs() {
    let mut llama = ModelConfig::new(Arch::Llama, 61, 32, 2, 4, 48, 8);
    llama.n_kv_heads = 2;
    let mut lora = llama.clone();
    let targets = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"];
    lora.lora = Some(LoraConfig { rank: 4, alpha: 8.0, targets: targets.iter().map(|s| s.to_string()).collect() });
    let gpt2 = ModelConfig::new(Arch::Gpt2, 61, 32, 2, 4, 48, 8);
    for (what, c) in [("llama", &llama), ("llama LoRA", &lora), ("gpt2", &gpt2)] {
        let (want_loss, want, none) = run(c, false);
        let (loss, got, casts) = run(c, true);
        // three product inputs per layer: two norms and the SwiGLU/GELU output
        assert_eq!((none, casts), (0, 3 * c.n_layers), "{what}");
        assert!((loss - want_loss).abs() <= 1e-3 * want_loss.abs(), "{what}: loss {loss} vs {want_loss}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            let scale = w.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            let err = g.iter().zip(w).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
            // gpt2's key bias has a zero gradient (softmax ignores a shift): ~1e-11 both ways
            let scale = scale.max(1e-6);
            assert!(err <= 2e-2 * scale, "{what}: parameter {i}: {err:e} of {scale:e}");
        }
    }
}
