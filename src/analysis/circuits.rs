//! The weight-space circuits of every head (spec section 1), in f64, with LayerNorm folded
//! the way TransformerLens's `fold_ln=True` does (`center_writing_weights=False,
//! center_unembed=False`) or raw. The three d_model x d_model Gram matrices of the embedding
//! and unembedding are computed once per model; every head then costs O(d_model² · d_head).

use nalgebra::DMatrix;

use super::HeadId;
use super::spectrum::Factored;
use crate::model::{Model, Norm, NormKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    /// Norm weights folded into the reading weights (and centred for LayerNorm models).
    #[default]
    Folded,
    /// Weights exactly as stored.
    Raw,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Folded => "folded",
            Mode::Raw => "raw",
        }
    }
}

/// Applies a norm's fold to a reading weight `w` (d_model x n): rows scaled by the norm
/// weight, then (LayerNorm only) each column centred over d_model, since LayerNorm's output
/// has zero mean and so cannot see the mean of a reading weight.
pub fn fold_reading(norm: &Norm, kind: NormKind, w: &mut DMatrix<f64>) {
    for (i, mut row) in w.row_iter_mut().enumerate() {
        row *= norm.weight[i] as f64;
    }
    if kind == NormKind::LayerNorm {
        for mut column in w.column_iter_mut() {
            let mean = column.mean();
            column.add_scalar_mut(-mean);
        }
    }
}

/// Applies the transpose of that fold, `D P`, to `w` (centre columns, then scale rows): what
/// a weight that writes into the folded unembedding meets, since `(W_O T)^T = T^T W_O^T`.
pub fn fold_reading_transposed(norm: &Norm, kind: NormKind, w: &mut DMatrix<f64>) {
    if kind == NormKind::LayerNorm {
        for mut column in w.column_iter_mut() {
            let mean = column.mean();
            column.add_scalar_mut(-mean);
        }
    }
    for (i, mut row) in w.row_iter_mut().enumerate() {
        row *= norm.weight[i] as f64;
    }
}

/// The embedding/unembedding Gram matrices: `W_E^T W_E`, `W_U W_E`, `W_U W_U^T` (raw).
/// Kept in f32 like the weights: the per-head products with them are the fingerprint's main
/// cost, and f32 gemm is 2-3x faster than f64 (their results are widened to f64 before any
/// eigen work; the error, ~1e-6 relative, is far below the 1e-4 the tests hold us to).
pub struct Grams {
    pub embed: DMatrix<f32>,
    /// `W_U W_E`; empty when tied (then it equals `embed`).
    pub cross: DMatrix<f32>,
    /// `W_U W_U^T`; empty when tied.
    pub unembed: DMatrix<f32>,
    pub tied: bool,
}

impl Grams {
    /// The one vocabulary-sized cost of the whole fingerprint. f32 products (as the weights
    /// are f32 at best), accumulated by matrixmultiply's blocked kernels, then widened.
    pub fn compute(model: &Model) -> Grams {
        // `A * B` goes through matrixmultiply's gemm; nalgebra's `tr_mul` would be a loop of
        // dot products, 20x slower at vocabulary size.
        let embed_t = model.w_e.transpose();
        let embed = &embed_t * &model.w_e;
        drop(embed_t);
        match &model.w_u {
            None => Grams { cross: DMatrix::zeros(0, 0), unembed: DMatrix::zeros(0, 0), embed, tied: true },
            Some(w_u) => Grams { cross: w_u * &model.w_e, unembed: w_u * w_u.transpose(), embed, tied: false },
        }
    }
}

/// Every circuit of every head in one mode.
pub struct Circuits<'m> {
    pub model: &'m Model,
    pub mode: Mode,
    grams: &'m Grams,
}

/// One head's weights, as f64 and in the chosen mode.
pub struct HeadWeights {
    pub w_q: DMatrix<f64>,
    pub w_k: DMatrix<f64>,
    pub w_v: DMatrix<f64>,
    pub w_o: DMatrix<f64>,
    /// `W_O T`: W_O as the folded unembedding sees it (T folds ln_final; identity when raw).
    /// Folding the final norm here rather than into W_U keeps W_U's Grams shared by both modes.
    pub w_o_unembed: DMatrix<f64>,
}

