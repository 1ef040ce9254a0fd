//! `attn_causal` (patch 0020): the fused causal attention against an f64
//! reference (forward) and finite differences (q, k, v), with grouped-query
//! heads, a single position, and strided (permuted) inputs.

use crate::common::gradcheck::{grad_check, rand_param};
use crate::common::*;
use ggml_rs::{Context, DType};

/// Softmax over keys `0..=i` of query `i` (head `hh`, sequence `bb`): the
/// causal attention probabilities, in f64, for [`reference`] and [`reference_grads`].
fn probs(q: &[f64], k: &[f64], dims: [usize; 5], scale: f64, hh: usize, i: usize, bb: usize) -> Vec<f64> {
    let [dh, h, hkv, t, _] = dims;
    let g = hh / (h / hkv);
    let qi = |d| ((bb * t + i) * h + hh) * dh + d;
    let ki = |d, j| ((bb * t + j) * hkv + g) * dh + d;
    let s: Vec<f64> = (0..=i).map(|j| scale * (0..dh).map(|d| q[qi(d)] * k[ki(d, j)]).sum::<f64>()).collect();
    let m = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
    let z: f64 = s.iter().map(|x| (x - m).exp()).sum();
    s.iter().map(|x| (x - m).exp() / z).collect()
}

/// f64 causal attention over `[dh, h, t, b]` q and `[dh, hkv, t, b]` k, v.
fn reference(q: &[f64], k: &[f64], v: &[f64], dims: [usize; 5], scale: f64) -> Vec<f64> {
    let [dh, h, hkv, t, b] = dims;
    let qi = |d, hh, tt, bb| ((bb * t + tt) * h + hh) * dh + d;
    let ki = |d, g, tt, bb| ((bb * t + tt) * hkv + g) * dh + d;
    let mut out = vec![0.0; dh * h * t * b];
    for bb in 0..b {
        for hh in 0..h {
            let g = hh / (h / hkv);
            for i in 0..t {
                let p = probs(q, k, dims, scale, hh, i, bb);
                for d in 0..dh {
                    out[qi(d, hh, i, bb)] = (0..=i).map(|j| p[j] * v[ki(d, g, j, bb)]).sum();
                }
            }
        }
    }
    out
}

fn check_shape(dims: [usize; 5], seed: u64) {
    let [dh, h, hkv, t, b] = dims;
    let mut r = rng(seed);
    let scale = 1.0 / (dh as f32).sqrt();
    let q = rand_param(&mut r, &[dh as i64, h as i64, t as i64, b as i64], -1.5, 1.5);
    let k = rand_param(&mut r, &[dh as i64, hkv as i64, t as i64, b as i64], -1.5, 1.5);
    let v = rand_param(&mut r, &[dh as i64, hkv as i64, t as i64, b as i64], -1.5, 1.5);
    grad_check(
        &format!("attn_causal dh {dh}, heads {h}/{hkv}, T {t}, B {b}"),
        seed,
        &[q, k, v],
        &move |ctx, p| ctx.attn_causal(p[0], p[1], p[2], scale).unwrap(),
        &move |xs| reference(&xs[0], &xs[1], &xs[2], dims, scale as f64),
    );
}

#[test]
fn matches_reference_and_finite_differences() {
    check_shape([4, 2, 2, 5, 2], 2000); // multi-head
    check_shape([8, 6, 2, 7, 1], 2001); // grouped-query: 3 query heads per kv head
    check_shape([3, 3, 1, 1, 3], 2002); // one position: the output is v
    check_shape([16, 9, 3, 17, 2], 2003); // SmolLM2's 9/3 heads
}

#[test]
fn several_key_blocks() {
    // d_head 16, 32, 64 and 128 take the blocked CPU kernels (patches 0022,
    // 0068), whose key blocks are 48 wide and query blocks 24: T 130 is two
    // full key blocks and a partial one; at T 100 a query block crosses the
    // second key block's start.
    check_shape([16, 2, 1, 130, 1], 2004);
    check_shape([32, 4, 2, 70, 2], 2005);
    check_shape([64, 3, 1, 100, 1], 2006);
}

