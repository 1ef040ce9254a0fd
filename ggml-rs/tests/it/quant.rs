//! `DType::quantize` (ggml_quantize_chunk) against `DType::to_f32`: each
//! type's round trip stays within its known error, and bad row lengths and
//! types without a converter are errors, not ggml asserts.

use crate::common::*;
use ggml_rs::DType;

#[test]
fn round_trips_within_each_types_error() {
    let mut r = rng(7100);
    let (rows, n) = (6usize, 512usize);
    let x = uniform(&mut r, rows * n, -2.0, 2.0);
    // Largest error relative to max |x| (2): f16 rounds at 2^-11, q8_0 at half
    // of 1/127 of a block's max, the 4- to 6-bit types at half a step of their
    // 15 to 63 levels (k-quants also round their block scales); bounds with
    // margin over what ggml gives on this seeded data.
    for (dtype, tol) in [
        (DType::F32, 0.0),
        (DType::F16, 1e-3),
        (DType::BF16, 4e-3),
        (DType::Q8_0, 1e-2),
        (DType::Q6K, 3e-2),
        (DType::Q5K, 6e-2),
        (DType::Q4K, 1.2e-1),
        (DType::Q4_0, 1.5e-1),
        (DType::Q4_1, 1.2e-1),
    ] {
        let q = dtype.quantize(&x, n).unwrap();
        assert_eq!(q.len(), rows * dtype.row_size(n as i64), "{dtype}");
        let back = dtype.to_f32(&q, x.len()).unwrap();
        let err = x.iter().zip(&back).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max) / 2.0;
        println!("{dtype}: max error {err:.2e} of max |x|");
        assert!(err <= tol, "{dtype}: {err}");
        if dtype != DType::F32 {
            assert!(err > 0.0, "{dtype} rounds something");
        }
    }
}

#[test]
fn refuses_what_ggml_would_assert_on() {
    let x = vec![1.0f32; 96];
    assert!(DType::Q8_0.quantize(&x, 48).unwrap_err().to_string().contains("blocks of 32"));
    assert!(DType::Q8_0.quantize(&x, 64).is_err(), "64 does not divide 96");
    assert!(DType::Q4K.quantize(&x, 96).is_err(), "k-quants need rows of 256");
    assert!(DType::I32.quantize(&x, 32).is_err());
    assert!(DType::Q8_0.quantize(&x, 0).is_err());
    assert_eq!(DType::Q8_0.quantize(&x, 32).unwrap().len(), 3 * 34);
}

/// What [`frozen_against_reference`] computes: `y = W·x` and the gradient of
/// `x` through the frozen weight cast for its product (`y`, `gx`), the same
/// through the reference f32 copy (`y_ref`, `gx_ref`), and the cast's values.
struct FrozenProducts {
    y: Vec<f32>,
    y_ref: Vec<f32>,
    gx: Vec<f32>,
    gx_ref: Vec<f32>,
    cast: Vec<f32>,
}

