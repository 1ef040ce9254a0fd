//! bf16 logits (toy-rs patch 0041): a head written by `mul_mat_bf16`, the
//! cross-entropy from ids reading them, and the gradients of the head's weight
//! and input through the bf16 logits' gradient, against an f64 reference from
//! the same (bf16) logits. The CPU has no bf16 product result: a graph holding
//! one is refused before ggml sees it.

use crate::common::*;
use ggml_rs::{Context, DType, Graph, MulMatGrad};
use rand::Rng;

/// What one run of the head and loss gives back.
struct HeadRun {
    loss: f32,
    /// The bf16 logits `[vp, n]`, widened.
    logits: Vec<f32>,
    grad_x: Vec<f32>,
    grad_w: Vec<f32>,
}

/// `loss = CE(mul_mat_bf16(W, x), targets)` over the first `nv` of `vp`
/// classes, `W` `[k, vp]`, `x` `[k, n]`, on `dev`; `Err` when the graph is refused.
fn head(dev: &ggml_rs::Backend, w: &[f32], x: &[f32], targets: &[i32], k: i64, vp: i64, nv: i64) -> ggml_rs::Result<HeadRun> {
    head_as(dev, w, x, targets, [k, vp, nv], true, true)
}

/// [`head`]; without `keep_logits` the logits are no graph's output, so that
/// CUDA's cross-entropy forward writes their gradient over them (toy-rs patch
/// 0063), and `logits` comes back empty. Without `bf16` the product is f32
/// (`mul_mat`) and so are the logits.
fn head_as(
    dev: &ggml_rs::Backend,
    w: &[f32],
    x: &[f32],
    targets: &[i32],
    [k, vp, nv]: [i64; 3],
    keep_logits: bool,
    bf16: bool,
) -> ggml_rs::Result<HeadRun> {
    let n = targets.len() as i64;
    let ctx = Context::new(256)?;
    let (wt, xt) = (ctx.new_tensor(DType::F32, &[k, vp])?, ctx.new_tensor(DType::F32, &[k, n])?);
    let ids = ctx.new_tensor(DType::I32, &[n])?;
    ctx.set_param(wt)?;
    ctx.set_param(xt)?;
    ctx.allocate(dev)?;
    wt.write(w)?;
    xt.write(x)?;
    ids.write(targets)?;
    let logits = if bf16 { ctx.mul_mat_bf16(wt, xt)? } else { ctx.mul_mat(wt, xt)? }; // [vp, n]
    let loss = ctx.cross_entropy_loss_ids_ext(logits, ids, nv)?.set_output();
    // The logits from a forward-only graph: the backward writes their gradient over them.
    let mut logits_seen = Vec::new();
    if keep_logits {
        let mut forward = Graph::new(&ctx, 64)?;
        forward.expand(logits.set_output())?;
        forward.allocate(&backends(dev))?;
        forward.compute()?;
        logits_seen = logits.read_f32()?;
    }
    let mut graph = Graph::with_grads(&ctx, 256)?;
    graph.set_mul_mat_grad(MulMatGrad::for_backend(dev));
    graph.expand(loss)?;
    graph.build_backward(loss)?;
    let (gx, gw) = (graph.grad(xt).expect("grad x").set_output(), graph.grad(wt).expect("grad W").set_output());
    graph.allocate(&backends(dev))?;
    graph.reset_grads()?;
    graph.compute()?;
    assert!(graph.cpu_fallbacks().is_empty(), "{:?}", graph.cpu_fallbacks());
    Ok(HeadRun { loss: loss.scalar()?, logits: logits_seen, grad_x: gx.read_f32()?, grad_w: gw.read_f32()? })
}

/// Mean cross-entropy over counted rows and its gradient, f64, from logits `[vp, n]`.
fn loss_reference(logits: &[f32], targets: &[i32], vp: usize, nv: usize) -> (f64, Vec<f64>) {
    let counted = targets.iter().filter(|&&t| t >= 0 && (t as usize) < nv).count() as f64;
    let (mut loss, mut grad) = (0.0, vec![0.0; logits.len()]);
    for (r, &t) in targets.iter().enumerate() {
        if t < 0 || t as usize >= nv {
            continue;
        }
        let z: Vec<f64> = logits[r * vp..r * vp + nv].iter().map(|&v| v as f64).collect();
        let mx = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let sum: f64 = z.iter().map(|v| (v - mx).exp()).sum();
        loss += mx + sum.ln() - z[t as usize];
        for (v, zv) in z.iter().enumerate() {
            grad[r * vp + v] = ((zv - mx).exp() / sum - if v == t as usize { 1.0 } else { 0.0 }) / counted;
        }
    }
    (loss / counted, grad)
}

