//! The backward of a norm with gain (and bias) as one node (patch 0047,
//! `GGML_OP_NORM_GAIN_BACK`): `h + norm(h)·g (+ b)` with `h = 1.5·x`, the shape
//! of a pre-norm block's residual stream, against finite differences of an f64
//! forward (`common::gradcheck`), on the test device; rows enough for several
//! parts (512 of them at most) of uneven sizes. And which graphs get the node:
//! the sum's gradient of `h` is added in it, and rows too wide for it
//! (`n0·(gains + biases) > 8192`) keep the composite backward.

use crate::common::gradcheck::*;
use crate::common::reference as rf;
use crate::common::*;
use ggml_rs::{sys, Context, Graph, Tensor};
use rand::Rng;

const EPS: f32 = 1e-5;

/// `h + norm(h)·g (+ b)`, `h = 1.5·x`: LayerNorm with gain and bias when
/// `centered`, else RMSNorm with gain.
fn residual_norm<'a>(ctx: &'a Context, x: &[Tensor<'a>], centered: bool) -> Tensor<'a> {
    let h = ctx.scale(x[0], 1.5).unwrap();
    let n = if centered { ctx.norm_gain_bias(h, x[1], x[2], EPS) } else { ctx.rms_norm_gain(h, x[1], EPS) };
    ctx.add(h, n.unwrap()).unwrap()
}

fn residual_norm64(xs: &[Vec<f64>], n0: usize, centered: bool) -> Vec<f64> {
    let h: Vec<f64> = xs[0].iter().map(|v| 1.5 * v).collect();
    let row = |r: &[f64]| if centered { rf::norm_row(r, EPS as f64) } else { rf::rms_norm_row(r, EPS as f64) };
    let n = rf::rows(&h, n0, row);
    n.iter().enumerate().map(|(i, v)| h[i] + v * xs[1][i % n0] + if centered { xs[2][i % n0] } else { 0.0 }).collect()
}

#[test]
fn norm_gain_backward_with_the_residual_gradient() {
    for (seed, centered, n0, rows) in [(0u64, false, 0i64, 700i64), (1, true, 0, 700), (2, false, 576, 37), (3, true, 768, 5)] {
        let mut r = rng(4700 + seed);
        let n0 = if n0 == 0 { r.random_range(2..=40) } else { n0 };
        let x: Vec<f32> = uniform(&mut r, (n0 * rows) as usize, -2.0, 2.0).into_iter().map(|v| v + 0.3).collect();
        let mut params = vec![param(&[n0, rows], x), rand_param(&mut r, &[n0], -1.5, 1.5)];
        if centered {
            params.push(rand_param(&mut r, &[n0], -1.0, 1.0));
        }
        let name = format!("{} [{n0}, {rows}]", if centered { "h + norm_gain_bias(h)" } else { "h + rms_norm_gain(h)" });
        grad_check(&name, seed, &params, &|ctx, x| residual_norm(ctx, x, centered), &|xs| residual_norm64(xs, n0 as usize, centered));
    }
}

/// The backward graph of `Σ r ⊙ (h + norm(h)·g (+ b))`: its NORM_GAIN_BACK
/// nodes, and whether any reads a residual gradient (src[3]); RMS_NORM_BACK
/// nodes (the composite backward).
fn backward_nodes(n0: i64, centered: bool) -> (usize, bool, usize) {
    let ctx = Context::new(512).unwrap();
    let mut ps = vec![ctx.new_tensor(ggml_rs::DType::F32, &[n0, 3]).unwrap(), ctx.new_tensor(ggml_rs::DType::F32, &[n0]).unwrap()];
    if centered {
        ps.push(ctx.new_tensor(ggml_rs::DType::F32, &[n0]).unwrap());
    }
    for p in &ps {
        ctx.set_param(*p).unwrap();
    }
    let y = residual_norm(&ctx, &ps, centered);
    let loss = ctx.sum(y).unwrap().set_output();
    let mut g = Graph::with_grads(&ctx, 512).unwrap();
    g.expand(loss).unwrap();
    g.build_backward(loss).unwrap();
    let fused: Vec<_> = g.nodes().into_iter().filter(|t| t.op() == sys::GGML_OP_NORM_GAIN_BACK).collect();
    let with_r = fused.iter().any(|t| t.srcs().len() == 4);
    (fused.len(), with_r, g.nodes().iter().filter(|t| t.op() == sys::GGML_OP_RMS_NORM_BACK).count())
}

#[test]
fn which_norms_get_the_fused_backward() {
    assert_eq!(backward_nodes(64, false), (1, true, 0), "RMSNorm");
    assert_eq!(backward_nodes(64, true), (1, true, 0), "LayerNorm");
    // 8192 values of partial sums a row at most: n0 = 8192 for RMSNorm's gain,
    // 4096 for LayerNorm's gain and bias
    assert_eq!(backward_nodes(8192, false), (1, true, 0), "RMSNorm, 8192");
    assert_eq!(backward_nodes(8193, false), (0, false, 1), "RMSNorm, 8193");
    assert_eq!(backward_nodes(4097, true), (0, false, 1), "LayerNorm, 4097");
}

/// The gradients of `W0`, `x` and `g` of `Σ r ⊙ (W1·rms_norm_gain(W0·x, g))`
/// computed on `dev` with bf16 products (the CPU ignores the setting: f32),
/// the products' gradients as `mode` says.
fn norm_between_products(dev: &ggml_rs::Backend, seed: u64, mode: ggml_rs::MulMatGrad) -> Vec<Vec<f32>> {
    let (k, d, n, m) = (256usize, 576usize, 512usize, 32usize);
    let mut r = rng(seed);
    dev.set_matmul_precision(ggml_rs::MatmulPrecision::Medium);
    let ctx = Context::new(256).unwrap();
    let param = |ne: &[usize], lo: f32, hi: f32, r: &mut _| {
        let ne: Vec<i64> = ne.iter().map(|&v| v as i64).collect();
        param_leaf(&ctx, dev, &ne, &uniform(r, ne.iter().product::<i64>() as usize, lo, hi))
    };
    let (x, w0, g) = (param(&[k, n], -1.0, 1.0, &mut r), param(&[k, d], -0.2, 0.2, &mut r), param(&[d], 0.5, 1.5, &mut r));
    let w1 = leaf(&ctx, dev, &[d as i64, m as i64], &uniform(&mut r, d * m, -0.2, 0.2));
    let rt = leaf(&ctx, dev, &[m as i64, n as i64], &uniform(&mut r, m * n, -1.0, 1.0));
    let h = ctx.rms_norm_gain(ctx.mul_mat(w0, x).unwrap(), g, EPS).unwrap();
    let loss = ctx.sum(ctx.mul(ctx.mul_mat(w1, h).unwrap(), rt).unwrap()).unwrap().set_output();
    let mut graph = Graph::with_grads(&ctx, 512).unwrap();
    graph.set_mul_mat_grad(mode);
    graph.expand(loss).unwrap();
    graph.build_backward(loss).unwrap();
    assert!(graph.nodes().iter().any(|t| t.op() == sys::GGML_OP_NORM_GAIN_BACK), "a NORM_GAIN_BACK node");
    loss_and_grads(&mut graph, dev, loss, &[w0, x, g]).unwrap().split_off(1)
}

/// Patch 0077: under bf16 products on CUDA, NORM_GAIN_BACK writes its result's
/// bf16 copy too, and the OUT_PRODs of the product before the norm read that
/// copy instead of converting the gradient (here both: `[256, 576]` and
/// `[256, 512]` results). The gradients of `W0`, `x` and `g` on the test
/// device (OUT_PROD backward) against the CPU's f32 with the products'
/// gradients as `mul_mat`s of transposed operands (patch 0003, another
/// path), within 1e-2 of each tensor's largest value. (That the copy is read
/// shows in the timing, `bench/results.md` stop 62, not here.)
#[test]
fn a_norm_gradient_read_by_bf16_products() {
    let got = norm_between_products(&cpu(), 7701, ggml_rs::MulMatGrad::OutProd);
    let want = norm_between_products(&ggml_rs::Backend::cpu().unwrap(), 7701, ggml_rs::MulMatGrad::MulMat);
    for (name, (a, w)) in ["W0", "x", "g"].iter().zip(got.iter().zip(&want)) {
        assert_within(&format!("d{name}"), a, &f64s(w), 1e-2);
    }
}
