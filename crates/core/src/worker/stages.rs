//! What the lead worker and the page's pool both name: each stage's busy line, and the
//! induction probe a load runs (its sequences and their length).

use super::protocol::ProbeSequence;
use crate::analysis::Mode;
use crate::model::ModelConfig;
use crate::probes::induction::{DEFAULT_LENGTH, DEFAULT_SEQUENCES};

/// Longest first copy of the default induction probe (docs/methods.md#5-probes-running-the-model;
/// TransformerLens uses 50).
pub const INDUCTION_LEN: usize = DEFAULT_LENGTH;

/// The length of each copy of an induction probe's sequence: at most half the context.
pub fn probe_len(config: &ModelConfig) -> usize {
    config.context.map_or(INDUCTION_LEN, |c| INDUCTION_LEN.min(c / 2))
}

/// The default induction probe: uniform random tokens, seeds 0..8.
pub fn default_sequence(config: &ModelConfig) -> ProbeSequence {
    ProbeSequence::UniformRandom { seed: 0, len: probe_len(config), count: DEFAULT_SEQUENCES }
}

/// The length of each copy when a BOS takes one position of the context.
pub(super) fn probe_len_with(config: &ModelConfig, len: usize, bos: Option<usize>) -> usize {
    match (config.context, bos) {
        (Some(context), Some(_)) if len.saturating_mul(2).saturating_add(1) > context => context.saturating_sub(1) / 2,
        _ => len,
    }
}

/// The busy line while the induction probe runs.
pub const PROBE_STAGE: &str = "Running the induction probe (layer by layer)";

/// The busy line while the Grams are computed (the page's pool names the stage the same way).
pub fn gram_stage(tied: bool) -> &'static str {
    if tied {
        "Computing the embedding Grams (reading W_E)"
    } else {
        "Computing the embedding Grams (reading W_E and W_U)"
    }
}

/// The busy line while heads are fingerprinted.
pub fn fingerprint_stage(mode: Mode) -> String {
    format!("Fingerprinting heads ({})", mode.name())
}

/// The busy line while composition scores are computed.
pub fn composition_stage(mode: Mode) -> String {
    format!("Composition scores between heads ({}, layer by layer)", mode.name())
}
