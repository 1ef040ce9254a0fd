//! Every op of the safe API against a plain-Rust reference written from the
//! math (f64), on the CPU backend.
//!
//! Error measure: elementwise `|got − want| / max(1, |want|)` (see
//! `common::max_rel_err`), at most 1e-5 for every op. Shapes are in ggml `ne`
//! order (`ne[0]` contiguous). Run with `--nocapture` to see measured errors.

use crate::common;

use common::reference as rf;
use common::*;
use ggml_rs::{Context, DType, RopeMode};
use half::f16;
use rand::Rng;

const TOL: f64 = 1e-5;

// --------------------------------------------------------------------- tests

#[test]
fn get_rows() {
    let mut r = rng(1);
    let cpu = cpu();
    // 2-d table [8, 10] with 6 indices (repeats included), and a batched 3-d
    // table [5, 7, 3] with indices [4, 3] picking rows of each batch.
    let t2 = uniform(&mut r, 80, -2.0, 2.0);
    let ids2 = [3i32, 0, 9, 3, 7, 1];
    let t3 = uniform(&mut r, 105, -2.0, 2.0);
    let ids3: Vec<i32> = (0..12).map(|_| r.random_range(0..7)).collect();
    let t16: Vec<f16> = uniform(&mut r, 40, -4.0, 4.0).into_iter().map(f16::from_f32).collect();
    let ids16 = [4i32, 2, 2];

    let ctx = Context::new(64).unwrap();
    let a2 = leaf(&ctx, &cpu, &[8, 10], &t2);
    let i2 = leaf_i32(&ctx, &cpu, &[6], &ids2);
    let a3 = leaf(&ctx, &cpu, &[5, 7, 3], &t3);
    let i3 = leaf_i32(&ctx, &cpu, &[4, 3], &ids3);
    let a16 = ctx.new_tensor(DType::F16, &[8, 5]).unwrap();
    ctx.allocate(&cpu).unwrap();
    a16.write(&t16).unwrap();
    let ix16 = leaf_i32(&ctx, &cpu, &[3], &ids16);
    let (o2, o3, o16) = (ctx.get_rows(a2, i2).unwrap(), ctx.get_rows(a3, i3).unwrap(), ctx.get_rows(a16, ix16).unwrap());
    assert_eq!(o3.ne(), [5, 4, 3, 1]);
    let got = eval(&ctx, &[o2, o3, o16]);

    let want2: Vec<f64> = ids2.iter().flat_map(|&i| f64s(&t2[i as usize * 8..][..8])).collect();
    check("get_rows 2-d", &got[0], &want2, TOL);
    let mut want3 = Vec::new();
    for b in 0..3 {
        for j in 0..4 {
            let row = ids3[b * 4 + j] as usize;
            want3.extend(f64s(&t3[(b * 7 + row) * 5..][..5]));
        }
    }
    check("get_rows 3-d batched", &got[1], &want3, TOL);
    let want16: Vec<f64> = ids16.iter().flat_map(|&i| t16[i as usize * 8..][..8].iter().map(|h| h.to_f64())).collect();
    check("get_rows f16 table", &got[2], &want16, 0.0);
}

#[test]
fn mul_mat() {
    let mut r = rng(2);
    let cpu = cpu();
    // (a.ne, b.ne): plain 2-d, a long contraction, and broadcasting of a over
    // b's dims 2 (×2) and 3 (×3).
    let cases: [([i64; 4], [i64; 4]); 4] =
        [([7, 5, 1, 1], [7, 3, 1, 1]), ([256, 9, 1, 1], [256, 4, 1, 1]), ([6, 4, 2, 1], [6, 3, 4, 3]), ([5, 3, 3, 2], [5, 2, 3, 2])];
    for (an, bn) in cases {
        let a = uniform(&mut r, numel(&an), -1.0, 1.0);
        let b = uniform(&mut r, numel(&bn), -1.0, 1.0);
        let ctx = Context::new(16).unwrap();
        let ta = leaf(&ctx, &cpu, &an, &a);
        let tb = leaf(&ctx, &cpu, &bn, &b);
        let c = ctx.mul_mat(ta, tb).unwrap();
        let (want, on) = rf::mul_mat(&f64s(&a), ne4(&an), &f64s(&b), ne4(&bn));
        assert_eq!(c.ne().map(|n| n as usize), on);
        let got = eval(&ctx, &[c]);
        check(&format!("mul_mat {an:?} x {bn:?}"), &got[0], &want, TOL);
    }
}

