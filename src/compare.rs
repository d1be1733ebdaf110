//! Model comparison (spec section 5, seed 000's table): one row of facts per model, and the
//! rank correlation between a spectral feature and a behavioural score across heads.

use serde::{Deserialize, Serialize};

use crate::analysis::ModelFingerprint;
use crate::probes::induction::InductionReport;

/// Induction score at or above which a head counts as an induction head (spec section 4).
pub const INDUCTION_HEAD_THRESHOLD: f64 = 0.4;

/// Seed 000's columns for one model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ComparisonRow {
    pub model: String,
    pub parameters: u64,
    pub heads: usize,
    /// Mean over heads of the QK imaginary fraction (from the fingerprint given: folded or raw).
    pub mean_qk_imaginary_fraction: f64,
    pub induction_heads: Option<usize>,
    pub prefix_copy_accuracy: Option<f64>,
    /// Which repeated sequence the behavioural columns come from.
    pub sequence: String,
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
        let mean = fingerprint.heads.iter().map(|h| h.qk.imaginary_fraction).sum::<f64>() / heads.max(1) as f64;
        ComparisonRow {
            model: model.into(),
            parameters: fingerprint.model.parameters,
            heads,
            mean_qk_imaginary_fraction: mean,
            induction_heads: induction.map(|r| r.heads.iter().filter(|h| h.induction_score >= threshold).count()),
            prefix_copy_accuracy: induction.map(|r| r.prefix_copy_accuracy),
            sequence: sequence.into(),
        }
    }
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
