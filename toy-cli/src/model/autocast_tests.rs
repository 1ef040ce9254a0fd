//! bf16 product inputs (toy-rs patch 0042, [`Block::product_input`](super::weights::Block::product_input))
//! and activation inputs (patches 0044, 0045, [`Block::swiglu`](super::weights::Block::swiglu))
//! against f32, on the CPU (which widens a bf16 operand and has the bf16
//! SwiGLU and GELU kernels): the same graph but for the rounding of what the
//! products and activations read, so loss and gradients agree to bf16's
//! precision, and every parameter still gets its gradient through the casts.

use super::weights::{Autocast, Compact};
use super::{init::init_weights, lora::LoraConfig, Arch, ModelConfig, Weights};
use crate::model::attention::Attention;
use crate::train::step::{capacity, Consts, GradStep};
use ggml_rs::{sys, Backend, Context};

/// What one step's graph computed: the loss, every parameter's gradient, and
/// how many casts to bf16 and which backward kernels the graph holds.
struct Run {
    loss: f32,
    grads: Vec<Vec<f32>>,
    casts: usize,
    /// Of those, the casts of LoRA's `A` (maybe scaled) and `B` ([`lora::linear`](super::lora::linear)).
    adapter_casts: usize,
    /// SWIGLU_BACK nodes (patch 0044) and GELU_BACK nodes reading a bf16 input (patch 0045).
    bf16_backs: usize,
    /// Of `casts`, those of an f16 base's frozen matrices.
    base_casts: usize,
    /// Of `casts`, those of trainable matrices (maybe padded: the head), and
    /// how many of them come before the graph's first product.
    weight_casts: usize,
    weight_casts_first: usize,
    /// GELU nodes, and those flagged to be computed again (patch 0062).
    gelus: usize,
    recomputed: usize,
    /// Bytes of the step's compute buffers.
    compute_bytes: usize,
}

/// One batch under `autocast`.
fn run(c: &ModelConfig, autocast: Autocast) -> Run {
    run_compact(c, autocast, Compact::F32)
}

/// One batch under `autocast`, the products reading a compact base as `compact` says.
fn run_compact(c: &ModelConfig, autocast: Autocast, compact: Compact) -> Run {
    let backend = Backend::cpu().unwrap();
    backend.set_n_threads(1);
    let wctx = Context::new(capacity(c.n_layers)).unwrap();
    let mut w = Weights::new(&wctx, c).unwrap();
    w.set_autocast(autocast);
    w.set_compact(compact);
    let trainable: Vec<_> = w.params().into_iter().filter(|p| p.trainable).map(|p| p.tensor).collect();
    for &p in &trainable {
        wctx.set_param(p).unwrap();
    }
    let (t, b) = (c.context, 2);
    let consts = Consts::new(&wctx, t, b).unwrap();
    wctx.allocate(&backend).unwrap();
    consts.fill().unwrap();
    if c.base_dtype.is_some() {
        write_f16_base(&w);
    } else {
        init_weights(&w, 11).unwrap();
    }
    if c.lora.is_some() {
        // B ≠ 0, so that A has a gradient too
        for p in w.params().iter().filter(|p| p.tensor.name().ends_with("lora_b")) {
            p.tensor.write(&vec![0.01f32; p.tensor.nelements() as usize]).unwrap();
        }
    }
    let cctx = Context::new(capacity(c.n_layers)).unwrap();
    let mut gs = GradStep::new(&cctx, &w, &consts, t, b, &[backend]).unwrap();
    let (tokens, targets) = batch(c, t * b);
    let loss = gs.compute(&tokens, &targets).unwrap();
    let grads = trainable.iter().map(|&p| gs.grad(p).expect("a gradient").read_f32().unwrap()).collect();
    let nodes = gs.graph().nodes();
    let cast_nodes: Vec<_> = nodes.iter().filter(|n| n.op() == sys::GGML_OP_CPY && n.dtype() == ggml_rs::DType::BF16).collect();
    let adapter_casts = cast_nodes.iter().filter(|n| is_adapter_factor(n.srcs()[0])).count();
    let casts = cast_nodes.len() - adapter_casts;
    let bf16_backs = nodes
        .iter()
        .filter(|n| n.op() == sys::GGML_OP_SWIGLU_BACK || (n.op() == sys::GGML_OP_GELU_BACK && n.srcs()[1].dtype() == ggml_rs::DType::BF16))
        .count();
    let base_casts = cast_nodes.iter().filter(|n| n.srcs()[0].dtype() == ggml_rs::DType::F16).count();
    let weight_casts = cast_nodes.iter().filter(|n| is_weight_cast(n)).count();
    let first_product = nodes.iter().position(|n| n.op() == sys::GGML_OP_MUL_MAT).unwrap_or(nodes.len());
    let weight_casts_first = nodes[..first_product].iter().filter(|n| is_weight_cast(n)).count();
    let gelu = |n: &&ggml_rs::Tensor<'_>| n.op() == sys::GGML_OP_UNARY && n.op_name() == "GELU";
    let gelus = nodes.iter().filter(gelu).count();
    let recomputed = nodes.iter().filter(gelu).filter(|n| n.is_recomputed()).count();
    let compute_bytes = gs.graph().buffer_sizes().into_iter().map(|(_, s)| s).sum();
    Run { loss, grads, casts, adapter_casts, bf16_backs, base_casts, weight_casts, weight_casts_first, gelus, recomputed, compute_bytes }
}

