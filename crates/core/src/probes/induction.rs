//! Induction, previous-token and duplicate-token scores, copy fidelity and prefix-copy accuracy
//! on sequences repeated once (Olsson et al.; TransformerLens's induction demo), averaged over
//! several seeded sequences (docs/methods.md#5-probes-running-the-model).
//!
//! Positions: with a BOS, the sequence is `BOS, x_1..x_n, x_1..x_n` (2n + 1 tokens) and the
//! second copy is positions n + 1 ..= 2n; without one, `x_1..x_n, x_1..x_n` and n ..= 2n - 1.
//! Attention scores average over all n second-copy positions; prefix-copy accuracy and copy
//! fidelity over the n - 1 of them whose next token exists.

use nalgebra::DMatrix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::analysis::HeadId;
use crate::backend::{Backend, BackendInfo};
use crate::forward::{self, ForwardOutput, HeadOutputs, Keep, Logits, Patterns};
use crate::model::{NormKind, Weights};
use crate::tokens::{Bos, with_bos};
use crate::{Error, Result};

/// How many seeded sequences the scores average over by default
/// (docs/methods.md#5-probes-running-the-model).
pub const DEFAULT_SEQUENCES: usize = 8;

/// Length of each drawn first copy by default (TransformerLens's induction demo uses 50).
pub const DEFAULT_LENGTH: usize = 50;

/// Seed of the first drawn sequence by default; sequence i uses seed + i.
pub const DEFAULT_SEED: u64 = 0;

/// Where a first copy came from, so every score says which sequence it was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RepeatSource {
    Given,
    UniformRandom { seed: u64 },
    TextWindow { seed: u64 },
}

/// One first copy to repeat, and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct FirstCopy {
    pub tokens: Vec<usize>,
    pub source: RepeatSource,
}

/// Standard deviation (population: divided by the number of sequences, numpy's default),
/// minimum and maximum of one score over the sequences.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct Spread {
    pub std: f64,
    pub min: f64,
    pub max: f64,
}

impl Spread {
    pub fn of(values: &[f64]) -> Spread {
        let n = values.len().max(1) as f64;
        let mean = values.iter().sum::<f64>() / n;
        Spread {
            std: (values.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / n).sqrt(),
            min: values.iter().copied().fold(f64::INFINITY, f64::min),
            max: values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
        }
    }
}

/// The spread of each of a head's scores over the sequences.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct HeadSpread {
    pub induction_score: Spread,
    pub previous_token_score: Spread,
    pub duplicate_token_score: Spread,
    pub copy_fidelity: Spread,
}

/// One head's scores: on one sequence, or (in a report's `heads`) the mean over its sequences
/// with their spread.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeadScores {
    pub layer: usize,
    pub head: usize,
    pub induction_score: f64,
    pub previous_token_score: f64,
    pub duplicate_token_score: f64,
    /// Fraction of second-copy positions where the head's direct logit contribution ranks the
    /// true next token first among the first copy's distinct tokens
    /// (docs/methods.md#5-probes-running-the-model).
    pub copy_fidelity: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spread: Option<HeadSpread>,
}

/// The scores of one repeated sequence.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SequenceScores {
    pub source: RepeatSource,
    /// The whole sequence run: the BOS if any, then the first copy twice.
    pub tokens: Vec<usize>,
    pub prefix_copy_accuracy: f64,
    pub heads: Vec<HeadScores>,
    /// Per head (in `heads` order), per counted position: the rank of the true next token in
    /// the head's direct logit contribution (1 = strictly above every other candidate).
    #[serde(skip)]
    pub copy_ranks: Vec<Vec<usize>>,
}

