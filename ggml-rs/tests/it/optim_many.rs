//! AdamW over many parameters of odd sizes, against the closed-form f64 update
//! of `torch.optim.AdamW` after `torch.nn.utils.clip_grad_norm_`.
//!
//! The CUDA backend runs a graph's consecutive AdamW steps, and the gradient
//! norm's sums of squares, as lists of up to 48 parameters in one launch (ggml
//! patch 0039): 60 parameters make a full list and a partial one, and the sizes
//! (1 to 70,001 values, multiples of 4 and not, across the 1,024-value chunks)
//! cover every path of those kernels. Run with `TOY_TEST_DEVICE=cuda`.
//!
//! The loss is `L = Σᵢ ½·Σ (pᵢ ⊙ aᵢ)²`, so `∂L/∂pᵢ = pᵢ ⊙ aᵢ²`; two groups
//! (weight decay 0.1 on even parameters, none on odd ones).

use crate::common;

use common::*;
use ggml_rs::optim::{AdamWConfig, AdamWState, Optimizer, ParamGroup};
use ggml_rs::{Context, DType, Graph, Tensor};

const SIZES: [usize; 12] = [1, 3, 4, 5, 1023, 1024, 1025, 2048, 4099, 70001, 6, 64];
const N_PARAMS: usize = 60;
const STEPS: i32 = 3;
const TOL: f64 = 1e-6;

fn size(i: usize) -> usize {
    SIZES[i % SIZES.len()]
}

fn wd(i: usize) -> f64 {
    if i % 2 == 0 {
        0.1f32 as f64
    } else {
        0.0
    }
}

/// Max |got − want| / max |want|.
fn rel_to_max(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(1e-30f64, |a, v| a.max(v.abs()));
    got.iter().zip(want).map(|(&a, &b)| (a as f64 - b).abs() / scale).fold(0.0, f64::max)
}