#[test]
fn forward_of_a_long_row_and_permuted_inputs() {
    // T = 64, d_head 32; q, k, v read through permuted views of [dh, T, H, B] tensors.
    let (dh, h, t, b) = (32usize, 4usize, 64usize, 2usize);
    let mut r = rng(2010);
    let n = dh * h * t * b;
    let (qd, kd, vd) = (uniform(&mut r, n, -2.0, 2.0), uniform(&mut r, n, -2.0, 2.0), uniform(&mut r, n, -2.0, 2.0));
    let ctx = Context::new(64).unwrap();
    let dev = cpu();
    let ne = [dh as i64, t as i64, h as i64, b as i64];
    let (q, k, v) = (leaf(&ctx, &dev, &ne, &qd), leaf(&ctx, &dev, &ne, &kd), leaf(&ctx, &dev, &ne, &vd));
    let p = |x| ctx.permute(x, [0, 2, 1, 3]).unwrap(); // [dh, H, T, B] views
    let o = ctx.attn_causal(p(q), p(k), p(v), 0.25).unwrap();
    let got = eval(&ctx, &[o]);
    // The reference in [dh, H, T, B] order.
    let perm = |x: &[f32]| -> Vec<f64> {
        let mut y = vec![0.0; n];
        for bb in 0..b {
            for hh in 0..h {
                for tt in 0..t {
                    for d in 0..dh {
                        y[((bb * t + tt) * h + hh) * dh + d] = x[((bb * h + hh) * t + tt) * dh + d] as f64;
                    }
                }
            }
        }
        y
    };
    let want = reference(&perm(&qd), &perm(&kd), &perm(&vd), [dh, h, h, t, b], 0.25);
    check("attn_causal forward, T 64, permuted inputs", &got[0], &want, 1e-5);
}

#[test]
fn refuses_bad_shapes() {
    let ctx = Context::new(32).unwrap();
    let q = ctx.new_tensor(DType::F32, &[8, 6, 5, 2]).unwrap();
    let kv = ctx.new_tensor(DType::F32, &[8, 4, 5, 2]).unwrap(); // 4 does not divide 6
    assert!(ctx.attn_causal(q, kv, kv, 1.0).unwrap_err().to_string().contains("grouped attention"));
    let k = ctx.new_tensor(DType::F32, &[8, 3, 5, 2]).unwrap();
    let v = ctx.new_tensor(DType::F32, &[8, 3, 4, 2]).unwrap();
    assert!(ctx.attn_causal(q, k, v, 1.0).is_err());
    let t = ctx.transpose(q).unwrap(); // strided rows
    assert!(ctx.attn_causal(t, k, k, 1.0).is_err());
    assert!(ctx.attn_causal(q, k, k, f32::NAN).is_err());
    let i = ctx.new_tensor(DType::I32, &[8, 3, 5, 2]).unwrap();
    assert!(ctx.attn_causal(q, i, k, 1.0).is_err());
    assert!(ctx.attn_causal(q, k, k, 0.5).is_ok());
}

