//! The token-space OV circuit read entry by entry (docs/methods.md#4-ov-token-logits): entry (i, j) of
//! `W_E W_V W_O W_U` is how much attending to token i raises the logit of token j.
//! Computed as `A[i,:] · B[:,j]` with A = W_E W_V (vocab x d_head), B = W_O W_U
//! (d_head x vocab); the vocab x vocab matrix is never formed.

use nalgebra::DMatrix;

use super::HeadId;
use super::Mode;
use super::circuits::{Circuits, HeadWeights, fold_reading};
use crate::model::{LoadParts, VOCAB_BLOCK, Weights};
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
    pub fn new(circuits: &Circuits, id: HeadId) -> Result<Self> {
        Self::read(circuits.model, &circuits.head_weights(id), circuits.mode)
    }

    /// A head's view read from the model: its layer's attention, then W_E / W_U a block of
    /// tokens at a time (no Grams needed).
    pub fn of_head(model: &(impl Weights + ?Sized), id: HeadId, mode: Mode) -> Result<Self> {
        let layer = model.layer(id.layer, LoadParts::Circuits)?;
        let weights = HeadWeights::new(model.config(), &layer, model.ln_final(), id.head, mode);
        Self::read(model, &weights, mode)
    }

    /// From a head's weights and the model's W_E / W_U, read a block of tokens at a time
    /// (a streamed model never holds either whole; only the two vocab x d_head sides are kept).
    pub fn read(model: &(impl Weights + ?Sized), weights: &HeadWeights, mode: Mode) -> Result<Self> {
        let config = model.config();
        let vocab = config.vocab;
        let w_v = weights.w_v.map(|v| v as f32);
        // B = (W_O T) W_U, where T folds ln_final (identity in raw mode).
        let o_t = weights.w_o_unembed.map(|v| v as f32);
        let mut embed_side = DMatrix::zeros(vocab, w_v.ncols());
        let mut unembed_side = DMatrix::zeros(o_t.nrows(), vocab);
        let (mut embed_norms, mut unembed_norms) = (Vec::with_capacity(vocab), Vec::with_capacity(vocab));
        for start in (0..vocab).step_by(VOCAB_BLOCK) {
            let rows = start..(start + VOCAB_BLOCK).min(vocab);
            let embed = model.embedding_rows(rows.clone())?;
            embed_side.rows_mut(start, rows.len()).copy_from(&(&embed * &w_v));
            embed_norms.extend(embed.row_iter().map(|r| r.norm()));
            // W_U's columns for these tokens, as rows (W_E's rows when tied).
            let unembed = if model.tied() { embed } else { model.unembedding_rows(rows.clone())? };
            unembed_side.columns_mut(start, rows.len()).copy_from(&(&o_t * unembed.transpose()));
            unembed_norms.extend(unembed.row_iter().map(|row| {
                let mut column = DMatrix::from_iterator(row.len(), 1, row.iter().map(|&v| v as f64));
                if mode == Mode::Folded {
                    fold_reading(model.ln_final(), config.norm, &mut column);
                }
                column.norm() as f32
            }));
        }
        Ok(OvTokenLogits { embed_side, unembed_side, embed_norms, unembed_norms })
    }

    /// The memory this view holds.
    pub fn bytes(&self) -> u64 {
        let elements =
            self.embed_side.len() + self.unembed_side.len() + self.embed_norms.len() + self.unembed_norms.len();
        4 * elements as u64
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

    /// The OV circuit as a token x token matrix over `tokens` (see [`MatrixTokens`]): row i is
    /// what attending to token `tokens[i]` does to the logit of each token `tokens[j]`. Only
    /// the chosen tokens' entries are computed (k^2 dot products of length d_head).
    pub fn matrix(&self, tokens: MatrixTokens) -> Result<OvMatrix> {
        let vocab = self.vocab();
        let ids = match tokens {
            MatrixTokens::All if vocab > MATRIX_MAX => {
                return Err(Error::Invalid(format!(
                    "the OV matrix of all {vocab} tokens is too large to show (at most {MATRIX_MAX}): choose the top k tokens by self-copy logit"
                )));
            }
            MatrixTokens::All => (0..vocab).collect(),
            MatrixTokens::Top(0) => {
                return Err(Error::Invalid("top k for the OV matrix must be at least 1".into()));
            }
            MatrixTokens::Top(k) if k > vocab.min(MATRIX_MAX) => {
                return Err(Error::Invalid(format!(
                    "top k = {k} for the OV matrix is more than {} ({})",
                    vocab.min(MATRIX_MAX),
                    if k > vocab { format!("the vocabulary has {vocab} tokens") } else { "the most it shows".into() }
                )));
            }
            MatrixTokens::Top(k) => top_k(&self.diagonal(), k),
        };
        let values = ids
            .iter()
            .map(|&from| ids.iter().map(|&to| self.entry(from, to)).collect::<Result<Vec<f64>>>())
            .collect::<Result<Vec<Vec<f64>>>>()?;
        Ok(OvMatrix { tokens: ids, values })
    }

    /// What attending to `from` does to every token's logit.
    pub fn row(&self, from: usize) -> Result<Vec<f64>> {
        self.check(from)?;
        Ok((0..self.vocab()).map(|j| self.entry(from, j).expect("in range")).collect())
    }
}

/// The most tokens the OV matrix view shows on a side (k^2 entries travel to the page).
pub const MATRIX_MAX: usize = 1024;

/// Which tokens the OV matrix covers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MatrixTokens {
    /// Every token, in id order (small vocabularies: the demo's 84 characters).
    All,
    /// The k tokens with the largest self-copy logits (the diagonal), largest first.
    Top(usize),
}

/// A square block of the token-space OV circuit.
#[derive(Clone, Debug, PartialEq)]
pub struct OvMatrix {
    /// Token ids of the rows (source tokens) and, in the same order, the columns (logits).
    pub tokens: Vec<usize>,
    /// `values[i][j]`: attending to `tokens[i]` raises the logit of `tokens[j]` by this much.
    pub values: Vec<Vec<f64>>,
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
