//! What the commands print: JSON, and the small pieces their tables share.

use headprint::probes::induction::{InductionReport, RepeatSource, Spread};
use headprint::tokens::Bos;
use headprint::{Error, Result};
use serde_json::Value;

use crate::open::LinkFacts;

/// A value as JSON, typed or built with `json!`.
pub fn to_json(value: &impl serde::Serialize) -> Result<Value> {
    serde_json::to_value(value).map_err(|e| Error::Internal(e.to_string()))
}

/// One line of JSON on stdout. Every report passes through a `serde_json::Value`, whose objects
/// keep their keys sorted, so a typed report and one built with `json!` print alike.
pub fn print_json(value: &impl serde::Serialize) -> Result<()> {
    print_json_from(value, None)
}

/// A report with, for a model by link, its `model_link`: the pinned link and the bytes fetched.
pub fn print_json_from(value: &impl serde::Serialize, link: Option<&LinkFacts>) -> Result<()> {
    let mut value = to_json(value)?;
    if let (Some(link), Some(object)) = (link, value.as_object_mut()) {
        object.insert("model_link".into(), link.json());
    }
    println!("{}", serde_json::to_string(&value).map_err(|e| Error::Internal(e.to_string()))?);
    Ok(())
}

/// Makes whitespace tokens visible in tables.
pub fn show(token: &str) -> String {
    token.replace('\n', "\\n").replace(' ', "␣")
}

/// A mean with its spread over sequences: `mean ± std [min, max]`.
pub fn mean_spread(mean: f64, spread: &Spread) -> String {
    format!("{mean:.4} ± {:.4} [{:.4}, {:.4}]", spread.std, spread.min, spread.max)
}

/// Where a probe's sequences came from: their seeds, or the given tokens.
pub fn describe_sources(report: &InductionReport) -> String {
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
pub fn describe_sequences(report: &InductionReport, first_copy_len: usize, bos: Option<&Bos>) -> String {
    format!(
        "{} sequences of {first_copy_len} tokens repeated twice ({}); {}",
        report.sequences.len(),
        describe_sources(report),
        describe_bos(bos)
    )
}

pub fn describe_bos(bos: Option<&Bos>) -> String {
    match bos {
        Some(b) => format!("BOS {} (id {}, from {}) prepended", show(&b.token), b.id, b.source),
        None => "no BOS".into(),
    }
}
