//! `Context::detach` and `Context::mul_mat_backward_weight` (toy-rs patch
//! 0066): a LoRA layer whose input gradient goes through `W + s·B·A` in one
//! product, its adapter's products reading a detached input, gives the same
//! loss and gradients as the layer built as written.

use crate::common::*;
use ggml_rs::{Context, DType, Graph, MatmulPrecision, MulMatGrad};

/// Loss and gradients of `x`, `A` and `B` of `y = W·x + B·(s·(A·x))`, with
/// `W` `[k, m]` a frozen f32 (or bf16 with `casts`) weight, `A` `[k, r]`,
/// `B` `[r, m]`, `x` `[k, n]`, `s` 0.5 and the loss `Σ y ⊙ R`. With `merged`,
/// as toy's LoRA under patch 0066: the product `W·x` takes the backward weight
/// `detach(W + s·B·A)` and the adapter's products read `detach(x)`. With
/// `casts`, as toy under autocast on CUDA: `x`, `s·A`, `B` and `W` in bf16
/// and `A·x` a bf16 product (the CPU refuses those graphs: `Err`).
fn layer(dev: &ggml_rs::Backend, precision: MatmulPrecision, merged: bool, casts: bool) -> ggml_rs::Result<Vec<Vec<f32>>> {
    let (k, m, n, r) = (192i64, 320i64, 256i64, 16i64);
    let mut g = rng(6600);
    let vals = |g: &mut rand::rngs::StdRng, len: i64, a: f32| uniform(g, len as usize, -a, a);
    let (w, a, b) = (vals(&mut g, k * m, 0.1), vals(&mut g, k * r, 0.1), vals(&mut g, r * m, 0.1));
    let (x, rv) = (vals(&mut g, k * n, 1.0), vals(&mut g, m * n, 1.0));
    dev.set_matmul_precision(precision);
    let ctx = Context::new(1024).unwrap();
    let ts: Vec<_> = [[k, m], [k, r], [r, m], [k, n], [m, n]].iter().map(|s| ctx.new_tensor(DType::F32, s).unwrap()).collect();
    let (wt, at, bt, xt, rt) = (ts[0], ts[1], ts[2], ts[3], ts[4]);
    for t in [at, bt, xt] {
        ctx.set_param(t).unwrap();
    }
    ctx.allocate(dev).unwrap();
    for (t, v) in ts.iter().zip([&w, &a, &b, &x, &rv]) {
        t.write(v).unwrap();
    }
    let bf16 = |t| ctx.cast(t, DType::BF16).unwrap();
    let (w_op, x_op) = if casts { (bf16(wt), bf16(xt)) } else { (wt, xt) };
    let xa = if merged { ctx.detach(x_op).unwrap() } else { x_op };
    let low = if casts {
        ctx.mul_mat(bf16(bt), ctx.mul_mat_bf16(bf16(ctx.scale(at, 0.5).unwrap()), xa).unwrap()).unwrap()
    } else {
        ctx.mul_mat(bt, ctx.scale(ctx.mul_mat(at, xa).unwrap(), 0.5).unwrap()).unwrap()
    };
    let base = if merged {
        ctx.mul_mat_backward_weight(w_op, x_op, merged_weight(&ctx, w_op, at, bt, 0.5)).unwrap()
    } else {
        ctx.mul_mat(w_op, x_op).unwrap()
    };
    let y = ctx.add(low, base).unwrap();
    let loss = ctx.sum(ctx.mul(y, rt).unwrap()).unwrap().set_output();
    let mut graph = Graph::with_grads(&ctx, 1024).unwrap();
    graph.set_mul_mat_grad(MulMatGrad::for_backend(dev));
    graph.expand(loss).unwrap();
    // the backward weight and its out_prod are not in the forward graph: the backward adds them
    let out_prods = |g: &Graph<'_>| g.nodes().iter().filter(|t| t.op() == ggml_rs::sys::GGML_OP_OUT_PROD).count();
    assert_eq!(out_prods(&graph), 0);
    graph.build_backward(loss).unwrap();
    assert!(!merged || out_prods(&graph) > 0);
    loss_and_grads(&mut graph, dev, loss, &[xt, at, bt])
}

