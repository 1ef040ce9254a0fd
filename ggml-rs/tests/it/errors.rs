//! Misuse returns `Err` naming the op (and the shapes) instead of reaching one
//! of ggml's asserts, which would abort this test process: every test here
//! ends by computing a valid graph, showing the process and the library are
//! still fine.

use crate::common;

use common::*;
use ggml_rs::optim::{AdamWConfig, AdamWState, Optimizer, ParamGroup};
use ggml_rs::{Context, DType, Error, Graph, RopeMode, Tensor};
use std::fmt::Debug;

/// `r` must be `Error::Op` from `op`; returns the message (printed with `--nocapture`).
fn op_err<T: Debug>(r: ggml_rs::Result<T>, op: &str) -> String {
    match r {
        Err(e @ Error::Op { .. }) => {
            let msg = e.to_string();
            assert!(msg.starts_with(&format!("{op}: ")), "error names the op {op}: {msg}");
            println!("{msg}");
            msg
        }
        other => panic!("{op}: expected Error::Op, got {other:?}"),
    }
}

/// `r` must be an error whose message contains `needle`.
pub(crate) fn err_with<T: Debug>(r: ggml_rs::Result<T>, needle: &str) -> Error {
    match r {
        Err(e) => {
            println!("{e}");
            assert!(e.to_string().contains(needle), "{e:?} should mention {needle:?}");
            e
        }
        Ok(v) => panic!("expected an error mentioning {needle:?}, got {v:?}"),
    }
}

/// The library still works: a small matrix product on the CPU.
pub(crate) fn still_works() {
    let cpu = cpu();
    let ctx = Context::new(8).unwrap();
    let a = leaf(&ctx, &cpu, &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    let b = leaf(&ctx, &cpu, &[2, 1], &[1.0, 1.0]);
    assert_eq!(eval(&ctx, &[ctx.mul_mat(a, b).unwrap()])[0], vec![3.0, 7.0]);
}

fn f32s<'a>(ctx: &'a Context, ne: &[i64]) -> Tensor<'a> {
    ctx.new_tensor(DType::F32, ne).unwrap()
}