fn run(max_norm: Option<f32>) {
    let dev = cpu();
    let mut r = rng(39);
    let wctx = Context::new(4 * N_PARAMS + 8).unwrap();
    let ctx = Context::new(128 * N_PARAMS).unwrap();
    let params: Vec<Tensor<'_>> = (0..N_PARAMS)
        .map(|i| {
            let p = wctx.new_tensor_1d(DType::F32, size(i) as i64).unwrap().set_name(&format!("p{i}")).unwrap();
            wctx.set_param(p).unwrap();
            p
        })
        .collect();
    let state = AdamWState::new(&wctx, &params).unwrap();
    wctx.allocate(&dev).unwrap();
    let init: Vec<Vec<f32>> = (0..N_PARAMS).map(|i| away_from_zero(&mut r, size(i), 0.5, 1.5)).collect();
    let a: Vec<Vec<f32>> = (0..N_PARAMS).map(|i| uniform(&mut r, size(i), 0.5, 1.5)).collect();
    for (p, v) in params.iter().zip(&init) {
        p.write(v).unwrap();
    }
    let inputs: Vec<Tensor<'_>> = (0..N_PARAMS).map(|i| ctx.new_tensor_1d(DType::F32, size(i) as i64).unwrap().set_input()).collect();
    let mut loss = None;
    for (&p, &x) in params.iter().zip(&inputs) {
        let s = ctx.sum(ctx.sqr(ctx.mul(p, x).unwrap()).unwrap()).unwrap();
        loss = Some(match loss {
            None => s,
            Some(l) => ctx.add(l, s).unwrap(),
        });
    }
    let loss = ctx.scale(loss.unwrap(), 0.5).unwrap().set_output();
    let mut g = Graph::with_grads(&ctx, 4096).unwrap();
    g.expand(loss).unwrap();
    g.build_backward(loss).unwrap();
    let grads: Vec<Tensor<'_>> = params.iter().map(|&p| g.grad(p).unwrap().set_output()).collect();
    let even: Vec<Tensor<'_>> = params.iter().step_by(2).copied().collect();
    let odd: Vec<Tensor<'_>> = params.iter().skip(1).step_by(2).copied().collect();
    let groups = [ParamGroup { params: even, weight_decay: 0.1 }, ParamGroup { params: odd, weight_decay: 0.0 }];
    let (b1, b2, eps) = (0.9f32, 0.95f32, 1e-8f32);
    let cfg = AdamWConfig { lr: 0.01, betas: (b1, b2), eps, weight_decay: 0.1 };
    let mut opt = Optimizer::adamw(&ctx, &mut g, &state, &groups, cfg, max_norm).unwrap();
    g.allocate(&backends(&dev)).unwrap();

    // The groups' order: moments of parameter i, in the order of `params`.
    let mut p64: Vec<Vec<f64>> = init.iter().map(|v| f64s(v)).collect();
    let mut m64: Vec<Vec<f64>> = p64.iter().map(|v| vec![0.0; v.len()]).collect();
    let mut v64 = m64.clone();
    let mut clipped = 0;
    for t in 1..=STEPS {
        for (x, v) in inputs.iter().zip(&a) {
            x.write(v).unwrap();
        }
        let lr = 0.01 * (1.0 - 0.1 * (t - 1) as f32);
        let before: Vec<Vec<f32>> = params.iter().map(|p| p.read().unwrap()).collect();
        opt.prepare_step(lr).unwrap();
        g.compute().unwrap();
        opt.finish_step();
        let mut gr: Vec<Vec<f64>> = Vec::new();
        for i in 0..N_PARAMS {
            let got: Vec<f32> = grads[i].read().unwrap();
            let exact: Vec<f64> = before[i].iter().zip(&a[i]).map(|(&p, &x)| p as f64 * x as f64 * x as f64).collect();
            let e = rel_to_max(&got, &exact);
            assert!(e < 1e-6, "step {t}: gradient of p{i} off by {e:e}");
            gr.push(f64s(&got));
        }
        let norm = gr.iter().flatten().map(|v| v * v).sum::<f64>().sqrt();
        if let Some(max) = max_norm {
            let got = opt.grad_norm().unwrap().scalar().unwrap() as f64;
            assert!((got - norm).abs() / norm < 1e-6, "step {t}: gradient norm {got} vs {norm}");
            let coef = (max as f64 / (norm + 1e-6)).min(1.0);
            clipped += (coef < 1.0) as usize;
            gr.iter_mut().flatten().for_each(|v| *v *= coef);
        }
        let (bc1, bc2) = (1.0 - (b1 as f64).powi(t), 1.0 - (b2 as f64).powi(t));
        let mut worst = 0.0f64;
        for i in 0..N_PARAMS {
            for j in 0..p64[i].len() {
                let (p, m, v, gv) = (&mut p64[i][j], &mut m64[i][j], &mut v64[i][j], gr[i][j]);
                *p *= 1.0 - lr as f64 * wd(i);
                *m = b1 as f64 * *m + (1.0 - b1 as f64) * gv;
                *v = b2 as f64 * *v + (1.0 - b2 as f64) * gv * gv;
                *p -= lr as f64 / bc1 * *m / (v.sqrt() / bc2.sqrt() + eps as f64);
            }
            let got: Vec<f32> = params[i].read().unwrap();
            let e = got.iter().zip(&p64[i]).map(|(&x, &y)| (x as f64 - y).abs() / y.abs()).fold(0.0, f64::max);
            assert!(e <= TOL, "step {t}: p{i} ({} values) off by {e:e} from PyTorch AdamW", size(i));
            worst = worst.max(e);
        }
        for (i, (_, mt, vt)) in state.entries().iter().enumerate() {
            let em = rel_to_max(&mt.read().unwrap(), &m64[i]).max(rel_to_max(&vt.read().unwrap(), &v64[i]));
            assert!(em <= TOL, "step {t}: moments of p{i} off by {em:e}");
        }
        println!("AdamW, {N_PARAMS} parameters, clip {max_norm:?}, step {t}: params max rel err {worst:.3e}");
    }
    if max_norm.is_some() {
        assert_eq!(clipped, STEPS as usize, "clipping must be active");
    }
}

#[test]
fn adamw_many_parameters_with_clipping() {
    run(Some(1.0));
}

#[test]
fn adamw_many_parameters_without_clipping() {
    run(None);
}
