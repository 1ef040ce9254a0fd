//! Products under bf16 inputs (`MatmulPrecision::Medium`, toy-rs patches 0018,
//! 0027 and 0040) against the same graph under f32 products.

use crate::common::*;
use ggml_rs::{Context, DType, Graph, MatmulPrecision, MulMatGrad};

/// Loss and gradients of `x`, `A` and `B` of one LoRA-shaped layer
/// `y = W·x + B·(s·(A·x))` on `dev` at `precision`: `W` `[k, m]` frozen as
/// q8_0 and cast to bf16, `A` `[k, r]`, `B` `[r, m]`, `x` `[k, n]`.
/// With `casts`, as toy's models under autocast: `x`, `s·A` and `B` cast to
/// bf16 once and `A·x` a bf16 product (`mul_mat_bf16`, CUDA only); `Err` is
/// the allocation's error.
fn lora_layer_as(dev: &ggml_rs::Backend, precision: MatmulPrecision, seed: u64, casts: bool) -> ggml_rs::Result<Vec<Vec<f32>>> {
    let (k, m, n, r) = (256i64, 512i64, 512i64, 16i64);
    let mut g = rng(seed);
    let w = DType::Q8_0.quantize(&uniform(&mut g, (k * m) as usize, -0.1, 0.1), k as usize).unwrap();
    let (a, b) = (uniform(&mut g, (k * r) as usize, -0.1, 0.1), uniform(&mut g, (r * m) as usize, -0.1, 0.1));
    let (x, rv) = (uniform(&mut g, (k * n) as usize, -1.0, 1.0), uniform(&mut g, (m * n) as usize, -1.0, 1.0));
    dev.set_matmul_precision(precision);
    let ctx = Context::new(1024).unwrap();
    let wt = ctx.new_tensor(DType::Q8_0, &[k, m]).unwrap();
    let (at, bt, xt) = (
        ctx.new_tensor(DType::F32, &[k, r]).unwrap(),
        ctx.new_tensor(DType::F32, &[r, m]).unwrap(),
        ctx.new_tensor(DType::F32, &[k, n]).unwrap(),
    );
    let rt = ctx.new_tensor(DType::F32, &[m, n]).unwrap();
    for t in [at, bt, xt] {
        ctx.set_param(t).unwrap();
    }
    ctx.allocate(dev).unwrap();
    wt.write_bytes(&w).unwrap();
    at.write(&a).unwrap();
    bt.write(&b).unwrap();
    xt.write(&x).unwrap();
    rt.write(&rv).unwrap();
    let bf16 = |t| ctx.cast(t, DType::BF16).unwrap();
    let low = if casts {
        let (xb, ab) = (bf16(xt), bf16(ctx.scale(at, 0.5).unwrap()));
        ctx.mul_mat(bf16(bt), ctx.mul_mat_bf16(ab, xb).unwrap()).unwrap()
    } else {
        ctx.mul_mat(bt, ctx.scale(ctx.mul_mat(at, xt).unwrap(), 0.5).unwrap()).unwrap()
    };
    let base = ctx.mul_mat(bf16(wt), xt).unwrap();
    let y = ctx.add(base, low).unwrap();
    let loss = ctx.sum(ctx.mul(y, rt).unwrap()).unwrap().set_output();
    let mut graph = Graph::with_grads(&ctx, 1024).unwrap();
    graph.set_mul_mat_grad(MulMatGrad::for_backend(dev));
    graph.expand(loss).unwrap();
    graph.build_backward(loss).unwrap();
    if casts && MulMatGrad::for_backend(dev) == MulMatGrad::OutProd {
        // patch 0056: the OUT_PROD that gives A·x's gradient [r, n] writes it in bf16
        let bf16_grad =
            |t: &ggml_rs::Tensor<'_>| t.op() == ggml_rs::sys::GGML_OP_OUT_PROD && t.dtype() == DType::BF16 && t.ne()[..2] == [r, n];
        assert!(graph.nodes().iter().any(bf16_grad), "A·x's gradient in bf16");
    }
    loss_and_grads(&mut graph, dev, loss, &[xt, at, bt])
}

