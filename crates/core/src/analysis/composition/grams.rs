//! Composition on the CPU through the heads' Gram matrices. ‖W_OV¹ M²‖_F² = ⟨W_OV¹ᵀ W_OV¹,
//! M² M²ᵀ⟩_F: each side is a d_model x d_model Gram of rank d_head, and a pair's squared
//! numerator is the inner product of the writer's Gram with the reader's, over their upper
//! triangles (the writer's off-diagonal doubled): d_model(d_model+1)/2 multiply-adds a pair,
//! against d_head²·d_model for the product of the two heads' factors, once each head's Gram is
//! formed (d_model²·d_head/2, a head's share of the pairs it enters). Every pair of a later layer
//! with the earlier ones is then one product of two matrices of packed Grams.
//!
//! A Gram comes from two d_head x d_model factors, never from a root: the writer's
//! W_OVᵀ W_OV = W_Oᵀ (W_Vᵀ W_V) W_O, the readers' W_Q (W_Kᵀ W_K) W_Qᵀ (Q),
//! W_K (W_Qᵀ W_Q) W_Kᵀ (K) and W_V (W_O W_Oᵀ) W_Vᵀ (V); its trace is the circuit's squared
//! Frobenius norm, which the score divides by.
//!
//! The writers' packed Grams of every earlier layer are kept until the last layer. Where they
//! would pass [`PASS_BYTES`], the packed entries are cut into passes (ranges of Gram columns),
//! each reading the layers again and forming only its own entries; the passes' sums add up.

use std::ops::Range;

use nalgebra::{DMatrix, DMatrixView, DMatrixViewMut};

use super::{CompositionKind, CompositionScores};
use crate::Result;
use crate::analysis::circuits::{HeadWeights, Mode};
use crate::analysis::head::HeadId;
use crate::backend::cpu;
use crate::model::{ModelConfig, Weights};

/// What the writers' packed Grams may hold at once (f64); more, and the work is cut into passes.
pub const PASS_BYTES: u64 = 512 << 20;

/// Gram columns formed per product: a panel of the upper triangle, its rows from the top.
const PANEL: usize = 64;

/// Packed entries per inner product: a slice of every kept writer's Grams that the layer's
/// readers all use while it is in cache.
const INNER_CHUNK: usize = 4096;

/// A d_model x d_model Gram `left right` of rank d_head: `left` d_model x d_head, `right`
/// d_head x d_model (each panel's product then reads both in their own order).
struct GramFactors {
    left: DMatrix<f64>,
    right: DMatrix<f64>,
    /// The Gram's trace: the circuit's squared Frobenius norm.
    trace: f64,
}

impl GramFactors {
    /// `xᵀ (inner) x`.
    fn around(inner: DMatrix<f64>, x: DMatrix<f64>) -> GramFactors {
        let right = inner * &x;
        let trace = x.dot(&right);
        GramFactors { left: x.transpose(), right, trace }
    }

    /// The upper triangle's entries of `columns`, column after column (rows 0..=j of column j),
    /// into `out`; with `doubled`, every entry off the diagonal twice over.
    fn pack(&self, columns: Range<usize>, doubled: bool, out: &mut [f64]) {
        let mut at = 0;
        let mut panel = DMatrix::zeros(columns.end, PANEL);
        let rows = panel.nrows();
        for start in columns.clone().step_by(PANEL) {
            let width = PANEL.min(columns.end - start);
            let (left, right) = (self.left.rows(0, start + width), self.right.columns(start, width));
            cpu::product_here(panel.view_mut((0, 0), (start + width, width)), left, right);
            for c in 0..width {
                let j = start + c;
                let column = &panel.as_slice()[c * rows..c * rows + j + 1];
                let target = &mut out[at..at + j + 1];
                if doubled {
                    target.iter_mut().zip(column).for_each(|(t, g)| *t = 2.0 * g);
                    target[j] = column[j];
                } else {
                    target.copy_from_slice(column);
                }
                at += j + 1;
            }
        }
        debug_assert_eq!(at, out.len());
    }
}

/// One head's Gram factors: the writer's (W_OV) and the three readers' in
/// [`CompositionKind::ALL`]'s order.
struct HeadGrams {
    writer: GramFactors,
    readers: [GramFactors; 3],
}

