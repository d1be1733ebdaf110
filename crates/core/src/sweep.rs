//! A sweep's units and its rows (docs/sweeps.md): many models and checkpoints, one unit each,
//! and each unit's fingerprint (and probe report) as one row per head with a fixed set of typed
//! columns, so that files written by different shards, units that failed included, read back as
//! one table. The columns are named as the Python package names them (a fingerprint JSON's
//! path joined by `_`); this module is their one home, for the CLI's Parquet files and Python.

use crate::analysis::{Fingerprint, ModelFingerprint};
use crate::compare::BEHAVIOURAL_SCORES;
use crate::probes::induction::{HeadScores, InductionReport, Spread};
use crate::timeline::{step_of, step_revisions};
use crate::weights::remote::ModelLink;
use crate::{Error, Result};

/// The circuits in the order the Python package lays out their columns.
pub const CIRCUITS: [&str; 4] = ["ov", "qk", "ov_residual", "qk_token"];

/// What a column holds; every column may hold nulls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A whole number (layer, head, step).
    Count,
    Number,
    Flag,
    Text,
}

/// One column's values, one per row.
#[derive(Debug, Clone, PartialEq)]
pub enum Values {
    Count(Vec<Option<i64>>),
    Number(Vec<Option<f64>>),
    Flag(Vec<Option<bool>>),
    Text(Vec<Option<String>>),
}

