//! `cross_entropy_loss_ids` (patch 0017): the loss and the logits' gradient
//! against an f64 reference, on vocabularies up to Qwen2's 151,936, with
//! ignored (−1) targets; finite differences through a matrix product (where
//! the backward may run in place over the logits). With `TOY_TEST_DEVICE=cuda`
//! the same checks run the CUDA kernels.

use crate::common::gradcheck::{grad_check, rand_param};
use crate::common::*;
use ggml_rs::{Context, DType, Graph};
use rand::Rng;

/// f64 reference: the mean over counted rows of logsumexp(row) − row[target],
/// and its gradient (softmax − onehot)/N (0 on ignored rows).
fn reference(logits: &[f64], targets: &[i32], nv: usize) -> (f64, Vec<f64>) {
    let counted = targets.iter().filter(|&&t| t >= 0 && (t as usize) < nv).count();
    let mut loss = 0.0;
    let mut grad = vec![0.0; logits.len()];
    for (r, &t) in targets.iter().enumerate() {
        if t < 0 || t as usize >= nv {
            continue;
        }
        let z = &logits[r * nv..(r + 1) * nv];
        let mx = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = z.iter().map(|v| (v - mx).exp()).sum();
        loss += mx + sum.ln() - z[t as usize];
        for v in 0..nv {
            grad[r * nv + v] = ((z[v] - mx).exp() / sum - if v == t as usize { 1.0 } else { 0.0 }) / counted as f64;
        }
    }
    (if counted == 0 { 0.0 } else { loss / counted as f64 }, grad)
}

/// Loss and d loss/d logits from the op, on the test device.
fn run(logits: &[f32], targets: &[i32], nv: usize) -> (f32, Vec<f32>) {
    run_padded(logits, targets, nv, nv)
}

/// [`run`] over logits `[ne0, rows]` of which the first `nv` columns are classes.
fn run_padded(logits: &[f32], targets: &[i32], ne0: usize, nv: usize) -> (f32, Vec<f32>) {
    let rows = targets.len();
    let dev = cpu();
    let ctx = Context::new(64).unwrap();
    let x = ctx.new_tensor(DType::F32, &[ne0 as i64, rows as i64]).unwrap();
    ctx.set_param(x).unwrap();
    let ids = ctx.new_tensor(DType::I32, &[rows as i64]).unwrap();
    ctx.allocate(&dev).unwrap();
    x.write(logits).unwrap();
    ids.write(targets).unwrap();
    let loss = ctx.cross_entropy_loss_ids_ext(x, ids, nv as i64).unwrap().set_output();
    let mut g = Graph::with_grads(&ctx, 64).unwrap();
    g.build_backward(loss).unwrap();
    let dx = g.grad(x).unwrap().set_output();
    g.allocate(&backends(&dev)).unwrap();
    g.reset_grads().unwrap();
    g.compute().unwrap();
    (loss.scalar().unwrap(), dx.read::<f32>().unwrap())
}

/// `max |a − b| / max |b|`: the error relative to the gradient's scale.
fn norm_rel_err(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs())).max(1e-30);
    got.iter().zip(want).map(|(&a, &b)| (a as f64 - b).abs()).fold(0.0, f64::max) / scale
}

#[test]
fn loss_and_gradient_match_f64_reference() {
    let mut r = rng(1700);
    // (vocabulary, rows): toy's, GPT-2's and Qwen2's vocabularies.
    for (nv, rows) in [(5usize, 3usize), (1000, 9), (50257, 6), (151936, 3)] {
        let logits = uniform(&mut r, nv * rows, -6.0, 6.0);
        let mut targets: Vec<i32> = (0..rows).map(|_| r.random_range(0..nv) as i32).collect();
        targets[1] = -1; // a masked token
        let (want_loss, want_grad) = reference(&f64s(&logits), &targets, nv);
        let (loss, grad) = run(&logits, &targets, nv);
        let le = (loss as f64 - want_loss).abs() / want_loss.abs();
        let ge = norm_rel_err(&grad, &want_grad);
        println!("cross_entropy_loss_ids [{nv}, {rows}]: loss rel err {le:.2e}, gradient rel err {ge:.2e}");
        assert!(le < 1e-6, "[{nv}, {rows}]: loss {loss} vs f64 {want_loss}");
        assert!(ge < 1e-6, "[{nv}, {rows}]: gradient off by {ge:e}");
        assert!(grad[nv..2 * nv].iter().all(|&g| g == 0.0), "[{nv}, {rows}]: a masked row has a gradient");
    }
}

