//! Misuse a third library user reported (stop 75): a use of freed memory from
//! safe code, copies into quantized types that gave wrong values or aborted,
//! a parameter as its own loss that aborted, and writes into an intermediate
//! that changed an output. Each is now refused or works.

use crate::common::*;
use crate::errors::{err_with, still_works};
use ggml_rs::{Context, DType, Graph};

/// A context whose tensor views a dropped context's tensor is refused at
/// allocation (ggml read the freed description: a segfault).
#[test]
fn a_view_of_a_dropped_contexts_tensor_is_refused() {
    let cpu = cpu();
    let ctx_b = Context::new(16).unwrap();
    let _own = ctx_b.new_tensor_1d(DType::F32, 4).unwrap();
    {
        let ctx_a = Context::new(16).unwrap();
        let w = ctx_a.new_tensor_1d(DType::F32, 4).unwrap();
        let _r = ctx_b.reshape(w, &[2, 2]).unwrap();
        let _s = ctx_b.view(w, &[2], &[], 4).unwrap();
    }
    err_with(ctx_b.allocate(&cpu), "a context (or graph) that has been dropped");
    // While the other context lives, such a view is allocated as before.
    let ctx_a = Context::new(16).unwrap();
    let w = ctx_a.new_tensor_1d(DType::F32, 4).unwrap();
    ctx_a.allocate(&cpu).unwrap();
    w.write(&[1f32, 2., 3., 4.]).unwrap();
    let ctx_c = Context::new(16).unwrap();
    let r = ctx_c.reshape(w, &[2, 2]).unwrap();
    ctx_c.allocate(&cpu).unwrap();
    assert_eq!(r.read::<f32>().unwrap(), vec![1., 2., 3., 4.]);
    still_works();
}

/// Copies into a quantized type quantize each source row (dimension 0) in
/// whole blocks: rows that are not a multiple of the block, or not contiguous,
/// are refused (they gave zeros, misplaced rows, or a ggml abort).
#[test]
fn copies_into_blocks_need_whole_contiguous_rows() {
    let cpu = cpu();
    let ctx = Context::new(64).unwrap();
    let a16 = ctx.new_tensor_2d(DType::F32, 16, 4).unwrap();
    let a48 = ctx.new_tensor_2d(DType::F32, 48, 2).unwrap();
    let sq = ctx.new_tensor_2d(DType::F32, 32, 32).unwrap();
    let a64 = ctx.new_tensor_2d(DType::F32, 64, 2).unwrap();
    let b64 = ctx.new_tensor_1d(DType::Q8_0, 64).unwrap();
    let b96 = ctx.new_tensor_1d(DType::Q8_0, 96).unwrap();
    let bsq = ctx.new_tensor_2d(DType::Q8_0, 32, 32).unwrap();
    let b128 = ctx.new_tensor_1d(DType::Q8_0, 128).unwrap();
    ctx.allocate(&cpu).unwrap();
    err_with(ctx.cpy(a16, b64), "a multiple of 32 long");
    err_with(ctx.cpy(a48, b96), "a multiple of 32 long");
    err_with(ctx.cpy(ctx.transpose(sq).unwrap(), bsq), "rows must be contiguous");
    // an unallocated destination (a cast) is checked the same way
    let fresh = Context::new(8).unwrap();
    let b = fresh.new_tensor_1d(DType::Q8_0, 64).unwrap();
    err_with(ctx.cpy(a16, b), "a multiple of 32 long");
    // whole rows of blocks: the values come back within q8_0's rounding
    let x: Vec<f32> = (0..128).map(|i| (i as f32 - 64.0) / 16.0).collect();
    a64.write(&x).unwrap();
    let back = ctx.cast(ctx.cpy(a64, b128).unwrap(), DType::F32).unwrap();
    let y = &eval(&ctx, &[back])[0];
    for (i, (u, v)) in x.iter().zip(y).enumerate() {
        assert!((u - v).abs() <= 4.0 / 127.0, "element {i}: {u} came back as {v}");
    }
    still_works();
}

/// A parameter as its own loss differentiates to 1 (ggml aborted: "tensor buffer not set").
#[test]
fn a_parameter_as_its_own_loss_has_gradient_one() {
    let cpu = cpu();
    let ctx = Context::new(64).unwrap();
    let p = ctx.new_tensor_1d(DType::F32, 1).unwrap();
    ctx.set_param(p).unwrap();
    ctx.allocate(&cpu).unwrap();
    p.write(&[3f32]).unwrap();
    let mut g = Graph::with_grads(&ctx, 64).unwrap();
    g.build_backward(p).unwrap();
    g.allocate(&backends(&cpu)).unwrap();
    g.reset_grads().unwrap();
    g.compute().unwrap();
    assert_eq!(g.grad(p).unwrap().read::<f32>().unwrap(), vec![1.0]);
    assert_eq!(p.read::<f32>().unwrap(), vec![3.0]);
    still_works();
}

