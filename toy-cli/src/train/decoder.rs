//! Incremental decoding for sampling: a key/value cache, as llama.cpp keeps
//! one. The first call runs the prompt as one window and keeps every layer's
//! keys and values (after RoPE); each later call runs one token, whose query
//! attends to the cached positions ([`crate::model::attention::CacheStep`]).
//! A step costs one token's work instead of a whole window's.
//!
//! Positions count from the start of the cached window. When the window is
//! full (the model's context), the cache restarts from the last half of the
//! tokens, re-encoded as one window (llama.cpp's context shift, without its
//! RoPE rotation of the kept keys).

use super::step::{capacity, Consts};
use crate::error::{runtime, Result};
use crate::model::attention::CacheStep;
use crate::model::Weights;
use ggml_rs::{Backend, Context, DType, Graph, Tensor};

/// The host copy of the cache and where decoding stands.
pub struct Decoder {
    /// Per layer: keys `[d_head·n_kv, positions]` (ggml order), then values.
    k: Vec<Vec<f32>>,
    v: Vec<Vec<f32>>,
    /// Positions in the cache.
    n_past: usize,
    /// Tokens of the sequence so far that the cache has seen (its window ends there).
    seen: usize,
    /// The model's window (context).
    t: usize,
    /// Floats per position per layer: `d_head·n_kv`.
    row: usize,
}

impl Decoder {
    /// An empty cache for a model with `n_layers` layers of `row = d_head·n_kv`
    /// floats per position, windows of at most `t` tokens.
    pub fn new(n_layers: usize, row: usize, t: usize) -> Decoder {
        Decoder { k: vec![Vec::new(); n_layers], v: vec![Vec::new(); n_layers], n_past: 0, seen: 0, t, row }
    }

    /// The logits `[vocab]` that follow `ids` (the whole sequence so far). A
    /// sequence that extends the last one by a token runs that token alone;
    /// anything else (the first call, a full window) re-encodes a window.
    pub fn next_logits(&mut self, w: &Weights<'_>, consts: &Consts<'_>, backends: &[Backend], ids: &[u32]) -> Result<Vec<f32>> {
        if self.n_past > 0 && self.n_past < self.t && ids.len() == self.seen + 1 {
            let logits = self.run(w, consts, backends, &ids[ids.len() - 1..])?;
            self.seen += 1;
            return Ok(logits);
        }
        // A fresh window: the last t tokens, or after a full window its last
        // t/2 (room for t/2 steps before the next restart).
        let keep = if self.n_past >= self.t { (self.t / 2).max(1) } else { self.t }.min(ids.len());
        self.k.iter_mut().chain(self.v.iter_mut()).for_each(Vec::clear);
        self.n_past = 0;
        let logits = self.run(w, consts, backends, &ids[ids.len() - keep..])?;
        self.seen = ids.len();
        Ok(logits)
    }

    /// Run `new` tokens after the cached positions (all of a window when the
    /// cache is empty, else one token), append their keys and values, and
    /// return the last token's logits.
    fn run(&mut self, w: &Weights<'_>, consts: &Consts<'_>, backends: &[Backend], new: &[u32]) -> Result<Vec<f32>> {
        let ctx = Context::new(capacity(self.k.len()))?;
        let (logits, inputs, mut graph) = self.build(&ctx, w, consts, backends, new.len())?;
        let mut ids: Vec<i32> = new.iter().map(|&x| x as i32).collect();
        ids.resize(inputs.tokens.ne()[0] as usize, 0); // a window is right-padded; causal attention ignores the padding
        inputs.tokens.write(&ids)?;
        if let Some((pos, kp, vp)) = inputs.past {
            pos.write(&[self.n_past as i32])?;
            kp.write(&self.k.concat())?;
            vp.write(&self.v.concat())?;
        }
        graph.compute()?;
        let at = new.len() - 1;
        let vocab = logits.ne()[0] as usize;
        let all = logits.read::<f32>()?;
        for ((k, v), (kt, vt)) in self.k.iter_mut().zip(self.v.iter_mut()).zip(&inputs.fresh) {
            k.extend_from_slice(&kt.read::<f32>()?[..new.len() * self.row]);
            v.extend_from_slice(&vt.read::<f32>()?[..new.len() * self.row]);
        }
        self.n_past += new.len();
        Ok(all[at * vocab..(at + 1) * vocab].to_vec())
    }

