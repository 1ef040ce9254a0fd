//! The kernels and backward rules of our patches 0006-0011 on the test device
//! (`TOY_TEST_DEVICE`, default the CPU) against f64 references: REPEAT_BACK
//! over each dimension and many rows, GET_ROWS_BACK with repeated and unused
//! rows, copies of permuted tensors, GELU_BACK, the OUT_PROD mul_mat gradient,
//! and the matmul precision switch. On CUDA these exercise the new kernels; on
//! the CPU they pin the semantics the CUDA kernels must match.

use crate::common;

use common::gradcheck::*;
use common::reference as rf;
use common::*;
use ggml_rs::{sys, Context, DType, Graph, MatmulPrecision, MulMatGrad};
use half::f16;
use rand::Rng;

/// `|got − want| ≤ tol · (Σ|summands| + 1)` per element, for sums of many terms
/// whose f32 rounding grows with their count.
fn check_sums(what: &str, got: &[f32], want: &[f64], scale: &[f64], tol: f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = 0.0f64;
    for ((&g, &w), &s) in got.iter().zip(want).zip(scale) {
        let e = (g as f64 - w).abs() / (s + 1.0);
        assert!(e.is_finite() && e <= tol, "{what}: {g} vs {w} (error {e:e} of the summands' scale)");
        worst = worst.max(e);
    }
    println!("{what}: max error {worst:.3e} of the summands' scale over {} values", got.len());
}

/// Reference of `repeat_back`: `x` `[ne]` summed down to `to`, and Σ|x| per output.
fn repeat_back_ref(x: &[f32], ne: [usize; 4], to: [usize; 4]) -> (Vec<f64>, Vec<f64>) {
    let n: usize = to.iter().product();
    let (mut sum, mut abs) = (vec![0f64; n], vec![0f64; n]);
    for_each(ne, |i0, i1, i2, i3| {
        let v = x[at(ne, i0, i1, i2, i3)] as f64;
        let o = at(to, i0 % to[0], i1 % to[1], i2 % to[2], i3 % to[3]);
        sum[o] += v;
        abs[o] += v.abs();
    });
    (sum, abs)
}

#[test]
fn repeat_back_over_each_dim_and_many_rows() {
    let dev = cpu();
    // (source ne, destination ne): rows not a multiple of 32, each of the four
    // dims reduced alone, all at once, > 100k rows, and a sum down to one value.
    let cases: [([i64; 4], [i64; 4]); 9] = [
        ([37, 1000, 1, 1], [37, 1, 1, 1]),
        ([210, 5, 1, 1], [3, 5, 1, 1]),
        ([33, 4, 14, 1], [33, 4, 2, 1]),
        ([40, 3, 2, 9], [40, 3, 2, 1]),
        ([10, 9, 4, 6], [5, 3, 2, 2]),
        ([256, 8192, 1, 1], [256, 1, 1, 1]),
        ([64, 131_077, 1, 1], [64, 1, 1, 1]),
        ([200_003, 1, 1, 1], [1, 1, 1, 1]),
        ([96, 7, 5, 3], [96, 7, 5, 3]),
    ];
    for (i, (ne, to)) in cases.into_iter().enumerate() {
        let mut r = rng(3000 + i as u64);
        let x = uniform(&mut r, numel(&ne), -1.0, 1.0);
        let ctx = Context::new(16).unwrap();
        let tx = leaf(&ctx, &dev, &ne, &x);
        let like = ctx.new_tensor(DType::F32, &to).unwrap();
        let y = ctx.repeat_back(tx, like).unwrap();
        let got = eval(&ctx, &[y]);
        let (want, abs) = repeat_back_ref(&x, ne4(&ne), ne4(&to));
        check_sums(&format!("repeat_back {ne:?} -> {to:?}"), &got[0], &want, &abs, 1e-6);
    }
}

#[test]
fn repeat_back_of_a_permuted_input() {
    // x [24, 5, 70] viewed as [24, 70, 5] (rows kept, dims 1 and 2 swapped), summed to [24, 1, 5].
    let dev = cpu();
    let ne = [24i64, 5, 70, 1];
    let mut r = rng(3100);
    let x = uniform(&mut r, numel(&ne), -1.0, 1.0);
    let ctx = Context::new(16).unwrap();
    let tx = leaf(&ctx, &dev, &ne, &x);
    let p = ctx.permute(tx, [0, 2, 1, 3]).unwrap(); // [24, 70, 5]
    let like = ctx.new_tensor(DType::F32, &[24, 1, 5]).unwrap();
    let y = ctx.repeat_back(p, like).unwrap();
    let got = eval(&ctx, &[y]);
    let (xp, pn) = rf::permute(&f64s(&x), ne4(&ne), [0, 2, 1, 3]);
    let xp32: Vec<f32> = xp.iter().map(|&v| v as f32).collect();
    let (want, abs) = repeat_back_ref(&xp32, pn, [24, 1, 5, 1]);
    check_sums("repeat_back of permute([24, 5, 70])", &got[0], &want, &abs, 1e-6);
}