impl Values {
    pub fn kind(&self) -> Kind {
        match self {
            Values::Count(_) => Kind::Count,
            Values::Number(_) => Kind::Number,
            Values::Flag(_) => Kind::Flag,
            Values::Text(_) => Kind::Text,
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Values::Count(v) => v.len(),
            Values::Number(v) => v.len(),
            Values::Flag(v) => v.len(),
            Values::Text(v) => v.len(),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn nulls(kind: Kind, rows: usize) -> Values {
        match kind {
            Kind::Count => Values::Count(vec![None; rows]),
            Kind::Number => Values::Number(vec![None; rows]),
            Kind::Flag => Values::Flag(vec![None; rows]),
            Kind::Text => Values::Text(vec![None; rows]),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct Column {
    pub name: String,
    pub values: Values,
}

/// Rows as columns, every column as long as the table has rows.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Table {
    pub rows: usize,
    pub columns: Vec<Column>,
}

impl Table {
    pub fn column(&self, name: &str) -> Option<&Values> {
        self.columns.iter().find(|c| c.name == name).map(|c| &c.values)
    }

    fn push(&mut self, name: &str, values: Values) {
        debug_assert_eq!(values.len(), self.rows, "column {name}");
        self.columns.push(Column { name: name.into(), values });
    }
}

/// A circuit's scalars as the fingerprint JSON names them (its `eigenvalues` list is left out,
/// as the Python package leaves lists out), with what each holds.
const CIRCUIT_FIELDS: [(&str, Kind); 7] = [
    ("copying_score", Kind::Number),
    ("imaginary_fraction", Kind::Number),
    ("eigenvector_condition", Kind::Number),
    ("defective", Kind::Flag),
    ("departure_from_normality", Kind::Number),
    ("scale", Kind::Number),
    ("error", Kind::Text),
];

/// The spread's statistics under each behavioural score (`spread_induction_score_std`).
const SPREAD_FIELDS: [&str; 3] = ["std", "min", "max"];

/// The columns a unit's rows have besides the heads' own: what the unit is and how it went.
pub const UNIT_COLUMNS: [(&str, Kind); 5] = [
    ("model", Kind::Text),
    ("revision", Kind::Text),
    ("commit", Kind::Text),
    ("step", Kind::Count),
    ("weights_sha256", Kind::Text),
];

/// Every column of a sweep's file in order, with and without the probe's scores. Files of one
/// sweep share it whether their unit worked or not.
pub fn sweep_columns(probe: bool) -> Vec<(String, Kind)> {
    let mut columns: Vec<(String, Kind)> = UNIT_COLUMNS.iter().map(|(n, k)| (n.to_string(), *k)).collect();
    columns.extend(head_columns(probe));
    columns.push(("same_weights_as".into(), Kind::Text));
    columns.push(("error".into(), Kind::Text));
    columns
}

/// The per-head columns: layer, head, name, each circuit's scalars, and with `probe` the
/// behavioural scores and their spreads over the sequences.
pub fn head_columns(probe: bool) -> Vec<(String, Kind)> {
    let mut columns =
        vec![("layer".to_string(), Kind::Count), ("head".into(), Kind::Count), ("name".into(), Kind::Text)];
    for circuit in CIRCUITS {
        columns.extend(CIRCUIT_FIELDS.iter().map(|(field, kind)| (format!("{circuit}_{field}"), *kind)));
    }
    if probe {
        columns.extend(BEHAVIOURAL_SCORES.iter().map(|(name, _)| (name.to_string(), Kind::Number)));
        for (name, _) in BEHAVIOURAL_SCORES {
            columns.extend(SPREAD_FIELDS.iter().map(|stat| (format!("spread_{name}_{stat}"), Kind::Number)));
        }
    }
    columns
}

fn circuit<'a>(fingerprint: &'a ModelFingerprint, name: &str, index: usize) -> Option<&'a Fingerprint> {
    let head = fingerprint.heads.get(index)?;
    Some(match name {
        "ov" => &head.ov,
        "qk" => &head.qk,
        "ov_residual" => &head.ov_residual,
        _ => &head.qk_token,
    })
}

/// A circuit's field as a cell, as the fingerprint JSON writes it: a failed circuit's numbers
/// and its `defective` are null, a defective κ is null.
fn circuit_values(fingerprints: &[&Fingerprint], field: &str) -> Values {
    let number = |v: f64| v.is_finite().then_some(v);
    let failed = |f: &Fingerprint| f.error.is_some();
    match field {
        "copying_score" => Values::Number(fingerprints.iter().map(|f| number(f.copying_score)).collect()),
        "imaginary_fraction" => Values::Number(fingerprints.iter().map(|f| number(f.imaginary_fraction)).collect()),
        "eigenvector_condition" => Values::Number(fingerprints.iter().map(|f| f.eigenvector_condition).collect()),
        "defective" => Values::Flag(fingerprints.iter().map(|f| (!failed(f)).then(|| f.defective())).collect()),
        "departure_from_normality" => {
            Values::Number(fingerprints.iter().map(|f| number(f.departure_from_normality)).collect())
        }
        "scale" => Values::Number(fingerprints.iter().map(|f| number(f.scale)).collect()),
        _ => Values::Text(fingerprints.iter().map(|f| f.error.clone()).collect()),
    }
}

fn spread_of(scores: &HeadScores, name: &str) -> Option<Spread> {
    let spread = scores.spread.as_ref()?;
    Some(match name {
        "induction_score" => spread.induction_score,
        "previous_token_score" => spread.previous_token_score,
        "duplicate_token_score" => spread.duplicate_token_score,
        _ => spread.copy_fidelity,
    })
}

/// One row per head of a fingerprint, with the probe's scores beside each head's when `probe`
/// is given (a head the probe has no scores for has nulls there). Nothing is computed: the
/// values are the reports', laid out.
pub fn head_table(fingerprint: &ModelFingerprint, probe: Option<&InductionReport>) -> Table {
    let heads = &fingerprint.heads;
    let mut table = Table { rows: heads.len(), columns: Vec::new() };
    table.push("layer", Values::Count(heads.iter().map(|h| Some(h.layer as i64)).collect()));
    table.push("head", Values::Count(heads.iter().map(|h| Some(h.head as i64)).collect()));
    table.push("name", Values::Text(heads.iter().map(|h| Some(h.id().to_string())).collect()));
    for name in CIRCUITS {
        let fingerprints: Vec<&Fingerprint> =
            (0..heads.len()).filter_map(|index| circuit(fingerprint, name, index)).collect();
        for (field, _) in CIRCUIT_FIELDS {
            table.push(&format!("{name}_{field}"), circuit_values(&fingerprints, field));
        }
    }
    let Some(report) = probe else { return table };
    let scores: Vec<Option<&HeadScores>> =
        heads.iter().map(|h| report.heads.iter().find(|s| s.layer == h.layer && s.head == h.head)).collect();
    let finite = |v: f64| v.is_finite().then_some(v);
    for (name, score) in BEHAVIOURAL_SCORES {
        table.push(name, Values::Number(scores.iter().map(|s| s.and_then(|s| finite(score(s)))).collect()));
    }
    for (name, _) in BEHAVIOURAL_SCORES {
        let spreads: Vec<Option<Spread>> = scores.iter().map(|s| s.and_then(|s| spread_of(s, name))).collect();
        for stat in SPREAD_FIELDS {
            let pick = |s: &Spread| match stat {
                "std" => s.std,
                "min" => s.min,
                _ => s.max,
            };
            let values = spreads.iter().map(|s| s.as_ref().and_then(|s| finite(pick(s)))).collect();
            table.push(&format!("spread_{name}_{stat}"), Values::Number(values));
        }
    }
    table
}

/// One unit of a sweep: a model at one revision, opened by `link`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unit {
    /// The link without its revision (`hf:ORG/NAME`), or the path or web folder as given.
    pub model: String,
    /// The revision as asked (`main` for a Hub link that names none); None for a path or a
    /// web folder.
    pub revision: Option<String>,
    /// What opens it: `hf:ORG/NAME@REV`, a `url:` link or a path.
    pub link: String,
}

impl Unit {
    /// The training step its revision (or a local checkpoint's folder) names.
    pub fn step(&self) -> Option<u64> {
        step_of(self.revision.as_deref().unwrap_or(&self.link))
    }