impl SequenceScores {
    /// Positions the copy scores count: the second copy's, but its last (the first copy's
    /// length less one), in a sequence of a BOS (when `bos` is one) and the first copy twice.
    fn counted_positions(&self, bos: Option<usize>) -> usize {
        ((self.tokens.len() - usize::from(bos.is_some())) / 2).saturating_sub(1)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InductionReport {
    /// Where the first sequence came from (each sequence's own is in `sequences`).
    pub source: RepeatSource,
    /// The BOS id put in front of every sequence; None when switched off or the model has none.
    pub bos: Option<usize>,
    /// The first sequence run (2n + 1 tokens with a BOS, 2n without).
    pub tokens: Vec<usize>,
    /// Mean over the sequences.
    pub prefix_copy_accuracy: f64,
    pub prefix_copy_accuracy_spread: Spread,
    /// Per head: means over the sequences, with their spread.
    pub heads: Vec<HeadScores>,
    pub sequences: Vec<SequenceScores>,
}

impl InductionReport {
    /// Heads whose mean induction score reaches `threshold`, named as `HeadId` writes them (L5H1).
    pub fn induction_heads(&self, threshold: f64) -> Vec<String> {
        self.heads
            .iter()
            .filter(|h| h.induction_score >= threshold)
            .map(|h| HeadId::new(h.layer, h.head).to_string())
            .collect()
    }
}

/// The induction probe as it is reported (`probe --induction --json`; Python's
/// `headprint.induction` reads the same fields): the scores, what ran them, the BOS, and the
/// heads at or above the threshold.
#[derive(Debug, Serialize)]
pub struct ProbeReport<'a> {
    #[serde(flatten)]
    pub scores: &'a InductionReport,
    pub backend: &'a BackendInfo,
    pub prepend_bos: bool,
    pub bos_token: Option<&'a Bos>,
    pub threshold: f64,
    pub induction_heads: Vec<String>,
}

impl<'a> ProbeReport<'a> {
    pub fn new(
        scores: &'a InductionReport,
        backend: &'a BackendInfo,
        prepend_bos: bool,
        bos_token: Option<&'a Bos>,
        threshold: f64,
    ) -> ProbeReport<'a> {
        let induction_heads = scores.induction_heads(threshold);
        ProbeReport { scores, backend, prepend_bos, bos_token, threshold, induction_heads }
    }
}

