//! A plain-Rust f64 reference of the llama, qwen2 and gpt2 forward passes and loss,
//! written from the math (not from ggml), for checking toy's graphs.

use toy::model::{Arch, ModelConfig};

/// Weights by checkpoint-style name, as f64, in ggml layout (`ne [in, out]` =
/// `out` rows of `in` values).
pub type WeightMap = std::collections::HashMap<String, Vec<f64>>;

fn matvec(w: &[f64], x: &[f64], n_out: usize) -> Vec<f64> {
    let n_in = x.len();
    (0..n_out).map(|o| w[o * n_in..(o + 1) * n_in].iter().zip(x).map(|(a, b)| a * b).sum()).collect()
}

fn rms_norm(x: &[f64], g: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    let r = 1.0 / (ms + eps).sqrt();
    x.iter().zip(g).map(|(v, g)| v * r * g).collect()
}

fn layer_norm(x: &[f64], g: &[f64], b: &[f64], eps: f64) -> Vec<f64> {
    let n = x.len() as f64;
    let mean = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n;
    let r = 1.0 / (var + eps).sqrt();
    x.iter().zip(g).zip(b).map(|((v, g), b)| (v - mean) * r * g + b).collect()
}

/// RoPE: the pair k (k < d/2) is rotated by p·base^(−2k/d). llama (ggml mode
/// 0) pairs adjacent values (2k, 2k+1); qwen2 (NEOX, Hugging Face's
/// `rotate_half`) pairs the halves (k, k + d/2).
fn rope(x: &mut [f64], p: usize, base: f64, neox: bool) {
    let d = x.len();
    for k in 0..d / 2 {
        let th = p as f64 * base.powf(-((2 * k) as f64) / d as f64);
        let (c, s) = (th.cos(), th.sin());
        let (i, j) = if neox { (k, k + d / 2) } else { (2 * k, 2 * k + 1) };
        let (a, b) = (x[i], x[j]);
        x[i] = a * c - b * s;
        x[j] = a * s + b * c;
    }
}

fn gelu(x: f64) -> f64 {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
}

fn add(a: &mut [f64], b: &[f64]) {
    a.iter_mut().zip(b).for_each(|(x, y)| *x += y);
}

/// Causal attention over one sequence: q `[T][H·dh]`, k, v `[T][Hkv·dh]`.
fn attention(q: &[Vec<f64>], k: &[Vec<f64>], v: &[Vec<f64>], h: usize, hkv: usize, dh: usize) -> Vec<Vec<f64>> {
    let t = q.len();
    let mut out = vec![vec![0.0; h * dh]; t];
    for head in 0..h {
        let kvh = head / (h / hkv);
        for i in 0..t {
            let qi = &q[i][head * dh..(head + 1) * dh];
            let scores: Vec<f64> = (0..=i)
                .map(|j| qi.iter().zip(&k[j][kvh * dh..(kvh + 1) * dh]).map(|(a, b)| a * b).sum::<f64>() / (dh as f64).sqrt())
                .collect();
            let m = scores.iter().cloned().fold(f64::MIN, f64::max);
            let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for (j, ej) in e.iter().enumerate() {
                for c in 0..dh {
                    out[i][head * dh + c] += ej / z * v[j][kvh * dh + c];
                }
            }
        }
    }
    out
}