    /// The Hub repository and revision, for a unit by Hub link.
    pub fn hub(&self) -> Option<(&str, &str)> {
        let repo = self.model.strip_prefix("hf:")?;
        Some((repo, self.revision.as_deref()?))
    }

    /// How another unit's rows name this one in `same_weights_as`: its revision when both are
    /// revisions of one model, else its link.
    pub fn named_from(&self, other: &Unit) -> String {
        match &self.revision {
            Some(revision) if self.model == other.model => revision.clone(),
            _ => self.link.clone(),
        }
    }

    /// A file name for this unit's rows: readable (`EleutherAI--pythia-160m@step1000`), with
    /// a hash of the link where making it a safe name changed it, so two units never share one.
    pub fn file_stem(&self) -> String {
        let readable = match self.hub() {
            Some((repo, revision)) => format!("{}@{revision}", repo.replace('/', "--")),
            None => self.link.clone(),
        };
        let safe: String = readable
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '@') { c } else { '_' })
            .collect();
        let safe = safe.trim_start_matches('.').to_string();
        if safe == readable && !safe.is_empty() {
            return safe;
        }
        let hash = crate::weights::remote::short_hash(&self.link);
        format!("{}-{hash}", safe.trim_matches('_'))
    }
}

/// The units of a sweep, in order: each link as given, or with `revisions` (or `steps`, as
/// `step{N}` branches) each Hub link that names no revision once per revision.
pub fn units(links: &[String], revisions: &[String], steps: &[u64]) -> Result<Vec<Unit>> {
    let listed = if steps.is_empty() { revisions.to_vec() } else { step_revisions(steps) };
    if let Some(empty) = listed.iter().find(|r| r.trim().is_empty()) {
        return Err(Error::Invalid(format!("--revisions has an empty name (`{empty}`) in its list")));
    }
    let mut units = Vec::new();
    for link in links {
        let hub = match ModelLink::looks_like_link(link) {
            true => match ModelLink::parse(link)? {
                ModelLink::Hub { repo, revision } => Some((repo, revision)),
                ModelLink::Web { .. } => None,
            },
            false => None,
        };
        match (hub, listed.is_empty()) {
            (Some((repo, revision)), true) => {
                units.push(Unit { model: format!("hf:{repo}"), revision: Some(revision), link: link.clone() })
            }
            (Some((repo, _)), false) if !link.contains('@') => {
                for revision in &listed {
                    let link = format!("hf:{repo}@{revision}");
                    units.push(Unit { model: format!("hf:{repo}"), revision: Some(revision.clone()), link });
                }
            }
            (Some(_), false) => {
                return Err(Error::Invalid(format!(
                    "{link}: with --revisions or --steps, name the repository without @REVISION"
                )));
            }
            (None, true) => units.push(Unit { model: link.clone(), revision: None, link: link.clone() }),
            (None, false) => {
                return Err(Error::Invalid(format!(
                    "{link}: --revisions and --steps name revisions of a Hub repository (hf:ORG/NAME); give local checkpoints one by one instead"
                )));
            }
        }
    }
    let mut seen = std::collections::HashSet::new();
    if let Some(twice) = units.iter().find(|u| !seen.insert(u.file_stem())) {
        return Err(Error::Invalid(format!("{} is named twice in the sweep", twice.link)));
    }
    if units.is_empty() {
        return Err(Error::Invalid("a sweep needs at least one model".into()));
    }
    Ok(units)
}