/// `∂/∂table Σ get_rows(table, ids) ⊙ R` computed by the backward pass
/// (GET_ROWS_BACK), against `Σ_{i: ids[i] = r} R[i]`.
fn get_rows_back_case(d: usize, rows: usize, ids: &[i32], seed: u64) {
    table_grad_case(d, rows, ids, seed, Tied::No);
}

/// How [`table_grad_case`]'s table is read besides `get_rows`.
#[derive(Clone, Copy, Debug)]
enum Tied {
    /// Not at all: its gradient is the GET_ROWS_BACK alone.
    No,
    /// Elementwise, after the rows in graph order (`+ Σ T ⊙ V`): the backward
    /// meets the elementwise use first.
    After,
    /// Elementwise, before the rows: the GET_ROWS_BACK is the table's first
    /// gradient, and the elementwise one is added to it.
    Before,
    /// As `Before`, through a PAD of two rows (a training head padded to a
    /// multiple of 64 rows, as GPT-2's): the other gradient is a view of the
    /// padded one.
    Padded,
}

/// [`get_rows_back_case`]; where the table is also read whole ([`Tied`],
/// as a tied embedding's head reads it), its gradient is
/// `V + Σ_{i: ids[i] = r} R[i]`: the GET_ROWS_BACK added to the other use's
/// gradient by an ADD (on CUDA, toy-rs patch 0088 adds the named rows in
/// place over the other gradient where the ADD took its memory).
fn table_grad_case(d: usize, rows: usize, ids: &[i32], seed: u64, tied: Tied) {
    let dev = cpu();
    let mut r = rng(seed);
    let table = uniform(&mut r, d * rows, -1.0, 1.0);
    let weight = uniform(&mut r, d * ids.len(), -1.0, 1.0);
    let pad = if matches!(tied, Tied::Padded) { 2 } else { 0 };
    let other = match tied {
        Tied::No => vec![0.0; d * rows],
        _ => uniform(&mut r, d * (rows + pad), -1.0, 1.0),
    };
    let ctx = Context::new(256).unwrap();
    let t = ctx.new_tensor(DType::F32, &[d as i64, rows as i64]).unwrap();
    ctx.set_param(t).unwrap();
    ctx.allocate(&dev).unwrap();
    t.write(&table).unwrap();
    let ti = leaf_i32(&ctx, &dev, &[ids.len() as i64], ids);
    let w = leaf(&ctx, &dev, &[d as i64, ids.len() as i64], &weight);
    let by_rows = ctx.sum(ctx.mul(ctx.get_rows(t, ti).unwrap(), w).unwrap()).unwrap();
    let whole = |t| {
        let v = leaf(&ctx, &dev, &[d as i64, (rows + pad) as i64], &other);
        ctx.sum(ctx.mul(t, v).unwrap()).unwrap()
    };
    let loss = match tied {
        Tied::No => by_rows,
        Tied::After => ctx.add(by_rows, whole(t)).unwrap(),
        Tied::Before => ctx.add(whole(t), by_rows).unwrap(),
        Tied::Padded => ctx.add(whole(ctx.pad(t, [0, pad as i64, 0, 0]).unwrap()), by_rows).unwrap(),
    };
    let mut g = Graph::with_grads(&ctx, 256).unwrap();
    g.expand(loss).unwrap();
    g.build_backward(loss).unwrap();
    let grad = g.grad(t).unwrap().set_output();
    if !matches!(tied, Tied::No) {
        // the GET_ROWS_BACK is the ADD's second operand, whichever use the backward met first
        let rows_second = grad.srcs().get(1).is_some_and(|s| s.op() == sys::GGML_OP_GET_ROWS_BACK);
        assert!(grad.op() == sys::GGML_OP_ADD && rows_second, "{tied:?}: the table's gradient is ADD(other, GET_ROWS_BACK)");
    }
    g.allocate(&backends(&dev)).unwrap();
    g.compute().unwrap();
    let got = grad.read::<f32>().unwrap();
    let mut want: Vec<f64> = other[..d * rows].iter().map(|&a| a as f64).collect();
    let mut abs: Vec<f64> = other[..d * rows].iter().map(|&a| a.abs() as f64).collect();
    for (i, &id) in ids.iter().enumerate() {
        for c in 0..d {
            want[id as usize * d + c] += weight[i * d + c] as f64;
            abs[id as usize * d + c] += weight[i * d + c].abs() as f64;
        }
    }
    check_sums(&format!("{tied:?} table d={d} rows={rows} ids={}", ids.len()), &got, &want, &abs, 1e-6);
}

#[test]
fn get_rows_back_repeated_and_unused_rows() {
    let mut r = rng(3200);
    // Many tokens over a vocabulary, some rows never used.
    let ids: Vec<i32> = (0..5000).map(|_| r.random_range(0..700)).collect();
    get_rows_back_case(33, 1000, &ids, 3201);
    // > 100k tokens over few rows (long segments), and a single token.
    let ids: Vec<i32> = (0..100_003).map(|_| r.random_range(0..37)).collect();
    get_rows_back_case(4, 37, &ids, 3202);
    get_rows_back_case(300, 5, &[3], 3203);
    // Every id the same, and the ids in decreasing order.
    get_rows_back_case(8, 3, &[1; 777], 3204);
    let ids: Vec<i32> = (0..513).rev().collect();
    get_rows_back_case(7, 513, &ids, 3205);
}

