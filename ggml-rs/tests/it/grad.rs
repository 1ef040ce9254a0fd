//! Finite-difference checks of ggml's backward pass (`Graph::build_backward`)
//! for every differentiable op of the safe API, on the CPU.
//!
//! For an op `y = f(x₁, …)` the scalar loss is `L = Σ y ⊙ R` with a fixed
//! random `R`, so `∂L/∂xᵢ` exercises every output. The analytic gradients come
//! from ggml (f32). The reference gradient is a central difference
//! `(L(x + h·e_j) − L(x − h·e_j)) / 2h` of our own **f64** implementation of
//! the forward (the references of `common::reference`), evaluated at exactly the
//! f32 inputs ggml saw. Differencing an f64 forward has truncation error
//! ~h² and rounding error ~1e-16/h (≈1e-10 for h = 1e-5), where differencing
//! ggml's f32 forward would be limited to ~1e-3 by f32 rounding; so the
//! measured error is ggml's own.
//!
//! Error measure: `|g − g_ref| / max(|g_ref|, 1e-3·max|g_ref|, 1e-6)` per
//! element, max over elements, required < 1e-2. The floor keeps entries whose
//! true gradient is ~0 from turning f32 round-off into huge ratios, while still
//! measuring them against the gradient's scale. Shapes are drawn from a seeded
//! generator. Large tensors check a seeded sample of 256 coordinates.

use crate::common;

use common::gradcheck::*;
use common::reference as rf;
use common::*;
use ggml_rs::{Context, RopeMode, Tensor};
use rand::Rng;

// --------------------------------------------------------------------- tests

#[test]
fn get_rows() {
    for seed in 0..3 {
        let mut r = rng(100 + seed);
        let (d, rows, n) = (r.random_range(1..=8usize), r.random_range(2..=9usize), r.random_range(1..=12usize));
        let ids: Vec<i32> = (0..n).map(|_| r.random_range(0..rows as i32)).collect();
        let table = rand_param(&mut r, &[d as i64, rows as i64], -1.0, 1.0);
        let ids_b = ids.clone();
        grad_check(
            &format!("get_rows [{d}, {rows}] ids {ids:?}"),
            seed,
            &[table],
            &move |ctx, x| {
                let i = leaf_i32(ctx, &cpu(), &[ids_b.len() as i64], &ids_b);
                ctx.get_rows(x[0], i).unwrap()
            },
            &|xs| ids.iter().flat_map(|&i| xs[0][i as usize * d..][..d].to_vec()).collect(),
        );
    }
}

#[test]
fn mul_mat() {
    // (a.ne, b.ne) with random k, m, n; the last three broadcast a over b's
    // ne2 (and ne3), the last two a weight matrix over a batch (patch 0003).
    for seed in 0..6 {
        let mut r = rng(200 + seed);
        let (k, m, n) = (r.random_range(1..=9i64), r.random_range(1..=6i64), r.random_range(1..=6i64));
        let (an, bn): ([i64; 4], [i64; 4]) = match seed {
            0 | 1 => ([k, m, 1, 1], [k, n, 1, 1]),
            2 => ([k, m, 2, 3], [k, n, 2, 3]),
            3 => ([k, m, 2, 1], [k, n, 4, 1]),
            4 => ([k, m, 1, 1], [k, n, 3, 1]),
            _ => ([k, m, 1, 1], [k, n, 2, 3]),
        };
        let a = rand_param(&mut r, &an, -1.0, 1.0);
        let b = rand_param(&mut r, &bn, -1.0, 1.0);
        grad_check(&format!("mul_mat {an:?} x {bn:?}"), seed, &[a, b], &|ctx, x| ctx.mul_mat(x[0], x[1]).unwrap(), &|xs| {
            rf::mul_mat(&xs[0], u4(&an), &xs[1], u4(&bn)).0
        });
    }
}

