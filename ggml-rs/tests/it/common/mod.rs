//! Helpers shared by the integration tests: seeded data, graph evaluation on
//! the CPU, error measures and `ne`-order indexing.
#![allow(dead_code)]

pub mod gradcheck;
pub mod reference;

use ggml_rs::{Backend, Context, DType, Graph, Tensor};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

/// A deterministic generator for test data.
pub fn rng(seed: u64) -> StdRng {
    StdRng::seed_from_u64(seed)
}

/// `n` values uniform in `[lo, hi)`.
pub fn uniform(rng: &mut StdRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(lo..hi)).collect()
}

/// `n` values with `lo ≤ |x| < hi` and a random sign (kept away from zero).
pub fn away_from_zero(rng: &mut StdRng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n)
        .map(|_| {
            let m = rng.random_range(lo..hi);
            if rng.random_bool(0.5) {
                m
            } else {
                -m
            }
        })
        .collect()
}

/// The backend the tests run on: the CPU with one thread (the test harness
/// already runs tests in parallel on a small machine, and one thread keeps
/// results bit-reproducible), or the device named by `TOY_TEST_DEVICE`
/// (`cuda`, `cuda:0`, `metal`; with a build that has or loads that backend),
/// with f32 matrix products at full precision.
/// Leaves are allocated on it and graphs run on it (CPU last for fallbacks).
pub fn cpu() -> Backend {
    match std::env::var("TOY_TEST_DEVICE") {
        Ok(d) if !d.is_empty() && d != "cpu" => {
            ggml_rs::backend::load_default_backends();
            let b = Backend::by_name(&d).unwrap_or_else(|e| panic!("TOY_TEST_DEVICE={d}: {e}"));
            // The references are f64: compare with f32 products, not TF32.
            b.set_matmul_precision(ggml_rs::MatmulPrecision::Highest);
            b
        }
        _ => {
            let b = Backend::cpu().expect("CPU backend");
            b.set_n_threads(1);
            b
        }
    }
}

/// The scheduler's backend list for `dev`: `[dev]` when it is the CPU, else `[dev, CPU]`.
pub fn backends(dev: &Backend) -> Vec<Backend> {
    if dev.is_cpu() {
        vec![dev.clone()]
    } else {
        vec![dev.clone(), Backend::cpu().expect("CPU backend")]
    }
}

/// Number of elements of a shape.
pub fn numel(ne: &[i64]) -> usize {
    ne.iter().product::<i64>() as usize
}

/// `ne` padded with 1s to four dimensions.
pub fn ne4(ne: &[i64]) -> [usize; 4] {
    let mut out = [1usize; 4];
    for (o, &n) in out.iter_mut().zip(ne) {
        *o = n as usize;
    }
    out
}

/// Flat index of element `(i0, i1, i2, i3)` of a contiguous tensor of shape `ne` (ggml order).
pub fn at(ne: [usize; 4], i0: usize, i1: usize, i2: usize, i3: usize) -> usize {
    i0 + ne[0] * (i1 + ne[1] * (i2 + ne[2] * i3))
}

/// Calls `f(i0, i1, i2, i3)` for every element of `ne`, in memory order.
pub fn for_each(ne: [usize; 4], mut f: impl FnMut(usize, usize, usize, usize)) {
    for i3 in 0..ne[3] {
        for i2 in 0..ne[2] {
            for i1 in 0..ne[1] {
                for i0 in 0..ne[0] {
                    f(i0, i1, i2, i3);
                }
            }
        }
    }
}

/// An f32 tensor of shape `ne` with data, allocated at once in a CPU buffer of
/// `ctx`. Create such leaves before any op: [`Context::allocate`] also places
/// op results that exist at the time of the call.
pub fn leaf<'a>(ctx: &'a Context, cpu: &Backend, ne: &[i64], data: &[f32]) -> Tensor<'a> {
    let t = ctx.new_tensor(DType::F32, ne).unwrap();
    ctx.allocate(cpu).unwrap();
    t.write(data).unwrap();
    t
}

/// A [`leaf`] marked as a parameter (`Context::set_param`).
pub fn param_leaf<'a>(ctx: &'a Context, cpu: &Backend, ne: &[i64], data: &[f32]) -> Tensor<'a> {
    let t = leaf(ctx, cpu, ne, data);
    ctx.set_param(t).unwrap();
    t
}

