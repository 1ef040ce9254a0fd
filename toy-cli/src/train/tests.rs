//! The training loop's own tests.

use super::events::{Event, Memory};
use super::*;
use crate::config::Preset;
use crate::model::Arch;

/// A corpus of ids below 64 and the smoke llama's config for it, on the CPU with `threads`.
fn smoke_llama_on_ids(threads: usize) -> (Corpus, TrainConfig) {
    let ids = |n: u32| (0..n).map(|i| (i * 7) % 60).collect::<Vec<u32>>().into();
    let corpus =
        Corpus { train: ids(2000), val: ids(300), vocab_size: 64, tokenizer: None, source: "<test>".into(), chat: None, text_bytes: None };
    let mut cfg = TrainConfig::from_preset(Preset::Smoke, Arch::Llama, 64);
    (cfg.device, cfg.threads) = ("cpu".into(), threads);
    (corpus, cfg)
}

#[test]
fn the_loop_sends_its_events_in_order_and_writes_nothing() {
    let (corpus, mut cfg) = smoke_llama_on_ids(1);
    (cfg.steps, cfg.eval_every, cfg.save_every, cfg.log_every) = (4, 2, 2, 0);
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::create("test-run".into(), dir.path().join("r"), false).unwrap();
    let mut sink = Memory::default();
    let opts = RunOptions { quiet: true, ..RunOptions::default() };
    let out = train_into(&Plan::from_scratch(), &cfg, &corpus, &run, &opts, &mut sink).unwrap();
    let kinds: Vec<&str> = sink.events.iter().map(Event::kind).collect();
    let want = ["run_start", "eval", "step", "step", "eval", "checkpoint", "step", "step", "eval", "checkpoint", "run_end"];
    assert_eq!(kinds, want);
    let Some(Event::RunEnd(end)) = sink.events.last() else { unreachable!() };
    assert_eq!((end.reason, end.final_step, out.steps), (End::Completed, 4, 4));
    assert!(end.totals.is_some_and(|t| t.val_loss.is_some()));
    let mut left: Vec<_> = std::fs::read_dir(&run.path).unwrap().map(|e| e.unwrap().file_name()).collect();
    left.sort();
    assert_eq!(left, [".lock", "weights"], "the loop wrote into the run folder itself");
    assert_eq!(std::fs::read_dir(run.path.join("weights")).unwrap().count(), 0);
}

/// A deep model's step graph leaves more holes in its compute buffer while ggml plans it
/// than ggml-alloc's fixed 256 free blocks held: 131 layers of the smoke llama aborted on
/// "out of free blocks" before the first step (toy-rs patch 0083 lets the list grow).
#[test]
fn a_deep_model_plans_its_graph_without_running_out_of_free_blocks() {
    let (corpus, mut cfg) = smoke_llama_on_ids(2);
    cfg.model.n_layers = 160;
    cfg.attention = crate::model::attention::Attention::Fused; // the CPU's default, whose graph fragments more
    (cfg.steps, cfg.eval_every, cfg.save_every, cfg.log_every) = (1, 1, 0, 0);
    let dir = tempfile::tempdir().unwrap();
    let run = RunDir::create("test-run".into(), dir.path().join("r"), false).unwrap();
    let opts = RunOptions { quiet: true, ..RunOptions::default() };
    let out = train_into(&Plan::from_scratch(), &cfg, &corpus, &run, &opts, &mut Memory::default()).unwrap();
    assert_eq!(out.steps, 1);
}

/// The fused attention's constants hold no `[T, T]` mask (a context of
/// 60,000 made it 14 GB, and its fill a host copy as large: eval was killed);
/// the reference's mask is written a few rows at a time, to the same values
/// as whole: 0 where key ≤ query, −∞ above.
#[test]
fn only_the_reference_attention_has_a_mask_written_in_rows() {
    use crate::model::attention::Attention;
    use crate::train::step::Consts;
    let backend = ggml_rs::Backend::cpu().unwrap();
    let t = 1100; // two writes of ≤ 2^20 values
    let ctx = ggml_rs::Context::new(8).unwrap();
    let fused = Consts::with_attention(&ctx, t, 2, Attention::Fused).unwrap();
    let reference = Consts::with_attention(&ctx, t, 2, Attention::Reference).unwrap();
    assert!(fused.mask.is_none());
    assert_eq!(reference.attention(), Attention::Reference);
    ctx.allocate(&backend).unwrap();
    fused.fill().unwrap();
    reference.fill().unwrap();
    let pos = fused.pos.read::<i32>().unwrap();
    assert_eq!(pos, (0..2 * t).map(|i| (i % t) as i32).collect::<Vec<_>>());
    let mask = reference.mask.unwrap().read::<f32>().unwrap();
    for (i, &m) in mask.iter().enumerate() {
        let (key, query) = (i % t, i / t);
        assert_eq!(m, if key <= query { 0.0 } else { f32::NEG_INFINITY }, "key {key}, query {query}");
    }
}