/// A table read twice, as a tied embedding is ([`table_grad_case`] with the
/// other use after the rows, before them, and through a PAD).
#[test]
fn a_table_read_by_get_rows_and_elementwise_sums_both_gradients() {
    let mut r = rng(3300);
    let ids: Vec<i32> = (0..3000).map(|_| r.random_range(0..900)).collect();
    for tied in [Tied::After, Tied::Before, Tied::Padded] {
        table_grad_case(64, 1000, &ids, 3301, tied); // rows never read, rows read many times
        table_grad_case(33, 1000, &ids, 3302, tied); // no multiple of 4
        table_grad_case(8, 3, &[1; 500], 3303, tied);
    }
}

#[test]
fn cont_of_permuted_and_transposed_tensors() {
    let dev = cpu();
    let cases: [([i64; 4], [usize; 4]); 7] = [
        ([33, 7, 65, 3], [0, 2, 1, 3]), // rows kept: the q/k/o conts of attention
        ([19, 40, 6, 5], [1, 2, 0, 3]), // dim 0 strided: the v cont of attention
        ([70, 45, 1, 1], [1, 0, 2, 3]), // a transpose
        ([31, 9, 4, 2], [1, 0, 2, 3]),  // batched transposes
        ([5, 6, 7, 8], [2, 0, 3, 1]),   // dim 0 strided, unit stride in dim 3 of the view
        ([64, 3, 2, 40], [3, 1, 2, 0]), // dim 0 strided, long batch
        ([1, 37, 5, 1], [1, 0, 2, 3]),  // a dimension of one
    ];
    for (i, (ne, axes)) in cases.into_iter().enumerate() {
        let mut r = rng(3300 + i as u64);
        let x = uniform(&mut r, numel(&ne), -10.0, 10.0);
        let x16: Vec<f16> = x.iter().map(|&v| f16::from_f32(v)).collect();
        let ctx = Context::new(16).unwrap();
        let t32 = leaf(&ctx, &dev, &ne, &x);
        let t16 = ctx.new_tensor(DType::F16, &ne).unwrap();
        ctx.allocate(&dev).unwrap();
        t16.write(&x16).unwrap();
        let c32 = ctx.cont(ctx.permute(t32, axes).unwrap()).unwrap();
        let c16 = ctx.cont(ctx.permute(t16, axes).unwrap()).unwrap();
        for c in [c32, c16] {
            c.set_output();
        }
        let mut g = Graph::new(&ctx, 64).unwrap();
        g.expand(c32).unwrap();
        g.expand(c16).unwrap();
        g.allocate(&backends(&dev)).unwrap();
        g.compute().unwrap();
        let (want, _) = rf::permute(&f64s(&x), ne4(&ne), axes);
        let want16: Vec<f64> = {
            let (w, _) = rf::permute(&x16.iter().map(|h| h.to_f64()).collect::<Vec<_>>(), ne4(&ne), axes);
            w
        };
        check(&format!("cont(permute({ne:?}, {axes:?})) f32"), &c32.read_f32().unwrap(), &want, 0.0);
        check(&format!("cont(permute({ne:?}, {axes:?})) f16"), &c16.read_f32().unwrap(), &want16, 0.0);
    }
}

#[test]
fn gelu_back_op() {
    let dev = cpu();
    let mut r = rng(3400);
    let n = [300i64, 17, 3, 1];
    let x = uniform(&mut r, numel(&n), -6.0, 6.0);
    let dy = uniform(&mut r, numel(&n), -2.0, 2.0);
    let ctx = Context::new(16).unwrap();
    let tx = leaf(&ctx, &dev, &n, &x);
    let tdy = leaf(&ctx, &dev, &n, &dy);
    let y = ctx.gelu_back(tdy, tx).unwrap();
    let got = eval(&ctx, &[y]);
    let (k, a) = ((2.0f64 / std::f64::consts::PI).sqrt(), 0.044715f64);
    let want: Vec<f64> = x
        .iter()
        .zip(&dy)
        .map(|(&x, &dy)| {
            let (x, dy) = (x as f64, dy as f64);
            let t = (k * (x + a * x * x * x)).tanh();
            dy * (0.5 * (1.0 + t) + 0.5 * x * (1.0 - t * t) * k * (1.0 + 3.0 * a * x * x))
        })
        .collect();
    check("gelu_back", &got[0], &want, 1e-5);
    assert!(ctx.gelu_back(tdy, ctx.new_tensor(DType::F32, &[3]).unwrap()).is_err());
}

