//! Initial weights: GPT-2's scheme as nanoGPT applies it.
//!
//! Matrices and embeddings ~ N(0, 0.02); the residual projections
//! (`attn_output`, `ffn_down`) ~ N(0, 0.02/√(2·n_layers)) (Radford et al. 2019,
//! §2.3); norm gains 1, biases 0; a projection lens ~ N(0, 1/√donor_width) so the
//! projected embedding keeps the table's scale. Values come from one ChaCha
//! stream seeded with `seed`, drawn parameter by parameter in the table's
//! parameter order: the same seed gives the same weights on every machine.
//! Which scheme a parameter gets is its table's [`Init`].

use super::table::Init;
use super::{Param, Weights};
use rand::SeedableRng;
use rand_distr::{Distribution, Normal};

/// Initial values of one parameter, from its table's [`Init`] and its shape.
fn values(p: &Param<'_>, n_layers: usize, rng: &mut rand::rngs::StdRng) -> Vec<f32> {
    let n = p.tensor.nelements() as usize;
    let std = match p.init {
        Init::Ones => return vec![1.0; n],
        Init::Zeros => return vec![0.0; n],
        Init::Normal => 0.02,
        Init::Residual => 0.02 / ((2 * n_layers) as f32).sqrt(),
        Init::Lens => 1.0 / (p.tensor.ne()[0] as f32).sqrt(),
    };
    let dist = Normal::new(0.0f32, std).expect("positive std");
    (0..n).map(|_| dist.sample(rng)).collect()
}

/// Write initial values into every (allocated) parameter of `w`.
pub fn init_weights(w: &Weights<'_>, seed: u64) -> ggml_rs::Result<()> {
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let n_layers = w.config().n_layers;
    for p in w.params() {
        p.tensor.write(&values(&p, n_layers, &mut rng))?;
    }
    Ok(())
}
