//! A model's heads over training (docs/methods.md#heads-over-training): the fingerprints and
//! probe reports of its checkpoints, one revision each, gathered into a series per head and
//! quantity and the study's row per revision. Nothing is computed here that the fingerprint, the
//! probe or the comparison row already holds; this module only lines them up.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::analysis::{HeadId, ModelFingerprint};
use crate::compare::{BEHAVIOURAL_SCORES, ComparisonRow};
use crate::probes::induction::InductionReport;
use crate::weights::ModelLink;
use crate::{Error, Result};

/// One checkpoint as the timeline names it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Revision {
    /// As given: a branch, tag or commit of a repository, or a local folder.
    pub revision: String,
    /// The commit the revision resolved to (models by link that opened; None otherwise).
    pub commit: Option<String>,
    /// The training step, read from a `step{N}` name (Pythia's branches, or a folder so named).
    pub step: Option<u64>,
    /// An earlier revision whose weights the Hub says are byte-identical to this one's: this
    /// revision was not fetched or computed, and its results are that one's (`crate::repeats`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub same_weights_as: Option<String>,
}

impl Revision {
    pub fn new(revision: &str, commit: Option<String>) -> Revision {
        Revision { revision: revision.into(), commit, step: step_of(revision), same_weights_as: None }
    }

    /// A revision not fetched: its weights are `earlier`'s, at its own `commit`.
    pub fn repeating(revision: &str, commit: Option<String>, earlier: &str) -> Revision {
        Revision { same_weights_as: Some(earlier.into()), ..Revision::new(revision, commit) }
    }

    /// A revision as opened: with the commit its pinned link names, when it is a Hub link
    /// pinned to a commit (None for a local folder, a web folder or a revision that failed).
    pub fn opened(revision: &str, pinned: Option<&str>) -> Revision {
        let commit = pinned.and_then(|link| match ModelLink::parse(link) {
            Ok(ModelLink::Hub { revision, .. }) if ModelLink::is_commit(&revision) => Some(revision),
            _ => None,
        });
        Revision::new(revision, commit)
    }
}

/// The training step a `step{N}` revision names: the branch itself, or a path's last part
/// (`checkpoints/step1000`). None for any other name.
pub fn step_of(revision: &str) -> Option<u64> {
    let last = revision.trim_end_matches(['/', '\\']).rsplit(['/', '\\']).next()?;
    let digits = last.strip_prefix("step")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// `--steps 0,1000`: the revisions `step0`, `step1000` of a repository that names its checkpoints so.
pub fn step_revisions(steps: &[u64]) -> Vec<String> {
    steps.iter().map(|step| format!("step{step}")).collect()
}

/// Where each revision sits on a chart's x axis, and whether that is log10(step + 1): by step
/// when every revision names its step, else the revisions in order (the CLI's figure and the
/// page's line chart both place them so).
pub fn positions(revisions: &[Revision]) -> (Vec<f64>, bool) {
    let steps: Option<Vec<u64>> = revisions.iter().map(|r| r.step).collect();
    match steps {
        Some(steps) if !steps.is_empty() => (steps.iter().map(|&s| (s as f64 + 1.0).log10()).collect(), true),
        _ => ((0..revisions.len()).map(|i| i as f64).collect(), false),
    }
}

/// What one revision gave: its fingerprint and, when the probe ran, the probe's report.
#[derive(Clone)]
pub struct Measured {
    /// How tables name this checkpoint (the pinned link, or the folder).
    pub label: String,
    pub fingerprint: ModelFingerprint,
    pub induction: Option<InductionReport>,
    /// The probe's sequences in words, as the comparison row records them.
    pub sequence: String,
}

/// One revision and its outcome; a revision that failed keeps its one-line reason.
pub struct Checkpoint {
    pub revision: Revision,
    pub outcome: std::result::Result<Measured, String>,
}

/// A head's series by name.
pub type Series = BTreeMap<String, Vec<Option<f64>>>;

/// Every quantity of one head over the revisions, in the revisions' order; None where that
/// revision failed, had no such head, or the value is not a number (a circuit that could not be
/// read, a defective κ).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HeadSeries {
    pub layer: usize,
    pub head: usize,
    /// Keyed by the fingerprint JSON's field path joined by `_` (`qk_imaginary_fraction`), and
    /// with the probe by the behavioural scores' names (`induction_score`).
    pub series: Series,
}

