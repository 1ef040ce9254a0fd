//! The attention's q, k and v as bf16 products (patch 0076): a block's
//! `W_o·attn_causal(rope(W_q·x), rope(W_k·x), W_v·x)` with the three products
//! written in bf16 (`mul_mat_bf16`) and the ropes reading and writing bf16,
//! against the same chain in f32 on the CPU (f32 products, ropes and
//! attention): the ropes' backward gives the products bf16 gradients, and the
//! parameters' gradients agree to bf16's precision. And with the products
//! reading the bf16 cast of a norm (patch 0078): their input gradients bf16,
//! summed in bf16, read so by the norm's backward; and the output
//! projection's input gradient, the attention's dO, bf16 (patch 0079). CUDA
//! only: the CPU refuses the bf16 graph.

use crate::common::{assert_within, backends, cpu, f64s, leaf, leaf_i32, param_leaf, rng, uniform};
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

/// Dtypes in a graph's backward.
struct Facts {
    /// Of its ROPE and ROPE_BACK results, in graph order.
    ropes: Vec<DType>,
    /// Of its NORM_GAIN_BACK's gradient input (patch 0078), where it has one.
    norm_grad: Option<DType>,
    /// Of its ATTN_CAUSAL_BACK's output gradient (patch 0079).
    dout: Option<DType>,
}

/// `sum((W_o·attn_causal(q, k, v)) ⊙ r)`'s gradients of `x`, `W_q`, `W_k`,
/// `W_v`, `W_o` (and with `adapter`, of `A` and `B` of a LoRA-like term
/// `B·(A·x)` added to q and to v, and of `A_o` and `B_o` of one added to the
/// output projection; with `norm`, of the gain `g` of `rms_norm_gain(x, g)`,
/// which the products then read instead of `x`, as a llama block's attention
/// reads its norm), and the graph's [`Facts`]; `bf16`: on the test device, the products'
/// input cast to bf16 and the products in bf16 (patch 0076; the term's too,
/// added in bf16 as patch 0055 adds it); else all in f32 on the CPU (the
/// reference). The inner `Err`: the device refused the graph at allocation
/// (the facts known by then).
fn grads(s: Dims, seed: u64, bf16: bool, adapter: bool, norm: bool) -> ggml_rs::Result<(ggml_rs::Result<Vec<Vec<f32>>>, Facts)> {
    let Dims { dh, h, hkv, t, b, d } = s;
    let n = t * b;
    let mut r = rng(seed);
    let dev = if bf16 { cpu() } else { ggml_rs::Backend::cpu()? };
    dev.set_matmul_precision(ggml_rs::MatmulPrecision::Medium);
    let ctx = Context::new(512)?;
    let param = |ne: &[usize], lo: f32, hi: f32, r: &mut _| {
        let ne: Vec<i64> = ne.iter().map(|&x| x as i64).collect();
        param_leaf(&ctx, &dev, &ne, &uniform(r, ne.iter().product::<i64>() as usize, lo, hi))
    };
    let x = param(&[d, n], -1.0, 1.0, &mut r);
    // the products' bound: 0.3 up to a width of 96, then 0.3·√(96/d), so that q·k keeps its
    // size at SmolLM2's 576 (a wider sum of ±0.3 weights saturates the softmax, where bf16's
    // rounding of q and k moves the probabilities by tens of percent); the adapter's A reads x
    // too, and takes the same bound
    let wb = 0.3 * (96.0 / d as f32).sqrt().min(1.0);
    let (wq, wk, wv) =
        (param(&[d, dh * h], -wb, wb, &mut r), param(&[d, dh * hkv], -wb, wb, &mut r), param(&[d, dh * hkv], -wb, wb, &mut r));
    let rt = leaf(&ctx, &dev, &[d as i64, n as i64], &uniform(&mut r, d * n, -1.0, 1.0));
    let pos = leaf_i32(&ctx, &dev, &[n as i64], &(0..n).map(|i| (i % t) as i32).collect::<Vec<_>>());
    let (a, bq, bv) = (param(&[d, 4], -wb, wb, &mut r), param(&[4, dh * h], -0.3, 0.3, &mut r), param(&[4, dh * hkv], -0.3, 0.3, &mut r));
    let gain = if norm { Some(param(&[d], 0.5, 1.5, &mut r)) } else { None };
    let xn = match gain {
        Some(gain) => ctx.rms_norm_gain(x, gain, 1e-5)?,
        None => x,
    };
    let xb = if bf16 { ctx.cast(xn, DType::BF16)? } else { xn };
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
    let wo = param(&[dh * h, d], -0.3, 0.3, &mut r);
    let (ao, bo) = (param(&[dh * h, 4], -0.3, 0.3, &mut r), param(&[4, d], -0.3, 0.3, &mut r));
    let o = ctx.attn_causal(q, k, v, 1.0 / (dh as f32).sqrt())?; // [dh, h, t, b], bf16 of bf16 q, k, v (patch 0073)
    let o2 = ctx.reshape(o, &[(dh * h) as i64, n as i64])?;
    // [d, n] f32: the output projection; with `adapter`, its term B_o·(A_o·o) added as toy adds
    // an f32 product's (A_o·o a bf16 product)
    let y = ctx.mul_mat(wo, o2)?;
    let y = if adapter { ctx.add(ctx.mul_mat(bo, mm(ao, o2)?)?, y)? } else { y };
    let loss = ctx.sum(ctx.mul(y, rt)?)?.set_output();
    let mut g = Graph::with_grads(&ctx, 2048)?;
    g.set_mul_mat_grad(ggml_rs::MulMatGrad::OutProd);
    g.expand(loss)?;
    g.build_backward(loss)?;
    let ropes = g.nodes().into_iter().filter(|n| matches!(n.op(), sys::GGML_OP_ROPE | sys::GGML_OP_ROPE_BACK)).map(|n| n.dtype()).collect();
    let src = |op, i: usize| g.nodes().into_iter().find(|n| n.op() == op).map(|n| n.srcs()[i].dtype());
    let facts = Facts { ropes, norm_grad: src(sys::GGML_OP_NORM_GAIN_BACK, 0), dout: src(sys::GGML_OP_ATTN_CAUSAL_BACK, 4) };
    let mut params = if adapter { vec![x, wq, wk, wv, wo, a, bq, bv, ao, bo] } else { vec![x, wq, wk, wv, wo] };
    params.extend(gain);
    let outs: Vec<_> = params.iter().map(|&p| g.grad(p).unwrap().set_output()).collect();
    if let Err(e) = g.allocate(&backends(&dev)) {
        return Ok((Err(e), facts));
    }
    g.compute()?;
    assert!(g.cpu_fallbacks().is_empty(), "{:?}", g.cpu_fallbacks());
    Ok((Ok(outs.iter().map(|t| t.read_f32().unwrap()).collect()), facts))
}

