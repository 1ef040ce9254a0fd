//! Plain-Rust f64 references for the ops, written from the math (the source
//! of each formula is given). Tensors are flat slices in ggml `ne` order.

use super::{at, for_each};

/// `mul_mat(a, b)[i, j, i2, i3] = Σ_l a[l, i, i2 / (b.ne2 / a.ne2), i3 / (b.ne3 / a.ne3)] · b[l, j, i2, i3]`:
/// a row-by-row dot product over `ne0` (ggml.h `ggml_mul_mat`: "A: k columns,
/// n rows; B: k columns, m rows (i.e. we transpose it internally)"), with
/// ggml's broadcast of A's dims 2 and 3 by integer division of B's index.
pub fn mul_mat(a: &[f64], an: [usize; 4], b: &[f64], bn: [usize; 4]) -> (Vec<f64>, [usize; 4]) {
    let (r2, r3) = (bn[2] / an[2], bn[3] / an[3]);
    let on = [an[1], bn[1], bn[2], bn[3]];
    let mut out = vec![0.0; on.iter().product()];
    for_each(on, |i, j, i2, i3| {
        out[at(on, i, j, i2, i3)] = (0..an[0]).map(|l| a[at(an, l, i, i2 / r2, i3 / r3)] * b[at(bn, l, j, i2, i3)]).sum();
    });
    (out, on)
}

/// Elementwise `f(a, b)` with `b` tiled over `a` (index `i mod b.ne` per dimension, as `ggml_repeat`).
pub fn binary(a: &[f64], an: [usize; 4], b: &[f64], bn: [usize; 4], f: impl Fn(f64, f64) -> f64) -> Vec<f64> {
    let mut out = vec![0.0; a.len()];
    for_each(an, |i0, i1, i2, i3| {
        let k = at(an, i0, i1, i2, i3);
        out[k] = f(a[k], b[at(bn, i0 % bn[0], i1 % bn[1], i2 % bn[2], i3 % bn[3])]);
    });
    out
}

/// `x` tiled to shape `to` (`ggml_repeat`).
pub fn repeat(x: &[f64], ne: [usize; 4], to: [usize; 4]) -> Vec<f64> {
    let mut out = Vec::with_capacity(to.iter().product());
    for_each(to, |i0, i1, i2, i3| out.push(x[at(ne, i0 % ne[0], i1 % ne[1], i2 % ne[2], i3 % ne[3])]));
    out
}

/// Applies `f` to each row (`n0` consecutive values) of `x`.
pub fn rows(x: &[f64], n0: usize, f: impl Fn(&[f64]) -> Vec<f64>) -> Vec<f64> {
    x.chunks(n0).flat_map(f).collect()
}

/// RMSNorm without gain (Zhang & Sennrich 2019, eq. 4): `x / √(mean(x²) + eps)`.
pub fn rms_norm_row(x: &[f64], eps: f64) -> Vec<f64> {
    let ms = x.iter().map(|v| v * v).sum::<f64>() / x.len() as f64;
    x.iter().map(|v| v / (ms + eps).sqrt()).collect()
}

/// LayerNorm without gain and bias (Ba et al. 2016, eq. 4): `(x − μ) / √(σ² + eps)`
/// with σ² the biased variance over the row.
pub fn norm_row(x: &[f64], eps: f64) -> Vec<f64> {
    let n = x.len() as f64;
    let mu = x.iter().sum::<f64>() / n;
    let var = x.iter().map(|v| (v - mu) * (v - mu)).sum::<f64>() / n;
    x.iter().map(|v| (v - mu) / (var + eps).sqrt()).collect()
}

/// RoPE (Su et al. 2021, RoFormer eq. 34): pair `k < n_dims/2` of a head at
/// position `p` rotates by `θ = p · base^(−2k/n_dims)`:
/// `(x0, x1) ← (x0 cos θ − x1 sin θ, x0 sin θ + x1 cos θ)`. The pair is
/// `(2k, 2k+1)` in normal mode (GPT-J; llama.cpp's `llama`) and `(k, k + n_dims/2)`
/// in NeoX mode (GPT-NeoX; Hugging Face `rotate_half`). Dimensions ≥ n_dims pass
/// through. `x` is `[head_dim, n_head, n_pos, n_seq]`; `pos` has `n_pos` entries.
pub fn rope(x: &[f64], ne: [usize; 4], pos: &[i32], n_dims: usize, neox: bool, base: f64) -> Vec<f64> {
    let mut out = x.to_vec();
    for_each([1, ne[1], ne[2], ne[3]], |_, i1, i2, i3| {
        let p = pos[i2] as f64;
        for k in 0..n_dims / 2 {
            let theta = p * base.powf(-2.0 * k as f64 / n_dims as f64);
            let (s, c) = theta.sin_cos();
            let (j0, j1) = if neox { (k, k + n_dims / 2) } else { (2 * k, 2 * k + 1) };
            let (x0, x1) = (x[at(ne, j0, i1, i2, i3)], x[at(ne, j1, i1, i2, i3)]);
            out[at(ne, j0, i1, i2, i3)] = x0 * c - x1 * s;
            out[at(ne, j1, i1, i2, i3)] = x0 * s + x1 * c;
        }
    });
    out
}