/// n ids drawn uniformly (seeded, ChaCha8) from `ordinary` (see `Tokenizer::ordinary_ids`).
pub fn random_first_copy(ordinary: &[usize], n: usize, seed: u64) -> Result<Vec<usize>> {
    if ordinary.is_empty() {
        return Err(Error::BadTokens("no ordinary token left to draw probe tokens from".into()));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Ok((0..n).map(|_| ordinary[rng.random_range(0..ordinary.len())]).collect())
}

/// Most sequences one probe averages over, and longest first copy: a request beyond these would
/// only exhaust memory or time (the page asks for 8 of at most 50).
pub const MAX_SEQUENCES: usize = 1000;
pub const MAX_FIRST_COPY: usize = 8192;

/// Refuses probe sizes that cannot be run, before anything is drawn or allocated.
fn check_probe_size(n: usize, count: usize) -> Result<()> {
    if !(1..=MAX_SEQUENCES).contains(&count) {
        return Err(Error::BadTokens(format!("an induction probe of {count} sequences: ask for 1 to {MAX_SEQUENCES}")));
    }
    if !(2..=MAX_FIRST_COPY).contains(&n) {
        return Err(Error::BadTokens(format!(
            "a first copy of {n} tokens: ask for 2 to {MAX_FIRST_COPY} (it is repeated once)"
        )));
    }
    Ok(())
}

/// `count` first copies of n tokens drawn with seeds `seed, seed + 1, ...` (wrapping past
/// u64::MAX), each named by the source it came from.
fn seeded_copies(
    n: usize,
    seed: u64,
    count: usize,
    draw: impl Fn(u64) -> Result<Vec<usize>>,
    source: fn(u64) -> RepeatSource,
) -> Result<Vec<FirstCopy>> {
    check_probe_size(n, count)?;
    (0..count as u64)
        .map(|i| {
            let seed = seed.wrapping_add(i);
            Ok(FirstCopy { tokens: draw(seed)?, source: source(seed) })
        })
        .collect()
}

/// `count` random first copies with seeds `seed, seed + 1, ...`.
pub fn random_first_copies(ordinary: &[usize], n: usize, seed: u64, count: usize) -> Result<Vec<FirstCopy>> {
    seeded_copies(n, seed, count, |s| random_first_copy(ordinary, n, s), |seed| RepeatSource::UniformRandom { seed })
}

/// A seeded random window of n tokens from a longer text (in-distribution repeats).
pub fn text_window_first_copy(text_ids: &[usize], n: usize, seed: u64) -> Result<Vec<usize>> {
    if text_ids.len() < n {
        return Err(Error::BadTokens(format!("the text has {} tokens, fewer than the {n} asked for", text_ids.len())));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let start = rng.random_range(0..=text_ids.len() - n);
    Ok(text_ids[start..start + n].to_vec())
}

/// `count` text windows with seeds `seed, seed + 1, ...`.
pub fn text_window_first_copies(text_ids: &[usize], n: usize, seed: u64, count: usize) -> Result<Vec<FirstCopy>> {
    seeded_copies(n, seed, count, |s| text_window_first_copy(text_ids, n, s), |seed| RepeatSource::TextWindow { seed })
}

/// Runs every first copy repeated once (after `bos` when given) and averages the scores, the
/// forward pass on `backend`. A GPU that fails gives `Error::Gpu`: callers run the whole probe
/// in [`Backend::with_fallback`], so no report mixes two backends.
pub async fn induction_probe(
    model: &(impl Weights + ?Sized),
    copies: &[FirstCopy],
    bos: Option<usize>,
    backend: &mut Backend,
) -> Result<InductionReport> {
    induction_probe_with_progress(model, copies, bos, backend, &mut |_, _| {}).await
}

/// `induction_probe`, every sequence in one layer-by-layer pass (a streamed model is read
/// once; more passes only when the outputs would not fit together), calling `each_layer(done,
/// total)` as the passes go.
pub async fn induction_probe_with_progress(
    model: &(impl Weights + ?Sized),
    copies: &[FirstCopy],
    bos: Option<usize>,
    backend: &mut Backend,
    each_layer: &mut dyn FnMut(usize, usize),
) -> Result<InductionReport> {
    induction_report(bos, score_sequences(model, copies, bos, backend, each_layer).await?)
}

/// Each copy's sequence run on `backend` and scored on its own: the part of a probe that one
/// worker of the tab's pool does for its share of the sequences (no sequence's numbers depend
/// on which others ran beside it, see [`forward::run_batch`]). [`induction_report`] averages them.
pub async fn score_sequences(
    model: &(impl Weights + ?Sized),
    copies: &[FirstCopy],
    bos: Option<usize>,
    backend: &mut Backend,
    each_layer: &mut dyn FnMut(usize, usize),
) -> Result<Vec<SequenceScores>> {
    let prepared: Vec<Prepared> = copies.iter().map(|copy| prepare(model, copy, bos)).collect::<Result<_>>()?;
    // Each sequence keeps only what its scores read: three cells of each pattern per query of
    // the second copy, each position's top token, and each head's rank of the true next token
    // among the candidates at each counted position, so that a probe's sequences fit one pass.
    let runs: Vec<(&[usize], Keep)> = prepared
        .iter()
        .map(|p| {
            let keep = Keep {
                head_outputs: HeadOutputs::Ranked { directions: &p.directions, pairs: &p.truths },
                patterns: Patterns::Cells(&p.cells),
                logits: Logits::TopToken,
            };
            (p.tokens.as_slice(), keep)
        })
        .collect();
    // Usually one batch; more only when the outputs would not fit the forward pass's budget
    // together (each batch's are scored and dropped before the next is run).
    let batches = forward::batches(model, &runs);
    let per_batch = model.config().layers + 1;
    let steps = batches.len() * per_batch;
    let mut sequences: Vec<SequenceScores> = Vec::with_capacity(copies.len());
    for (b, range) in batches.into_iter().enumerate() {
        let before = b * per_batch;
        let outputs =
            backend.forward(model, &runs[range.clone()], &mut |done, _| each_layer(before + done, steps)).await?;
        let scored = copies[range.clone()].iter().zip(&prepared[range]).zip(&outputs);
        sequences.extend(scored.map(|((copy, p), output)| score(copy, p, output)));
    }
    Ok(sequences)
}

/// The probe's report from its sequences' scores, in sequence order: per head, the means over
/// the sequences and their spread.
pub fn induction_report(bos: Option<usize>, sequences: Vec<SequenceScores>) -> Result<InductionReport> {
    let first = sequences.first().ok_or_else(|| Error::BadTokens("an induction probe needs a sequence".into()))?;
    let accuracies: Vec<f64> = sequences.iter().map(|s| s.prefix_copy_accuracy).collect();
    let counted: Vec<usize> = sequences.iter().map(|s| s.counted_positions(bos)).collect();
    let heads = (0..first.heads.len())
        .map(|i| {
            let per_sequence =
                |score: fn(&HeadScores) -> f64| -> Vec<f64> { sequences.iter().map(|s| score(&s.heads[i])).collect() };
            let induction = per_sequence(|h| h.induction_score);
            let previous = per_sequence(|h| h.previous_token_score);
            let duplicate = per_sequence(|h| h.duplicate_token_score);
            let fidelity = per_sequence(|h| h.copy_fidelity);
            HeadScores {
                layer: first.heads[i].layer,
                head: first.heads[i].head,
                induction_score: mean(&induction),
                previous_token_score: mean(&previous),
                duplicate_token_score: mean(&duplicate),
                copy_fidelity: pooled(&fidelity, &counted),
                spread: Some(HeadSpread {
                    induction_score: Spread::of(&induction),
                    previous_token_score: Spread::of(&previous),
                    duplicate_token_score: Spread::of(&duplicate),
                    copy_fidelity: Spread::of(&fidelity),
                }),
            }
        })
        .collect();
    Ok(InductionReport {
        source: first.source.clone(),
        bos,
        tokens: first.tokens.clone(),
        prefix_copy_accuracy: pooled(&accuracies, &counted),
        prefix_copy_accuracy_spread: Spread::of(&accuracies),
        heads,
        sequences,
    })
}

fn mean(values: &[f64]) -> f64 {
    values.iter().sum::<f64>() / values.len().max(1) as f64
}

/// The mean of fractions of counted positions, as total hits / total positions: the same number
/// as `mean` when the sequences have one length, but without summation rounding, so two heads
/// with the same counts get exactly the same value (and tie in Spearman's ranks).
fn pooled(fractions: &[f64], positions: &[usize]) -> f64 {
    let hits: f64 = fractions.iter().zip(positions).map(|(f, &p)| (f * p as f64).round()).sum();
    hits / positions.iter().sum::<usize>().max(1) as f64
}

/// One sequence made ready to run: its tokens and the unembedding directions of its candidates.
struct Prepared {
    tokens: Vec<usize>,
    n: usize,
    second_copy: usize,
    directions: DMatrix<f32>,
    /// The pattern cells the scores read, [`SCORED_KEYS`] for each query of the second copy.
    cells: Vec<(usize, usize)>,
    /// Copy fidelity's (position, candidate) pairs: each counted position of the second copy
    /// and the candidate that is its true next token.
    truths: Vec<(usize, usize)>,
}

/// The keys each second-copy query `t` is scored on (the first copy's `t' = t - n`): the
/// token after its earlier occurrence (induction), the token before it (previous token) and
/// its earlier occurrence (duplicate token).
const SCORED_KEYS: [fn(usize, usize) -> usize; 3] = [|t, n| t + 1 - n, |t, _| t - 1, |t, n| t - n];

/// The first copy repeated once, after `bos` when given.
fn prepare(model: &(impl Weights + ?Sized), copy: &FirstCopy, bos: Option<usize>) -> Result<Prepared> {
    let n = copy.tokens.len();
    if n < 2 {
        return Err(Error::BadTokens("an induction probe needs a first copy of at least 2 tokens".into()));
    }
    let repeated: Vec<usize> = copy.tokens.iter().chain(&copy.tokens).copied().collect();
    let tokens = with_bos(bos, &repeated);
    forward::check_tokens(model, &tokens)?;
    let second_copy = tokens.len() - n;
    let mut candidates = copy.tokens.clone();
    candidates.sort_unstable();
    candidates.dedup();
    let directions = unembedding_directions(model, &candidates)?;
    let cells = (second_copy..second_copy + n).flat_map(|t| SCORED_KEYS.map(|key| (t, key(t, n)))).collect();
    let truths = (second_copy..tokens.len() - 1)
        .map(|t| {
            let truth = candidates
                .binary_search(&tokens[t + 1])
                .map_err(|_| Error::Internal(format!("the next token at {t} is not one of the first copy's tokens")))?;
            Ok((t, truth))
        })
        .collect::<Result<_>>()?;
    Ok(Prepared { tokens, n, second_copy, directions, cells, truths })
}

/// Scores every head on one sequence's forward pass.
fn score(copy: &FirstCopy, prepared: &Prepared, output: &ForwardOutput) -> SequenceScores {
    let Prepared { tokens, n, second_copy, .. } = prepared;
    let (n, second_copy) = (*n, *second_copy);
    let copy_ranks = copy_ranks(output);
    let mut heads = attention_scores(output, n);
    for (scores, ranks) in heads.iter_mut().zip(&copy_ranks) {
        scores.copy_fidelity = ranks.iter().filter(|&&r| r == 1).count() as f64 / ranks.len() as f64;
    }
    SequenceScores {
        source: copy.source.clone(),
        prefix_copy_accuracy: prefix_copy_accuracy(output, tokens, second_copy),
        heads,
        tokens: tokens.clone(),
        copy_ranks,
    }
}

/// The direction in the residual stream that raises each candidate's logit, after the final
/// norm: d_model x k, column j = `C diag(w_ln) W_U[:, candidate j]` with C the centring over
/// d_model for LayerNorm (identity for RMSNorm). A head output x at position t then contributes
/// `x · column / scale_t`: TransformerLens's `cache.apply_ln_to_stack(..) @ W_U` with
/// `fold_ln=True` (the norm bias and the unembedding bias are not the head's).
fn unembedding_directions(model: &(impl Weights + ?Sized), candidates: &[usize]) -> Result<DMatrix<f32>> {
    let config = model.config();
    let d_model = config.d_model;
    let weight = &model.ln_final().weight;
    // W_U's columns for the candidates, as rows: read one by one when streamed.
    let unembedding = model.unembedding_of(candidates)?;
    let mut directions = DMatrix::from_fn(d_model, candidates.len(), |i, j| unembedding[(j, i)] * weight[i]);
    if config.norm == NormKind::LayerNorm {
        for mut column in directions.column_iter_mut() {
            let mean = column.sum() / d_model as f32;
            column.add_scalar_mut(-mean);
        }
    }
    Ok(directions)
}

/// Per head, per counted position t (second copy, next token exists): the rank of the true
/// next token among the candidates by the head's direct logit contribution at t, as the forward
/// pass ranked it ([`HeadOutputs::Ranked`]: the contribution is the head's output along the
/// candidate's direction divided by the final norm's scale at t).
fn copy_ranks(output: &ForwardOutput) -> Vec<Vec<usize>> {
    output.head_ranks.iter().flatten().cloned().collect()
}

/// Per head, means over the n second-copy query positions of its kept cells (copy fidelity
/// left at 0).
fn attention_scores(output: &ForwardOutput, n: usize) -> Vec<HeadScores> {
    let mut scores = Vec::new();
    for (layer, heads) in output.pattern_cells.iter().enumerate() {
        for (head, cells) in heads.iter().enumerate() {
            let mean = |key: usize| {
                cells.iter().skip(key).step_by(SCORED_KEYS.len()).map(|&w| w as f64).sum::<f64>() / n as f64
            };
            scores.push(HeadScores {
                layer,
                head,
                induction_score: mean(0),
                previous_token_score: mean(1),
                duplicate_token_score: mean(2),
                copy_fidelity: 0.0,
                spread: None,
            });
        }
    }
    scores
}

/// Fraction of the second copy's positions (next token exists) whose argmax logit is the true
/// next token.
fn prefix_copy_accuracy(output: &ForwardOutput, tokens: &[usize], second_copy: usize) -> f64 {
    let positions = second_copy..tokens.len() - 1;
    let hits = positions.clone().filter(|&t| output.top_tokens[t] == tokens[t + 1]).count();
    hits as f64 / positions.len() as f64
}

/// Induction cells: (query t, key j + 1) where j < t is the previous occurrence of token t.
pub fn induction_cells(ids: &[usize]) -> Vec<(usize, usize)> {
    (0..ids.len()).filter_map(|t| (0..t).rev().find(|&j| ids[j] == ids[t]).map(|j| (t, j + 1))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_population_std_min_max() {
        let spread = Spread::of(&[1.0, 2.0, 3.0, 6.0]);
        // mean 3, squared deviations 4 + 1 + 0 + 9 = 14, / 4 = 3.5
        assert!((spread.std - 3.5f64.sqrt()).abs() < 1e-15);
        assert_eq!((spread.min, spread.max), (1.0, 6.0));
        assert_eq!(Spread::of(&[0.25]), Spread { std: 0.0, min: 0.25, max: 0.25 });
    }

    #[test]
    fn pooled_fractions_tie_exactly() {
        // 0.2 + 0.3 + 0.175 ... summed in different orders differ in the last bit; counts do not.
        let a = pooled(&[0.25, 0.125, 0.25, 0.275], &[40, 40, 40, 40]);
        let b = pooled(&[0.275, 0.25, 0.125, 0.25], &[40, 40, 40, 40]);
        assert_eq!(a, b);
        assert_eq!(a, 36.0 / 160.0);
    }

    #[test]
    fn seeded_draws_are_deterministic_and_stay_in_the_ordinary_ids() {
        let ordinary = [3, 5, 8, 13, 21];
        let a = random_first_copies(&ordinary, 40, 7, 3).unwrap();
        let b = random_first_copies(&ordinary, 40, 7, 3).unwrap();
        assert_eq!(a, b);
        assert_eq!(
            a.iter().map(|c| c.source.clone()).collect::<Vec<_>>(),
            [7, 8, 9].map(|seed| RepeatSource::UniformRandom { seed })
        );
        assert_ne!(a[0].tokens, a[1].tokens, "consecutive seeds draw different sequences");
        assert_eq!(a[1].tokens, random_first_copy(&ordinary, 40, 8).unwrap());
        for copy in &a {
            assert!(copy.tokens.iter().all(|t| ordinary.contains(t)), "{:?}", copy.tokens);
        }
        // 40 draws from 5 ids reach all of them (a draw that skipped ids would be biased).
        let mut seen = a[0].tokens.clone();
        seen.sort_unstable();
        seen.dedup();
        assert_eq!(seen, ordinary);
        assert!(random_first_copy(&[], 4, 0).is_err());
    }
}
