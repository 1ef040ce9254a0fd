//! The models' graphs against a plain-Rust f64 reference: logits, the
//! gradient of the whole model by finite differences, and checkpoint round trips.

use crate::common;

use common::{flat, reference, sequences, tiny, weight_map};
use ggml_rs::{Backend, Context};
use toy::formats::{
    checkpoint::{open_checkpoint, write_checkpoint},
    Provenance,
};
use toy::model::{init::init_weights, Arch, Weights};
use toy::train::step::{capacity, Consts, EvalStep, GradStep};

const T: usize = 8;
const B: usize = 3;

fn cpu() -> Backend {
    let b = Backend::cpu().unwrap();
    b.set_n_threads(1);
    b
}

fn check_forward(arch: Arch) {
    let cfg = tiny(arch);
    let be = cpu();
    let wctx = Context::new(capacity(cfg.n_layers)).unwrap();
    let w = Weights::new(&wctx, &cfg).unwrap();
    let consts = Consts::new(&wctx, T, B).unwrap();
    wctx.allocate(&be).unwrap();
    consts.fill().unwrap();
    init_weights(&w, 7).unwrap();
    // Larger weights than the init's 0.02 so every path matters numerically,
    // and biases off their initial zeros.
    for p in w.params() {
        let v: Vec<f32> = p.tensor.read::<f32>().unwrap().iter().map(|x| x * 10.0).collect();
        if p.tensor.name().ends_with(".bias") {
            let n = v.len();
            p.tensor.write(&(0..n).map(|i| 0.1 * ((i % 7) as f32 - 3.0)).collect::<Vec<f32>>()).unwrap();
        } else if !p.tensor.name().contains("norm") {
            p.tensor.write(&v).unwrap();
        }
    }
    let seqs = sequences(cfg.vocab, T, B, 1);
    let (tokens, targets) = flat(&seqs);
    let cctx = Context::new(capacity(cfg.n_layers)).unwrap();
    let mut ev = EvalStep::new(&cctx, &w, &consts, T, B, &[be]).unwrap();
    let loss = ev.loss(&tokens, &targets).unwrap();
    let logits = ev.logits().read::<f32>().unwrap();
    let wm = weight_map(&w);
    let mut worst = 0.0f64;
    for (b, (x, _)) in seqs.iter().enumerate() {
        for (t, row) in reference::forward(&cfg, &wm, x).iter().enumerate() {
            for (v, r) in row.iter().enumerate() {
                let got = logits[(b * T + t) * cfg.vocab + v] as f64;
                worst = worst.max((got - r).abs() / r.abs().max(1.0));
            }
        }
    }
    let ref_loss = reference::loss(&cfg, &wm, &seqs);
    assert!(worst < 1e-5, "{arch:?}: logits differ from the reference by {worst:e}");
    assert!(((loss as f64) - ref_loss).abs() / ref_loss < 1e-5, "{arch:?}: loss {loss} vs {ref_loss}");
}

#[test]
fn llama_forward_matches_reference() {
    check_forward(Arch::Llama);
}

#[test]
fn gpt2_forward_matches_reference() {
    check_forward(Arch::Gpt2);
}

#[test]
fn qwen2_forward_matches_reference() {
    check_forward(Arch::Qwen2);
}

fn check_gradients(arch: Arch) {
    let cfg = tiny(arch);
    let be = cpu();
    let wctx = Context::new(capacity(cfg.n_layers)).unwrap();
    let w = Weights::new(&wctx, &cfg).unwrap();
    for p in w.params() {
        wctx.set_param(p.tensor).unwrap();
    }
    let consts = Consts::new(&wctx, T, B).unwrap();
    wctx.allocate(&be).unwrap();
    consts.fill().unwrap();
    init_weights(&w, 3).unwrap();
    for p in w.params() {
        let v: Vec<f32> = p
            .tensor
            .read::<f32>()
            .unwrap()
            .iter()
            .enumerate()
            .map(|(i, x)| x * 10.0 + if p.tensor.name().contains("norm") { 0.1 * ((i % 7) as f32 - 3.0) / 3.0 } else { 0.0 })
            .collect();
        p.tensor.write(&v).unwrap();
    }
    let seqs = sequences(cfg.vocab, T, B, 2);
    let (tokens, targets) = flat(&seqs);
    let cctx = Context::new(capacity(cfg.n_layers) * 2).unwrap();
    let mut gs = GradStep::new(&cctx, &w, &consts, T, B, &[be]).unwrap();
    gs.compute(&tokens, &targets).unwrap();
    let base = weight_map(&w);
    // Central differences in f64: with these ×10 weights the loss curves sharply,
    // and h = 1e-4 left truncation errors of 1e-2 in qwen2's token table.
    let h = 1e-5;
    for p in w.params() {
        let name = p.tensor.name();
        let g = gs.grad(p.tensor).unwrap().read::<f32>().unwrap();
        let n = g.len();
        // Five elements spread over the tensor, plus the largest gradient.
        let mut idx: Vec<usize> = (0..5).map(|k| (k * 7919 + 13) % n).collect();
        idx.push((0..n).max_by(|&a, &b| g[a].abs().total_cmp(&g[b].abs())).unwrap());
        let (mut num, mut den) = (0.0f64, 0.0f64);
        for &i in &idx {
            let mut wp = base.clone();
            wp.get_mut(&name).unwrap()[i] += h;
            let lp = reference::loss(&cfg, &wp, &seqs);
            wp.get_mut(&name).unwrap()[i] -= 2.0 * h;
            let lm = reference::loss(&cfg, &wp, &seqs);
            let fd = (lp - lm) / (2.0 * h);
            num += (g[i] as f64 - fd).powi(2);
            den += fd * fd;
        }
        let rel = (num / den.max(1e-20)).sqrt();
        assert!(rel < 1e-2 || den.sqrt() < 1e-7, "{arch:?} {name}: relative gradient error {rel:e}");
    }
}

