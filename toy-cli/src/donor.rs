//! Donor embeddings for the warm-start recipe: a bigger model's token table,
//! mapped onto the student's vocabulary, feeding a projection lens.

use crate::error::{input, Result};
use crate::model::{Arch, Weights};
use ggml_rs::gguf::{Array, GgufFile, Value};
use ggml_rs::DType;
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};
use std::path::Path;

/// Where the student's token table comes from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TableInit {
    /// The donor's rows, matched to the student's tokens.
    Donor,
    /// A random N(0, 0.02) table of the donor's width ("INIT=scratch" of toy 0.8.0, the Ruby predecessor).
    Scratch,
}

/// How student tokens find their donor rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MatchBy {
    /// Same token text (compared as bytes, across GPT-2 byte-level and SentencePiece spellings).
    Token,
    /// Same id (only meaningful when both models share a tokenizer).
    Index,
}

/// How the lens starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LensInit {
    /// N(0, 1/width).
    Random,
    /// The donor table's top `d_model` principal directions.
    Pca,
}

/// What to take from a donor.
#[derive(Clone, Debug)]
pub struct DonorOptions<'p> {
    pub path: &'p Path,
    pub init: TableInit,
    pub match_by: MatchBy,
    pub lens_init: LensInit,
    /// `--donor-width`: must equal the donor's width when given.
    pub width: Option<usize>,
    /// The student's RMSNorm epsilon, which bounds the table scales it can
    /// train from ([`check_scale`]).
    pub norm_eps: f32,
}

/// How well the donor's vocabulary covered the student's (`run_start`'s
/// `donor` in events.jsonl and the `--json` summary's).
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct MatchReport {
    /// Student tokens that took a donor row.
    pub matched: usize,
    /// Student tokens (the student's vocabulary).
    pub total: usize,
    /// `matched / total`.
    pub match_rate: f64,
    /// How rows were matched (`--match-by`).
    pub match_by: MatchBy,
    /// `--match-by index`: of the ids paired, how many have the same token
    /// text in both vocabularies (absent when a side has no token texts, and
    /// with `--match-by token`, where every match is by text).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub same_text: Option<usize>,
}

impl MatchReport {
    /// The line `toy train warm-start` prints about the donor at `shown`.
    pub fn line(&self, shown: &str) -> String {
        let pct = |n: usize| 100.0 * n as f64 / self.total.max(1) as f64;
        match (self.match_by, self.same_text) {
            (MatchBy::Token, _) => {
                format!("donor {shown}: {} of {} student tokens matched ({:.1}%)", self.matched, self.total, 100.0 * self.match_rate)
            }
            (MatchBy::Index, None) => format!(
                "donor {shown}: the student's {} ids paired by number with the donor's rows (--match-by index); no token texts to compare the tokenizers",
                self.total
            ),
            (MatchBy::Index, Some(same)) if same == self.total => format!(
                "donor {shown}: the student's {} ids paired by number with the donor's rows (--match-by index); every id has the same token text in both",
                self.total
            ),
            (MatchBy::Index, Some(same)) => format!(
                "donor {shown}: the student's {} ids paired by number with the donor's rows (--match-by index), but the tokenizers differ: {same} of them ({:.1}%) have the same token text in both (--match-by token pairs by text)",
                self.total,
                pct(same)
            ),
        }
    }
}

/// A donor's table mapped onto the student's vocabulary, ready to upload.
#[derive(Clone, Debug)]
pub struct Donor {
    /// Row-major `[vocab][width]` (ggml ne `[width, vocab]`).
    pub table: Vec<f32>,
    pub width: usize,
    /// Initial lens, row-major `[d_model][width]`, when initialised by PCA.
    pub lens: Option<Vec<f32>>,
    pub report: Option<MatchReport>,
    /// Hex SHA-256 of the donor's file, as the run records it
    /// (config.toml's `donor_sha256`); set by the recipe that reads it.
    pub sha256: Option<String>,
}