impl HeadGrams {
    fn of(w: &HeadWeights) -> HeadGrams {
        let (w_q, w_k, w_v) = (w.w_q.transpose(), w.w_k.transpose(), w.w_v.transpose());
        let gram = |m: &DMatrix<f64>| cpu::gram(m.as_view());
        HeadGrams {
            writer: GramFactors::around(gram(&w.w_v), w.w_o.clone()),
            readers: [
                GramFactors::around(gram(&w.w_k), w_q),
                GramFactors::around(gram(&w.w_q), w_k),
                GramFactors::around(cpu::gram(w.w_o.transpose().as_view()), w_v),
            ],
        }
    }
}

/// Entries of the packed upper triangle in columns `0..c`.
fn packed_before(c: usize) -> usize {
    c * (c + 1) / 2
}

/// The Gram columns of each pass: as few passes as keep the writers' packed Grams under
/// `budget`, their entries near equal.
fn passes(d_model: usize, writers: usize, budget: u64) -> Vec<Range<usize>> {
    let total = packed_before(d_model);
    let bytes = 8 * (writers * total) as u64;
    let count = bytes.div_ceil(budget.max(1)).clamp(1, d_model.max(1) as u64) as usize;
    let mut ends: Vec<usize> = (1..=count)
        .map(|p| {
            let wanted = total * p / count;
            (0..=d_model).find(|&c| packed_before(c) >= wanted).unwrap_or(d_model)
        })
        .collect();
    ends.dedup();
    let mut ranges = Vec::with_capacity(ends.len());
    let mut start = 0;
    for end in ends.into_iter().filter(|&end| end > 0) {
        ranges.push(start..end);
        start = end;
    }
    ranges
}

/// Whether this method is worth its passes for a model: its multiply-adds (the pairs' inner
/// products, forming every head's Gram once, and each pass's re-made factors) at most 2/5 of
/// the layer products' (d_head²·d_model a pair). Its long, thin inner products run at about half
/// the rate of the layer products' square ones, and the passes re-read every layer; the measured
/// cases are in docs/benchmarks.md#composition-between-heads.
pub(super) fn pays(config: &ModelConfig, budget: u64) -> bool {
    pays_for([config.layers, config.heads, config.d_model, config.d_head], budget)
}

/// [`pays`] for a model of `[layers, heads, d_model, d_head]`.
fn pays_for(shape: [usize; 4], budget: u64) -> bool {
    let [layers, heads, d_model, d_head] = shape.map(|v| v as f64);
    let pairs = 3.0 * heads * heads * layers * (layers - 1.0) / 2.0;
    let packed = packed_before(shape[2]) as f64;
    let passes = passes(shape[2], shape[0].saturating_sub(1) * shape[1], budget).len() as f64;
    let grams = pairs * packed
        + 4.0 * layers * heads * packed * d_head
        + passes * layers * heads * 8.0 * d_model * d_head * d_head;
    let products = pairs * d_head * d_head * d_model;
    5.0 * grams <= 2.0 * products
}

/// The most this method holds at once, in bytes (f64): a pass's packed Grams of the writers
/// of every layer but the last and of one layer's readers, one layer's heads' factors (eight
/// d_model x d_head a head) and a Gram panel per head, and the scores (3 (layers·heads)²).
pub(super) fn held_bytes(config: &ModelConfig, budget: u64) -> u64 {
    let [layers, heads, d_model, d_head] =
        [config.layers, config.heads, config.d_model, config.d_head].map(|v| v as u64);
    let widest = passes(config.d_model, config.layers.saturating_sub(1) * config.heads, budget)
        .iter()
        .map(|columns| (packed_before(columns.end) - packed_before(columns.start)) as u64)
        .max()
        .unwrap_or(0);
    let grams = 8 * widest * (layers.saturating_sub(1) * heads + 3 * heads);
    let factors = 8 * heads * (8 * d_model * d_head + d_model * PANEL as u64);
    grams + factors + 8 * 3 * (layers * heads).pow(2)
}

