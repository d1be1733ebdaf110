//! The weight-space circuits of every head (docs/methods.md#2-circuits-of-one-head), in f64, with
//! LayerNorm folded the way TransformerLens's `fold_ln=True` does (`center_writing_weights=False,
//! center_unembed=False`) or raw. The three d_model x d_model Gram matrices of the embedding and
//! unembedding are computed once per model; every head then costs O(d_model² · d_head).

use std::sync::Arc;

use nalgebra::DMatrix;

use super::HeadId;
use super::spectrum::Factored;
use crate::Result;
use crate::backend::cpu::{self, inner};
use crate::backend::{Backend, BackendInfo, Blocks, ColumnRun, Columns, Factor, Fold, Kept, Sum, block_on};
pub use crate::model::fold::{fold_reading, fold_reading_transposed};
use crate::model::{Attention, Layer, Model, ModelConfig, Norm, Weights};

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

/// The layer's attention weights as the circuits read them. In folded mode, the norms that act
/// on a head's projections fold their weights into them, as the input norms fold into the
/// reading weights: the query and key norms' into W_Q's and W_K's columns, the attention
/// output's norm's and the residual multiplier into W_O's columns. Each such norm's division by
/// its input's scale is left out, as for the input norms, and so is a LayerNorm's mean removal
/// there: inside a head it would force a zero eigenvalue on every QK circuit
/// (docs/methods.md, families). Borrowed where nothing folds.
pub fn circuit_attention<'a>(config: &ModelConfig, layer: &'a Layer, mode: Mode) -> std::borrow::Cow<'a, Attention> {
    let attention = &layer.attention;
    let multiplier = config.features.residual_multiplier;
    let folds = attention.q_norm.is_some()
        || attention.k_norm.is_some()
        || layer.attention_out_norm.is_some()
        || multiplier.is_some();
    if mode == Mode::Raw || !folds {
        return std::borrow::Cow::Borrowed(attention);
    }
    let mut folded = attention.clone();
    if let Some(norm) = &attention.q_norm {
        scale_columns(&mut folded.w_q, norm);
    }
    if let Some(norm) = &attention.k_norm {
        scale_columns(&mut folded.w_k, norm);
    }
    if let Some(norm) = &layer.attention_out_norm {
        scale_columns(&mut folded.w_o, norm);
    }
    if let Some(multiplier) = multiplier {
        folded.w_o *= multiplier;
    }
    std::borrow::Cow::Owned(folded)
}

/// A norm's weight on `x W` folded into W: column j times the weight j.
fn scale_columns(w: &mut DMatrix<f32>, norm: &Norm) {
    for (mut column, &weight) in w.column_iter_mut().zip(&norm.weight) {
        column *= weight;
    }
}

/// The embedding/unembedding Gram matrices: `W_E^T W_E`, `W_U W_E`, `W_U W_U^T` (raw), in f64.
///
/// They are accumulated in f64 from f32 rows, a block at a time (each block's products on the CPU
/// in f64, or on a GPU from split f32 parts with error-free sums, ~1e-11 of f64: see
/// backend/gpu/products.wgsl), and every per-head product with them is f64. f32 is not enough: its
/// Grams are close, but an embedding with a common direction (as trained ones have) makes
/// `A^T A = W_V^T G_E W_V` ill-conditioned, and κ of the token-space OV circuit comes out
/// percents off (docs/methods.md#1-conventions, Precision). tests/gram_precision.rs holds the f64
/// path to plain f64 loops at GPT-2's vocabulary.
/// Vocabulary rows per Gram segment: the unit of work the tab's pool hands a worker (and the
/// order of the sums everywhere, so every path on one machine gives the same bits: the tab's
/// kernel and faer's native ones round differently). 4096 rows of GPT-2's width are ~6 GFLOP,
/// far more than passing the 768 x 768 result between workers.
pub const SEGMENT_ROWS: usize = 4096;

/// The most memory the Grams' segments summed at once natively may take, the running total
/// included (see `Grams::segments_at_once`).
#[cfg(not(target_arch = "wasm32"))]
const SEGMENTS_MEMORY: u64 = 512 << 20;

/// How many segments a vocabulary's Grams are summed from (at least one).
pub fn segments(vocab: usize) -> usize {
    vocab.div_ceil(SEGMENT_ROWS).max(1)
}