fn lora_layer(dev: &ggml_rs::Backend, precision: MatmulPrecision, seed: u64) -> Vec<Vec<f32>> {
    lora_layer_as(dev, precision, seed, false).unwrap()
}

/// Max |Δ| of each of `names` (loss and gradients), over the largest |value|
/// of `want`'s, within 2e-2 (bf16's precision); `tag` heads the lines printed.
fn assert_agree(tag: &str, names: &[&str], got: &[Vec<f32>], want: &[Vec<f32>]) {
    for (what, (got, want)) in names.iter().zip(got.iter().zip(want)) {
        let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let err = got.iter().zip(want).fold(0.0f32, |m, (a, b)| m.max((a - b).abs())) / scale;
        println!("{tag}{what}: max |Δ| {err:.2e} of max |value| {scale:.3}");
        assert!(scale > 0.0 && err <= 2e-2, "{tag}{what}: {err:e}");
    }
}

const LORA_OUTPUTS: [&str; 4] = ["loss", "grad x", "grad A", "grad B"];

/// toy's LoRA under autocast (`lora::linear`): `s·A` and `B` cast to bf16 once
/// for the four products that read them, and `A·x` a bf16 product whose
/// gradient, written in bf16 where the backward runs OUT_PRODs (CUDA; patch
/// 0056), its OUT_PRODs take. On CUDA loss and gradients agree with the f32
/// products' within bf16's precision; the CPU has no bf16 product result and
/// refuses the graph.
#[test]
fn a_lora_layer_of_bf16_casts_and_a_bf16_inner_product_agrees_with_f32_products() {
    let dev = cpu();
    let got = lora_layer_as(&dev, MatmulPrecision::Medium, 7501, true);
    if dev.is_cpu() {
        let e = got.expect_err("the CPU refuses bf16 products").to_string();
        assert!(e.contains("runs on none of"), "{e}");
        return;
    }
    assert_agree("", &LORA_OUTPUTS, &got.unwrap(), &lora_layer(&dev, MatmulPrecision::Highest, 7501));
}

/// Under bf16 products the layer's base product converts `x` and the output
/// gradient to bf16, and on CUDA the adapters' small products read those
/// copies (patch 0040) instead of running TF32 on the f32 values: the loss
/// and the gradients of `x`, `A` and `B` stay within bf16's precision of the
/// f32 products (max |Δ| ≤ 2e-2 of the largest value; the CPU keeps f32).
#[test]
fn a_lora_layer_under_bf16_products_agrees_with_f32_products() {
    let dev = cpu();
    let f32s = lora_layer(&dev, MatmulPrecision::Highest, 7500);
    let bf16s = lora_layer(&dev, MatmulPrecision::Medium, 7500);
    assert_agree("", &LORA_OUTPUTS, &bf16s, &f32s);
}

