//! The weight-space circuits of every head (spec section 1), in f64, with LayerNorm folded
//! the way TransformerLens's `fold_ln=True` does (`center_writing_weights=False,
//! center_unembed=False`) or raw. The three d_model x d_model Gram matrices of the embedding
//! and unembedding are computed once per model; every head then costs O(d_model² · d_head).

use nalgebra::{DMatrix, DMatrixView};

use super::HeadId;
use super::spectrum::Factored;
use crate::Result;
use crate::backend::{Backend, BackendInfo};
use crate::model::{Layer, Model, ModelConfig, Norm, NormKind, Weights};

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

/// The embedding/unembedding Gram matrices: `W_E^T W_E`, `W_U W_E`, `W_U W_U^T` (raw), in f64.
///
/// They are accumulated in f64 from f32 rows, a block at a time (each block's products on the
/// CPU in f64, or on a GPU from split f32 parts with error-free sums, ~1e-11 of f64: see
/// src/backend/products.wgsl), and every per-head product with them is f64. An f32 path was measured (tests/gram_precision.rs, vocabulary 50257):
/// its Grams were within 2e-7 relative, but an embedding with a common direction (as trained
/// ones have) makes `A^T A = W_V^T G_E W_V` ill-conditioned, and κ of the token-space OV circuit
/// came out up to 3% off. In f64 the same comparison agrees to ~1e-10.
/// Vocabulary rows per Gram segment: the unit of work the tab's pool hands a worker (and the
/// order of the sums everywhere, so every path gives the same bits). 4096 rows of GPT-2's
/// width are ~6 GFLOP, far more than passing the 768 x 768 result between workers.
pub const SEGMENT_ROWS: usize = 4096;

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
    /// `W_U W_E`; empty when tied (then it equals `embed`).
    pub cross: DMatrix<f64>,
    /// `W_U W_U^T`; empty when tied.
    pub unembed: DMatrix<f64>,
    pub tied: bool,
    /// What computed the products (the fingerprint records it).
    pub backend: BackendInfo,
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

    /// The Grams with the products on `backend`: W_E and W_U are read a block of token rows at a
    /// time (from memory or by byte range: the same blocks either way, so the same sums in the
    /// same order) and never held whole. `each(rows done, vocabulary)` follows every block (the
    /// tab shows it); a GPU that fails restarts the count on the CPU.
    ///
    /// The sum is taken as the tab's worker pool takes it: each segment of [`SEGMENT_ROWS`]
    /// vocabulary rows summed from zero, then the segments added in order ([`Grams::add`]). So
    /// the pool, whichever worker computed which segment, gives these same bits.
    pub fn stream_with_progress(
        model: &(impl Weights + ?Sized),
        backend: &mut Backend,
        each: &mut dyn FnMut(usize, usize),
    ) -> Result<Grams> {
        let (vocab, d_model) = (model.config().vocab, model.config().d_model);
        let tied = model.tied();
        let mut grams = backend.with_fallback(|backend| {
            let mut grams = Grams::zeros(d_model, tied);
            for segment in 0..segments(vocab) {
                grams.add(&Grams::segment_with_progress(model, backend, segment, each)?)?;
            }
            Ok(grams)
        })?;
        grams.backend = backend.info();
        Ok(grams)
    }

    /// One segment's share of the Grams (`segment` < [`segments`]), summed from zero: what one
    /// worker of the tab's pool computes; [`Grams::add`] the segments in order for the Grams.
    pub fn segment(model: &(impl Weights + ?Sized), backend: &mut Backend, segment: usize) -> Result<Grams> {
        let mut part =
            backend.with_fallback(|backend| Grams::segment_with_progress(model, backend, segment, &mut |_, _| {}))?;
        part.backend = backend.info();
        Ok(part)
    }

    fn segment_with_progress(
        model: &(impl Weights + ?Sized),
        backend: &mut Backend,
        segment: usize,
        each: &mut dyn FnMut(usize, usize),
    ) -> Result<Grams> {
        let (vocab, d_model) = (model.config().vocab, model.config().d_model);
        let rows = segment_rows(vocab, segment);
        let mut part = Grams::zeros(d_model, model.tied());
        let block = backend.block_rows(d_model).min(SEGMENT_ROWS);
        for start in rows.clone().step_by(block) {
            let rows = start..(start + block).min(rows.end);
            let embed = model.embedding_rows(rows.clone())?;
            // W_U's columns for these tokens, as rows (W_U^T's rows, as the files hold them).
            let unembed = if part.tied { None } else { Some(model.unembedding_rows(rows.clone())?) };
            part.add_block(backend, &embed, unembed.as_ref())?;
            each(rows.end, vocab);
        }
        Ok(part)
    }

    /// Adds another segment's Grams, entry by entry (the order of the additions is the caller's:
    /// segment by segment, in order, gives [`Grams::stream_with_progress`]'s bits).
    pub fn add(&mut self, part: &Grams) -> Result<()> {
        if part.tied != self.tied
            || part.embed.shape() != self.embed.shape()
            || part.cross.shape() != self.cross.shape()
        {
            return Err(crate::Error::Invalid("Gram segments of different models cannot be added".into()));
        }
        self.embed += &part.embed;
        self.cross += &part.cross;
        self.unembed += &part.unembed;
        Ok(())
    }

    /// Every entry, in order: `embed`, `cross`, `unembed` (column-major); what passes between the
    /// tab's workers, beside the shape in [`Grams::from_values`].
    pub fn values(&self) -> Vec<f64> {
        [&self.embed, &self.cross, &self.unembed].iter().flat_map(|m| m.as_slice().iter().copied()).collect()
    }

    /// The Grams whose [`Grams::values`] these are.
    pub fn from_values(d_model: usize, tied: bool, values: &[f64]) -> Result<Grams> {
        let square = d_model * d_model;
        let expected = if tied { square } else { 3 * square };
        if values.len() != expected {
            return Err(crate::Error::Invalid(format!(
                "{} Gram entries for width {d_model} ({}): expected {expected}",
                values.len(),
                if tied { "tied" } else { "untied" }
            )));
        }
        let mut grams = Grams::zeros(d_model, tied);
        grams.embed.as_mut_slice().copy_from_slice(&values[..square]);
        if !tied {
            grams.cross.as_mut_slice().copy_from_slice(&values[square..2 * square]);
            grams.unembed.as_mut_slice().copy_from_slice(&values[2 * square..]);
        }
        Ok(grams)
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
        Grams { embed: DMatrix::zeros(d_model, d_model), cross, unembed, tied, backend: BackendInfo::default() }
    }

    /// Adds one block of token rows: `embed` is W_E's rows (rows x d_model), `unembed` W_U^T's
    /// matching rows, absent when tied.
    fn add_block(&mut self, backend: &mut Backend, embed: &DMatrix<f32>, unembed: Option<&DMatrix<f32>>) -> Result<()> {
        backend.add_gram(embed, &mut self.embed)?;
        if let Some(u) = unembed {
            backend.add_product(u, embed, &mut self.cross)?;
            backend.add_gram(u, &mut self.unembed)?;
        }
        Ok(())
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
            fold_reading_transposed(ln_final, config.norm, &mut o_transposed);
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
    pub fn qk(&self) -> Factored {
        let w = self;
        Factored { small: w.w_k.tr_mul(&w.w_q), gram_left: w.w_q.tr_mul(&w.w_q), gram_right: w.w_k.tr_mul(&w.w_k) }
    }

    /// QK in token space: `W_E W_Q W_K^T W_E^T` (A = W_E W_Q, B = W_K^T W_E^T), through the
    /// embedding Gram: `B A = W_K^T G_E W_Q`, `A^T A = W_Q^T G_E W_Q`, `B B^T = W_K^T G_E W_K`.
    /// Unlike the residual-space QK it does not depend on the residual basis: tokens fix it.
    /// W_E is never folded (as in TransformerLens); W_Q and W_K are folded in folded mode.
    pub fn qk_token(&self, grams: &Grams) -> Factored {
        let (w, embed) = (self, &grams.embed);
        self.qk_token_with((embed * &w.w_q).as_view(), (embed * &w.w_k).as_view())
    }

    /// `qk_token` from `G_E W_Q` and `G_E W_K` (computed for a whole layer by [`LayerProducts`]).
    pub fn qk_token_with(&self, embed_q: DMatrixView<f64>, embed_k: DMatrixView<f64>) -> Factored {
        let w = self;
        Factored {
            small: w.w_k.tr_mul(&embed_q),
            gram_left: w.w_q.tr_mul(&embed_q),
            gram_right: w.w_k.tr_mul(&embed_k),
        }
    }

    /// OV in residual space: `W_V W_O` (A = W_V, B = W_O).
    pub fn ov_residual(&self) -> Factored {
        let w = self;
        Factored { small: &w.w_o * &w.w_v, gram_left: w.w_v.tr_mul(&w.w_v), gram_right: &w.w_o * w.w_o.transpose() }
    }

    /// OV in token space: `W_E W_V W_O W_U` (A = W_E W_V, B = W_O W_U), through the Grams:
    /// `B A = Ô C W_V`, `A^T A = W_V^T G_E W_V`, `B B^T = Ô G_U Ô^T` with Ô = W_O T.
    /// Two d_model² · d_head products per head when the unembedding is tied, three otherwise.
    pub fn ov_token(&self, grams: &Grams) -> Factored {
        let w = self;
        let embed_v = &grams.embed * &w.w_v;
        let o_hat_t = w.w_o_unembed.transpose();
        let (cross_v, unembed_o) = match grams.tied {
            true => (None, &grams.embed * o_hat_t),
            false => (Some(&grams.cross * &w.w_v), &grams.unembed * o_hat_t),
        };
        self.ov_token_with(embed_v.as_view(), cross_v.as_ref().map(|c| c.as_view()), unembed_o.as_view())
    }

    /// `ov_token` from `G_E W_V`, `C W_V` (untied only) and `G_U Ô^T` (`G_E Ô^T` tied), computed
    /// for a whole layer by [`LayerProducts`].
    pub fn ov_token_with(
        &self,
        embed_v: DMatrixView<f64>,
        cross_v: Option<DMatrixView<f64>>,
        unembed_o: DMatrixView<f64>,
    ) -> Factored {
        let (w, o_hat) = (self, &self.w_o_unembed);
        Factored {
            small: o_hat * cross_v.unwrap_or(embed_v),
            gram_left: w.w_v.tr_mul(&embed_v),
            gram_right: o_hat * unembed_o,
        }
    }
}

