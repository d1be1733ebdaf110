//! Where a model's weights come from: held whole in memory (`Model`), or read from the files a
//! layer at a time (`ModelStream`: the configuration and the small tensors are held, every large
//! one is read when asked for, so memory stays at one layer plus a block of vocabulary rows
//! whatever the model's size). The forward pass, the probes and the token-level views read
//! through `Weights`, so they run the same on either.

use std::borrow::Cow;
use std::collections::HashMap;
use std::ops::Range;

use nalgebra::{DMatrix, DVector};

use std::sync::atomic::{AtomicBool, Ordering};

use super::{Blueprint, Layer, LoadParts, Model, ModelConfig, Norm, Reader, is_buffer, is_mlp};
use crate::Result;
use crate::weights::{ModelFiles, TensorStore};

/// Vocabulary rows read (and widened to f32) at a time where a pass over the whole vocabulary
/// is needed (the logits of a forward pass, the token-level OV views).
pub const VOCAB_BLOCK: usize = 1024;

/// A model's weights, wherever they are (natively read from several threads at once).
pub trait Weights: crate::parallel::Shareable {
    fn config(&self) -> &ModelConfig;
    /// Parameters the files hold (tied copies counted once), as the summaries report them.
    fn parameter_count(&self) -> u64;
    fn ln_final(&self) -> &Norm;
    /// Token strings of character models (file metadata `vocab`).
    fn vocab_strings(&self) -> Option<&[String]>;
    /// Layer `l`: borrowed when held, read from the files when streamed.
    fn layer(&self, l: usize, parts: LoadParts) -> Result<Cow<'_, Layer>>;
    /// Rows `rows` of the embedding W_E as stored (tokens x d_model).
    fn stored_embedding_rows(&self, rows: Range<usize>) -> Result<DMatrix<f32>>;
    /// The norm on the embedding ([`super::Features::embedding_norm`]).
    fn embedding_norm(&self) -> Option<&Norm>;
    /// W_U's columns for tokens `rows`, as rows (tokens x d_model); W_E's stored rows when tied.
    fn unembedding_rows(&self, rows: Range<usize>) -> Result<DMatrix<f32>>;
    /// Whether the file ties the unembedding to the embedding (it has no W_U of its own).
    fn stored_tied(&self) -> bool;
    /// The learned position rows 0..len; None for rotary models.
    fn positions(&self, len: usize) -> Result<Option<DMatrix<f32>>>;
    fn unembedding_bias(&self) -> Option<&DVector<f32>>;

    /// Rows `rows` of the embedding as the residual stream receives it: W_E's rows times the
    /// family's embedding factor, then through its embedding norm, where it has them (every
    /// circuit and the forward pass read W_E so).
    fn embedding_rows(&self, rows: Range<usize>) -> Result<DMatrix<f32>> {
        let mut stored = self.stored_embedding_rows(rows)?;
        let features = &self.config().features;
        if let Some(scale) = features.embedding_scale {
            stored *= scale;
        }
        Ok(match self.embedding_norm() {
            Some(norm) => crate::forward::normalise(&stored, norm, self.config().norm, self.config().norm_eps),
            None => stored,
        })
    }

    /// Whether W_U is the transpose of the embedding as the residual stream receives it (then
    /// the Grams share one product): tied in the file, and the embedding neither scaled nor normed.
    fn tied(&self) -> bool {
        self.stored_tied() && self.config().features.plain_embedding()
    }

    /// The embedding rows of `tokens`, in order (checked against the vocabulary by the caller).
    fn embedding_of(&self, tokens: &[usize]) -> Result<DMatrix<f32>> {
        rows_of(tokens, self.config().d_model, |t| self.embedding_rows(t..t + 1))
    }

    /// W_U's columns for `tokens`, as rows.
    fn unembedding_of(&self, tokens: &[usize]) -> Result<DMatrix<f32>> {
        rows_of(tokens, self.config().d_model, |t| self.unembedding_rows(t..t + 1))
    }

    /// `normed W_U` (positions x vocab, without the bias) for each of several sequences: W_U
    /// read a block of tokens at a time, once for all of them.
    fn unembed(&self, normed: &[DMatrix<f32>]) -> Result<Vec<DMatrix<f32>>> {
        let vocab = self.config().vocab;
        let mut logits: Vec<DMatrix<f32>> = normed.iter().map(|n| DMatrix::zeros(n.nrows(), vocab)).collect();
        for start in (0..vocab).step_by(VOCAB_BLOCK) {
            let block = self.unembedding_rows(start..(start + VOCAB_BLOCK).min(vocab))?.transpose();
            for (logits, normed) in logits.iter_mut().zip(normed) {
                logits.columns_mut(start, block.ncols()).copy_from(&(normed * &block));
            }
        }
        Ok(logits)
    }
}

