//! The finite-difference gradient check shared by `grad.rs` and `kernels.rs`
//! (see `grad.rs` for the method and the error measure).
#![allow(dead_code)]

use super::*;
use ggml_rs::{Context, DType, Graph, MulMatGrad, Tensor};
use rand::rngs::StdRng;
use rand::Rng;

pub const TOL: f64 = 1e-2;
pub const H: f64 = 1e-5;
pub const SAMPLE: usize = 256;

/// A differentiable input: shape (ggml `ne`) and values.
pub struct Param {
    pub ne: Vec<i64>,
    pub data: Vec<f32>,
}

pub fn param(ne: &[i64], data: Vec<f32>) -> Param {
    assert_eq!(numel(ne), data.len());
    Param { ne: ne.to_vec(), data }
}

pub fn rand_param(r: &mut StdRng, ne: &[i64], lo: f32, hi: f32) -> Param {
    param(ne, uniform(r, numel(ne), lo, hi))
}

/// `max |g − g_ref| / max(|g_ref|, 1e-3·max|g_ref|, 1e-6)` (see the module docs).
pub fn grad_err(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let floor = (1e-3 * scale).max(1e-6);
    got.iter()
        .zip(want)
        .map(|(&a, &b)| {
            let d = (a as f64 - b).abs();
            if d.is_nan() {
                f64::INFINITY
            } else {
                d / b.abs().max(floor)
            }
        })
        .fold(0.0, f64::max)
}

/// Build `y = build(ctx, params)` in ggml, differentiate `L = Σ y ⊙ R`, and
/// compare every parameter's gradient with central differences of
/// `forward64` (the same op in f64, output flat in ggml order), on the test device. `build` must
/// create any constant leaves (indices, masks) before its first op. Returns
/// the largest error.
pub fn grad_check(
    name: &str,
    seed: u64,
    params: &[Param],
    build: &dyn for<'a> Fn(&'a Context, &[Tensor<'a>]) -> Tensor<'a>,
    forward64: &dyn Fn(&[Vec<f64>]) -> Vec<f64>,
) -> f64 {
    grad_check_with(MulMatGrad::for_backend(&cpu()), name, seed, params, build, forward64)
}

/// [`grad_check`] with the matrix products differentiated as `mode` says.
pub fn grad_check_with(
    mode: MulMatGrad,
    name: &str,
    seed: u64,
    params: &[Param],
    build: &dyn for<'a> Fn(&'a Context, &[Tensor<'a>]) -> Tensor<'a>,
    forward64: &dyn Fn(&[Vec<f64>]) -> Vec<f64>,
) -> f64 {
    let mut r = rng(seed ^ 0x9e37_79b9);
    let cpu = cpu();
    let ctx = Context::new(8192).unwrap();
    let leaves: Vec<Tensor<'_>> = params
        .iter()
        .enumerate()
        .map(|(i, p)| {
            let t = ctx.new_tensor(DType::F32, &p.ne).unwrap().set_name(&format!("x{i}")).unwrap();
            ctx.set_param(t).unwrap();
            t
        })
        .collect();
    ctx.allocate(&cpu).unwrap();
    for (t, p) in leaves.iter().zip(params) {
        t.write(&p.data).unwrap();
    }
    let y = build(&ctx, &leaves);
    let y = if y.is_contiguous() { y } else { ctx.cont(y).unwrap() };
    let rv = uniform(&mut r, y.nelements() as usize, -1.0, 1.0);
    let rt = ctx.new_tensor(DType::F32, &y.ne()).unwrap().set_input();
    let loss = ctx.sum(ctx.mul(y, rt).unwrap()).unwrap().set_output();
    let mut g = Graph::with_grads(&ctx, 16384).unwrap();
    g.set_mul_mat_grad(mode);
    g.expand(loss).unwrap();
    g.build_backward(loss).unwrap();
    let grads: Vec<Tensor<'_>> = leaves.iter().map(|&p| g.grad(p).expect("every parameter reaches the loss").set_output()).collect();
    g.allocate(&backends(&cpu)).unwrap();
    rt.write(&rv).unwrap();
    g.compute().unwrap();
    let got_loss = loss.scalar().unwrap();
    let got: Vec<Vec<f32>> = grads.iter().map(|t| t.read::<f32>().unwrap()).collect();

    let r64 = f64s(&rv);
    let loss64 = |xs: &[Vec<f64>]| -> f64 {
        let y = forward64(xs);
        assert_eq!(y.len(), r64.len(), "{name}: reference output has the wrong size");
        y.iter().zip(&r64).map(|(a, b)| a * b).sum()
    };
    let mut xs: Vec<Vec<f64>> = params.iter().map(|p| f64s(&p.data)).collect();
    let want_loss = loss64(&xs);
    let loss_err = (got_loss as f64 - want_loss).abs() / want_loss.abs().max(1.0);
    assert!(loss_err < 1e-4, "{name}: forward loss {got_loss} vs f64 {want_loss}");

    let mut worst = 0.0f64;
    for (i, p) in params.iter().enumerate() {
        let n = p.data.len();
        let idx: Vec<usize> = if n <= SAMPLE { (0..n).collect() } else { (0..SAMPLE).map(|_| r.random_range(0..n)).collect() };
        let mut want = Vec::with_capacity(idx.len());
        for &j in &idx {
            let x0 = xs[i][j];
            xs[i][j] = x0 + H;
            let lp = loss64(&xs);
            xs[i][j] = x0 - H;
            let lm = loss64(&xs);
            xs[i][j] = x0;
            want.push((lp - lm) / (2.0 * H));
        }
        let got_i: Vec<f32> = idx.iter().map(|&j| got[i][j]).collect();
        let e = grad_err(&got_i, &want);
        println!("{name}: ∂L/∂x{i} {:?}: max rel err {e:.3e} ({} of {n} coordinates)", p.ne, idx.len());
        assert!(
            e < TOL,
            "{name}: gradient of x{i} off by {e:e}\n got  {:?}\n want {:?}",
            &got_i[..got_i.len().min(12)],
            &want[..want.len().min(12)]
        );
        worst = worst.max(e);
    }
    worst
}

/// A random shape with dims in the given inclusive ranges.
pub fn shape(r: &mut StdRng, ranges: &[(i64, i64)]) -> Vec<i64> {
    ranges.iter().map(|&(lo, hi)| r.random_range(lo..=hi)).collect()
}

pub fn u4(ne: &[i64]) -> [usize; 4] {
    ne4(ne)
}
