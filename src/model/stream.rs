//! A model read a layer at a time: the configuration and the small tensors are held, every
//! large one is read from the files when asked for, so memory stays at one layer (plus a block
//! of vocabulary rows) whatever the model's size.

use std::ops::Range;

use nalgebra::DMatrix;

use super::{Blueprint, Layer, LoadParts, ModelConfig, Norm, Reader};
use crate::Result;
use crate::weights::{ModelFiles, TensorStore};

pub struct ModelStream<'a> {
    pub config: ModelConfig,
    pub ln_final: Norm,
    pub parameter_count: u64,
    store: TensorStore<'a>,
    blueprint: Blueprint,
}

impl<'a> ModelStream<'a> {
    /// Reads the headers, config.json and the final norm; no layer and no embedding yet.
    pub fn open(files: &'a ModelFiles) -> Result<Self> {
        let store = TensorStore::open(files)?;
        let blueprint = Blueprint::read(&store, files)?;
        let config = blueprint.config.clone();
        let ln_final =
            Reader { store: &store, family: config.family }.norm(&blueprint.final_norm, config.d_model, config.norm)?;
        Ok(ModelStream { parameter_count: blueprint.parameter_count, config, ln_final, store, blueprint })
    }

    fn reader(&self) -> Reader<'_> {
        Reader { store: &self.store, family: self.config.family }
    }

    /// Layer `l`, exactly as `Model::load` would hold it.
    pub fn layer(&self, l: usize, parts: LoadParts) -> Result<Layer> {
        self.blueprint.layer(&mut self.reader(), l, parts)
    }

    /// Rows `rows` of the embedding W_E (token rows x d_model).
    pub fn embedding_rows(&self, rows: Range<usize>) -> Result<DMatrix<f32>> {
        self.reader().matrix_rows(&self.blueprint.embedding, self.config.vocab, self.config.d_model, rows)
    }

    /// Rows `rows` of W_U^T (token rows x d_model, as nn.Linear stores the unembedding); None
    /// when the unembedding is tied to the embedding.
    pub fn unembedding_rows(&self, rows: Range<usize>) -> Result<Option<DMatrix<f32>>> {
        match &self.blueprint.unembedding {
            Some(name) => Ok(Some(self.reader().matrix_rows(name, self.config.vocab, self.config.d_model, rows)?)),
            None => Ok(None),
        }
    }

    /// Whether the unembedding is the embedding's transpose.
    pub fn tied(&self) -> bool {
        self.blueprint.unembedding.is_none()
    }
}
