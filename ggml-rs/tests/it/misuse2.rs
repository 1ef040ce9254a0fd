//! Misuse a second library user reported (stop 51): each gave wrong numbers
//! with `Ok`, or aborted the process in ggml; each is now kept or refused.

use crate::common::*;
use crate::errors::{err_with, still_works};
use ggml_rs::optim::{AdamWConfig, AdamWState, Optimizer, ParamGroup};
use ggml_rs::{Context, DType, Graph};

/// Inputs keep what was written from one compute to the next (ggml-alloc had
/// given `neg`'s result the input's memory: the second run negated it back),
/// and an input never written reads as zeros.
#[test]
fn inputs_keep_their_values_across_computes() {
    let cpu = cpu();
    let ctx = Context::new(64).unwrap();
    let a = ctx.new_tensor_1d(DType::F32, 3).unwrap().set_input();
    let never = ctx.new_tensor_1d(DType::F32, 3).unwrap().set_input();
    let y = ctx.neg(a).unwrap().set_output();
    let z = ctx.add(never, a).unwrap().set_output();
    let mut g = Graph::new(&ctx, 16).unwrap();
    g.expand(y).unwrap();
    g.expand(z).unwrap();
    g.allocate(&backends(&cpu)).unwrap();
    a.write(&[1f32, 2., 3.]).unwrap();
    for _ in 0..3 {
        g.compute().unwrap();
        assert_eq!(y.read::<f32>().unwrap(), vec![-1., -2., -3.]);
        assert_eq!(a.read::<f32>().unwrap(), vec![1., 2., 3.]);
        assert_eq!(z.read::<f32>().unwrap(), vec![1., 2., 3.], "an unwritten input reads as zeros");
    }
    still_works();
}

/// A regression written once trains: the loss falls every step (the inputs
/// were overwritten and it diverged to NaN by step 11).
#[test]
fn inputs_written_once_train() {
    let cpu = cpu();
    let wctx = Context::new(8).unwrap();
    let w = wctx.new_tensor_1d(DType::F32, 4).unwrap().set_name("w").unwrap();
    wctx.set_param(w).unwrap();
    let state = AdamWState::new(&wctx, &[w]).unwrap();
    wctx.allocate(&cpu).unwrap();
    w.write(&[0f32; 4]).unwrap();
    let ctx = Context::new(256).unwrap();
    let x = ctx.new_tensor_1d(DType::F32, 4).unwrap().set_input();
    let loss = ctx.sum(ctx.sqr(ctx.sub(w, x).unwrap()).unwrap()).unwrap().set_output();
    let mut g = Graph::with_grads(&ctx, 256).unwrap();
    g.build_backward(loss).unwrap();
    let groups = [ParamGroup { params: vec![w], weight_decay: 0.0 }];
    let mut opt = Optimizer::adamw(&ctx, &mut g, &state, &groups, AdamWConfig::default(), None).unwrap();
    g.allocate(&backends(&cpu)).unwrap();
    x.write(&[1f32, -1., 0.5, 2.]).unwrap();
    let mut last = f32::INFINITY;
    for _ in 0..20 {
        opt.prepare_step(0.05).unwrap();
        g.compute().unwrap();
        opt.finish_step();
        let l = loss.read::<f32>().unwrap()[0];
        assert!(l < last, "loss {l} after {last}");
        last = l;
    }
    still_works();
}

/// A parameter listed twice took two steps a step.
#[test]
fn a_parameter_listed_twice_is_refused() {
    let cpu = cpu();
    let wctx = Context::new(8).unwrap();
    let w = wctx.new_tensor_1d(DType::F32, 2).unwrap().set_name("w").unwrap();
    wctx.set_param(w).unwrap();
    let state = AdamWState::new(&wctx, &[w]).unwrap();
    wctx.allocate(&cpu).unwrap();
    let ctx = Context::new(256).unwrap();
    let loss = ctx.sum(ctx.sqr(w).unwrap()).unwrap();
    let mut g = Graph::with_grads(&ctx, 256).unwrap();
    g.build_backward(loss).unwrap();
    let groups = [ParamGroup { params: vec![w], weight_decay: 0.0 }, ParamGroup { params: vec![w], weight_decay: 0.1 }];
    err_with(Optimizer::adamw(&ctx, &mut g, &state, &groups, AdamWConfig::default(), None).map(|_| ()), "listed twice");
    still_works();
}