/// The vocabulary-Gram products of every head of one layer, as one large product per kind
/// instead of one per head: `G_E W_Q` for all query heads, `G_E W_K`, `G_E W_V` (and `C W_V`
/// untied) once per key/value head (grouped-query heads share them), and `G_U Ô^T` for all
/// heads. The same entries as the per-head products (each is a dot product of the same row and
/// column, summed in the same order), at a fraction of the calls; on native the large products
/// run on every core.
pub struct LayerProducts {
    d_head: usize,
    group: usize,
    embed_q: DMatrix<f64>,
    embed_k: DMatrix<f64>,
    embed_v: DMatrix<f64>,
    cross_v: Option<DMatrix<f64>>,
    unembed_o: DMatrix<f64>,
}

impl LayerProducts {
    /// `heads` are the layer's heads in order, all of them.
    pub fn new(config: &ModelConfig, heads: &[HeadWeights], grams: &Grams) -> LayerProducts {
        let (d_model, d_head) = (config.d_model, config.d_head);
        let group = (config.heads / config.kv_heads.max(1)).max(1);
        let stack = |chosen: &[&HeadWeights], pick: &dyn Fn(&HeadWeights) -> DMatrix<f64>| {
            let mut stacked = DMatrix::zeros(d_model, chosen.len() * d_head);
            for (i, w) in chosen.iter().enumerate() {
                stacked.columns_mut(i * d_head, d_head).copy_from(&pick(w));
            }
            stacked
        };
        let all: Vec<&HeadWeights> = heads.iter().collect();
        // The first head of each group carries its key/value head's weights.
        let shared: Vec<&HeadWeights> = heads.iter().step_by(group).collect();
        let q = stack(&all, &|w| w.w_q.clone());
        let k = stack(&shared, &|w| w.w_k.clone());
        let v = stack(&shared, &|w| w.w_v.clone());
        let o = stack(&all, &|w| w.w_o_unembed.transpose());
        let unembed = if grams.tied { &grams.embed } else { &grams.unembed };
        LayerProducts {
            d_head,
            group,
            embed_q: &grams.embed * q,
            embed_k: &grams.embed * k,
            embed_v: &grams.embed * &v,
            cross_v: (!grams.tied).then(|| &grams.cross * &v),
            unembed_o: unembed * o,
        }
    }

    /// Head `head`'s token-space QK circuit.
    pub fn qk_token(&self, w: &HeadWeights, head: usize) -> Factored {
        let kv = head / self.group;
        w.qk_token_with(
            self.embed_q.columns(head * self.d_head, self.d_head),
            self.embed_k.columns(kv * self.d_head, self.d_head),
        )
    }

    /// Head `head`'s token-space OV circuit.
    pub fn ov_token(&self, w: &HeadWeights, head: usize) -> Factored {
        let (kv, d) = (head / self.group, self.d_head);
        w.ov_token_with(
            self.embed_v.columns(kv * d, d),
            self.cross_v.as_ref().map(|c| c.columns(kv * d, d)),
            self.unembed_o.columns(head * d, d),
        )
    }
}