    /// The graph of one call: the `n_new` tokens of a window when the cache is
    /// empty (the constants' first positions and mask; not padded to the
    /// model's window, whose cost a long `-n` paid before the first token),
    /// else one token at position `n_past` with the cache as inputs.
    fn build<'a>(
        &self,
        ctx: &'a Context,
        w: &Weights<'a>,
        consts: &Consts<'a>,
        backends: &[Backend],
        n_new: usize,
    ) -> Result<(Tensor<'a>, Inputs<'a>, Graph<'a>)> {
        let n = if self.n_past == 0 { n_new } else { 1 };
        debug_assert!(n_new <= n);
        let tokens = ctx.new_tensor_1d(DType::I32, n as i64)?.set_input();
        let mut batch = consts.batch(ctx, tokens, n, 1)?;
        let mut past = None;
        if self.n_past > 0 {
            let ne = [self.row as i64, self.n_past as i64, self.k.len() as i64];
            let pos = ctx.new_tensor_1d(DType::I32, 1)?.set_input();
            let kp = ctx.new_tensor(DType::F32, &ne)?.set_input();
            let vp = ctx.new_tensor(DType::F32, &ne)?.set_input();
            let c = w.config();
            let shape = [c.d_head() as i64, c.n_kv_heads as i64, self.n_past as i64, self.k.len() as i64];
            batch.pos = pos;
            batch.cache = Some(CacheStep { past: Some((ctx.reshape(kp, &shape)?, ctx.reshape(vp, &shape)?)) });
            past = Some((pos, kp, vp));
        } else {
            batch.cache = Some(CacheStep { past: None });
        }
        let logits = w.forward(ctx, batch)?.set_output(); // [V, n, 1]
        let mut graph = Graph::new(ctx, capacity(self.k.len()))?;
        graph.expand(logits)?;
        graph.allocate(backends)?;
        // The layers' new keys and values, found once by name.
        let mut named: std::collections::HashMap<String, Tensor<'a>> =
            graph.nodes().into_iter().filter(|t| t.name().starts_with("cache_")).map(|t| (t.name(), t)).collect();
        let mut take = |name: String| named.remove(&name).ok_or_else(|| runtime(format!("the decoding graph has no {name}")));
        let fresh = (0..self.k.len()).map(|l| Ok((take(format!("cache_k.{l}"))?, take(format!("cache_v.{l}"))?))).collect::<Result<_>>()?;
        Ok((logits, Inputs { tokens, past, fresh }, graph))
    }
}

/// The inputs of a decoding graph (token ids, and for one token its position
/// and the cached keys and values) and its key/value outputs.
struct Inputs<'a> {
    tokens: Tensor<'a>,
    past: Option<(Tensor<'a>, Tensor<'a>, Tensor<'a>)>,
    /// Outputs: each layer's keys and values of the tokens run (`cache_k.{l}`, `cache_v.{l}`).
    fresh: Vec<(Tensor<'a>, Tensor<'a>)>,
}

#[cfg(test)]
mod tests {
    use super::Decoder;
    use crate::model::{init::init_weights, Arch, ModelConfig, Weights};
    use crate::train::step::{capacity, Consts, Forward};
    use ggml_rs::{Backend, Context};

    fn config(arch: Arch) -> ModelConfig {
        let mut c = ModelConfig::new(arch, 61, 32, 2, 4, 48, 12);
        if arch == Arch::Llama {
            c.n_kv_heads = 2;
        }
        c
    }

    /// Each step's logits from the cache equal those of the whole window
    /// (the decoder's current one) run again, through two restarts.
    fn cached_equals_recomputed(arch: Arch) {
        let c = config(arch);
        let t = c.context;
        let backend = Backend::cpu().unwrap();
        backend.set_n_threads(1);
        let wctx = Context::new(capacity(c.n_layers)).unwrap();
        let w = Weights::new(&wctx, &c).unwrap();
        let consts = Consts::new(&wctx, t, 1).unwrap();
        wctx.allocate(&backend).unwrap();
        consts.fill().unwrap();
        init_weights(&w, 5).unwrap();
        let backends = vec![backend];
        let ids: Vec<u32> = (0..30u32).map(|i| (i * 17 + 3) % c.vocab as u32).collect();
        let mut dec = Decoder::new(c.n_layers, c.d_head() * c.n_kv_heads, t);
        let fctx = Context::new(capacity(c.n_layers)).unwrap();
        let mut full = Forward::new(&fctx, &w, &consts, t, &backends).unwrap();
        let mut restarts = 0;
        for n in 3..=ids.len() {
            let before = dec.n_past;
            let got = dec.next_logits(&w, &consts, &backends, &ids[..n]).unwrap();
            restarts += usize::from(dec.n_past != before + 1 && n > 3);
            let window = &ids[n - dec.n_past..n];
            let mut input: Vec<i32> = window.iter().map(|&x| x as i32).collect();
            input.resize(t, 0);
            let want = full.logits_at(&input, window.len() - 1).unwrap();
            let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
            assert!(err < 1e-5, "{arch:?} step {n}: cached logits off by {err}");
        }
        assert_eq!(restarts, 3, "{arch:?}: the window of 12 restarts at 12 tokens, then every 6");
    }

    #[test]
    fn llama_with_grouped_heads() {
        cached_equals_recomputed(Arch::Llama);
    }

    #[test]
    fn gpt2() {
        cached_equals_recomputed(Arch::Gpt2);
    }
}