/// The bytes a vocabulary entry stands for: GPT-2 byte-level spelling
/// (`Ġthe`), SentencePiece (`▁the`, `<0x0A>`), or plain text.
pub fn token_bytes(tok: &str) -> Vec<u8> {
    if let Some(hex) = tok.strip_prefix("<0x").and_then(|r| r.strip_suffix('>')) {
        if let Ok(b) = u8::from_str_radix(hex, 16) {
            return vec![b];
        }
    }
    let inv = byte_level_inverse();
    if tok.chars().all(|c| inv.contains_key(&c)) && !tok.contains('▁') {
        return tok.chars().map(|c| inv[&c]).collect();
    }
    tok.replace('▁', " ").into_bytes()
}

fn byte_level_inverse() -> &'static std::collections::HashMap<char, u8> {
    static MAP: std::sync::OnceLock<std::collections::HashMap<char, u8>> = std::sync::OnceLock::new();
    MAP.get_or_init(|| (0..=255u8).map(|b| (crate::data::tokenizer::byte_to_unicode(b), b)).collect())
}

fn gguf_tokens(f: &GgufFile) -> Option<Vec<String>> {
    match f.get("tokenizer.ggml.tokens") {
        Some(Value::Array(Array::String(t))) => Some(t.clone()),
        _ => None,
    }
}

/// A donor is checked as strictly as a checkpoint: a llama, qwen2 or gpt2 file's every
/// tensor against its keys ([`crate::formats::checkpoint::model_config`]); another
/// architecture's width and block count, where its keys give them.
fn check_keys(f: &GgufFile, width: usize, what: &str) -> Result<()> {
    let Ok(arch) = f.get_str("general.architecture") else { return Ok(()) };
    let keys = ["embedding_length", "block_count", "attention.head_count", "feed_forward_length", "context_length"];
    if Arch::from_name(arch).is_some() && keys.iter().all(|k| f.get(&format!("{arch}.{k}")).is_some()) {
        return crate::formats::checkpoint::model_config(f, what).map(|_| ());
    }
    if let Ok(h) = f.get_u64(&format!("{arch}.attention.head_count")) {
        if h == 0 || width % h as usize != 0 {
            return Err(input(format!("{what}: {arch}.attention.head_count = {h} does not divide the width {width}")));
        }
    }
    if let Ok(w) = f.get_u64(&format!("{arch}.embedding_length")) {
        if w as usize != width {
            return Err(input(format!("{what}: token_embd.weight is {width} wide, but {arch}.embedding_length says {w}")));
        }
    }
    if let Ok(n) = f.get_u64(&format!("{arch}.block_count")) {
        let past = f.tensors().iter().find(|t| {
            t.name.strip_prefix("blk.").and_then(|r| r.split('.').next()).and_then(|b| b.parse::<u64>().ok()).is_some_and(|b| b >= n)
        });
        if let Some(t) = past {
            return Err(input(format!("{what}: tensor {} is past {arch}.block_count = {n}", t.name)));
        }
    }
    Ok(())
}

/// Read the donor at `o.path` and map its table onto `student_tokens` (the
/// student's vocabulary, in id order; `None` when the student has no text
/// tokenizer) of `vocab` entries.
///
/// Unmatched rows are drawn from N(mean_row, σ²) with σ the donor table's
/// per-element standard deviation, so they look like typical donor rows.
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming the file: not a GGUF, no
/// `token_embd.weight`, a tensor type other than f32/f16/bf16/q8_0, a width that
/// contradicts `--donor-width`, or token matching without tokenizers.
pub fn load(o: &DonorOptions<'_>, student_tokens: Option<&[String]>, vocab: usize, d_model: usize, seed: u64) -> Result<Donor> {
    let (f, width, donor_vocab) = open_table(o)?;
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0xd0_0a0e);
    if o.init == TableInit::Scratch {
        let n = Normal::new(0.0f32, 0.02).expect("valid");
        let table = (0..vocab * width).map(|_| n.sample(&mut rng)).collect();
        return Ok(Donor { table, width, lens: None, report: None, sha256: None });
    }
    let p = o.path.display();
    let src = f.tensor_f32("token_embd.weight").map_err(|e| input(format!("--donor {e}")))?;
    if let Some(i) = src.iter().position(|x| !x.is_finite()) {
        return Err(input(format!(
            "--donor {p}: token_embd.weight holds a non-finite value ({}) in row {} (token id {}); the donor is broken",
            src[i],
            i / width,
            i / width
        )));
    }
    check_scale(&src, width, d_model, o.norm_eps, &p.to_string())?;
    let lens = match o.lens_init {
        LensInit::Pca => {
            if d_model > width {
                crate::note!(
                    "note: --lens-init pca: the donor's {width}-wide embeddings have {width} principal directions; the lens's other {} rows of d_model {d_model} are small random directions",
                    d_model - width
                );
            }
            Some(pca_rows(&src, width, d_model.min(width), d_model, seed))
        }
        LensInit::Random => None,
    };
    let rows = match_rows(o, &f, student_tokens, vocab, donor_vocab)?;
    let (table, matched) = fill_table(&src, width, &rows, &mut rng);
    let same_text = match (o.match_by, student_tokens, gguf_tokens(&f)) {
        (MatchBy::Index, Some(st), Some(dt)) => {
            Some(st.iter().zip(&dt).take(vocab).filter(|(a, b)| token_bytes(a) == token_bytes(b)).count())
        }
        _ => None,
    };
    let match_rate = matched as f64 / vocab.max(1) as f64;
    let report = MatchReport { matched, total: vocab, match_rate, match_by: o.match_by, same_text };
    Ok(Donor { table, width, lens, report: Some(report), sha256: None })
}