/// SmolLM2's heads (64, 9/3) over 130 positions (two full 64-row blocks and a
/// partial one), and heads of 128: the gradients of `x`, `W_q`, `W_k`, `W_v` and
/// `W_o` within 2e-2 of each tensor's largest value of the CPU's f32 chain's (the
/// bf16 chain rounds x, the products, q, k, v, the ropes' gradients and dO); every
/// ROPE and ROPE_BACK of the bf16 chain is bf16, and so is the attention's dO
/// (read by products only). Also with LoRA-like terms on q, v and the output
/// projection, and their factors' gradients. The CPU refuses the bf16 graph.
#[test]
fn bf16_ropes_of_bf16_products_against_the_f32_chain() {
    let smol = Dims { dh: 64, h: 9, hkv: 3, t: 130, b: 2, d: 96 };
    for (s, seed, adapter) in [(smol, 7601, false), (Dims { dh: 128, h: 2, hkv: 1, t: 70, b: 1, d: 64 }, 7602, false), (smol, 7603, true)] {
        let (got, facts) = grads(s, seed, true, adapter, false).unwrap();
        assert_eq!(facts.ropes, vec![DType::BF16; 4], "dh {}: two ropes and their backward in bf16", s.dh);
        assert_eq!(facts.dout, Some(DType::BF16), "dh {}: the output projection's input gradient in bf16", s.dh);
        assert_eq!(grads(s, seed, false, adapter, false).unwrap().1.dout, Some(DType::F32), "the f32 chain's");
        against_the_f32_chain(s, seed, adapter, false, got);
    }
}

/// Patch 0078: where the three products (and the adapter's `A·x`) read the
/// bf16 cast of `rms_norm_gain(x, g)`, their input gradients are bf16, summed
/// in bf16, and NORM_GAIN_BACK reads the sum as it is: the gradients of `x`,
/// `g` and the matrices within 2e-2 of the CPU's f32 chain's, as above. Where
/// the cast of `x` itself is read, its gradient stays f32 (the test above: no
/// norm to read a bf16 one).
#[test]
fn bf16_products_of_a_norm_give_it_a_bf16_gradient() {
    // SmolLM2's width: rows of 576, which CUDA's NORM_GAIN_BACK takes in registers (patch 0080)
    let smol = Dims { dh: 64, h: 9, hkv: 3, t: 130, b: 2, d: 576 };
    for (seed, adapter) in [(7801, false), (7802, true)] {
        let (got, facts) = grads(smol, seed, true, adapter, true).unwrap();
        assert_eq!(facts.norm_grad, Some(DType::BF16), "adapter {adapter}: the norm's backward reads a bf16 gradient");
        let f32_grad = grads(smol, seed, false, adapter, true).unwrap().1.norm_grad;
        assert_eq!(f32_grad, Some(DType::F32), "the f32 chain's norm gradient is f32");
        against_the_f32_chain(smol, seed, adapter, true, got);
    }
}

/// `got` (the bf16 chain's gradients, or the device's refusal) against the
/// CPU's f32 chain of the same graph: within 2e-2 of each tensor's largest
/// value; the CPU refuses the bf16 graph.
fn against_the_f32_chain(s: Dims, seed: u64, adapter: bool, norm: bool, got: ggml_rs::Result<Vec<Vec<f32>>>) {
    if cpu().is_cpu() {
        let e = got.expect_err("the CPU refuses bf16 products and ropes").to_string();
        assert!(e.contains("runs on none of") || e.contains("cannot run"), "{e}");
        return;
    }
    let (got, want) = (got.unwrap(), grads(s, seed, false, adapter, norm).unwrap().0.unwrap());
    let names: &[&str] = match (adapter, norm) {
        (false, false) => &["x", "W_q", "W_k", "W_v", "W_o"],
        (true, false) => &["x", "W_q", "W_k", "W_v", "W_o", "A", "B_q", "B_v", "A_o", "B_o"],
        (false, true) => &["x", "W_q", "W_k", "W_v", "W_o", "g"],
        (true, true) => &["x", "W_q", "W_k", "W_v", "W_o", "A", "B_q", "B_v", "A_o", "B_o", "g"],
    };
    assert_eq!((got.len(), want.len()), (names.len(), names.len()));
    for (name, (a, w)) in names.iter().zip(got.iter().zip(&want)) {
        assert_within(&format!("dh {}, adapter {adapter}, norm {norm}: d{name}", s.dh), a, &f64s(w), 2e-2);
    }
}
