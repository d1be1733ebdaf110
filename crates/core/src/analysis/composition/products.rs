//! Composition as layer products, the method a GPU gets (few, large products are what it is
//! fast at): every head shrinks to a writer block and three reader blocks through thin QRs, and
//! each pair of layers is one (heads·d_head)² product asked of the [`Backend`], whose d_head x
//! d_head blocks' Frobenius norms are the scores.
//!
//! With the thin QR W = Q R, ‖X W^T‖_F = ‖X R^T‖_F, so each head shrinks to one writer block
//! `R_V W_O` (d_head x d_model) and three reader blocks, `W_Q R_K^T`, `W_K R_Q^T` and
//! `W_V R_Oᵀ^T` (d_model x d_head), whose Frobenius norms are the circuits' norms; the numerator
//! of a pair is the Frobenius norm of the writer block times the reader block. No d_model x
//! d_model matrix is ever formed. QR rather than a Gram's square root keeps the condition of W,
//! not its square.

use std::sync::Arc;

use nalgebra::DMatrix;

use super::{CompositionKind, CompositionScores, r_factor, unit};
use crate::Result;
use crate::analysis::circuits::Mode;
use crate::analysis::head::HeadId;
use crate::backend::{Backend, Factor};
use crate::model::Weights;

/// One head's blocks, each scaled to unit Frobenius norm (a circuit of norm 0 stays 0, and so
/// do its scores).
struct HeadBlocks {
    /// `R_V W_O`, d_head x d_model: the writer side of W_OV.
    writer: DMatrix<f64>,
    /// `W_Q R_K^T`, `W_K R_Q^T`, `W_V R_Oᵀ^T`: the reader sides, d_model x d_head each.
    readers: [DMatrix<f64>; 3],
}

impl HeadBlocks {
    fn of(w_q: &DMatrix<f64>, w_k: &DMatrix<f64>, w_v: &DMatrix<f64>, w_o: &DMatrix<f64>) -> HeadBlocks {
        let r_o = r_factor(&w_o.transpose());
        HeadBlocks {
            writer: unit(r_factor(w_v) * w_o),
            readers: [
                unit(w_q * r_factor(w_k).transpose()),
                unit(w_k * r_factor(w_q).transpose()),
                unit(w_v * r_o.transpose()),
            ],
        }
    }
}

/// A layer's blocks side by side: the writers stacked (heads·d_head x d_model, shared so a GPU
/// keeps it for the next product) and each kind's readers (d_model x heads·d_head).
struct LayerBlocks {
    writers: Arc<DMatrix<f64>>,
    readers: DMatrix<f64>,
}

fn layer_blocks(heads: &[HeadBlocks], d_model: usize, d_head: usize) -> LayerBlocks {
    let n = heads.len();
    let mut writers = DMatrix::zeros(n * d_head, d_model);
    let mut readers = DMatrix::zeros(d_model, 3 * n * d_head);
    for (h, blocks) in heads.iter().enumerate() {
        writers.rows_mut(h * d_head, d_head).copy_from(&blocks.writer);
        for (kind, reader) in blocks.readers.iter().enumerate() {
            readers.columns_mut((kind * n + h) * d_head, d_head).copy_from(reader);
        }
    }
    LayerBlocks { writers: Arc::new(writers), readers }
}

/// The Frobenius norm of every d_head x d_head block of a layer pair's product (its rows the
/// writers, its columns each kind's readers), into `scores`.
fn add_block_norms(scores: &mut CompositionScores, product: &DMatrix<f64>, l1: usize, l2: usize, d_head: usize) {
    let heads = scores.heads;
    for kind in CompositionKind::ALL {
        for h1 in 0..heads {
            for h2 in 0..heads {
                let block = product.view((h1 * d_head, (kind.index() * heads + h2) * d_head), (d_head, d_head));
                let at = scores.index(HeadId::new(l1, h1), HeadId::new(l2, h2));
                scores.values[kind.index()][at] = block.norm();
            }
        }
    }
}

/// Every pair's scores, a layer at a time: each layer's attention is read once (no MLP or
/// vocabulary byte), its heads' blocks made, and its readers multiplied on `backend` by every
/// earlier layer's writers, which are all that is kept between layers. `each(done, layers)`
/// follows every layer.
pub(super) async fn scores(
    model: &(impl Weights + ?Sized),
    mode: Mode,
    backend: &mut Backend,
    each: &mut dyn FnMut(usize, usize),
) -> Result<CompositionScores> {
    let config = model.config();
    let (layers, heads, d_model, d_head) = (config.layers, config.heads, config.d_model, config.d_head);
    let mut scores = CompositionScores::zeros(layers, heads);
    let mut writers: Vec<Arc<DMatrix<f64>>> = Vec::with_capacity(layers);
    for l2 in 0..layers {
        let blocks = super::each_head(model, l2, mode, |w| HeadBlocks::of(&w.w_q, &w.w_k, &w.w_v, &w.w_o))?;
        let LayerBlocks { writers: layer_writers, readers } = layer_blocks(&blocks, d_model, d_head);
        for (l1, earlier) in writers.iter().enumerate() {
            let product = backend.multiply(earlier, Factor::General, &readers).await?;
            add_block_norms(&mut scores, &product, l1, l2, d_head);
        }
        writers.push(layer_writers);
        each(l2 + 1, layers);
    }
    Ok(scores)
}