#[test]
fn mul_mat_of_permuted_views() {
    // Attention scores: K and Q are permuted views [d, T, H] of [d, H, T] data.
    let mut r = rng(3);
    let cpu = cpu();
    let (d, h, t) = (4usize, 3usize, 5usize);
    let q = uniform(&mut r, d * h * t, -1.0, 1.0);
    let k = uniform(&mut r, d * h * t, -1.0, 1.0);
    let ctx = Context::new(32).unwrap();
    let tq = leaf(&ctx, &cpu, &[d as i64, h as i64, t as i64], &q);
    let tk = leaf(&ctx, &cpu, &[d as i64, h as i64, t as i64], &k);
    let qp = ctx.permute(tq, [0, 2, 1, 3]).unwrap();
    let kp = ctx.permute(tk, [0, 2, 1, 3]).unwrap();
    let kq = ctx.mul_mat(kp, qp).unwrap(); // [T_k, T_q, H]
    assert_eq!(kq.ne(), [t as i64, t as i64, h as i64, 1]);
    let got = eval(&ctx, &[kq]);
    let src = [d, h, t, 1];
    let mut want = vec![0.0; t * t * h];
    for hh in 0..h {
        for iq in 0..t {
            for ik in 0..t {
                want[at([t, t, h, 1], ik, iq, hh, 0)] =
                    (0..d).map(|l| k[at(src, l, hh, ik, 0)] as f64 * q[at(src, l, hh, iq, 0)] as f64).sum();
            }
        }
    }
    check("mul_mat of permuted views", &got[0], &want, TOL);
}

#[test]
fn binary_broadcasting() {
    let mut r = rng(4);
    let cpu = cpu();
    let an = [5i64, 4, 3, 2];
    let b_shapes: [[i64; 4]; 6] = [[5, 4, 3, 2], [5, 1, 3, 1], [1, 4, 1, 2], [5, 1, 1, 1], [1, 1, 1, 1], [5, 2, 3, 1]];
    for bn in b_shapes {
        let a = uniform(&mut r, numel(&an), -2.0, 2.0);
        let b = away_from_zero(&mut r, numel(&bn), 0.25, 2.0); // a divisor
        let ctx = Context::new(32).unwrap();
        let ta = leaf(&ctx, &cpu, &an, &a);
        let tb = leaf(&ctx, &cpu, &bn, &b);
        let outs = [ctx.add(ta, tb).unwrap(), ctx.sub(ta, tb).unwrap(), ctx.mul(ta, tb).unwrap(), ctx.div(ta, tb).unwrap()];
        let got = eval(&ctx, &outs);
        let (an4, bn4) = (ne4(&an), ne4(&bn));
        check(&format!("add {an:?} + {bn:?}"), &got[0], &rf::binary(&f64s(&a), an4, &f64s(&b), bn4, |x, y| x + y), TOL);
        check(&format!("sub {an:?} - {bn:?}"), &got[1], &rf::binary(&f64s(&a), an4, &f64s(&b), bn4, |x, y| x - y), TOL);
        check(&format!("mul {an:?} * {bn:?}"), &got[2], &rf::binary(&f64s(&a), an4, &f64s(&b), bn4, |x, y| x * y), TOL);
        check(&format!("div {an:?} / {bn:?}"), &got[3], &rf::binary(&f64s(&a), an4, &f64s(&b), bn4, |x, y| x / y), TOL);
    }
}

#[test]
fn scale_and_scale_bias() {
    let mut r = rng(5);
    let cpu = cpu();
    let x = uniform(&mut r, 3 * 7 * 2, -3.0, 3.0);
    let ctx = Context::new(16).unwrap();
    let t = leaf(&ctx, &cpu, &[7, 3, 2], &x);
    let got = eval(&ctx, &[ctx.scale(t, -0.37).unwrap(), ctx.scale_bias(t, 1.7, -0.25).unwrap()]);
    check("scale", &got[0], &x.iter().map(|&v| -0.37f32 as f64 * v as f64).collect::<Vec<_>>(), TOL);
    check("scale_bias", &got[1], &x.iter().map(|&v| 1.7f32 as f64 * v as f64 - 0.25).collect::<Vec<_>>(), TOL);
}

