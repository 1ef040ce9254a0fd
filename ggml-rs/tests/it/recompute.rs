//! `Context::recompute_in_backward` (toy-rs patch 0062): an activation that a
//! product's weight gradient computes again instead of keeping it from the
//! forward. The step is the same bit for bit, the graph holds the op once more,
//! and the compute buffer is smaller by about the activation.

use crate::common::{backends, cpu, rng, uniform};
use ggml_rs::{sys, Context, DType, Graph};

/// What one build of the feed-forward gives.
struct Ffn {
    /// The loss, then the gradients of `x`, `w1`, `w3` and `w2`.
    values: Vec<Vec<f32>>,
    /// Nodes of the activation's op (GELU or GLU).
    n_act: usize,
    /// Bytes of the graph's compute buffers.
    bytes: usize,
}

/// Layers of the feed-forward.
const LAYERS: usize = 3;

/// `y = W2·act(W1·x[, W3·x])` applied `LAYERS` times (the same weights), the loss `Σ y ⊙ r` and every gradient, with
/// `act` GELU (`glu` false) or a split SwiGLU (`glu` true), flagged with
/// `recompute_in_backward` when `again`. `x` `[n, p]`, `W1`/`W3` `[n, f]`, `W2` `[f, n]`.
fn ffn((n, f, p): (i64, i64, i64), glu: bool, again: bool) -> Ffn {
    let dev = cpu();
    let ctx = Context::new(256).unwrap();
    let mut r = rng(6200);
    let shapes = [[n, p], [n, f], [n, f], [f, n], [n, p]];
    let ts: Vec<_> = shapes.iter().map(|s| ctx.new_tensor(DType::F32, s).unwrap()).collect();
    let (x, w1, w3, w2, rt) = (ts[0], ts[1], ts[2], ts[3], ts[4]);
    for &t in &ts[..4] {
        ctx.set_param(t).unwrap();
    }
    ctx.allocate(&dev).unwrap();
    for t in &ts {
        let bound = 1.0 / (t.ne()[0] as f32).sqrt();
        t.write(&uniform(&mut r, t.nelements() as usize, -bound, bound)).unwrap();
    }
    let mut y = x;
    for _ in 0..LAYERS {
        let a = ctx.mul_mat(w1, y).unwrap(); // [f, p]
        let act = if glu { ctx.swiglu_split(a, ctx.mul_mat(w3, y).unwrap()) } else { ctx.gelu(a) }.unwrap();
        let act = if again { ctx.recompute_in_backward(act).unwrap() } else { act };
        assert_eq!(act.is_recomputed(), again);
        y = ctx.mul_mat(w2, act).unwrap(); // [n, p]
    }
    let loss = ctx.sum(ctx.mul(y, rt).unwrap()).unwrap().set_output();
    let mut g = Graph::with_grads(&ctx, 256).unwrap();
    g.expand(loss).unwrap();
    g.build_backward(loss).unwrap();
    let grads: Vec<_> = [x, w1, w3, w2].iter().filter_map(|&t| g.grad(t)).map(|t| t.set_output()).collect();
    assert_eq!(grads.len(), if glu { 4 } else { 3 }, "w3 has a gradient only in the GLU");
    let op = if glu { sys::GGML_OP_GLU } else { sys::GGML_OP_UNARY };
    let n_act = g.nodes().iter().filter(|t| t.op() == op).count();
    g.allocate(&backends(&dev)).unwrap();
    g.compute().unwrap();
    let bytes = g.buffer_sizes().into_iter().map(|(_, s)| s).sum();
    let mut values = vec![loss.read_f32().unwrap()];
    values.extend(grads.iter().map(|t| t.read_f32().unwrap()));
    Ffn { values, n_act, bytes }
}

#[test]
fn a_recomputed_activation_gives_the_same_gradients_in_less_memory() {
    let shape = (64, 512, 256);
    for glu in [false, true] {
        let kept = ffn(shape, glu, false);
        let again = ffn(shape, glu, true);
        assert_eq!(again.values, kept.values, "glu {glu}: bit for bit");
        assert_eq!((kept.n_act, again.n_act), (LAYERS, 2 * LAYERS), "glu {glu}: the op once more a layer");
        // a layer's activation is [f, p] f32 (512 KiB); the last layer's recomputed copy
        // is alive at the backward's peak
        let act = (shape.1 * shape.2 * 4) as usize;
        assert!(again.bytes + (LAYERS - 1) * act <= kept.bytes, "glu {glu}: {} bytes, {} kept", again.bytes, kept.bytes);
    }
}

#[test]
fn only_a_unary_or_glu_result_is_recomputed() {
    let ctx = Context::new(16).unwrap();
    let (w, x) = (ctx.new_tensor(DType::F32, &[4, 3]).unwrap(), ctx.new_tensor(DType::F32, &[4, 2]).unwrap());
    let y = ctx.mul_mat(w, x).unwrap();
    let e = ctx.recompute_in_backward(y).unwrap_err().to_string();
    assert!(e.contains("(unnamed) is the result of MUL_MAT; only a unary op's or a GLU's"), "{e}");
    let v = ctx.view(ctx.gelu(y).unwrap(), &[3], &[], 0).unwrap();
    assert!(ctx.recompute_in_backward(v).is_err(), "a view");
    assert!(ctx.recompute_in_backward(x).is_err(), "a leaf");
    assert!(!y.is_recomputed());
}

/// `Context::bf16_gradient` (patch 0094) flags a bf16 GELU of a bf16 tensor
/// and nothing else.
#[test]
fn only_a_bf16_gelu_of_bf16_takes_a_bf16_gradient() {
    let ctx = Context::new(16).unwrap();
    let x = ctx.new_tensor(DType::F32, &[4, 2]).unwrap();
    let e = ctx.bf16_gradient(ctx.gelu(x).unwrap()).unwrap_err().to_string();
    assert!(e.contains("is not a bf16 GELU of a bf16 tensor"), "{e}");
    let xb = ctx.cast(x, DType::BF16).unwrap();
    assert!(ctx.bf16_gradient(xb).is_err(), "a cast");
    assert!(ctx.bf16_gradient(ctx.silu(x).unwrap()).is_err(), "another unary op");
    assert!(ctx.bf16_gradient(ctx.gelu(xb).unwrap()).is_ok());
}
