//! Induction, previous-token and duplicate-token scores and prefix-copy accuracy on a
//! sequence repeated once (Olsson et al.; TransformerLens's induction demo).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use crate::forward::{self, ForwardOutput};
use crate::model::Model;
use crate::{Error, Result};

/// Where the first copy came from, so every score says which sequence it was measured on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RepeatSource {
    Given,
    UniformRandom { seed: u64 },
    TextWindow { seed: u64 },
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeadScores {
    pub layer: usize,
    pub head: usize,
    pub induction_score: f64,
    pub previous_token_score: f64,
    pub duplicate_token_score: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InductionReport {
    pub source: RepeatSource,
    /// The whole repeated sequence (2n tokens).
    pub tokens: Vec<usize>,
    pub prefix_copy_accuracy: f64,
    pub heads: Vec<HeadScores>,
}

/// n ids drawn uniformly (seeded) from the vocabulary, skipping special tokens.
pub fn random_first_copy(vocab: usize, n: usize, seed: u64, excluded: &[usize]) -> Result<Vec<usize>> {
    let allowed: Vec<usize> = (0..vocab).filter(|id| !excluded.contains(id)).collect();
    if allowed.is_empty() {
        return Err(Error::BadTokens("no token left to draw from".into()));
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    Ok((0..n).map(|_| allowed[rng.random_range(0..allowed.len())]).collect())
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

/// Runs the model on `first_copy` repeated once (no BOS added) and scores every head.
pub fn induction_probe(model: &Model, first_copy: &[usize], source: RepeatSource) -> Result<InductionReport> {
    let n = first_copy.len();
    if n < 2 {
        return Err(Error::BadTokens("an induction probe needs a first copy of at least 2 tokens".into()));
    }
    let tokens: Vec<usize> = first_copy.iter().chain(first_copy).copied().collect();
    let output = forward::run(model, &tokens)?;
    Ok(InductionReport {
        source,
        prefix_copy_accuracy: prefix_copy_accuracy(&output, &tokens, n),
        heads: head_scores(&output, n),
        tokens,
    })
}

/// Per head, means over the second copy's query positions t = n .. 2n-1.
pub fn head_scores(output: &ForwardOutput, n: usize) -> Vec<HeadScores> {
    let queries = n..2 * n;
    let mean = |pattern: &nalgebra::DMatrix<f32>, key_of: &dyn Fn(usize) -> usize| {
        queries.clone().map(|t| pattern[(t, key_of(t))] as f64).sum::<f64>() / n as f64
    };
    let mut scores = Vec::new();
    for (layer, heads) in output.patterns.iter().enumerate() {
        for (head, pattern) in heads.iter().enumerate() {
            scores.push(HeadScores {
                layer,
                head,
                induction_score: mean(pattern, &|t| t + 1 - n),
                previous_token_score: mean(pattern, &|t| t - 1),
                duplicate_token_score: mean(pattern, &|t| t - n),
            });
        }
    }
    scores
}

/// Fraction of query positions n .. 2n-2 whose argmax logit is the true next token.
pub fn prefix_copy_accuracy(output: &ForwardOutput, tokens: &[usize], n: usize) -> f64 {
    let hits = (n..2 * n - 1)
        .filter(|&t| {
            let row = output.logits.row(t);
            let argmax = (0..row.len()).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap_or(0);
            argmax == tokens[t + 1]
        })
        .count();
    hits as f64 / (n - 1) as f64
}

/// Induction cells: (query t, key j + 1) where j < t is the previous occurrence of token t.
pub fn induction_cells(ids: &[usize]) -> Vec<(usize, usize)> {
    (0..ids.len()).filter_map(|t| (0..t).rev().find(|&j| ids[j] == ids[t]).map(|j| (t, j + 1))).collect()
}