/// The rows of `tokens`, each distinct token's read once: a probe's second copy repeats its
/// first, and in the tab every read is a `FileReaderSync` call of about a millisecond.
fn rows_of(tokens: &[usize], d_model: usize, row: impl Fn(usize) -> Result<DMatrix<f32>>) -> Result<DMatrix<f32>> {
    let mut out = DMatrix::zeros(tokens.len(), d_model);
    let mut first_at: HashMap<usize, usize> = HashMap::with_capacity(tokens.len());
    for (i, &t) in tokens.iter().enumerate() {
        match first_at.get(&t) {
            Some(&earlier) => {
                let read = out.row(earlier).into_owned();
                out.row_mut(i).copy_from(&read);
            }
            None => {
                out.row_mut(i).copy_from(&row(t)?.row(0));
                first_at.insert(t, i);
            }
        }
    }
    Ok(out)
}

impl Weights for Model {
    fn config(&self) -> &ModelConfig {
        &self.config
    }
    fn parameter_count(&self) -> u64 {
        self.parameter_count
    }
    fn ln_final(&self) -> &Norm {
        &self.ln_final
    }
    fn vocab_strings(&self) -> Option<&[String]> {
        self.vocab_strings.as_deref()
    }
    fn layer(&self, l: usize, parts: LoadParts) -> Result<Cow<'_, Layer>> {
        let layer = &self.layers[l];
        let mlp_missing = layer.mlp.is_none() && layer.experts.is_none() && !self.config.features.attention_only;
        if parts == LoadParts::Everything && mlp_missing {
            return Err(crate::Error::MissingMlp);
        }
        Ok(Cow::Borrowed(layer))
    }
    fn stored_embedding_rows(&self, rows: Range<usize>) -> Result<DMatrix<f32>> {
        Ok(self.w_e.rows(rows.start, rows.len()).into_owned())
    }
    fn embedding_norm(&self) -> Option<&Norm> {
        self.embedding_norm.as_ref()
    }
    fn unembedding_rows(&self, rows: Range<usize>) -> Result<DMatrix<f32>> {
        match &self.w_u {
            Some(w_u) => Ok(w_u.columns(rows.start, rows.len()).transpose()),
            None => self.stored_embedding_rows(rows),
        }
    }
    fn stored_tied(&self) -> bool {
        self.w_u.is_none()
    }
    fn positions(&self, len: usize) -> Result<Option<DMatrix<f32>>> {
        Ok(self.w_pos.as_ref().map(|w| w.rows(0, len).into_owned()))
    }
    fn unembedding_bias(&self) -> Option<&DVector<f32>> {
        self.b_u.as_ref()
    }
    /// Held whole: one product per sequence.
    fn unembed(&self, normed: &[DMatrix<f32>]) -> Result<Vec<DMatrix<f32>>> {
        // W_E as stored is the tied unembedding, whatever the residual stream receives.
        Ok(normed
            .iter()
            .map(|normed| match &self.w_u {
                Some(w_u) => normed * w_u,
                None => (&self.w_e * normed.transpose()).transpose(),
            })
            .collect())
    }
}

pub struct ModelStream<'a> {
    pub config: ModelConfig,
    pub ln_final: Norm,
    embedding_norm: Option<Norm>,
    pub parameter_count: u64,
    b_u: Option<DVector<f32>>,
    store: TensorStore<'a>,
    blueprint: Blueprint,
    /// Whether the sources were told that the MLPs will be read too.
    announced_everything: AtomicBool,
}