#[test]
fn bad_shapes_name_the_op() {
    let ctx = Context::new(256).unwrap();
    let (a, b) = (f32s(&ctx, &[4, 3]), f32s(&ctx, &[5, 2]));
    let m = op_err(ctx.mul_mat(a, b), "mul_mat");
    assert!(m.contains("[4, 3, 1, 1]") && m.contains("[5, 2, 1, 1]"), "shapes in the message: {m}");
    op_err(ctx.mul_mat(f32s(&ctx, &[4, 3, 2]), f32s(&ctx, &[4, 3, 3])), "mul_mat"); // ne2 does not divide
                                                                                    // A transposed operand (strided rows) would abort in the CPU kernel.
    op_err(ctx.mul_mat(a, ctx.transpose(f32s(&ctx, &[3, 4])).unwrap()), "mul_mat");
    op_err(ctx.mul_mat(ctx.transpose(f32s(&ctx, &[3, 4])).unwrap(), a), "mul_mat");
    let m = op_err(ctx.scale(ctx.transpose(f32s(&ctx, &[3, 4])).unwrap(), 2.0), "scale");
    assert!(m.contains("operand (unnamed, transposed) [4, 3, 1, 1]"), "an unnamed operand is said so: {m}");
    let m = op_err(ctx.get_rows(a, f32s(&ctx, &[2])), "get_rows");
    assert!(m.contains("operand (unnamed) is f32"), "{m}");
    let m = op_err(ctx.get_rows(a, f32s(&ctx, &[2]).set_name("ids").unwrap()), "get_rows");
    assert!(m.contains("operand \"ids\" is f32"), "{m}");
    op_err(ctx.mul_mat(a, ctx.new_tensor(DType::F16, &[4, 2]).unwrap()), "mul_mat");
    op_err(ctx.out_prod(ctx.transpose(f32s(&ctx, &[3, 4])).unwrap(), f32s(&ctx, &[2, 3])), "out_prod");

    op_err(ctx.add(f32s(&ctx, &[4, 3]), f32s(&ctx, &[4, 2])), "add");
    op_err(ctx.sub(f32s(&ctx, &[4, 3]), f32s(&ctx, &[3, 3])), "sub");
    op_err(ctx.mul(f32s(&ctx, &[4]), f32s(&ctx, &[4, 2])), "mul"); // b larger than a
    op_err(ctx.div(f32s(&ctx, &[6, 2]), f32s(&ctx, &[4, 1])), "div");
    op_err(ctx.add(ctx.new_tensor(DType::I32, &[4]).unwrap(), f32s(&ctx, &[4])), "add");
    op_err(ctx.repeat(f32s(&ctx, &[3]), f32s(&ctx, &[4])), "repeat");
    op_err(ctx.repeat_4d(f32s(&ctx, &[3]), [4, 1, 1, 1]), "repeat_4d");
    // Kernels that read rows as contiguous runs: a transposed operand would
    // abort (repeat) or be read wrongly (sum, get_rows).
    let at = ctx.transpose(f32s(&ctx, &[3, 4])).unwrap(); // [4, 3], strided rows
    op_err(ctx.repeat(at, f32s(&ctx, &[8, 6])), "repeat");
    op_err(ctx.repeat_4d(at, [8, 6, 1, 1]), "repeat_4d");
    op_err(ctx.repeat_back(at, f32s(&ctx, &[2, 3])), "repeat_back");
    op_err(ctx.sum(at), "sum");
    op_err(ctx.get_rows(at, ctx.new_tensor(DType::I32, &[2]).unwrap()), "get_rows");

    op_err(ctx.reshape(a, &[5, 2]), "reshape");
    op_err(ctx.reshape(a, &[2, 2, 2, 2, 2]), "reshape");
    op_err(ctx.reshape(ctx.transpose(a).unwrap(), &[12]), "reshape"); // not contiguous
    let nb = a.nb();
    op_err(ctx.view(a, &[4, 4], &[nb[1]], 0), "view"); // one row too many
    op_err(ctx.view(a, &[2, 3], &[nb[1]], 12), "view"); // offset pushes the last row out
    op_err(ctx.view(a, &[4, 3], &[], 0), "view"); // strides missing
    op_err(ctx.permute(a, [0, 1, 1, 3]), "permute");
    op_err(ctx.permute(a, [0, 1, 2, 4]), "permute");
    op_err(ctx.cont_nd(a, &[5]), "cont_nd");
    op_err(ctx.cpy(a, f32s(&ctx, &[5])), "cpy");

    let table = f32s(&ctx, &[8, 10]);
    op_err(ctx.get_rows(table, f32s(&ctx, &[3])), "get_rows"); // f32 indices
    op_err(ctx.get_rows(table, ctx.new_tensor(DType::I32, &[3, 2]).unwrap()), "get_rows");

    let x = f32s(&ctx, &[8, 2, 5]);
    let pos = ctx.new_tensor(DType::I32, &[5]).unwrap();
    op_err(ctx.rope_ext(x, pos, 3, RopeMode::Normal, 10000.0), "rope_ext"); // odd n_dims
    op_err(ctx.rope_ext(x, pos, 0, RopeMode::Neox, 10000.0), "rope_ext");
    op_err(ctx.rope_ext(x, pos, 10, RopeMode::Normal, 10000.0), "rope_ext"); // > head_dim
    op_err(ctx.rope_ext(x, ctx.new_tensor(DType::I32, &[4]).unwrap(), 8, RopeMode::Normal, 10000.0), "rope_ext");
    op_err(ctx.rope_ext(x, f32s(&ctx, &[5]), 8, RopeMode::Normal, 10000.0), "rope_ext");
    op_err(ctx.rope_ext(x, pos, 8, RopeMode::Normal, -1.0), "rope_ext");

    let scores = f32s(&ctx, &[6, 4, 2]);
    op_err(ctx.soft_max_ext(scores, Some(f32s(&ctx, &[6, 3])), 1.0), "soft_max_ext"); // too few rows
    op_err(ctx.soft_max_ext(scores, Some(f32s(&ctx, &[5, 4])), 1.0), "soft_max_ext"); // wrong ne0
    op_err(ctx.soft_max_ext(scores, Some(f32s(&ctx, &[6, 4, 3])), 1.0), "soft_max_ext"); // ne2 does not divide
    op_err(ctx.soft_max_ext(ctx.transpose(scores).unwrap(), None, 1.0), "soft_max_ext");

    op_err(ctx.cross_entropy_loss(f32s(&ctx, &[10, 4]), f32s(&ctx, &[10, 3])), "cross_entropy_loss");
    op_err(ctx.cross_entropy_loss(f32s(&ctx, &[10, 4]), ctx.new_tensor(DType::I32, &[10, 4]).unwrap()), "cross_entropy_loss");
    op_err(ctx.swiglu_split(f32s(&ctx, &[6, 2]), f32s(&ctx, &[6, 3])), "swiglu_split");
    op_err(ctx.rms_norm(x, -1.0), "rms_norm");
    let (h, gain) = (f32s(&ctx, &[6, 2]), f32s(&ctx, &[6]));
    op_err(ctx.rms_norm_gain(h, f32s(&ctx, &[5]), 1e-5), "rms_norm_gain"); // gain of another width
    op_err(ctx.rms_norm_gain(h, f32s(&ctx, &[6, 2]), 1e-5), "rms_norm_gain"); // a gain per row
    op_err(ctx.rms_norm_gain(h, ctx.new_tensor(DType::F16, &[6]).unwrap(), 1e-5), "rms_norm_gain");
    op_err(ctx.rms_norm_gain(ctx.transpose(h).unwrap(), f32s(&ctx, &[2]), 1e-5), "rms_norm_gain");
    op_err(ctx.rms_norm_gain(h, gain, f32::INFINITY), "rms_norm_gain");
    op_err(ctx.norm_gain_bias(h, gain, f32s(&ctx, &[3]), 1e-5), "norm_gain_bias"); // bias of another width
    op_err(ctx.norm_gain_bias(h, gain, gain, -1.0), "norm_gain_bias");
    op_err(ctx.norm(x, f32::NAN), "norm");
    op_err(ctx.norm(ctx.new_tensor(DType::F16, &[4]).unwrap(), 1e-5), "norm");
    op_err(ctx.scale(ctx.transpose(a).unwrap(), 2.0), "scale");
    op_err(ctx.silu(ctx.transpose(a).unwrap()), "silu");
    op_err(ctx.gelu(ctx.new_tensor(DType::I32, &[4]).unwrap()), "gelu");
    op_err(ctx.clamp(a, 1.0, -1.0), "clamp");
    op_err(ctx.sum_rows(ctx.new_tensor(DType::F16, &[4]).unwrap()), "sum_rows");

    op_err(ctx.new_tensor(DType::F32, &[4, 0]), "new_tensor");
    op_err(ctx.new_tensor(DType::F32, &[1, 1, 1, 1, 1]), "new_tensor");
    op_err(ctx.new_tensor(DType::F32, &[]), "new_tensor");
    op_err(ctx.new_tensor(DType::F32, &[i64::MAX, 4]), "new_tensor");
    op_err(ctx.new_tensor(DType::Q8_0, &[33]), "new_tensor");
    op_err(a.set_name(&"n".repeat(64)), "set_name");
    still_works();
}

