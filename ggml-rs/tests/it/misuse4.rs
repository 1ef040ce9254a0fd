//! Misuse a fourth library user reported (stop 75, the optimizer, quantization,
//! GGUF writing and backends): a refused optimizer left update nodes in the
//! graph (weights NaN after a retry), quantization aborted or wrote NaN scales,
//! step counts past i32 and non-finite weight decays were taken, CPU backends
//! started by name kept ggml's 4 threads. Each is now refused or works.

use crate::common::*;
use crate::errors::{err_with, still_works};
use ggml_rs::backend::default_n_threads;
use ggml_rs::gguf::{GgufFile, GgufWriter};
use ggml_rs::optim::{AdamWConfig, AdamWState, Optimizer, ParamGroup};
use ggml_rs::{Backend, Context, DType, Graph};

/// One parameter `w` of 4 with loss Σ(w − x)², its AdamW state and graph.
fn train_one<'a>(ctx: &'a Context, w: ggml_rs::Tensor<'a>) -> (Graph<'a>, ggml_rs::Tensor<'a>) {
    let x = ctx.new_tensor_1d(DType::F32, 4).unwrap().set_input();
    let loss = ctx.sum(ctx.sqr(ctx.sub(w, x).unwrap()).unwrap()).unwrap().set_output();
    let mut g = Graph::with_grads(ctx, 256).unwrap();
    g.build_backward(loss).unwrap();
    (g, x)
}

/// A refused optimizer leaves the graph as it was: retried with the full
/// state, one step moves the weights (they were NaN: the first attempt's
/// update of `a` stayed in the graph with hyper-parameters never written).
#[test]
fn a_refused_optimizer_leaves_the_graph_unchanged() {
    let cpu = cpu();
    let wctx = Context::new(16).unwrap();
    let a = wctx.new_tensor_1d(DType::F32, 2).unwrap().set_name("a").unwrap();
    let b = wctx.new_tensor_1d(DType::F32, 2).unwrap().set_name("b").unwrap();
    wctx.set_param(a).unwrap();
    wctx.set_param(b).unwrap();
    let only_a = AdamWState::new(&wctx, &[a]).unwrap();
    let both = AdamWState::new(&wctx, &[a, b]).unwrap();
    wctx.allocate(&cpu).unwrap();
    a.write(&[1f32, 1.]).unwrap();
    b.write(&[1f32, 1.]).unwrap();
    let ctx = Context::new(256).unwrap();
    let loss = ctx.add(ctx.sum(ctx.sqr(a).unwrap()).unwrap(), ctx.sum(ctx.sqr(b).unwrap()).unwrap()).unwrap().set_output();
    let mut g = Graph::with_grads(&ctx, 256).unwrap();
    g.build_backward(loss).unwrap();
    let groups = [ParamGroup { params: vec![a, b], weight_decay: 0.0 }];
    err_with(Optimizer::adamw(&ctx, &mut g, &only_a, &groups, AdamWConfig::default(), None).map(|_| ()), "no AdamW moments");
    let mut opt = Optimizer::adamw(&ctx, &mut g, &both, &groups, AdamWConfig::default(), None).unwrap();
    g.allocate(&backends(&cpu)).unwrap();
    opt.step(&mut g, 0.1).unwrap();
    for w in [a, b] {
        let v = w.read::<f32>().unwrap();
        assert!(v.iter().all(|x| x.is_finite() && (x - 0.9).abs() < 1e-3), "{v:?}");
    }
    still_works();
}