/// Loss and gradients of `x`, `W`, `b` and `h` of `y = h + reshape(W·x + b)`,
/// GPT-2's residual sum after a biased product, on `dev` at `precision`.
fn biased_residual(dev: &ggml_rs::Backend, precision: MatmulPrecision, seed: u64) -> Vec<Vec<f32>> {
    let (k, m, t, bsz) = (256i64, 384i64, 64i64, 4i64);
    let mut g = rng(seed);
    let vals = |g: &mut rand::rngs::StdRng, n: i64, a: f32| uniform(g, n as usize, -a, a);
    let (w, b, x, h) = (vals(&mut g, k * m, 0.1), vals(&mut g, m, 0.5), vals(&mut g, k * t * bsz, 1.0), vals(&mut g, m * t * bsz, 1.0));
    // Positive weights of y²: a loss without cancellation, whose relative error is the products'.
    let rv = uniform(&mut g, (m * t * bsz) as usize, 0.0, 1.0);
    dev.set_matmul_precision(precision);
    let ctx = Context::new(1024).unwrap();
    let wt = ctx.new_tensor(DType::F32, &[k, m]).unwrap();
    let bt = ctx.new_tensor(DType::F32, &[m]).unwrap();
    let xt = ctx.new_tensor(DType::F32, &[k, t * bsz]).unwrap();
    let ht = ctx.new_tensor(DType::F32, &[m, t, bsz]).unwrap();
    let rt = ctx.new_tensor(DType::F32, &[m, t, bsz]).unwrap();
    for p in [wt, bt, xt, ht] {
        ctx.set_param(p).unwrap();
    }
    ctx.allocate(dev).unwrap();
    for (p, v) in [(wt, &w), (bt, &b), (xt, &x), (ht, &h), (rt, &rv)] {
        p.write(v).unwrap();
    }
    let lin = ctx.reshape(ctx.add(ctx.mul_mat(wt, xt).unwrap(), bt).unwrap(), &[m, t, bsz]).unwrap();
    let y = ctx.add(ht, lin).unwrap();
    let loss = ctx.sum(ctx.mul(ctx.mul(y, y).unwrap(), rt).unwrap()).unwrap().set_output();
    let mut graph = Graph::with_grads(&ctx, 1024).unwrap();
    graph.set_mul_mat_grad(MulMatGrad::for_backend(dev));
    graph.expand(loss).unwrap();
    graph.build_backward(loss).unwrap();
    let grads: Vec<_> = [xt, wt, bt, ht].iter().map(|&p| graph.grad(p).unwrap().set_output()).collect();
    graph.allocate(&backends(dev)).unwrap();
    graph.compute().unwrap();
    assert!(graph.cpu_fallbacks().is_empty(), "{:?}", graph.cpu_fallbacks());
    let mut out = vec![loss.read_f32().unwrap()];
    out.extend(grads.iter().map(|p| p.read_f32().unwrap()));
    out
}

/// A biased product and the residual sum after it, whose product and bias
/// CUDA runs as one cuBLASLt matmul under TF32 and bf16 products (patch
/// 0033; the f32 products are cuBLAS's): loss and gradients within bf16's
/// precision of the f32 products (the CPU keeps f32).
#[test]
fn a_biased_product_and_its_residual_sum_agree_with_f32_products() {
    let dev = cpu();
    let f32s = biased_residual(&dev, MatmulPrecision::Highest, 7600);
    for p in [MatmulPrecision::High, MatmulPrecision::Medium] {
        let got = biased_residual(&dev, p, 7600);
        assert_agree(&format!("{p:?} "), &["loss", "grad x", "grad W", "grad b", "grad h"], &got, &f32s);
    }
}

/// `W·x` with `W` an f32 parameter (a weights buffer, not a graph's) under
/// bf16 products: a backend may keep a bf16 copy of `W` while it evaluates the
/// graph (CUDA's products convert their f32 operands). No copy may outlive the
/// evaluation: after `W` is rewritten, the same graph computed again gives the
/// loss and gradient of `x` of the new `W` (each within bf16's precision of a
/// fresh f32 graph of that `W`), not of the old one.
#[test]
fn a_weight_rewritten_between_evaluations_is_read_anew_under_bf16_products() {
    let (k, m, n) = (256i64, 384i64, 512i64);
    let mut g = rng(7700);
    let (w1, w2) = (uniform(&mut g, (k * m) as usize, -0.1, 0.1), uniform(&mut g, (k * m) as usize, -0.3, 0.3));
    let (x, rv) = (uniform(&mut g, (k * n) as usize, -1.0, 1.0), uniform(&mut g, (m * n) as usize, 0.0, 1.0));
    let dev = cpu();
    // Loss and gradient of x at `precision`, for each of `ws` written in turn into one graph.
    let run = |precision: MatmulPrecision, ws: &[&Vec<f32>]| -> Vec<Vec<Vec<f32>>> {
        dev.set_matmul_precision(precision);
        let ctx = Context::new(1024).unwrap();
        let (wt, xt, rt) = (
            ctx.new_tensor(DType::F32, &[k, m]).unwrap(),
            ctx.new_tensor(DType::F32, &[k, n]).unwrap(),
            ctx.new_tensor(DType::F32, &[m, n]).unwrap(),
        );
        ctx.set_param(wt).unwrap();
        ctx.set_param(xt).unwrap();
        ctx.allocate(&dev).unwrap();
        xt.write(&x).unwrap();
        rt.write(&rv).unwrap();
        let y = ctx.mul_mat(wt, xt).unwrap();
        let loss = ctx.sum(ctx.mul(ctx.mul(y, y).unwrap(), rt).unwrap()).unwrap().set_output();
        let mut graph = Graph::with_grads(&ctx, 1024).unwrap();
        graph.set_mul_mat_grad(MulMatGrad::for_backend(&dev));
        graph.expand(loss).unwrap();
        graph.build_backward(loss).unwrap();
        let gx = graph.grad(xt).unwrap().set_output();
        graph.allocate(&backends(&dev)).unwrap();
        ws.iter()
            .map(|w| {
                wt.write(w).unwrap();
                graph.compute().unwrap();
                vec![loss.read_f32().unwrap(), gx.read_f32().unwrap()]
            })
            .collect()
    };
    let got = run(MatmulPrecision::Medium, &[&w1, &w2, &w1]);
    let want: Vec<_> = [&w1, &w2, &w1].iter().map(|w| run(MatmulPrecision::Highest, &[w]).remove(0)).collect();
    dev.set_matmul_precision(MatmulPrecision::Highest);
    for (i, (got, want)) in got.iter().zip(&want).enumerate() {
        assert_agree(&format!("evaluation {i} "), &["loss", "grad x"], got, want);
    }
    // The second weight is three times the first's range (a loss ~9 times larger): a stale
    // copy could not pass the checks above.
    assert!(want[1][0][0] > 4.0 * want[0][0][0], "{} {}", want[0][0][0], want[1][0][0]);
}