#[test]
fn rms_norm_and_norm() {
    let mut r = rng(6);
    let cpu = cpu();
    for (n0, rows, eps) in [(1usize, 3usize, 1e-5f32), (16, 5, 1e-5), (4099, 2, 1e-6), (64, 3, 0.0)] {
        // An offset makes LayerNorm's mean subtraction matter.
        let x: Vec<f32> = uniform(&mut r, n0 * rows, -2.0, 2.0).into_iter().map(|v| v + 0.5).collect();
        let ctx = Context::new(16).unwrap();
        let t = leaf(&ctx, &cpu, &[n0 as i64, rows as i64], &x);
        let got = eval(&ctx, &[ctx.rms_norm(t, eps).unwrap(), ctx.norm(t, eps).unwrap()]);
        check(&format!("rms_norm [{n0}, {rows}] eps {eps}"), &got[0], &rf::rows(&f64s(&x), n0, |r| rf::rms_norm_row(r, eps as f64)), TOL);
        if n0 > 1 || eps > 0.0 {
            check(&format!("norm [{n0}, {rows}] eps {eps}"), &got[1], &rf::rows(&f64s(&x), n0, |r| rf::norm_row(r, eps as f64)), TOL);
        }
    }
}

#[test]
fn rope_ext_both_modes() {
    let mut r = rng(7);
    let cpu = cpu();
    // [head_dim, n_head, n_pos, n_seq]; full and partial rotation. Positions
    // stay below 64: ggml builds θ by repeated f32 multiplication, whose
    // absolute error grows with the position (see rope_ext_large_positions).
    let pos = [0i32, 1, 5, 17, 31, 42];
    for (mode, neox) in [(RopeMode::Normal, false), (RopeMode::Neox, true)] {
        for (head_dim, n_dims) in [(8usize, 8usize), (12, 8), (64, 64)] {
            let ne = [head_dim, 3, pos.len(), 2];
            let x = uniform(&mut r, ne.iter().product(), -1.0, 1.0);
            let ctx = Context::new(16).unwrap();
            let t = leaf(&ctx, &cpu, &ne.map(|n| n as i64), &x);
            let p = leaf_i32(&ctx, &cpu, &[pos.len() as i64], &pos);
            let y = ctx.rope_ext(t, p, n_dims, mode, 10000.0).unwrap();
            let got = eval(&ctx, &[y]);
            check(
                &format!("rope_ext {mode:?} head_dim {head_dim} n_dims {n_dims}"),
                &got[0],
                &rf::rope(&f64s(&x), ne, &pos, n_dims, neox, 10000.0),
                TOL,
            );
        }
    }
}

#[test]
fn rope_ext_ropes_of_one_graph() {
    // Several ropes in one graph, as a training step has (q and k of every
    // layer): the same positions and base (CUDA reuses one (cos, sin) table,
    // toy-rs patch 0051), other positions, another base, then the first ones
    // again. Each must equal its own reference.
    let mut r = rng(10);
    let cpu = cpu();
    let (pa, pb) = ([0i32, 1, 2, 3, 9, 40], [5i32, 4, 3, 2, 1, 0]);
    let ne = [64usize, 3, pa.len(), 1];
    let xs: Vec<Vec<f32>> = (0..2).map(|_| uniform(&mut r, ne.iter().product(), -1.0, 1.0)).collect();
    let ctx = Context::new(32).unwrap();
    let t: Vec<_> = xs.iter().map(|x| leaf(&ctx, &cpu, &ne.map(|n| n as i64), x)).collect();
    let a = leaf_i32(&ctx, &cpu, &[pa.len() as i64], &pa);
    let b = leaf_i32(&ctx, &cpu, &[pb.len() as i64], &pb);
    let runs: [(usize, &[i32], f32); 5] = [(0, &pa, 10000.0), (1, &pa, 10000.0), (0, &pb, 10000.0), (0, &pa, 500.0), (1, &pa, 10000.0)];
    let ys: Vec<_> =
        runs.iter().map(|&(x, p, base)| ctx.rope_ext(t[x], if p == pa { a } else { b }, 64, RopeMode::Normal, base).unwrap()).collect();
    let got = eval(&ctx, &ys);
    for (k, &(x, p, base)) in runs.iter().enumerate() {
        let want = rf::rope(&f64s(&xs[x]), ne, p, 64, false, base as f64);
        check(&format!("rope {k} of one graph (input {x}, base {base})"), &got[k], &want, TOL);
    }
}