/// Every pair's scores, keeping at most about `budget` bytes of the writers' packed Grams.
/// `each(done, total)` follows every layer of every pass.
pub(super) fn scores(
    model: &(impl Weights + ?Sized),
    mode: Mode,
    budget: u64,
    each: &mut dyn FnMut(usize, usize),
) -> Result<CompositionScores> {
    let config = model.config();
    let (layers, heads) = (config.layers, config.heads);
    let passes = passes(config.d_model, layers.saturating_sub(1) * heads, budget);
    let mut squares = CompositionScores::zeros(layers, heads);
    let mut traces = vec![(0.0, [0.0; 3]); layers * heads];
    for (pass, columns) in passes.iter().enumerate() {
        let entries = packed_before(columns.end) - packed_before(columns.start);
        let mut writers: Vec<f64> = Vec::with_capacity(entries * layers.saturating_sub(1) * heads);
        let mut readers = vec![0.0; entries * 3 * heads];
        for l2 in 0..layers {
            let grams = super::each_head(model, l2, mode, |w| HeadGrams::of(&w))?;
            for (h, head) in grams.iter().enumerate() {
                traces[l2 * heads + h] = (head.writer.trace, head.readers.each_ref().map(|r| r.trace));
            }
            if l2 > 0 {
                crate::parallel::each_chunk(&mut readers, entries, |start, out| {
                    let (kind, h) = (start / entries / heads, start / entries % heads);
                    grams[h].readers[kind].pack(columns.clone(), false, out);
                });
                let kept = writers.len() / entries;
                let mut products = DMatrix::zeros(3 * heads, kept);
                let readers = DMatrixView::from_slice(&readers, entries, 3 * heads);
                let writers = DMatrixView::from_slice(&writers, entries, kept);
                for first in (0..entries).step_by(INNER_CHUNK) {
                    let rows = INNER_CHUNK.min(entries - first);
                    cpu::add_inner(products.as_view_mut(), readers.rows(first, rows), writers.rows(first, rows));
                }
                add_squares(&mut squares, products.as_view_mut(), l2);
            }
            if l2 + 1 < layers {
                let kept = writers.len();
                writers.resize(kept + entries * heads, 0.0);
                crate::parallel::each_chunk(&mut writers[kept..], entries, |start, out| {
                    grams[start / entries].writer.pack(columns.clone(), true, out);
                });
            }
            each(pass * layers + l2 + 1, passes.len() * layers);
        }
    }
    Ok(normalised(squares, &traces))
}

/// Adds a layer's products (rows: each kind's readers of layer `l2`, columns: every earlier
/// layer's writers) to the pairs' squared numerators.
fn add_squares(squares: &mut CompositionScores, products: DMatrixViewMut<f64>, l2: usize) {
    let heads = squares.heads;
    for kind in CompositionKind::ALL {
        for h2 in 0..heads {
            for (writer, &square) in products.row(kind.index() * heads + h2).iter().enumerate() {
                let (from, to) = (HeadId::new(writer / heads, writer % heads), HeadId::new(l2, h2));
                let at = squares.index(from, to);
                squares.values[kind.index()][at] += square;
            }
        }
    }
}

