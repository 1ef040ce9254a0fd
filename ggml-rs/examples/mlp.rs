//! Train a two-layer MLP to fit y = sin(3x) on the CPU and print the loss falling.
//!
//! `cargo run --release --example mlp -p toy-ggml [-- --device cuda]`

use ggml_rs::optim::{AdamWConfig, AdamWState, Optimizer, ParamGroup};
use ggml_rs::{Backend, Context, DType, Graph};

fn main() -> ggml_rs::Result<()> {
    let device = std::env::args().skip_while(|a| a != "--device").nth(1).unwrap_or_else(|| "cpu".into());
    let backend = Backend::by_name(&device)?;
    let cpu = Backend::cpu()?;
    let (n, hidden) = (256i64, 32i64);

    // Weights and optimizer state: a context allocated once on the device.
    let wctx = Context::new(16)?;
    let w1 = wctx.new_tensor_2d(DType::F32, 1, hidden)?.set_name("w1")?; // [in=1, out=hidden]
    let b1 = wctx.new_tensor_1d(DType::F32, hidden)?.set_name("b1")?;
    let w2 = wctx.new_tensor_2d(DType::F32, hidden, 1)?.set_name("w2")?; // [in=hidden, out=1]
    let params = [w1, b1, w2];
    for p in params {
        wctx.set_param(p)?;
    }
    let state = AdamWState::new(&wctx, &params)?;
    wctx.allocate(&backend)?;
    let mut seed = 1u64;
    let mut rand = || {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((seed >> 33) as f32 / (1u64 << 31) as f32) * 2.0 - 1.0
    };
    w1.write(&(0..hidden).map(|_| rand() * 2.0).collect::<Vec<f32>>())?;
    b1.write(&(0..hidden).map(|_| rand()).collect::<Vec<f32>>())?;
    w2.write(&(0..hidden).map(|_| rand() / (hidden as f32).sqrt()).collect::<Vec<f32>>())?;

    // The training graph: forward, mean squared error, backward, AdamW.
    let ctx = Context::new(256)?;
    let x = ctx.new_tensor_2d(DType::F32, 1, n)?.set_input(); // [1, n]
    let y = ctx.new_tensor_2d(DType::F32, 1, n)?.set_input();
    let h = ctx.gelu(ctx.add(ctx.mul_mat(w1, x)?, b1)?)?; // [hidden, n]
    let pred = ctx.mul_mat(w2, h)?; // [1, n]
    let loss = ctx.scale(ctx.sum(ctx.sqr(ctx.sub(pred, y)?)?)?, 1.0 / n as f32)?.set_output();
    let mut graph = Graph::with_grads(&ctx, 1024)?;
    graph.expand(loss)?;
    graph.build_backward(loss)?;
    let groups = [ParamGroup { params: params.to_vec(), weight_decay: 0.0 }];
    let mut opt = Optimizer::adamw(&ctx, &mut graph, &state, &groups, AdamWConfig { lr: 1e-2, ..Default::default() }, Some(1.0))?;
    let backends = if backend.is_cpu() { vec![cpu] } else { vec![backend, cpu] };
    graph.allocate(&backends)?;

    let xs: Vec<f32> = (0..n).map(|i| i as f32 / n as f32 * 2.0 - 1.0).collect();
    let ys: Vec<f32> = xs.iter().map(|x| (3.0 * x).sin()).collect();
    x.write(&xs)?;
    y.write(&ys)?;
    for step in 1..=500 {
        x.write(&xs)?;
        y.write(&ys)?;
        opt.step(&mut graph, 1e-2)?; // prepare_step, compute, finish_step
        if step == 1 || step % 50 == 0 {
            println!("step {step}: loss={:.6}", loss.scalar()?);
        }
    }
    Ok(())
}