#[test]
fn optimizer_steps_need_parameters() {
    let ctx = Context::new(64).unwrap();
    let (w, g, m, v) = (f32s(&ctx, &[4, 3]), f32s(&ctx, &[4, 3]), f32s(&ctx, &[4, 3]), f32s(&ctx, &[4, 3]));
    let (hp7, hp2) = (f32s(&ctx, &[7]), f32s(&ctx, &[2]));
    let msg = op_err(ctx.opt_step_adamw(w, g, m, v, hp7), "opt_step_adamw");
    assert!(msg.contains("not a parameter"));
    op_err(ctx.opt_step_sgd(w, g, hp2), "opt_step_sgd");
    ctx.set_param(w).unwrap();
    op_err(ctx.opt_step_adamw(w, f32s(&ctx, &[3, 4]), m, v, hp7), "opt_step_adamw");
    op_err(ctx.opt_step_adamw(w, g, m, v, hp2), "opt_step_adamw");
    op_err(
        ctx.opt_step_adamw(
            w,
            ctx.cont(ctx.transpose(f32s(&ctx, &[3, 4])).unwrap()).unwrap(),
            m,
            ctx.transpose(f32s(&ctx, &[3, 4])).unwrap(),
            hp7,
        ),
        "opt_step_adamw",
    );
    op_err(ctx.opt_step_sgd(w, g, hp7), "opt_step_sgd");
    // ggml's optimizer kernels, and most backward kernels, are f32 only.
    let w16 = ctx.new_tensor(DType::F16, &[4, 3]).unwrap();
    err_with(ctx.set_param(w16), "must be f32");
    op_err(ctx.opt_step_sgd(w16, g, hp2), "opt_step_sgd");
    // Only leaves can be parameters.
    err_with(ctx.set_param(ctx.add(w, g).unwrap()), "leaf");
    err_with(ctx.set_param(ctx.new_tensor(DType::I32, &[3]).unwrap()), "must be f32");
    still_works();
}

