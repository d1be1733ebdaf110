//! How the reports describe a probe's sequences and its BOS, in words: the CLI's tables and
//! the Python package's comparison rows say them alike.

use headprint::probes::induction::{InductionReport, RepeatSource, Spread};
use headprint::tokens::Bos;

/// Makes whitespace tokens visible in tables.
pub fn show(token: &str) -> String {
    token.replace('\n', "\\n").replace(' ', "␣")
}

/// A mean with its spread over sequences: `mean ± std [min, max]`.
pub fn mean_spread(mean: f64, spread: &Spread) -> String {
    format!("{mean:.4} ± {:.4} [{:.4}, {:.4}]", spread.std, spread.min, spread.max)
}

/// Where a probe's sequences came from: their seeds, or the given tokens.
pub fn sources(report: &InductionReport) -> String {
    let seeds: Vec<String> = report
        .sequences
        .iter()
        .filter_map(|s| match s.source {
            RepeatSource::UniformRandom { seed } => Some(format!("random seed {seed}")),
            RepeatSource::TextWindow { seed } => Some(format!("text window seed {seed}")),
            RepeatSource::Given => None,
        })
        .collect();
    match (seeds.first(), seeds.last()) {
        (Some(first), Some(last)) if seeds.len() > 1 => format!("{first} .. {last}"),
        (Some(first), _) => first.clone(),
        _ => "given tokens".into(),
    }
}

/// The probe's sequences in one phrase, as the study's table records them: how many, how long,
/// where they came from, and the BOS.
pub fn sequences(report: &InductionReport, first_copy_len: usize, bos: Option<&Bos>) -> String {
    format!(
        "{} sequences of {first_copy_len} tokens repeated twice ({}); {}",
        report.sequences.len(),
        sources(report),
        self::bos(bos)
    )
}

pub fn bos(bos: Option<&Bos>) -> String {
    match bos {
        Some(b) => format!("BOS {} (id {}, from {}) prepended", show(&b.token), b.id, b.source),
        None => "no BOS".into(),
    }
}