/// Tokens `(7i + 3) mod vocab` and their successors as targets, `n` of each.
fn batch(c: &ModelConfig, n: usize) -> (Vec<i32>, Vec<i32>) {
    let tokens: Vec<i32> = (0..n).map(|i| ((i * 7 + 3) % c.vocab) as i32).collect();
    let targets = tokens.iter().map(|&x| (x + 1) % c.vocab as i32).collect();
    (tokens, targets)
}

/// Whether `t` is LoRA's `A` (maybe scaled) or `B` ([`lora::linear`](super::lora::linear)).
fn is_adapter_factor(t: ggml_rs::Tensor<'_>) -> bool {
    let t = if t.op() == sys::GGML_OP_SCALE { t.srcs()[0] } else { t };
    t.name().ends_with(".lora_a") || t.name().ends_with(".lora_b")
}

/// Whether `n` is a bf16 cast of a trainable matrix (maybe padded: the head),
/// not of an adapter's factor ([`Autocast::weights`]).
fn is_weight_cast(n: &ggml_rs::Tensor<'_>) -> bool {
    if n.op() != sys::GGML_OP_CPY || n.dtype() != ggml_rs::DType::BF16 {
        return false;
    }
    let s = n.srcs()[0];
    let s = if s.op() == sys::GGML_OP_PAD { s.srcs()[0] } else { s };
    s.is_param() && s.op() == sys::GGML_OP_NONE && !is_adapter_factor(s)
}

/// The trainable matrices of a model without adapters: q, k, v, output,
/// (gate,) up and down a layer, and the head (gpt2's tied).
fn trained_matrices(c: &ModelConfig) -> usize {
    (if c.arch == Arch::Gpt2 { 6 } else { 7 }) * c.n_layers + 1
}

/// Loss and gradients agree to bf16's precision.
fn assert_close(what: &str, got: &Run, want: &Run) {
    assert!((got.loss - want.loss).abs() <= 1e-3 * want.loss.abs(), "{what}: loss {} vs {}", got.loss, want.loss);
    for (i, (g, w)) in got.grads.iter().zip(&want.grads).enumerate() {
        let scale = w.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = g.iter().zip(w).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        // gpt2's key bias has a zero gradient (softmax ignores a shift): ~1e-11 both ways
        let scale = scale.max(1e-6);
        assert!(err <= 2e-2 * scale, "{what}: parameter {i}: {err:e} of {scale:e}");
    }
}

/// How many matrices have adapters.
fn adapters(c: &ModelConfig) -> usize {
    c.lora.as_ref().map_or(0, |l| l.targets.len() * c.n_layers)
}