#[test]
fn extreme_logits_and_masks() {
    let nv = 300;
    let mut r = rng(1701);
    // Large logits (no overflow), one -inf logit, a target out of range (ignored).
    let mut logits = uniform(&mut r, nv * 4, -80.0, 80.0);
    logits[nv + 8] = f32::NEG_INFINITY;
    let targets = [3, 7, -1, nv as i32];
    let (want_loss, want_grad) = reference(&f64s(&logits), &targets, nv);
    let (loss, grad) = run(&logits, &targets, nv);
    assert!((loss as f64 - want_loss).abs() / want_loss.abs() < 1e-6, "loss {loss} vs f64 {want_loss}");
    assert!(norm_rel_err(&grad, &want_grad) < 1e-6);
    assert!(grad[2 * nv..].iter().all(|&g| g == 0.0), "ignored rows have no gradient");

    // Every target ignored: loss 0 and no gradient (PyTorch would give NaN).
    let (loss, grad) = run(&logits, &[-1, -1, -1, -1], nv);
    assert_eq!(loss, 0.0);
    assert!(grad.iter().all(|&g| g == 0.0));
}

#[test]
fn finite_differences_through_a_matrix_product() {
    // logits = W·x, so the backward may run in place over the logits' memory.
    for seed in 0..3u64 {
        let mut r = rng(1710 + seed);
        let (k, nv, rows) = (r.random_range(2..=6usize), r.random_range(2..=40usize), r.random_range(2..=6usize));
        let w = rand_param(&mut r, &[k as i64, nv as i64], -2.0, 2.0);
        let x = rand_param(&mut r, &[k as i64, rows as i64], -2.0, 2.0);
        let mut targets: Vec<i32> = (0..rows).map(|_| r.random_range(0..nv) as i32).collect();
        targets[0] = -1;
        let tt = targets.clone();
        grad_check(
            &format!("cross_entropy_loss_ids(W·x) [{nv}, {rows}]"),
            seed,
            &[w, x],
            &move |ctx, p| {
                let ids = ctx.new_tensor(DType::I32, &[rows as i64]).unwrap();
                ctx.allocate(&cpu()).unwrap();
                ids.write(&tt).unwrap();
                ctx.cross_entropy_loss_ids(ctx.mul_mat(p[0], p[1]).unwrap(), ids).unwrap()
            },
            &|xs| {
                // logits[v, r] = Σ_i W[i, v]·x[i, r]
                let mut logits = vec![0.0; nv * rows];
                for row in 0..rows {
                    for v in 0..nv {
                        logits[row * nv + v] = (0..k).map(|i| xs[0][v * k + i] * xs[1][row * k + i]).sum();
                    }
                }
                vec![reference(&logits, &targets, nv).0]
            },
        );
    }
}

#[test]
fn refuses_bad_inputs() {
    let ctx = Context::new(16).unwrap();
    let logits = ctx.new_tensor(DType::F32, &[10, 4]).unwrap();
    let ids = ctx.new_tensor(DType::I32, &[3]).unwrap();
    let f_ids = ctx.new_tensor(DType::F32, &[4]).unwrap();
    let ok_ids = ctx.new_tensor(DType::I32, &[4]).unwrap();
    assert!(ctx.cross_entropy_loss_ids(logits, ids).unwrap_err().to_string().contains("one id per row"));
    assert!(ctx.cross_entropy_loss_ids(logits, f_ids).is_err());
    let t = ctx.transpose(logits).unwrap();
    assert!(ctx.cross_entropy_loss_ids(t, ok_ids).is_err());
    assert!(ctx.cross_entropy_loss_ids(logits, ok_ids).is_ok());
}

