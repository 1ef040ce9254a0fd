//! GPT-2's MLP under bf16 products: `x + W_2·gelu(W_1·LN(x) + b_1) + b_2`
//! with the norm's output and the GELU's cast to bf16 as toy's autocast casts
//! them. On CUDA the norm writes its bf16 cast itself, and each bias's
//! gradient (a REPEAT_BACK of its product's output gradient) writes that
//! gradient's bf16 copy on its way, which both products of the backward then
//! read instead of converting it (patches 0090, 0092); the down projection,
//! its bias and the residual sum run as one cuBLASLt matmul (patch 0091); the
//! up projection, its bias, the cast and (toy's order) the GELU of the cast
//! run as one matmul writing bf16 (patch 0093); with the GELU flagged for a
//! bf16 gradient (patch 0094), the gradients from the down projection to the
//! up projection's bias reduction are bf16, and the down projection's input
//! gradient and the GELU's backward are one matmul (DGELU epilogue, patch 0095).
//! Against the same chain in f32 on the CPU: every gradient within 2e-2 of
//! its largest value.

use crate::common::{assert_within, backends, cpu, f64s, leaf, param_leaf, rng, uniform};
use ggml_rs::{sys, Context, DType, Graph};

/// Where the MLP's cast to bf16 sits ([`grads`]).
#[derive(Clone, Copy, PartialEq)]
enum Act {
    /// `cast(gelu(y))`.
    CastAfterGelu,
    /// `gelu(cast(y))`, as toy's autocast runs GPT-2's GELU: on CUDA the up
    /// projection, its bias, the cast and the GELU are one cuBLASLt matmul
    /// with the GELU_AUX_BIAS epilogue (patch 0093).
    GeluOfCast,
    /// `gelu(cast(y))` flagged for a bf16 gradient (`Context::bf16_gradient`,
    /// patch 0094) where the test device is not the CPU: the down
    /// projection's input gradient, the GELU's and the up projection's bias
    /// reduction run on bf16 gradients; on CUDA the first two are one cuBLASLt
    /// matmul with the DGELU epilogue (patch 0095).
    GeluOfCastBf16Grad,
    /// `cast(y)` and no activation, as GPT-2's q, k and v before the fused
    /// attention: on CUDA the product, its bias and the cast are one matmul
    /// writing bf16 (patch 0093).
    CastOnly,
}

/// The gradients of `x`, the norm's gain and bias, `W_1`, `b_1`, `W_2`, `b_2`
/// of `sum(mlp(x) ⊙ r)` over `n` rows of width `d` (hidden `4d`); `bf16`: on
/// the test device with the casts, else in f32 on the CPU. Also how many
/// REPEAT_BACK nodes the backward has.
fn grads(d: usize, n: usize, seed: u64, bf16: bool, act: Act) -> (Vec<Vec<f32>>, usize) {
    let dev = if bf16 { cpu() } else { ggml_rs::Backend::cpu().unwrap() };
    if bf16 {
        dev.set_matmul_precision(ggml_rs::MatmulPrecision::Medium);
    }
    let mut r = rng(seed);
    let ctx = Context::new(256).unwrap();
    let param = |ne: &[usize], lo: f32, hi: f32, r: &mut _| {
        let ne: Vec<i64> = ne.iter().map(|&x| x as i64).collect();
        param_leaf(&ctx, &dev, &ne, &uniform(r, ne.iter().product::<i64>() as usize, lo, hi))
    };
    let wb = 1.0 / (d as f32).sqrt();
    let x = param(&[d, n], -1.0, 1.0, &mut r);
    let (g, b0) = (param(&[d], 0.5, 1.5, &mut r), param(&[d], -0.2, 0.2, &mut r));
    let (w1, b1) = (param(&[d, 4 * d], -wb, wb, &mut r), param(&[4 * d], -0.2, 0.2, &mut r));
    let (w2, b2) = (param(&[4 * d, d], -wb / 2.0, wb / 2.0, &mut r), param(&[d], -0.2, 0.2, &mut r));
    let rt = leaf(&ctx, &dev, &[d as i64, n as i64], &uniform(&mut r, d * n, -1.0, 1.0));
    let cast = |t| if bf16 { ctx.cast(t, DType::BF16).unwrap() } else { t };
    let xn = cast(ctx.norm_gain_bias(x, g, b0, 1e-5).unwrap()); // [d, n]
    let y1 = ctx.add(ctx.mul_mat(cast(w1), xn).unwrap(), b1).unwrap(); // [4d, n] f32
    let h = match act {
        Act::CastAfterGelu => cast(ctx.gelu(y1).unwrap()),
        Act::GeluOfCast => ctx.gelu(cast(y1)).unwrap(),
        Act::GeluOfCastBf16Grad if bf16 && !dev.is_cpu() => ctx.bf16_gradient(ctx.gelu(cast(y1)).unwrap()).unwrap(),
        Act::GeluOfCastBf16Grad => ctx.gelu(cast(y1)).unwrap(),
        Act::CastOnly => cast(y1),
    };
    let y2 = ctx.add(ctx.mul_mat(cast(w2), h).unwrap(), b2).unwrap(); // [d, n] f32
    let y2 = ctx.add(x, y2).unwrap(); // the residual sum, as a GPT-2 block adds it
    let loss = ctx.sum(ctx.mul(y2, rt).unwrap()).unwrap().set_output();
    let mut gr = Graph::with_grads(&ctx, 1024).unwrap();
    gr.set_mul_mat_grad(ggml_rs::MulMatGrad::for_backend(&dev));
    gr.expand(loss).unwrap();
    gr.build_backward(loss).unwrap();
    let rb = gr.nodes().into_iter().filter(|t| t.op() == sys::GGML_OP_REPEAT_BACK).count();
    let outs: Vec<_> = [x, g, b0, w1, b1, w2, b2].iter().map(|&p| gr.grad(p).unwrap().set_output()).collect();
    gr.allocate(&backends(&dev)).unwrap();
    gr.compute().unwrap();
    assert!(gr.cpu_fallbacks().is_empty(), "{:?}", gr.cpu_fallbacks());
    (outs.iter().map(|t| t.read_f32().unwrap()).collect(), rb)
}

/// Widths 64 and 768 (GPT-2 124M's) over 300 rows: the products' bias
/// gradients are REPEAT_BACKs, and every gradient agrees with the f32 chain's.
#[test]
fn bf16_mlp_with_biases_against_the_f32_chain() {
    for act in [Act::CastAfterGelu, Act::GeluOfCast, Act::GeluOfCastBf16Grad, Act::CastOnly] {
        for (d, seed) in [(64usize, 9001u64), (768, 9002)] {
            let (got, rb) = grads(d, 300, seed, true, act);
            assert!(rb >= 2, "d {d}: the two biases' gradients are REPEAT_BACKs ({rb})");
            let (want, _) = grads(d, 300, seed, false, act);
            for (name, (a, w)) in ["x", "gain", "bias", "W_1", "b_1", "W_2", "b_2"].iter().zip(got.iter().zip(&want)) {
                assert_within(&format!("d {d}: d{name}"), a, &f64s(w), 2e-2);
            }
        }
    }
}