#[test]
fn backward_refuses_what_ggml_cannot_differentiate() {
    let cpu = cpu();
    let ctx = Context::new(1024).unwrap();
    let x = f32s(&ctx, &[4, 3]);
    ctx.set_param(x).unwrap();
    ctx.allocate(&cpu).unwrap();
    let backward = |y: Tensor<'_>, needle: &str| {
        let mut g = Graph::with_grads(&ctx, 1024).unwrap();
        let loss = ctx.sum(ctx.cont(y).unwrap()).unwrap();
        err_with(g.build_backward(loss), needle)
    };
    // tanh has no backward in ggml 0.26.
    let e = backward(ctx.tanh(x).unwrap(), "TANH");
    assert!(matches!(e, Error::Backward(_)));
    backward(ctx.gelu_erf(x).unwrap(), "GELU_ERF");
    backward(ctx.clamp(x, -1.0, 1.0).unwrap(), "CLAMP");
    // The second operand of sub/div broadcast: ggml would not reduce its gradient.
    let small = f32s(&ctx, &[4, 1]);
    ctx.set_param(small).unwrap();
    ctx.allocate(&cpu).unwrap();
    backward(ctx.sub(x, small).unwrap(), "repeat that operand");
    backward(ctx.div(x, ctx.sqr(ctx.sum_rows(x).unwrap()).unwrap()).unwrap(), "repeat that operand");
    // A softmax mask cannot receive a gradient; labels neither.
    let scores = f32s(&ctx, &[4, 3]);
    backward(ctx.soft_max_ext(scores, Some(x), 1.0).unwrap(), "mask");
    backward(ctx.cross_entropy_loss(scores, ctx.soft_max_ext(x, None, 1.0).unwrap()).unwrap(), "labels");
    // Strided gradients (permute/transpose) into ops that cannot take them.
    backward(ctx.transpose(ctx.soft_max_ext(x, None, 1.0).unwrap()).unwrap(), "strided gradient");
    backward(ctx.permute(ctx.cont(ctx.sqr(x).unwrap()).unwrap(), [1, 0, 2, 3]).unwrap(), "strided gradient");
    backward(ctx.transpose(ctx.scale(x, 2.0).unwrap()).unwrap(), "strided gradient");
    // Dimension 0 moved: mul_mat's backward takes the gradient as a mul_mat
    // operand, which needs contiguous rows.
    backward(ctx.transpose(ctx.mul_mat(x, x).unwrap()).unwrap(), "strided gradient");
    let both = ctx.add(ctx.sum(ctx.cont(ctx.transpose(x).unwrap()).unwrap()).unwrap(), ctx.sum(x).unwrap()).unwrap();
    backward(both, "other consumers");

    // No parameter, a loss that is not a scalar, no gradients, built twice.
    let c = f32s(&ctx, &[3]);
    let mut g = Graph::with_grads(&ctx, 64).unwrap();
    err_with(g.build_backward(ctx.sum(ctx.sqr(c).unwrap()).unwrap()), "no parameter");
    let mut g = Graph::with_grads(&ctx, 64).unwrap();
    err_with(g.build_backward(ctx.sqr(x).unwrap()), "one-element");
    let mut g = Graph::new(&ctx, 64).unwrap();
    err_with(g.build_backward(ctx.sum(x).unwrap()), "with_grads");
    let mut g = Graph::with_grads(&ctx, 64).unwrap();
    let loss = ctx.sum(ctx.sqr(x).unwrap()).unwrap();
    g.build_backward(loss).unwrap();
    err_with(g.build_backward(loss), "already");
    // The backward needs room: a graph sized for the forward only.
    let mut g = Graph::with_grads(&ctx, 16).unwrap();
    let chain = (0..6).fold(x, |t, _| ctx.sqr(t).unwrap());
    let e = err_with(g.build_backward(ctx.sum(chain).unwrap()), "too small");
    assert!(matches!(e, Error::Capacity(_)));
    // An optimizer over a tensor that is not a parameter of the loss.
    let other = f32s(&ctx, &[2]);
    ctx.set_param(other).unwrap();
    let state = AdamWState::new(&ctx, &[other]).unwrap();
    match Optimizer::adamw(&ctx, &mut g, &state, &[ParamGroup { params: vec![other], weight_decay: 0.0 }], AdamWConfig::default(), None) {
        Err(e) => assert!(e.to_string().contains("gradient"), "{e}"),
        Ok(_) => panic!("a parameter outside the loss must be refused"),
    }
    still_works();
}

