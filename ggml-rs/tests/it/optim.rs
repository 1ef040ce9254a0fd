//! The optimizers of `ggml_rs::optim` against closed-form f64 implementations:
//! PyTorch's `torch.optim.AdamW` (decoupled weight decay, bias correction from
//! step 1) after `torch.nn.utils.clip_grad_norm_` (coef = min(1, max_norm /
//! (‖g‖ + 1e-6)) over all parameters), and SGD with decoupled weight decay.
//!
//! The model is a two-layer linear network with a bias, trained on a squared
//! error, with two parameter groups: the matrices (weight decay 0.1) and the
//! bias (no decay). Each step the test reads ggml's gradients (checked against
//! the analytic f64 gradient, which also shows they are recomputed from
//! scratch rather than accumulated), feeds them to the f64 optimizer, and
//! compares every parameter with it: max |p − p_ref| / |p_ref| ≤ 1e-6.
//! Parameters start at 0.5 ≤ |p| ≤ 1.5 and the steps are small, so they stay
//! away from 0 (asserted) and the plain relative error is well defined.

use crate::common;

use common::*;
use ggml_rs::optim::{AdamWConfig, AdamWState, Optimizer, ParamGroup};
use ggml_rs::{Context, DType, Graph, Tensor};

const STEPS: usize = 5;
const TOL: f64 = 1e-6;
const CLIP_EPS: f64 = 1e-6;

/// Sizes: inputs k, hidden m, outputs o, samples n.
const K: usize = 4;
const M: usize = 3;
const O: usize = 2;
const N: usize = 6;

/// The f64 model state: W1 `[K, M]`, b1 `[M]`, W2 `[M, O]` (ggml `ne` order).
#[derive(Clone)]
struct Params {
    p: [Vec<f64>; 3],
}

/// Analytic gradient of `L = (1/N)·Σ (W2·(W1·x + b1) − y)²` for each parameter.
fn grads(ps: &Params, x: &[f32], y: &[f32]) -> [Vec<f64>; 3] {
    let [w1, b1, w2] = &ps.p;
    let mut h = [0.0; M * N];
    for s in 0..N {
        for o in 0..M {
            h[s * M + o] = b1[o] + (0..K).map(|k| w1[o * K + k] * x[s * K + k] as f64).sum::<f64>();
        }
    }
    let mut dout = [0.0; O * N];
    for s in 0..N {
        for p in 0..O {
            let out: f64 = (0..M).map(|o| w2[p * M + o] * h[s * M + o]).sum();
            dout[s * O + p] = 2.0 * (out - y[s * O + p] as f64) / N as f64;
        }
    }
    let (mut dw1, mut db1, mut dw2) = (vec![0.0; K * M], vec![0.0; M], vec![0.0; M * O]);
    for s in 0..N {
        for o in 0..M {
            let dh: f64 = (0..O).map(|p| w2[p * M + o] * dout[s * O + p]).sum();
            db1[o] += dh;
            for k in 0..K {
                dw1[o * K + k] += dh * x[s * K + k] as f64;
            }
            for p in 0..O {
                dw2[p * M + o] += dout[s * O + p] * h[s * M + o];
            }
        }
    }
    [dw1, db1, dw2]
}

/// `torch.nn.utils.clip_grad_norm_`: scale all gradients by `min(1, max_norm / (‖g‖₂ + 1e-6))`.
/// Returns the norm before clipping.
fn clip(g: &mut [Vec<f64>; 3], max_norm: Option<f64>) -> f64 {
    let norm = g.iter().flatten().map(|v| v * v).sum::<f64>().sqrt();
    if let Some(max) = max_norm {
        let coef = (max / (norm + CLIP_EPS)).min(1.0);
        g.iter_mut().flatten().for_each(|v| *v *= coef);
    }
    norm
}