#[test]
fn mul_mat_of_a_weight_and_a_permuted_batch() {
    // b is a non-contiguous view [k, n, 3] of [k, 3, n]: the folded backward must copy it first.
    let (k, m, n) = (5i64, 4i64, 6i64);
    let mut r = rng(210);
    let a = rand_param(&mut r, &[k, m, 1, 1], -1.0, 1.0);
    let b = rand_param(&mut r, &[k, 3, n, 1], -1.0, 1.0);
    grad_check(
        "mul_mat [k,m] x permute([k,3,n])",
        210,
        &[a, b],
        &|ctx, x| ctx.mul_mat(x[0], ctx.permute(x[1], [0, 2, 1, 3]).unwrap()).unwrap(),
        &|xs| {
            let (n_, k_) = (n as usize, k as usize);
            let mut bp = vec![0f64; xs[1].len()];
            for z in 0..3 {
                for i in 0..n_ {
                    for j in 0..k_ {
                        // [k, n, 3] element (j, i, z) is [k, 3, n] element (j, z, i)
                        bp[z * n_ * k_ + i * k_ + j] = xs[1][i * 3 * k_ + z * k_ + j];
                    }
                }
            }
            rf::mul_mat(&xs[0], u4(&[k, m, 1, 1]), &bp, u4(&[k, n, 3, 1])).0
        },
    );
}

#[test]
fn binary_ops() {
    type Op = for<'a> fn(&'a Context, Tensor<'a>, Tensor<'a>) -> ggml_rs::Result<Tensor<'a>>;
    type Case = (&'static str, Op, fn(f64, f64) -> f64);
    let ops: [Case; 4] = [
        ("add", |c, a, b| c.add(a, b), |x, y| x + y),
        ("sub", |c, a, b| c.sub(a, b), |x, y| x - y),
        ("mul", |c, a, b| c.mul(a, b), |x, y| x * y),
        ("div", |c, a, b| c.div(a, b), |x, y| x / y),
    ];
    for (oi, (name, op, f)) in ops.into_iter().enumerate() {
        for seed in 0..2u64 {
            let mut r = rng(300 + 10 * oi as u64 + seed);
            let an = shape(&mut r, &[(1, 6), (1, 4), (1, 3), (1, 2)]);
            // Same shape: both operands are parameters.
            let a = rand_param(&mut r, &an, -2.0, 2.0);
            let b = param(&an, away_from_zero(&mut r, numel(&an), 0.5, 2.0));
            grad_check(&format!("{name} {an:?}"), seed, &[a, b], &|ctx, x| op(ctx, x[0], x[1]).unwrap(), &|xs| {
                rf::binary(&xs[0], u4(&an), &xs[1], u4(&an), f)
            });
            // Broadcast b over a: ggml reduces the broadcast gradient for add and
            // mul; for sub and div it does not, so there b is a constant
            // (Graph::build_backward refuses a parameter there, see errors.rs).
            let bn: Vec<i64> = an.iter().map(|&n| if r.random_bool(0.5) { 1 } else { n }).collect();
            let a = rand_param(&mut r, &an, -2.0, 2.0);
            let bv = away_from_zero(&mut r, numel(&bn), 0.5, 2.0);
            if matches!(name, "add" | "mul") {
                grad_check(
                    &format!("{name} {an:?} by broadcast {bn:?}"),
                    seed,
                    &[a, param(&bn, bv)],
                    &|ctx, x| op(ctx, x[0], x[1]).unwrap(),
                    &|xs| rf::binary(&xs[0], u4(&an), &xs[1], u4(&bn), f),
                );
            } else {
                let (bn2, bv2) = (bn.clone(), bv.clone());
                grad_check(
                    &format!("{name} {an:?} by constant broadcast {bn:?}"),
                    seed,
                    &[a],
                    &move |ctx, x| {
                        let b = leaf(ctx, &cpu(), &bn2, &bv2);
                        op(ctx, x[0], b).unwrap()
                    },
                    &|xs| rf::binary(&xs[0], u4(&an), &f64s(&bv), u4(&bn), f),
                );
            }
        }
    }
}

#[test]
fn scale_and_scale_bias() {
    let mut r = rng(400);
    let ne = shape(&mut r, &[(1, 9), (1, 5), (1, 3)]);
    let x = rand_param(&mut r, &ne, -2.0, 2.0);
    let s = -0.7f32;
    grad_check("scale", 0, &[x], &|ctx, x| ctx.scale(x[0], s).unwrap(), &|xs| xs[0].iter().map(|v| v * s as f64).collect());
    let x = rand_param(&mut r, &ne, -2.0, 2.0);
    grad_check("scale_bias", 1, &[x], &|ctx, x| ctx.scale_bias(x[0], 1.3, 0.4).unwrap(), &|xs| {
        xs[0].iter().map(|v| v * 1.3f32 as f64 + 0.4f32 as f64).collect()
    });
}

