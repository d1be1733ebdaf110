//! Singular directions of one head's circuits (docs/methods.md#8-circuits-between-heads), as
//! TransformerLens 3.9's `tools/analysis/svd_circuits.decompose_head` defines them (Millidge &
//! Black 2022), read out through the vocabulary.
//!
//! A circuit `A B` (OV: A = W_V, B = W_O; QK: A = W_Q, B = W_K^T) is kept factored: with the thin
//! QRs A = Q_A R_A and B^T = Q_B R_B, `A B = Q_A (R_A R_B^T) Q_B^T`, so the SVD of the d_head x
//! d_head middle gives every singular value and both sides' directions in d_model (U: what the
//! circuit reads, x U_i ↦ σ_i V_i; V: what OV writes, or the key side QK reads).
//!
//! Neighbouring values within a relative gap of [`DEGENERATE_GAP`] form one block whose
//! directions are defined only up to a rotation, and a block is read out as a subspace (each
//! token's norm of projection onto it), never direction by direction. A lone direction is read
//! out signed, both ends: flipping u_i and v_i together is the same SVD, so only the pairing
//! "top of the input side ↔ top of the output side" carries meaning.

use nalgebra::DMatrix;
use serde::{Deserialize, Serialize};

use super::circuits::{HeadWeights, Mode, fold_reading_transposed};
use super::head::HeadId;
use crate::Result;
use crate::model::{LoadParts, VOCAB_BLOCK, Weights};
use crate::tokens::Tokenizer;

/// Neighbours closer than this relative gap share a block (TransformerLens's `eps`).
pub const DEGENERATE_GAP: f64 = 1e-2;

/// How many tokens each end of a readout lists by default.
pub const DEFAULT_TOKENS: usize = 10;

/// One token and its value on a readout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TokenValue {
    pub id: usize,
    pub token: String,
    pub value: f64,
}

/// A direction or block seen through the embedding (what it reads) or the unembedding (what OV
/// writes).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Readout {
    /// `embedding` (W_E's rows as the stream receives them) or `unembedding` (W_U, with the
    /// final norm folded in folded mode).
    pub through: String,
    /// Signed (a lone direction: `top` the largest values, `bottom` the smallest) or not (a
    /// block: each token's norm of projection onto the block's span, `bottom` empty).
    pub signed: bool,
    pub top: Vec<TokenValue>,
    pub bottom: Vec<TokenValue>,
}

/// One block of directions: a lone direction, or a rotation-ambiguous run of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Direction {
    /// The directions' indices (singular values in descending order).
    pub indices: Vec<usize>,
    pub singular_values: Vec<f64>,
    /// More than one direction: only the span is defined.
    pub degenerate: bool,
    /// Numerically null: arbitrary directions of the null space, not read out.
    pub null: bool,
    /// OV: the residual directions the head reads; QK: the query side.
    pub input: Option<Readout>,
    /// OV: what it writes, through W_U; QK: the key side.
    pub output: Option<Readout>,
}

/// The SVD of one circuit of one head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CircuitSvd {
    /// Descending, d_head of them.
    pub singular_values: Vec<f64>,
    /// Contiguous runs of indices covering every direction once.
    pub blocks: Vec<Vec<usize>>,
    /// Indices whose value is below `null_tolerance` times the largest.
    pub null: Vec<usize>,
    /// One entry per block, in order.
    pub directions: Vec<Direction>,
    /// The circuit's input and output directions (d_model x d_head each, column i direction i),
    /// for Python's arrays; not in the JSON.
    #[serde(skip)]
    pub u: DMatrix<f64>,
    #[serde(skip)]
    pub v: DMatrix<f64>,
}

/// `svd --json`'s report: both circuits of one head.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadSvd {
    pub head: String,
    pub mode: Mode,
    /// The relative gap that separates blocks.
    pub gap: f64,
    /// A value below this times the largest is null: d_model times the machine epsilon of the
    /// weights as stored (f32), as `torch.linalg.matrix_rank` sets its tolerance.
    pub null_tolerance: f64,
    pub ov: CircuitSvd,
    pub qk: CircuitSvd,
}