/// Max |got − want| within `tol` of want's largest value (printed, for the
/// closing notes' figures).
pub fn assert_within(what: &str, got: &[f32], want: &[f64], tol: f64) {
    let scale = want.iter().fold(1e-30f64, |s, v| s.max(v.abs()));
    let err = got.iter().zip(want).fold(0.0f64, |e, (&g, w)| e.max((g as f64 - w).abs()));
    println!("{what}: max err / scale {:.3e}", err / scale);
    assert!(err <= tol * scale, "{what}: {err:e} of {scale:e}");
}

/// An i32 leaf, as [`leaf`].
pub fn leaf_i32<'a>(ctx: &'a Context, cpu: &Backend, ne: &[i64], data: &[i32]) -> Tensor<'a> {
    let t = ctx.new_tensor(DType::I32, ne).unwrap();
    ctx.allocate(cpu).unwrap();
    t.write(data).unwrap();
    t
}

/// Compute `outs` in one forward graph on the test device and read them as f32.
pub fn eval<'a>(ctx: &'a Context, outs: &[Tensor<'a>]) -> Vec<Vec<f32>> {
    eval_on(&cpu(), ctx, outs)
}

/// [`eval`] on the backend `dev` (CPU last for fallbacks).
pub fn eval_on<'a>(dev: &Backend, ctx: &'a Context, outs: &[Tensor<'a>]) -> Vec<Vec<f32>> {
    let mut g = Graph::new(ctx, 1024).unwrap();
    for &o in outs {
        o.set_output();
        g.expand(o).unwrap();
    }
    g.allocate(&backends(dev)).unwrap();
    g.compute().unwrap();
    outs.iter().map(|o| o.read_f32().unwrap()).collect()
}

/// Allocate `graph` (its backward built) on `dev`, compute it, and read the
/// loss and then the gradient of each of `params`; checks that nothing fell
/// back to the CPU. `Err` is the allocation's error (a backend that refuses
/// an op).
pub fn loss_and_grads<'a>(graph: &mut Graph<'a>, dev: &Backend, loss: Tensor<'a>, params: &[Tensor<'a>]) -> ggml_rs::Result<Vec<Vec<f32>>> {
    let grads: Vec<_> = params.iter().map(|&t| graph.grad(t).unwrap().set_output()).collect();
    graph.allocate(&backends(dev))?;
    graph.compute().unwrap();
    assert!(graph.cpu_fallbacks().is_empty(), "{:?}", graph.cpu_fallbacks());
    let mut out = vec![loss.read_f32().unwrap()];
    out.extend(grads.iter().map(|t| t.read_f32().unwrap()));
    Ok(out)
}

/// Largest elementwise relative error `|a − b| / max(1, |b|)` of `got` against
/// `want` (exact matches, infinities included, count as 0; a NaN on either
/// side as infinite). Dividing by `max(1, |b|)` keeps values near 0 from
/// inflating the measure.
pub fn max_rel_err(got: &[f32], want: &[f64]) -> f64 {
    assert_eq!(got.len(), want.len(), "length mismatch");
    got.iter()
        .zip(want)
        .map(|(&a, &b)| {
            let a = a as f64;
            if a == b {
                0.0
            } else if a.is_nan() || b.is_nan() || a.is_infinite() || b.is_infinite() {
                f64::INFINITY
            } else {
                (a - b).abs() / b.abs().max(1.0)
            }
        })
        .fold(0.0, f64::max)
}

/// Assert `max_rel_err(got, want) ≤ tol` and print the measured error.
pub fn check(what: &str, got: &[f32], want: &[f64], tol: f64) -> f64 {
    let e = max_rel_err(got, want);
    println!("{what}: max rel err {e:.3e} over {} values", got.len());
    assert!(
        e <= tol,
        "{what}: max relative error {e:e} > {tol:e}\n got  {:?}\n want {:?}",
        &got[..got.len().min(16)],
        &want[..want.len().min(16)]
    );
    e
}

/// The values as f64.
pub fn f64s(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| x as f64).collect()
}
