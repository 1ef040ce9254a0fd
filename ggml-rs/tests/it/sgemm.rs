//! f32 `mul_mat` and `out_prod` on the CPU through toy-rs patch 0059's packed
//! GEMM: tile edges, depths past one block, strided rows, broadcast batches,
//! transposed operands and the thread splits, against f64 sums. On an
//! AVX-512 machine the 32 x 12 tile runs; `packed_f32_products_with_the_avx2_tile`
//! runs the same test again in a child process with `TOY_CPU_0059_AVX2` set
//! (the choice is made once a process).

use crate::common::*;
use ggml_rs::{Backend, Context, DType};

#[derive(Clone, Copy, Debug)]
enum Op {
    /// `mul_mat(a [k, m], b [k, n])`: both operands by rows.
    MulMat,
    /// `out_prod(a [m, k], b [n, k])`: both by columns.
    OutProd,
    /// `out_prod(a [m, k], transpose(b [k, n]))`: b by rows (the gradient of a
    /// product's input).
    OutProdT,
}

/// One product: C `[m, n, b2]` over depth `k`; `a`'s rows (mul_mat) or
/// columns (out_prod) `lda ≥` their length apart, `a2` matrices of `a`
/// broadcast over `b2` of `b`; `threads` CPU threads.
#[derive(Clone, Copy, Debug)]
struct Case {
    op: Op,
    m: i64,
    n: i64,
    k: i64,
    lda: i64,
    a2: i64,
    b2: i64,
    threads: usize,
}

/// The largest error of any value of `c`'s product relative to `Σ_l |a·b|`,
/// the scale of an f32 sum's error bound (Higham, "Accuracy and Stability of
/// Numerical Algorithms", §3.1).
fn worst_error(c: Case, seed: u64) -> f64 {
    let mut g = rng(seed);
    let (mu, nu, ku, ldu) = (c.m as usize, c.n as usize, c.k as usize, c.lda as usize);
    let inner = if matches!(c.op, Op::MulMat) { mu } else { ku }; // a's lines of lda
    let a = uniform(&mut g, ldu * inner * c.a2 as usize, -1.0, 1.0);
    let b = uniform(&mut g, ku * nu * c.b2 as usize, -1.0, 1.0);
    let dev = Backend::cpu().unwrap();
    dev.set_n_threads(c.threads);
    let ctx = Context::new(16).unwrap();
    let wide = ctx.new_tensor(DType::F32, &[c.lda, inner as i64, c.a2]).unwrap();
    let b_ne = if matches!(c.op, Op::OutProd) { [c.n, c.k, c.b2] } else { [c.k, c.n, c.b2] };
    let bt = ctx.new_tensor(DType::F32, &b_ne).unwrap();
    ctx.allocate(&dev).unwrap();
    wide.write(&a).unwrap();
    bt.write(&b).unwrap();
    let a_ne = if matches!(c.op, Op::MulMat) { [c.k, c.m, c.a2] } else { [c.m, c.k, c.a2] };
    let at = ctx.view(wide, &a_ne, &[4 * ldu, 4 * ldu * inner], 0).unwrap();
    let out = match c.op {
        Op::MulMat => ctx.mul_mat(at, bt),
        Op::OutProd => ctx.out_prod(at, bt),
        Op::OutProdT => ctx.out_prod(at, ctx.transpose(bt).unwrap()),
    }
    .unwrap();
    let got = &eval_on(&dev, &ctx, &[out])[0];
    let a_at = |p: usize, i: usize, l: usize| match c.op {
        Op::MulMat => a[(p * mu + i) * ldu + l],
        _ => a[(p * ku + l) * ldu + i],
    };
    let b_at = |p: usize, j: usize, l: usize| match c.op {
        Op::OutProd => b[(p * ku + l) * nu + j],
        _ => b[(p * nu + j) * ku + l],
    };
    let mut worst = 0f64;
    for p in 0..c.b2 as usize {
        let pa = p / (c.b2 / c.a2) as usize;
        for j in 0..nu {
            for i in 0..mu {
                let (mut s, mut scale) = (0f64, 0f64);
                for l in 0..ku {
                    let v = a_at(pa, i, l) as f64 * b_at(p, j, l) as f64;
                    s += v;
                    scale += v.abs();
                }
                let v = got[(p * nu + j) * mu + i] as f64;
                worst = worst.max(if v.is_finite() { (v - s).abs() / scale } else { f64::INFINITY });
            }
        }
    }
    worst
}