/// What a unit's rows say about the unit itself.
#[derive(Debug, Clone, Default)]
pub struct UnitFacts {
    /// The commit its revision resolved to.
    pub commit: Option<String>,
    /// The content hash of its weights as the Hub publishes them.
    pub weights_sha256: Option<String>,
    /// Another unit with the same weights, whose rows these are.
    pub same_weights_as: Option<String>,
}

/// A unit's rows as its file holds them: the unit's columns, then the heads' rows (or, when the
/// unit failed, one row with its reason in `error` and every head column null). Columns are
/// `sweep_columns(probe)` in order whatever happened.
pub fn unit_table(unit: &Unit, facts: &UnitFacts, heads: std::result::Result<&Table, &str>, probe: bool) -> Table {
    let rows = heads.map_or(1, |t| t.rows);
    let mut table = Table { rows, columns: Vec::new() };
    let text = |value: Option<&str>| Values::Text(vec![value.map(str::to_string); rows]);
    table.push("model", text(Some(&unit.model)));
    table.push("revision", text(unit.revision.as_deref()));
    table.push("commit", text(facts.commit.as_deref()));
    table.push("step", Values::Count(vec![unit.step().map(|s| s as i64); rows]));
    table.push("weights_sha256", text(facts.weights_sha256.as_deref()));
    for (name, kind) in head_columns(probe) {
        let values = heads.ok().and_then(|t| t.column(&name)).cloned().unwrap_or_else(|| Values::nulls(kind, rows));
        table.push(&name, values);
    }
    table.push("same_weights_as", text(facts.same_weights_as.as_deref()));
    let error = heads.err().map(|e| e.lines().next().unwrap_or_default());
    table.push("error", text(error));
    table
}

