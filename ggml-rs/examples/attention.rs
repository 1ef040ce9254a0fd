//! Fused causal attention (`Context::attn_causal`) forward and backward on data
//! from a file, for checking against another implementation
//! (`scripts/parity/attention.py` compares with PyTorch's
//! `F.scaled_dot_product_attention(is_causal=True)`).
//!
//! `cargo run --release --example attention -p toy-ggml -- IN OUT [--device cuda]`
//!
//! IN: little-endian u64 `d_head, n_head, n_kv, T, B`, f32 `scale`, then f32
//! q `[d_head, n_head, T, B]`, k and v `[d_head, n_kv, T, B]`, and the output's
//! gradient `[d_head, n_head, T, B]` (ggml `ne` order: d_head fastest).
//! OUT: f32 output, dq, dk, dv in the same layouts.

use ggml_rs::{Backend, Context, DType, Graph};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(input), Some(output)) = (args.get(1), args.get(2)) else {
        return Err("usage: attention IN OUT [--device cuda]".into());
    };
    let device = args.iter().skip_while(|a| *a != "--device").nth(1).cloned().unwrap_or_else(|| "cpu".into());
    ggml_rs::backend::load_default_backends();
    let backend = Backend::by_name(&device)?;
    backend.set_matmul_precision(ggml_rs::MatmulPrecision::Highest);

    let bytes = std::fs::read(input)?;
    let head: Vec<usize> = (0..5).map(|i| u64::from_le_bytes(bytes[i * 8..i * 8 + 8].try_into().unwrap()) as usize).collect();
    let (dh, h, hkv, t, b) = (head[0], head[1], head[2], head[3], head[4]);
    let scale = f32::from_le_bytes(bytes[40..44].try_into()?);
    let nq = dh * h * t * b;
    let nk = dh * hkv * t * b;
    if bytes.len() != 44 + 4 * (2 * nq + 2 * nk) {
        return Err("IN has the wrong size for its header".into());
    }
    let f: Vec<f32> = bytes[44..].chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    let (qd, rest) = f.split_at(nq);
    let (kd, rest) = rest.split_at(nk);
    let (vd, dod) = rest.split_at(nk);

    let ctx = Context::new(64)?;
    let ne = |heads: usize| [dh as i64, heads as i64, t as i64, b as i64];
    let q = ctx.new_tensor(DType::F32, &ne(h))?;
    let k = ctx.new_tensor(DType::F32, &ne(hkv))?;
    let v = ctx.new_tensor(DType::F32, &ne(hkv))?;
    let dout = ctx.new_tensor(DType::F32, &ne(h))?;
    for p in [q, k, v] {
        ctx.set_param(p)?;
    }
    ctx.allocate(&backend)?;
    q.write(qd)?;
    k.write(kd)?;
    v.write(vd)?;
    dout.write(dod)?;
    let o = ctx.attn_causal(q, k, v, scale)?.set_output(); // [dh, H, T, B]
    let loss = ctx.sum(ctx.mul(o, dout)?)?; // d loss / d o = dout
    let mut g = Graph::with_grads(&ctx, 256)?;
    g.build_backward(loss)?;
    let grads: Vec<_> = [q, k, v].iter().map(|&p| g.grad(p).map(|t| t.set_output())).collect::<Option<Vec<_>>>().ok_or("no gradient")?;
    g.allocate(&[backend, Backend::cpu()?])?;
    g.reset_grads()?;
    g.compute()?;
    let mut out = Vec::new();
    for t in std::iter::once(o).chain(grads) {
        out.extend(t.read::<f32>()?.iter().flat_map(|x| x.to_le_bytes()));
    }
    std::fs::write(output, out)?;
    Ok(())
}