/// `DType::Other` holds only types ggml has (from_raw): a removed or unknown
/// number had panicked (block size 0) or segfaulted (its name).
#[test]
fn other_types_come_only_from_ggml() {
    assert!(DType::from_raw(4).is_none() && DType::from_raw(999).is_none());
    let other = (0..ggml_rs::sys::GGML_TYPE_COUNT).filter_map(DType::from_raw).find(|t| matches!(t, DType::Other(_))).unwrap();
    assert!(!other.name().is_empty() && other.block_size() >= 1, "{other}");
    assert_eq!(DType::from_raw(other.to_raw()), Some(other));
}

/// Ops that ggml aborts on at compute are refused when built.
#[test]
fn ops_ggml_would_abort_on_are_errors() {
    let cpu = cpu();
    let ctx = Context::new(64).unwrap();
    let t = leaf(&ctx, &cpu, &[4, 3], &[0.0; 12]);
    let ids = leaf_i32(&ctx, &cpu, &[2], &[0, 7]);
    // Computed indices cannot be checked against the table before the run.
    err_with(ctx.get_rows(t, ctx.cont(ids).unwrap()), "result of an op");
    // n_past beyond ggml's i32.
    err_with(ctx.diag_mask_inf(ctx.cont(t).unwrap(), 1usize << 31), "n_past");
    // A stride-0 view as a product's first operand (ggml asserts it is not transposed).
    let v = ctx.view(t, &[4, 3], &[0], 0).unwrap();
    err_with(ctx.mul_mat(v, t), "stride");
    // Copies the CPU cannot convert.
    for to in [DType::I16, DType::I8] {
        err_with(ctx.cpy(t, ctx.new_tensor(to, &[4, 3]).unwrap()), "cannot convert");
    }
    let q = ctx.new_tensor(DType::Q8_0, &[32, 2]).unwrap();
    err_with(ctx.cpy(q, ctx.new_tensor(DType::F16, &[32, 2]).unwrap()), "cannot convert q8_0 to f16");
    // Quantized blocks cannot be transposed (q8_0 [32, 2] had become [2, 32] of 2 bytes).
    err_with(ctx.transpose(q), "blocks");
    err_with(ctx.permute(q, [1, 0, 2, 3]), "blocks");
    ctx.permute(q, [0, 2, 1, 3]).unwrap();
    still_works();
}

/// Backward through f16 ops, or through a quantized weight to its input,
/// aborted in ggml (at build or compute) or gave an f32 parameter an f16
/// gradient; refused by build_backward, saying what to cast.
#[test]
fn gradients_through_compact_types_are_refused() {
    let cpu = cpu();
    let wctx = Context::new(8).unwrap();
    let p = wctx.new_tensor_1d(DType::F32, 32).unwrap().set_name("p").unwrap();
    wctx.set_param(p).unwrap();
    err_with(wctx.set_param(wctx.new_tensor_1d(DType::F16, 4).unwrap()), "must be f32");
    wctx.allocate(&cpu).unwrap();
    let ctx = Context::new(256).unwrap();
    let h = ctx.cast(p, DType::F16).unwrap();
    for (what, y) in [("sqr", ctx.sqr(h).unwrap()), ("exp", ctx.exp(h).unwrap()), ("gelu", ctx.gelu(h).unwrap())] {
        let loss = ctx.sum(ctx.cast(y, DType::F32).unwrap()).unwrap();
        let mut g = Graph::with_grads(&ctx, 256).unwrap();
        let e = err_with(g.build_backward(loss), "f32 operands");
        assert!(e.to_string().contains("f16"), "{what}: {e}");
    }
    let wq = ctx.new_tensor(DType::Q8_0, &[32, 4]).unwrap();
    let x = ctx.reshape(p, &[32, 1]).unwrap();
    let mut g = Graph::with_grads(&ctx, 256).unwrap();
    err_with(g.build_backward(ctx.sum(ctx.mul_mat(wq, x).unwrap()).unwrap()), "cast");
    // Through a cast to f32, as the message says, it builds.
    let w32 = ctx.cast(wq, DType::F32).unwrap();
    let mut g = Graph::with_grads(&ctx, 256).unwrap();
    g.build_backward(ctx.sum(ctx.mul_mat(w32, x).unwrap()).unwrap()).unwrap();
    still_works();
}