/// Which of `count` units the `index`-th of `shards` shards runs: a contiguous block, so that
/// neighbouring checkpoints of one model (where repeated weights are found) share a shard.
pub fn shard_range(count: usize, index: usize, shards: usize) -> std::ops::Range<usize> {
    let start = count * index / shards;
    let end = count * (index + 1) / shards;
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::analysis::HeadFingerprint;
    use crate::analysis::ModelSummary;

    fn circuit(value: f64) -> Fingerprint {
        Fingerprint {
            eigenvalues: Vec::new(),
            copying_score: value,
            imaginary_fraction: value / 2.0,
            eigenvector_condition: None,
            departure_from_normality: 0.5,
            scale: 2.0,
            error: None,
        }
    }

    fn report() -> ModelFingerprint {
        let heads = (0..2)
            .map(|head| HeadFingerprint {
                layer: 1,
                head,
                qk: circuit(0.1),
                qk_token: circuit(0.2),
                ov: circuit(0.3 + head as f64),
                ov_residual: Fingerprint::failed("zero matrix".into()),
            })
            .collect();
        let model = ModelSummary {
            family: "gpt2".into(),
            layers: 2,
            heads: 2,
            kv_heads: 2,
            d_model: 4,
            d_head: 2,
            vocab: 10,
            parameters: 0,
        };
        ModelFingerprint { model, mode: "folded".into(), backend: Default::default(), heads }
    }

    /// The Python package's flattening of a head's JSON (`_flatten`): scalar leaves, paths
    /// joined by `_`, lists left out.
    fn flattened(value: &serde_json::Value, prefix: &str, out: &mut Vec<(String, serde_json::Value)>) {
        match value {
            serde_json::Value::Object(fields) => {
                for (key, inner) in fields {
                    let path = if prefix.is_empty() { key.clone() } else { format!("{prefix}_{key}") };
                    flattened(inner, &path, out);
                }
            }
            serde_json::Value::Array(_) => {}
            other => out.push((prefix.to_string(), other.clone())),
        }
    }

    #[test]
    fn head_columns_are_the_python_packages_flattening_of_the_json() {
        let fingerprint = report();
        let table = head_table(&fingerprint, None);
        let head = serde_json::to_value(&fingerprint.heads[1]).unwrap();
        let mut expected = Vec::new();
        for circuit in CIRCUITS {
            flattened(&head[circuit], circuit, &mut expected);
        }
        // serde_json's objects here sort their keys, so the names are compared as sets; the
        // order is the JSON's (Python's columns), which `CIRCUIT_FIELDS` follows.
        let mut names: Vec<&str> = table.columns.iter().skip(3).map(|c| c.name.as_str()).collect();
        let mut wanted: Vec<&str> = expected.iter().map(|(n, _)| n.as_str()).collect();
        names.sort_unstable();
        wanted.sort_unstable();
        assert_eq!(names, wanted);
        // And the cells hold what the JSON says, nulls included.
        for (name, value) in &expected {
            let cell = match table.column(name).unwrap() {
                Values::Number(v) => serde_json::json!(v[1]),
                Values::Flag(v) => serde_json::json!(v[1]),
                Values::Text(v) => serde_json::json!(v[1]),
                Values::Count(v) => serde_json::json!(v[1]),
            };
            assert_eq!(&cell, value, "{name}");
        }
        assert_eq!(table.column("name"), Some(&Values::Text(vec![Some("L1H0".into()), Some("L1H1".into())])));
        let declared: Vec<String> = head_columns(false).into_iter().map(|(n, _)| n).collect();
        assert_eq!(declared, table.columns.iter().map(|c| c.name.clone()).collect::<Vec<_>>());
    }

    #[test]
    fn a_failed_unit_has_every_column_and_one_row() {
        let unit = Unit { model: "hf:o/m".into(), revision: Some("step3".into()), link: "hf:o/m@step3".into() };
        let table = unit_table(&unit, &UnitFacts::default(), Err("no such branch\nsecond line"), true);
        let names: Vec<String> = table.columns.iter().map(|c| c.name.clone()).collect();
        assert_eq!(names, sweep_columns(true).into_iter().map(|(n, _)| n).collect::<Vec<_>>());
        assert_eq!(table.rows, 1);
        assert_eq!(table.column("error"), Some(&Values::Text(vec![Some("no such branch".into())])));
        assert_eq!(table.column("step"), Some(&Values::Count(vec![Some(3)])));
        assert_eq!(table.column("induction_score"), Some(&Values::Number(vec![None])));
    }

    #[test]
    fn units_expand_revisions_and_name_safe_files() {
        let links = vec!["hf:EleutherAI/pythia-160m".to_string(), "runs/a b/step20".to_string()];
        assert!(units(&links, &[], &[0, 1000]).is_err(), "a local checkpoint has no revisions");
        let expanded = units(&links[..1], &[], &[0, 1000]).unwrap();
        assert_eq!(expanded[1].link, "hf:EleutherAI/pythia-160m@step1000");
        assert_eq!(expanded[1].file_stem(), "EleutherAI--pythia-160m@step1000");
        assert_eq!(expanded[1].step(), Some(1000));
        let given = units(&links, &[], &[]).unwrap();
        assert_eq!(given[0].revision.as_deref(), Some("main"));
        assert_eq!(given[1].step(), Some(20));
        let stem = given[1].file_stem();
        assert!(stem.starts_with("runs_a_b_step20-") && !stem.contains('/'), "{stem}");
        assert!(units(&["hf:o/m@main".into(), "hf:o/m".into()], &[], &[]).is_err(), "the same unit twice");
    }

    #[test]
    fn shards_are_disjoint_and_cover_every_unit() {
        for count in [0, 1, 7, 154] {
            for shards in [1, 3, 64] {
                let covered: Vec<usize> = (0..shards).flat_map(|i| shard_range(count, i, shards)).collect();
                assert_eq!(covered, (0..count).collect::<Vec<_>>(), "{count} units in {shards} shards");
            }
        }
    }
}