#[test]
fn mul_mat_gradients_as_out_prod() {
    // The shapes of grad.rs's mul_mat check: plain, batched without broadcast,
    // a weight over a batch (folded), and a weight over a permuted batch.
    let cases: [([i64; 4], [i64; 4]); 4] =
        [([7, 5, 1, 1], [7, 4, 1, 1]), ([6, 3, 2, 3], [6, 4, 2, 3]), ([9, 4, 1, 1], [9, 5, 3, 2]), ([5, 6, 1, 1], [5, 7, 4, 1])];
    for (i, (an, bn)) in cases.into_iter().enumerate() {
        let mut r = rng(3500 + i as u64);
        let a = rand_param(&mut r, &an, -1.0, 1.0);
        let b = rand_param(&mut r, &bn, -1.0, 1.0);
        grad_check_with(
            MulMatGrad::OutProd,
            &format!("mul_mat {an:?} x {bn:?} (out_prod gradients)"),
            i as u64,
            &[a, b],
            &|ctx, x| ctx.mul_mat(x[0], x[1]).unwrap(),
            &|xs| rf::mul_mat(&xs[0], u4(&an), &xs[1], u4(&bn)).0,
        );
    }
    // A weight over a permuted batch: b is a view [k, n, 3] of [k, 3, n].
    let (k, m, n) = (5i64, 4i64, 6i64);
    let mut r = rng(3510);
    let a = rand_param(&mut r, &[k, m, 1, 1], -1.0, 1.0);
    let b = rand_param(&mut r, &[k, 3, n, 1], -1.0, 1.0);
    grad_check_with(
        MulMatGrad::OutProd,
        "mul_mat [k,m] x permute([k,3,n]) (out_prod gradients)",
        3510,
        &[a, b],
        &|ctx, x| ctx.mul_mat(x[0], ctx.permute(x[1], [0, 2, 1, 3]).unwrap()).unwrap(),
        &|xs| {
            let (bp, pn) = rf::permute(&xs[1], [k as usize, 3, n as usize, 1], [0, 2, 1, 3]);
            rf::mul_mat(&xs[0], u4(&[k, m, 1, 1]), &bp, pn).0
        },
    );
}

#[test]
fn attention_gradients_as_out_prod() {
    // Batched attention scores and output: mul_mat(k, q) and mul_mat(v, p) over
    // [., T, H, B], the products whose out_prod gradients run as strided batches.
    let (dh, t, h, b) = (4i64, 5i64, 2i64, 3i64);
    let mut r = rng(3600);
    let params = [
        rand_param(&mut r, &[dh, t, h, b], -1.0, 1.0),
        rand_param(&mut r, &[dh, t, h, b], -1.0, 1.0),
        rand_param(&mut r, &[t, dh, h, b], -1.0, 1.0),
    ];
    let n = |ne: [i64; 4]| ne.map(|v| v as usize);
    grad_check_with(
        MulMatGrad::OutProd,
        "mul_mat(v, soft_max(mul_mat(k, q))) (out_prod gradients)",
        3600,
        &params,
        &|ctx, x| {
            let kq = ctx.mul_mat(x[0], x[1]).unwrap(); // [T, T, H, B]
            let p = ctx.soft_max_ext(kq, None, 0.5).unwrap();
            ctx.mul_mat(x[2], p).unwrap() // [dh, T, H, B]
        },
        &|xs| {
            let (kq, kn) = rf::mul_mat(&xs[0], n([dh, t, h, b]), &xs[1], n([dh, t, h, b]));
            let p = rf::soft_max(&kq, kn, None, 0.5);
            rf::mul_mat(&xs[2], n([t, dh, h, b]), &p, kn).0
        },
    );
}

#[test]
fn matmul_precision_switch() {
    let dev = cpu();
    // A long contraction, where TF32's 10-bit mantissa shows.
    let (k, m, nn) = (4096i64, 8i64, 8i64);
    let mut r = rng(3700);
    let a = uniform(&mut r, (k * m) as usize, -1.0, 1.0);
    let b = uniform(&mut r, (k * nn) as usize, -1.0, 1.0);
    let (want, _) = rf::mul_mat(&f64s(&a), [k as usize, m as usize, 1, 1], &f64s(&b), [k as usize, nn as usize, 1, 1]);
    let run = |p: MatmulPrecision| -> (bool, f64) {
        let has = dev.set_matmul_precision(p);
        let ctx = Context::new(16).unwrap();
        let ta = leaf(&ctx, &dev, &[k, m], &a);
        let tb = leaf(&ctx, &dev, &[k, nn], &b);
        let c = ctx.mul_mat(ta, tb).unwrap();
        let got = eval_on(&dev, &ctx, &[c]);
        (has, max_rel_err(&got[0], &want))
    };
    let (has_high, e_high) = run(MatmulPrecision::High);
    let (has_highest, e_highest) = run(MatmulPrecision::Highest);
    println!("matmul precision on {}: high {e_high:.3e}, highest {e_highest:.3e} (setting available: {has_high})", dev.name());
    assert_eq!(has_high, has_highest);
    assert!(e_highest < 1e-5, "highest precision off by {e_highest:e}");
    if dev.is_cpu() {
        assert!(!has_high, "the CPU has no precision setting");
        assert!(e_high < 1e-5);
    } else if dev.name().starts_with("CUDA") {
        assert!(has_high);
        assert!(e_high > 1e-5, "high precision should use TF32 on CUDA (error {e_high:e})");
    }
}