/// `torch.optim.AdamW.step` for one parameter at step `t` (1-based):
/// `p ← p·(1 − lr·wd)`; `m ← β1·m + (1−β1)·g`; `v ← β2·v + (1−β2)·g²`;
/// `p ← p − (lr / (1−β1ᵗ))·m / (√v / √(1−β2ᵗ) + eps)`.
#[allow(clippy::too_many_arguments)]
fn adamw_step(p: &mut [f64], g: &[f64], m: &mut [f64], v: &mut [f64], t: i32, lr: f64, (b1, b2): (f64, f64), eps: f64, wd: f64) {
    let (bc1, bc2) = (1.0 - b1.powi(t), 1.0 - b2.powi(t));
    for i in 0..p.len() {
        p[i] *= 1.0 - lr * wd;
        m[i] = b1 * m[i] + (1.0 - b1) * g[i];
        v[i] = b2 * v[i] + (1.0 - b2) * g[i] * g[i];
        p[i] -= lr / bc1 * m[i] / (v[i].sqrt() / bc2.sqrt() + eps);
    }
}

/// Plain relative error `max |a − b| / |b|` (the parameters are far from 0).
fn rel(got: &[f32], want: &[f64]) -> f64 {
    got.iter().zip(want).map(|(&a, &b)| (a as f64 - b).abs() / b.abs()).fold(0.0, f64::max)
}

/// The plain relative error is only meaningful away from 0: the steps here
/// are small enough that no parameter gets near it.
fn assert_min_magnitude(p: &[f64]) {
    let min = p.iter().fold(f64::INFINITY, |m, v| m.min(v.abs()));
    assert!(min > 0.25, "a parameter came within {min} of 0; the relative error would be ill-conditioned");
}

/// Error of a moment estimate, relative to its largest entry (entries of `m`
/// can be near 0 through cancellation).
fn rel_to_max(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(1e-30f64, |a, v| a.max(v.abs()));
    got.iter().zip(want).map(|(&a, &b)| (a as f64 - b).abs() / scale).fold(0.0, f64::max)
}

struct Setup {
    init: [Vec<f32>; 3],
    x: Vec<f32>,
    y: Vec<f32>,
}

fn setup(seed: u64) -> Setup {
    let mut r = rng(seed);
    Setup {
        init: [away_from_zero(&mut r, K * M, 0.5, 1.5), away_from_zero(&mut r, M, 0.5, 1.5), away_from_zero(&mut r, M * O, 0.5, 1.5)],
        x: uniform(&mut r, K * N, -1.0, 1.0),
        y: uniform(&mut r, O * N, -1.0, 1.0),
    }
}

/// The model in ggml: params (allocated and initialised) and the loss.
fn model<'a>(wctx: &'a Context, ctx: &'a Context) -> ([Tensor<'a>; 3], Tensor<'a>, Tensor<'a>, Tensor<'a>) {
    let w1 = wctx.new_tensor_2d(DType::F32, K as i64, M as i64).unwrap().set_name("w1").unwrap();
    let b1 = wctx.new_tensor_1d(DType::F32, M as i64).unwrap().set_name("b1").unwrap();
    let w2 = wctx.new_tensor_2d(DType::F32, M as i64, O as i64).unwrap().set_name("w2").unwrap();
    let params = [w1, b1, w2];
    for p in params {
        wctx.set_param(p).unwrap();
    }
    let x = ctx.new_tensor_2d(DType::F32, K as i64, N as i64).unwrap().set_input();
    let y = ctx.new_tensor_2d(DType::F32, O as i64, N as i64).unwrap().set_input();
    let h = ctx.add(ctx.mul_mat(w1, x).unwrap(), b1).unwrap(); // [M, N]
    let out = ctx.mul_mat(w2, h).unwrap(); // [O, N]
    let loss = ctx.scale(ctx.sum(ctx.sqr(ctx.sub(out, y).unwrap()).unwrap()).unwrap(), 1.0 / N as f32).unwrap().set_output();
    (params, x, y, loss)
}