/// The vocabulary rows of one segment.
pub fn segment_rows(vocab: usize, segment: usize) -> std::ops::Range<usize> {
    (segment * SEGMENT_ROWS).min(vocab)..((segment + 1) * SEGMENT_ROWS).min(vocab)
}

#[derive(Clone)]
pub struct Grams {
    pub embed: DMatrix<f64>,
    /// `W_U W_E`; empty when tied (then it equals `embed`). Shared, so that a GPU keeps it on
    /// the device for every layer's `C W_V` (see `Backend::multiply`).
    pub cross: Arc<DMatrix<f64>>,
    /// `W_U W_U^T`; empty when tied.
    pub unembed: DMatrix<f64>,
    pub tied: bool,
    /// What computed the products (the fingerprint records it).
    pub backend: BackendInfo,
    /// The factors of the summed Grams, made when a layer's products first need them.
    factors: std::sync::OnceLock<std::result::Result<GramFactors, String>>,
}

impl Grams {
    /// The one vocabulary-sized cost of the whole fingerprint: three d_model x d_model products
    /// over the vocabulary, on the CPU.
    pub fn compute(model: &Model) -> Grams {
        Self::stream(model).expect("a held model's rows are in memory and the CPU backend does not fail")
    }

    /// The Grams of a held or streamed model (W_E and W_U read a block of vocabulary rows at a
    /// time), on the CPU.
    pub fn stream(model: &(impl Weights + ?Sized)) -> Result<Grams> {
        Self::stream_with(model, &mut Backend::cpu())
    }

    /// `stream` with the products on `backend`.
    pub fn stream_with(model: &(impl Weights + ?Sized), backend: &mut Backend) -> Result<Grams> {
        Self::stream_with_progress(model, backend, &mut |_, _| {})
    }

    /// [`Grams::gather`] where nothing awaits (see [`block_on`]).
    pub fn stream_with_progress(
        model: &(impl Weights + ?Sized),
        backend: &mut Backend,
        each: &mut dyn FnMut(usize, usize),
    ) -> Result<Grams> {
        block_on(Self::gather(model, backend, each))
    }

    /// The Grams with the products on `backend`: W_E and W_U are read a block of token rows at a
    /// time (from memory or by byte range: the same blocks either way, so the same sums in the
    /// same order) and never held whole. `each(rows done, vocabulary)` follows every block (the
    /// tab shows it; natively on the CPU every segment); a GPU that fails restarts the count on
    /// the CPU. Awaited only where a GPU's
    /// results come through an event loop (the tab's worker).
    ///
    /// On the CPU the sum is taken as the tab's worker pool takes it: each segment of
    /// [`SEGMENT_ROWS`] vocabulary rows summed from zero, then the segments added in order
    /// ([`Grams::add`]). So the pool, whichever worker computed which segment, gives these same
    /// bits. A GPU sums across segments on the device (its bits are its own anyway).
    pub async fn gather(
        model: &(impl Weights + ?Sized),
        backend: &mut Backend,
        each: &mut dyn FnMut(usize, usize),
    ) -> Result<Grams> {
        Self::gather_segments(model, backend, segments(model.config().vocab), each).await
    }

    /// [`Grams::gather`] over the first `count` segments only (all of them: the model's Grams;
    /// fewer: a benchmark's sample of the vocabulary).
    pub async fn gather_segments(
        model: &(impl Weights + ?Sized),
        backend: &mut Backend,
        count: usize,
        each: &mut dyn FnMut(usize, usize),
    ) -> Result<Grams> {
        let count = count.min(segments(model.config().vocab));
        let start = backend.bytes_moved();
        let mut grams = backend
            .with_fallback(async |backend| {
                // The CPU natively, a GPU's fallback included.
                #[cfg(not(target_arch = "wasm32"))]
                if !backend.is_gpu() {
                    return Self::segments_at_once(model, count, each);
                }
                let mut sums = RunningGrams::new(model, backend).await?;
                for segment in 0..count {
                    sums.add_segment(model, backend, segment, each).await?;
                }
                sums.read(backend).await
            })
            .await?;
        grams.backend = backend.info();
        if let Some(moved) = crate::backend::moved_between(start, backend.bytes_moved()) {
            grams.backend.add_stage("grams", moved);
        }
        Ok(grams)
    }