/// Refuse a donor table (`src`, rows of `width`) that a student of `d_model`
/// with RMSNorm epsilon `eps` cannot train from. The student's input is a row
/// of table·lensᵀ, which keeps the table's RMS `r` (a PCA lens is orthonormal
/// on the top directions, a random one N(0, 1/width)), fed to RMSNorm
/// x/√(mean x² + ε). A llama has no biases: when its input vanishes every
/// activation and gradient vanishes with it (loss ln V, gradient 0), so:
/// - every row the same (all zeros, a constant): no token told from another,
///   no principal direction for a PCA lens (the covariance is 0, the lens 0);
/// - `r` below 10⁻³·√ε: RMSNorm scales the rows to an RMS below 10⁻³, and
///   with them every gradient (a table scaled by 1e-30 gives exact zeros in f32);
/// - `r²` times the wider of `width` and `d_model` beyond f32's range: the
///   sums of squares of the projection and of RMSNorm are inf, and the
///   normalised rows 0 (a table scaled by 1e22).
///
/// # Errors
/// [`Error::Input`](crate::error::Error::Input) naming the donor `p` and the bound.
pub fn check_scale(src: &[f32], width: usize, d_model: usize, eps: f32, p: &str) -> Result<()> {
    let n = src.len().max(1) as f64;
    let rms = (src.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / n).sqrt();
    let rows = src.len() / width.max(1);
    // Column means in one pass over the rows as they lie (not a strided pass a column).
    let mut mean = vec![0f64; width];
    for row in src.chunks_exact(width.max(1)) {
        mean.iter_mut().zip(row).for_each(|(m, &x)| *m += x as f64);
    }
    mean.iter_mut().for_each(|m| *m /= rows.max(1) as f64);
    let std = (src.iter().enumerate().map(|(i, &x)| (x as f64 - mean[i % width]).powi(2)).sum::<f64>() / n).sqrt();
    let what = format!("--donor {p}: token_embd.weight");
    if rms == 0.0 {
        return Err(input(format!(
            "{what} is all zeros: the student's input would be 0 for every token and nothing would train (a llama has no biases); not a trained model's table"
        )));
    }
    if std <= 1e-6 * rms {
        return Err(input(format!(
            "{what} has every row the same: it tells no token from another, and a PCA lens has no direction to take; not a trained model's table"
        )));
    }
    let low = 1e-3 * (eps as f64).sqrt();
    if rms < low {
        return Err(input(format!(
            "{what} is too small (RMS {rms:.1e}, below {low:.1e}): the student's RMSNorm (eps {eps}) would scale every token's row, and every gradient, below 1e-3 of the unit RMS it trains at; trained embeddings have an RMS of about 0.01 to 1"
        )));
    }
    let high = (f32::MAX as f64 / width.max(d_model) as f64).sqrt();
    if rms > high {
        return Err(input(format!(
            "{what} is too large (RMS {rms:.1e}, above {high:.1e}): a row's sum of squares overflows f32, so RMSNorm would make every token's row 0; trained embeddings have an RMS of about 0.01 to 1"
        )));
    }
    Ok(())
}