/// The factored SVD of `a b` (a: d_model x k, b: k x d_model): singular values descending, U
/// and V (d_model x k).
fn factored_svd(a: &DMatrix<f64>, b: &DMatrix<f64>) -> (Vec<f64>, DMatrix<f64>, DMatrix<f64>) {
    let (qr_a, qr_b) = (a.clone().qr(), b.transpose().qr());
    let middle = qr_a.r() * qr_b.r().transpose();
    let svd = middle.svd(true, true);
    let (small_u, small_vt) = (svd.u.expect("asked for U"), svd.v_t.expect("asked for V^T"));
    let mut order: Vec<usize> = (0..svd.singular_values.len()).collect();
    order.sort_by(|&i, &j| svd.singular_values[j].total_cmp(&svd.singular_values[i]));
    let values = order.iter().map(|&i| svd.singular_values[i]).collect();
    let (q_a, q_b) = (qr_a.q(), qr_b.q());
    let u = DMatrix::from_fn(q_a.nrows(), order.len(), |r, c| q_a.row(r).dot(&small_u.column(order[c]).transpose()));
    let v = DMatrix::from_fn(q_b.nrows(), order.len(), |r, c| q_b.row(r).dot(&small_vt.row(order[c])));
    (values, u, v)
}

/// Contiguous blocks: direction i joins the open one when `1 - σ_i/σ_{i-1} < gap`, or when it and
/// the one before are both null (TransformerLens's `_degeneracy_blocks`, with its 1e-12 floor).
pub fn degenerate_blocks(values: &[f64], gap: f64, null_tolerance: f64) -> Vec<Vec<usize>> {
    const FLOOR: f64 = 1e-12;
    let Some(&first) = values.first() else { return Vec::new() };
    let top = first.max(FLOOR);
    let mut blocks = vec![vec![0]];
    for i in 1..values.len() {
        let near = 1.0 - values[i] / values[i - 1].max(FLOOR) < gap;
        let null_run = values[i] / top < null_tolerance && values[i - 1] / top < null_tolerance;
        match near || null_run {
            true => blocks.last_mut().expect("one block at least").push(i),
            false => blocks.push(vec![i]),
        }
    }
    blocks
}

/// A readout being gathered over blocks of vocabulary rows: the best `n` at each end.
struct Gathering {
    signed: bool,
    n: usize,
    top: Vec<(f64, usize)>,
    bottom: Vec<(f64, usize)>,
}

impl Gathering {
    fn new(signed: bool, n: usize) -> Gathering {
        Gathering { signed, n, top: Vec::new(), bottom: Vec::new() }
    }

    fn add(&mut self, values: impl Iterator<Item = (f64, usize)> + Clone) {
        self.top.extend(values.clone());
        self.top.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
        self.top.truncate(self.n);
        if self.signed {
            self.bottom.extend(values);
            self.bottom.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
            self.bottom.truncate(self.n);
        }
    }

    fn finish(self, through: &str, tokenizer: &Tokenizer) -> Readout {
        let named = |list: Vec<(f64, usize)>| {
            list.into_iter().map(|(value, id)| TokenValue { id, token: tokenizer.token_text(id), value }).collect()
        };
        Readout { through: through.into(), signed: self.signed, top: named(self.top), bottom: named(self.bottom) }
    }
}

/// Which side's directions a readout reads, and through what.
#[derive(Clone, Copy)]
enum Side {
    OvInput,
    OvOutput,
    QkQuery,
    QkKey,
}