#[test]
fn rope_ext_large_positions() {
    // Positions up to 2047: ggml builds θ_k = p·s^k by repeated f32
    // multiplication, so the error grows with the position (measured 4.5e-5
    // and 5.8e-5 here, above the 1e-5 of small positions). Held to 2e-4, and
    // the two modes must be told apart.
    let mut r = rng(8);
    let cpu = cpu();
    let pos = [100i32, 511, 1024, 2047];
    let ne = [64usize, 2, pos.len(), 1];
    let x = uniform(&mut r, ne.iter().product(), -1.0, 1.0);
    let ctx = Context::new(16).unwrap();
    let t = leaf(&ctx, &cpu, &ne.map(|n| n as i64), &x);
    let p = leaf_i32(&ctx, &cpu, &[pos.len() as i64], &pos);
    let got =
        eval(&ctx, &[ctx.rope_ext(t, p, 64, RopeMode::Normal, 10000.0).unwrap(), ctx.rope_ext(t, p, 64, RopeMode::Neox, 10000.0).unwrap()]);
    let normal = rf::rope(&f64s(&x), ne, &pos, 64, false, 10000.0);
    let neox = rf::rope(&f64s(&x), ne, &pos, 64, true, 10000.0);
    check("rope_ext Normal positions ≤ 2047", &got[0], &normal, 2e-4);
    check("rope_ext Neox positions ≤ 2047", &got[1], &neox, 2e-4);
    assert!(max_rel_err(&got[0], &neox) > 0.1, "normal and NeoX modes must differ");
}

#[test]
fn soft_max_ext_with_causal_mask() {
    let mut r = rng(9);
    let cpu = cpu();
    let (n_kv, n_q, n_head, n_seq) = (7usize, 5usize, 3usize, 2usize);
    let an = [n_kv, n_q, n_head, n_seq];
    let a = uniform(&mut r, an.iter().product(), -4.0, 4.0);
    let scale = 1.0 / (8.0f32).sqrt();
    // Shared causal mask [n_kv, n_q]; a padded one [n_kv, n_q + 3] (extra rows
    // unused); a per-head mask [n_kv, n_q, n_head] with random finite biases.
    let m_shared = rf::causal_mask(n_kv, n_q, n_q);
    let m_padded = rf::causal_mask(n_kv, n_q, n_q + 3);
    let mut m_head = Vec::new();
    for _ in 0..n_head {
        let bias = uniform(&mut r, n_kv * n_q, -1.0, 1.0);
        m_head.extend(rf::causal_mask(n_kv, n_q, n_q).iter().zip(bias).map(|(m, b)| m + b));
    }
    let ctx = Context::new(32).unwrap();
    let ta = leaf(&ctx, &cpu, &an.map(|n| n as i64), &a);
    let ms = leaf(&ctx, &cpu, &[n_kv as i64, n_q as i64], &m_shared);
    let mp = leaf(&ctx, &cpu, &[n_kv as i64, (n_q + 3) as i64], &m_padded);
    let mh = leaf(&ctx, &cpu, &[n_kv as i64, n_q as i64, n_head as i64], &m_head);
    let m16 = ctx.new_tensor(DType::F16, &[n_kv as i64, n_q as i64]).unwrap();
    ctx.allocate(&cpu).unwrap();
    m16.write(&m_shared.iter().map(|&v| f16::from_f32(v)).collect::<Vec<_>>()).unwrap();
    let outs = [
        ctx.soft_max_ext(ta, None, 1.0).unwrap(),
        ctx.soft_max_ext(ta, Some(ms), scale).unwrap(),
        ctx.soft_max_ext(ta, Some(mp), scale).unwrap(),
        ctx.soft_max_ext(ta, Some(mh), scale).unwrap(),
        ctx.soft_max_ext(ta, Some(m16), scale).unwrap(),
    ];
    let got = eval(&ctx, &outs);
    let s = scale as f64;
    check("soft_max_ext no mask", &got[0], &rf::soft_max(&f64s(&a), an, None, 1.0), TOL);
    let causal = rf::soft_max(&f64s(&a), an, Some((&f64s(&m_shared), [n_kv, n_q, 1, 1])), s);
    check("soft_max_ext causal mask, scale", &got[1], &causal, TOL);
    check("soft_max_ext padded mask", &got[2], &rf::soft_max(&f64s(&a), an, Some((&f64s(&m_padded), [n_kv, n_q + 3, 1, 1])), s), TOL);
    check("soft_max_ext per-head mask", &got[3], &rf::soft_max(&f64s(&a), an, Some((&f64s(&m_head), [n_kv, n_q, n_head, 1])), s), TOL);
    check("soft_max_ext f16 mask", &got[4], &causal, TOL);
    // Masked entries are exactly 0.
    for (k, &v) in got[1].iter().enumerate() {
        let (j, i) = (k % n_kv, (k / n_kv) % n_q);
        if j > i + (n_kv - n_q) {
            assert_eq!(v, 0.0, "masked score at key {j}, query {i}");
        }
    }
}