/// Loss and gradients of `x`, `A` and `B` of `y = W·x + B16·((s·A)16·x)`
/// (`16`: cast to bf16, as toy's LoRA factors under autocast) on `dev`, with
/// the parameters' casts hoisted to the graph's front or left in place; and
/// the ops of the graph's first nodes after the parameters.
fn cast_factors(dev: &ggml_rs::Backend, hoist: bool) -> (Vec<Vec<f32>>, Vec<String>) {
    let (k, m, n, r) = (64i64, 96i64, 32i64, 8i64);
    let mut g = rng(7502);
    let vals = |g: &mut rand::rngs::StdRng, len: i64| uniform(g, len as usize, -0.5, 0.5);
    let (w, a, b, x, rv) = (vals(&mut g, k * m), vals(&mut g, k * r), vals(&mut g, r * m), vals(&mut g, k * n), vals(&mut g, m * n));
    let ctx = Context::new(1024).unwrap();
    let [wt, at, bt, xt, rt] = [[k, m], [k, r], [r, m], [k, n], [m, n]].map(|ne| ctx.new_tensor(DType::F32, &ne).unwrap());
    for t in [at, bt, xt] {
        ctx.set_param(t).unwrap();
    }
    ctx.allocate(dev).unwrap();
    for (t, v) in [(wt, &w), (at, &a), (bt, &b), (xt, &x), (rt, &rv)] {
        t.write(v).unwrap();
    }
    let bf16 = |t| ctx.cast(t, DType::BF16).unwrap();
    let h = ctx.mul_mat(bf16(ctx.scale(at, 0.5).unwrap()), xt).unwrap(); // [r, n]
    let y = ctx.add(ctx.mul_mat(wt, xt).unwrap(), ctx.mul_mat(bf16(bt), h).unwrap()).unwrap();
    let loss = ctx.sum(ctx.mul(y, rt).unwrap()).unwrap().set_output();
    let mut graph = Graph::with_grads(&ctx, 1024).unwrap();
    graph.set_mul_mat_grad(MulMatGrad::for_backend(dev));
    graph.expand(loss).unwrap();
    graph.build_backward(loss).unwrap();
    let grads: Vec<_> = [xt, at, bt].iter().map(|&t| graph.grad(t).unwrap().set_output()).collect();
    if hoist {
        assert_eq!(graph.hoist_param_casts().unwrap(), 3, "s·A, its cast and B's cast");
    }
    let ops: Vec<String> = graph.nodes().iter().filter(|t| !t.is_param()).take(3).map(|t| t.op_name()).collect();
    graph.allocate(&backends(dev)).unwrap();
    graph.compute().unwrap();
    let mut out = vec![loss.read_f32().unwrap()];
    out.extend(grads.iter().map(|t| t.read_f32().unwrap()));
    (out, ops)
}

