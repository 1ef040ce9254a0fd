//! An architecture variant defined by a table alone: llama with biases on q, k
//! and v (as qwen2 has them), run by llama's own forward pass. From the table
//! only, toy allocates it, counts it, initializes it, matches the plain-Rust
//! reference (which adds a bias wherever the weights carry one), trains it,
//! writes its checkpoint, shape-checks that file and reads it back.

use crate::common;

use common::{flat, reference, sequences, tiny, weight_map};
use ggml_rs::gguf::GgufFile;
use ggml_rs::optim::{AdamWConfig, AdamWState};
use ggml_rs::{Backend, Context};
use toy::formats::checkpoint::{check_shapes_of, expected_shapes_of, model_config, open_checkpoint, write_checkpoint, Checkpoint};
use toy::formats::Provenance;
use toy::model::llama::{self, kv_width, q_width};
use toy::model::table::{Lora, Spec, Table};
use toy::model::{init::init_weights, Arch, ModelConfig, Weights};
use toy::train::step::{capacity, Consts, EvalStep, GradStep, OptSettings, TrainStep};

/// llama's table with `attn_{q,k,v}.bias` after each of those matrices.
static QKV_BIAS: Table = Table {
    first: llama::TABLE.first,
    blocks: &[
        Spec::gain("attn_norm.weight", |c| vec![c.d_model]),
        Spec::matrix("attn_q.weight", |c| vec![c.d_model, q_width(c)]).lora(Lora::ByDefault),
        Spec::bias("attn_q.bias", |c| vec![q_width(c)]),
        Spec::matrix("attn_k.weight", |c| vec![c.d_model, kv_width(c)]).lora(Lora::ByDefault),
        Spec::bias("attn_k.bias", |c| vec![kv_width(c)]),
        Spec::matrix("attn_v.weight", |c| vec![c.d_model, kv_width(c)]).lora(Lora::ByDefault),
        Spec::bias("attn_v.bias", |c| vec![kv_width(c)]),
        Spec::matrix("attn_output.weight", |c| vec![q_width(c), c.d_model]).lora(Lora::ByDefault).residual(),
        Spec::gain("ffn_norm.weight", |c| vec![c.d_model]),
        Spec::matrix("ffn_gate.weight", |c| vec![c.d_model, c.d_ff]).lora(Lora::Yes),
        Spec::matrix("ffn_up.weight", |c| vec![c.d_model, c.d_ff]).lora(Lora::Yes),
        Spec::matrix("ffn_down.weight", |c| vec![c.d_ff, c.d_model]).lora(Lora::Yes).residual(),
    ],
    last: &[],
    fused: &[],
    hidden: llama::hidden,
    head: llama::head,
};

const T: usize = 8;
const B: usize = 3;

fn cpu() -> Backend {
    let b = Backend::cpu().unwrap();
    b.set_n_threads(1);
    b
}

fn is_bias(name: &str) -> bool {
    name.ends_with(".bias")
}

fn prov() -> Provenance {
    Provenance { run_id: "variant".into(), step: 3, name: "variant".into(), ..Provenance::default() }
}

/// Weights of `cfg` from [`QKV_BIAS`] with their AdamW moments, allocated,
/// initialized, with biases moved off their initial zeros so that the forward
/// pass depends on them.
fn variant<'w>(ctx: &'w Context, cfg: &ModelConfig, be: &Backend) -> (Weights<'w>, AdamWState<'w>, Consts<'w>) {
    let w = Weights::from_table(ctx, cfg, &QKV_BIAS).unwrap();
    let params: Vec<_> = w.params().into_iter().map(|p| p.tensor).collect();
    for &p in &params {
        ctx.set_param(p).unwrap();
    }
    let moments = AdamWState::new(ctx, &params).unwrap();
    let consts = Consts::new(ctx, T, B).unwrap();
    ctx.allocate(be).unwrap();
    consts.fill().unwrap();
    init_weights(&w, 9).unwrap();
    for p in w.params().iter().filter(|p| is_bias(&p.tensor.name())) {
        let n = p.tensor.nelements() as usize;
        p.tensor.write(&(0..n).map(|i| 0.3 * ((i % 5) as f32 - 2.0)).collect::<Vec<f32>>()).unwrap();
    }
    (w, moments, consts)
}