#[test]
fn rms_norm() {
    for (seed, n0) in [(0u64, 0usize), (1, 0), (2, 1), (3, 4099)] {
        let mut r = rng(500 + seed);
        let n0 = if n0 == 0 { r.random_range(2..=40) } else { n0 } as i64;
        let rows = r.random_range(1..=4i64);
        let x = rand_param(&mut r, &[n0, rows], -2.0, 2.0);
        let eps = 1e-5f32;
        grad_check(&format!("rms_norm [{n0}, {rows}]"), seed, &[x], &|ctx, x| ctx.rms_norm(x[0], eps).unwrap(), &|xs| {
            rf::rows(&xs[0], n0 as usize, |r| rf::rms_norm_row(r, eps as f64))
        });
    }
}

#[test]
fn rms_norm_gain() {
    // One node (patch 0036) whose backward recomputes the norm for the gain's
    // gradient: both gradients against finite differences of g ⊙ rms_norm(x).
    // (Rows of 1, where the gradient is eps-sized and cancels, are in `rms_norm`.)
    for (seed, n0) in [(0u64, 0usize), (1, 0), (2, 4099)] {
        let mut r = rng(550 + seed);
        let n0 = if n0 == 0 { r.random_range(2..=40) } else { n0 } as i64;
        let rows = r.random_range(1..=4i64);
        let x = rand_param(&mut r, &[n0, rows], -2.0, 2.0);
        let g = rand_param(&mut r, &[n0], -1.5, 1.5);
        let eps = 1e-5f32;
        grad_check(&format!("rms_norm_gain [{n0}, {rows}]"), seed, &[x, g], &|ctx, x| ctx.rms_norm_gain(x[0], x[1], eps).unwrap(), &|xs| {
            let n = rf::rows(&xs[0], n0 as usize, |r| rf::rms_norm_row(r, eps as f64));
            n.iter().enumerate().map(|(i, v)| v * xs[1][i % n0 as usize]).collect()
        });
    }
}

#[test]
fn norm_gain_bias() {
    // LayerNorm with gain and bias as one node (patch 0036): the three gradients
    // against finite differences of g ⊙ norm(x) + b.
    for (seed, n0) in [(0u64, 0usize), (1, 4099)] {
        let mut r = rng(650 + seed);
        let n0 = if n0 == 0 { r.random_range(2..=40) } else { n0 } as i64;
        let rows = r.random_range(1..=3i64);
        let x: Vec<f32> = uniform(&mut r, (n0 * rows) as usize, -2.0, 2.0).into_iter().map(|v| v + 0.7).collect();
        let (g, b) = (rand_param(&mut r, &[n0], -1.5, 1.5), rand_param(&mut r, &[n0], -1.0, 1.0));
        let eps = 1e-5f32;
        grad_check(
            &format!("norm_gain_bias [{n0}, {rows}]"),
            seed,
            &[param(&[n0, rows], x), g, b],
            &|ctx, x| ctx.norm_gain_bias(x[0], x[1], x[2], eps).unwrap(),
            &|xs| {
                let n = rf::rows(&xs[0], n0 as usize, |r| rf::norm_row(r, eps as f64));
                n.iter().enumerate().map(|(i, v)| v * xs[1][i % n0 as usize] + xs[2][i % n0 as usize]).collect()
            },
        );
    }
}

#[test]
fn norm_layernorm_patched_backward() {
    // Rows of 1 (the output and gradient are identically 0), 4099 and random.
    for (seed, n0) in [(0u64, 1usize), (1, 4099), (2, 0), (3, 0)] {
        let mut r = rng(600 + seed);
        let n0 = if n0 == 0 { r.random_range(2..=40) } else { n0 } as i64;
        let rows = r.random_range(1..=3i64);
        let x: Vec<f32> = uniform(&mut r, (n0 * rows) as usize, -2.0, 2.0).into_iter().map(|v| v + 0.7).collect();
        let eps = 1e-5f32;
        grad_check(&format!("norm [{n0}, {rows}]"), seed, &[param(&[n0, rows], x)], &|ctx, x| ctx.norm(x[0], eps).unwrap(), &|xs| {
            rf::rows(&xs[0], n0 as usize, |r| rf::norm_row(r, eps as f64))
        });
    }
}

