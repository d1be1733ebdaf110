//! A model's files opened with its tokenizer, as the CLI, Python, a sweep and the page's workers
//! each hold one, and what they draw from it alike: the BOS and the induction probe's first
//! copies.

use std::path::Path;

use super::{ModelStream, Weights};
use crate::probes::induction::{FirstCopy, RepeatSource, random_first_copies, text_window_first_copies};
use crate::tokens::{Bos, Tokenizer, choose_bos};
use crate::weights::ModelFiles;
use crate::{Error, Result};

/// A model's files and tokenizer: its weights are read from the files a layer at a time when
/// asked for (`stream`), never held whole.
pub struct OpenedModel {
    pub files: ModelFiles,
    pub tokenizer: Tokenizer,
}

/// Where the induction probe's first copies come from.
pub enum CopySource<'a> {
    /// One first copy: these ids.
    Given(&'a [usize]),
    /// Seeded windows of this text, as the model's tokenizer encodes it.
    Text(&'a str),
    /// Seeded windows of this file's text.
    TextFile(&'a Path),
    /// Seeded draws from the vocabulary's ordinary tokens.
    Random,
}

impl OpenedModel {
    /// Opens `files` and makes their tokenizer (which needs the model's configuration and,
    /// for a character model, its metadata).
    pub fn open(files: ModelFiles) -> Result<OpenedModel> {
        let tokenizer = Tokenizer::for_model(&ModelStream::open(&files)?, files.tokenizer_json.as_deref())?;
        Ok(OpenedModel { files, tokenizer })
    }

    /// The weights, read from the files as they are asked for (opening reads the headers,
    /// config.json and the final norm).
    pub fn stream(&self) -> Result<ModelStream<'_>> {
        ModelStream::open(&self.files)
    }

    /// The model's BOS when `wanted` and it has one; `model` is this model's `stream`, which
    /// the caller holds for its other reads.
    pub fn bos(&self, model: &(impl Weights + ?Sized), wanted: bool) -> Option<Bos> {
        if wanted { choose_bos(model, &self.tokenizer) } else { None }
    }

    /// The induction probe's first copies from `source`: given ids as one sequence, else
    /// `sequences` of `len` tokens drawn with seeds `seed, seed + 1, ...`. `model` is this
    /// model's `stream` (random draws skip its special tokens).
    pub fn first_copies(
        &self,
        model: &(impl Weights + ?Sized),
        source: &CopySource,
        len: usize,
        seed: u64,
        sequences: usize,
    ) -> Result<Vec<FirstCopy>> {
        match source {
            CopySource::Given(ids) => Ok(vec![FirstCopy { tokens: ids.to_vec(), source: RepeatSource::Given }]),
            CopySource::Text(text) => text_window_first_copies(&self.tokenizer.encode(text)?, len, seed, sequences),
            CopySource::TextFile(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::File { path: path.display().to_string(), reason: e.to_string() })?;
                self.first_copies(model, &CopySource::Text(&text), len, seed, sequences)
            }
            CopySource::Random => random_first_copies(&self.tokenizer.ordinary_ids(model), len, seed, sequences),
        }
    }
}