impl<'a> ModelStream<'a> {
    /// Reads the headers, config.json, the final norm and the unembedding bias; no layer and
    /// no embedding yet. Sources that fetch are told what the circuits will read: every tensor
    /// but the MLPs and the buffers.
    pub fn open(files: &'a ModelFiles) -> Result<Self> {
        let store = TensorStore::open(files)?;
        store.announce(|name| !is_buffer(name) && !is_mlp(name));
        let blueprint = Blueprint::read(&store, files)?;
        let config = blueprint.config.clone();
        let mut reader = Reader { store: &store, family: config.family.clone() };
        let ln_final = blueprint.final_norm(&mut reader)?;
        let embedding_norm = blueprint.embedding_norm(&mut reader)?;
        let b_u = match &blueprint.unembedding_bias {
            Some(name) => Some(reader.optional_vector(name, config.vocab)?),
            None => None,
        };
        Ok(ModelStream {
            parameter_count: blueprint.parameter_count,
            config,
            ln_final,
            embedding_norm,
            b_u,
            store,
            blueprint,
            announced_everything: AtomicBool::new(false),
        })
    }

    fn reader(&self) -> Reader<'_> {
        Reader { store: &self.store, family: self.config.family.clone() }
    }

    /// Rows `rows` of W_U^T as the file stores them (token rows x d_model); None when the
    /// unembedding is tied to the embedding.
    pub fn stored_unembedding_rows(&self, rows: Range<usize>) -> Result<Option<DMatrix<f32>>> {
        match &self.blueprint.unembedding {
            Some(name) => Ok(Some(self.reader().matrix_rows(name, self.config.vocab, self.config.d_model, rows)?)),
            None => Ok(None),
        }
    }

    /// The file's own metadata worth showing (training facts of the demo model).
    pub fn facts(&self) -> &[(String, String)] {
        &self.blueprint.facts
    }
}

impl Weights for ModelStream<'_> {
    fn config(&self) -> &ModelConfig {
        &self.config
    }
    fn parameter_count(&self) -> u64 {
        self.parameter_count
    }
    fn ln_final(&self) -> &Norm {
        &self.ln_final
    }
    fn vocab_strings(&self) -> Option<&[String]> {
        self.blueprint.vocab_strings.as_deref()
    }
    /// Layer `l`, exactly as `Model::load` would hold it.
    fn layer(&self, l: usize, parts: LoadParts) -> Result<Cow<'_, Layer>> {
        if parts == LoadParts::Everything && !self.announced_everything.swap(true, Ordering::Relaxed) {
            self.store.announce(|name| !is_buffer(name));
        }
        Ok(Cow::Owned(self.blueprint.layer(&mut self.reader(), l, parts)?))
    }
    fn stored_embedding_rows(&self, rows: Range<usize>) -> Result<DMatrix<f32>> {
        self.reader().matrix_rows(&self.blueprint.embedding, self.config.vocab, self.config.d_model, rows)
    }
    fn embedding_norm(&self) -> Option<&Norm> {
        self.embedding_norm.as_ref()
    }
    fn unembedding_rows(&self, rows: Range<usize>) -> Result<DMatrix<f32>> {
        match self.stored_unembedding_rows(rows.clone())? {
            Some(rows) => Ok(rows),
            None => self.stored_embedding_rows(rows),
        }
    }
    fn stored_tied(&self) -> bool {
        self.blueprint.unembedding.is_none()
    }
    fn positions(&self, len: usize) -> Result<Option<DMatrix<f32>>> {
        match &self.blueprint.positions {
            Some(name) => {
                let (context, offset) = (self.config.context.unwrap_or(0), self.config.features.position_offset);
                Ok(Some(self.reader().matrix_rows(
                    name,
                    context + offset,
                    self.config.d_model,
                    offset..offset + len,
                )?))
            }
            None => Ok(None),
        }
    }
    fn unembedding_bias(&self) -> Option<&DVector<f32>> {
        self.b_u.as_ref()
    }
}

#[cfg(test)]
mod tests {
    use std::cell::RefCell;

    use super::*;

    #[test]
    fn a_repeated_token_is_read_once_and_every_row_is_its_own() {
        let reads = RefCell::new(Vec::new());
        let row = |t: usize| {
            reads.borrow_mut().push(t);
            Ok(DMatrix::from_fn(1, 3, |_, j| (10 * t + j) as f32))
        };
        let tokens = [5, 3, 5, 0, 3, 5];
        let rows = rows_of(&tokens, 3, row).unwrap();
        assert_eq!(*reads.borrow(), vec![5, 3, 0]);
        for (i, &t) in tokens.iter().enumerate() {
            assert_eq!(
                rows.row(i).iter().copied().collect::<Vec<f32>>(),
                vec![10.0 * t as f32, 10.0 * t as f32 + 1.0, 10.0 * t as f32 + 2.0]
            );
        }
    }
}