/// Both circuits' SVD of one head, their blocks read out through the vocabulary: the head's layer
/// is read, then W_E and W_U a block of rows at a time (`tokens` at each end of each readout).
pub fn head_svd(
    model: &(impl Weights + ?Sized),
    tokenizer: &Tokenizer,
    id: HeadId,
    mode: Mode,
    tokens: usize,
) -> Result<HeadSvd> {
    let config = model.config();
    let layer = model.layer(id.layer, LoadParts::Circuits)?;
    let w = HeadWeights::new(config, &layer, model.ln_final(), id.head, mode);
    drop(layer);
    let null_tolerance = config.d_model as f64 * f32::EPSILON as f64;
    let (ov_values, ov_u, ov_v) = factored_svd(&w.w_v, &w.w_o);
    let (qk_values, qk_u, qk_v) = factored_svd(&w.w_q, &w.w_k.transpose());

    // What W_U meets of an output direction v in folded mode: the final norm's fold, as W_O T
    // meets it in the token-space circuits.
    let mut ov_written = ov_v.clone();
    if mode == Mode::Folded {
        fold_reading_transposed(model.ln_final(), config.norm, &mut ov_written);
    }
    let sides: [(Side, &[f64], &DMatrix<f64>); 4] = [
        (Side::OvInput, &ov_values, &ov_u),
        (Side::OvOutput, &ov_values, &ov_written),
        (Side::QkQuery, &qk_values, &qk_u),
        (Side::QkKey, &qk_values, &qk_v),
    ];
    let blocks_of = |values: &[f64]| degenerate_blocks(values, DEGENERATE_GAP, null_tolerance);
    let is_null = |values: &[f64], block: &[usize]| block.iter().all(|&i| values[i] < null_tolerance * values[0]);
    // Per side, per block: a gathering, or None for a null block.
    let mut gatherings: Vec<Vec<Option<Gathering>>> = sides
        .iter()
        .map(|(_, values, _)| {
            blocks_of(values)
                .iter()
                .map(|block| (!is_null(values, block)).then(|| Gathering::new(block.len() == 1, tokens)))
                .collect()
        })
        .collect();

    let vocab = config.vocab;
    for start in (0..vocab).step_by(VOCAB_BLOCK) {
        let rows = start..(start + VOCAB_BLOCK).min(vocab);
        let embedding = model.embedding_rows(rows.clone())?.map(f64::from);
        let unembedding = match model.tied() {
            true => None,
            false => Some(model.unembedding_rows(rows.clone())?.map(f64::from)),
        };
        for ((side, values, directions), gathering) in sides.iter().zip(&mut gatherings) {
            let through = match side {
                Side::OvOutput => unembedding.as_ref().unwrap_or(&embedding),
                _ => &embedding,
            };
            let projected = through * *directions;
            for (block, gathering) in blocks_of(values).iter().zip(gathering.iter_mut()) {
                let Some(gathering) = gathering else { continue };
                let row_values: Vec<(f64, usize)> = match block[..] {
                    [i] => projected.column(i).iter().enumerate().map(|(r, &x)| (x, start + r)).collect(),
                    _ => (0..rows.len())
                        .map(|r| (block.iter().map(|&i| projected[(r, i)].powi(2)).sum::<f64>().sqrt(), start + r))
                        .collect(),
                };
                gathering.add(row_values.into_iter());
            }
        }
    }

    let mut gathered = gatherings.into_iter();
    let mut circuit = |values: Vec<f64>, u: DMatrix<f64>, v: DMatrix<f64>, inputs: &str, outputs: &str| {
        let (input, output) = (gathered.next().expect("four sides"), gathered.next().expect("four sides"));
        let blocks = blocks_of(&values);
        let null = (0..values.len()).filter(|&i| values[i] < null_tolerance * values[0]).collect();
        let directions = blocks
            .iter()
            .zip(input.into_iter().zip(output))
            .map(|(block, (input, output))| Direction {
                indices: block.clone(),
                singular_values: block.iter().map(|&i| values[i]).collect(),
                degenerate: block.len() > 1,
                null: input.is_none(),
                input: input.map(|g| g.finish(inputs, tokenizer)),
                output: output.map(|g| g.finish(outputs, tokenizer)),
            })
            .collect();
        CircuitSvd { singular_values: values, blocks, null, directions, u, v }
    };
    let ov = circuit(ov_values, ov_u, ov_v, "embedding", "unembedding");
    let qk = circuit(qk_values, qk_u, qk_v, "embedding", "embedding");
    Ok(HeadSvd { head: id.to_string(), mode, gap: DEGENERATE_GAP, null_tolerance, ov, qk })
}