fn write_init(params: &[Tensor<'_>; 3], s: &Setup) {
    for (p, v) in params.iter().zip(&s.init) {
        p.write(v).unwrap();
    }
}

fn read_params(params: &[Tensor<'_>; 3]) -> [Vec<f32>; 3] {
    [params[0].read().unwrap(), params[1].read().unwrap(), params[2].read().unwrap()]
}

/// The learning rate of step `t` (1-based): a decaying schedule, so the
/// per-step learning-rate input is exercised.
fn lr_at(t: usize) -> f32 {
    0.02 * (1.0 - 0.1 * (t as f32 - 1.0))
}

const WD: [f64; 3] = [0.1, 0.0, 0.1];

/// Run AdamW for STEPS steps with the given clipping and compare with the f64
/// reference after every step. Returns (max param error, max moment error,
/// number of steps where clipping scaled the gradients).
fn run_adamw(seed: u64, max_norm: Option<f32>) -> (f64, f64, usize) {
    let s = setup(seed);
    let cpu = cpu();
    let wctx = Context::new(16).unwrap();
    let ctx = Context::new(512).unwrap();
    let (params, x, y, loss) = model(&wctx, &ctx);
    let state = AdamWState::new(&wctx, &params).unwrap();
    wctx.allocate(&cpu).unwrap();
    write_init(&params, &s);
    let mut g = Graph::with_grads(&ctx, 2048).unwrap();
    g.expand(loss).unwrap();
    g.build_backward(loss).unwrap();
    let gts: Vec<Tensor<'_>> = params.iter().map(|&p| g.grad(p).unwrap().set_output()).collect();
    let groups = [
        ParamGroup { params: vec![params[0], params[2]], weight_decay: WD[0] as f32 },
        ParamGroup { params: vec![params[1]], weight_decay: WD[1] as f32 },
    ];
    let cfg = AdamWConfig { lr: 0.02, betas: (0.9, 0.95), eps: 1e-8, weight_decay: 0.1 };
    let mut opt = Optimizer::adamw(&ctx, &mut g, &state, &groups, cfg, max_norm).unwrap();
    g.allocate(&backends(&cpu)).unwrap();

    let mut reference = Params { p: s.init.clone().map(|v| f64s(&v)) };
    let mut m: [Vec<f64>; 3] = reference.p.clone().map(|v| vec![0.0; v.len()]);
    let mut v = m.clone();
    let (mut worst_p, mut worst_m, mut clipped) = (0.0f64, 0.0f64, 0usize);
    for t in 1..=STEPS {
        let before = read_params(&params);
        x.write(&s.x).unwrap();
        y.write(&s.y).unwrap();
        opt.prepare_step(lr_at(t)).unwrap();
        g.compute().unwrap();
        opt.finish_step();
        assert_eq!(opt.step_count(), t as u64);

        // ggml's gradients, at the pre-step parameters, against the analytic ones.
        let gg: Vec<Vec<f32>> = gts.iter().map(|t| t.read().unwrap()).collect();
        let exact = grads(&Params { p: before.clone().map(|v| f64s(&v)) }, &s.x, &s.y);
        for i in 0..3 {
            let e = rel_to_max(&gg[i], &exact[i]);
            assert!(e < 1e-5, "step {t}: gradient {i} off by {e:e} (accumulated across steps?)");
        }

        let mut gr = [f64s(&gg[0]), f64s(&gg[1]), f64s(&gg[2])];
        let norm = clip(&mut gr, max_norm.map(f64::from));
        if let Some(max) = max_norm {
            let got = opt.grad_norm().unwrap().scalar().unwrap() as f64;
            assert!((got - norm).abs() / norm < 1e-6, "step {t}: grad norm {got} vs {norm}");
            if norm > max as f64 {
                clipped += 1;
            }
        }
        for i in 0..3 {
            adamw_step(
                &mut reference.p[i],
                &gr[i],
                &mut m[i],
                &mut v[i],
                t as i32,
                lr_at(t) as f64,
                (0.9f32 as f64, 0.95f32 as f64),
                1e-8f32 as f64,
                WD[i] as f32 as f64,
            );
        }
        let after = read_params(&params);
        for i in 0..3 {
            assert_min_magnitude(&reference.p[i]);
            let e = rel(&after[i], &reference.p[i]);
            println!("AdamW clip {max_norm:?} step {t} {}: param max rel err {e:.3e}", params[i].name());
            assert!(e <= TOL, "step {t}: {} off by {e:e} from PyTorch AdamW", params[i].name());
            worst_p = worst_p.max(e);
        }
        for (i, (_, mt, vt)) in state.entries().iter().enumerate() {
            let em = rel_to_max(&mt.read().unwrap(), &m[i]).max(rel_to_max(&vt.read().unwrap(), &v[i]));
            assert!(em <= TOL, "step {t}: moments of {} off by {em:e}", params[i].name());
            worst_m = worst_m.max(em);
        }
    }
    (worst_p, worst_m, clipped)
}

#[test]
fn adamw_groups_without_clipping() {
    let (p, m, _) = run_adamw(1, None);
    println!("AdamW, 2 groups, no clipping: params {p:.3e}, moments {m:.3e}");
}

#[test]
fn adamw_groups_with_active_clipping() {
    // The gradient norm here is O(1): a max norm of 0.05 clips every step.
    let (p, m, clipped) = run_adamw(2, Some(0.05));
    assert_eq!(clipped, STEPS, "clipping must be active in this test");
    println!("AdamW, 2 groups, clip 0.05: params {p:.3e}, moments {m:.3e}");
}

#[test]
fn adamw_groups_with_inactive_clipping() {
    let (p, _, clipped) = run_adamw(3, Some(1e3));
    assert_eq!(clipped, 0);
    println!("AdamW, 2 groups, clip 1e3: params {p:.3e}");
}

#[test]
fn adamw_bias_correction_from_step_one() {
    // With bias correction m̂ = g and v̂ = g² at step 1, so every weight without
    // decay moves by lr·g/(|g| + eps) ≈ lr·sign(g), whatever the gradient's
    // scale (without it the step would be (1−β1)/√(1−β2) ≈ 0.45·lr).
    let s = setup(4);
    let cpu = cpu();
    let wctx = Context::new(16).unwrap();
    let ctx = Context::new(512).unwrap();
    let (params, x, y, loss) = model(&wctx, &ctx);
    let state = AdamWState::new(&wctx, &params).unwrap();
    wctx.allocate(&cpu).unwrap();
    write_init(&params, &s);
    let mut g = Graph::with_grads(&ctx, 2048).unwrap();
    g.expand(loss).unwrap();
    g.build_backward(loss).unwrap();
    let gts: Vec<Tensor<'_>> = params.iter().map(|&p| g.grad(p).unwrap().set_output()).collect();
    let groups = [ParamGroup { params: params.to_vec(), weight_decay: 0.0 }];
    let lr = 0.01f32;
    let mut opt =
        Optimizer::adamw(&ctx, &mut g, &state, &groups, AdamWConfig { lr, betas: (0.9, 0.999), eps: 1e-8, weight_decay: 0.0 }, None)
            .unwrap();
    g.allocate(&backends(&cpu)).unwrap();
    let before = read_params(&params);
    x.write(&s.x).unwrap();
    y.write(&s.y).unwrap();
    opt.prepare_step(lr).unwrap();
    g.compute().unwrap();
    opt.finish_step();
    let after = read_params(&params);
    let mut worst = 0.0f64;
    for i in 0..3 {
        let gg: Vec<f32> = gts[i].read().unwrap();
        for j in 0..gg.len() {
            let step = before[i][j] as f64 - after[i][j] as f64;
            // Resolution of the measured step: one f32 ulp of the parameter.
            let e = (step - lr as f64 * gg[j].signum() as f64).abs() / lr as f64;
            worst = worst.max(e);
            assert!(e < 1e-4, "param {i}[{j}]: step {step} for gradient {} (expected ±{lr})", gg[j]);
        }
    }
    println!("AdamW step 1 moves each weight by lr: max rel err {worst:.3e}");
}

#[test]
fn sgd_groups_with_clipping() {
    // SGD as ggml_opt_step_sgd defines it: decoupled weight decay,
    // p ← p·(1 − lr·wd) − lr·g (PyTorch's SGD without decay for wd = 0).
    for (seed, max_norm) in [(5u64, None), (6, Some(0.05f32))] {
        let s = setup(seed);
        let cpu = cpu();
        let wctx = Context::new(16).unwrap();
        let ctx = Context::new(512).unwrap();
        let (params, x, y, loss) = model(&wctx, &ctx);
        wctx.allocate(&cpu).unwrap();
        write_init(&params, &s);
        let mut g = Graph::with_grads(&ctx, 2048).unwrap();
        g.expand(loss).unwrap();
        g.build_backward(loss).unwrap();
        let gts: Vec<Tensor<'_>> = params.iter().map(|&p| g.grad(p).unwrap().set_output()).collect();
        let groups = [
            ParamGroup { params: vec![params[0], params[2]], weight_decay: WD[0] as f32 },
            ParamGroup { params: vec![params[1]], weight_decay: WD[1] as f32 },
        ];
        let mut opt = Optimizer::sgd(&ctx, &mut g, &groups, max_norm).unwrap();
        g.allocate(&backends(&cpu)).unwrap();
        let mut reference: [Vec<f64>; 3] = s.init.clone().map(|v| f64s(&v));
        let mut worst = 0.0f64;
        for t in 1..=STEPS {
            x.write(&s.x).unwrap();
            y.write(&s.y).unwrap();
            // Gradients here reach ~10: a small rate keeps every parameter away from 0.
            let lr = lr_at(t) * 0.1;
            opt.prepare_step(lr).unwrap();
            g.compute().unwrap();
            opt.finish_step();
            let mut gr: [Vec<f64>; 3] = [0usize, 1, 2].map(|i| f64s(&gts[i].read::<f32>().unwrap()));
            let norm = clip(&mut gr, max_norm.map(f64::from));
            if let Some(max) = max_norm {
                assert!(norm > max as f64, "clipping must be active");
            }
            let after = read_params(&params);
            for i in 0..3 {
                let wd = WD[i] as f32 as f64;
                for (p, gv) in reference[i].iter_mut().zip(&gr[i]) {
                    *p = *p * (1.0 - lr as f64 * wd) - lr as f64 * gv;
                }
                let e = rel(&after[i], &reference[i]);
                assert!(e <= TOL, "SGD step {t}: {} off by {e:e}", params[i].name());
                assert_min_magnitude(&reference[i]);
                worst = worst.max(e);
            }
        }
        println!("SGD, 2 groups, clip {max_norm:?}: params max rel err {worst:.3e}");
    }
}

#[test]
fn optimizer_refuses_bad_settings() {
    let wctx = Context::new(16).unwrap();
    let ctx = Context::new(512).unwrap();
    let (params, _, _, loss) = model(&wctx, &ctx);
    let state = AdamWState::new(&wctx, &params).unwrap();
    let mut g = Graph::with_grads(&ctx, 2048).unwrap();
    g.expand(loss).unwrap();
    g.build_backward(loss).unwrap();
    let groups = [ParamGroup { params: params.to_vec(), weight_decay: 0.1 }];
    let bad = AdamWConfig { betas: (1.0, 0.999), ..Default::default() };
    assert!(Optimizer::adamw(&ctx, &mut g, &state, &groups, bad, None).is_err());
    assert!(Optimizer::adamw(&ctx, &mut g, &state, &groups, AdamWConfig::default(), Some(-1.0)).is_err());
    let mut opt = Optimizer::adamw(&ctx, &mut g, &state, &groups, AdamWConfig::default(), None).unwrap();
    assert!(opt.prepare_step(f32::NAN).is_err());
    // A parameter that does not reach the loss has no gradient.
    let lone = wctx.new_tensor_1d(DType::F32, 3).unwrap().set_name("lone").unwrap();
    wctx.set_param(lone).unwrap();
    match Optimizer::sgd(&ctx, &mut g, &[ParamGroup { params: vec![lone], weight_decay: 0.0 }], None) {
        Err(e) => assert!(e.to_string().contains("lone"), "{e}"),
        Ok(_) => panic!("a parameter without gradient must be refused"),
    }
}
