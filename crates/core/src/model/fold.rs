//! A norm's weight folded into the weights that read from it (TransformerLens's `fold_ln`): what
//! the circuits read in folded mode, and what a backend applies to X before a product with it.
//! Here, below both, so that neither the analysis nor the backends reach into the other for it.

use nalgebra::DMatrix;

use super::{Norm, NormKind};

/// Applies a norm's fold to a reading weight `w` (d_model x n): rows scaled by the norm
/// weight, then (LayerNorm only) each column centred over d_model, since LayerNorm's output
/// has zero mean and so cannot see the mean of a reading weight.
pub fn fold_reading(norm: &Norm, kind: NormKind, w: &mut DMatrix<f64>) {
    scale_rows(norm, w);
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
    scale_rows(norm, w);
}

/// Row i of `w` times the norm's weight i (column by column: the matrix is column-major).
fn scale_rows(norm: &Norm, w: &mut DMatrix<f64>) {
    for mut column in w.column_iter_mut() {
        for (value, &weight) in column.iter_mut().zip(&norm.weight) {
            *value *= weight as f64;
        }
    }
}