/// The donor file at `o.path` with its token table's width and rows, once
/// the table's type and shape, the file's keys and `--donor-width` agree.
fn open_table(o: &DonorOptions<'_>) -> Result<(GgufFile, usize, usize)> {
    let p = o.path.display();
    let path = crate::files::file_or_run(o.path, "--donor")?;
    if !path.exists() {
        return Err(input(format!("--donor {p}: no such file")));
    }
    if !path.is_file() {
        return Err(input(format!("--donor {p}: not a regular file")));
    }
    let f = GgufFile::open(&path).map_err(|e| input(format!("--donor {e}")))?;
    crate::formats::checkpoint::refuse_state(&f, &path).map_err(|e| input(format!("--donor {e}")))?;
    if crate::formats::adapter::is_adapter(&f) {
        return Err(input(format!("--donor {p}: a LoRA adapter, not a model; merge it first (toy export merge)")));
    }
    let info = f
        .tensor("token_embd.weight")
        .ok_or_else(|| input(format!("--donor {p}: no token_embd.weight tensor (not a llama-family model?)")))?;
    if !matches!(info.dtype, DType::F32 | DType::F16 | DType::BF16 | DType::Q8_0) {
        return Err(input(format!("--donor {p}: token_embd.weight is {}, only f32, f16, bf16 and q8_0 are supported", info.dtype)));
    }
    let (width, donor_vocab) = (info.ne[0] as usize, info.ne[1] as usize);
    if info.ne[2] != 1 || info.ne[3] != 1 || width == 0 || donor_vocab == 0 {
        return Err(input(format!("--donor {p}: token_embd.weight has shape {:?}, expected [width, vocab]", info.shape())));
    }
    check_keys(&f, width, &format!("--donor {p}"))?;
    if let Some(w) = o.width.filter(|&w| w != width) {
        return Err(input(format!("--donor-width {w} does not match the donor's embedding width {width} ({p})")));
    }
    Ok((f, width, donor_vocab))
}

/// For each of the `vocab` student tokens, the donor row it takes (`None`:
/// unmatched), by index or by token text (`o.match_by`).
fn match_rows(
    o: &DonorOptions<'_>,
    f: &GgufFile,
    student_tokens: Option<&[String]>,
    vocab: usize,
    donor_vocab: usize,
) -> Result<Vec<Option<usize>>> {
    match o.match_by {
        MatchBy::Index => {
            if vocab > donor_vocab {
                return Err(input(format!(
                    "--match-by index: the student vocabulary ({vocab}) is larger than the donor's ({donor_vocab})"
                )));
            }
            Ok((0..vocab).map(Some).collect())
        }
        MatchBy::Token => {
            let st = student_tokens
                .ok_or_else(|| input("token matching needs a corpus with a tokenizer (use toy prep, raw text, or --match-by index)"))?;
            let dt = gguf_tokens(f).ok_or_else(|| {
                input(format!("--donor {}: no tokenizer.ggml.tokens to match against (use --match-by index)", o.path.display()))
            })?;
            let mut by_bytes = std::collections::HashMap::new();
            for (i, t) in dt.iter().enumerate().take(donor_vocab) {
                by_bytes.entry(token_bytes(t)).or_insert(i);
            }
            Ok(st.iter().take(vocab).map(|t| by_bytes.get(&token_bytes(t)).copied()).chain(std::iter::repeat(None)).take(vocab).collect())
        }
    }
}

/// The student's table (`rows.len()` rows of `width`): matched rows copied
/// from the donor's `src`, the others drawn from N(mean_row, σ²) with σ the
/// donor table's per-element standard deviation; and how many matched.
fn fill_table(src: &[f32], width: usize, rows: &[Option<usize>], rng: &mut rand::rngs::StdRng) -> (Vec<f32>, usize) {
    let donor_vocab = src.len() / width;
    let mean: Vec<f32> =
        (0..width).map(|c| (0..donor_vocab).map(|r| src[r * width + c] as f64).sum::<f64>() as f32 / donor_vocab as f32).collect();
    let var = src.iter().enumerate().map(|(i, &x)| ((x - mean[i % width]) as f64).powi(2)).sum::<f64>() / src.len() as f64;
    let noise = Normal::new(0.0f32, (var.sqrt() as f32).max(1e-6)).expect("valid");
    let mut table = vec![0f32; rows.len() * width];
    let mut matched = 0usize;
    for (v, row) in rows.iter().enumerate() {
        let dst = &mut table[v * width..(v + 1) * width];
        match row {
            Some(r) => {
                dst.copy_from_slice(&src[r * width..(r + 1) * width]);
                matched += 1;
            }
            None => dst.iter_mut().zip(&mean).for_each(|(d, &m)| *d = m + noise.sample(&mut *rng)),
        }
    }
    (table, matched)
}