/// `v` rounded to the nearest bf16 (ties to even), as a number.
fn bf16(v: f32) -> f64 {
    let b = v.to_bits();
    let r = b.wrapping_add(0x7fff + ((b >> 16) & 1)) & 0xffff_0000;
    f32::from_bits(r) as f64
}

/// `max |a − b| / max |b|`.
fn scaled_err(got: &[f32], want: &[f64]) -> f64 {
    let scale = want.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    assert!(scale > 0.0);
    got.iter().zip(want).map(|(&a, &b)| (a as f64 - b).abs()).fold(0.0, f64::max) / scale
}

/// On CUDA: the logits are the f64 product of the bf16-rounded operands,
/// rounded to bf16 (within 2⁻⁸ of the largest), the loss is the f64 loss of
/// those logits to 2e-5 (absolute: f32 sums of up to 50k terms), and the
/// gradients of `x` and `W` (bf16 operands, f32 sums) are within 1e-2 of the
/// f64 ones (max |Δ| over max |value|), at GPT-2's padded vocabulary and at
/// 1000, with masked targets and
/// padding columns, and with logits of a spread of ~±60 (exp's arguments below
/// -87, which CUDA's ex2.approx of patch 0081 flushes to 0: no NaN, nothing
/// added). The same with the logits no output, where CUDA fuses the forward
/// and backward (patches 0063, 0082) and the logits cannot be read back: the
/// product is the same, so the reference is. On the CPU the graph is refused.
#[test]
fn a_head_with_bf16_logits_differentiates_as_its_f64_reference() {
    let dev = cpu();
    for (nv, vp, n, amp) in [(1000usize, 1000usize, 24usize, 0.5f32), (50257, 50304, 12, 0.5), (4096, 4096, 16, 6.0)] {
        let k = 64usize;
        let mut g = rng(4100 + nv as u64);
        let mut w = uniform(&mut g, k * vp, -amp, amp);
        w[k * nv..].iter_mut().for_each(|v| *v = 0.0); // padding rows, as toy pads its head
        let x = uniform(&mut g, k * n, -1.0, 1.0);
        let mut targets: Vec<i32> = (0..n).map(|_| g.random_range(0..nv) as i32).collect();
        targets[1] = -1;
        let got = head(&dev, &w, &x, &targets, k as i64, vp as i64, nv as i64);
        if dev.is_cpu() {
            let e = got.err().expect("the CPU refuses bf16 logits").to_string();
            assert!(e.contains("runs on none of"), "{e}");
            return;
        }
        let got = got.unwrap();
        // The GEMM reads W and x rounded to bf16, sums in f32 and rounds the sum to bf16.
        let (wb, xb): (Vec<f64>, Vec<f64>) = (w.iter().map(|&v| bf16(v)).collect(), x.iter().map(|&v| bf16(v)).collect());
        let exact: Vec<f64> = (0..n * vp).map(|i| (0..k).map(|c| wb[(i % vp) * k + c] * xb[(i / vp) * k + c]).sum()).collect();
        let round_err = scaled_err(&got.logits, &exact);
        let (want_loss, dz) = loss_reference(&got.logits, &targets, vp, nv);
        let gx: Vec<f64> = (0..k * n).map(|i| (0..vp).map(|v| w[v * k + i % k] as f64 * dz[(i / k) * vp + v]).sum()).collect();
        let gw: Vec<f64> = (0..k * vp).map(|i| (0..n).map(|r| x[r * k + i % k] as f64 * dz[r * vp + i / k]).sum()).collect();
        println!("[{nv}/{vp}, {n}, ±{amp}]: logits within {round_err:.1e}");
        assert!(round_err <= 1.0 / 256.0, "logits {round_err:e}");
        let fused = head_as(&dev, &w, &x, &targets, [k as i64, vp as i64, nv as i64], false, true).unwrap();
        for (what, run) in [("kept", &got), ("fused", &fused)] {
            let le = (run.loss as f64 - want_loss).abs();
            let (ex, ew) = (scaled_err(&run.grad_x, &gx), scaled_err(&run.grad_w, &gw));
            println!("  {what}: loss {} against {want_loss:.6} (|Δ| {le:.1e}), grad x {ex:.1e}, grad W {ew:.1e}", run.loss);
            assert!(le <= 2e-5, "{what}: loss {} vs {want_loss}", run.loss);
            assert!(ex <= 1e-2 && ew <= 1e-2, "{what}: grad x {ex:e}, grad W {ew:e}");
        }
    }
}