#[test]
fn mul_mat_plus_bias_row_at_each_precision() {
    // `W·x + b` with b broadcast over the rows: on CUDA one cuBLASLt matmul with
    // a bias epilogue (patch 0033) at High and Medium, the plain nodes at
    // Highest. The bias is large against the tolerance, so a product that
    // dropped it would fail. Shapes big enough that Medium runs in bf16.
    let dev = cpu();
    let (k, m, t, b) = (128i64, 256i64, 64i64, 4i64);
    let mut r = rng(3800);
    let w = uniform(&mut r, (k * m) as usize, -1.0, 1.0);
    let x = uniform(&mut r, (k * t * b) as usize, -1.0, 1.0);
    let bias = uniform(&mut r, m as usize, 1.0, 2.0);
    let (wn, xn) = ([k as usize, m as usize, 1, 1], [k as usize, t as usize, b as usize, 1]);
    let (prod, on) = rf::mul_mat(&f64s(&w), wn, &f64s(&x), xn);
    let want = rf::binary(&prod, on, &f64s(&bias), [m as usize, 1, 1, 1], |p, q| p + q);
    let wa: Vec<f64> = w.iter().map(|v| v.abs() as f64).collect();
    let xa: Vec<f64> = x.iter().map(|v| v.abs() as f64).collect();
    let scale = rf::binary(&rf::mul_mat(&wa, wn, &xa, xn).0, on, &f64s(&bias), [m as usize, 1, 1, 1], |p, q| p + q.abs());
    for (p, tol) in [(MatmulPrecision::Highest, 1e-6), (MatmulPrecision::High, 2e-3), (MatmulPrecision::Medium, 1e-2)] {
        dev.set_matmul_precision(p);
        let ctx = Context::new(16).unwrap();
        let tw = leaf(&ctx, &dev, &[k, m], &w);
        let tx = leaf(&ctx, &dev, &[k, t, b], &x);
        let tb = leaf(&ctx, &dev, &[m], &bias);
        let y = ctx.add(ctx.mul_mat(tw, tx).unwrap(), tb).unwrap();
        let got = eval_on(&dev, &ctx, &[y]);
        check_sums(&format!("mul_mat + bias row at {p:?} on {}", dev.name()), &got[0], &want, &scale, tol);
    }
    dev.set_matmul_precision(MatmulPrecision::High);
}

#[test]
fn products_scaled_or_summed_at_each_precision() {
    // A product whose one use is a SCALE or an ADD of a tensor of its shape,
    // maybe through a RESHAPE: on CUDA one GEMM with alpha = the scale or beta
    // = 1 over the addend (patch 0037) at High and Medium, the plain nodes at
    // Highest. mul_mat (forward residual sums, LoRA's scale) and out_prod (the
    // backward's gradient sums), with the addend a leaf (a copy first) and a
    // node (summed in place), on either side of the ADD.
    let dev = cpu();
    let (k, m, n) = (96i64, 160i64, 192i64);
    let mut r = rng(3900);
    let w = uniform(&mut r, (k * m) as usize, -1.0, 1.0);
    let x = uniform(&mut r, (k * n) as usize, -1.0, 1.0);
    let a = uniform(&mut r, (m * k) as usize, -1.0, 1.0); // out_prod's [m, k]
    let b = uniform(&mut r, (n * k) as usize, -1.0, 1.0); // out_prod's [n, k]
    let c = uniform(&mut r, (m * n) as usize, 1.0, 2.0);
    let (wn, xn) = ([k as usize, m as usize, 1, 1], [k as usize, n as usize, 1, 1]);
    let (mm, _) = rf::mul_mat(&f64s(&w), wn, &f64s(&x), xn);
    let abs = |v: &[f32]| -> Vec<f64> { v.iter().map(|x| x.abs() as f64).collect() };
    let (mm_abs, _) = rf::mul_mat(&abs(&w), wn, &abs(&x), xn);
    // out_prod(a, b) [m, n]: Σ_k a[i, k]·b[j, k].
    let outer = |a: &[f64], b: &[f64]| -> Vec<f64> {
        let (m, n, k) = (m as usize, n as usize, k as usize);
        (0..m * n).map(|e| (0..k).map(|q| a[q * m + e % m] * b[q * n + e / m]).sum()).collect()
    };
    let (op, op_abs) = (outer(&f64s(&a), &f64s(&b)), outer(&abs(&a), &abs(&b)));
    let plus_c = |v: &[f64]| -> Vec<f64> { v.iter().zip(&c).map(|(p, q)| p + *q as f64).collect() };
    let times = |v: &[f64], s: f64| -> Vec<f64> { v.iter().map(|p| p * s).collect() };
    let wants = [plus_c(&mm), plus_c(&mm), times(&mm, 0.37), plus_c(&op), plus_c(&op), times(&op, -1.5)];
    let scales = [plus_c(&mm_abs), plus_c(&mm_abs), mm_abs.clone(), plus_c(&op_abs), plus_c(&op_abs), times(&op_abs, 1.5)];
    for (p, tol) in [(MatmulPrecision::Highest, 1e-6), (MatmulPrecision::High, 2e-3), (MatmulPrecision::Medium, 1e-2)] {
        dev.set_matmul_precision(p);
        let ctx = Context::new(64).unwrap();
        let (tw, tx) = (leaf(&ctx, &dev, &[k, m], &w), leaf(&ctx, &dev, &[k, n], &x));
        let (ta, tb) = (leaf(&ctx, &dev, &[m, k], &a), leaf(&ctx, &dev, &[n, k], &b));
        let tc = leaf(&ctx, &dev, &[m, n], &c);
        let node_c = || ctx.scale(tc, 1.0).unwrap(); // a node the sum may overwrite
        let op_2d = || ctx.out_prod(ta, tb).unwrap();
        let op_3d = || ctx.reshape(ctx.out_prod(ta, tb).unwrap(), &[m, n / 2, 2]).unwrap();
        let outs = [
            ctx.add(node_c(), ctx.mul_mat(tw, tx).unwrap()).unwrap(),
            ctx.add(ctx.mul_mat(tw, tx).unwrap(), tc).unwrap(),
            ctx.scale(ctx.mul_mat(tw, tx).unwrap(), 0.37).unwrap(),
            ctx.add(tc, op_2d()).unwrap(),
            ctx.add(ctx.reshape(node_c(), &[m, n / 2, 2]).unwrap(), op_3d()).unwrap(),
            ctx.scale(op_3d(), -1.5).unwrap(),
        ];
        let got = eval_on(&dev, &ctx, &outs);
        for (i, g) in got.iter().enumerate() {
            check_sums(&format!("product {i} scaled or summed at {p:?} on {}", dev.name()), g, &wants[i], &scales[i], tol);
        }
    }
    dev.set_matmul_precision(MatmulPrecision::High);
}