/// The top `k` principal directions of the rows of `x` (`n × w`, row-major),
/// by block power iteration on the covariance, as `d` rows of width `w`
/// (rows past `k`, when `d > w`, are small random directions).
fn pca_rows(x: &[f32], w: usize, k: usize, d: usize, seed: u64) -> Vec<f32> {
    let n = x.len() / w;
    let mean: Vec<f64> = (0..w).map(|c| (0..n).map(|r| x[r * w + c] as f64).sum::<f64>() / n as f64).collect();
    let mut cov = vec![0f64; w * w];
    for r in 0..n {
        let row: Vec<f64> = (0..w).map(|c| x[r * w + c] as f64 - mean[c]).collect();
        for i in 0..w {
            let ri = row[i];
            for j in i..w {
                cov[i * w + j] += ri * row[j];
            }
        }
    }
    for i in 0..w {
        for j in 0..i {
            cov[i * w + j] = cov[j * w + i];
        }
    }
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed ^ 0x9ca);
    let g = Normal::new(0.0f64, 1.0).expect("valid");
    let mut q: Vec<Vec<f64>> = (0..k).map(|_| (0..w).map(|_| g.sample(&mut rng)).collect()).collect();
    orthonormalize(&mut q);
    for _ in 0..50 {
        q = q.iter().map(|v| (0..w).map(|i| (0..w).map(|j| cov[i * w + j] * v[j]).sum()).collect()).collect();
        orthonormalize(&mut q);
    }
    let mut out = Vec::with_capacity(d * w);
    for v in &q {
        out.extend(v.iter().map(|&x| x as f32));
    }
    let small = Normal::new(0.0f32, 1e-3).expect("valid");
    while out.len() < d * w {
        out.push(small.sample(&mut rand::rngs::StdRng::seed_from_u64(out.len() as u64)));
    }
    out
}

/// Modified Gram-Schmidt on the rows of `q`.
fn orthonormalize(q: &mut [Vec<f64>]) {
    for i in 0..q.len() {
        for j in 0..i {
            let dot: f64 = q[i].iter().zip(&q[j]).map(|(a, b)| a * b).sum();
            let qj = q[j].clone();
            q[i].iter_mut().zip(&qj).for_each(|(a, b)| *a -= dot * b);
        }
        let norm = q[i].iter().map(|a| a * a).sum::<f64>().sqrt().max(1e-12);
        q[i].iter_mut().for_each(|a| *a /= norm);
    }
}

impl Donor {
    /// Write the table (and the PCA lens) into the student's weights.
    pub fn apply(&self, w: &Weights<'_>) -> Result<()> {
        if w.config().arch == Arch::Llama {
            w.tensor("token_embd.weight")?.write(&self.table)?;
            if let (Some((l, _)), Some(init)) = (w.lens(), &self.lens) {
                l.write(init)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spellings_agree() {
        assert_eq!(token_bytes("Ġthe"), b" the".to_vec());
        assert_eq!(token_bytes("▁the"), b" the".to_vec());
        assert_eq!(token_bytes("<0x0A>"), b"\n".to_vec());
        assert_eq!(token_bytes("Ċ"), b"\n".to_vec());
        assert_eq!(token_bytes("cat"), b"cat".to_vec());
    }

    #[test]
    fn pca_finds_the_main_axis() {
        // Points spread along (1, 1, 0)/√2 with little noise.
        let mut x = Vec::new();
        for i in 0..200 {
            let t = (i as f32 - 100.0) / 10.0;
            x.extend([t + 0.01 * (i % 3) as f32, t, 0.02 * (i % 5) as f32]);
        }
        let p = pca_rows(&x, 3, 1, 1, 0);
        let s = std::f32::consts::FRAC_1_SQRT_2;
        assert!((p[0].abs() - s).abs() < 1e-2 && (p[1].abs() - s).abs() < 1e-2 && p[2].abs() < 1e-2, "{p:?}");
    }
}
