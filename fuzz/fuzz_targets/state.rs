//! Resume state (`weights/step_<N>.state.gguf`): any file loaded into a tiny
//! llama's weights and AdamW moments must give the counters or `Err`: no
//! panic, no ggml abort. The model is the shape of the seed in
//! `seeds/state/` (`toy train --preset smoke --vocab-size 32 --d-model 16
//! --layers 1 --heads 2 --d-ff 32 --context 16` on ids below 32), so the seed
//! reaches every tensor and the counters.
#![no_main]

use ggml_rs::optim::AdamWState;
use ggml_rs::{Backend, Context};
use libfuzzer_sys::fuzz_target;
use std::sync::OnceLock;
use toy::config::{Preset, TrainConfig};
use toy::model::{Arch, Weights};

struct Model {
    weights: Weights<'static>,
    moments: AdamWState<'static>,
    // Held so that LeakSanitizer sees them reachable at exit.
    _ctx: &'static Context,
    _backend: &'static Backend,
}

// SAFETY: libFuzzer calls the target from one thread at a time.
unsafe impl Send for Model {}
unsafe impl Sync for Model {}

static MODEL: OnceLock<Model> = OnceLock::new();

fn build() -> Model {
    // `toy train`'s config for those flags (see `commands::train::resolve`).
    let mut cfg = TrainConfig::from_preset(Preset::Smoke, Arch::Llama, 32).model;
    (cfg.d_model, cfg.n_layers, cfg.n_heads, cfg.n_kv_heads, cfg.d_ff, cfg.context) = (16, 1, 2, 2, 32, 16);
    // As `ReplicaState::new` does, on the CPU backend; one per process.
    let be: &'static Backend = Box::leak(Box::new(Backend::cpu().unwrap()));
    be.set_n_threads(1);
    let wctx: &'static Context = Box::leak(Box::new(Context::new(toy::train::step::capacity(cfg.n_layers)).unwrap()));
    let weights = Weights::new(wctx, &cfg).unwrap();
    let trainable: Vec<_> = weights.params().into_iter().filter(|p| p.trainable).map(|p| p.tensor).collect();
    for &p in &trainable {
        wctx.set_param(p).unwrap();
    }
    let moments = AdamWState::new(wctx, &trainable).unwrap();
    wctx.allocate(be).unwrap();
    Model { weights, moments, _ctx: wctx, _backend: be }
}

fuzz_target!(|data: &[u8]| {
    ggml_rs::log::set_handler(Some(Box::new(|_, _| {})));
    let dir = std::env::temp_dir().join(format!("toy-fuzz-state-{}", std::process::id()));
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join("step_1.state.gguf");
    std::fs::write(&path, data).unwrap();
    let m = MODEL.get_or_init(build);
    let _ = toy::train::state::load(&path, &m.weights, &m.moments);
});