#[test]
fn rms_norm_rows_and_swiglu_against_f64() {
    // Rows of 64-1024 values whose width is a multiple of 4 take patch 0038's
    // warp-per-row kernel on CUDA (with and without a gain, rows read through a
    // stride wider than the row); 6 and 1028 take ggml's. SWIGLU of two whole
    // tensors takes its float4 kernel, of views with gaps ggml's.
    let dev = cpu();
    let eps = 1e-5f32;
    for (n0, rows) in [(64i64, 37i64), (576, 33), (1024, 9), (1028, 5), (6, 11)] {
        let mut r = rng(4000 + n0 as u64);
        let wide = n0 + 4; // rows of x inside a wider tensor
        let xs = uniform(&mut r, (wide * rows) as usize, -2.0, 2.0);
        let g = uniform(&mut r, n0 as usize, 0.5, 1.5);
        let x: Vec<f64> = (0..rows as usize).flat_map(|i| f64s(&xs[i * wide as usize..i * wide as usize + n0 as usize])).collect();
        let normed = rf::rows(&x, n0 as usize, |row| rf::rms_norm_row(row, eps as f64));
        let gained: Vec<f64> = normed.iter().enumerate().map(|(i, v)| v * g[i % n0 as usize] as f64).collect();
        let ctx = Context::new(32).unwrap();
        let tw = leaf(&ctx, &dev, &[wide, rows], &xs);
        let tg = leaf(&ctx, &dev, &[n0], &g);
        let tx = ctx.view(tw, &[n0, rows], &[4 * wide as usize], 0).unwrap();
        let tc = ctx.cont(tx).unwrap();
        // A factor of the norm's own shape (the backward's norm times the gradient).
        let m = uniform(&mut r, (n0 * rows) as usize, -1.0, 1.0);
        let times_m: Vec<f64> = normed.iter().zip(&m).map(|(v, &f)| v * f as f64).collect();
        let tm = leaf(&ctx, &dev, &[n0, rows], &m);
        let outs = [
            ctx.rms_norm(tx, eps).unwrap(),
            ctx.rms_norm(tc, eps).unwrap(),
            ctx.rms_norm_gain(tc, tg, eps).unwrap(),
            ctx.mul(ctx.rms_norm(tx, eps).unwrap(), tm).unwrap(),
        ];
        let got = eval_on(&dev, &ctx, &outs);
        for (k, want) in [&normed, &normed, &gained, &times_m].into_iter().enumerate() {
            check(&format!("rms_norm {k} of rows of {n0} on {}", dev.name()), &got[k], want, 1e-5);
        }
    }
    for ne in [[64i64, 37], [6, 5]] {
        let mut r = rng(4100 + ne[0] as u64);
        let n = (ne[0] * ne[1]) as usize;
        let (a, b) = (uniform(&mut r, n, -4.0, 4.0), uniform(&mut r, n, -1.0, 1.0));
        let want: Vec<f64> = a.iter().zip(&b).map(|(&x, &y)| (x as f64 / (1.0 + (-(x as f64)).exp())) * y as f64).collect();
        let ctx = Context::new(16).unwrap();
        let (ta, tb) = (leaf(&ctx, &dev, &ne, &a), leaf(&ctx, &dev, &ne, &b));
        let got = eval_on(&dev, &ctx, &[ctx.swiglu_split(ta, tb).unwrap()]);
        check(&format!("swiglu_split {ne:?} on {}", dev.name()), &got[0], &want, 1e-5);
    }
}

