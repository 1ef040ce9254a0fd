//! `Graph::flag_side_branches` (toy-rs patch 0060): which nodes a training
//! step flags for a side stream, and that running them there (CUDA, with
//! `TOY_TEST_DEVICE=cuda`) changes no value.

use crate::common::*;
use ggml_rs::optim::{AdamWConfig, AdamWState, Optimizer, ParamGroup};
use ggml_rs::{Context, DType, Graph, MulMatGrad, Tensor};

/// What a run of [`two_adapted_layers`] gives: the losses of its steps, the
/// parameters after them, and, per adapter factor, whether its gradient was
/// flagged; whether any activation's gradient was.
struct Run {
    losses: Vec<f32>,
    params: Vec<Vec<f32>>,
    grads_flagged: Vec<bool>,
    main_flagged: bool,
    n_flagged: usize,
}

/// Three AdamW steps (clip 1.0) of two LoRA-shaped layers over an input `x`
/// `[k, n]`: `y1 = W1·x + B1·(A1·x)`, `y2 = W2·y1 + B2·(A2·y1)`, loss
/// `Σ y2·r`; `W` `[k, k]` frozen, `A` `[k, r]`, `B` `[r, k]` trained. With
/// `flag`, the graph's side branches are flagged, whatever their size.
fn two_adapted_layers(dev: &ggml_rs::Backend, flag: bool) -> Run {
    let (k, n, r) = (256i64, 512i64, 16i64);
    let mut g = rng(6060);
    let wctx = Context::new(64).unwrap();
    let ctx = Context::new(4096).unwrap();
    let factors: Vec<Tensor<'_>> = (0..2).flat_map(|_| [[k, r], [r, k]]).map(|ne| wctx.new_tensor(DType::F32, &ne).unwrap()).collect();
    let frozen: Vec<Tensor<'_>> = (0..2).map(|_| wctx.new_tensor(DType::F32, &[k, k]).unwrap()).collect();
    let (x, rt) = (wctx.new_tensor(DType::F32, &[k, n]).unwrap().set_input(), wctx.new_tensor(DType::F32, &[k, n]).unwrap());
    for &p in &factors {
        wctx.set_param(p).unwrap();
    }
    let state = AdamWState::new(&wctx, &factors).unwrap();
    wctx.allocate(dev).unwrap();
    for &t in factors.iter().chain(&frozen).chain([&x, &rt]) {
        t.write(&uniform(&mut g, t.nelements() as usize, -0.2, 0.2)).unwrap();
    }
    fn layer<'a>(ctx: &'a Context, w: Tensor<'a>, a: Tensor<'a>, b: Tensor<'a>, h: Tensor<'a>) -> Tensor<'a> {
        let term = ctx.mul_mat(b, ctx.mul_mat(a, h).unwrap()).unwrap();
        ctx.add(term, ctx.mul_mat(w, h).unwrap()).unwrap()
    }
    let y1 = layer(&ctx, frozen[0], factors[0], factors[1], x);
    let y2 = layer(&ctx, frozen[1], factors[2], factors[3], y1);
    let loss = ctx.sum(ctx.mul(y2, rt).unwrap()).unwrap().set_output();
    let mut graph = Graph::with_grads(&ctx, 4096).unwrap();
    graph.set_mul_mat_grad(MulMatGrad::for_backend(dev));
    graph.expand(loss).unwrap();
    graph.build_backward(loss).unwrap();
    let groups = [ParamGroup { params: factors.clone(), weight_decay: 0.0 }];
    let cfg = AdamWConfig { lr: 1e-2, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.0 };
    let mut opt = Optimizer::adamw(&ctx, &mut graph, &state, &groups, cfg, Some(1.0)).unwrap();
    let n_flagged = if flag { graph.flag_side_branches(usize::MAX).unwrap() } else { 0 };
    let grads_flagged = factors.iter().map(|&p| graph.grad(p).unwrap().is_side()).collect();
    let main_flagged = graph.grad(y1).unwrap().is_side();
    graph.allocate(&backends(dev)).unwrap();
    let mut losses = Vec::new();
    for _ in 0..3 {
        opt.prepare_step(1e-2).unwrap();
        graph.compute().unwrap();
        opt.finish_step();
        losses.push(loss.read_f32().unwrap()[0]);
    }
    let params = factors.iter().map(|p| p.read_f32().unwrap()).collect();
    Run { losses, params, grads_flagged, main_flagged, n_flagged }
}

/// The adapters' gradients (and the products that make them) are flagged, the
/// gradient of the activation between the layers is not (whatever its size:
/// the next layer's products wait for it), and
/// three optimizer steps give bit for bit the losses and parameters of the
/// same graph unflagged: on CUDA the flagged nodes run on a second stream.
#[test]
fn side_branches_are_the_adapter_gradients_and_change_no_value() {
    let dev = cpu();
    let side = two_adapted_layers(&dev, true);
    assert!(side.grads_flagged.iter().all(|&f| f), "{:?}", side.grads_flagged);
    assert!(!side.main_flagged, "the gradient of y1 is the backward's main path");
    assert!(side.n_flagged >= 4, "{} nodes", side.n_flagged);
    let plain = two_adapted_layers(&dev, false);
    assert!(!plain.grads_flagged.iter().any(|&f| f));
    assert!(side.losses.iter().zip(&plain.losses).all(|(a, b)| a.to_bits() == b.to_bits()), "{:?} {:?}", side.losses, plain.losses);
    for (i, (a, b)) in side.params.iter().zip(&plain.params).enumerate() {
        assert!(a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()), "factor {i} differs");
    }
    assert!(side.losses[2] < side.losses[0], "{:?}", side.losses);
}
