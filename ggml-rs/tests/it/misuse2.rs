//! Misuse a second library user reported (stop 51): each gave wrong numbers
//! with `Ok`, or aborted the process in ggml; each is now kept or refused.

use crate::common::*;
use crate::errors::{err_with, still_works};
use ggml_rs::optim::{AdamWConfig, AdamWState, Optimizer, ParamGroup};
use ggml_rs::{Backend, Context, DType, Graph};

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

/// A tensor belongs to one allocated graph: a second graph over an op result
/// of the first is refused (it recomputed it into memory the first shares
/// with its output, which then read wrong).
#[test]
fn an_op_result_of_one_allocated_graph_is_refused_by_another() {
    let cpu = cpu();
    let ctx = Context::new(64).unwrap();
    let a = ctx.new_tensor_1d(DType::F32, 4).unwrap().set_input();
    let b = ctx.sqr(a).unwrap();
    let d = ctx.scale(b, 2.0).unwrap().set_output();
    let mut g1 = Graph::new(&ctx, 16).unwrap();
    g1.expand(d).unwrap();
    g1.allocate(&backends(&cpu)).unwrap();
    let e = ctx.scale(b, 3.0).unwrap().set_output();
    let mut g2 = Graph::new(&ctx, 16).unwrap();
    g2.expand(e).unwrap();
    err_with(g2.allocate(&backends(&cpu)), "one allocated graph at a time");
    a.write(&[1f32, 2., 3., 4.]).unwrap();
    g1.compute().unwrap();
    assert_eq!(d.read::<f32>().unwrap(), vec![2., 8., 18., 32.]);
    // Once the first graph is gone, the second may have them.
    drop(g1);
    g2.allocate(&backends(&cpu)).unwrap();
    a.write(&[1f32, 2., 3., 4.]).unwrap();
    g2.compute().unwrap();
    assert_eq!(e.read::<f32>().unwrap(), vec![3., 12., 27., 48.]);
    still_works();
}

/// Marking a scratch result as an output after allocation changes nothing:
/// the read is still refused (it returned a later node's values).
#[test]
fn a_late_output_mark_does_not_unlock_scratch() {
    let cpu = cpu();
    let ctx = Context::new(64).unwrap();
    let a = ctx.new_tensor_1d(DType::F32, 4).unwrap().set_input();
    let b = ctx.sqr(a).unwrap();
    let e = ctx.sum(ctx.exp(b).unwrap()).unwrap();
    let mut g = Graph::new(&ctx, 16).unwrap();
    g.expand(e).unwrap();
    g.allocate(&backends(&cpu)).unwrap();
    a.write(&[1f32, 2., 3., 4.]).unwrap();
    b.set_output();
    g.compute().unwrap();
    err_with(b.read::<f32>(), "set_output() before allocating");
    still_works();
}

/// A shape whose bytes overflow is refused when made (4·2⁶² bytes wrapped to 0,
/// then read panicked on a capacity overflow).
#[test]
fn shapes_whose_bytes_overflow_are_refused() {
    let ctx = Context::new(8).unwrap();
    err_with(ctx.new_tensor(DType::F32, &[1 << 62]).map(|_| ()), "too large");
    err_with(ctx.new_tensor(DType::Q8_0, &[1 << 58, 31]).map(|_| ()), "too large");
}

/// The index check reads the indices a view picks, not the whole leaf under it.
#[test]
fn get_rows_checks_the_indices_a_view_picks() {
    let cpu = cpu();
    let ctx = Context::new(64).unwrap();
    let table = leaf(&ctx, &cpu, &[2, 3], &[0., 1., 10., 11., 20., 21.]);
    let ids = leaf_i32(&ctx, &cpu, &[4], &[0, 2, 99, -5]);
    let v = ctx.view(ids, &[2], &[], 0).unwrap();
    assert_eq!(eval(&ctx, &[ctx.get_rows(table, v).unwrap()])[0], vec![0., 1., 20., 21.]);
    let tail = ctx.view(ids, &[2], &[], 8).unwrap();
    let mut g = Graph::new(&ctx, 16).unwrap();
    g.expand(ctx.get_rows(table, tail).unwrap().set_output()).unwrap();
    g.allocate(&backends(&cpu)).unwrap();
    let e = err_with(g.compute(), "index 99").to_string();
    assert!(
        e.contains("indices (unnamed, view)") && e.contains("of the table (unnamed)") && !e.contains("leaf_"),
        "ggml's names of unnamed leaves are not shown: {e}"
    );
    still_works();
}

/// CPU threads: the machine's by default (ggml's own is 4), and at most
/// ggml's 512 (a count past i32 had wrapped to 1 or −1).
#[test]
fn cpu_threads_default_to_the_machine_and_are_bounded() {
    // the CPU backend itself, also when TOY_TEST_DEVICE names another device
    let cpu = Backend::cpu().unwrap();
    for n in [0usize, 1, 5000, (1 << 32) + 1, usize::MAX] {
        assert!(cpu.set_n_threads(n));
    }
    cpu.set_n_threads(1);
    still_works();
}

/// A third library user (stop 54): an op result in one context that reads a
/// tensor of another was handed out again by `Context::get` and `tensors`
/// with the first context's lifetime only, so it outlived the other context
/// and read its freed memory (valgrind: invalid read; then a ggml assert).
/// Those calls now leave such results out; the op's own handle works while
/// both contexts live. An unnamed tensor's error says "(unnamed)", not `""`.
#[test]
fn a_result_over_another_contexts_tensor_is_not_handed_out_again() {
    let cpu = Backend::cpu().unwrap();
    let ctx = Context::new(64).unwrap();
    let own = ctx.new_tensor_1d(DType::F32, 6).unwrap().set_name("own").unwrap();
    let mine = ctx.reshape(own, &[3, 2]).unwrap().set_name("mine").unwrap();
    {
        let c2 = Context::new(8).unwrap();
        let t2 = c2.new_tensor_1d(DType::F32, 6).unwrap();
        c2.allocate(&cpu).unwrap();
        t2.write(&[1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]).unwrap();
        let v = ctx.reshape(t2, &[3, 2]).unwrap().set_name("v").unwrap();
        assert_eq!(v.read_f32().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "the op's handle, while c2 lives");
        let s = ctx.add(mine, v).unwrap().set_name("s").unwrap();
        assert_eq!(s.ne()[0], 3);
        assert!(ctx.get("v").is_none() && ctx.get("s").is_none(), "not handed out with ctx's lifetime");
    }
    let names: Vec<String> = ctx.tensors().map(|t| t.name()).collect();
    assert_eq!(names, ["own", "mine"], "results over c2's tensor left out");
    assert_eq!(ctx.get("mine").unwrap().ne()[..2], [3, 2]);
    // an unnamed tensor's error
    let e = ctx.sum(own).unwrap().scalar().unwrap_err().to_string();
    assert!(e.starts_with("tensor (unnamed): "), "{e}");
}