/// `softmax(scale·a + mask)` over `ne0` (the attention weights of Vaswani et al.
/// 2017, eq. 1, with an additive mask); the mask row used is
/// `(i1, i2 mod m.ne2, i3 mod m.ne3)`, as ggml broadcasts it.
pub fn soft_max(a: &[f64], an: [usize; 4], mask: Option<(&[f64], [usize; 4])>, scale: f64) -> Vec<f64> {
    let mut out = vec![0.0; a.len()];
    for_each([1, an[1], an[2], an[3]], |_, i1, i2, i3| {
        let z: Vec<f64> = (0..an[0])
            .map(|j| {
                let m = mask.map(|(m, mn)| m[at(mn, j, i1, i2 % mn[2], i3 % mn[3])]).unwrap_or(0.0);
                scale * a[at(an, j, i1, i2, i3)] + m
            })
            .collect();
        let mx = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let e: Vec<f64> = z.iter().map(|v| (v - mx).exp()).collect();
        let s: f64 = e.iter().sum();
        for (j, ej) in e.iter().enumerate() {
            out[at(an, j, i1, i2, i3)] = ej / s;
        }
    });
    out
}

/// A causal mask `[n_kv, rows]` of 0 and −∞: query row `i` sees keys `j ≤ i + (n_kv − n_q)`.
pub fn causal_mask(n_kv: usize, n_q: usize, rows: usize) -> Vec<f32> {
    let mut m = vec![0.0f32; n_kv * rows];
    for i in 0..rows {
        for j in 0..n_kv {
            if j > i + (n_kv - n_q) {
                m[i * n_kv + j] = f32::NEG_INFINITY;
            }
        }
    }
    m
}

/// SiLU (Elfwing et al. 2017): `x·σ(x) = x / (1 + e^(−x))`.
pub fn silu(x: f64) -> f64 {
    x / (1.0 + (-x).exp())
}

/// GELU, tanh approximation (Hendrycks & Gimpel 2016, §2):
/// `0.5x(1 + tanh(√(2/π)(x + 0.044715x³)))`.
pub fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

/// `erf x = 2/√π Σ (−1)ⁿ x^(2n+1) / (n!(2n+1))` (Abramowitz & Stegun 7.1.5), summed
/// in f64 until the terms vanish; ±1 beyond |x| > 6 where erf is 1 to 1e-17.
pub fn erf(x: f64) -> f64 {
    if x.abs() > 6.0 {
        return x.signum();
    }
    let (mut sum, mut term, mut n) = (0.0f64, x, 0.0f64);
    loop {
        let add = term / (2.0 * n + 1.0);
        sum += add;
        if add.abs() < 1e-18 * sum.abs() || n > 300.0 {
            break;
        }
        n += 1.0;
        term *= -x * x / n;
    }
    2.0 / std::f64::consts::PI.sqrt() * sum
}

/// Mean cross-entropy over rows (ggml.h `ggml_cross_entropy_loss`):
/// `−(1/rows)·Σ_r Σ_v labels[v, r]·log_softmax(logits[·, r])[v]`.
pub fn cross_entropy(logits: &[f64], labels: &[f64], nv: usize) -> f64 {
    let rows = logits.len() / nv;
    let mut total = 0.0;
    for r in 0..rows {
        let z = &logits[r * nv..(r + 1) * nv];
        let mx = z.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        let lse = mx + z.iter().map(|v| (v - mx).exp()).sum::<f64>().ln();
        total -= (0..nv).map(|v| labels[r * nv + v] * (z[v] - lse)).sum::<f64>();
    }
    total / rows as f64
}

/// `ggml_permute(x, axes)` made contiguous: dimension `d` of `x` becomes dimension `axes[d]`.
pub fn permute(x: &[f64], ne: [usize; 4], axes: [usize; 4]) -> (Vec<f64>, [usize; 4]) {
    let mut pn = [0usize; 4];
    for d in 0..4 {
        pn[axes[d]] = ne[d];
    }
    let mut out = vec![0.0; x.len()];
    for_each(ne, |i0, i1, i2, i3| {
        let mut j = [0usize; 4];
        for (d, &i) in [i0, i1, i2, i3].iter().enumerate() {
            j[axes[d]] = i;
        }
        out[at(pn, j[0], j[1], j[2], j[3])] = x[at(ne, i0, i1, i2, i3)];
    });
    (out, pn)
}