/// f64 gradients of `L = Σ out ⊙ r` for q, k, v (FlashAttention-2's backward
/// written plainly: dS = P ⊙ (dP − rowsum(dO ⊙ O))), same layouts as [`reference`].
fn reference_grads(q: &[f64], k: &[f64], v: &[f64], r: &[f64], dims: [usize; 5], scale: f64) -> [Vec<f64>; 3] {
    let [dh, h, hkv, t, b] = dims;
    let qi = |d, hh, tt, bb| ((bb * t + tt) * h + hh) * dh + d;
    let ki = |d, g, tt, bb| ((bb * t + tt) * hkv + g) * dh + d;
    let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; k.len()]);
    for bb in 0..b {
        for hh in 0..h {
            let g = hh / (h / hkv);
            for i in 0..t {
                let p = probs(q, k, dims, scale, hh, i, bb);
                let dp: Vec<f64> = (0..=i).map(|j| (0..dh).map(|d| r[qi(d, hh, i, bb)] * v[ki(d, g, j, bb)]).sum()).collect();
                let dsum: f64 = (0..=i).map(|j| p[j] * dp[j]).sum();
                for j in 0..=i {
                    let ds = p[j] * (dp[j] - dsum);
                    for d in 0..dh {
                        dq[qi(d, hh, i, bb)] += scale * ds * k[ki(d, g, j, bb)];
                        dk[ki(d, g, j, bb)] += scale * ds * q[qi(d, hh, i, bb)];
                        dv[ki(d, g, j, bb)] += p[j] * r[qi(d, hh, i, bb)];
                    }
                }
            }
        }
    }
    [dq, dk, dv]
}

/// Largest absolute error over the largest magnitude of the reference.
fn scaled_err(got: &[f32], want: &[f64]) -> f64 {
    let num = got.iter().zip(want).map(|(&a, b)| (a as f64 - b).abs()).fold(0.0, f64::max);
    num / want.iter().map(|x| x.abs()).fold(1e-30, f64::max)
}

/// Output and gradients with the device's products in bf16 (on CUDA: patch
/// 0024's tensor-core kernels, bf16 inputs and f32 accumulation) against f64,
/// within 1e-2 of each tensor's scale (the CPU ignores the setting: f32).
/// With `cast`, the op reads `ggml_cast(x, BF16)` of the f32 parameters (patch
/// 0043), as toy's autocast feeds it: `Err` where the graph is refused.
/// Returns the output and the gradients of q, k and v.
fn check_bf16(dims: [usize; 5], seed: u64, cast: bool) -> ggml_rs::Result<Vec<Vec<f32>>> {
    let [dh, h, hkv, t, b] = dims;
    let mut rg = rng(seed);
    let scale = 1.0 / (dh as f32).sqrt();
    let nq = dh * h * t * b;
    let nk = dh * hkv * t * b;
    let (qd, kd, vd, rd) = (
        uniform(&mut rg, nq, -1.5, 1.5),
        uniform(&mut rg, nk, -1.5, 1.5),
        uniform(&mut rg, nk, -1.5, 1.5),
        uniform(&mut rg, nq, -1.0, 1.0),
    );
    let dev = cpu();
    dev.set_matmul_precision(ggml_rs::MatmulPrecision::Medium);
    let ctx = Context::new(256)?;
    let new = |ne: [usize; 4]| -> ggml_rs::Result<_> {
        let x = ctx.new_tensor(DType::F32, &ne.map(|n| n as i64))?;
        ctx.set_param(x)?;
        Ok(x)
    };
    let (q, k, v) = (new([dh, h, t, b])?, new([dh, hkv, t, b])?, new([dh, hkv, t, b])?);
    ctx.allocate(&dev)?;
    for (x, d) in [(q, &qd), (k, &kd), (v, &vd)] {
        x.write(d)?;
    }
    let read = |x| if cast { ctx.cast(x, DType::BF16) } else { Ok(x) };
    let o = ctx.attn_causal(read(q)?, read(k)?, read(v)?, scale)?.set_output();
    // bf16 inputs give a bf16 output (patch 0073), read here through an f32 cast
    assert_eq!(o.dtype(), if cast && std::env::var_os("TOY_NO_0073").is_none() { DType::BF16 } else { DType::F32 });
    let o = if o.dtype() == DType::BF16 { ctx.cast(o, DType::F32)?.set_output() } else { o };
    let rt = ctx.new_tensor(DType::F32, &o.ne())?.set_input();
    let loss = ctx.sum(ctx.mul(o, rt)?)?.set_output();
    let mut g = ggml_rs::Graph::with_grads(&ctx, 1024)?;
    g.expand(loss)?;
    g.build_backward(loss)?;
    let grads: Vec<_> = [q, k, v].iter().map(|&x| g.grad(x).unwrap().set_output()).collect();
    g.allocate(&backends(&dev))?;
    rt.write(&rd)?;
    g.compute()?;
    assert!(g.cpu_fallbacks().is_empty(), "{:?}", g.cpu_fallbacks());
    let (q64, k64, v64, r64) = (f64s(&qd), f64s(&kd), f64s(&vd), f64s(&rd));
    let want_o = reference(&q64, &k64, &v64, dims, scale as f64);
    let want = reference_grads(&q64, &k64, &v64, &r64, dims, scale as f64);
    let name = format!("attn_causal bf16 products, dh {dh}, heads {h}/{hkv}, T {t}, B {b}, cast {cast}");
    let mut got = vec![o.read_f32()?];
    let e = scaled_err(&got[0], &want_o);
    println!("{name}: out max err / scale {e:.3e}");
    assert!(e < 1e-2, "{name}: output off by {e:e}");
    for (x, (gt, w)) in ["q", "k", "v"].iter().zip(grads.iter().zip(&want)) {
        got.push(gt.read_f32()?);
        let e = scaled_err(got.last().unwrap(), w);
        println!("{name}: d{x} max err / scale {e:.3e}");
        assert!(e < 1e-2, "{name}: d{x} off by {e:e}");
    }
    Ok(got)
}