    /// The first `count` segments on the CPU natively, several at once, each on its own thread
    /// (its rows read, widened and multiplied there; read on one thread between products, the
    /// rows left the other cores idle a fifth of the time), as many at once as fit
    /// [`SEGMENTS_MEMORY`] (one at a time, its products on every core, when a single segment's
    /// sums are that large: Llama-3-8B's). Added in order as they come, so the bits are those of
    /// one segment after another, and `each(rows done, vocabulary)` follows every segment.
    #[cfg(not(target_arch = "wasm32"))]
    fn segments_at_once(
        model: &(impl Weights + ?Sized),
        count: usize,
        each: &mut dyn FnMut(usize, usize),
    ) -> Result<Grams> {
        let (d_model, vocab, tied) = (model.config().d_model, model.config().vocab, model.tied());
        let sums_bytes = (if tied { 1 } else { 3 } * d_model * d_model * 8) as u64;
        // Per entry of a block of rows: as read (f32) and widened (f64); untied, W_E's and W_U's,
        // each widened again for `W_U W_E` and W_U's then transposed.
        let block_bytes = (cpu::BLOCK_ROWS * d_model * if tied { 12 } else { 40 }) as u64;
        let at_once = usize::try_from(SEGMENTS_MEMORY.saturating_sub(sums_bytes) / (sums_bytes + block_bytes).max(1))
            .unwrap_or(usize::MAX)
            .clamp(1, rayon::current_num_threads().max(1));
        let mut total: Option<Grams> = None;
        let all: Vec<usize> = (0..count).collect();
        for wave in all.chunks(at_once) {
            let parts = crate::parallel::map_each(wave, |&segment| Grams::segment(model, &mut Backend::cpu(), segment));
            for (&segment, part) in wave.iter().zip(parts) {
                let part = part?;
                match &mut total {
                    // The first segment is the total so far, bit for bit.
                    None => total = Some(part),
                    Some(total) => total.add(&part)?,
                }
                each(segment_rows(vocab, segment).end, vocab);
            }
        }
        Ok(total.unwrap_or_else(|| Grams::zeros(d_model, tied)))
    }

    /// One segment's share of the Grams (`segment` < [`segments`]), summed from zero: what one
    /// worker of the tab's pool computes; [`Grams::add`] the segments in order for the Grams.
    pub fn segment(model: &(impl Weights + ?Sized), backend: &mut Backend, segment: usize) -> Result<Grams> {
        let mut part = block_on(backend.with_fallback(async |backend| {
            let mut sums = RunningGrams::new(model, backend).await?;
            sums.add_segment(model, backend, segment, &mut |_, _| {}).await?;
            sums.read(backend).await
        }))?;
        part.backend = backend.info();
        Ok(part)
    }

    /// Adds another segment's Grams, entry by entry (the order of the additions is the caller's:
    /// segment by segment, in order, gives [`Grams::stream_with_progress`]'s bits).
    pub fn add(&mut self, part: &Grams) -> Result<()> {
        if part.tied != self.tied
            || part.embed.shape() != self.embed.shape()
            || part.cross.shape() != self.cross.shape()
        {
            return Err(crate::Error::Worker("Gram segments of different models cannot be added".into()));
        }
        self.embed += &part.embed;
        *Arc::make_mut(&mut self.cross) += &*part.cross;
        self.unembed += &part.unembed;
        self.factors = Default::default();
        Ok(())
    }

    /// Every entry, in order: `embed`, `cross`, `unembed` (column-major); what passes between the
    /// tab's workers, beside the shape in [`Grams::from_values`].
    pub fn values(&self) -> Vec<f64> {
        [&self.embed, &*self.cross, &self.unembed].iter().flat_map(|m| m.as_slice().iter().copied()).collect()
    }

    /// The Grams whose [`Grams::values`] these are.
    pub fn from_values(d_model: usize, tied: bool, values: &[f64]) -> Result<Grams> {
        let square = d_model * d_model;
        let expected = if tied { square } else { 3 * square };
        if values.len() != expected {
            return Err(crate::Error::Worker(format!(
                "{} Gram entries for width {d_model} ({}): expected {expected}",
                values.len(),
                if tied { "tied" } else { "untied" }
            )));
        }
        let mut grams = Grams::zeros(d_model, tied);
        grams.embed.as_mut_slice().copy_from_slice(&values[..square]);
        if !tied {
            Arc::make_mut(&mut grams.cross).as_mut_slice().copy_from_slice(&values[square..2 * square]);
            grams.unembed.as_mut_slice().copy_from_slice(&values[2 * square..]);
        }
        Ok(grams)
    }