impl<'m> Circuits<'m> {
    pub fn new(model: &'m Model, grams: &'m Grams, mode: Mode) -> Self {
        Circuits { model, mode, grams }
    }

    pub fn head_weights(&self, id: HeadId) -> HeadWeights {
        let config = &self.model.config;
        let layer = &self.model.layers[id.layer];
        let d_head = config.d_head;
        let (q_start, kv_start) = (id.head * d_head, config.kv_head_of(id.head) * d_head);
        let folded = self.mode == Mode::Folded;
        let reading = |w: &DMatrix<f32>, start: usize| {
            let mut block = w.columns(start, d_head).map(f64::from);
            if folded {
                fold_reading(&layer.ln1, config.norm, &mut block);
            }
            block
        };
        let w_o = layer.attention.w_o.rows(q_start, d_head).map(f64::from);
        let mut o_transposed = w_o.transpose();
        if folded {
            fold_reading_transposed(&self.model.ln_final, config.norm, &mut o_transposed);
        }
        HeadWeights {
            w_q: reading(&layer.attention.w_q, q_start),
            w_k: reading(&layer.attention.w_k, kv_start),
            w_v: reading(&layer.attention.w_v, kv_start),
            w_o,
            w_o_unembed: o_transposed.transpose(),
        }
    }

    /// QK in residual space: `W_Q W_K^T` (A = W_Q, B = W_K^T).
    pub fn qk(&self, w: &HeadWeights) -> Factored {
        Factored { small: w.w_k.tr_mul(&w.w_q), gram_left: w.w_q.tr_mul(&w.w_q), gram_right: w.w_k.tr_mul(&w.w_k) }
    }

    /// QK in token space: `W_E W_Q W_K^T W_E^T` (A = W_E W_Q, B = W_K^T W_E^T), through the
    /// embedding Gram: `B A = W_K^T G_E W_Q`, `A^T A = W_Q^T G_E W_Q`, `B B^T = W_K^T G_E W_K`.
    /// Unlike the residual-space QK it does not depend on the residual basis: tokens fix it.
    /// W_E is never folded (as in TransformerLens); W_Q and W_K are folded in folded mode.
    pub fn qk_token(&self, w: &HeadWeights) -> Factored {
        let embed = &self.grams.embed;
        let embed_q = widened(embed, &w.w_q);
        let embed_k = widened(embed, &w.w_k);
        Factored { small: w.w_k.tr_mul(&embed_q), gram_left: w.w_q.tr_mul(&embed_q), gram_right: w.w_k.tr_mul(&embed_k) }
    }

    /// OV in residual space: `W_V W_O` (A = W_V, B = W_O).
    pub fn ov_residual(&self, w: &HeadWeights) -> Factored {
        Factored { small: &w.w_o * &w.w_v, gram_left: w.w_v.tr_mul(&w.w_v), gram_right: &w.w_o * w.w_o.transpose() }
    }

    /// OV in token space: `W_E W_V W_O W_U` (A = W_E W_V, B = W_O W_U), through the Grams:
    /// `B A = Ô C W_V`, `A^T A = W_V^T G_E W_V`, `B B^T = Ô G_U Ô^T` with Ô = W_O T.
    /// Two d_model² · d_head products per head when the unembedding is tied, three otherwise.
    pub fn ov_token(&self, w: &HeadWeights) -> Factored {
        let grams = self.grams;
        let embed_v = widened(&grams.embed, &w.w_v);
        let o_hat = &w.w_o_unembed;
        let (cross_v, unembed_o) = match grams.tied {
            true => (None, widened(&grams.embed, &o_hat.transpose())),
            false => (Some(widened(&grams.cross, &w.w_v)), widened(&grams.unembed, &o_hat.transpose())),
        };
        Factored {
            small: o_hat * cross_v.as_ref().unwrap_or(&embed_v),
            gram_left: w.w_v.tr_mul(&embed_v),
            gram_right: o_hat * unembed_o,
        }
    }
}

/// `gram · m` as an f32 gemm (the Grams are f32), widened back to f64.
fn widened(gram: &DMatrix<f32>, m: &DMatrix<f64>) -> DMatrix<f64> {
    (gram * m.map(|v| v as f32)).map(f64::from)
}