/// `Graph::hoist_param_casts` (toy-rs patch 0057's run of casts): the scale of
/// `A` and the bf16 casts of the parameters move to the front, SCALE first,
/// then the casts in one run; the loss and the gradients are bit for bit those
/// of the graph in its built order (the same ops on the same values).
#[test]
fn hoisted_parameter_casts_run_first_and_change_no_value() {
    let dev = cpu();
    let (moved, ops) = cast_factors(&dev, true);
    assert_eq!(ops, ["SCALE", "CPY", "CPY"]);
    let (kept, ops) = cast_factors(&dev, false);
    assert_ne!(ops, ["SCALE", "CPY", "CPY"], "built order: each cast next to its product");
    for (what, (a, b)) in LORA_OUTPUTS.iter().zip(moved.iter().zip(&kept)) {
        assert!(a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()), "{what} changed");
    }
}

/// Loss and the gradient of `W` of `Σ (pad(W)16·x) ⊙ R` (toy's padded head:
/// `W` `[k, v]` padded to `[k, vp]` with zero rows, then cast to bf16) on
/// `dev`, the casts hoisted; with `also_read` the PAD is read by a second node
/// as well (`0·Σ pad(W)`, which adds exact zeros), so CUDA cannot fold it into
/// the cast (toy-rs patch 0086). And the ops of the first nodes after the
/// parameters.
fn padded_head(dev: &ggml_rs::Backend, also_read: bool) -> (Vec<Vec<f32>>, Vec<String>) {
    let [k, v, vp, n] = PADDED_HEAD.map(|d| d as i64);
    let (w, x, rv) = padded_head_values();
    let ctx = Context::new(256).unwrap();
    let [wt, xt, rt] = [[k, v], [k, n], [vp, n]].map(|ne| ctx.new_tensor(DType::F32, &ne).unwrap());
    ctx.set_param(wt).unwrap();
    ctx.allocate(dev).unwrap();
    for (t, vals) in [(wt, &w), (xt, &x), (rt, &rv)] {
        t.write(vals).unwrap();
    }
    let wp = ctx.pad(wt, [0, vp - v, 0, 0]).unwrap(); // [k, vp]
    let logits = ctx.mul_mat(ctx.cast(wp, DType::BF16).unwrap(), xt).unwrap(); // [vp, n]
    let mut loss = ctx.sum(ctx.mul(logits, rt).unwrap()).unwrap();
    if also_read {
        loss = ctx.add(loss, ctx.scale(ctx.sum(wp).unwrap(), 0.0).unwrap()).unwrap();
    }
    let loss = loss.set_output();
    let mut graph = Graph::with_grads(&ctx, 256).unwrap();
    graph.set_mul_mat_grad(MulMatGrad::for_backend(dev));
    graph.expand(loss).unwrap();
    graph.build_backward(loss).unwrap();
    let gw = graph.grad(wt).unwrap().set_output();
    assert_eq!(graph.hoist_param_casts().unwrap(), 2, "the PAD and its cast");
    let ops: Vec<String> = graph.nodes().iter().filter(|t| !t.is_param()).take(2).map(|t| t.op_name()).collect();
    graph.allocate(&backends(dev)).unwrap();
    graph.compute().unwrap();
    (vec![loss.read_f32().unwrap(), gw.read_f32().unwrap()], ops)
}

/// `[k, v, vp, n]` of [`padded_head`].
const PADDED_HEAD: [usize; 4] = [64, 1000, 1024, 24];

/// `W`, `x` and `R` of [`padded_head`].
fn padded_head_values() -> (Vec<f32>, Vec<f32>, Vec<f32>) {
    let [k, v, vp, n] = PADDED_HEAD;
    let mut g = rng(7503);
    (uniform(&mut g, k * v, -0.5, 0.5), uniform(&mut g, k * n, -1.0, 1.0), uniform(&mut g, vp * n, -1.0, 1.0))
}