    /// What every layer's products need of these Grams (their factors made here, once).
    pub fn for_products(&self) -> ProductGrams {
        ProductGrams {
            factors: self.factors().cloned(),
            cross: self.cross.clone(),
            tied: self.tied,
            backend: self.backend.clone(),
        }
    }

    /// The factors of `embed` and (untied) `unembed` that [`LayerProducts`] multiply with.
    fn factors(&self) -> std::result::Result<&GramFactors, String> {
        let factors = self.factors.get_or_init(|| {
            Ok(GramFactors {
                embed: GramFactor::of(&self.embed)?,
                unembed: if self.tied { None } else { Some(GramFactor::of(&self.unembed)?) },
            })
        });
        factors.as_ref().map_err(Clone::clone)
    }

    /// Bytes the f64 entries take.
    pub fn bytes(&self) -> u64 {
        8 * (self.embed.len() + self.cross.len() + self.unembed.len()) as u64
    }

    /// All-zero Grams (the start of a sum).
    pub fn zeros(d_model: usize, tied: bool) -> Grams {
        let (cross, unembed) = match tied {
            true => (DMatrix::zeros(0, 0), DMatrix::zeros(0, 0)),
            false => (DMatrix::zeros(d_model, d_model), DMatrix::zeros(d_model, d_model)),
        };
        let embed = DMatrix::zeros(d_model, d_model);
        let cross = Arc::new(cross);
        Grams { embed, cross, unembed, tied, backend: BackendInfo::default(), factors: Default::default() }
    }
}

/// The Grams being summed, on a backend: `W_E^T W_E`, and (untied) `W_U W_E`, `W_U W_U^T`.
struct RunningGrams {
    embed: Sum,
    untied: Option<(Sum, Sum)>,
}

impl RunningGrams {
    async fn new(model: &(impl Weights + ?Sized), backend: &Backend) -> Result<RunningGrams> {
        let d = model.config().d_model;
        let untied = match model.tied() {
            true => None,
            false => Some((backend.sum(d, d).await?, backend.sum(d, d).await?)),
        };
        Ok(RunningGrams { embed: backend.sum(d, d).await?, untied })
    }

    /// Adds one segment's vocabulary rows (`segment` < [`segments`]), a block at a time;
    /// `each(rows done, vocabulary)` follows every block.
    async fn add_segment(
        &mut self,
        model: &(impl Weights + ?Sized),
        backend: &mut Backend,
        segment: usize,
        each: &mut dyn FnMut(usize, usize),
    ) -> Result<()> {
        let (vocab, d_model) = (model.config().vocab, model.config().d_model);
        let rows = segment_rows(vocab, segment);
        let block = backend.block_rows(d_model).min(SEGMENT_ROWS);
        for start in rows.clone().step_by(block) {
            let rows = start..(start + block).min(rows.end);
            let embed = model.embedding_rows(rows.clone())?;
            match &mut self.untied {
                Some((cross, unembed)) => {
                    // W_U's columns for these tokens, as rows (W_U^T's rows, as the files hold them).
                    let u = model.unembedding_rows(rows.clone())?;
                    backend.add_both(&embed, &u, &mut self.embed, cross, unembed).await?;
                }
                None => backend.add_gram(&embed, &mut self.embed).await?,
            }
            each(rows.end, vocab);
        }
        for sum in std::iter::once(&mut self.embed).chain(self.untied.iter_mut().flat_map(|(c, u)| [c, u])) {
            sum.end_segment();
        }
        Ok(())
    }

    async fn read(self, backend: &Backend) -> Result<Grams> {
        let tied = self.untied.is_none();
        let embed = backend.read(self.embed).await?;
        let (cross, unembed) = match self.untied {
            Some((cross, unembed)) => (backend.read(cross).await?, backend.read(unembed).await?),
            None => (DMatrix::zeros(0, 0), DMatrix::zeros(0, 0)),
        };
        Ok(Grams {
            embed,
            cross: Arc::new(cross),
            unembed,
            tied,
            backend: BackendInfo::default(),
            factors: Default::default(),
        })
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

    pub fn grams(&self) -> &'m Grams {
        self.grams
    }

    pub fn head_weights(&self, id: HeadId) -> HeadWeights {
        let model = self.model;
        HeadWeights::new(&model.config, &model.layers[id.layer], &model.ln_final, id.head, self.mode)
    }