#[test]
fn rope_ext_both_modes() {
    for (seed, (mode, neox)) in
        [(RopeMode::Normal, false), (RopeMode::Neox, true), (RopeMode::Normal, false), (RopeMode::Neox, true)].into_iter().enumerate()
    {
        let mut r = rng(700 + seed as u64);
        let half = r.random_range(1..=4usize);
        let head_dim = 2 * half + if seed >= 2 { 2 } else { 0 }; // partial rotation in the last two
        let n_dims = 2 * half;
        let (n_head, n_pos) = (r.random_range(1..=3usize), r.random_range(1..=5usize));
        let pos: Vec<i32> = (0..n_pos).map(|_| r.random_range(0..50)).collect();
        let ne = [head_dim, n_head, n_pos, 1];
        let x = rand_param(&mut r, &ne.map(|n| n as i64), -1.0, 1.0);
        let pos_b = pos.clone();
        grad_check(
            &format!("rope_ext {mode:?} {ne:?} n_dims {n_dims} pos {pos:?}"),
            seed as u64,
            &[x],
            &move |ctx, x| {
                let p = leaf_i32(ctx, &cpu(), &[pos_b.len() as i64], &pos_b);
                ctx.rope_ext(x[0], p, n_dims, mode, 10000.0).unwrap()
            },
            &|xs| rf::rope(&xs[0], ne, &pos, n_dims, neox, 10000.0),
        );
    }
}

#[test]
fn soft_max_ext_with_mask() {
    for seed in 0..4u64 {
        let mut r = rng(800 + seed);
        let n_q = r.random_range(1..=5usize);
        let n_kv = n_q + r.random_range(0..=2usize);
        let n_head = r.random_range(1..=3usize);
        let an = [n_kv, n_q, n_head, 1];
        let a = rand_param(&mut r, &an.map(|n| n as i64), -3.0, 3.0);
        let scale = r.random_range(0.2..1.5f32);
        let masked = seed != 0;
        let mask = rf::causal_mask(n_kv, n_q, n_q);
        let mask_b = mask.clone();
        grad_check(
            &format!("soft_max_ext {an:?} scale {scale:.3} causal mask {masked}"),
            seed,
            &[a],
            &move |ctx, x| {
                let m = leaf(ctx, &cpu(), &[n_kv as i64, n_q as i64], &mask_b);
                ctx.soft_max_ext(x[0], if masked { Some(m) } else { None }, scale).unwrap()
            },
            &|xs| {
                let m = f64s(&mask);
                rf::soft_max(&xs[0], an, if masked { Some((&m, [n_kv, n_q, 1, 1])) } else { None }, scale as f64)
            },
        );
    }
}

