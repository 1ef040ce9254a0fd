//! bf16 product inputs (toy-rs patch 0042, [`Block::product_input`](super::weights::Block::product_input))
//! against f32 inputs, on the CPU (which widens a bf16 operand): the same graph
//! but for the rounding of the norm, GELU and SwiGLU outputs that the products
//! read, so loss and gradients agree to bf16's precision, and every parameter
//! still gets its gradient through the casts.

use super::weights::Autocast;
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
    w.set_autocast(Autocast { inputs: bf16, ..Default::default() });
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

/// bf16 attention inputs (toy-rs patch 0043, [`Block::attention`](super::weights::Block::attention)):
/// a fused attention with heads of 64 reads q, k and v cast to bf16 (three
/// casts per layer), which the CPU refuses with ggml-rs's error, not ggml's
/// abort; the reference attention and head sizes that CUDA's flash kernels do
/// not take keep f32 (no cast, and the step runs). CUDA's numbers are checked
/// in ggml-rs (`attention::bf16_inputs_give_what_the_f32_inputs_give`).
#[test]
fn bf16_attention_inputs_only_where_the_flash_kernels_take_them() {
    use crate::model::attention::Attention;
    let graph = |c: &ModelConfig, attention| -> ggml_rs::Result<usize> {
        let backend = Backend::cpu()?;
        let wctx = Context::new(capacity(c.n_layers))?;
        let mut w = Weights::new(&wctx, c)?;
        w.set_autocast(Autocast { attention: true, ..Default::default() });
        for p in w.params() {
            wctx.set_param(p.tensor)?;
        }
        let mut consts = Consts::new(&wctx, c.context, 2)?;
        consts.attention = attention;
        wctx.allocate(&backend)?;
        consts.fill()?;
        let cctx = Context::new(capacity(c.n_layers))?;
        let gs = GradStep::new(&cctx, &w, &consts, c.context, 2, &[backend])?;
        Ok(gs.graph().nodes().iter().filter(|n| n.op() == sys::GGML_OP_CPY && n.dtype() == ggml_rs::DType::BF16).count())
    };
    for arch in [Arch::Llama, Arch::Gpt2] {
        let wide = ModelConfig::new(arch, 61, 128, 2, 2, 96, 8); // heads of 64
        let e = graph(&wide, Attention::Fused).expect_err("the CPU has no bf16 attention").to_string();
        assert!(e.contains("runs on none of") && e.contains("ATTN_CAUSAL"), "{arch:?}: {e}");
        assert_eq!(graph(&wide, Attention::Reference).unwrap(), 0, "{arch:?}");
        let narrow = ModelConfig::new(arch, 61, 32, 2, 4, 48, 8); // heads of 8
        assert_eq!(graph(&narrow, Attention::Fused).unwrap(), 0, "{arch:?}");
    }
}