    /// QK in residual space: `W_Q W_K^T`.
    pub fn qk(&self, w: &HeadWeights) -> Factored {
        w.qk()
    }

    /// QK in token space: `W_E W_Q W_K^T W_E^T`.
    pub fn qk_token(&self, w: &HeadWeights) -> Factored {
        w.qk_token(self.grams)
    }

    /// OV in residual space: `W_V W_O`.
    pub fn ov_residual(&self, w: &HeadWeights) -> Factored {
        w.ov_residual()
    }

    /// OV in token space: `W_E W_V W_O W_U`.
    pub fn ov_token(&self, w: &HeadWeights) -> Factored {
        w.ov_token(self.grams)
    }
}

impl HeadWeights {
    /// Head `head` of `layer`, folded with the layer's ln1 (reading weights) and `ln_final`
    /// (W_O as the unembedding sees it) in folded mode. Needs nothing of the model beyond
    /// that layer, so a model read layer by layer gives the same weights.
    pub fn new(config: &ModelConfig, layer: &Layer, ln_final: &Norm, head: usize, mode: Mode) -> HeadWeights {
        let d_head = config.d_head;
        let (q_start, kv_start) = (head * d_head, config.kv_head_of(head) * d_head);
        let folded = mode == Mode::Folded;
        let attention = circuit_attention(config, layer, mode);
        let reading = |w: &DMatrix<f32>, start: usize| {
            let mut block = w.columns(start, d_head).map(f64::from);
            if let (true, Some(ln1)) = (folded, &layer.ln1) {
                fold_reading(ln1, config.norm, &mut block);
            }
            block
        };
        let w_o = attention.w_o.rows(q_start, d_head).map(f64::from);
        let mut o_transposed = w_o.transpose();
        if folded {
            fold_reading_transposed(ln_final, config.norm, &mut o_transposed);
        }
        HeadWeights {
            w_q: reading(&attention.w_q, q_start),
            w_k: reading(&attention.w_k, kv_start),
            w_v: reading(&attention.w_v, kv_start),
            w_o,
            w_o_unembed: o_transposed.transpose(),
        }
    }

    /// QK in residual space: `W_Q W_K^T` (A = W_Q, B = W_K^T).
    pub fn qk(&self) -> Factored {
        let (q, k) = (self.w_q.as_view(), self.w_k.as_view());
        Factored { small: inner(k, q), gram_left: cpu::gram(q), gram_right: cpu::gram(k) }
    }

    /// QK in token space: `W_E W_Q W_K^T W_E^T` (A = W_E W_Q, B = W_K^T W_E^T), through the
    /// embedding Gram: `B A = W_K^T G_E W_Q`, `A^T A = W_Q^T G_E W_Q`, `B B^T = W_K^T G_E W_K`.
    /// Unlike the residual-space QK it does not depend on the residual basis: tokens fix it.
    /// W_E is never folded (as in TransformerLens); W_Q and W_K are folded in folded mode.
    /// (A whole layer's heads at once: [`LayerProducts::qk_token`].)
    pub fn qk_token(&self, grams: &Grams) -> Factored {
        let (q, k) = (self.w_q.as_view(), self.w_k.as_view());
        let (embed_q, embed_k) = (cpu::product(grams.embed.as_view(), q), cpu::product(grams.embed.as_view(), k));
        Factored {
            small: inner(k, embed_q.as_view()),
            gram_left: inner(q, embed_q.as_view()),
            gram_right: inner(k, embed_k.as_view()),
        }
    }

    /// OV in residual space: `W_V W_O` (A = W_V, B = W_O).
    pub fn ov_residual(&self) -> Factored {
        let o_transposed = self.w_o.transpose();
        Factored {
            small: inner(o_transposed.as_view(), self.w_v.as_view()),
            gram_left: cpu::gram(self.w_v.as_view()),
            gram_right: cpu::gram(o_transposed.as_view()),
        }
    }

