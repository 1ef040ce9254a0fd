//! Cross-entropy from class ids (`Context::cross_entropy_loss_ids`) on data
//! from a file, for checking against another implementation
//! (`scripts/parity/cross_entropy.py` compares with PyTorch's
//! `F.cross_entropy(..., ignore_index=-1)`).
//!
//! `cargo run --release --example cross_entropy -p toy-ggml -- IN OUT [--device cuda]`
//!
//! IN: little-endian `n_vocab: u64`, `rows: u64`, logits f32 `[n_vocab, rows]`
//! (row-major: one row of n_vocab values per target), targets i32 `[rows]`.
//! OUT: the loss (f32), then d loss / d logits f32 `[n_vocab, rows]`.

use ggml_rs::{Backend, Context, DType, Graph};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().collect();
    let (Some(input), Some(output)) = (args.get(1), args.get(2)) else {
        return Err("usage: cross_entropy IN OUT [--device cuda]".into());
    };
    let device = args.iter().skip_while(|a| *a != "--device").nth(1).cloned().unwrap_or_else(|| "cpu".into());
    ggml_rs::backend::load_default_backends();
    let backend = Backend::by_name(&device)?;
    backend.set_matmul_precision(ggml_rs::MatmulPrecision::Highest);

    let bytes = std::fs::read(input)?;
    let word = |i: usize| -> Result<u64, Box<dyn std::error::Error>> {
        Ok(u64::from_le_bytes(bytes.get(i * 8..i * 8 + 8).ok_or("IN is too short")?.try_into()?))
    };
    let (nv, rows) = (word(0)? as usize, word(1)? as usize);
    if bytes.len() != 16 + 4 * nv * rows + 4 * rows {
        return Err(format!("IN holds {} bytes, not the {} of [{nv}, {rows}]", bytes.len(), 16 + 4 * nv * rows + 4 * rows).into());
    }
    let f32s = |b: &[u8]| b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<f32>>();
    let logits = f32s(&bytes[16..16 + 4 * nv * rows]);
    let targets: Vec<i32> = bytes[16 + 4 * nv * rows..].chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect();

    let ctx = Context::new(64)?;
    let x = ctx.new_tensor(DType::F32, &[nv as i64, rows as i64])?; // [n_vocab, rows]
    ctx.set_param(x)?;
    let ids = ctx.new_tensor(DType::I32, &[rows as i64])?;
    ctx.allocate(&backend)?;
    x.write(&logits)?;
    ids.write(&targets)?;
    let loss = ctx.cross_entropy_loss_ids(x, ids)?.set_output(); // [1]
    let mut g = Graph::with_grads(&ctx, 64)?;
    g.build_backward(loss)?;
    let dx = g.grad(x).ok_or("no gradient")?.set_output(); // [n_vocab, rows]
    g.allocate(&[backend, Backend::cpu()?])?;
    g.reset_grads()?;
    g.compute()?;
    let mut out = loss.scalar()?.to_le_bytes().to_vec();
    out.extend(dx.read::<f32>()?.iter().flat_map(|v| v.to_le_bytes()));
    std::fs::write(output, out)?;
    Ok(())
}