/// Writing into an intermediate result whose memory the graph shares is
/// refused, as reading it is (the write landed in an output's memory).
#[test]
fn writes_into_an_intermediate_are_refused() {
    let cpu = cpu();
    let ctx = Context::new(16).unwrap();
    let x = ctx.new_tensor_1d(DType::F32, 4).unwrap().set_input();
    let h = ctx.exp(x).unwrap();
    let y = ctx.sqr(h).unwrap().set_output();
    let mut g = Graph::new(&ctx, 16).unwrap();
    g.expand(y).unwrap();
    g.allocate(&backends(&cpu)).unwrap();
    x.write(&[0f32, 1., 2., 3.]).unwrap();
    g.compute().unwrap();
    let before = y.read::<f32>().unwrap();
    err_with(h.write(&[5f32; 4]), "write: an intermediate result");
    err_with(h.write_range(0, &[5f32]), "write: an intermediate result");
    err_with(h.zero(), "zero: an intermediate result");
    assert_eq!(y.read::<f32>().unwrap(), before, "the output is as computed");
    assert!((before[1] - 1f32.exp().powi(2)).abs() < 1e-4);
    still_works();
}

/// Backward's refusals name an unnamed node by its op and kind (they read
/// "backward:  (copy) (CPY)"), and a cast back to f32 is not advised as the fix
/// of a gradient that a cast to f16 stopped.
#[test]
fn backward_refusals_name_unnamed_nodes() {
    let ctx = Context::new(64).unwrap();
    let p = ctx.new_tensor_1d(DType::F32, 4).unwrap();
    ctx.set_param(p).unwrap();
    let loss = ctx.sum(ctx.cast(ctx.cast(p, DType::F16).unwrap(), DType::F32).unwrap()).unwrap();
    let mut g = Graph::with_grads(&ctx, 64).unwrap();
    let e = err_with(g.build_backward(loss), "a cast back to f32 does not make a gradient flow").to_string();
    assert!(e.contains("CPY (unnamed, copy)") && !e.contains("  "), "{e}");
}

/// A view made while its source had a graph's memory is placed again on the
/// source's memory of the next graph (it kept the dropped graph's address:
/// the next graph read freed memory, then ggml aborted).
#[test]
fn a_view_outlives_the_graph_memory_it_was_made_on() {
    let cpu = cpu();
    let ctx = Context::new(64).unwrap();
    let x = ctx.new_tensor_1d(DType::F32, 1024).unwrap();
    let mut g1 = Graph::new(&ctx, 16).unwrap();
    g1.expand(ctx.sum(x).unwrap()).unwrap();
    g1.allocate(&backends(&cpu)).unwrap();
    let v = ctx.reshape(x, &[32, 32]).unwrap();
    drop(g1);
    for round in 1..=3 {
        let s = ctx.sum(v).unwrap().set_output();
        let mut g = Graph::new(&ctx, 16).unwrap();
        g.expand(s).unwrap();
        g.allocate(&backends(&cpu)).unwrap();
        x.write(&vec![round as f32; 1024]).unwrap();
        g.compute().unwrap();
        assert_eq!(s.read::<f32>().unwrap(), vec![1024.0 * round as f32]);
    }
    // and in a context's own buffer
    let y = ctx.new_tensor_1d(DType::F32, 4).unwrap();
    let mut g2 = Graph::new(&ctx, 16).unwrap();
    g2.expand(ctx.sum(y).unwrap()).unwrap();
    g2.allocate(&backends(&cpu)).unwrap();
    let w = ctx.reshape(y, &[2, 2]).unwrap();
    drop(g2);
    ctx.allocate(&cpu).unwrap();
    y.write(&[1f32, 2., 3., 4.]).unwrap();
    assert_eq!(w.read::<f32>().unwrap(), vec![1., 2., 3., 4.]);
    still_works();
}

/// A context holding a view of another context's tensor that has no memory
/// yet is refused at allocate, not left to ggml's assert.
#[test]
fn a_view_of_an_unallocated_foreign_tensor_is_refused() {
    let cpu = cpu();
    let ctx_a = Context::new(16).unwrap();
    let w = ctx_a.new_tensor_1d(DType::F32, 4).unwrap();
    let ctx_b = Context::new(16).unwrap();
    let _r = ctx_b.reshape(w, &[2, 2]).unwrap();
    let _own = ctx_b.new_tensor_1d(DType::F32, 4).unwrap();
    err_with(ctx_b.allocate(&cpu), "no memory");
    still_works();
}