/// A parameter padded with zero rows and cast to bf16, as toy's f32 head is
/// under autocast, gives the same loss and gradient bit for bit whether CUDA
/// folds the PAD into the run of casts after it (the cast reads the
/// parameter and writes the padding rows as 0, toy-rs patch 0086) or runs the
/// PAD because another node reads it too; `Graph::hoist_param_casts` puts the
/// PAD right before its cast in both. The gradient is also the f64 one of the
/// f32 operands to 1e-2 of its scale (CUDA may round the product's operands to bf16).
#[test]
fn a_padded_parameter_cast_to_bf16_folds_without_changing_a_value() {
    let dev = cpu();
    let (folded, ops) = padded_head(&dev, false);
    assert_eq!(ops, ["PAD", "CPY"]);
    let (kept, _) = padded_head(&dev, true);
    for (what, (a, b)) in ["loss", "grad W"].iter().zip(folded.iter().zip(&kept)) {
        assert!(a.iter().zip(b).all(|(p, q)| p.to_bits() == q.to_bits()), "{what} changed");
    }
    // dW[c, j] = Σ_t x[c, t]·R[j, t] over W's v rows
    let [k, v, vp, n] = PADDED_HEAD;
    let (_, x, rv) = padded_head_values();
    let want: Vec<f64> = (0..k * v).map(|i| (0..n).map(|t| x[t * k + i % k] as f64 * rv[t * vp + i / k] as f64).sum()).collect();
    let scale = want.iter().fold(0.0f64, |m, a| m.max(a.abs()));
    let err = folded[1].iter().zip(&want).map(|(&a, &b)| (a as f64 - b).abs()).fold(0.0, f64::max) / scale;
    println!("padded head: grad W within {err:.1e} of f64");
    assert!(err <= 1e-2, "grad W {err:e}");
}

/// `out_prod` of a bf16 operand and an f32 one over a long inner side into a
/// narrow result, a LoRA adapter's weight gradients (`dB` `[r, out]`, `dA`
/// `[in, r]`; CUDA: a bf16 GEMM, split over the inner side): against f64 sums
/// of the same values (bf16-exact, so the conversion is exact), for narrow
/// sides 8 to 64, either operand narrow, inner sides of 256 to 4096. On the
/// CPU, alone in its graph, it needs the row buffer that toy-rs patch 0058
/// plans for a bf16 operand (it crashed without).
#[test]
fn narrow_out_prods_over_long_inner_sides_against_f64() {
    let dev = cpu();
    // (m, n, k): the result [m, n] of a [m, k] (bf16) and b [n, k]
    for (case, &(m, n, k)) in [(16i64, 576i64, 4096i64), (1536, 16, 4096), (24, 104, 1000), (64, 200, 300), (8, 64, 256)].iter().enumerate()
    {
        let mut g = rng(7600 + case as u64);
        let bf = |v: f32| half::bf16::from_f32(v).to_f32();
        let a: Vec<f32> = uniform(&mut g, (m * k) as usize, -1.0, 1.0).into_iter().map(bf).collect();
        let b: Vec<f32> = uniform(&mut g, (n * k) as usize, -1.0, 1.0).into_iter().map(bf).collect();
        let ctx = Context::new(64).unwrap();
        let (at, bt) = (ctx.new_tensor(DType::F32, &[m, k]).unwrap(), ctx.new_tensor(DType::F32, &[n, k]).unwrap());
        ctx.allocate(&dev).unwrap();
        at.write(&a).unwrap();
        bt.write(&b).unwrap();
        let out = ctx.out_prod(ctx.cast(at, DType::BF16).unwrap(), bt).unwrap();
        let got = &eval_on(&dev, &ctx, &[out])[0];
        let (mu, nu, ku) = (m as usize, n as usize, k as usize);
        let mut want = vec![0f64; mu * nu];
        for t in 0..ku {
            for j in 0..nu {
                let bj = b[j + t * nu] as f64;
                for i in 0..mu {
                    want[i + j * mu] += a[i + t * mu] as f64 * bj;
                }
            }
        }
        let err = max_rel_err(got, &want);
        println!("out_prod [{m}, {k}] x [{n}, {k}]: max rel err {err:.2e}");
        // f32 sums of up to 4096 products of ±1-sized values, relative to max(1, |sum|)
        assert!(err < 1e-4, "[{m}, {n}] over {k}: {err:e}");
    }
}