/// Logits `[T][V]` of one sequence.
pub fn forward(cfg: &ModelConfig, w: &WeightMap, tokens: &[usize]) -> Vec<Vec<f64>> {
    let (d, dh, f, v) = (cfg.d_model, cfg.d_head(), cfg.d_ff, cfg.vocab);
    let (h, hkv, eps) = (cfg.n_heads, cfg.n_kv_heads, cfg.norm_eps as f64);
    let g = |n: &str| &w[n];
    let emb = g("token_embd.weight");
    let mut x: Vec<Vec<f64>> = tokens.iter().map(|&tk| emb[tk * d..(tk + 1) * d].to_vec()).collect();
    if cfg.arch == Arch::Gpt2 {
        let pe = g("position_embd.weight");
        for (p, xp) in x.iter_mut().enumerate() {
            add(xp, &pe[p * d..(p + 1) * d]);
        }
    }
    for l in 0..cfg.n_layers {
        let n = |s: &str| format!("blk.{l}.{s}");
        let normed: Vec<Vec<f64>> = x
            .iter()
            .map(|xp| match cfg.arch {
                Arch::Llama | Arch::Qwen2 => rms_norm(xp, g(&n("attn_norm.weight")), eps),
                Arch::Gpt2 => layer_norm(xp, g(&n("attn_norm.weight")), g(&n("attn_norm.bias")), eps),
            })
            .collect();
        let proj = |name: &str, rows: usize, a: &[f64]| -> Vec<f64> {
            let mut y = matvec(g(&n(&format!("{name}.weight"))), a, rows);
            // gpt2's products all have biases; a llama variant's may (qwen2's q/k/v).
            if let Some(b) = w.get(&n(&format!("{name}.bias"))) {
                add(&mut y, b);
            }
            y
        };
        let mut q: Vec<Vec<f64>> = normed.iter().map(|a| proj("attn_q", h * dh, a)).collect();
        let mut k: Vec<Vec<f64>> = normed.iter().map(|a| proj("attn_k", hkv * dh, a)).collect();
        let vv: Vec<Vec<f64>> = normed.iter().map(|a| proj("attn_v", hkv * dh, a)).collect();
        if cfg.arch != Arch::Gpt2 {
            let neox = cfg.arch == Arch::Qwen2;
            for (p, (qp, kp)) in q.iter_mut().zip(k.iter_mut()).enumerate() {
                for hh in 0..h {
                    rope(&mut qp[hh * dh..(hh + 1) * dh], p, cfg.rope_base as f64, neox);
                }
                for hh in 0..hkv {
                    rope(&mut kp[hh * dh..(hh + 1) * dh], p, cfg.rope_base as f64, neox);
                }
            }
        }
        let att = attention(&q, &k, &vv, h, hkv, dh);
        for (xp, ap) in x.iter_mut().zip(&att) {
            add(xp, &proj("attn_output", d, ap));
        }
        for xp in x.iter_mut() {
            let m = match cfg.arch {
                Arch::Llama | Arch::Qwen2 => rms_norm(xp, g(&n("ffn_norm.weight")), eps),
                Arch::Gpt2 => layer_norm(xp, g(&n("ffn_norm.weight")), g(&n("ffn_norm.bias")), eps),
            };
            let hidden: Vec<f64> = match cfg.arch {
                Arch::Llama | Arch::Qwen2 => {
                    let gate = proj("ffn_gate", f, &m);
                    let up = proj("ffn_up", f, &m);
                    gate.iter().zip(&up).map(|(a, b)| a / (1.0 + (-a).exp()) * b).collect()
                }
                Arch::Gpt2 => proj("ffn_up", f, &m).into_iter().map(gelu).collect(),
            };
            add(xp, &proj("ffn_down", d, &hidden));
        }
    }
    let head = if cfg.tied { g("token_embd.weight") } else { g("output.weight") };
    x.iter()
        .map(|xp| {
            let nx = match cfg.arch {
                Arch::Llama | Arch::Qwen2 => rms_norm(xp, g("output_norm.weight"), eps),
                Arch::Gpt2 => layer_norm(xp, g("output_norm.weight"), g("output_norm.bias"), eps),
            };
            matvec(head, &nx, v)
        })
        .collect()
}

/// Mean cross-entropy over every position of every sequence.
pub fn loss(cfg: &ModelConfig, w: &WeightMap, seqs: &[(Vec<usize>, Vec<usize>)]) -> f64 {
    let mut total = 0.0;
    let mut n = 0;
    for (tokens, targets) in seqs {
        for (row, &y) in forward(cfg, w, tokens).iter().zip(targets) {
            let m = row.iter().cloned().fold(f64::MIN, f64::max);
            let lse = m + row.iter().map(|x| (x - m).exp()).sum::<f64>().ln();
            total += lse - row[y];
            n += 1;
        }
    }
    total / n as f64
}