#[test]
fn unary_activations() {
    let mut r = rng(10);
    let cpu = cpu();
    // Spread over the interesting range, plus large magnitudes where the
    // activations saturate.
    let mut x = uniform(&mut r, 997, -6.0, 6.0);
    x.extend([-30.0f32, -10.0, -1e-4, 0.0, 1e-4, 10.0, 30.0, 1e-7, -0.5, 0.4999, 0.5001, 8.99, 9.01]);
    let n = x.len() as i64;
    let pos: Vec<f32> = x.iter().map(|v| v.abs() + 0.01).collect();
    let small: Vec<f32> = x.iter().map(|v| v / 3.0).collect();
    let ctx = Context::new(32).unwrap();
    let t = leaf(&ctx, &cpu, &[n], &x);
    let tp = leaf(&ctx, &cpu, &[n], &pos);
    let ts = leaf(&ctx, &cpu, &[n], &small);
    let outs = [
        ctx.silu(t).unwrap(),
        ctx.gelu(t).unwrap(),
        ctx.gelu_erf(t).unwrap(),
        ctx.tanh(t).unwrap(),
        ctx.relu(t).unwrap(),
        ctx.neg(t).unwrap(),
        ctx.sqr(t).unwrap(),
        ctx.sqrt(tp).unwrap(),
        ctx.log(tp).unwrap(),
        ctx.exp(ts).unwrap(),
        ctx.clamp(t, -0.5, 2.0).unwrap(),
    ];
    let got = eval(&ctx, &outs);
    let map = |v: &[f32], f: &dyn Fn(f64) -> f64| v.iter().map(|&x| f(x as f64)).collect::<Vec<f64>>();
    check("silu", &got[0], &map(&x, &rf::silu), TOL);
    check("gelu (tanh form, f32 on CPU by our patch)", &got[1], &map(&x, &rf::gelu), TOL);
    check("gelu_erf", &got[2], &map(&x, &|v| 0.5 * v * (1.0 + rf::erf(v / std::f64::consts::SQRT_2))), TOL);
    check("tanh", &got[3], &map(&x, &f64::tanh), TOL);
    check("relu", &got[4], &map(&x, &|v| v.max(0.0)), 0.0);
    check("neg", &got[5], &map(&x, &|v| -v), 0.0);
    check("sqr", &got[6], &map(&x, &|v| v * v), TOL);
    check("sqrt", &got[7], &map(&pos, &f64::sqrt), TOL);
    check("log", &got[8], &map(&pos, &f64::ln), TOL);
    check("exp", &got[9], &map(&small, &f64::exp), TOL);
    check("clamp", &got[10], &map(&x, &|v| v.clamp(-0.5, 2.0)), 0.0);

    // Non-finite values stay non-finite through the vectorized tanh (patch 0005).
    let bad = [f32::NAN, f32::INFINITY, f32::NEG_INFINITY, 1.0, f32::NAN, -1.0, 0.0, 2.0, f32::NAN];
    let ctx = Context::new(8).unwrap();
    let t = leaf(&ctx, &cpu, &[bad.len() as i64], &bad);
    let got = eval(&ctx, &[ctx.tanh(t).unwrap(), ctx.gelu(t).unwrap()]);
    assert!(got[0][0].is_nan() && got[0][4].is_nan() && got[0][8].is_nan(), "tanh(NaN) {:?}", got[0]);
    assert_eq!((got[0][1], got[0][2]), (1.0, -1.0));
    assert!(got[1][0].is_nan() && got[1][8].is_nan(), "gelu(NaN) {:?}", got[1]);
}