/// One revision's line of the study's table: the comparison row, or why there is none.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TimelineRow {
    pub revision: String,
    pub step: Option<u64>,
    #[serde(flatten)]
    pub row: Option<ComparisonRow>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub error: Option<String>,
    /// The earlier revision whose results these are (its weights are byte-identical).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub same_weights_as: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Timeline {
    pub model: String,
    pub revisions: Vec<Revision>,
    pub heads: Vec<HeadSeries>,
    pub table: Vec<TimelineRow>,
}

impl Timeline {
    /// Lines up the checkpoints, in the order given. Heads are every (layer, head) any revision
    /// has, in layer then head order.
    pub fn new(model: &str, checkpoints: &[Checkpoint], threshold: f64) -> Result<Timeline> {
        let count = checkpoints.len();
        let mut heads: BTreeMap<(usize, usize), Series> = BTreeMap::new();
        let mut table = Vec::with_capacity(count);
        for (index, checkpoint) in checkpoints.iter().enumerate() {
            let Revision { revision, step, same_weights_as, .. } = &checkpoint.revision;
            let measured = match &checkpoint.outcome {
                Ok(measured) => measured,
                Err(reason) => {
                    let error = Some(reason.clone());
                    table.push(TimelineRow {
                        revision: revision.clone(),
                        step: *step,
                        row: None,
                        error,
                        same_weights_as: same_weights_as.clone(),
                    });
                    continue;
                }
            };
            for head in &measured.fingerprint.heads {
                let value = serde_json::to_value(head).map_err(|e| Error::Internal(e.to_string()))?;
                let mut numbers = Vec::new();
                numeric_leaves(&value, String::new(), &mut numbers);
                let series = heads.entry((head.layer, head.head)).or_default();
                for (path, number) in numbers {
                    if path != "layer" && path != "head" {
                        series.entry(path).or_insert_with(|| vec![None; count])[index] = number;
                    }
                }
            }
            for scores in measured.induction.iter().flat_map(|report| &report.heads) {
                let series = heads.entry((scores.layer, scores.head)).or_default();
                for (name, score) in BEHAVIOURAL_SCORES {
                    let value = score(scores);
                    series.entry(name.into()).or_insert_with(|| vec![None; count])[index] =
                        value.is_finite().then_some(value);
                }
            }
            let row = ComparisonRow::new(
                &measured.label,
                &measured.fingerprint,
                measured.induction.as_ref(),
                &measured.sequence,
                threshold,
            );
            table.push(TimelineRow {
                revision: revision.clone(),
                step: *step,
                row: Some(row),
                error: None,
                same_weights_as: same_weights_as.clone(),
            });
        }
        // A path that is a number for no head at any revision (every value null) is left out.
        let heads = heads
            .into_iter()
            .map(|((layer, head), mut series)| {
                series.retain(|_, values| values.iter().any(Option::is_some));
                HeadSeries { layer, head, series }
            })
            .collect();
        let revisions = checkpoints.iter().map(|c| c.revision.clone()).collect();
        Ok(Timeline { model: model.into(), revisions, heads, table })
    }

    /// Every series name, in order (the union over heads).
    pub fn quantities(&self) -> Vec<String> {
        let names: BTreeSet<&String> = self.heads.iter().flat_map(|h| h.series.keys()).collect();
        names.into_iter().cloned().collect()
    }

    /// Whether some head has a series `quantity`; if none has, an error naming those there are.
    pub fn check(&self, quantity: &str) -> Result<()> {
        let known = self.quantities();
        match known.iter().any(|q| q == quantity) {
            true => Ok(()),
            false => {
                Err(Error::Invalid(format!("no series `{quantity}` in this timeline: use one of {}", known.join(", "))))
            }
        }
    }

    /// One head's series of `quantity` (empty where this head lacks it), or an error naming the
    /// quantities there are.
    pub fn series(&self, layer: usize, head: usize, quantity: &str) -> Result<&[Option<f64>]> {
        self.check(quantity)?;
        let head_series = self
            .heads
            .iter()
            .find(|h| h.layer == layer && h.head == head)
            .ok_or_else(|| Error::Invalid(format!("no head L{layer}H{head} in this timeline")))?;
        Ok(head_series.series.get(quantity).map_or(&[][..], Vec::as_slice))
    }