fn configs() -> Vec<(&'static str, ModelConfig)> {
    let mut llama = ModelConfig::new(Arch::Llama, 61, 32, 2, 4, 48, 8);
    llama.n_kv_heads = 2;
    let mut lora = llama.clone();
    let targets = ["attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down"];
    lora.lora = Some(LoraConfig { rank: 4, alpha: 8.0, targets: targets.iter().map(|s| s.to_string()).collect() });
    let gpt2 = ModelConfig::new(Arch::Gpt2, 61, 32, 2, 4, 48, 8);
    vec![("llama", llama), ("llama LoRA", lora), ("gpt2", gpt2)]
}

#[test]
fn bf16_product_inputs_agree_with_f32_inputs() {
    for (what, c) in configs() {
        let want = run(&c, Autocast::default());
        let got = run(&c, Autocast { inputs: true, ..Default::default() });
        // four product inputs per layer: two norms, the attention's output and the SwiGLU/GELU output
        assert_eq!((want.casts, got.casts, got.bf16_backs), (0, 4 * c.n_layers, 0), "{what}");
        // and each adapter's A and B, once for the step's four products
        assert_eq!((want.adapter_casts, got.adapter_casts), (0, 2 * adapters(&c)), "{what}");
        assert_close(what, &got, &want);
    }
}

/// Under `weights` each trainable matrix is cast to bf16 once, before the
/// step's first product (its head padded first), where LoRA's base stays as
/// it is, and the step agrees with the one whose products read the f32
/// matrices to bf16's precision: every parameter still gets its gradient,
/// through the casts.
#[test]
fn trainable_matrices_cast_once_a_step_agree_with_f32_matrices() {
    for (what, c) in configs() {
        let inputs = Autocast { inputs: true, ..Default::default() };
        let want = run(&c, inputs);
        let got = run(&c, Autocast { weights: true, ..inputs });
        let matrices = if c.lora.is_some() { 0 } else { trained_matrices(&c) };
        assert_eq!((want.weight_casts, got.weight_casts, got.weight_casts_first), (0, matrices, matrices), "{what}");
        assert_eq!(got.casts - got.weight_casts, want.casts, "{what}: the same other casts");
        assert!(got.grads.iter().all(|g| g.iter().any(|&x| x != 0.0)), "{what}: every parameter has a gradient");
        assert_close(what, &got, &want);
    }
}

/// The positions of a training step's graph's bf16 casts of trainable
/// matrices (maybe padded: the head) and of its first product, and the loss
/// of one step, under `inputs` and `weights`; `split`: the micro-batch graph
/// that adds into gradient accumulators.
fn train_step_weight_casts(c: &ModelConfig, split: bool) -> (Vec<usize>, usize, f32) {
    use crate::train::step::{OptSettings, TrainStep};
    use ggml_rs::optim::{AdamWConfig, AdamWState};
    let backend = Backend::cpu().unwrap();
    let wctx = Context::new(capacity(c.n_layers) * 2).unwrap();
    let mut w = Weights::new(&wctx, c).unwrap();
    w.set_autocast(Autocast { inputs: true, weights: true, ..Default::default() });
    let trainable: Vec<_> = w.params().into_iter().filter(|p| p.trainable).map(|p| p.tensor).collect();
    for &p in &trainable {
        wctx.set_param(p).unwrap();
    }
    let moments = AdamWState::new(&wctx, &trainable).unwrap();
    let accs: Vec<_> = trainable.iter().map(|p| wctx.new_tensor(ggml_rs::DType::F32, &p.shape()).unwrap()).collect();
    let (t, b) = (c.context, 2);
    let consts = Consts::new(&wctx, t, b).unwrap();
    wctx.allocate(&backend).unwrap();
    consts.fill().unwrap();
    init_weights(&w, 11).unwrap();
    let cctx = Context::new(capacity(c.n_layers) * 2).unwrap();
    let adamw = AdamWConfig { lr: 1e-3, betas: (0.9, 0.95), eps: 1e-8, weight_decay: 0.0 };
    let opt = OptSettings { adamw, grad_clip: Some(1.0) };
    let mut ts = TrainStep::new(&cctx, &w, &moments, &consts, t, b, opt, split.then_some(&accs[..]), &[backend]).unwrap();
    let nodes = ts.graph().nodes();
    let casts = nodes.iter().enumerate().filter(|(_, n)| is_weight_cast(n)).map(|(i, _)| i).collect();
    let first_product = nodes.iter().position(|n| n.op() == sys::GGML_OP_MUL_MAT).unwrap();
    let (tokens, targets) = batch(c, t * b);
    let loss = ts.step(&tokens, &targets, &[1.0], 1e-3).unwrap().loss;
    (casts, first_product, loss)
}