#[test]
fn unary_ops() {
    type Op = for<'a> fn(&'a Context, Tensor<'a>) -> ggml_rs::Result<Tensor<'a>>;
    /// Name, op, f64 reference, input range.
    type Case = (&'static str, Op, fn(f64) -> f64, f32, f32);
    let ops: [Case; 7] = [
        ("silu", |c, a| c.silu(a), rf::silu, -6.0, 6.0),
        ("sqr", |c, a| c.sqr(a), |x| x * x, -2.0, 2.0),
        ("sqrt", |c, a| c.sqrt(a), f64::sqrt, 0.1, 3.0),
        ("log", |c, a| c.log(a), f64::ln, 0.1, 3.0),
        ("exp", |c, a| c.exp(a), f64::exp, -2.0, 2.0),
        ("neg", |c, a| c.neg(a), |x| -x, -2.0, 2.0),
        ("relu", |c, a| c.relu(a), |x| x.max(0.0), -2.0, 2.0),
    ];
    for (i, (name, op, f, lo, hi)) in ops.into_iter().enumerate() {
        let mut r = rng(900 + i as u64);
        let ne = shape(&mut r, &[(1, 17), (1, 4)]);
        let mut x = uniform(&mut r, numel(&ne), lo, hi);
        if name == "relu" {
            // Keep clear of the kink at 0 by more than the difference step.
            x.iter_mut().filter(|v| v.abs() < 1e-2).for_each(|v| *v = 0.5);
        }
        grad_check(&format!("{name} {ne:?}"), i as u64, &[param(&ne, x)], &|ctx, x| op(ctx, x[0]).unwrap(), &|xs| {
            xs[0].iter().map(|&v| f(v)).collect()
        });
    }
}

#[test]
fn gelu_patched_backward() {
    for (seed, n0) in [(0u64, 1usize), (1, 4099), (2, 0)] {
        let mut r = rng(1000 + seed);
        let n0 = if n0 == 0 { r.random_range(2..=40) } else { n0 } as i64;
        let rows = r.random_range(1..=3i64);
        let x = rand_param(&mut r, &[n0, rows], -5.0, 5.0);
        grad_check(&format!("gelu [{n0}, {rows}]"), seed, &[x], &|ctx, x| ctx.gelu(x[0]).unwrap(), &|xs| {
            xs[0].iter().map(|&v| rf::gelu(v)).collect()
        });
    }
}

#[test]
fn swiglu_split() {
    for seed in 0..2u64 {
        let mut r = rng(1100 + seed);
        let ne = shape(&mut r, &[(1, 12), (1, 4), (1, 2)]);
        let a = rand_param(&mut r, &ne, -4.0, 4.0);
        let b = rand_param(&mut r, &ne, -2.0, 2.0);
        grad_check(&format!("swiglu_split {ne:?}"), seed, &[a, b], &|ctx, x| ctx.swiglu_split(x[0], x[1]).unwrap(), &|xs| {
            xs[0].iter().zip(&xs[1]).map(|(&a, &b)| rf::silu(a) * b).collect()
        });
    }
    // Rows of a multiple of 4: patch 0038's float4 kernels on CUDA, the
    // backward's fused silu(a)·dy included.
    let mut r = rng(1110);
    let (a, b) = (rand_param(&mut r, &[8, 3, 2], -4.0, 4.0), rand_param(&mut r, &[8, 3, 2], -2.0, 2.0));
    grad_check("swiglu_split [8, 3, 2]", 2, &[a, b], &|ctx, x| ctx.swiglu_split(x[0], x[1]).unwrap(), &|xs| {
        xs[0].iter().zip(&xs[1]).map(|(&a, &b)| rf::silu(a) * b).collect()
    });
}

#[test]
fn layout_ops() {
    let ne = [3i64, 4, 2, 2];
    let n4 = u4(&ne);
    let x = || rand_param(&mut rng(1201), &ne, -1.0, 1.0);
    grad_check("reshape", 0, &[x()], &|ctx, x| ctx.reshape(x[0], &[6, 8]).unwrap(), &|xs| xs[0].clone());
    // Every other row of the middle two matrices: a strided view.
    grad_check(
        "view",
        1,
        &[x()],
        &|ctx, x| {
            let nb = x[0].nb();
            ctx.view(x[0], &[3, 2, 2], &[2 * nb[1], nb[2]], nb[2]).unwrap()
        },
        &|xs| {
            let mut out = Vec::new();
            for_each([3, 2, 2, 1], |i0, i1, i2, _| {
                let flat = 1 + i2; // matrices 1 and 2 of the 4 (ne2·ne3 flattened)
                out.push(xs[0][at(n4, i0, 2 * i1, flat % 2, flat / 2)]);
            });
            out
        },
    );
    let axes = [2usize, 0, 3, 1];
    grad_check("permute + cont", 2, &[x()], &|ctx, x| ctx.cont(ctx.permute(x[0], axes).unwrap()).unwrap(), &|xs| {
        rf::permute(&xs[0], n4, axes).0
    });
    grad_check("transpose + cont", 3, &[x()], &|ctx, x| ctx.cont(ctx.transpose(x[0]).unwrap()).unwrap(), &|xs| {
        rf::permute(&xs[0], n4, [1, 0, 2, 3]).0
    });
    // A parameter read through a transposed copy, then reshaped: the gradient
    // flows back through cont and transpose.
    grad_check(
        "cont_nd of a transpose, squared",
        4,
        &[x()],
        &|ctx, x| ctx.sqr(ctx.cont_nd(ctx.transpose(x[0]).unwrap(), &[8, 6]).unwrap()).unwrap(),
        &|xs| rf::permute(&xs[0], n4, [1, 0, 2, 3]).0.iter().map(|v| v * v).collect(),
    );
    // Strided gradients flowing into the ops that accept them (see
    // backward::check_strided_grads): a permuted batched matrix product and a
    // permuted RMSNorm (rows stay contiguous), and any op behind a reshape.
    let a = rand_param(&mut rng(1202), &[3, 5, 2], -1.0, 1.0);
    let b = rand_param(&mut rng(1203), &[3, 6, 2], -1.0, 1.0);
    grad_check("permute of mul_mat", 5, &[a, b], &|ctx, x| ctx.permute(ctx.mul_mat(x[0], x[1]).unwrap(), [0, 2, 1, 3]).unwrap(), &|xs| {
        let (m, mn) = rf::mul_mat(&xs[0], [3, 5, 2, 1], &xs[1], [3, 6, 2, 1]);
        rf::permute(&m, mn, [0, 2, 1, 3]).0
    });
    grad_check("permute of rms_norm", 6, &[x()], &|ctx, x| ctx.permute(ctx.rms_norm(x[0], 1e-5).unwrap(), [0, 2, 1, 3]).unwrap(), &|xs| {
        rf::permute(&rf::rows(&xs[0], 3, |r| rf::rms_norm_row(r, 1e-5f32 as f64)), n4, [0, 2, 1, 3]).0
    });
    let gain = || param(&[3], vec![0.5, -1.25, 2.0]);
    grad_check(
        "permute of rms_norm_gain",
        16,
        &[x(), gain()],
        &|ctx, x| ctx.permute(ctx.rms_norm_gain(x[0], x[1], 1e-5).unwrap(), [0, 2, 1, 3]).unwrap(),
        &|xs| {
            let n = rf::rows(&xs[0], 3, |r| rf::rms_norm_row(r, 1e-5f32 as f64));
            let y: Vec<f64> = n.iter().enumerate().map(|(i, v)| v * xs[1][i % 3]).collect();
            rf::permute(&y, n4, [0, 2, 1, 3]).0
        },
    );
    grad_check(
        "transpose of a reshaped softmax",
        7,
        &[x()],
        &|ctx, x| {
            let s = ctx.soft_max_ext(x[0], None, 1.0).unwrap();
            ctx.transpose(ctx.reshape(s, &s.ne()).unwrap()).unwrap()
        },
        &|xs| rf::permute(&rf::soft_max(&xs[0], n4, None, 1.0), n4, [1, 0, 2, 3]).0,
    );
}

#[test]
fn reductions_and_repeat() {
    let mut r = rng(1300);
    let ne = shape(&mut r, &[(1, 9), (1, 4), (1, 3)]);
    let n4 = u4(&ne);
    let x = || rand_param(&mut rng(1301), &ne, -1.0, 1.0);
    grad_check(&format!("sum_rows {ne:?}"), 0, &[x()], &|ctx, x| ctx.sum_rows(x[0]).unwrap(), &|xs| {
        xs[0].chunks(n4[0]).map(|c| c.iter().sum()).collect()
    });
    grad_check(&format!("mean_rows {ne:?}"), 1, &[x()], &|ctx, x| ctx.mean_rows(x[0]).unwrap(), &|xs| {
        xs[0].chunks(n4[0]).map(|c| c.iter().sum::<f64>() / c.len() as f64).collect()
    });
    grad_check(&format!("sum {ne:?}"), 2, &[x()], &|ctx, x| ctx.sum(x[0]).unwrap(), &|xs| vec![xs[0].iter().sum()]);
    let to = [n4[0] as i64 * 2, n4[1] as i64, n4[2] as i64 * 3, 2];
    grad_check(
        &format!("repeat {ne:?} to {to:?}"),
        3,
        &[x()],
        &move |ctx, x| {
            let like = leaf(ctx, &cpu(), &to, &vec![0.0; numel(&to)]);
            ctx.repeat(x[0], like).unwrap()
        },
        &|xs| rf::repeat(&xs[0], n4, u4(&to)),
    );
    grad_check(&format!("repeat_4d {ne:?} to {to:?}"), 4, &[x()], &|ctx, x| ctx.repeat_4d(x[0], to).unwrap(), &|xs| {
        rf::repeat(&xs[0], n4, u4(&to))
    });
}

#[test]
fn cross_entropy_loss() {
    for seed in 0..3u64 {
        let mut r = rng(1400 + seed);
        let (nv, rows) = (r.random_range(2..=20usize), r.random_range(1..=5usize));
        let logits = rand_param(&mut r, &[nv as i64, rows as i64], -3.0, 3.0);
        let mut labels = uniform(&mut r, nv * rows, 0.0, 1.0);
        for row in labels.chunks_mut(nv) {
            let s: f32 = row.iter().sum();
            row.iter_mut().for_each(|v| *v /= s);
        }
        let lb = labels.clone();
        grad_check(
            &format!("cross_entropy_loss [{nv}, {rows}]"),
            seed,
            &[logits],
            &move |ctx, x| {
                let l = leaf(ctx, &cpu(), &[nv as i64, rows as i64], &lb);
                ctx.cross_entropy_loss(x[0], l).unwrap()
            },
            &|xs| vec![rf::cross_entropy(&xs[0], &f64s(&labels), nv)],
        );
    }
}

#[test]
fn attention_chain() {
    // One causal self-attention head group as llama.cpp builds it, batched over
    // heads: x [d, T] → q, k, v = W·x reshaped to [dh, H, T]; RoPE on q and k;
    // K, Q permuted to [dh, T, H]; scores = mul_mat(K, Q) [T, T, H];
    // softmax(scale·scores + causal mask); V = cont(permute(v)) [T, dh, H];
    // out = mul_mat(V, P) [dh, T, H], permuted back to [dh, H, T] and made [d, T].
    for (seed, mode) in [(0u64, RopeMode::Normal), (1, RopeMode::Neox)] {
        let mut r = rng(1500 + seed);
        let (dh, h, t) = (4usize, 2usize, r.random_range(2..=5usize));
        let d = dh * h;
        let pos: Vec<i32> = (0..t as i32).collect();
        let mask = rf::causal_mask(t, t, t);
        let scale = 1.0 / (dh as f32).sqrt();
        let params = [
            rand_param(&mut r, &[d as i64, t as i64], -1.0, 1.0),
            rand_param(&mut r, &[d as i64, d as i64], -0.5, 0.5),
            rand_param(&mut r, &[d as i64, d as i64], -0.5, 0.5),
            rand_param(&mut r, &[d as i64, d as i64], -0.5, 0.5),
        ];
        let (pos_b, mask_b) = (pos.clone(), mask.clone());
        grad_check(
            &format!("attention chain T={t} rope {mode:?}"),
            seed,
            &params,
            &move |ctx, p| {
                let cpu = cpu();
                let pt = leaf_i32(ctx, &cpu, &[t as i64], &pos_b);
                let mt = leaf(ctx, &cpu, &[t as i64, t as i64], &mask_b);
                let (x, wq, wk, wv) = (p[0], p[1], p[2], p[3]);
                let heads = |w| ctx.reshape(ctx.mul_mat(w, x).unwrap(), &[dh as i64, h as i64, t as i64]).unwrap();
                let q = ctx.rope_ext(heads(wq), pt, dh, mode, 10000.0).unwrap();
                let k = ctx.rope_ext(heads(wk), pt, dh, mode, 10000.0).unwrap();
                let qp = ctx.permute(q, [0, 2, 1, 3]).unwrap();
                let kp = ctx.permute(k, [0, 2, 1, 3]).unwrap();
                let kq = ctx.mul_mat(kp, qp).unwrap();
                let att = ctx.soft_max_ext(kq, Some(mt), scale).unwrap();
                let v = ctx.cont(ctx.permute(heads(wv), [1, 2, 0, 3]).unwrap()).unwrap();
                let o = ctx.mul_mat(v, att).unwrap();
                ctx.cont_nd(ctx.permute(o, [0, 2, 1, 3]).unwrap(), &[d as i64, t as i64]).unwrap()
            },
            &|xs| {
                let mm = |w: &[f64]| rf::mul_mat(w, [d, d, 1, 1], &xs[0], [d, t, 1, 1]).0; // [d, T] = [dh, H, T]
                let hn = [dh, h, t, 1];
                let q = rf::rope(&mm(&xs[1]), hn, &pos, dh, mode == RopeMode::Neox, 10000.0);
                let k = rf::rope(&mm(&xs[2]), hn, &pos, dh, mode == RopeMode::Neox, 10000.0);
                let v = mm(&xs[3]);
                let mut out = vec![0.0; d * t];
                for hh in 0..h {
                    for iq in 0..t {
                        let s: Vec<f64> =
                            (0..t).map(|ik| (0..dh).map(|l| k[at(hn, l, hh, ik, 0)] * q[at(hn, l, hh, iq, 0)]).sum()).collect();
                        let m = f64s(&mask[iq * t..(iq + 1) * t]);
                        let p = rf::soft_max(&s, [t, 1, 1, 1], Some((&m, [t, 1, 1, 1])), scale as f64);
                        for l in 0..dh {
                            out[at(hn, l, hh, iq, 0)] = (0..t).map(|ik| p[ik] * v[at(hn, l, hh, ik, 0)]).sum();
                        }
                    }
                }
                out
            },
        );
    }
}
