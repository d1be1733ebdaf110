//! A model the worker holds, and what the requests compute from it: its files (read by byte
//! range whenever weights are needed), the small things every request needs, fingerprints, the
//! induction probe and its shares, attention patterns and verdict tables.

use std::collections::HashMap;

use super::pool::combine_induction;
use super::protocol::{
    InductionRun, InductionShare, ModelId, ModelInfo, Pattern, PinnedLink, ProbeSequence, Progress, Scored,
};
use super::stages::{PROBE_STAGE, fingerprint_stage, probe_len_with};
use crate::analysis::circuits::Grams;
use crate::analysis::fingerprint::fingerprint_layers;
use crate::analysis::{HeadId, Mode, ModelFingerprint};
use crate::backend::Backend;
use crate::model::{CopySource, ModelConfig, ModelStream, OpenedModel};
use crate::probes::induction::{SequenceScores, induction_cells, score_sequences};
use crate::probes::suite::VerdictRow;
use crate::probes::{Suite, attention_patterns, verdict_table};
use crate::tokens::{Bos, with_bos};
use crate::{Error, Result};

/// A loaded model: its files (read by byte range whenever weights are needed, never held as
/// f32 whole) and what every request needs that is small: the configuration, tokenizer, BOS and
/// the d_model x d_model Grams.
pub(super) struct Held {
    pub(super) opened: OpenedModel,
    /// A model by link as opened.
    pub(super) link: Option<PinnedLink>,
    pub(super) config: ModelConfig,
    /// None between a pool's `Open` and its `SetGrams`.
    pub(super) grams: Option<Grams>,
    pub(super) bos: Option<Bos>,
    pub(super) parameters: u64,
    pub(super) facts: Vec<(String, String)>,
}