#[test]
fn a_table_alone_defines_a_variant_that_runs_like_the_reference() {
    let cfg = tiny(Arch::Llama);
    let be = cpu();
    let wctx = Context::new(capacity(cfg.n_layers)).unwrap();
    let (w, _, consts) = variant(&wctx, &cfg, &be);
    let biases: Vec<String> = w.params().iter().map(|p| p.tensor.name()).filter(|n| is_bias(n)).collect();
    assert_eq!(
        biases,
        ["blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias", "blk.1.attn_q.bias", "blk.1.attn_k.bias", "blk.1.attn_v.bias"]
    );
    let extra = cfg.n_layers * (q_width(&cfg) + 2 * kv_width(&cfg));
    assert_eq!(QKV_BIAS.n_params(&cfg), cfg.n_params() + extra);
    assert!(w.params().iter().filter(|p| is_bias(&p.tensor.name())).all(|p| !p.decay), "biases are not decayed");

    let seqs = sequences(cfg.vocab, T, B, 4);
    let (tokens, targets) = flat(&seqs);
    let cctx = Context::new(capacity(cfg.n_layers)).unwrap();
    let mut ev = EvalStep::new(&cctx, &w, &consts, T, B, std::slice::from_ref(&be)).unwrap();
    let loss = ev.loss(&tokens, &targets).unwrap() as f64;
    let wm = weight_map(&w);
    let want = reference::loss(&cfg, &wm, &seqs);
    assert!((loss - want).abs() / want < 1e-5, "loss {loss} vs the reference's {want}");
    let mut without = wm.clone();
    without.retain(|n, _| !is_bias(n));
    assert!((reference::loss(&cfg, &without, &seqs) - want).abs() > 1e-4, "the biases change nothing");

    // The biases' gradients against finite differences of the reference.
    let gctx = Context::new(capacity(cfg.n_layers) * 2).unwrap();
    let mut gs = GradStep::new(&gctx, &w, &consts, T, B, std::slice::from_ref(&be)).unwrap();
    gs.compute(&tokens, &targets).unwrap();
    let h = 1e-4;
    for name in &biases {
        let g = gs.grad(w.param(name).unwrap()).unwrap().read::<f32>().unwrap();
        for i in [0, g.len() / 2, g.len() - 1] {
            let mut wp = wm.clone();
            wp.get_mut(name).unwrap()[i] += h;
            let lp = reference::loss(&cfg, &wp, &seqs);
            wp.get_mut(name).unwrap()[i] -= 2.0 * h;
            let fd = (lp - reference::loss(&cfg, &wp, &seqs)) / (2.0 * h);
            assert!((g[i] as f64 - fd).abs() <= 1e-2 * fd.abs().max(1e-3), "{name}[{i}]: gradient {} vs {fd}", g[i]);
        }
    }
}

#[test]
fn a_table_alone_defines_a_variant_that_trains_and_round_trips() {
    let cfg = tiny(Arch::Llama);
    let be = cpu();
    let wctx = Context::new(capacity(cfg.n_layers)).unwrap();
    let (w, moments, consts) = variant(&wctx, &cfg, &be);
    let bias = w.param("blk.1.attn_k.bias").unwrap();
    let before = bias.read::<f32>().unwrap();

    // A few AdamW steps on one batch: the loss falls and the biases learn.
    let (tokens, targets) = flat(&sequences(cfg.vocab, T, B, 5));
    let tctx = Context::new(capacity(cfg.n_layers) * 2).unwrap();
    let opt = OptSettings { adamw: AdamWConfig { lr: 1e-2, betas: (0.9, 0.95), eps: 1e-8, weight_decay: 0.1 }, grad_clip: Some(1.0) };
    let mut ts = TrainStep::new(&tctx, &w, &moments, &consts, T, B, opt, None, std::slice::from_ref(&be)).unwrap();
    let losses: Vec<f32> = (0..5).map(|_| ts.step(&tokens, &targets, &[1.0], 1e-2).unwrap().loss).collect();
    assert!(losses[4] < losses[0], "the loss did not fall: {losses:?}");
    assert_ne!(bias.read::<f32>().unwrap(), before, "the k bias did not train");

    // Written as llama.cpp lays out a llama with q/k/v biases...
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("variant.gguf");
    write_checkpoint(&path, &w, None, &prov()).unwrap();
    let file = GgufFile::open(&path).unwrap();
    let names: Vec<String> = file.tensors().iter().map(|t| t.name.clone()).collect();
    let expected = expected_shapes_of(&QKV_BIAS, &cfg);
    assert_eq!(names, expected.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
    assert!(expected.contains(&("blk.0.attn_k.bias".into(), vec![kv_width(&cfg) as i64])));
    // ...shape-checked against the variant's table, and read back through it.
    let config = model_config(&file, "variant.gguf").unwrap();
    assert_eq!(config, cfg);
    check_shapes_of(&QKV_BIAS, &file, &config, "variant.gguf").unwrap();
    let ck = Checkpoint { file, config, tokenizer: None, step: 3, adapter: None };
    let ctx2 = Context::new(capacity(cfg.n_layers)).unwrap();
    let w2 = Weights::from_table(&ctx2, &ck.config, &QKV_BIAS).unwrap();
    ctx2.allocate(&be).unwrap();
    ck.load_weights(&w2).unwrap();
    assert_eq!(weight_map(&w), weight_map(&w2), "weights changed through the checkpoint");

    // Plain llama refuses the biases, and the variant refuses a plain llama file.
    let e = open_checkpoint(&path).unwrap_err().to_string();
    assert!(e.contains("attn_q.bias is not part of a llama model"), "{e}");
    let plain = dir.path().join("plain.gguf");
    let ctx3 = Context::new(capacity(cfg.n_layers)).unwrap();
    let w3 = Weights::new(&ctx3, &cfg).unwrap();
    ctx3.allocate(&be).unwrap();
    init_weights(&w3, 1).unwrap();
    write_checkpoint(&plain, &w3, None, &prov()).unwrap();
    let e = check_shapes_of(&QKV_BIAS, &GgufFile::open(&plain).unwrap(), &cfg, "plain.gguf").unwrap_err().to_string();
    assert!(e.contains("missing tensor blk.0.attn_q.bias"), "{e}");
}