#[test]
fn llama_gradients_match_finite_differences() {
    check_gradients(Arch::Llama);
}

#[test]
fn gpt2_gradients_match_finite_differences() {
    check_gradients(Arch::Gpt2);
}

#[test]
fn qwen2_gradients_match_finite_differences() {
    check_gradients(Arch::Qwen2);
}

fn check_roundtrip(arch: Arch) {
    let cfg = tiny(arch);
    let be = cpu();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("m.gguf");
    let wctx = Context::new(capacity(cfg.n_layers)).unwrap();
    let w = Weights::new(&wctx, &cfg).unwrap();
    wctx.allocate(&be).unwrap();
    init_weights(&w, 11).unwrap();
    write_checkpoint(
        &path,
        &w,
        None,
        &Provenance {
            run_id: "t".into(),
            step: 5,
            name: "t".into(),
            save_id: String::new(),
            lora_base: String::new(),
            lora_base_sha256: String::new(),
            base_keys: Vec::new(),
        },
    )
    .unwrap();
    let ck = open_checkpoint(&path).unwrap();
    assert_eq!(ck.config.arch, arch);
    assert_eq!((ck.config.vocab, ck.config.d_model, ck.config.n_kv_heads), (cfg.vocab, cfg.d_model, cfg.n_kv_heads));
    assert_eq!(ck.step, 5);
    let names: Vec<String> = ck.file.tensors().iter().map(|t| t.name.clone()).collect();
    if arch == Arch::Gpt2 {
        assert!(names.contains(&"blk.1.attn_qkv.weight".to_string()) && !names.iter().any(|n| n.contains("attn_q.")));
    } else {
        assert!(names.contains(&"blk.1.attn_q.weight".to_string()) && names.contains(&"output.weight".to_string()));
    }
    let ctx2 = Context::new(capacity(cfg.n_layers)).unwrap();
    let w2 = Weights::new(&ctx2, &ck.config).unwrap();
    ctx2.allocate(&be).unwrap();
    ck.load_weights(&w2).unwrap();
    assert_eq!(weight_map(&w), weight_map(&w2), "{arch:?}: weights changed through the checkpoint");
}

#[test]
fn llama_checkpoint_round_trip() {
    check_roundtrip(Arch::Llama);
}

#[test]
fn gpt2_checkpoint_round_trip() {
    check_roundtrip(Arch::Gpt2);
}

#[test]
fn qwen2_checkpoint_round_trip() {
    check_roundtrip(Arch::Qwen2);
}

/// The training step pads the head to a multiple of 128 rows (vocabulary 37 →
/// 128 here): its loss is the unpadded model's, and its first AdamW update
/// (≈ −lr·sign(g)) moves every weight against the unpadded gradient.
fn check_padded_head(arch: Arch) {
    use ggml_rs::optim::{AdamWConfig, AdamWState};
    use toy::train::step::{OptSettings, TrainStep};
    let cfg = tiny(arch);
    let be = cpu();
    let wctx = Context::new(capacity(cfg.n_layers)).unwrap();
    let w = Weights::new(&wctx, &cfg).unwrap();
    let params: Vec<_> = w.params().into_iter().map(|p| p.tensor).collect();
    for &p in &params {
        wctx.set_param(p).unwrap();
    }
    let moments = AdamWState::new(&wctx, &params).unwrap();
    let consts = Consts::new(&wctx, T, B).unwrap();
    wctx.allocate(&be).unwrap();
    consts.fill().unwrap();
    init_weights(&w, 5).unwrap();
    let (tokens, targets) = flat(&sequences(cfg.vocab, T, B, 2));

    let gctx = Context::new(capacity(cfg.n_layers)).unwrap();
    let mut gs = GradStep::new(&gctx, &w, &consts, T, B, std::slice::from_ref(&be)).unwrap();
    let want_loss = gs.compute(&tokens, &targets).unwrap();
    let grads: Vec<Vec<f32>> = params.iter().map(|&p| gs.grad(p).unwrap().read::<f32>().unwrap()).collect();
    let before: Vec<Vec<f32>> = params.iter().map(|p| p.read::<f32>().unwrap()).collect();

    let tctx = Context::new(capacity(cfg.n_layers) * 2).unwrap();
    let opt = OptSettings { adamw: AdamWConfig { lr: 1e-3, betas: (0.9, 0.95), eps: 1e-8, weight_decay: 0.0 }, grad_clip: None };
    let mut ts = TrainStep::new(&tctx, &w, &moments, &consts, T, B, opt, None, &[be]).unwrap();
    let loss = ts.step(&tokens, &targets, &[1.0], 1e-3).unwrap().loss;
    assert!((loss - want_loss).abs() / want_loss < 1e-6, "{arch:?}: padded loss {loss} vs {want_loss}");
    // Against the largest gradient of the model: some are zero in exact
    // arithmetic (a key bias shifts every score of a query alike) and noise here.
    let scale = grads.iter().flatten().fold(0f32, |m, v| m.max(v.abs()));
    for ((p, g), w0) in params.iter().zip(&grads).zip(&before) {
        let w1 = p.read::<f32>().unwrap();
        for i in 0..g.len() {
            if g[i].abs() > 1e-4 * scale {
                assert!((w1[i] - w0[i]) * g[i] < 0.0, "{arch:?}: {} [{i}] moved with its gradient", p.name());
            }
        }
    }
}

#[test]
fn llama_padded_head_trains_like_the_model() {
    check_padded_head(Arch::Llama);
}

#[test]
fn gpt2_padded_head_trains_like_the_model() {
    check_padded_head(Arch::Gpt2);
}