/// Weight decays must be finite and ≥ 0, in groups as in the config.
#[test]
fn weight_decays_are_checked() {
    let cpu = cpu();
    let wctx = Context::new(16).unwrap();
    let w = wctx.new_tensor_1d(DType::F32, 4).unwrap();
    wctx.set_param(w).unwrap();
    let state = AdamWState::new(&wctx, &[w]).unwrap();
    wctx.allocate(&cpu).unwrap();
    let ctx = Context::new(256).unwrap();
    for wd in [f32::NAN, f32::INFINITY, -5.0] {
        let (mut g, _) = train_one(&ctx, w);
        let groups = [ParamGroup { params: vec![w], weight_decay: wd }];
        err_with(Optimizer::adamw(&ctx, &mut g, &state, &groups, AdamWConfig::default(), None).map(|_| ()), "weight_decay");
        err_with(Optimizer::sgd(&ctx, &mut g, &groups, None).map(|_| ()), "weight_decay");
        let cfg = AdamWConfig { weight_decay: wd, ..AdamWConfig::default() };
        let ok = [ParamGroup { params: vec![w], weight_decay: 0.0 }];
        err_with(Optimizer::adamw(&ctx, &mut g, &state, &ok, cfg, None).map(|_| ()), "weight_decay");
    }
}

/// Step counts past i32 keep bias corrections of 1 (the count wrapped: no
/// update at 2³¹ − 1, an overflow panic at u64::MAX).
#[test]
fn step_counts_past_i32_still_update() {
    let cpu = cpu();
    for t in [i32::MAX as u64 - 1, i32::MAX as u64, u64::MAX - 1, u64::MAX] {
        let wctx = Context::new(16).unwrap();
        let w = wctx.new_tensor_1d(DType::F32, 4).unwrap();
        wctx.set_param(w).unwrap();
        let state = AdamWState::new(&wctx, &[w]).unwrap();
        wctx.allocate(&cpu).unwrap();
        w.write(&[1f32; 4]).unwrap();
        let ctx = Context::new(256).unwrap();
        let (mut g, x) = train_one(&ctx, w);
        let groups = [ParamGroup { params: vec![w], weight_decay: 0.0 }];
        let mut opt = Optimizer::adamw(&ctx, &mut g, &state, &groups, AdamWConfig::default(), None).unwrap();
        g.allocate(&backends(&cpu)).unwrap();
        x.write(&[0f32; 4]).unwrap();
        opt.set_step_count(t);
        opt.step(&mut g, 0.1).unwrap();
        let v = w.read::<f32>().unwrap();
        // m = 0.1·g, v = 0.001·g², corrections 1: a step of 0.1·0.1/√0.001 ≈ 0.316
        assert!(v.iter().all(|x| (x - (1.0 - 0.1 * 0.1 / 0.001f32.sqrt())).abs() < 1e-3), "step {t}: {v:?}");
    }
}

/// Quantized types refuse values they cannot hold (ggml aborted on a NaN for
/// the IQ types, and wrote NaN or infinite scales for the others); f16 keeps them.
#[test]
fn quantization_refuses_values_blocks_cannot_hold() {
    let mut x = vec![0.5f32; 256];
    for (bad, at) in [(f32::NAN, 3), (f32::INFINITY, 100), (1e7, 7), (-3e38, 255)] {
        x[at] = bad;
        for t in [DType::Q8_0, DType::Q4_0, DType::Q4K, DType::Q6K, DType::from_name("iq3_s").unwrap(), DType::from_name("iq4_nl").unwrap()]
        {
            let e = err_with(t.quantize(&x, 256), &format!("at index {at}"));
            assert!(e.to_string().contains("f16"), "{e}");
        }
        x[at] = 0.5;
    }
    x[9] = f32::INFINITY;
    let h = DType::F16.quantize(&x, 256).unwrap();
    assert_eq!(DType::F16.to_f32(&h, 256).unwrap()[9], f32::INFINITY);
    x[9] = 60000.0;
    let q = DType::Q8_0.quantize(&x, 256).unwrap();
    let back = DType::Q8_0.to_f32(&q, 256).unwrap();
    assert!(back.iter().all(|v| v.is_finite()) && (back[9] - 60000.0).abs() < 300.0, "{}", back[9]);
    err_with(DType::from_name("q8_1").unwrap().quantize(&x, 256), "no converter from f32 to q8_1");
    err_with(DType::Q4_0.quantize(&[], 1 << 63), "do not split");
    err_with(DType::Q4_0.to_f32(&[0u8; 18], usize::MAX - 31), "needed");
    still_works();
}