    /// OV in token space: `W_E W_V W_O W_U` (A = W_E W_V, B = W_O W_U), through the Grams:
    /// `B A = Ô C W_V`, `A^T A = W_V^T G_E W_V`, `B B^T = Ô G_U Ô^T` with Ô = W_O T.
    /// Two d_model² · d_head products per head when the unembedding is tied, three otherwise.
    /// (A whole layer's heads at once: [`LayerProducts::ov_token`].)
    pub fn ov_token(&self, grams: &Grams) -> Factored {
        let (v, o_hat) = (self.w_v.as_view(), &self.w_o_unembed);
        let embed_v = cpu::product(grams.embed.as_view(), v);
        let o_hat_t = o_hat.transpose();
        let (cross_v, unembed_o) = match grams.tied {
            true => (None, cpu::product(grams.embed.as_view(), o_hat_t.as_view())),
            false => {
                (Some(cpu::product(grams.cross.as_view(), v)), cpu::product(grams.unembed.as_view(), o_hat_t.as_view()))
            }
        };
        Factored {
            small: o_hat * cross_v.as_ref().unwrap_or(&embed_v),
            gram_left: inner(v, embed_v.as_view()),
            gram_right: o_hat * unembed_o,
        }
    }
}

/// A factor `F` of a Gram matrix, `G = F^T F`. With it every head product through the Gram,
/// `W_a^T G W_b`, is `(F W_a)^T (F W_b)`: a layer's heads need `F X` for their stacked weights
/// X (d_model x n), which costs half of `G X` when F is triangular, and then only products of
/// d_head-wide columns. Computed once per set of Grams ([`Grams::factors`]).
#[derive(Clone)]
enum GramFactor {
    /// `F = L^T` (d x d, upper triangular) from the Cholesky factorisation `G = L L^T`.
    /// (Each factor is shared, so that a GPU keeps it on the device for every layer.)
    Upper(Arc<DMatrix<f64>>),
    /// `F = (P L)^T` (k x d) from the pivoted Cholesky factorisation `P^T G P = L L^T`, cut at
    /// the numerical rank k: a Gram of rank below d_model (a vocabulary smaller than the width,
    /// as the character model's), which has no plain Cholesky factor and is cheaper this way
    /// anyway (k < d).
    Dense(Arc<DMatrix<f64>>),
}

impl GramFactor {
    /// Factored in place in one copy of the Gram (faer's factorisations on a view of its
    /// entries) rather than in faer's own copies, each another d_model² f64 entries.
    fn of(gram: &DMatrix<f64>) -> std::result::Result<GramFactor, String> {
        use faer::dyn_stack::{MemBuffer, MemStack};
        use faer::linalg::cholesky::{llt, llt_pivoting};
        let n = gram.nrows();
        let par = faer::get_global_parallelism();
        let mut factored = gram.clone();
        fn view(m: &mut DMatrix<f64>) -> faer::MatMut<'_, f64> {
            let (rows, columns) = m.shape();
            faer::MatMut::from_column_major_slice_mut(m.as_mut_slice(), rows, columns)
        }
        let mut scratch = MemBuffer::new(llt::factor::cholesky_in_place_scratch::<f64>(n, par, Default::default()));
        let plain = llt::factor::cholesky_in_place(
            view(&mut factored),
            Default::default(),
            par,
            MemStack::new(&mut scratch),
            Default::default(),
        );
        if plain.is_ok() {
            // L is the lower triangle; above it are G's entries, which F = L^T must not hold.
            factored.fill_upper_triangle(0.0, 1);
            factored.transpose_mut();
            return Ok(GramFactor::Upper(Arc::new(factored)));
        }
        // Semi-definite: pivoted Cholesky stops where every remaining pivot is below d·ε of the
        // largest diagonal entry (what is dropped is below the rounding of G itself); d·k² work,
        // where an eigendecomposition is d³ and delayed the tab's first heads.
        if !(0..n).any(|i| gram[(i, i)] > 0.0) {
            // A zero Gram (no rows, or all zero) has rank 0; faer would divide by its zero pivot.
            return Ok(GramFactor::Dense(Arc::new(DMatrix::zeros(0, n))));
        }
        // The failed attempt overwrote part of the copy.
        factored.copy_from(gram);
        let (mut perm, mut perm_inv) = (vec![0usize; n], vec![0usize; n]);
        let mut scratch = MemBuffer::new(llt_pivoting::factor::cholesky_in_place_scratch::<usize, f64>(
            n,
            faer::Par::Seq,
            Default::default(),
        ));
        let (info, _) = llt_pivoting::factor::cholesky_in_place(
            view(&mut factored),
            &mut perm,
            &mut perm_inv,
            faer::Par::Seq,
            MemStack::new(&mut scratch),
            Default::default(),
        )
        .map_err(|_| "the Gram matrix is not positive semi-definite".to_string())?;
        // Row i of P^T G P is G's row perm[i]; L is the lower triangle of `factored`.
        let mut f = DMatrix::zeros(info.rank, n);
        for r in 0..info.rank {
            for i in r..n {
                f[(r, perm[i])] = factored[(i, r)];
            }
        }
        Ok(GramFactor::Dense(Arc::new(f)))
    }

    /// The factor and what it is known to be.
    fn parts(&self) -> (&Arc<DMatrix<f64>>, Factor) {
        match self {
            GramFactor::Upper(upper) => (upper, Factor::UpperTriangular),
            GramFactor::Dense(f) => (f, Factor::General),
        }
    }

    /// `F X`, X first folded as `fold` says, kept on `backend` for products of its
    /// `block`-column blocks.
    async fn apply(
        &self,
        backend: &mut Backend,
        x: Columns<'_>,
        block: usize,
        fold: Option<Fold<'_>>,
    ) -> crate::Result<Kept> {
        let (f, form) = self.parts();
        backend.multiply_kept(f, form, x, block, fold).await
    }

    /// [`GramFactor::apply`], with the folded X kept beside `F X`.
    async fn apply_keeping(
        &self,
        backend: &mut Backend,
        x: Columns<'_>,
        block: usize,
        fold: Option<Fold<'_>>,
    ) -> crate::Result<(Kept, Kept)> {
        let (f, form) = self.parts();
        backend.multiply_keeping_both(f, form, x, block, fold).await
    }
}