#[test]
fn bf16_products_within_bf16_tolerance() {
    check_bf16([64, 9, 3, 130, 2], 2020, false).unwrap(); // SmolLM2's heads, two full 64-row blocks and a partial one
    check_bf16([128, 4, 2, 70, 1], 2021, false).unwrap(); // d_head 128
    check_bf16([64, 2, 2, 1, 1], 2022, false).unwrap(); // one position
}

/// Patch 0043: q, k and v cast to bf16 give on CUDA what the flash kernels
/// give from the f32 tensors (which they round the same way; to 1e-6), and
/// their f32 gradients reach the parameters through the casts. Patch 0073: the
/// output is then bf16 (within half a bf16 step of the f32 one: 2^-8 of the
/// value at most), and the backward's row dots read it, so the gradients agree
/// to bf16's precision (1e-2, the bound against the f64 reference);
/// TOY_NO_0073 keeps 1e-6. The CPU has no bf16 kernel: the graph is refused
/// before ggml sees it.
#[test]
fn bf16_inputs_give_what_the_f32_inputs_give() {
    let dev = cpu();
    for (dims, seed) in [([64, 9, 3, 130, 2], 2030), ([128, 4, 2, 70, 1], 2031)] {
        let cast = check_bf16(dims, seed, true);
        if dev.is_cpu() {
            let e = cast.expect_err("the CPU refuses bf16 attention").to_string();
            assert!(e.contains("runs on none of"), "{e}");
            continue;
        }
        let plain = check_bf16(dims, seed, false).unwrap();
        let f32_out = std::env::var_os("TOY_NO_0073").is_some();
        for (what, (a, b)) in ["out", "dq", "dk", "dv"].iter().zip(cast.unwrap().iter().zip(&plain)) {
            // dq is summed with f32 atomics, in no fixed order
            let d = scaled_err(a, &f64s(b));
            let bound = match (f32_out, *what) {
                (true, _) => 1e-6,
                (false, "out") => 2f64.powi(-8), // rounded to nearest bf16: half of 2^-7, bf16's step at 1
                (false, _) => 1e-2,
            };
            assert!(d <= bound, "{dims:?} {what}: bf16 inputs differ from f32 inputs by {d:e} of the scale");
        }
    }
    let ctx = Context::new(8).unwrap();
    let (a, b) = (ctx.new_tensor(DType::F32, &[64, 2, 4, 1]).unwrap(), ctx.new_tensor(DType::BF16, &[64, 2, 4, 1]).unwrap());
    let e = ctx.attn_causal(a, b, b, 0.125).expect_err("mixed types are refused").to_string();
    assert!(e.contains("f32") && e.contains("bf16"), "{e}");
}