#[test]
fn weight_gradient_larger_than_a_chunk() {
    // A weight over a folded batch whose output gradient [m, p] is over 32 MiB:
    // with the mul_mat formulation its transposed copy is taken in row chunks
    // (patch 0035: five of 840 rows) and the chunks' products are
    // concatenated. Both gradients against the OUT_PROD formulation's (no
    // copies, no chunks), and spot values against f64 sums.
    let (n, m, t, b) = (4i64, 4200i64, 1024i64, 2i64);
    let mut r = rng(3900);
    let w = uniform(&mut r, (n * m) as usize, -1.0, 1.0);
    let x = uniform(&mut r, (n * t * b) as usize, -1.0, 1.0);
    let rv = uniform(&mut r, (m * t * b) as usize, -1.0, 1.0);
    let dev = cpu();
    let grads = |mode: MulMatGrad| -> Vec<Vec<f32>> {
        let ctx = Context::new(4096).unwrap();
        let tw = leaf(&ctx, &dev, &[n, m], &w);
        let tx = leaf(&ctx, &dev, &[n, t, b], &x);
        let tr = leaf(&ctx, &dev, &[m, t, b], &rv);
        ctx.set_param(tw).unwrap();
        ctx.set_param(tx).unwrap();
        let loss = ctx.sum(ctx.mul(ctx.mul_mat(tw, tx).unwrap(), tr).unwrap()).unwrap().set_output();
        let mut g = Graph::with_grads(&ctx, 4096).unwrap();
        g.set_mul_mat_grad(mode);
        g.expand(loss).unwrap();
        g.build_backward(loss).unwrap();
        let gs: Vec<_> = [tw, tx].iter().map(|&p| g.grad(p).unwrap().set_output()).collect();
        g.allocate(&backends(&dev)).unwrap();
        g.compute().unwrap();
        gs.iter().map(|t| t.read::<f32>().unwrap()).collect()
    };
    let (chunked, plain) = (grads(MulMatGrad::MulMat), grads(MulMatGrad::OutProd));
    for (k, (a, b)) in chunked.iter().zip(&plain).enumerate() {
        let e = a.iter().zip(b).fold(0f32, |e, (p, q)| e.max((p - q).abs() / (q.abs() + 1.0)));
        // f32 sums of 2048 (dW) or 4200 (dx) products, added in different orders.
        assert!(e < 2e-4, "gradient {k}: chunked and out_prod differ by {e:e}");
    }
    // dW[i, j] = sum over the 2048 tokens of x[i, tok] r[j, tok], at a row of each chunk.
    for (i, j) in [(0usize, 0usize), (3, 839), (2, 840), (1, 4199)] {
        let want: f64 = (0..(t * b) as usize).map(|c| x[c * n as usize + i] as f64 * rv[c * m as usize + j] as f64).sum();
        let got = chunked[0][j * n as usize + i] as f64;
        assert!((got - want).abs() < 1e-4 * (want.abs() + 1.0), "dW[{i}, {j}] = {got}, f64 {want}");
    }
}

#[test]
fn norms_with_gain_are_the_nodes_they_replace() {
    // Patch 0036's nodes against the nodes they replace (rms_norm then mul;
    // norm then mul then add), forward and every gradient, on the test device:
    // the same arithmetic, so equal to rounding (bit for bit on the CPU). Rows
    // of 256, 576 (SmolLM2), 768 (GPT-2) and 4099.
    let dev = cpu();
    for (seed, (d, rows)) in [(256i64, 9i64), (576, 33), (768, 17), (4099, 3)].into_iter().enumerate() {
        let mut r = rng(4000 + seed as u64);
        let x = uniform(&mut r, (d * rows) as usize, -2.0, 2.0);
        let (g, b) = (uniform(&mut r, d as usize, -1.5, 1.5), uniform(&mut r, d as usize, -1.0, 1.0));
        let up = uniform(&mut r, (d * rows) as usize, -1.0, 1.0);
        for layer_norm in [false, true] {
            let run = |fused: bool| -> Vec<Vec<f32>> {
                let ctx = Context::new(256).unwrap();
                let (tx, tg, tb) = (leaf(&ctx, &dev, &[d, rows], &x), leaf(&ctx, &dev, &[d], &g), leaf(&ctx, &dev, &[d], &b));
                let tu = leaf(&ctx, &dev, &[d, rows], &up);
                for p in [tx, tg, tb] {
                    ctx.set_param(p).unwrap();
                }
                let y = match (layer_norm, fused) {
                    (false, true) => ctx.rms_norm_gain(tx, tg, 1e-5).unwrap(),
                    (false, false) => ctx.mul(ctx.rms_norm(tx, 1e-5).unwrap(), tg).unwrap(),
                    (true, true) => ctx.norm_gain_bias(tx, tg, tb, 1e-5).unwrap(),
                    (true, false) => ctx.add(ctx.mul(ctx.norm(tx, 1e-5).unwrap(), tg).unwrap(), tb).unwrap(),
                };
                let y = y.set_output();
                // b takes part in the RMSNorm case too, so that every parameter has a gradient.
                let loss = ctx.add(ctx.sum(ctx.mul(y, tu).unwrap()).unwrap(), ctx.sum(tb).unwrap()).unwrap().set_output();
                let mut gr = Graph::with_grads(&ctx, 256).unwrap();
                gr.expand(loss).unwrap();
                gr.build_backward(loss).unwrap();
                let gs: Vec<_> = [tx, tg, tb].iter().map(|&p| gr.grad(p).unwrap().set_output()).collect();
                gr.allocate(&backends(&dev)).unwrap();
                gr.compute().unwrap();
                std::iter::once(y).chain(gs).map(|t| t.read::<f32>().unwrap()).collect()
            };
            let (a, want) = (run(true), run(false));
            for (k, what) in ["y", "dx", "dg", "db"].iter().enumerate() {
                let e = a[k].iter().zip(&want[k]).fold(0f32, |e, (p, q)| e.max((p - q).abs() / (q.abs() + 1.0)));
                assert!(e <= 1e-6, "layer_norm {layer_norm} [{d}, {rows}] {what}: {e:e} from the separate nodes");
            }
        }
    }
}