/// A CPU backend started by name has the same threads as `Backend::cpu()`,
/// and says how many.
#[test]
fn cpu_backends_by_name_take_the_default_threads() {
    let named = Backend::by_name("cpu").unwrap();
    assert_eq!(named.n_threads(), Some(default_n_threads()));
    assert_eq!(Backend::cpu().unwrap().n_threads(), Some(default_n_threads()));
    named.set_n_threads(3);
    assert_eq!(named.n_threads(), Some(3));
}

/// A GGUF file whose name leaves no room for a longer temporary name is
/// written (the temporary's name is cut), and a file replaced keeps its
/// permissions.
#[test]
fn gguf_writes_keep_long_names_and_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let mut w = GgufWriter::new();
    w.set("general.name", "x").unwrap();
    let long = dir.path().join(format!("{}.gguf", "é".repeat(120)));
    w.write(&long).unwrap();
    assert_eq!(GgufFile::open(&long).unwrap().get("general.name").and_then(|v| v.as_str()), Some("x"));
    let p = dir.path().join("kept.gguf");
    w.write(&p).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    w.write(&p).unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 2, "no temporaries left");
}

/// A fifth pass's findings: a non-finite softmax scale is refused (it gave NaN
/// everywhere), and an unnamed parameter is not called by ggml's `node_0`.
#[test]
fn softmax_scales_and_unnamed_parameters() {
    let cpu = cpu();
    let ctx = Context::new(64).unwrap();
    let a = ctx.new_tensor_2d(DType::F32, 4, 2).unwrap();
    for s in [f32::NAN, f32::INFINITY] {
        err_with(ctx.soft_max_ext(a, None, s), "is not finite");
    }
    let p = ctx.new_tensor_1d(DType::F32, 4).unwrap();
    ctx.set_param(p).unwrap();
    let loss = ctx.sum(ctx.sqr(p).unwrap()).unwrap();
    let mut g = Graph::with_grads(&ctx, 64).unwrap();
    g.build_backward(loss).unwrap();
    let e = err_with(g.allocate(&backends(&cpu)), "parameter without memory").to_string();
    assert!(e.contains("(unnamed)") && !e.contains("node_"), "{e}");
}

/// An output read after `allocate` and before the graph's first run that
/// succeeds is refused (it gave the buffer's zeros); afterwards it reads the
/// result. Inputs read back what was written at any time.
#[test]
fn outputs_are_read_only_after_a_run() {
    let cpu = cpu();
    let ctx = Context::new(16).unwrap();
    let ids = ctx.new_tensor_1d(DType::I32, 2).unwrap().set_input();
    let table = ctx.new_tensor_2d(DType::F32, 2, 3).unwrap().set_input();
    let y = ctx.scale(ctx.get_rows(table, ids).unwrap(), 2.0).unwrap().set_output();
    let mut g = Graph::new(&ctx, 16).unwrap();
    g.expand(y).unwrap();
    g.allocate(&backends(&cpu)).unwrap();
    table.write(&[1f32, 2., 3., 4., 5., 6.]).unwrap();
    ids.write(&[2i32, 0]).unwrap();
    assert_eq!(ids.read::<i32>().unwrap(), [2, 0]);
    err_with(y.read::<f32>().map(|_| ()), "has not run yet");
    ids.write(&[3i32, 0]).unwrap();
    err_with(g.compute(), "outside the 3 rows");
    err_with(y.read::<f32>().map(|_| ()), "has not run yet");
    ids.write(&[2i32, 0]).unwrap();
    g.compute().unwrap();
    assert_eq!(y.read::<f32>().unwrap(), [10., 12., 2., 4.]);
    still_works();
}