/// `detach(w + s·A·B)` `[k, m]` in `w`'s type, of `A` `[k, r]` and `B` `[r, m]`
/// (as toy's `lora::merged_weight`): the outer products of `A` and `Bᵀ`.
fn merged_weight<'a>(
    ctx: &'a Context,
    w: ggml_rs::Tensor<'a>,
    a: ggml_rs::Tensor<'a>,
    b: ggml_rs::Tensor<'a>,
    s: f32,
) -> ggml_rs::Tensor<'a> {
    let d = ctx.out_prod(ctx.detach(a).unwrap(), ctx.transpose(ctx.detach(b).unwrap()).unwrap()).unwrap();
    let d = if s == 1.0 { d } else { ctx.scale(d, s).unwrap() };
    ctx.detach(ctx.add(w, d).unwrap()).unwrap()
}

/// Max |Δ| of each output over the largest |value| of `want`'s, within `tol`.
fn assert_close(tag: &str, got: &[Vec<f32>], want: &[Vec<f32>], tol: f32) {
    for (what, (got, want)) in ["loss", "grad x", "grad A", "grad B"].iter().zip(got.iter().zip(want)) {
        let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = got.iter().zip(want).fold(0.0f32, |m, (a, b)| m.max((a - b).abs())) / scale;
        println!("{tag} {what}: max |Δ| {err:.2e} of max |value| {scale:.3}");
        assert!(scale > 0.0 && err <= tol, "{tag} {what}: {err:e}");
    }
}

/// In f32 the merged layer's loss and gradients are the layer's (the sums
/// associate differently: within 1e-5 of the largest value), and `x`'s
/// gradient is not doubled: the adapter's products pass it nothing.
#[test]
fn a_lora_layer_with_its_update_merged_for_the_backward_agrees_with_the_layer() {
    let dev = cpu();
    let want = layer(&dev, MatmulPrecision::Highest, false, false).unwrap();
    let got = layer(&dev, MatmulPrecision::Highest, true, false).unwrap();
    assert_close("f32", &got, &want, 1e-5);
}

/// Under bf16 casts (CUDA) the merged layer agrees with the f32 layer within
/// bf16's precision, as the layer under casts does; the CPU refuses the graph.
#[test]
fn a_merged_lora_layer_under_bf16_casts_agrees_with_f32_products() {
    let dev = cpu();
    let got = layer(&dev, MatmulPrecision::Medium, true, true);
    if dev.is_cpu() {
        let e = got.expect_err("the CPU refuses bf16 products").to_string();
        assert!(e.contains("runs on none of"), "{e}");
        return;
    }
    let want = layer(&dev, MatmulPrecision::Highest, false, false).unwrap();
    assert_close("bf16", &got.unwrap(), &want, 2e-2);
}

/// `detach` passes no gradient: `Σ x ⊙ detach(x)` has the gradient `x`, not `2x`.
#[test]
fn a_detached_tensor_passes_no_gradient() {
    let dev = cpu();
    let ctx = Context::new(64).unwrap();
    let x = ctx.new_tensor(DType::F32, &[7, 3]).unwrap();
    ctx.set_param(x).unwrap();
    ctx.allocate(&dev).unwrap();
    let v = uniform(&mut rng(6601), 21, -1.0, 1.0);
    x.write(&v).unwrap();
    let d = ctx.detach(x).unwrap();
    assert!(d.is_detached() && !x.is_detached() && d.ne() == x.ne());
    let loss = ctx.sum(ctx.mul(x, d).unwrap()).unwrap().set_output();
    let mut graph = Graph::with_grads(&ctx, 64).unwrap();
    graph.expand(loss).unwrap();
    graph.build_backward(loss).unwrap();
    let gx = graph.grad(x).unwrap().set_output();
    graph.allocate(&backends(&dev)).unwrap();
    graph.compute().unwrap();
    assert_eq!(gx.read_f32().unwrap(), v);
    // a detached loss is refused, as PyTorch refuses the backward of a tensor without grad_fn
    let loss = ctx.detach(ctx.sum(ctx.mul(x, x).unwrap()).unwrap()).unwrap();
    let mut graph = Graph::with_grads(&ctx, 64).unwrap();
    let e = graph.build_backward(loss).unwrap_err().to_string();
    assert!(e.contains("the loss is detached"), "{e}");
}

