//! The weight-space circuits of every head (spec section 1), in f64, with LayerNorm folded
//! the way TransformerLens's `fold_ln=True` does (`center_writing_weights=False,
//! center_unembed=False`) or raw. The three d_model x d_model Gram matrices of the embedding
//! and unembedding are computed once per model; every head then costs O(d_model² · d_head).

use nalgebra::DMatrix;

use super::HeadId;
use super::spectrum::Factored;
use crate::model::{Model, Norm, NormKind};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
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

/// The embedding/unembedding Gram matrices: `W_E^T W_E`, `W_U W_E`, `W_U W_U^T` (raw).
pub struct Grams {
    pub embed: DMatrix<f64>,
    pub cross: DMatrix<f64>,
    pub unembed: DMatrix<f64>,
}

impl Grams {
    /// The one vocabulary-sized cost of the whole fingerprint. f32 products (as the weights
    /// are f32 at best), accumulated by matrixmultiply's blocked kernels, then widened.
    pub fn compute(model: &Model) -> Grams {
        let embed = model.w_e.tr_mul(&model.w_e).cast::<f64>();
        match &model.w_u {
            None => Grams { cross: embed.clone(), unembed: embed.clone(), embed },
            Some(w_u) => Grams { cross: (w_u * &model.w_e).cast::<f64>(), unembed: (w_u * w_u.transpose()).cast::<f64>(), embed },
        }
    }
}

/// Every circuit of every head in one mode.
pub struct Circuits<'m> {
    pub model: &'m Model,
    pub mode: Mode,
    gram_embed: DMatrix<f64>,
    /// `W_U' W_E` with the final norm folded into W_U.
    cross: DMatrix<f64>,
    /// `W_U' W_U'^T`.
    gram_unembed: DMatrix<f64>,
}

/// One head's weights, as f64 and in the chosen mode.
pub struct HeadWeights {
    pub w_q: DMatrix<f64>,
    pub w_k: DMatrix<f64>,
    pub w_v: DMatrix<f64>,
    pub w_o: DMatrix<f64>,
}

impl<'m> Circuits<'m> {
    pub fn new(model: &'m Model, grams: &Grams, mode: Mode) -> Self {
        let mut cross = grams.cross.clone();
        let mut gram_unembed = grams.unembed.clone();
        if mode == Mode::Folded {
            // W_U' = T W_U with T the fold of ln_final, so C' = T C and G_U' = T G_U T^T.
            let kind = model.config.norm;
            fold_reading(&model.ln_final, kind, &mut cross);
            fold_reading(&model.ln_final, kind, &mut gram_unembed);
            let mut transposed = gram_unembed.transpose();
            fold_reading(&model.ln_final, kind, &mut transposed);
            gram_unembed = transposed.transpose();
        }
        Circuits { model, mode, gram_embed: grams.embed.clone(), cross, gram_unembed }
    }

    pub fn head_weights(&self, id: HeadId) -> HeadWeights {
        let config = &self.model.config;
        let layer = &self.model.layers[id.layer];
        let d_head = config.d_head;
        let (q_start, kv_start) = (id.head * d_head, config.kv_head_of(id.head) * d_head);
        let reading = |w: &DMatrix<f32>, start: usize| {
            let mut block = w.columns(start, d_head).map(f64::from);
            if self.mode == Mode::Folded {
                fold_reading(&layer.ln1, config.norm, &mut block);
            }
            block
        };
        HeadWeights {
            w_q: reading(&layer.attention.w_q, q_start),
            w_k: reading(&layer.attention.w_k, kv_start),
            w_v: reading(&layer.attention.w_v, kv_start),
            w_o: layer.attention.w_o.rows(q_start, d_head).map(f64::from),
        }
    }

    /// QK in residual space: `W_Q W_K^T` (A = W_Q, B = W_K^T).
    pub fn qk(&self, w: &HeadWeights) -> Factored {
        Factored { small: w.w_k.tr_mul(&w.w_q), gram_left: w.w_q.tr_mul(&w.w_q), gram_right: w.w_k.tr_mul(&w.w_k) }
    }

    /// OV in residual space: `W_V W_O` (A = W_V, B = W_O).
    pub fn ov_residual(&self, w: &HeadWeights) -> Factored {
        Factored { small: &w.w_o * &w.w_v, gram_left: w.w_v.tr_mul(&w.w_v), gram_right: &w.w_o * w.w_o.transpose() }
    }

    /// OV in token space: `W_E W_V W_O W_U` (A = W_E W_V, B = W_O W_U), through the Grams.
    pub fn ov_token(&self, w: &HeadWeights) -> Factored {
        let o_unembed = &w.w_o * &self.gram_unembed;
        Factored {
            small: &w.w_o * (&self.cross * &w.w_v),
            gram_left: w.w_v.tr_mul(&(&self.gram_embed * &w.w_v)),
            gram_right: o_unembed * w.w_o.transpose(),
        }
    }
}