/// The two Gram factors the layers' products use: the embedding's, and the unembedding's when
/// it is not tied.
#[derive(Clone)]
pub struct GramFactors {
    embed: GramFactor,
    unembed: Option<GramFactor>,
}

/// What every layer's products need of the Grams ([`Grams::for_products`]): the factors of
/// `W_E^T W_E` and (untied) `W_U W_U^T`, and C = `W_U W_E`, each shared (a GPU keeps them on the
/// device). The Gram matrices themselves are not read again, so a caller that keeps only this
/// frees them: at Llama-3-8B's width 268 MB, for every layer's products.
#[derive(Clone)]
pub struct ProductGrams {
    /// Or why the Grams have no factors (not positive semi-definite): then no token-space
    /// circuit can be read.
    factors: std::result::Result<GramFactors, String>,
    cross: Arc<DMatrix<f64>>,
    tied: bool,
    /// What computed the Grams (the fingerprint records it).
    pub backend: BackendInfo,
}

/// The vocabulary-Gram products of every head of one layer, as a few large products on the
/// backend instead of one per head, through the Grams' factors ([`GramFactor`]): one
/// `F_E [W_Q | W_K | W_V]` over all query heads and, once each, the key/value heads
/// (grouped-query heads share them), `C W_V` untied (from the same upload of W_V), and `F_U Ô^T`
/// (`F_E Ô^T` tied) for all heads. The backend is handed the weights as stored and folds them
/// itself in folded mode ([`Fold`]: a GPU on the device, so only the stored values cross). These
/// stay where the backend computed them (a GPU's on the device); each head's small products are
/// then products of their d_head-wide column blocks ([`Backend::column_products`]), and only
/// those are held here.
pub struct LayerProducts {
    qk: Vec<Factored>,
    ov: Vec<Factored>,
}