#[test]
fn swiglu_split() {
    let mut r = rng(11);
    let cpu = cpu();
    let ne = [9i64, 4, 2];
    let a = uniform(&mut r, numel(&ne), -5.0, 5.0);
    let b = uniform(&mut r, numel(&ne), -2.0, 2.0);
    let ctx = Context::new(16).unwrap();
    let ta = leaf(&ctx, &cpu, &ne, &a);
    let tb = leaf(&ctx, &cpu, &ne, &b);
    let got = eval(&ctx, &[ctx.swiglu_split(ta, tb).unwrap()]);
    // SwiGLU (Shazeer 2020, eq. 6 without the projections): silu(a) ⊙ b.
    let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &y)| rf::silu(x as f64) * y as f64).collect();
    check("swiglu_split", &got[0], &want, TOL);
}

#[test]
fn layout_ops() {
    let mut r = rng(12);
    let cpu = cpu();
    let ne = [4usize, 3, 2, 5];
    let x = uniform(&mut r, ne.iter().product(), -1.0, 1.0);
    let ctx = Context::new(64).unwrap();
    let t = leaf(&ctx, &cpu, &ne.map(|n| n as i64), &x);
    let reshaped = ctx.reshape(t, &[12, 10]).unwrap();
    let rs = ctx.scale(reshaped, 1.0).unwrap(); // a node reading the reshape
                                                // Rows 1..3 of every [4, 3] matrix, elements 1..4 of each row: a strided 3-d view.
    let nb = t.nb();
    let view = ctx.view(t, &[3, 2, 10], &[nb[1], nb[2]], nb[0] + nb[1]).unwrap();
    let perm_axes = [2usize, 0, 3, 1];
    let permuted = ctx.permute(t, perm_axes).unwrap();
    let transposed = ctx.transpose(t).unwrap();
    assert!(!permuted.is_contiguous() && !transposed.is_contiguous());
    let cont_nd = ctx.cont_nd(transposed, &[6, 20]).unwrap();
    let to_f16 = ctx.new_tensor(DType::F16, &ne.map(|n| n as i64)).unwrap();
    let cpy = ctx.cpy(t, to_f16).unwrap();
    let outs = [rs, ctx.cont(view).unwrap(), ctx.cont(permuted).unwrap(), ctx.cont(transposed).unwrap(), cont_nd, cpy];
    assert_eq!(outs[2].ne(), [3, 5, 4, 2], "permute puts dimension i at position axes[i]");
    let got = eval(&ctx, &outs);

    check("reshape", &got[0], &f64s(&x), 0.0);
    let mut want_view = Vec::new();
    for_each([3, 2, 10, 1], |i0, i1, i2, _| want_view.push(x[at(ne, i0 + 1, i1 + 1, i2 % 2, i2 / 2)] as f64));
    check("view (strided)", &got[1], &want_view, 0.0);
    let (want_perm, pn) = rf::permute(&f64s(&x), ne, perm_axes);
    assert_eq!(pn, [3, 5, 4, 2]);
    check("permute + cont", &got[2], &want_perm, 0.0);
    let (want_t, _) = rf::permute(&f64s(&x), ne, [1, 0, 2, 3]);
    check("transpose + cont", &got[3], &want_t, 0.0);
    check("cont_nd of a transpose", &got[4], &want_t, 0.0);
    let want_f16: Vec<f64> = x.iter().map(|&v| f16::from_f32(v).to_f64()).collect();
    check("cpy f32 → f16", &got[5], &want_f16, 0.0);
}

