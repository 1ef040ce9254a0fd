//! Misuse a new user of the library reported: each returned `Ok` with wrong
//! results, or aborted the process in ggml, and is now an `Err` with one line.

use crate::common::*;
use crate::errors::{err_with, still_works};
use ggml_rs::optim::{AdamWConfig, AdamWState, Optimizer, ParamGroup};
use ggml_rs::{Context, DType, Error, Graph};

#[test]
fn huge_contexts_and_graphs_are_errors() {
    // ggml's own malloc of the arena failed and aborted (mem_buffer != NULL);
    // usize::MAX tensors wrapped the size computation.
    for n in [1usize << 40, usize::MAX] {
        match Context::new(n) {
            Err(e @ Error::Capacity(_)) => println!("{e}"),
            Err(e) => panic!("Context::new({n}): expected Error::Capacity, got {e:?}"),
            Ok(c) => panic!("Context::new({n}) gave a context of {}", c.capacity()),
        }
    }
    let ctx = Context::new(16).unwrap();
    for n in [1usize << 40, usize::MAX] {
        let e = err_with(Graph::new(&ctx, n).map(|g| g.n_nodes()), "too large");
        assert!(matches!(e, Error::Capacity(_)));
        err_with(Graph::with_grads(&ctx, n).map(|g| g.n_nodes()), "too large");
    }
    // Ordinary sizes still work.
    let g = Graph::new(&ctx, 1 << 16).unwrap();
    assert_eq!(g.n_nodes(), 0);
    assert_eq!(Context::new(1 << 16).unwrap().capacity(), 1 << 16);
    still_works();
}