/// `W` `[n, m]` stored as `dtype` (`raw`) and cast to `to` for its product
/// (as stored when `dtype` is `to`), and its reference copy `reference` (f32),
/// each multiplying `x` `[n, p]`; the loss `Σ y ⊙ r` for both, differentiated
/// with `mode` on the test device, with no op on the CPU.
#[allow(clippy::too_many_arguments)]
fn frozen_against_reference(
    dtype: DType,
    raw: &[u8],
    reference: &[f32],
    to: DType,
    x: &[f32],
    rv: &[f32],
    (n, m, p): (i64, i64, i64),
    mode: ggml_rs::MulMatGrad,
) -> FrozenProducts {
    use ggml_rs::{Context, Graph};
    let dev = cpu();
    let ctx = Context::new(1024).unwrap();
    let wq_t = ctx.new_tensor(dtype, &[n, m]).unwrap();
    let wr_t = ctx.new_tensor(DType::F32, &[n, m]).unwrap();
    let (x1, x2) = (ctx.new_tensor(DType::F32, &[n, p]).unwrap(), ctx.new_tensor(DType::F32, &[n, p]).unwrap());
    let rt = ctx.new_tensor(DType::F32, &[m, p]).unwrap();
    ctx.set_param(x1).unwrap();
    ctx.set_param(x2).unwrap();
    ctx.allocate(&dev).unwrap();
    wq_t.write_bytes(raw).unwrap();
    wr_t.write(reference).unwrap();
    for t in [x1, x2] {
        t.write(x).unwrap();
    }
    rt.write(rv).unwrap();
    let cast = if dtype == to { wq_t } else { ctx.cast(wq_t, to).unwrap() };
    let seen = ctx.scale(if to == DType::F32 { cast } else { ctx.cast(cast, DType::F32).unwrap() }, 1.0).unwrap().set_output();
    let y1 = ctx.mul_mat(cast, x1).unwrap().set_output();
    let y2 = ctx.mul_mat(wr_t, x2).unwrap().set_output();
    let l1 = ctx.sum(ctx.mul(y1, rt).unwrap()).unwrap();
    let loss = ctx.add(l1, ctx.sum(ctx.mul(y2, rt).unwrap()).unwrap()).unwrap().set_output();
    let mut g = Graph::with_grads(&ctx, 1024).unwrap();
    g.set_mul_mat_grad(mode);
    g.expand(seen).unwrap();
    g.expand(loss).unwrap();
    g.build_backward(loss).unwrap();
    let (g1, g2) = (g.grad(x1).unwrap().set_output(), g.grad(x2).unwrap().set_output());
    g.allocate(&backends(&dev)).unwrap();
    g.compute().unwrap();
    assert!(g.cpu_fallbacks().is_empty(), "{dtype} {mode:?}: {:?}", g.cpu_fallbacks());
    let read = |t: ggml_rs::Tensor<'_>| t.read_f32().unwrap();
    FrozenProducts { y: read(y1), y_ref: read(y2), gx: read(g1), gx_ref: read(g2), cast: read(seen) }
}

/// `y = W·x` with `W` kept as `dtype` and cast to f32 for the product
/// (`Context::cast`), against the same product on the dequantized f32 copy:
/// outputs and the gradient of `x` agree exactly, with both ways of
/// differentiating products, on the test device.
#[test]
fn a_frozen_compact_weight_differentiates_as_its_dequantized_copy() {
    use ggml_rs::MulMatGrad;
    let mut r = rng(7200);
    let (n, m, p) = (256i64, 12i64, 5i64);
    for dtype in [DType::Q8_0, DType::Q4_1, DType::Q5_0, DType::Q4K, DType::Q6K, DType::F16, DType::BF16] {
        let w = uniform(&mut r, (n * m) as usize, -1.0, 1.0);
        let raw = dtype.quantize(&w, n as usize).unwrap();
        let wd = dtype.to_f32(&raw, w.len()).unwrap();
        let x = uniform(&mut r, (n * p) as usize, -1.0, 1.0);
        let rv = uniform(&mut r, (m * p) as usize, -1.0, 1.0);
        for mode in [MulMatGrad::MulMat, MulMatGrad::OutProd] {
            let o = frozen_against_reference(dtype, &raw, &wd, DType::F32, &x, &rv, (n, m, p), mode);
            assert_eq!(o.y, o.y_ref, "{dtype} {mode:?}: forward");
            assert_eq!(o.gx, o.gx_ref, "{dtype} {mode:?}: gradient of x");
        }
    }
}