#[test]
fn reductions_and_repeat() {
    let mut r = rng(13);
    let cpu = cpu();
    let ne = [4099usize, 3, 2, 1];
    let x = uniform(&mut r, ne.iter().product(), -1.0, 1.0);
    let small_ne = [3usize, 1, 2, 1];
    let s = uniform(&mut r, 6, -1.0, 1.0);
    let big = [6i64, 4, 2, 3];
    let ctx = Context::new(64).unwrap();
    let t = leaf(&ctx, &cpu, &ne.map(|n| n as i64), &x);
    let ts = leaf(&ctx, &cpu, &small_ne.map(|n| n as i64), &s);
    let like = leaf(&ctx, &cpu, &big, &vec![0.0; numel(&big)]);
    let rep = ctx.repeat(ts, like).unwrap();
    let outs = [
        ctx.sum_rows(t).unwrap(),
        ctx.mean_rows(t).unwrap(),
        ctx.sum(t).unwrap(),
        rep,
        ctx.repeat_4d(ts, [6, 4, 2, 3]).unwrap(),
        ctx.repeat_back(rep, ts).unwrap(),
        // Row-contiguous but permuted views are fine for the reductions.
        ctx.sum(ctx.permute(t, [0, 2, 1, 3]).unwrap()).unwrap(),
        ctx.cont(ctx.sum_rows(ctx.permute(t, [0, 2, 1, 3]).unwrap()).unwrap()).unwrap(),
    ];
    let got = eval(&ctx, &outs);
    let sums: Vec<f64> = x.chunks(ne[0]).map(|r| r.iter().map(|&v| v as f64).sum()).collect();
    check("sum_rows", &got[0], &sums, TOL);
    check("mean_rows", &got[1], &sums.iter().map(|v| v / ne[0] as f64).collect::<Vec<_>>(), TOL);
    check("sum", &got[2], &[sums.iter().sum()], TOL);
    let bn = ne4(&big);
    let mut want_rep = Vec::new();
    for_each(bn, |i0, _, i2, _| want_rep.push(s[at(small_ne, i0 % 3, 0, i2 % 2, 0)] as f64));
    check("repeat", &got[3], &want_rep, 0.0);
    check("repeat_4d", &got[4], &want_rep, 0.0);
    // Each of the 6 values was tiled 2·4·1·3 = 24 times.
    check("repeat_back", &got[5], &s.iter().map(|&v| 24.0 * v as f64).collect::<Vec<_>>(), TOL);
    check("sum of a permuted view", &got[6], &[sums.iter().sum()], TOL);
    // sum_rows of the [4099, 2, 3] view: row (i1, i2) of the view is row (i2, i1) of x.
    let want_p: Vec<f64> = (0..3 * 2).map(|k| sums[(k % 2) * 3 + k / 2]).collect();
    check("sum_rows of a permuted view", &got[7], &want_p, TOL);
}

#[test]
fn cross_entropy_loss() {
    let mut r = rng(14);
    let cpu = cpu();
    for (nv, rows) in [(5usize, 1usize), (17, 6), (1000, 3)] {
        let logits = uniform(&mut r, nv * rows, -4.0, 4.0);
        // Soft labels: each row a random distribution; and one-hot labels.
        let mut soft = uniform(&mut r, nv * rows, 0.0, 1.0);
        for row in soft.chunks_mut(nv) {
            let s: f32 = row.iter().sum();
            row.iter_mut().for_each(|v| *v /= s);
        }
        let mut onehot = vec![0.0f32; nv * rows];
        for row in 0..rows {
            onehot[row * nv + r.random_range(0..nv)] = 1.0;
        }
        let ctx = Context::new(16).unwrap();
        let tl = leaf(&ctx, &cpu, &[nv as i64, rows as i64], &logits);
        let ts = leaf(&ctx, &cpu, &[nv as i64, rows as i64], &soft);
        let to = leaf(&ctx, &cpu, &[nv as i64, rows as i64], &onehot);
        let got = eval(&ctx, &[ctx.cross_entropy_loss(tl, ts).unwrap(), ctx.cross_entropy_loss(tl, to).unwrap()]);
        check(
            &format!("cross_entropy_loss soft labels [{nv}, {rows}]"),
            &got[0],
            &[rf::cross_entropy(&f64s(&logits), &f64s(&soft), nv)],
            TOL,
        );
        check(
            &format!("cross_entropy_loss one-hot [{nv}, {rows}]"),
            &got[1],
            &[rf::cross_entropy(&f64s(&logits), &f64s(&onehot), nv)],
            TOL,
        );
    }
}