#[test]
fn views_must_be_aligned_to_the_element() {
    let cpu = cpu();
    let ctx = Context::new(16).unwrap();
    let a = leaf(&ctx, &cpu, &[4, 2], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    // Offset 1 byte into an f32 tensor read garbage.
    err_with(ctx.view(a, &[2], &[], 1), "offset 1");
    err_with(ctx.view(a, &[2, 2], &[6], 0), "stride 6");
    // A q8_0 tensor: rows are whole blocks of 34 bytes.
    let q = ctx.new_tensor(DType::Q8_0, &[64, 2]).unwrap();
    err_with(ctx.view(q, &[32], &[], 4), "offset 4");
    err_with(ctx.view(q, &[32, 2], &[40], 0), "stride 40");
    ctx.view(q, &[32, 2], &[68], 34).unwrap();
    // Aligned views read what they should.
    let v = ctx.view(a, &[2], &[], 4).unwrap();
    assert_eq!(v.read::<f32>().unwrap(), vec![2.0, 3.0]);
    let w = ctx.view(a, &[2, 2], &[16], 8).unwrap();
    assert_eq!(eval(&ctx, &[ctx.cont(w).unwrap()])[0], vec![3.0, 4.0, 7.0, 8.0]);
    still_works();
}

#[test]
fn parameters_and_moments_need_their_context_allocated() {
    let cpu = cpu();
    // A parameter whose context was never allocated: the graph gave it scratch
    // memory as an input, and training ran on garbage with Ok everywhere.
    let ctx = Context::new(256).unwrap();
    let w = ctx.new_tensor_1d(DType::F32, 4).unwrap().set_name("w").unwrap();
    ctx.set_param(w).unwrap();
    let loss = ctx.sum(ctx.sqr(w).unwrap()).unwrap().set_output();
    let mut g = Graph::with_grads(&ctx, 256).unwrap();
    g.build_backward(loss).unwrap();
    let e = err_with(g.allocate(&backends(&cpu)), "allocate its context");
    assert!(e.to_string().contains("\"w\""), "names the parameter: {e}");

    // Moments in a context that was never allocated.
    let wctx = Context::new(8).unwrap();
    let w = wctx.new_tensor_1d(DType::F32, 4).unwrap().set_name("w").unwrap();
    wctx.set_param(w).unwrap();
    wctx.allocate(&cpu).unwrap();
    w.write(&[1.0f32, -1.0, 2.0, -2.0]).unwrap();
    let sctx = Context::new(8).unwrap();
    let state = AdamWState::new(&sctx, &[w]).unwrap();
    let ctx = Context::new(256).unwrap();
    let loss = ctx.sum(ctx.sqr(w).unwrap()).unwrap().set_output();
    let mut g = Graph::with_grads(&ctx, 256).unwrap();
    g.build_backward(loss).unwrap();
    let groups = [ParamGroup { params: vec![w], weight_decay: 0.0 }];
    let mut opt = Optimizer::adamw(&ctx, &mut g, &state, &groups, AdamWConfig::default(), None).unwrap();
    let e = err_with(g.allocate(&backends(&cpu)), "AdamW moment without memory");
    assert!(e.to_string().contains("\"w.m\""), "names the moment: {e}");
    // Allocated, the same graph trains: w moves towards 0.
    sctx.allocate(&cpu).unwrap();
    g.allocate(&backends(&cpu)).unwrap();
    opt.prepare_step(0.1).unwrap();
    g.compute().unwrap();
    opt.finish_step();
    let after = w.read::<f32>().unwrap();
    assert!(after[0] < 1.0 && after[1] > -1.0, "one AdamW step moves w towards 0: {after:?}");
    still_works();
}

#[test]
fn a_prepared_step_must_be_finished() {
    let cpu = cpu();
    let wctx = Context::new(8).unwrap();
    let w = wctx.new_tensor_1d(DType::F32, 1).unwrap().set_name("w").unwrap();
    wctx.set_param(w).unwrap();
    let state = AdamWState::new(&wctx, &[w]).unwrap();
    wctx.allocate(&cpu).unwrap();
    w.write(&[5.0f32]).unwrap();
    let ctx = Context::new(256).unwrap();
    let loss = ctx.sum(ctx.sqr(w).unwrap()).unwrap().set_output();
    let mut g = Graph::with_grads(&ctx, 256).unwrap();
    g.build_backward(loss).unwrap();
    let groups = [ParamGroup { params: vec![w], weight_decay: 0.0 }];
    // cfg.lr is not the rate of the steps: prepare_step's is (documented).
    let cfg = AdamWConfig { lr: 123.0, ..Default::default() };
    let mut opt = Optimizer::adamw(&ctx, &mut g, &state, &groups, cfg, None).unwrap();
    g.allocate(&backends(&cpu)).unwrap();
    // A compute before any prepare_step had read zero hyper-parameters: a 0/0
    // update, NaN in w and in the moments, and Ok.
    err_with(g.compute(), "call prepare_step(lr) before each compute");
    assert_eq!(w.read::<f32>().unwrap(), vec![5.0]);
    opt.prepare_step(0.1).unwrap();
    g.compute().unwrap();
    // Computing again had repeated the update (same bias correction, uncounted).
    err_with(g.compute(), "already ran: call finish_step");
    let before_second = w.read::<f32>().unwrap()[0];
    // Forgetting finish_step left the step count at 0 forever, silently.
    err_with(opt.prepare_step(0.1), "ran but was not finished: call finish_step");
    assert_eq!(opt.step_count(), 0);
    opt.finish_step();
    assert_eq!(opt.step_count(), 1);
    // A step prepared and not run is not counted (nor one never prepared), and
    // a step prepared again (after a failed compute, say) is one step.
    opt.prepare_step(0.1).unwrap();
    opt.finish_step();
    opt.finish_step();
    assert_eq!(opt.step_count(), 1);
    opt.prepare_step(0.5).unwrap();
    opt.prepare_step(0.1).unwrap();
    assert_eq!(w.read::<f32>().unwrap()[0], before_second, "nothing ran");
    g.compute().unwrap();
    opt.finish_step();
    assert_eq!(opt.step_count(), 2);
    // Two AdamW steps of rate 0.1 (not 123, nor the 0.5 prepared and replaced) from 5: about 4.8.
    let after = w.read::<f32>().unwrap()[0];
    assert!((after - 4.8).abs() < 1e-3, "w after two steps of lr 0.1: {after}");
    // step() takes only the graph that holds the optimizer's nodes.
    let mut other = Graph::new(&ctx, 16).unwrap();
    other.expand(loss).unwrap();
    err_with(opt.step(&mut other, 0.1), "not the one this optimizer was attached to");
    assert_eq!(opt.step_count(), 2);
    opt.step(&mut g, 0.1).unwrap();
    assert_eq!(opt.step_count(), 3);
    // A new step count drops a prepared step (it had run with the old bias correction).
    opt.prepare_step(0.1).unwrap();
    opt.set_step_count(7);
    err_with(g.compute(), "no step is prepared");
    opt.step(&mut g, 0.1).unwrap();
    assert_eq!(opt.step_count(), 8);
    // A second optimizer of the same parameter on this graph would update it twice a step.
    let e = Optimizer::adamw(&ctx, &mut g, &state, &groups, AdamWConfig::default(), None).err().expect("refused");
    assert!(e.to_string().contains("stepped by another optimizer of this graph"), "{e}");
    // The update nodes expanded into another graph would run there unprepared (NaN).
    let mut copy = Graph::new(&ctx, 256).unwrap();
    for n in g.nodes().into_iter().filter(|n| n.op() == ggml_rs::sys::GGML_OP_OPT_STEP_ADAMW) {
        copy.expand(n).unwrap();
    }
    err_with(copy.allocate(&backends(&cpu)), "has no optimizer attached to this graph");
    still_works();
}

#[test]
fn unmarked_intermediates_cannot_be_read() {
    let cpu = cpu();
    let ctx = Context::new(64).unwrap();
    let a = leaf(&ctx, &cpu, &[4], &[1.0, 2.0, 3.0, 4.0]);
    let h = ctx.scale(a, 2.0).unwrap().set_name("h").unwrap(); // not marked
    let h2 = ctx.sqr(h).unwrap().set_name("h2").unwrap();
    let kept = ctx.scale(h2, 10.0).unwrap().set_output();
    let out = ctx.add(kept, kept).unwrap(); // read by nothing: an output anyway
    let mut g = Graph::new(&ctx, 16).unwrap();
    g.expand(out).unwrap();
    g.allocate(&backends(&cpu)).unwrap();
    g.compute().unwrap();
    // h's memory held later nodes: reading it returned whatever was there.
    let e = err_with(h.read::<f32>(), "set_output");
    assert!(e.to_string().contains("\"h\""), "names the tensor: {e}");
    err_with(h2.read_f32(), "set_output");
    err_with(ctx.view(h2, &[2], &[], 0).unwrap().read::<f32>(), "set_output");
    assert_eq!(kept.read::<f32>().unwrap(), vec![40.0, 160.0, 360.0, 640.0]);
    assert_eq!(out.read::<f32>().unwrap(), vec![80.0, 320.0, 720.0, 1280.0]);
    assert_eq!(ctx.view(kept, &[2], &[], 8).unwrap().read::<f32>().unwrap(), vec![360.0, 640.0]);
    // Leaves and context tensors read as before.
    assert_eq!(a.read::<f32>().unwrap(), vec![1.0, 2.0, 3.0, 4.0]);
    still_works();
}

/// `write_range` writes its elements in place and no others (a view too, at
/// its offset), and refuses a range past the end, another element type and
/// an unallocated tensor with one error each, writing nothing.
#[test]
fn ranges_are_written_in_place_and_checked() {
    let cpu = cpu();
    let ctx = Context::new(8).unwrap();
    let t = ctx.new_tensor_2d(DType::F32, 4, 3).unwrap().set_name("t").unwrap();
    let e = err_with(t.write_range(0, &[1.0f32]), "not allocated");
    assert!(e.to_string().contains("\"t\""), "{e}");
    let row = ctx.view(t, &[4], &[], 4 * 4).unwrap(); // the second row
    ctx.allocate(&cpu).unwrap();
    t.write(&[0.0f32; 12]).unwrap();
    t.write_range(0, &[1.0f32, 2.0]).unwrap();
    t.write_range(10, &[3.0f32, 4.0]).unwrap();
    row.write_range(1, &[5.0f32]).unwrap(); // element 5 of t
    assert_eq!(t.read::<f32>().unwrap(), [1.0, 2.0, 0.0, 0.0, 0.0, 5.0, 0.0, 0.0, 0.0, 0.0, 3.0, 4.0]);
    err_with(t.write_range(11, &[1.0f32, 1.0]), "pass the tensor's 12");
    err_with(t.write_range(usize::MAX, &[1.0f32]), "pass the tensor's 12");
    err_with(t.write_range(0, &[1i32]), "tensor is f32, data is i32");
    assert_eq!(t.read::<f32>().unwrap()[10..], [3.0, 4.0], "a refused range writes nothing");
    still_works();
}
