//! Model comparison (docs/methods.md#7-comparing-models; the spectral-fingerprint study's table):
//! one row of facts per model, and the rank correlation between a spectral feature and a
//! behavioural score across heads.

use serde::{Deserialize, Serialize};

use crate::analysis::{HeadFingerprint, ModelFingerprint};
use crate::backend::BackendInfo;
use crate::probes::induction::{HeadScores, InductionReport, RepeatSource, Spread};
use crate::tokens::Bos;

/// Induction score at or above which a head counts as an induction head
/// (docs/methods.md#5-probes-running-the-model).
pub const INDUCTION_HEAD_THRESHOLD: f64 = 0.4;

/// The spectral-fingerprint study's columns for one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparisonRow {
    pub model: String,
    pub parameters: u64,
    pub heads: usize,
    /// Mean over heads of the QK imaginary fraction (from the fingerprint given: folded or raw),
    /// over the heads whose QK could be read.
    pub mean_qk_imaginary_fraction: f64,
    /// The induction-score threshold `induction_heads` counts at.
    pub threshold: f64,
    pub induction_heads: Option<usize>,
    /// Mean over the probe's sequences, and its spread over them.
    pub prefix_copy_accuracy: Option<f64>,
    pub prefix_copy_accuracy_spread: Option<Spread>,
    /// Which repeated sequences the behavioural columns come from.
    pub sequence: String,
    pub sequences: Vec<RepeatSource>,
    /// The BOS id the sequences started with, if any.
    pub bos: Option<usize>,
}

impl ComparisonRow {
    pub fn new(
        model: &str,
        fingerprint: &ModelFingerprint,
        induction: Option<&InductionReport>,
        sequence: &str,
        threshold: f64,
    ) -> Self {
        let heads = fingerprint.heads.len();
        // A head whose QK could not be read (its own cell says why) has no imaginary fraction.
        let readable: Vec<f64> =
            fingerprint.heads.iter().filter(|h| h.qk.error.is_none()).map(|h| h.qk.imaginary_fraction).collect();
        let mean = readable.iter().sum::<f64>() / readable.len().max(1) as f64;
        ComparisonRow {
            model: model.into(),
            parameters: fingerprint.model.parameters,
            heads,
            mean_qk_imaginary_fraction: mean,
            threshold,
            induction_heads: induction.map(|r| r.induction_heads(threshold).len()),
            prefix_copy_accuracy: induction.map(|r| r.prefix_copy_accuracy),
            prefix_copy_accuracy_spread: induction.map(|r| r.prefix_copy_accuracy_spread),
            sequence: sequence.into(),
            sequences: induction.map(|r| r.sequences.iter().map(|s| s.source.clone()).collect()).unwrap_or_default(),
            bos: induction.and_then(|r| r.bos),
        }
    }
}

/// One model's entry of `compare --json`: its row, and what the row was computed from (the
/// BOS, the induction heads by name, every head's scores, the Spearman table, the backends).
#[derive(Debug, Serialize)]
pub struct ComparedModel<'a> {
    #[serde(flatten)]
    pub row: &'a ComparisonRow,
    pub bos_token: Option<&'a Bos>,
    pub induction_head_names: Vec<String>,
    pub head_scores: &'a [HeadScores],
    pub spearman: &'a [Correlation],
    /// What computed the fingerprint, and what ran the probe.
    pub backend: &'a BackendInfo,
    pub probe_backend: &'a BackendInfo,
}

/// A head's value of one spectral feature.
pub type SpectralFeature = fn(&HeadFingerprint) -> f64;
/// A head's value of one behavioural score.
pub type BehaviouralScore = fn(&HeadScores) -> f64;

/// The spectral features correlated with behaviour (docs/methods.md#7-comparing-models): JSON name
/// and value per head; κ of a defective circuit is +∞ (it still ranks, as the largest).
pub const SPECTRAL_FEATURES: [(&str, SpectralFeature); 15] = [
    ("qk.copying_score", |h| h.qk.copying_score),
    ("qk.imaginary_fraction", |h| h.qk.imaginary_fraction),
    ("qk.eigenvector_condition", |h| h.qk.kappa()),
    ("qk.departure_from_normality", |h| h.qk.departure_from_normality),
    ("qk.scale", |h| h.qk.scale),
    ("qk_token.copying_score", |h| h.qk_token.copying_score),
    ("qk_token.imaginary_fraction", |h| h.qk_token.imaginary_fraction),
    ("qk_token.eigenvector_condition", |h| h.qk_token.kappa()),
    ("qk_token.departure_from_normality", |h| h.qk_token.departure_from_normality),
    ("qk_token.scale", |h| h.qk_token.scale),
    ("ov.copying_score", |h| h.ov.copying_score),
    ("ov.imaginary_fraction", |h| h.ov.imaginary_fraction),
    ("ov.eigenvector_condition", |h| h.ov.kappa()),
    ("ov.departure_from_normality", |h| h.ov.departure_from_normality),
    ("ov.scale", |h| h.ov.scale),
];

