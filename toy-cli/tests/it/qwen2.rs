//! The qwen2 architecture, defined by its table (llama's blocks with biases
//! on q, k and v) and NEOX RoPE: toy allocates it, counts it, initializes it,
//! matches the plain-Rust reference (which adds a bias wherever the weights
//! carry one and rotates the halves of each head), trains it, writes its
//! checkpoint, shape-checks that file and reads it back.

use crate::common;

use common::{flat, reference, sequences, tiny, weight_map};
use ggml_rs::gguf::GgufFile;
use ggml_rs::optim::{AdamWConfig, AdamWState};
use ggml_rs::{Backend, Context};
use toy::formats::checkpoint::{check_shapes_of, expected_shapes, model_config, open_checkpoint, write_checkpoint, Checkpoint};
use toy::formats::Provenance;
use toy::model::llama::{self, kv_width, q_width};
use toy::model::{init::init_weights, Arch, ModelConfig, Weights};
use toy::train::step::{capacity, Consts, EvalStep, GradStep, OptSettings, TrainStep};

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
    Provenance { run_id: "qwen2".into(), step: 3, name: "qwen2".into(), ..Provenance::default() }
}

/// Weights of `cfg` with their AdamW moments, allocated, initialized, with
/// biases moved off their initial zeros so that the forward pass depends on them.
fn model<'w>(ctx: &'w Context, cfg: &ModelConfig, be: &Backend) -> (Weights<'w>, AdamWState<'w>, Consts<'w>) {
    let w = Weights::new(ctx, cfg).unwrap();
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
fn qwen2_runs_like_the_reference_with_its_biases_and_neox_rope() {
    let cfg = tiny(Arch::Qwen2);
    let be = cpu();
    let wctx = Context::new(capacity(cfg.n_layers)).unwrap();
    let (w, _, consts) = model(&wctx, &cfg, &be);
    let biases: Vec<String> = w.params().iter().map(|p| p.tensor.name()).filter(|n| is_bias(n)).collect();
    assert_eq!(
        biases,
        ["blk.0.attn_q.bias", "blk.0.attn_k.bias", "blk.0.attn_v.bias", "blk.1.attn_q.bias", "blk.1.attn_k.bias", "blk.1.attn_v.bias"]
    );
    let llama_cfg = ModelConfig { arch: Arch::Llama, ..cfg.clone() };
    let extra = cfg.n_layers * (q_width(&cfg) + 2 * kv_width(&cfg));
    assert_eq!(cfg.n_params(), llama_cfg.n_params() + extra);
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
    // The same weights with llama's RoPE (adjacent pairs) give another loss.
    assert!((reference::loss(&llama_cfg, &wm, &seqs) - want).abs() > 1e-4, "NEOX and mode 0 agree here");

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
fn qwen2_trains_and_round_trips_through_its_checkpoint() {
    let cfg = tiny(Arch::Qwen2);
    let be = cpu();
    let wctx = Context::new(capacity(cfg.n_layers)).unwrap();
    let (w, moments, consts) = model(&wctx, &cfg, &be);
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

    // Written as llama.cpp lays out a qwen2 model, with qwen2's keys...
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("qwen2.gguf");
    write_checkpoint(&path, &w, None, &prov()).unwrap();
    let file = GgufFile::open(&path).unwrap();
    assert_eq!(file.get_str("general.architecture").unwrap(), "qwen2");
    assert_eq!(file.get_u64("qwen2.attention.head_count_kv").unwrap(), 2);
    assert!(file.get("qwen2.rope.freq_base").is_some() && file.get("qwen2.attention.layer_norm_rms_epsilon").is_some());
    let names: Vec<String> = file.tensors().iter().map(|t| t.name.clone()).collect();
    let expected = expected_shapes(&cfg);
    assert_eq!(names, expected.iter().map(|(n, _)| n.clone()).collect::<Vec<_>>());
    assert!(expected.contains(&("blk.0.attn_k.bias".into(), vec![kv_width(&cfg) as i64])));
    // ...read back, and opened as every command opens a model.
    let config = model_config(&file, "qwen2.gguf").unwrap();
    assert_eq!(config, cfg);
    let ck = Checkpoint { file, config, tokenizer: None, step: 3, adapter: None };
    let ctx2 = Context::new(capacity(cfg.n_layers)).unwrap();
    let w2 = Weights::new(&ctx2, &ck.config).unwrap();
    ctx2.allocate(&be).unwrap();
    ck.load_weights(&w2).unwrap();
    assert_eq!(weight_map(&w), weight_map(&w2), "weights changed through the checkpoint");
    assert_eq!(open_checkpoint(&path).unwrap().config.arch, Arch::Qwen2);

    // A llama file refuses the biases, and qwen2 refuses a file without them.
    let llama_cfg = ModelConfig { arch: Arch::Llama, ..cfg.clone() };
    let ctx3 = Context::new(capacity(cfg.n_layers)).unwrap();
    let w3 = Weights::from_table(&ctx3, &llama_cfg, &toy::model::qwen2::TABLE).unwrap();
    ctx3.allocate(&be).unwrap();
    init_weights(&w3, 1).unwrap();
    let biased_llama = dir.path().join("biased-llama.gguf");
    write_checkpoint(&biased_llama, &w3, None, &prov()).unwrap();
    let e = open_checkpoint(&biased_llama).unwrap_err().to_string();
    assert!(e.contains("attn_q.bias is not part of a llama model"), "{e}");
    let plain = dir.path().join("plain.gguf");
    let ctx4 = Context::new(capacity(cfg.n_layers)).unwrap();
    let w4 = Weights::from_table(&ctx4, &cfg, &llama::TABLE).unwrap();
    ctx4.allocate(&be).unwrap();
    init_weights(&w4, 1).unwrap();
    write_checkpoint(&plain, &w4, None, &prov()).unwrap();
    let e = open_checkpoint(&plain).unwrap_err().to_string();
    assert!(e.contains("missing tensor blk.0.attn_q.bias"), "{e}");
    let e = check_shapes_of(&toy::model::qwen2::TABLE, &GgufFile::open(&plain).unwrap(), &cfg, "plain.gguf").unwrap_err().to_string();
    assert!(e.contains("missing tensor blk.0.attn_q.bias"), "{e}");
}