#[test]
fn capacity_overflows() {
    // A context of 4 tensors: the fifth is refused, and so is an op.
    let ctx = Context::new(4).unwrap();
    let ts: Vec<_> = (0..4).map(|_| f32s(&ctx, &[2])).collect();
    let e = err_with(ctx.new_tensor(DType::F32, &[2]), "full");
    assert!(matches!(e, Error::Capacity(_)));
    err_with(ctx.add(ts[0], ts[1]), "full");

    // A graph of 16 nodes cannot take a chain of 40.
    let ctx = Context::new(256).unwrap();
    let x = f32s(&ctx, &[2]);
    let chain = (0..40).fold(x, |t, _| ctx.sqr(t).unwrap());
    let mut g = Graph::new(&ctx, 16).unwrap();
    let e = err_with(g.expand(chain), "graph of size 16");
    assert!(matches!(e, Error::Capacity(_)));
    // The graph is still usable for something that fits.
    g.expand(ctx.sqr(x).unwrap()).unwrap();
    still_works();
}

#[test]
fn compute_time_errors() {
    let cpu = cpu();
    let ctx = Context::new(64).unwrap();
    let table = leaf(&ctx, &cpu, &[3, 4], &(0..12).map(|v| v as f32).collect::<Vec<_>>());
    let ids = leaf_i32(&ctx, &cpu, &[2], &[1, 4]); // row 4 of 4 rows: out of range
    let rows = ctx.get_rows(table, ids).unwrap().set_output();
    let mut g = Graph::new(&ctx, 16).unwrap();
    g.expand(rows).unwrap();
    err_with(g.compute(), "allocate the graph");
    g.allocate(&backends(&cpu)).unwrap();
    let e = err_with(g.compute(), "index 4");
    assert!(matches!(e, Error::Compute(_)));
    ids.write(&[-1i32, 0]).unwrap();
    err_with(g.compute(), "index -1");
    // Fixed indices compute.
    ids.write(&[3i32, 0]).unwrap();
    g.compute().unwrap();
    assert_eq!(rows.read::<f32>().unwrap(), vec![9.0, 10.0, 11.0, 0.0, 1.0, 2.0]);
    // Building after allocation, and allocating twice, are refused.
    err_with(g.expand(ctx.sqr(rows).unwrap()), "already allocated");
    err_with(g.allocate(&backends(&cpu)), "already allocated");

    // Indices fed through the scheduler (not pre-allocated) are checked too.
    let ids2 = ctx.new_tensor(DType::I32, &[3]).unwrap().set_input();
    let rows2 = ctx.get_rows(table, ids2).unwrap().set_output();
    let mut g2 = Graph::new(&ctx, 16).unwrap();
    g2.expand(rows2).unwrap();
    err_with(g2.allocate(&[]), "CPU backend last");
    g2.allocate(&backends(&cpu)).unwrap();
    ids2.write(&[0i32, 1, 99]).unwrap();
    err_with(g2.compute(), "index 99");

    // Tensor I/O misuse.
    err_with(table.write(&[1.0f32; 5]), "5 values");
    err_with(table.write(&[1i32; 12]), "tensor is f32");
    err_with(table.read::<i32>(), "asked for i32");
    let fresh = f32s(&ctx, &[2]);
    err_with(fresh.read::<f32>(), "not allocated");
    err_with(ctx.transpose(table).unwrap().read::<f32>(), "not contiguous");
    err_with(table.scalar(), "one-element");
    still_works();
}

#[test]
fn unmarked_leaves_reached_through_views() {
    // A leaf without data that the caller forgot to mark as an input, read only
    // through a view: ggml's allocator used to abort on it (buffer_id >= 0).
    let cpu = cpu();
    let ctx = Context::new(16).unwrap();
    let x = f32s(&ctx, &[4, 6]);
    let y = ctx.sqr(ctx.reshape(x, &[24]).unwrap()).unwrap().set_output();
    let t = ctx.cont(ctx.transpose(x).unwrap()).unwrap().set_output();
    let mut g = Graph::new(&ctx, 16).unwrap();
    g.expand(y).unwrap();
    g.expand(t).unwrap();
    g.allocate(&backends(&cpu)).unwrap();
    let v: Vec<f32> = (0..24).map(|i| i as f32).collect();
    x.write(&v).unwrap();
    g.compute().unwrap();
    assert_eq!(y.read::<f32>().unwrap(), v.iter().map(|a| a * a).collect::<Vec<_>>());
    assert_eq!(t.read::<f32>().unwrap()[..4], [0.0, 4.0, 8.0, 12.0]);
    still_works();
}
