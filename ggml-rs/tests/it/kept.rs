//! `Context::cast_kept` (toy-rs patch 0061): a frozen weight's bf16 copy that
//! the backward reads as it is, and `Graph::hoist_param_casts` making those
//! copies first, grouped by source type (CUDA: one launch a type).

use crate::common::{backends, cpu, rng, uniform};
use ggml_rs::{sys, Context, DType, Graph, MulMatGrad};

/// The stored types of the chain's six frozen weights, two of each type, so
/// that each type's kept casts form a run.
const TYPES: [DType; 6] = [DType::Q4_1, DType::Q8_0, DType::F16, DType::Q4_1, DType::F16, DType::Q8_0];

/// What one build of the chain gives.
struct Chain {
    /// The loss, then the gradient of `x`.
    values: Vec<Vec<f32>>,
    /// The bf16 bytes of each forward cast, in the order of `TYPES`.
    casts: Vec<Vec<u8>>,
    /// CPY nodes in the graph.
    n_casts: usize,
    /// The source types of the first nodes after the parameters, as many as `TYPES`.
    first: Vec<sys::ggml_type>,
}

/// `h = W6·(…(W1·x))` over the frozen weights `raws` stored as `TYPES`, each cast
/// to bf16 for its product (`cast_kept` when `kept`, then hoisted), the loss
/// `Σ h ⊙ r` and the gradient of `x`, on the test device.
fn chain(raws: &[Vec<u8>], x: &[f32], rv: &[f32], (n, p): (i64, i64), kept: bool) -> Chain {
    let dev = cpu();
    let ctx = Context::new(1024).unwrap();
    let ws: Vec<_> = TYPES.iter().map(|&t| ctx.new_tensor(t, &[n, n]).unwrap()).collect();
    let (xt, rt) = (ctx.new_tensor(DType::F32, &[n, p]).unwrap(), ctx.new_tensor(DType::F32, &[n, p]).unwrap());
    ctx.set_param(xt).unwrap();
    ctx.allocate(&dev).unwrap();
    for (w, raw) in ws.iter().zip(raws) {
        w.write_bytes(raw).unwrap();
    }
    xt.write(x).unwrap();
    rt.write(rv).unwrap();
    let mut h = xt;
    let mut casts = Vec::new();
    for &w in &ws {
        let c = if kept { ctx.cast_kept(w, DType::BF16) } else { ctx.cast(w, DType::BF16) }.unwrap().set_output();
        assert_eq!(c.is_kept(), kept);
        casts.push(c);
        h = ctx.mul_mat(c, h).unwrap(); // [n, p]
    }
    let loss = ctx.sum(ctx.mul(h, rt).unwrap()).unwrap().set_output();
    let mut g = Graph::with_grads(&ctx, 1024).unwrap();
    g.set_mul_mat_grad(MulMatGrad::for_backend(&dev));
    g.expand(loss).unwrap();
    g.build_backward(loss).unwrap();
    let gx = g.grad(xt).unwrap().set_output();
    if kept {
        assert_eq!(g.hoist_param_casts().unwrap(), TYPES.len(), "the kept casts move");
    }
    let nodes = g.nodes();
    let n_casts = nodes.iter().filter(|t| t.op() == sys::GGML_OP_CPY).count();
    let first = nodes.iter().filter(|t| !t.is_param()).take(TYPES.len()).map(|t| t.srcs()[0].dtype().to_raw()).collect();
    g.allocate(&backends(&dev)).unwrap();
    g.compute().unwrap();
    assert!(g.cpu_fallbacks().is_empty(), "{:?}", g.cpu_fallbacks());
    Chain {
        values: vec![loss.read_f32().unwrap(), gx.read_f32().unwrap()],
        casts: casts.iter().map(|c| c.read_bytes().unwrap()).collect(),
        n_casts,
        first,
    }
}

/// Kept casts: one cast a weight instead of two (the backward reads the
/// forward's copy), the copies first in the graph and grouped by source type,
/// and the loss, the gradient of `x` and every copy bit for bit those of the
/// per-product casts (CUDA: the list launch against the one-tensor converters).
#[test]
fn kept_casts_run_once_first_by_type_and_change_no_value() {
    let mut r = rng(7700);
    let (n, p) = (256i64, 24i64);
    // Weights of scale 1/√n keep the chain's activations near 1.
    let raws: Vec<Vec<u8>> =
        TYPES.iter().map(|t| t.quantize(&uniform(&mut r, (n * n) as usize, -1.7 / 16.0, 1.7 / 16.0), n as usize).unwrap()).collect();
    let x = uniform(&mut r, (n * p) as usize, -1.0, 1.0);
    let rv = uniform(&mut r, (n * p) as usize, -1.0, 1.0);
    let per_product = chain(&raws, &x, &rv, (n, p), false);
    let kept = chain(&raws, &x, &rv, (n, p), true);
    assert_eq!(per_product.n_casts, 2 * TYPES.len(), "cast again for each gradient of a product's input");
    assert_eq!(kept.n_casts, TYPES.len(), "one cast a weight");
    let mut sorted = kept.first.clone();
    sorted.sort();
    assert_eq!(kept.first, sorted, "the kept casts first, grouped by type");
    for (what, (a, b)) in ["loss", "grad x"].iter().zip(kept.values.iter().zip(&per_product.values)) {
        assert!(a.iter().all(|v| v.is_finite()), "{what}");
        assert!(a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()), "{what} changed");
    }
    for (i, (a, b)) in kept.casts.iter().zip(&per_product.casts).enumerate() {
        assert_eq!(a, b, "cast {i} ({}) changed", TYPES[i]);
    }
}
