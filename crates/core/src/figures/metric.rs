//! The per-head metrics the page's head grid and bars show, and how each maps to colour: read
//! from a head's fingerprint and probe scores, coloured on the maps of [`colour`] (the SVG
//! swatches of [`svg`], the canvas grid's bytes, the colour bar of its figure).

use crate::analysis::{Fingerprint, HeadFingerprint};
use crate::figures::{colour, svg};
use crate::probes::induction::HeadScores;

/// How a metric is coloured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// [-1, 1], diverging.
    Signed,
    /// [0, 1], sequential.
    Unit,
    /// [0, max], sequential.
    Positive,
    /// κ: log10, [0, max], ∞ at the top.
    LogKappa,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    OvCopying,
    QkCopying,
    QkImaginary,
    OvImaginary,
    QkKappa,
    OvKappa,
    QkDeparture,
    OvDeparture,
    QkScale,
    OvScale,
    QkTokenCopying,
    QkTokenImaginary,
    QkTokenKappa,
    QkTokenDeparture,
    QkTokenScale,
    Induction,
    PreviousToken,
    DuplicateToken,
    CopyFidelity,
}

impl Metric {
    pub const ALL: [Metric; 19] = [
        Metric::OvCopying,
        Metric::QkCopying,
        Metric::QkImaginary,
        Metric::OvImaginary,
        Metric::QkKappa,
        Metric::OvKappa,
        Metric::QkDeparture,
        Metric::OvDeparture,
        Metric::QkScale,
        Metric::OvScale,
        Metric::QkTokenCopying,
        Metric::QkTokenImaginary,
        Metric::QkTokenKappa,
        Metric::QkTokenDeparture,
        Metric::QkTokenScale,
        Metric::Induction,
        Metric::PreviousToken,
        Metric::DuplicateToken,
        Metric::CopyFidelity,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Metric::OvCopying => "ov-copying",
            Metric::QkCopying => "qk-copying",
            Metric::QkImaginary => "qk-imaginary",
            Metric::OvImaginary => "ov-imaginary",
            Metric::QkKappa => "qk-kappa",
            Metric::OvKappa => "ov-kappa",
            Metric::QkDeparture => "qk-departure",
            Metric::OvDeparture => "ov-departure",
            Metric::QkScale => "qk-scale",
            Metric::OvScale => "ov-scale",
            Metric::QkTokenCopying => "qk-token-copying",
            Metric::QkTokenImaginary => "qk-token-imaginary",
            Metric::QkTokenKappa => "qk-token-kappa",
            Metric::QkTokenDeparture => "qk-token-departure",
            Metric::QkTokenScale => "qk-token-scale",
            Metric::Induction => "induction",
            Metric::PreviousToken => "previous-token",
            Metric::DuplicateToken => "duplicate-token",
            Metric::CopyFidelity => "copy-fidelity",
        }
    }

    pub fn from_key(key: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.key() == key)
    }

    pub fn label(self) -> &'static str {
        match self {
            Metric::OvCopying => "OV copying score",
            Metric::QkCopying => "QK copying score",
            Metric::QkImaginary => "QK imaginary fraction",
            Metric::OvImaginary => "OV imaginary fraction",
            Metric::QkKappa => "QK eigenvector condition κ",
            Metric::OvKappa => "OV eigenvector condition κ",
            Metric::QkDeparture => "QK departure from normality",
            Metric::OvDeparture => "OV departure from normality",
            Metric::QkScale => "QK scale Σ|λ|",
            Metric::OvScale => "OV scale Σ|λ|",
            Metric::QkTokenCopying => "QK (tokens) copying score",
            Metric::QkTokenImaginary => "QK (tokens) imaginary fraction",
            Metric::QkTokenKappa => "QK (tokens) eigenvector condition κ",
            Metric::QkTokenDeparture => "QK (tokens) departure from normality",
            Metric::QkTokenScale => "QK (tokens) scale Σ|λ|",
            Metric::Induction => "induction score",
            Metric::PreviousToken => "previous-token score",
            Metric::DuplicateToken => "duplicate-token score",
            Metric::CopyFidelity => "copy fidelity",
        }
    }

    pub fn scale(self) -> Scale {
        match self {
            Metric::OvCopying | Metric::QkCopying | Metric::QkTokenCopying => Scale::Signed,
            Metric::QkKappa | Metric::OvKappa | Metric::QkTokenKappa => Scale::LogKappa,
            Metric::QkScale | Metric::OvScale | Metric::QkTokenScale => Scale::Positive,
            _ => Scale::Unit,
        }
    }

    /// Whether it comes from running the model (same in raw and folded mode).
    pub fn behavioural(self) -> bool {
        matches!(self, Metric::Induction | Metric::PreviousToken | Metric::DuplicateToken | Metric::CopyFidelity)
    }

    /// The circuit a spectral metric reads; None for a behavioural one.
    pub fn circuit(self, fingerprint: &HeadFingerprint) -> Option<&Fingerprint> {
        match self {
            Metric::OvCopying | Metric::OvImaginary | Metric::OvKappa | Metric::OvDeparture | Metric::OvScale => {
                Some(&fingerprint.ov)
            }
            Metric::QkCopying | Metric::QkImaginary | Metric::QkKappa | Metric::QkDeparture | Metric::QkScale => {
                Some(&fingerprint.qk)
            }
            Metric::QkTokenCopying
            | Metric::QkTokenImaginary
            | Metric::QkTokenKappa
            | Metric::QkTokenDeparture
            | Metric::QkTokenScale => Some(&fingerprint.qk_token),
            Metric::Induction | Metric::PreviousToken | Metric::DuplicateToken | Metric::CopyFidelity => None,
        }
    }

    /// Whether the value is a κ (plotted as log10).
    pub fn is_kappa(self) -> bool {
        matches!(self, Metric::QkKappa | Metric::OvKappa | Metric::QkTokenKappa)
    }

    /// The value for one head; κ of a defective matrix is +∞; None when not measured, or when
    /// the circuit could not be read (its error is in `circuit(..).error`).
    pub fn value(self, fingerprint: &HeadFingerprint, scores: Option<&HeadScores>) -> Option<f64> {
        let circuit = self.circuit(fingerprint);
        if circuit.is_some_and(|c| c.error.is_some()) {
            return None;
        }
        Some(match self {
            Metric::OvCopying | Metric::QkCopying | Metric::QkTokenCopying => circuit?.copying_score,
            Metric::OvImaginary | Metric::QkImaginary | Metric::QkTokenImaginary => circuit?.imaginary_fraction,
            Metric::OvKappa | Metric::QkKappa | Metric::QkTokenKappa => circuit?.kappa(),
            Metric::OvDeparture | Metric::QkDeparture | Metric::QkTokenDeparture => circuit?.departure_from_normality,
            Metric::OvScale | Metric::QkScale | Metric::QkTokenScale => circuit?.scale,
            Metric::Induction => scores?.induction_score,
            Metric::PreviousToken => scores?.previous_token_score,
            Metric::DuplicateToken => scores?.duplicate_token_score,
            Metric::CopyFidelity => scores?.copy_fidelity,
        })
    }
}

