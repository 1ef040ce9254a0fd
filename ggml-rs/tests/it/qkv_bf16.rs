//! The attention's q, k and v as bf16 products (patch 0076): a block's
//! `attn_causal(rope(W_q·x), rope(W_k·x), W_v·x)` with the three products
//! written in bf16 (`mul_mat_bf16`) and the ropes reading and writing bf16,
//! against the same chain in f32 on the CPU (f32 products, ropes and
//! attention): the ropes' backward gives the products bf16 gradients, and the
//! parameters' gradients agree to bf16's precision. CUDA only: the CPU
//! refuses the bf16 graph.

use crate::common::{backends, cpu, f64s, leaf, leaf_i32, rng, uniform};
use ggml_rs::{sys, Context, DType, Graph, RopeMode};

/// Heads of `dh`, `h` query and `hkv` key/value heads, `t` positions, `b`
/// sequences, model width `d`.
#[derive(Clone, Copy)]
struct Dims {
    dh: usize,
    h: usize,
    hkv: usize,
    t: usize,
    b: usize,
    d: usize,
}

/// The dtypes of a graph's ROPE and ROPE_BACK results, in graph order.
type Ropes = Vec<DType>;

/// `sum(attn_causal(q, k, v) ⊙ r)`'s gradients of `x`, `W_q`, `W_k`, `W_v`
/// (and with `adapter`, of `A` and `B` of a LoRA-like term `B·(A·x)` added to
/// q and to v), and the dtypes of the graph's ROPE and ROPE_BACK results;
/// `bf16`: on the test device, x cast to bf16 and the products in bf16 (patch
/// 0076; the term's too, added in bf16 as patch 0055 adds it); else all in f32
/// on the CPU (the reference). The inner `Err`: the device refused the graph
/// at allocation (the ropes' dtypes known by then).
fn grads(s: Dims, seed: u64, bf16: bool, adapter: bool) -> ggml_rs::Result<(ggml_rs::Result<Vec<Vec<f32>>>, Ropes)> {
    let Dims { dh, h, hkv, t, b, d } = s;
    let n = t * b;
    let mut r = rng(seed);
    let dev = if bf16 { cpu() } else { ggml_rs::Backend::cpu()? };
    dev.set_matmul_precision(ggml_rs::MatmulPrecision::Medium);
    let ctx = Context::new(512)?;
    let param = |ne: &[usize], lo: f32, hi: f32, r: &mut _| {
        let ne: Vec<i64> = ne.iter().map(|&x| x as i64).collect();
        let x = leaf(&ctx, &dev, &ne, &uniform(r, ne.iter().product::<i64>() as usize, lo, hi));
        ctx.set_param(x).unwrap();
        x
    };
    let x = param(&[d, n], -1.0, 1.0, &mut r);
    let (wq, wk, wv) =
        (param(&[d, dh * h], -0.3, 0.3, &mut r), param(&[d, dh * hkv], -0.3, 0.3, &mut r), param(&[d, dh * hkv], -0.3, 0.3, &mut r));
    let rt = leaf(&ctx, &dev, &[(dh * h) as i64, t as i64, b as i64], &uniform(&mut r, dh * h * n, -1.0, 1.0));
    let pos = leaf_i32(&ctx, &dev, &[n as i64], &(0..n).map(|i| (i % t) as i32).collect::<Vec<_>>());
    let (a, bq, bv) = (param(&[d, 4], -0.3, 0.3, &mut r), param(&[4, dh * h], -0.3, 0.3, &mut r), param(&[4, dh * hkv], -0.3, 0.3, &mut r));
    let xb = if bf16 { ctx.cast(x, DType::BF16)? } else { x };
    let mm = |w, y| if bf16 { ctx.mul_mat_bf16(w, y) } else { ctx.mul_mat(w, y) };
    let ax = mm(a, xb)?;
    let product = |w, b: Option<_>| -> ggml_rs::Result<_> {
        let y = mm(w, xb)?;
        match b.filter(|_| adapter) {
            Some(b) => ctx.add(mm(b, ax)?, y), // the term first, as toy adds it
            None => Ok(y),
        }
    };
    let rope = |y, heads: usize| -> ggml_rs::Result<_> {
        let y = ctx.rope_ext(ctx.reshape(y, &[dh as i64, heads as i64, n as i64])?, pos, dh, RopeMode::Normal, 10000.0)?;
        ctx.reshape(y, &[dh as i64, heads as i64, t as i64, b as i64])
    };
    let (q, k) = (rope(product(wq, Some(bq))?, h)?, rope(product(wk, None)?, hkv)?);
    let v = ctx.reshape(product(wv, Some(bv))?, &[dh as i64, hkv as i64, t as i64, b as i64])?;
    let o = ctx.attn_causal(q, k, v, 1.0 / (dh as f32).sqrt())?;
    let o = if o.dtype() == DType::BF16 { ctx.cast(o, DType::F32)? } else { o };
    let loss = ctx.sum(ctx.mul(ctx.reshape(o, &rt.ne())?, rt)?)?.set_output();
    let mut g = Graph::with_grads(&ctx, 2048)?;
    g.set_mul_mat_grad(ggml_rs::MulMatGrad::OutProd);
    g.expand(loss)?;
    g.build_backward(loss)?;
    let ropes = g.nodes().into_iter().filter(|n| matches!(n.op(), sys::GGML_OP_ROPE | sys::GGML_OP_ROPE_BACK)).map(|n| n.dtype()).collect();
    let params = if adapter { vec![x, wq, wk, wv, a, bq, bv] } else { vec![x, wq, wk, wv] };
    let outs: Vec<_> = params.iter().map(|&p| g.grad(p).unwrap().set_output()).collect();
    if let Err(e) = g.allocate(&backends(&dev)) {
        return Ok((Err(e), ropes));
    }
    g.compute()?;
    assert!(g.cpu_fallbacks().is_empty(), "{:?}", g.cpu_fallbacks());
    Ok((Ok(outs.iter().map(|t| t.read_f32().unwrap()).collect()), ropes))
}