impl LayerProducts {
    /// The products of every head of `layer`, folded with its ln1 (reading weights) and
    /// `ln_final` (W_O as the unembedding sees it) in folded mode, as [`HeadWeights::new`] folds
    /// them. The outer error is the backend's (a GPU that failed: the caller falls back); the
    /// inner one says the Grams could not be factored (not positive semi-definite), and then no
    /// token-space circuit can be read.
    pub async fn new(
        config: &ModelConfig,
        layer: &Layer,
        ln_final: &Norm,
        mode: Mode,
        grams: &ProductGrams,
        backend: &mut Backend,
    ) -> crate::Result<std::result::Result<LayerProducts, String>> {
        let d_head = config.d_head;
        let group = (config.heads / config.kv_heads.max(1)).max(1);
        let (count, kv_count) = (config.heads, config.heads.div_ceil(group));
        let folded = mode == Mode::Folded;
        let reading =
            layer.ln1.as_ref().filter(|_| folded).map(|norm| Fold { norm, kind: config.norm, transposed: false });
        let writing = folded.then_some(Fold { norm: ln_final, kind: config.norm, transposed: true });
        let factors = match &grams.factors {
            Ok(factors) => factors,
            Err(reason) => return Ok(Err(reason.clone())),
        };
        let unembed = factors.unembed.as_ref().unwrap_or(&factors.embed);
        // The weights are handed over where the layer holds them: a GPU sends them a chunk at a
        // time, and the CPU widens each stacked input to f64 for its product and drops it then
        // (at Pythia-1B's width they are 100 MB apiece, and the tab's workers count every one).
        let attention = circuit_attention(config, layer, mode);
        let qkv = Columns::SideBySide(vec![&attention.w_q, &attention.w_k, &attention.w_v]);
        let (factor_embed, cross_v) = match grams.tied {
            true => (factors.embed.apply(backend, qkv, d_head, reading).await?, None),
            false => {
                let v = (count + kv_count) * d_head..(count + 2 * kv_count) * d_head;
                let (product, cross_v) =
                    backend.multiply_kept_twice(factors.embed.parts(), &grams.cross, qkv, v, d_head, reading).await?;
                (product, Some(cross_v))
            }
        };
        // Ô^T = (W_O T)^T, d_model x (heads d_head): W_O's rows as columns, folded transposed.
        let o = Columns::Transposed(&attention.w_o);
        // Untied, the OV circuit's `B A = Ô C W_V` reads Ô^T itself, kept beside `F_U Ô^T`.
        let (factor_o, o) = match cross_v {
            Some(_) => {
                let (product, o) = unembed.apply_keeping(backend, o, d_head, writing).await?;
                (product, Some(o))
            }
            None => (unembed.apply(backend, o, d_head, writing).await?, None),
        };

        let each = |first| Blocks { first, group: 1 };
        let shared_by_group = |first| Blocks { first, group };
        let (q, k, v) = (0, count, count + kv_count);
        let run =
            |left, left_blocks, right, right_blocks, count| ColumnRun { left, left_blocks, right, right_blocks, count };
        let ov_small = match (&o, &cross_v) {
            (Some(o), Some(cross_v)) => run(o, each(0), cross_v, shared_by_group(0), count),
            _ => run(&factor_o, each(0), &factor_embed, shared_by_group(v), count),
        };
        let runs = [
            // QK: `W_K^T G_E W_Q`, `W_Q^T G_E W_Q`, `W_K^T G_E W_K`.
            run(&factor_embed, shared_by_group(k), &factor_embed, each(q), count),
            run(&factor_embed, each(q), &factor_embed, each(q), count),
            run(&factor_embed, each(k), &factor_embed, each(k), kv_count),
            // OV: `Ô C W_V` (`Ô G_E W_V` tied), `W_V^T G_E W_V`, `Ô G_U Ô^T`.
            ov_small,
            run(&factor_embed, each(v), &factor_embed, each(v), kv_count),
            run(&factor_o, each(0), &factor_o, each(0), count),
        ];
        let mut products = backend.column_products(d_head, &runs).await?.into_iter();
        let mut take = |n: usize| products.by_ref().take(n).collect::<Vec<_>>();
        let (qk_small, q_gram, k_gram) = (take(count), take(count), take(kv_count));
        let (ov_small, v_gram, o_gram) = (take(count), take(kv_count), take(count));
        let qk = qk_small
            .into_iter()
            .zip(q_gram)
            .enumerate()
            .map(|(h, (small, gram_left))| Factored { small, gram_left, gram_right: k_gram[h / group].clone() })
            .collect();
        let ov = ov_small
            .into_iter()
            .zip(o_gram)
            .enumerate()
            .map(|(h, (small, gram_right))| Factored { small, gram_left: v_gram[h / group].clone(), gram_right })
            .collect();
        Ok(Ok(LayerProducts { qk, ov }))
    }

    /// Head `head`'s token-space QK circuit: `B A = W_K^T G_E W_Q`, `A^T A = W_Q^T G_E W_Q`,
    /// `B B^T = W_K^T G_E W_K` (see [`HeadWeights::qk_token`]).
    pub fn qk_token(&self, head: usize) -> Factored {
        self.qk[head].clone()
    }

    /// Head `head`'s token-space OV circuit: `B A = Ô C W_V` (`Ô G_E W_V` tied),
    /// `A^T A = W_V^T G_E W_V`, `B B^T = Ô G_U Ô^T` (see [`HeadWeights::ov_token`]).
    pub fn ov_token(&self, head: usize) -> Factored {
        self.ov[head].clone()
    }
}