    /// A head named `L{layer}H{head}` that this timeline has.
    pub fn head(&self, name: &str) -> Result<HeadId> {
        let layers = self.heads.iter().map(|h| h.layer + 1).max().unwrap_or(0);
        let heads = self.heads.iter().map(|h| h.head + 1).max().unwrap_or(0);
        let id = HeadId::parse_within(name, layers, heads)?;
        match self.heads.iter().any(|h| h.layer == id.layer && h.head == id.head) {
            true => Ok(id),
            false => Err(Error::Invalid(format!("no head {id} in this timeline"))),
        }
    }

    /// The `k` heads whose `quantity` reaches the highest value at any revision, highest first
    /// (ties by layer, then head).
    pub fn top_heads(&self, quantity: &str, k: usize) -> Result<Vec<(usize, usize)>> {
        let mut peaks: Vec<((usize, usize), f64)> = Vec::new();
        for head in &self.heads {
            let series = self.series(head.layer, head.head, quantity)?;
            let peak = series.iter().flatten().copied().filter(|v| !v.is_nan()).fold(f64::NEG_INFINITY, f64::max);
            if peak > f64::NEG_INFINITY {
                peaks.push(((head.layer, head.head), peak));
            }
        }
        peaks.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        Ok(peaks.into_iter().take(k).map(|(id, _)| id).collect())
    }
}

/// The number and null leaves of a JSON value with their paths joined by `_`; arrays (the
/// eigenvalues), strings (an error) and booleans (the `defective` flag) are not series.
fn numeric_leaves(value: &Value, path: String, out: &mut Vec<(String, Option<f64>)>) {
    match value {
        Value::Object(fields) => {
            for (key, field) in fields {
                let joined = if path.is_empty() { key.clone() } else { format!("{path}_{key}") };
                numeric_leaves(field, joined, out);
            }
        }
        Value::Number(number) => out.push((path, number.as_f64())),
        Value::Null => out.push((path, None)),
        Value::Array(_) | Value::String(_) | Value::Bool(_) => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_read_from_step_names_only() {
        assert_eq!(step_of("step0"), Some(0));
        assert_eq!(step_of("step143000"), Some(143000));
        assert_eq!(step_of("runs/pythia/step512/"), Some(512));
        assert_eq!(step_of("main"), None);
        assert_eq!(step_of("step"), None);
        assert_eq!(step_of("step1k"), None);
        assert_eq!(step_of("mystep10"), None);
        assert_eq!(step_revisions(&[0, 1000]), vec!["step0", "step1000"]);
    }

    #[test]
    fn an_opened_revision_keeps_the_commit_its_link_was_pinned_to() {
        let commit = "0123456789abcdef0123456789abcdef01234567";
        let pinned = format!("hf:EleutherAI/pythia-14m@{commit}");
        let opened = Revision::opened("step512", Some(&pinned));
        assert_eq!((opened.commit.as_deref(), opened.step), (Some(commit), Some(512)));
        assert_eq!(Revision::opened("step512", Some("hf:EleutherAI/pythia-14m@step512")).commit, None);
        assert_eq!(Revision::opened("ckpt/step3", Some("https://example.org/m/")).commit, None);
        assert_eq!(Revision::opened("ckpt/step3", None), Revision::new("ckpt/step3", None));
    }

    #[test]
    fn leaves_are_numbers_and_nulls_joined_by_underscores() {
        let value = serde_json::json!({
            "layer": 1,
            "qk": {"copying_score": 0.5, "eigenvector_condition": null, "eigenvalues": [[1.0, 0.0]],
                   "defective": true, "error": "why"},
        });
        let mut out = Vec::new();
        numeric_leaves(&value, String::new(), &mut out);
        out.sort_by(|a, b| a.0.cmp(&b.0));
        assert_eq!(
            out,
            vec![
                ("layer".to_string(), Some(1.0)),
                ("qk_copying_score".to_string(), Some(0.5)),
                ("qk_eigenvector_condition".to_string(), None),
            ]
        );
    }
}