/// Products with a side of at most 32 (a LoRA adapter's rank) of bf16
/// operands, in each layout the adapters' products take (on CUDA cuBLAS's
/// skinny and split-K GEMMs), against f64 sums of the same bf16 values:
/// `mul_mat_bf16(a [k, m], b [k, n])` (bf16 result, CUDA only: `A·x`, `B·h`),
/// `out_prod(a [m, k], b [n, k])` (`dA`, `dB`) and `out_prod(a [m, k], bᵀ)`
/// of `b` `[k, n]` (`Aᵀ·d(Ax)`, `Bᵀ·dy`).
#[test]
fn skinny_bf16_products_in_each_layout_against_f64() {
    let dev = cpu();
    let bf = |v: f32| half::bf16::from_f32(v).to_f32();
    // (layout, m, n, k): the result [m, n] over an inner side k
    let cases = [
        ("mul_mat", 16i64, 512i64, 576i64),
        ("mul_mat", 576, 512, 16),
        ("mul_mat", 32, 48, 1024),
        ("out_prod", 576, 16, 4096),
        ("out_prod", 16, 1536, 4096),
        ("out_prod", 48, 32, 272),
        ("out_prod_t", 576, 4096, 16),
        ("out_prod_t", 16, 512, 576),
        ("out_prod_t", 24, 40, 8),
    ];
    for (case, &(how, m, n, k)) in cases.iter().enumerate() {
        if how == "mul_mat" && dev.is_cpu() {
            continue; // no bf16 product result on the CPU
        }
        let (mu, nu, ku) = (m as usize, n as usize, k as usize);
        let mut g = rng(7700 + case as u64);
        let a: Vec<f32> = uniform(&mut g, mu * ku, -1.0, 1.0).into_iter().map(bf).collect();
        let b: Vec<f32> = uniform(&mut g, nu * ku, -1.0, 1.0).into_iter().map(bf).collect();
        // a(i, t) at i·sa[0] + t·sa[1] and b(t, j) at t·sb[0] + j·sb[1], as each layout stores them
        let (a_shape, b_shape, sa, sb) = match how {
            "mul_mat" => ([k, m], [k, n], [ku, 1], [1, ku]),
            "out_prod" => ([m, k], [n, k], [1, mu], [nu, 1]),
            _ => ([m, k], [k, n], [1, mu], [1, ku]),
        };
        let ctx = Context::new(64).unwrap();
        let (at, bt) = (ctx.new_tensor(DType::F32, &a_shape).unwrap(), ctx.new_tensor(DType::F32, &b_shape).unwrap());
        ctx.allocate(&dev).unwrap();
        at.write(&a).unwrap();
        bt.write(&b).unwrap();
        // b stays f32 (its values bf16 already) where OUT_PROD reads it: CUDA converts it
        let a16 = ctx.cast(at, DType::BF16).unwrap();
        let out = match how {
            "mul_mat" => ctx.mul_mat_bf16(a16, ctx.cast(bt, DType::BF16).unwrap()).unwrap(),
            "out_prod" => ctx.out_prod(a16, bt).unwrap(),
            _ => ctx.out_prod(a16, ctx.transpose(bt).unwrap()).unwrap(),
        };
        assert_eq!(out.ne()[..2], [m, n], "{how}");
        let got = &eval_on(&dev, &ctx, &[out])[0];
        let mut want = vec![0f64; mu * nu];
        for j in 0..nu {
            for i in 0..mu {
                want[i + j * mu] = (0..ku).map(|t| a[i * sa[0] + t * sa[1]] as f64 * b[t * sb[0] + j * sb[1]] as f64).sum();
            }
        }
        let err = max_rel_err(got, &want);
        println!("{how} [{m}, {n}] over {k}: max rel err {err:.2e}");
        // f32 sums, relative to max(1, |sum|); a bf16 result is within half its unit in the
        // last place, 2^-8 of a value in [1, 2)
        let bound = if out.dtype() == DType::BF16 { 4e-3 } else { 1e-4 };
        assert!(err < bound, "{how} [{m}, {n}] over {k}: {err:e}");
    }
}