/// A training step's graph, whole or a micro-batch's, makes its weight casts
/// in one run before its first product: gpt2's head (vocabulary 61) padded to
/// 128 rows first, the PAD moved ahead of the run, and the step runs.
#[test]
fn a_training_step_casts_its_matrices_in_one_run_first() {
    for (what, c) in configs().into_iter().filter(|(w, _)| *w != "llama LoRA") {
        for split in [false, true] {
            let (casts, first_product, loss) = train_step_weight_casts(&c, split);
            assert_eq!(casts.len(), trained_matrices(&c), "{what}, split {split}");
            assert_eq!(casts.last().unwrap() - casts[0] + 1, casts.len(), "{what}, split {split}: one run {casts:?}");
            assert!(*casts.last().unwrap() < first_product, "{what}, split {split}");
            assert!(loss.is_finite(), "{what}, split {split}: loss {loss}");
        }
    }
}

/// Under `activations` the SwiGLU reads its gate and up cast to bf16 (two casts
/// a layer instead of the cast of its output) and GELU its input (one, instead
/// of its output's), their backwards are SWIGLU_BACK and a GELU_BACK reading
/// bf16, and the step agrees with f32 to bf16's precision.
#[test]
fn bf16_activation_inputs_agree_with_f32() {
    for (what, c) in configs() {
        let want = run(&c, Autocast::default());
        let got = run(&c, Autocast { inputs: true, activations: true, ..Default::default() });
        // the two norms' outputs and the attention's, then GELU's input or SwiGLU's gate and up
        let activation = if c.arch == Arch::Gpt2 { 1 } else { 2 };
        assert_eq!((got.casts, got.bf16_backs), ((3 + activation) * c.n_layers, c.n_layers), "{what}");
        assert_close(what, &got, &want);
        let alone = run(&c, Autocast { activations: true, ..Default::default() });
        assert_eq!(alone.casts, activation * c.n_layers, "{what}");
        assert_close(what, &alone, &want);
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
    let graph = |c: &ModelConfig, attention| -> ggml_rs::Result<usize> {
        let backend = Backend::cpu()?;
        let wctx = Context::new(capacity(c.n_layers))?;
        let mut w = Weights::new(&wctx, c)?;
        w.set_autocast(Autocast { attention: true, ..Default::default() });
        for p in w.params() {
            wctx.set_param(p.tensor)?;
        }
        let consts = Consts::with_attention(&wctx, c.context, 2, attention)?;
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

/// bf16 gate and up products (toy-rs patch 0048, [`Block::gated`](super::weights::Block::gated)):
/// a llama block's, with or without adapters (patch 0055: the adapter's bf16
/// term added to the bf16 product), and the CPU, which has no bf16 product
/// result, refuses the step with ggml-rs's error (CUDA's numbers: ggml-rs's
/// `activations::swiglu_of_bf16_products_takes_bf16_gradients`, its LoRA
/// twin, and the bf16 parity run); gpt2's GELU then takes a bf16 gradient
/// (patch 0094), whose product the CPU refuses the same way (CUDA's numbers:
/// ggml-rs's `bias_bf16`).
#[test]
fn bf16_gate_and_up_products_for_llama_blocks() {
    let all = Autocast { inputs: true, activations: true, outputs: true, ..Default::default() };
    for (what, c) in configs() {
        let e = step_error(&c, all).expect("the CPU has no bf16 product result");
        // llama: the gate product; gpt2: the down projection's bf16 input gradient (patch 0094)
        let ops: &[&str] = if c.arch == Arch::Llama { &["MUL_MAT"] } else { &["OUT_PROD", "giving bf16"] };
        assert!(e.contains("runs on none of") && ops.iter().all(|op| e.contains(op)), "{what}: {e}");
    }
}

/// bf16 q, k and v products (toy-rs patch 0076, [`Block::qkv_bf16`](super::weights::Block::qkv_bf16))
/// only where the fused attention takes bf16 inputs: a llama block with heads
/// of 64, with or without adapters on q, k and v, then multiplies into bf16,
/// which the CPU refuses at the q product (MUL_MAT, ggml-rs's error) instead
/// of at the attention; gpt2 (its own pass,
/// biased products) and heads of 8 stay as they were (the same error, the same
/// step). CUDA's numbers: ggml-rs's
/// `qkv_bf16::bf16_ropes_of_bf16_products_against_the_f32_chain`.
#[test]
fn bf16_qkv_products_only_where_the_flash_kernels_take_them() {
    let base = Autocast { inputs: true, attention: true, ..Default::default() };
    let all = Autocast { qkv: true, ..base };
    for arch in [Arch::Llama, Arch::Gpt2] {
        let wide = ModelConfig::new(arch, 61, 128, 2, 2, 96, 8); // heads of 64
        let mut adapted = wide.clone(); // LoRA on q, k and v: their adapters' terms added in bf16
        let targets = ["attn_q", "attn_k", "attn_v"].map(String::from).to_vec();
        adapted.lora = Some(LoraConfig { rank: 4, alpha: 8.0, targets });
        let configs = if arch == Arch::Llama { vec![&wide, &adapted] } else { vec![&wide] }; // (gpt2's is attn_qkv)
        for c in configs {
            let e = step_error_in(c, all, Some(Attention::Fused)).expect("the CPU has no bf16 product result or attention");
            let refused = if arch == Arch::Llama { "MUL_MAT" } else { "ATTN_CAUSAL" };
            assert!(e.contains("runs on none of") && e.contains(refused), "{arch:?}, LoRA {}: {e}", c.lora.is_some());
        }
        let narrow = ModelConfig::new(arch, 61, 32, 2, 4, 48, 8); // heads of 8
        assert_eq!(step_error_in(&narrow, all, Some(Attention::Fused)), None, "{arch:?}: heads of 8 stay f32 under the fused attention");
        let (want, got) = (run(&narrow, base), run(&narrow, all));
        assert_eq!((got.casts, got.loss), (want.casts, want.loss), "{arch:?}");
    }
}

/// The error of building (and allocating) one step's graph under `autocast`
/// on the CPU, if any.
fn step_error(c: &ModelConfig, autocast: Autocast) -> Option<String> {
    step_error_in(c, autocast, None)
}

/// [`step_error`] with the attention `attention` where given (else the default).
fn step_error_in(c: &ModelConfig, autocast: Autocast, attention: Option<Attention>) -> Option<String> {
    let backend = Backend::cpu().unwrap();
    let wctx = Context::new(capacity(c.n_layers)).unwrap();
    let mut w = Weights::new(&wctx, c).unwrap();
    w.set_autocast(autocast);
    for p in w.params().into_iter().filter(|p| p.trainable) {
        wctx.set_param(p.tensor).unwrap();
    }
    let consts = Consts::with_attention(&wctx, c.context, 2, attention.unwrap_or_default()).unwrap();
    wctx.allocate(&backend).unwrap();
    let cctx = Context::new(capacity(c.n_layers)).unwrap();
    GradStep::new(&cctx, &w, &consts, c.context, 2, &[backend]).err().map(|e| e.to_string())
}

/// Deterministic values for a model whose frozen base is f16 (`base_dtype`):
/// small values for its matrices, ones for the f32 norms, LoRA's `A` as
/// [`init_weights`] would draw it and `B` zero (the caller sets `B`).
fn write_f16_base(w: &Weights<'_>) {
    for (i, p) in w.params().iter().enumerate() {
        let n = p.tensor.nelements() as usize;
        let v: Vec<f32> = (0..n).map(|j| 0.2 * ((j * 31 + i * 7) as f32 * 0.37).sin()).collect();
        match p.tensor.dtype() {
            ggml_rs::DType::F16 => p.tensor.write(&v.iter().map(|&x| half::f16::from_f32(x)).collect::<Vec<_>>()).unwrap(),
            // the same f16 base loaded in bf16 (train/dequant.rs): its f16 values rounded to nearest bf16
            ggml_rs::DType::BF16 if !p.trainable => {
                let bf16 = |x: f32| half::bf16::from_f32(half::f16::from_f32(x).to_f32());
                p.tensor.write(&v.iter().map(|&x| bf16(x)).collect::<Vec<_>>()).unwrap()
            }
            _ if p.tensor.name().contains("norm") => p.tensor.write(&vec![1.0f32; n]).unwrap(),
            _ => p.tensor.write(&v).unwrap(),
        }
    }
}

/// A frozen f16 base under bf16 products, cast per product ([`Compact::Bf16`]:
/// again for each gradient of a product's input) or once a step
/// ([`Compact::Bf16Step`], toy-rs patch 0061: the backward reads the
/// forward's copy): one cast a matrix instead of two, and the same loss and
/// gradients bit for bit (the same casts of the same values).
#[test]
fn a_compact_base_cast_once_a_step_gives_the_same_step() {
    let (_, mut c) = configs().into_iter().find(|(w, _)| *w == "llama LoRA").unwrap();
    c.base_dtype = Some("f16".into());
    let inputs = Autocast { inputs: true, ..Default::default() };
    let per_product = run_compact(&c, inputs, Compact::Bf16);
    let once = run_compact(&c, inputs, Compact::Bf16Step);
    let matrices = 7 * c.n_layers + 1; // the blocks' matrices and the tied head (the token table)
    assert_eq!(once.base_casts, matrices, "one cast a matrix");
    assert!(per_product.base_casts > matrices, "{} casts per product", per_product.base_casts);
    assert_eq!(per_product.casts - per_product.base_casts, once.casts - once.base_casts, "the same other casts");
    assert_eq!(per_product.loss.to_bits(), once.loss.to_bits());
    for (i, (a, b)) in once.grads.iter().zip(&per_product.grads).enumerate() {
        assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "parameter {i}");
        assert!(a.iter().any(|&x| x != 0.0), "parameter {i} has a gradient");
    }
}

/// The same f16 base loaded in bf16 once (`train::dequant::bf16_base`, where
/// a step would cast it once): the matrices' casts gone from the step (the
/// token table keeps its type, and its one cast where it is the tied head),
/// and the loss and gradients of the step that casts them once, bit for bit.
#[test]
fn a_compact_base_loaded_in_bf16_gives_the_same_step() {
    let (_, mut c) = configs().into_iter().find(|(w, _)| *w == "llama LoRA").unwrap();
    c.base_dtype = Some("f16".into());
    let cpu = Backend::cpu().unwrap();
    for tied in [false, true] {
        c.tied = tied;
        let loaded = crate::train::dequant::bf16_base(&c, &cpu, capacity(c.n_layers)).unwrap().expect("a small base fits");
        assert_eq!(loaded.base_dtype.as_deref(), Some("bf16"));
        assert_eq!(loaded.base_dtype_except.iter().collect::<Vec<_>>(), [(&"token_embd.weight".to_string(), &"f16".to_string())]);
        let inputs = Autocast { inputs: true, ..Default::default() };
        let once = run_compact(&c, inputs, Compact::Bf16Step);
        let bf16 = run_compact(&loaded, inputs, Compact::Bf16Step);
        // the blocks' matrices and the head, or only a tied head's table
        assert_eq!((once.base_casts, bf16.base_casts), (7 * c.n_layers + 1, tied as usize), "tied {tied}");
        assert_eq!(bf16.casts - bf16.base_casts, once.casts - once.base_casts, "the same other casts");
        assert_eq!(once.loss.to_bits(), bf16.loss.to_bits(), "tied {tied}");
        for (i, (a, b)) in once.grads.iter().zip(&bf16.grads).enumerate() {
            assert!(a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits()), "tied {tied}: parameter {i}");
        }
    }
    // a quantized table keeps its type too
    c.base_dtype_except.insert("token_embd.weight".into(), "q8_0".into());
    let loaded = crate::train::dequant::bf16_base(&c, &cpu, capacity(c.n_layers)).unwrap().unwrap();
    assert_eq!(loaded.base_dtype_except["token_embd.weight"], "q8_0");
}

/// Under `recompute`, GPT-2's bf16 GELU runs again in the backward for the down
/// projection's weight gradient (patch 0062): the same loss and gradients bit
/// for bit, one GELU more a layer, and a smaller compute buffer (each layer's
/// GELU output no longer lives from the forward to the backward).
#[test]
fn a_recomputed_gelu_gives_the_same_step_in_less_memory() {
    let c = ModelConfig::new(Arch::Gpt2, 61, 32, 3, 4, 512, 128);
    let kept = run(&c, Autocast { inputs: true, activations: true, ..Default::default() });
    let again = run(&c, Autocast { inputs: true, activations: true, recompute: true, ..Default::default() });
    assert_eq!(again.loss.to_bits(), kept.loss.to_bits());
    assert_eq!(again.grads, kept.grads);
    assert_eq!((kept.gelus, kept.recomputed), (c.n_layers, 0));
    assert_eq!((again.gelus, again.recomputed), (2 * c.n_layers, c.n_layers));
    assert!(again.compute_bytes < kept.compute_bytes, "{} bytes, {} without recomputing", again.compute_bytes, kept.compute_bytes);
}

/// With `merged_lora` (patch 0066) every LoRA-adapted product's input gradient
/// goes through `W + scale·B·A` and the adapters' products read a detached
/// input. In f32 the loss is the same and every gradient (the adapters' and
/// the rest) agrees to f32's rounding; under bf16 product inputs to bf16's
/// (there the adapter's share of the input gradient read `A` and `B` cast to
/// bf16, and now reads them in f32 through the merged weight).
#[test]
fn a_lora_backward_through_the_merged_weight_gives_the_same_gradients() {
    let (_, c) = configs().into_iter().find(|(w, _)| *w == "llama LoRA").unwrap();
    let want = run(&c, Autocast::default());
    let got = run(&c, Autocast { merged_lora: true, ..Default::default() });
    assert!((got.loss - want.loss).abs() <= 1e-6 * want.loss.abs(), "loss {} vs {}", got.loss, want.loss);
    for (i, (g, w)) in got.grads.iter().zip(&want.grads).enumerate() {
        let scale = w.iter().fold(0.0f32, |m, v| m.max(v.abs())).max(1e-6);
        let err = g.iter().zip(w).fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
        assert!(err <= 1e-5 * scale, "parameter {i}: {err:e} of {scale:e}");
    }
    let inputs = Autocast { inputs: true, ..Default::default() };
    assert_close("merged under bf16 inputs", &run(&c, Autocast { merged_lora: true, ..inputs }), &run(&c, inputs));
}

/// A name in `base_dtype_except` (config.toml's `[model.base_dtype_except]`)
/// that is no tensor of the model is refused, as an unknown key is (a helper
/// appended `bogus = "q8_0"` and `--resume` trained on).
#[test]
fn an_unknown_tensor_in_base_dtype_except_is_refused() {
    let mut c = ModelConfig::new(Arch::Llama, 300, 64, 2, 4, 128, 32);
    c.base_dtype_except.insert("token_embd.weight".into(), "q8_0".into());
    assert_eq!(c.check_base_dtype_names(), Ok(()));
    c.base_dtype_except.insert("bogus".into(), "q8_0".into());
    let e = c.check_base_dtype_names().unwrap_err();
    assert!(e.contains("base_dtype_except names \"bogus\""), "{e}");
}