#[test]
fn padding_columns_take_no_part() {
    // The head padded to a multiple of 128 (toy's training graph): columns from
    // n_classes on hold anything and get a zero gradient.
    let (nv, pad, rows) = (1000usize, 24usize, 5usize);
    let ne0 = nv + pad;
    let mut r = rng(1720);
    let logits = uniform(&mut r, ne0 * rows, -5.0, 5.0);
    let mut targets: Vec<i32> = (0..rows).map(|_| r.random_range(0..nv) as i32).collect();
    targets[2] = -1;
    let valid: Vec<f64> = (0..rows).flat_map(|row| f64s(&logits[row * ne0..row * ne0 + nv])).collect();
    let (want_loss, want_grad) = reference(&valid, &targets, nv);

    let (got_loss, got) = run_padded(&logits, &targets, ne0, nv);
    assert!((got_loss as f64 - want_loss).abs() / want_loss < 1e-6, "loss {got_loss} vs f64 {want_loss}");
    for row in 0..rows {
        assert!(got[row * ne0 + nv..(row + 1) * ne0].iter().all(|&v| v == 0.0), "padding of row {row} has a gradient");
    }
    let got_valid: Vec<f32> = (0..rows).flat_map(|row| got[row * ne0..row * ne0 + nv].to_vec()).collect();
    assert!(norm_rel_err(&got_valid, &want_grad) < 1e-6);
    let ctx = Context::new(8).unwrap();
    let (x, ids) = (ctx.new_tensor(DType::F32, &[ne0 as i64, rows as i64]).unwrap(), ctx.new_tensor(DType::I32, &[rows as i64]).unwrap());
    assert!(ctx.cross_entropy_loss_ids_ext(x, ids, ne0 as i64 + 1).is_err());
    assert!(ctx.cross_entropy_loss_ids_ext(x, ids, 0).is_err());
}

#[test]
fn pad_has_a_gradient() {
    // The padded head W_p = pad(W) (patch 0019), through a product and the loss.
    let mut r = rng(1730);
    let (k, nv, rows, extra) = (4usize, 13usize, 3usize, 3usize);
    let w = rand_param(&mut r, &[k as i64, nv as i64], -2.0, 2.0);
    let x = rand_param(&mut r, &[k as i64, rows as i64], -2.0, 2.0);
    let targets: Vec<i32> = (0..rows).map(|_| r.random_range(0..nv) as i32).collect();
    let tt = targets.clone();
    grad_check(
        "cross_entropy_loss_ids_ext(pad(W)·x)",
        1730,
        &[w, x],
        &move |ctx, p| {
            let ids = ctx.new_tensor(DType::I32, &[rows as i64]).unwrap();
            ctx.allocate(&cpu()).unwrap();
            ids.write(&tt).unwrap();
            let wp = ctx.pad(p[0], [0, extra as i64, 0, 0]).unwrap(); // [k, nv + extra]
            ctx.cross_entropy_loss_ids_ext(ctx.mul_mat(wp, p[1]).unwrap(), ids, nv as i64).unwrap()
        },
        &|xs| {
            let mut logits = vec![0.0; nv * rows];
            for row in 0..rows {
                for v in 0..nv {
                    logits[row * nv + v] = (0..k).map(|i| xs[0][v * k + i] * xs[1][row * k + i]).sum();
                }
            }
            vec![reference(&logits, &targets, nv).0]
        },
    );
    // pad alone, with padding in two dimensions: the gradient is the window.
    let p = rand_param(&mut r, &[3, 2], -1.0, 1.0);
    grad_check("pad [3, 2] by [2, 1, 0, 0]", 1731, &[p], &|ctx, p| ctx.pad(p[0], [2, 1, 0, 0]).unwrap(), &|xs| {
        let mut out = vec![0.0; 5 * 3];
        for j in 0..2 {
            for i in 0..3 {
                out[j * 5 + i] = xs[0][j * 3 + i];
            }
        }
        out
    });
}