impl Held {
    /// The model's weights, read from its files as they are asked for (opening reads only the
    /// headers, config.json and the final norm).
    pub(super) fn stream(&self) -> Result<ModelStream<'_>> {
        self.opened.stream()
    }

    /// Bytes held between requests: the Grams, and the tokenizer counted as the pre-load estimate
    /// counts it (8 times its JSON, which the files keep too). The weight files are browser
    /// `File`s, outside wasm memory.
    pub(super) fn resident_bytes(&self) -> u64 {
        let grams = self.grams.as_ref().map_or(0, Grams::bytes);
        grams + 8 * self.opened.files.tokenizer_json.as_ref().map_or(0, |t| t.len() as u64)
    }

    /// Text or, for models without a vocabulary, comma-separated ids.
    fn encode(&self, text: &str) -> Result<Vec<usize>> {
        self.opened.tokenizer.encode(text)
    }

    pub(super) fn head(&self, head: HeadId) -> Result<HeadId> {
        HeadId::parse(&head.to_string(), &self.config)
    }

    pub(super) fn grams(&self) -> Result<&Grams> {
        self.grams.as_ref().ok_or_else(|| Error::Worker("the model's Grams are not computed yet in this worker".into()))
    }

    pub(super) fn info(&self) -> ModelInfo {
        ModelInfo {
            config: self.config.clone(),
            parameters: self.parameters,
            facts: self.facts.clone(),
            bos: self.bos.clone(),
            link: self.link.clone(),
        }
    }

    pub(super) fn scored(&self, values: &[f64], ids: Vec<usize>) -> Vec<Scored> {
        ids.into_iter().map(|i| (self.opened.tokenizer.token_text(i), values[i])).collect()
    }

    /// Every head in one mode, a layer read at a time, reporting each head as its layer is done
    /// (and the stage before the first layer is read).
    pub(super) fn fingerprint(&self, mode: Mode, report: &dyn Fn(Progress)) -> Result<ModelFingerprint> {
        let stage = fingerprint_stage(mode);
        let heads = (self.config.layers * self.config.heads) as u64;
        let grid = Some((self.config.layers, self.config.heads));
        report(Progress { stage: stage.clone(), done: 0, total: heads, grid, heads: Vec::new() });
        fingerprint_layers(&self.stream()?, self.grams()?, mode, &mut |head, done, _| {
            let heads_done = vec![head.clone()];
            report(Progress { stage: stage.clone(), done: done as u64, total: heads, grid, heads: heads_done });
        })
    }

    /// The BOS id to prepend, if asked for and the model has one.
    fn bos(&self, prepend_bos: bool) -> Option<usize> {
        self.bos.as_ref().filter(|_| prepend_bos).map(|b| b.id)
    }

    /// The whole induction probe on `backend` (see [`Held::induction_share`]).
    pub(super) async fn induction(
        &self,
        sequence: &ProbeSequence,
        prepend_bos: bool,
        backend: &mut Backend,
        report: &dyn Fn(Progress),
    ) -> InductionRun {
        combine_induction(vec![self.induction_share(sequence, prepend_bos, 0, 1, backend, report).await])
    }

    /// Share `share` of `shares` of the probe's sequences (the pool gives each worker one),
    /// each run and scored alone, the forward pass on `backend`; a GPU that fails reruns the
    /// whole share on the CPU, and the share says so.
    pub(super) async fn induction_share(
        &self,
        sequence: &ProbeSequence,
        prepend_bos: bool,
        share: usize,
        shares: usize,
        backend: &mut Backend,
        report: &dyn Fn(Progress),
    ) -> InductionShare {
        let bos = self.bos(prepend_bos);
        // A BOS can leave one position too few for the copies asked for: they are shortened,
        // and the description names the length actually used.
        let sequence = match sequence {
            ProbeSequence::UniformRandom { len, .. } | ProbeSequence::TextWindow { len, .. } => {
                sequence.with_len(probe_len_with(&self.config, *len, bos))
            }
        };
        let scores = self.share_scores(&sequence, bos, share, shares, backend, report).await;
        let shown_bos = self.bos.as_ref().filter(|_| prepend_bos);
        InductionShare {
            sequence: sequence.describe(shown_bos),
            bos,
            scores: scores.map_err(|e| e.to_string()),
            backend: backend.forward_info(),
        }
    }

    /// The scores of this share's sequences, run on `backend` (the whole share again on the CPU
    /// when the GPU fails).
    async fn share_scores(
        &self,
        sequence: &ProbeSequence,
        bos: Option<usize>,
        share: usize,
        shares: usize,
        backend: &mut Backend,
        report: &dyn Fn(Progress),
    ) -> Result<Vec<SequenceScores>> {
        if share >= shares {
            return Err(Error::Worker(format!("no share {share} of {shares} of the induction probe")));
        }
        let model = self.stream()?;
        let (source, len, seed, count) = match sequence {
            ProbeSequence::UniformRandom { seed, len, count } => (CopySource::Random, len, seed, count),
            ProbeSequence::TextWindow { text, seed, len, count } => (CopySource::Text(text), len, seed, count),
        };
        let copies = self.opened.first_copies(&model, &source, *len, *seed, *count)?;
        let mine = &copies[share * copies.len() / shares..(share + 1) * copies.len() / shares];
        if mine.is_empty() {
            return Ok(Vec::new());
        }
        backend
            .with_fallback(async |backend| {
                score_sequences(&model, mine, bos, backend, &mut |done, total| {
                    report(Progress::new(PROBE_STAGE, done as u64, total as u64))
                })
                .await
            })
            .await
    }

    /// One head's attention pattern on `text`, the forward pass on `backend`.
    pub(super) async fn pattern(
        &self,
        head: HeadId,
        text: &str,
        prepend_bos: bool,
        backend: &mut Backend,
    ) -> Result<Pattern> {
        let head = self.head(head)?;
        let ids = with_bos(self.bos(prepend_bos), &self.encode(text)?);
        let stream = self.stream()?;
        let patterns = backend.with_fallback(async |backend| attention_patterns(&stream, &ids, backend).await).await?;
        let matrix = &patterns[head.layer][head.head];
        let rows = (0..ids.len()).map(|q| (0..ids.len()).map(|k| matrix[(q, k)] as f64).collect()).collect();
        Ok(Pattern {
            tokens: ids.iter().map(|&i| self.opened.tokenizer.token_text(i)).collect(),
            rows,
            marks: induction_cells(&ids),
        })
    }

    /// A suite's verdict table for one head, the forward pass on `backend`.
    pub(super) async fn verdicts(
        &self,
        head: HeadId,
        suite: &Suite,
        prepend_bos: bool,
        backend: &mut Backend,
    ) -> Result<Vec<VerdictRow>> {
        let (head, bos, stream) = (self.head(head)?, self.bos(prepend_bos), self.stream()?);
        backend
            .with_fallback(async |backend| {
                verdict_table(&stream, &self.opened.tokenizer, suite, head, bos, backend).await
            })
            .await
    }
}

pub(super) fn held_in(models: &HashMap<ModelId, Held>, model: ModelId) -> Result<&Held> {
    models.get(&model).ok_or_else(|| not_loaded(model))
}

pub(super) fn not_loaded(model: ModelId) -> Error {
    Error::Worker(format!("model {model} is not loaded in the worker"))
}
