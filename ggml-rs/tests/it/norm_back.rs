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
