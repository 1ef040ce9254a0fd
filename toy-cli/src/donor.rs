//! Donor embeddings for the warm-start recipe.

use crate::error::Result;
use crate::model::Weights;

/// A donor's token table mapped onto the student's vocabulary.
#[derive(Clone, Debug)]
pub struct Donor {
    /// Row-major `[vocab][width]` (ggml ne `[width, vocab]`).
    pub table: Vec<f32>,
    pub width: usize,
    /// Initial lens `[d_model][width]`, when initialised by PCA.
    pub lens: Option<Vec<f32>>,
}

impl Donor {
    /// Write the table (and lens) into the student's weights.
    pub fn apply(&self, w: &Weights<'_>) -> Result<()> {
        if let Weights::Llama(m) = w {
            m.token_embd.write(&self.table)?;
            if let (Some(l), Some(init)) = (m.lens, &self.lens) {
                l.write(init)?;
            }
        }
        Ok(())
    }
}