/// Loss and gradient differences (loss relative; `x` and `W` as max |Δ| over
/// max |value|) between the fused and the unfused run of a head `[k, vp]`
/// (`nv` classes, padding rows 0) over `n` rows from `seed`, the targets at
/// `masked` set to −1; bf16 or f32 logits.
fn fused_against_kept([k, vp, nv]: [usize; 3], n: usize, seed: u64, masked: &[usize], bf16: bool) -> (f64, f64, f64) {
    let dev = cpu();
    let mut g = rng(seed);
    let mut w = uniform(&mut g, k * vp, -0.5, 0.5);
    w[k * nv..].iter_mut().for_each(|v| *v = 0.0);
    let x = uniform(&mut g, k * n, -1.0, 1.0);
    let mut targets: Vec<i32> = (0..n).map(|_| g.random_range(0..nv) as i32).collect();
    masked.iter().for_each(|&i| targets[i] = -1);
    let shape = [k as i64, vp as i64, nv as i64];
    let (fused, kept) =
        (head_as(&dev, &w, &x, &targets, shape, false, bf16).unwrap(), head_as(&dev, &w, &x, &targets, shape, true, bf16).unwrap());
    let wide = |v: &[f32]| v.iter().map(|&a| a as f64).collect::<Vec<f64>>();
    let le = ((fused.loss - kept.loss) / kept.loss).abs() as f64;
    let (ex, ew) = (scaled_err(&fused.grad_x, &wide(&kept.grad_x)), scaled_err(&fused.grad_w, &wide(&kept.grad_w)));
    let kind = if bf16 { "bf16" } else { "f32" };
    println!("fused {kind} [{nv}/{vp}, {n}]: loss {le:.1e}, grad x {ex:.1e}, grad W {ew:.1e}");
    (le, ex, ew)
}

/// CUDA's cross-entropy forward writes the logits' gradient in the same pass
/// when its backward is in the graph and the logits are no output (toy-rs
/// patch 0063, on by default since patch 0082): loss and gradients agree with
/// the unfused forward and backward (logits kept as an output) to f32's
/// precision in the loss and within one bf16 rounding of the logits' gradient
/// in the weight and input gradients (max |Δ| over max |value| ≤ 4e-3; on an
/// H200 they were equal), with masked targets and padding columns, and over
/// 700 rows (more than an H100 or H200 has SMs). With `TOY_CUDA_NO_0063` set
/// both runs are unfused. The CPU refuses the graph (no bf16 product result)
/// before ggml sees it, in one graph as in two.
#[test]
fn the_fused_cross_entropy_agrees_with_the_unfused_one() {
    let dev = cpu();
    if dev.is_cpu() {
        let (w, x) = (vec![0.1f32; 8 * 16], vec![0.2f32; 8 * 4]);
        let e = head_as(&dev, &w, &x, &[1, 2, -1, 3], [8, 16, 16], false, true).err().expect("the CPU refuses bf16 logits").to_string();
        assert!(e.contains("runs on none of"), "{e}");
        return;
    }
    for (nv, vp, n) in [(1000usize, 1000usize, 24usize), (50257, 50304, 12), (4096, 4096, 40), (2000, 2048, 700)] {
        let (le, ex, ew) = fused_against_kept([64, vp, nv], n, 4200 + nv as u64, &[2], true);
        assert!(le <= 1e-6, "loss differs by {le:e}");
        assert!(ex <= 4e-3 && ew <= 4e-3, "grad x {ex:e}, grad W {ew:e}");
    }
}

/// The same agreement with f32 logits (`mul_mat`), whose exp is the exact one
/// (patch 0064's ce_exp): the loss to 1e-6 and the gradients to 1e-5 of
/// their scale, over 700 rows at vocabularies 1000 and 2000 (padded to
/// 2048), with masked targets. On the CPU both runs are the one unfused op,
/// and agree as well.
#[test]
fn the_fused_cross_entropy_of_f32_logits_agrees_with_the_unfused_one() {
    for (nv, vp, n) in [(1000usize, 1000usize, 700usize), (2000, 2048, 700)] {
        let (le, ex, ew) = fused_against_kept([32, vp, nv], n, 4300 + nv as u64, &[5, n - 1], false);
        assert!(le <= 1e-6, "loss differs by {le:e}");
        assert!(ex <= 1e-5 && ew <= 1e-5, "grad x {ex:e}, grad W {ew:e}");
    }
}