/// Maps values of one metric to colours (the range comes from all heads' values).
pub struct ColourScale {
    pub scale: Scale,
    pub max: f64,
}

impl ColourScale {
    pub fn new(scale: Scale, values: &[f64]) -> Self {
        let finite_max = values.iter().copied().filter(|v| v.is_finite()).fold(0.0, f64::max);
        let max = match scale {
            Scale::Signed | Scale::Unit => 1.0,
            Scale::Positive => finite_max.max(f64::MIN_POSITIVE),
            Scale::LogKappa => finite_max.max(1.0).log10().max(1.0),
        };
        ColourScale { scale, max }
    }

    /// Position on the colour map, in [0, 1] (or [-1, 1] for signed).
    fn position(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Signed => v,
            Scale::Unit => v,
            Scale::Positive => v / self.max,
            Scale::LogKappa => {
                if v.is_finite() {
                    v.max(1.0).log10() / self.max
                } else {
                    1.0
                }
            }
        }
    }

    pub fn swatch(&self, v: f64) -> svg::Swatch {
        match self.scale {
            Scale::Signed => svg::diverging(self.position(v)),
            _ => svg::viridis(self.position(v)),
        }
    }

    /// The swatch's colour as bytes (the canvas grid's cells: the same colours as the buttons).
    pub fn rgb(&self, v: f64) -> [u8; 3] {
        colour::bytes(match self.scale {
            Scale::Signed => colour::diverging(self.position(v)),
            _ => colour::viridis(self.position(v)),
        })
    }

    /// The colour bar of the canvas grid: the plotted values (κ as log10) on the same map.
    pub fn bar(&self, label: &str) -> colour::Scale {
        use colour::Scale as Bar;
        match self.scale {
            Scale::Signed => Bar::diverging(1.0, label),
            Scale::Unit => Bar::sequential(0.0, 1.0, label),
            Scale::Positive | Scale::LogKappa => Bar::sequential(0.0, self.max, label),
        }
    }

    /// Gradient stops and end labels for the legend.
    pub fn legend(&self) -> (Vec<(f64, String)>, String, String) {
        let stops = (0..=10)
            .map(|i| {
                let t = i as f64 / 10.0;
                let colour = match self.scale {
                    Scale::Signed => svg::diverging(2.0 * t - 1.0).fill,
                    _ => svg::viridis(t).fill,
                };
                (t, colour)
            })
            .collect();
        let (lo, hi) = match self.scale {
            Scale::Signed => ("−1 (suppresses)".to_string(), "+1 (copies)".to_string()),
            Scale::Unit => ("0".to_string(), "1".to_string()),
            Scale::Positive => ("0".to_string(), svg::num(self.max)),
            Scale::LogKappa => ("κ = 1".to_string(), format!("κ ≥ {} (∞ = defective)", svg::num(10f64.powf(self.max)))),
        };
        (stops, lo, hi)
    }

    /// The value axis of the bar chart.
    pub fn axis(&self) -> (f64, f64) {
        match self.scale {
            Scale::Signed => (-1.0, 1.0),
            Scale::Unit => (0.0, 1.0),
            Scale::Positive => (0.0, self.max),
            Scale::LogKappa => (0.0, self.max),
        }
    }

    /// The value as plotted on the bar chart's axis (κ as log10).
    pub fn plotted(&self, v: f64) -> f64 {
        match self.scale {
            Scale::LogKappa => {
                if v.is_finite() {
                    v.max(1.0).log10()
                } else {
                    self.max
                }
            }
            _ => v,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_has_its_own_key_and_is_found_by_it() {
        for metric in Metric::ALL {
            assert_eq!(Metric::from_key(metric.key()), Some(metric));
        }
        let mut keys: Vec<_> = Metric::ALL.iter().map(|m| m.key()).collect();
        keys.sort();
        keys.dedup();
        assert_eq!(keys.len(), Metric::ALL.len());
        assert_eq!(Metric::from_key("no-such-metric"), None);
    }

    #[test]
    fn kappa_is_coloured_by_its_log_and_a_defective_head_at_the_top() {
        let scale = ColourScale::new(Metric::OvKappa.scale(), &[1.0, 10.0, 1000.0, f64::INFINITY]);
        assert_eq!(scale.max, 3.0, "log10 of the largest finite κ");
        assert_eq!(scale.plotted(100.0), 2.0);
        assert_eq!(scale.plotted(f64::INFINITY), 3.0);
        assert_eq!(scale.rgb(f64::INFINITY), scale.rgb(1000.0), "∞ takes the top colour");
        assert_eq!(scale.rgb(1.0), colour::bytes(colour::viridis(0.0)));
        // A κ below 1 (rounding) is drawn as 1, the least a condition number can be.
        assert_eq!(scale.rgb(0.5), scale.rgb(1.0));
        let (_, lo, hi) = scale.legend();
        assert_eq!(lo, "κ = 1");
        assert!(hi.starts_with("κ ≥ 1000") && hi.ends_with("(∞ = defective)"), "{hi}");
    }

    #[test]
    fn signed_scores_diverge_around_white_and_positive_ones_fill_their_range() {
        let signed = ColourScale::new(Metric::OvCopying.scale(), &[-0.2, 0.9]);
        assert_eq!((signed.max, signed.axis()), (1.0, (-1.0, 1.0)));
        let centre = signed.rgb(0.0);
        assert_eq!(centre, colour::bytes(colour::diverging(0.0)));
        assert!(centre.iter().all(|&c| c > 240), "a score of 0 is near white: {centre:?}");
        assert_ne!(signed.rgb(-1.0), signed.rgb(1.0));
        let positive = ColourScale::new(Metric::OvScale.scale(), &[2.0, 8.0, f64::NAN]);
        assert_eq!(positive.max, 8.0);
        assert_eq!(positive.rgb(8.0), colour::bytes(colour::viridis(1.0)));
        assert_eq!(positive.rgb(4.0), colour::bytes(colour::viridis(0.5)));
    }
}
