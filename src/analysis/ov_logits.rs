//! The token-space OV circuit read entry by entry (spec section 3): entry (i, j) of
//! `W_E W_V W_O W_U` is how much attending to token i raises the logit of token j.
//! Computed as `A[i,:] · B[:,j]` with A = W_E W_V (vocab x d_head), B = W_O W_U
//! (d_head x vocab); the vocab x vocab matrix is never formed.

use nalgebra::DMatrix;

use super::HeadId;
use super::circuits::{Circuits, fold_reading};
use crate::{Error, Result};

pub struct OvTokenLogits {
    /// vocab x d_head.
    embed_side: DMatrix<f32>,
    /// d_head x vocab.
    unembed_side: DMatrix<f32>,
    /// ||W_E[i,:]||.
    embed_norms: Vec<f32>,
    /// ||W_U[:,i]|| of the unembedding in the chosen mode (final norm folded or not).
    unembed_norms: Vec<f32>,
}

impl OvTokenLogits {
    pub fn new(circuits: &Circuits, id: HeadId) -> Self {
        let model = circuits.model;
        let weights = circuits.head_weights(id);
        let embed_side = &model.w_e * weights.w_v.cast::<f32>();
        // B = (W_O T) W_U, where T folds ln_final (identity in raw mode).
        let o_t = weights.w_o_unembed.cast::<f32>();
        let unembed_side = match &model.w_u {
            Some(w_u) => &o_t * w_u,
            None => (&model.w_e * o_t.transpose()).transpose(),
        };
        let embed_norms = model.w_e.row_iter().map(|r| r.norm()).collect();
        let unembed_norms = (0..model.config.vocab)
            .map(|j| {
                let column: Vec<f64> = match &model.w_u {
                    Some(w_u) => w_u.column(j).iter().map(|&v| v as f64).collect(),
                    None => model.w_e.row(j).iter().map(|&v| v as f64).collect(),
                };
                let mut column = DMatrix::from_vec(column.len(), 1, column);
                if circuits.mode == super::Mode::Folded {
                    fold_reading(&model.ln_final, model.config.norm, &mut column);
                }
                column.norm() as f32
            })
            .collect();
        OvTokenLogits { embed_side, unembed_side, embed_norms, unembed_norms }
    }

    pub fn vocab(&self) -> usize {
        self.embed_side.nrows()
    }

    fn check(&self, token: usize) -> Result<()> {
        if token < self.vocab() { Ok(()) } else { Err(Error::TokenOutOfRange { id: token, vocab: self.vocab() }) }
    }

    /// How much attending to `from` raises the logit of `to`.
    pub fn entry(&self, from: usize, to: usize) -> Result<f64> {
        self.check(from)?;
        self.check(to)?;
        Ok(self
            .embed_side
            .row(from)
            .iter()
            .zip(self.unembed_side.column(to).iter())
            .map(|(a, b)| *a as f64 * *b as f64)
            .sum())
    }

    /// Self-copy logits (the diagonal).
    pub fn diagonal(&self) -> Vec<f64> {
        (0..self.vocab()).map(|i| self.entry(i, i).expect("in range")).collect()
    }

    /// Diagonal divided by ||W_E[i,:]|| · ||W_U[:,i]||.
    pub fn normalised_diagonal(&self) -> Vec<f64> {
        self.diagonal()
            .iter()
            .enumerate()
            .map(|(i, d)| {
                let norms = self.embed_norms[i] as f64 * self.unembed_norms[i] as f64;
                if norms > 0.0 { d / norms } else { 0.0 }
            })
            .collect()
    }

    /// What attending to `from` does to every token's logit.
    pub fn row(&self, from: usize) -> Result<Vec<f64>> {
        self.check(from)?;
        Ok((0..self.vocab()).map(|j| self.entry(from, j).expect("in range")).collect())
    }
}

/// Indices of the k largest values, largest first.
pub fn top_k(values: &[f64], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[b].total_cmp(&values[a]));
    order.truncate(k);
    order
}

/// Indices of the k smallest values, smallest first.
pub fn bottom_k(values: &[f64], k: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    order.truncate(k);
    order
}