#[test]
fn out_prod_and_diag_mask_inf() {
    let mut r = rng(15);
    let cpu = cpu();
    let (m, n, k) = (4usize, 3usize, 6usize);
    let a = uniform(&mut r, m * k, -1.0, 1.0);
    let b = uniform(&mut r, n * k, -1.0, 1.0);
    let sq = uniform(&mut r, 5 * 5 * 2, -1.0, 1.0);
    let ctx = Context::new(16).unwrap();
    let ta = leaf(&ctx, &cpu, &[m as i64, k as i64], &a);
    let tb = leaf(&ctx, &cpu, &[n as i64, k as i64], &b);
    let ts = leaf(&ctx, &cpu, &[5, 5, 2], &sq);
    let got = eval(&ctx, &[ctx.out_prod(ta, tb).unwrap(), ctx.diag_mask_inf(ts, 1).unwrap()]);
    // out_prod(a, b)[i, j] = Σ_l a[i, l] · b[j, l]
    let mut want = vec![0.0; m * n];
    for j in 0..n {
        for i in 0..m {
            want[j * m + i] = (0..k).map(|l| a[l * m + i] as f64 * b[l * n + j] as f64).sum();
        }
    }
    check("out_prod", &got[0], &want, TOL);
    // diag_mask_inf(x, n_past)[j, i] = −∞ where j > n_past + i.
    let mut want_mask = f64s(&sq);
    for_each([5, 5, 2, 1], |j, i, b, _| {
        if j > 1 + i {
            want_mask[at([5, 5, 2, 1], j, i, b, 0)] = f64::NEG_INFINITY;
        }
    });
    check("diag_mask_inf", &got[1], &want_mask, 0.0);
}

#[test]
fn concat_joins_along_each_dimension_and_reads_views() {
    let ne = [3i64, 2, 4, 2];
    let n = numel(&ne);
    let mut r = rng(77);
    let (ad, bd) = (uniform(&mut r, n, -1.0, 1.0), uniform(&mut r, n, -1.0, 1.0));
    for dim in 0..4 {
        let ctx = Context::new(64).unwrap();
        let dev = cpu();
        let (a, b) = (leaf(&ctx, &dev, &ne, &ad), leaf(&ctx, &dev, &ne, &bd));
        let got = eval(&ctx, &[ctx.concat(a, b, dim).unwrap()]).remove(0);
        let mut out = ne4(&ne);
        out[dim] *= 2;
        let mut want = vec![0.0f64; got.len()];
        for_each(out, |i0, i1, i2, i3| {
            let mut i = [i0, i1, i2, i3];
            let src = if i[dim] < ne[dim] as usize {
                &ad
            } else {
                i[dim] -= ne[dim] as usize;
                &bd
            };
            want[at(out, i0, i1, i2, i3)] = src[at(ne4(&ne), i[0], i[1], i[2], i[3])] as f64;
        });
        check(&format!("concat along {dim}"), &got, &want, 0.0);
    }
    // A view of a larger tensor (a cache's first positions) joined with a new row.
    let ctx = Context::new(64).unwrap();
    let dev = cpu();
    let cache = leaf(&ctx, &dev, &[4, 5], &(0..20).map(|x| x as f32).collect::<Vec<_>>());
    let new = leaf(&ctx, &dev, &[4, 1], &[-1.0, -2.0, -3.0, -4.0]);
    let past = ctx.view(cache, &[4, 2], &[16], 16).unwrap(); // rows 1 and 2
    let got = eval(&ctx, &[ctx.concat(past, new, 1).unwrap()]).remove(0);
    assert_eq!(got, vec![4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0, 11.0, -1.0, -2.0, -3.0, -4.0]);
    let other = leaf(&ctx, &dev, &[3, 1], &[0.0; 3]);
    assert!(ctx.concat(past, other, 1).is_err());
    assert!(ctx.concat(past, new, 4).is_err());
}