#[test]
fn norms_and_ropes_cast_to_bf16_against_f64() {
    // An RMSNorm with gain and a rope whose one use is a cast to bf16 (autocast's
    // product inputs and the fused attention's q and k): CUDA writes the bf16
    // values from the norm's and the rope's own kernels (patch 0053; the f32
    // results are never written). Each against the f64 reference: within one
    // bf16 step (2^-7 of the value's power of two; rounding alone is half of it).
    // Rows of 576 and 64 values take the fused kernels; rows of 6 fall back to
    // the norm, then the cast. A rope reshaped before its cast is fused as well;
    // so is a LayerNorm with gain and bias (patch 0090).
    let dev = cpu();
    let eps = 1e-5f32;
    let bf16_tol = 1.0 / 128.0;
    for (n0, rows) in [(576i64, 33i64), (64, 7), (6, 5)] {
        let mut r = rng(4200 + n0 as u64);
        let x = uniform(&mut r, (n0 * rows) as usize, -2.0, 2.0);
        let g = uniform(&mut r, n0 as usize, 0.5, 1.5);
        let normed = rf::rows(&f64s(&x), n0 as usize, |row| rf::rms_norm_row(row, eps as f64));
        let want: Vec<f64> = normed.iter().enumerate().map(|(i, v)| v * g[i % n0 as usize] as f64).collect();
        let ctx = Context::new(16).unwrap();
        let (tx, tg) = (leaf(&ctx, &dev, &[n0, rows], &x), leaf(&ctx, &dev, &[n0], &g));
        let y = ctx.cast(ctx.rms_norm_gain(tx, tg, eps).unwrap(), DType::BF16).unwrap();
        let got = eval_on(&dev, &ctx, &[y]);
        check(&format!("rms_norm_gain of rows of {n0} cast to bf16 on {}", dev.name()), &got[0], &want, bf16_tol);
        // GPT-2's LayerNorm with gain and bias, cast the same way (patch 0090).
        let b = uniform(&mut r, n0 as usize, -0.5, 0.5);
        let normed = rf::rows(&f64s(&x), n0 as usize, |row| rf::norm_row(row, eps as f64));
        let n = n0 as usize;
        let want: Vec<f64> = normed.iter().enumerate().map(|(i, v)| v * g[i % n] as f64 + b[i % n] as f64).collect();
        let ctx = Context::new(16).unwrap();
        let (tx, tg, tb) = (leaf(&ctx, &dev, &[n0, rows], &x), leaf(&ctx, &dev, &[n0], &g), leaf(&ctx, &dev, &[n0], &b));
        let y = ctx.cast(ctx.norm_gain_bias(tx, tg, tb, eps).unwrap(), DType::BF16).unwrap();
        let got = eval_on(&dev, &ctx, &[y]);
        check(&format!("norm_gain_bias of rows of {n0} cast to bf16 on {}", dev.name()), &got[0], &want, bf16_tol);
    }
    let pos = [0i32, 1, 2, 7, 100, 511];
    let ne = [64usize, 3, pos.len(), 2];
    let mut r = rng(4300);
    let x = uniform(&mut r, ne.iter().product(), -1.0, 1.0);
    let ctx = Context::new(16).unwrap();
    let t = leaf(&ctx, &dev, &ne.map(|n| n as i64), &x);
    let p = leaf_i32(&ctx, &dev, &[pos.len() as i64], &pos);
    let mut ys: Vec<_> = [ggml_rs::RopeMode::Normal, ggml_rs::RopeMode::Neox]
        .iter()
        .map(|&mode| ctx.cast(ctx.rope_ext(t, p, 64, mode, 10000.0).unwrap(), DType::BF16).unwrap())
        .collect();
    // As the models do: the rope's result reshaped ([dh, H, T·B] to [dh, H, T, B])
    // before its cast, which CUDA fuses too.
    let roped = ctx.rope_ext(t, p, 64, ggml_rs::RopeMode::Normal, 10000.0).unwrap();
    ys.push(ctx.cast(ctx.reshape(roped, &[64, 3, 3, 4]).unwrap(), DType::BF16).unwrap());
    let got = eval_on(&dev, &ctx, &ys);
    for (k, neox) in [false, true, false].into_iter().enumerate() {
        let want = rf::rope(&f64s(&x), ne, &pos, 64, neox, 10000.0);
        let how = if k == 2 { "reshaped, then cast" } else { "cast" };
        check(&format!("rope (NeoX {neox}) {how} to bf16 on {}", dev.name()), &got[k], &want, bf16_tol);
    }
}