/// SmolLM2's heads (64, 9/3) over 130 positions (two full 64-row blocks and a
/// partial one), and heads of 128: the gradients of `x`, `W_q`, `W_k` and `W_v`
/// within 2e-2 of each tensor's largest value of the CPU's f32 chain's (the bf16
/// chain rounds x, the products, q, k, v and the ropes' gradients); every ROPE and
/// ROPE_BACK of the bf16 chain is bf16. Also with a LoRA-like term on q and v,
/// and its factors' gradients. The CPU refuses the bf16 graph.
#[test]
fn bf16_ropes_of_bf16_products_against_the_f32_chain() {
    let smol = Dims { dh: 64, h: 9, hkv: 3, t: 130, b: 2, d: 96 };
    for (s, seed, adapter) in [(smol, 7601, false), (Dims { dh: 128, h: 2, hkv: 1, t: 70, b: 1, d: 64 }, 7602, false), (smol, 7603, true)] {
        let (got, ropes) = grads(s, seed, true, adapter).unwrap();
        assert_eq!(ropes, vec![DType::BF16; 4], "dh {}: two ropes and their backward in bf16", s.dh);
        if cpu().is_cpu() {
            let e = got.expect_err("the CPU refuses bf16 products and ropes").to_string();
            assert!(e.contains("runs on none of") || e.contains("cannot run"), "{e}");
            continue;
        }
        let (got, want) = (got.unwrap(), grads(s, seed, false, adapter).unwrap().0.unwrap());
        let mut worst = 0.0f64;
        for (name, (a, w)) in ["x", "W_q", "W_k", "W_v", "A", "B_q", "B_v"].iter().zip(got.iter().zip(&want)) {
            let w = f64s(w);
            let scale = w.iter().fold(1e-30f64, |m, v| m.max(v.abs()));
            let err = a.iter().zip(&w).fold(0.0f64, |m, (&g, v)| m.max((g as f64 - v).abs())) / scale;
            println!("dh {}, adapter {adapter}: d{name}: max err / scale {err:.3e}", s.dh);
            worst = worst.max(err);
        }
        assert!(worst <= 2e-2, "dh {}, adapter {adapter}: a gradient off by {worst:e} of the scale", s.dh);
    }
}