/// The tile the CPU registry reports (`TOY_PACKED_SGEMM`), if any.
fn reported_tile() -> Option<String> {
    let dev = Backend::cpu().unwrap().device();
    dev.features().into_iter().find(|(k, _)| k == "TOY_PACKED_SGEMM").map(|(_, v)| v)
}

#[test]
fn packed_f32_products_against_f64() {
    // The products below go through the packed GEMM wherever the build has it.
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        let want = if is_x86_feature_detected!("avx512f") && std::env::var_os("TOY_CPU_0059_AVX2").is_none() {
            "AVX-512F 32x12"
        } else {
            "AVX2 16x6"
        };
        assert_eq!(reported_tile().as_deref(), Some(want));
    }
    // Whole tiles; edges of both tiles (m and n not multiples of 32/16 and
    // 12/6, k not of 8); one depth block (576, 640) and several uneven ones
    // (641, 1300); few rows of C, so the threads split its columns; lines of
    // a further apart than their length; a broadcast batch; one, two and
    // three threads; out_prod's few columns (8, 16: its own lower bound).
    let case = |op, m, n, k, lda, a2, b2, threads| Case { op, m, n, k, lda, a2, b2, threads };
    let cases = [
        case(Op::MulMat, 576, 512, 576, 576, 1, 1, 2),
        case(Op::MulMat, 192, 96, 640, 640, 1, 1, 3),
        case(Op::MulMat, 77, 131, 33, 33, 1, 1, 2),
        case(Op::MulMat, 100, 70, 641, 641, 1, 1, 1),
        case(Op::MulMat, 16, 300, 1300, 1300, 1, 1, 2),
        case(Op::MulMat, 290, 64, 40, 57, 1, 1, 3),
        case(Op::MulMat, 48, 65, 16, 16, 2, 6, 2),
        case(Op::MulMat, 1030, 600, 20, 24, 1, 1, 2),
        case(Op::MulMat, 40, 100, 1024, 1024, 1, 1, 2), // B's rows 4 KiB apart: copied
        case(Op::OutProd, 576, 16, 512, 576, 1, 1, 2),
        case(Op::OutProd, 77, 131, 640, 80, 1, 1, 3),
        case(Op::OutProd, 33, 8, 700, 33, 1, 1, 2),
        case(Op::OutProd, 48, 70, 20, 48, 2, 4, 2),
        case(Op::OutProdT, 576, 512, 16, 576, 1, 1, 2),
        case(Op::OutProdT, 150, 100, 1300, 150, 1, 1, 3),
        case(Op::OutProdT, 64, 75, 1024, 64, 1, 1, 2),
    ];
    for (i, &c) in cases.iter().enumerate() {
        let e = worst_error(c, 9100 + i as u64);
        println!("{c:?}: {e:.2e} of Σ|a·b|");
        // One f32 rounding a product and a few a sum: blocked sums of ≤ 1300
        // terms stay far below the k·ε bound (7.7e-5 at k = 1300).
        assert!(e < 2e-6, "{c:?}: {e:e}");
    }
}

#[test]
fn packed_f32_products_with_the_avx2_tile() {
    if std::env::var_os("TOY_CPU_0059_AVX2").is_some() {
        return; // this is the child
    }
    let exe = std::env::current_exe().unwrap();
    let out = std::process::Command::new(exe)
        .args(["sgemm::packed_f32_products_against_f64", "--exact", "--nocapture", "--test-threads", "1"])
        .env("TOY_CPU_0059_AVX2", "1")
        .output()
        .unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    println!("{text}");
    assert!(out.status.success() && text.contains("1 passed"), "the child failed:\n{text}");
}