/// A backward weight must be a constant or detached, of the weight's shape.
#[test]
fn a_backward_weight_is_a_detached_matrix_of_the_weights_shape() {
    let ctx = Context::new(64).unwrap();
    let w = ctx.new_tensor(DType::F32, &[8, 4]).unwrap();
    let x = ctx.new_tensor(DType::F32, &[8, 5]).unwrap();
    let p = ctx.new_tensor(DType::F32, &[8, 4]).unwrap();
    ctx.set_param(p).unwrap();
    let sum = ctx.add(w, p).unwrap();
    let e = ctx.mul_mat_backward_weight(w, x, sum).unwrap_err().to_string();
    assert!(e.contains("must be detached"), "{e}");
    let e = ctx.mul_mat_backward_weight(w, x, p).unwrap_err().to_string();
    assert!(e.contains("must be detached"), "{e}");
    let e = ctx.mul_mat_backward_weight(w, x, ctx.detach(x).unwrap()).unwrap_err().to_string();
    assert!(e.contains("of the weight's shape [8, 4, 1, 1]"), "{e}");
    let e = ctx.mul_mat_backward_weight(w, x, ctx.cast(w, DType::F16).unwrap()).unwrap_err().to_string();
    assert!(e.contains("must be detached"), "{e}");
    let e = ctx.mul_mat_backward_weight(w, x, ctx.detach(ctx.cast(w, DType::F16).unwrap()).unwrap()).unwrap_err().to_string();
    assert!(e.contains("of the weight's type f32"), "{e}");
    let y = ctx.mul_mat_backward_weight(w, x, ctx.detach(sum).unwrap()).unwrap();
    assert_eq!(y.ne(), [4, 5, 1, 1]);
    assert_eq!(y.srcs().len(), 2, "a backward weight is no source of the forward's product");
}

/// An adapter's input that is a recomputed activation (patch 0062) read through
/// `detach` is computed again for the adapter's weight gradient too, as it is
/// for the product's: `y = W2·gelu(W1·x) + B·(A·detach(gelu(W1·x)))` gives the
/// same loss and gradients bit for bit with and without the flag, and with it
/// the graph holds the GELU three times (the forward's, and one for each
/// weight gradient that reads it) instead of keeping it for the backward.
#[test]
fn a_detached_recomputed_activation_is_computed_again() {
    let run = |again: bool| {
        let dev = cpu();
        let ctx = Context::new(256).unwrap();
        let (n, f, p, r) = (32i64, 64i64, 48i64, 4i64);
        let shapes = [[n, p], [n, f], [f, n], [f, r], [r, n], [n, p]];
        let ts: Vec<_> = shapes.iter().map(|s| ctx.new_tensor(DType::F32, s).unwrap()).collect();
        let (x, w1, w2, a, b, rt) = (ts[0], ts[1], ts[2], ts[3], ts[4], ts[5]);
        for &t in &ts[..5] {
            ctx.set_param(t).unwrap();
        }
        ctx.allocate(&dev).unwrap();
        let mut g = rng(6602);
        for t in &ts {
            t.write(&uniform(&mut g, t.nelements() as usize, -0.3, 0.3)).unwrap();
        }
        let act = ctx.gelu(ctx.mul_mat(w1, x).unwrap()).unwrap(); // [f, p]
        let act = if again { ctx.recompute_in_backward(act).unwrap() } else { act };
        let term = ctx.mul_mat(b, ctx.mul_mat(a, ctx.detach(act).unwrap()).unwrap()).unwrap(); // [n, p]
        let w_back = merged_weight(&ctx, ctx.detach(w2).unwrap(), a, b, 1.0); // [f, n]
        let y = ctx.add(term, ctx.mul_mat_backward_weight(w2, act, w_back).unwrap()).unwrap();
        let loss = ctx.sum(ctx.mul(y, rt).unwrap()).unwrap().set_output();
        let mut graph = Graph::with_grads(&ctx, 256).unwrap();
        graph.expand(loss).unwrap();
        graph.build_backward(loss).unwrap();
        let gelus = graph.nodes().iter().filter(|t| t.op() == ggml_rs::sys::GGML_OP_UNARY).count();
        (loss_and_grads(&mut graph, &dev, loss, &[x, w1, w2, a, b]).unwrap(), gelus)
    };
    let (kept, again) = (run(false), run(true));
    assert_eq!(again.0, kept.0, "bit for bit");
    assert_eq!((kept.1, again.1), (1, 3));
}