/// The behavioural scores (means over the probe's sequences), JSON name and value per head.
pub const BEHAVIOURAL_SCORES: [(&str, BehaviouralScore); 4] = [
    ("induction_score", |h| h.induction_score),
    ("previous_token_score", |h| h.previous_token_score),
    ("duplicate_token_score", |h| h.duplicate_token_score),
    ("copy_fidelity", |h| h.copy_fidelity),
];

/// Spearman's ρ of one spectral feature against one behavioural score across a model's heads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Correlation {
    pub spectral: String,
    pub behavioural: String,
    /// None when undefined (fewer than 3 heads, or one side constant).
    pub rho: Option<f64>,
    /// Heads both values are known for (a head whose circuit could not be read has no feature).
    pub n: usize,
}

/// ρ for every spectral feature against every behavioural score, heads matched by L/H.
pub fn spearman_table(fingerprint: &ModelFingerprint, induction: &InductionReport) -> Vec<Correlation> {
    let pairs: Vec<(&HeadFingerprint, &HeadScores)> = fingerprint
        .heads
        .iter()
        .filter_map(|f| induction.heads.iter().find(|s| s.layer == f.layer && s.head == f.head).map(|s| (f, s)))
        .collect();
    let mut table = Vec::new();
    for (spectral, feature) in SPECTRAL_FEATURES {
        let x: Vec<f64> = pairs.iter().map(|(f, _)| feature(f)).collect();
        for (behavioural, score) in BEHAVIOURAL_SCORES {
            let y: Vec<f64> = pairs.iter().map(|(_, s)| score(s)).collect();
            let n = x.iter().zip(&y).filter(|(a, b)| !a.is_nan() && !b.is_nan()).count();
            table.push(Correlation {
                spectral: spectral.into(),
                behavioural: behavioural.into(),
                rho: spearman(&x, &y),
                n,
            });
        }
    }
    table
}

/// Ranks from 1, ties sharing their mean rank (as scipy's `rankdata`).
fn ranks(values: &[f64]) -> Vec<f64> {
    let mut order: Vec<usize> = (0..values.len()).collect();
    order.sort_by(|&a, &b| values[a].total_cmp(&values[b]));
    let mut ranks = vec![0.0; values.len()];
    let mut start = 0;
    while start < order.len() {
        let mut end = start + 1;
        while end < order.len() && values[order[end]] == values[order[start]] {
            end += 1;
        }
        let mean_rank = (start + end + 1) as f64 / 2.0;
        for &i in &order[start..end] {
            ranks[i] = mean_rank;
        }
        start = end;
    }
    ranks
}

fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let cov: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let vx: f64 = x.iter().map(|a| (a - mx).powi(2)).sum();
    let vy: f64 = y.iter().map(|b| (b - my).powi(2)).sum();
    let denominator = (vx * vy).sqrt();
    (denominator > 0.0).then(|| cov / denominator)
}

/// Spearman's ρ over the pairs where both values are finite (κ of a defective head is +∞ and
/// still ranks, as the largest); None with fewer than 3 pairs or a constant side.
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    let pairs: Vec<(f64, f64)> =
        x.iter().zip(y).filter(|(a, b)| !a.is_nan() && !b.is_nan()).map(|(a, b)| (*a, *b)).collect();
    if pairs.len() < 3 {
        return None;
    }
    let (xs, ys): (Vec<f64>, Vec<f64>) = pairs.into_iter().unzip();
    pearson(&ranks(&xs), &ranks(&ys))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_share_ties() {
        assert_eq!(ranks(&[10.0, 20.0, 10.0, 30.0]), vec![1.5, 3.0, 1.5, 4.0]);
    }

    #[test]
    fn spearman_ranks_with_ties() {
        // By hand: the ranks of y are 1, 2, 3.5, 5, 3.5, so ρ = 8 / √95.
        let rho = spearman(&[1.0, 2.0, 3.0, 4.0, 5.0], &[5.0, 6.0, 7.0, 8.0, 7.0]).unwrap();
        assert!((rho - 8.0 / 95f64.sqrt()).abs() < 1e-12, "{rho}");
        // Monotone but not linear: exactly 1; reversed: exactly -1.
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[1.0, 10.0, 1000.0]), Some(1.0));
        assert_eq!(spearman(&[1.0, 2.0, 3.0], &[3.0, 2.0, 1.0]), Some(-1.0));
        // Infinity ranks as the largest value.
        assert_eq!(spearman(&[1.0, f64::INFINITY, 3.0], &[1.0, 3.0, 2.0]), Some(1.0));
    }

    #[test]
    fn spearman_needs_variation_and_pairs() {
        assert_eq!(spearman(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
        assert_eq!(spearman(&[1.0, 2.0], &[1.0, 2.0]), None);
        assert_eq!(spearman(&[1.0, f64::NAN, 2.0, 3.0], &[1.0, 5.0, 2.0, 3.0]), Some(1.0));
    }
}