/// A chain of products over frozen q8_0 weights cast to f32: the backward
/// casts each weight again (patch 0023), so the graph's buffer holds a few
/// f32 copies at a time, not one per layer.
#[test]
fn the_forward_copy_of_a_frozen_weight_is_not_kept_for_the_backward() {
    use ggml_rs::{Context, Graph};
    let dev = cpu();
    let mut r = rng(7300);
    let (n, layers, p) = (512i64, 12usize, 2i64);
    let ctx = Context::new(4096).unwrap();
    let ws: Vec<_> = (0..layers).map(|_| ctx.new_tensor(DType::Q8_0, &[n, n]).unwrap()).collect();
    let x = ctx.new_tensor(DType::F32, &[n, p]).unwrap();
    ctx.set_param(x).unwrap();
    ctx.allocate(&dev).unwrap();
    for w in &ws {
        w.write_bytes(&DType::Q8_0.quantize(&uniform(&mut r, (n * n) as usize, -0.05, 0.05), n as usize).unwrap()).unwrap();
    }
    x.write(&uniform(&mut r, (n * p) as usize, -1.0, 1.0)).unwrap();
    let mut h = x;
    for &w in &ws {
        h = ctx.mul_mat(ctx.cast(w, DType::F32).unwrap(), h).unwrap();
    }
    let loss = ctx.sum(ctx.mul(h, h).unwrap()).unwrap().set_output();
    let mut g = Graph::with_grads(&ctx, 4096).unwrap();
    g.expand(loss).unwrap();
    g.build_backward(loss).unwrap();
    let casts = g.nodes().iter().filter(|t| t.op() == ggml_rs::sys::GGML_OP_CPY).count();
    assert_eq!(casts, 2 * layers, "one cast per product forward, one per gradient");
    g.allocate(&backends(&dev)).unwrap();
    let copy = (n * n * 4) as usize;
    let total: usize = g.buffer_sizes().iter().map(|(_, s)| s).sum();
    println!("compute buffers {total} bytes; one f32 weight {copy} bytes");
    assert!(total < 4 * copy, "{total} bytes hold more than a few f32 copies of {copy}");
    g.compute().unwrap();
    assert!(loss.scalar().unwrap().is_finite());
}

/// `x` rounded to the nearest bf16 (ties to even), as an f32.
fn bf16_round(x: f32) -> f32 {
    let b = x.to_bits();
    f32::from_bits((b + 0x7fff + ((b >> 16) & 1)) & 0xffff_0000)
}

/// `y = W·x` with `W` kept as `dtype` and cast to bf16 for the product (patch
/// 0040: one pass from the stored type; CUDA's `mul_mat` and `out_prod` read
/// the bf16 operand as it is), against the f32 product on the dequantized
/// copy rounded to bf16. `x` and the incoming gradient hold bf16 values, so
/// every product is exact and only the order of the f32 sums differs: the
/// cast equals the rounded copy bit for bit, outputs and the gradient of `x`
/// agree to 1e-5, with both ways of differentiating products, on the test
/// device and with no op on the CPU.
#[test]
fn a_frozen_weight_cast_to_bf16_differentiates_as_its_rounded_copy() {
    use ggml_rs::MulMatGrad;
    let mut r = rng(7400);
    let (n, m, p) = (256i64, 24i64, 7i64);
    for dtype in [DType::Q8_0, DType::Q4_1, DType::Q5_0, DType::Q4K, DType::Q6K, DType::F16, DType::BF16] {
        let w = uniform(&mut r, (n * m) as usize, -1.0, 1.0);
        let raw = dtype.quantize(&w, n as usize).unwrap();
        let wb: Vec<f32> = dtype.to_f32(&raw, w.len()).unwrap().into_iter().map(bf16_round).collect();
        let x: Vec<f32> = uniform(&mut r, (n * p) as usize, -1.0, 1.0).into_iter().map(bf16_round).collect();
        let rv: Vec<f32> = uniform(&mut r, (m * p) as usize, -1.0, 1.0).into_iter().map(bf16_round).collect();
        for mode in [MulMatGrad::MulMat, MulMatGrad::OutProd] {
            let o = frozen_against_reference(dtype, &raw, &wb, DType::BF16, &x, &rv, (n, m, p), mode);
            assert_eq!(o.cast, wb, "{dtype}: the cast is the dequantized value rounded to bf16");
            let close = |a: &[f32], b: &[f32]| a.iter().zip(b).map(|(a, b)| (a - b).abs() / b.abs().max(1.0)).fold(0.0f32, f32::max);
            let (e_y, e_g) = (close(&o.y, &o.y_ref), close(&o.gx, &o.gx_ref));
            assert!(e_y <= 1e-5, "{dtype} {mode:?}: forward {e_y:e}");
            assert!(e_g <= 1e-5, "{dtype} {mode:?}: gradient of x {e_g:e}");
        }
    }
}