/// Scores from squared numerators: divided by both circuits' squared norms, rooted. A circuit
/// of norm 0 scores 0; a sum that rounding took below 0 is 0.
fn normalised(mut squares: CompositionScores, traces: &[(f64, [f64; 3])]) -> CompositionScores {
    let (layers, heads) = (squares.layers, squares.heads);
    for kind in CompositionKind::ALL {
        for from in 0..layers * heads {
            for to in 0..layers * heads {
                let at = from * layers * heads + to;
                let norms = traces[from].0 * traces[to].1[kind.index()];
                let square = &mut squares.values[kind.index()][at];
                *square = if norms > 0.0 { (*square / norms).max(0.0).sqrt() } else { 0.0 };
            }
        }
    }
    squares
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passes_cover_every_column_once_and_keep_under_the_budget() {
        for (d_model, writers, budget) in [(768, 132, PASS_BYTES), (2048, 480, PASS_BYTES), (64, 3, 1 << 10), (7, 1, 1)]
        {
            let passes = passes(d_model, writers, budget);
            assert_eq!(passes.first().map(|p| p.start), Some(0));
            assert_eq!(passes.last().map(|p| p.end), Some(d_model));
            assert!(passes.windows(2).all(|w| w[0].end == w[1].start && w[0].start < w[0].end));
            let largest = passes.iter().map(|p| packed_before(p.end) - packed_before(p.start)).max().unwrap();
            // A pass may pass the budget by at most one column's entries.
            assert!(8 * (writers * largest) as u64 <= budget + 8 * (writers * d_model) as u64, "{d_model} {writers}");
        }
        assert_eq!(passes(768, 132, PASS_BYTES).len(), 1);
    }

    /// The models measured: GPT-2 Small and Pythia-1B faster through the Grams, Llama-3.2-1B
    /// (16 passes, d_head 64 against d_model 2048) and Llama-3-8B through the layer products.
    #[test]
    fn the_grams_are_chosen_where_they_were_measured_faster() {
        assert!(pays_for([12, 12, 768, 64], PASS_BYTES), "GPT-2 Small");
        assert!(pays_for([16, 8, 2048, 256], PASS_BYTES), "Pythia-1B");
        assert!(!pays_for([16, 32, 2048, 64], PASS_BYTES), "Llama-3.2-1B");
        assert!(!pays_for([32, 32, 4096, 128], PASS_BYTES), "Llama-3-8B");
    }

    /// Both methods and any number of passes give one set of scores, for full and grouped-query
    /// attention, folded and raw.
    #[test]
    fn grams_in_passes_are_the_layer_products() {
        use crate::backend::{Backend, block_on};
        use crate::model::ModelStream;
        use crate::weights::ModelFiles;
        for name in ["gpt2", "llama"] {
            let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures").join(name);
            let files = ModelFiles::from_path(&path).unwrap();
            let model = ModelStream::open(&files).unwrap();
            for mode in [Mode::Folded, Mode::Raw] {
                let products =
                    block_on(super::super::products::scores(&model, mode, &mut Backend::cpu(), &mut |_, _| {}))
                        .unwrap();
                let config = model.config();
                let mut calls = 0;
                let mut seen = (0, 0);
                let whole = 8 * ((config.layers - 1) * config.heads * packed_before(config.d_model)) as u64;
                for budget in [PASS_BYTES, whole / 3] {
                    let grams = scores(&model, mode, budget, &mut |done, total| {
                        calls += 1;
                        seen = (done, total);
                    })
                    .unwrap();
                    for kind in CompositionKind::ALL {
                        for (a, b) in grams.flat(kind).iter().zip(products.flat(kind)) {
                            assert!(
                                (a - b).abs() <= 1e-12 * b.abs().max(1e-3),
                                "{name} {mode:?} {kind:?}: {a} against {b}"
                            );
                        }
                        assert!(grams.flat(kind).iter().any(|&s| s > 0.0));
                    }
                }
                let passes = passes(config.d_model, (config.layers - 1) * config.heads, whole / 3).len();
                assert!(passes >= 3, "{name}: {passes} passes");
                assert_eq!(
                    seen,
                    (passes * config.layers, passes * config.layers),
                    "{name}: progress ends at its total"
                );
                assert_eq!(calls, (1 + passes) * config.layers, "{name}: one step a layer a pass");
            }
        }
    }

    #[test]
    fn packed_gram_is_the_dense_one() {
        let left = DMatrix::from_fn(3, 10, |i, j| ((i * 7 + j * 3) % 5) as f64 - 2.0);
        let inner = DMatrix::from_fn(3, 3, |i, j| if i == j { 2.0 } else { 0.5 });
        let factors = GramFactors::around(inner.clone(), left.clone());
        let dense = left.transpose() * inner * &left;
        assert!((factors.trace - dense.trace()).abs() < 1e-12);
        for columns in [0..10, 3..7] {
            let mut out = vec![0.0; packed_before(columns.end) - packed_before(columns.start)];
            factors.pack(columns.clone(), true, &mut out);
            let mut at = 0;
            for j in columns {
                for i in 0..=j {
                    let expected = if i == j { dense[(i, j)] } else { 2.0 * dense[(i, j)] };
                    assert!((out[at] - expected).abs() < 1e-12, "({i}, {j})");
                    at += 1;
                }
            }
        }
    }
}
