//! A sweep's units run one at a time (docs/sweeps.md), as the CLI's `headprint sweep` and the
//! Python package's `headprint.sweep` both run them: before any file of a unit is read, the
//! Hub's API says its commit and the content hash of its weights; a unit whose file under the
//! output folder is there for that commit is skipped, one whose weights equal another unit's
//! reuses that unit's rows (`same_weights_as`); any other is opened, measured and written as one
//! Parquet file (`rows_file`), atomically. A unit that fails writes its reason in `error`.
//!
//! The steps are apart so that Python can run the measuring step in another process (a Dask
//! worker, a Slurm job): `Sweep::prepare` and `Sweep::remember` in the caller, `measure` and
//! `finish` in the task. `Sweep::unit` runs all of them in order, as the CLI does.

use std::path::{Path, PathBuf};

use headprint::analysis::{FingerprintStage, Mode, fingerprint_stream_watched};
use headprint::backend::{Backend, BackendInfo, block_on};
use headprint::model::{CopySource, OpenedModel};
use headprint::probes::induction::{FirstCopy, induction_probe_with_progress};
use headprint::repeats::{Repeats, identity};
use headprint::sweep::{Column, Table, Unit, UnitFacts, head_columns, head_table, unit_table};
use headprint::weights::remote::Published;
use headprint::{Error, Result};

use crate::rows_file;

/// How the probe's sequences are drawn, as `headprint probe --induction` takes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProbeSettings {
    pub len: usize,
    pub seed: u64,
    pub sequences: usize,
    /// Whether sequences start with the model's BOS (when it names one).
    pub bos: bool,
    /// Draw each first copy as a window of this text file instead of random tokens.
    pub text_file: Option<PathBuf>,
}

/// What makes two files of one unit interchangeable besides its commit: the spectral mode and,
/// with the probe, its sequences.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    pub mode: Mode,
    pub probe: Option<ProbeSettings>,
}

impl Settings {
    /// The settings as a unit's file records them (`headprint.settings`).
    pub fn key(&self) -> String {
        let mut settings = format!("mode={}", self.mode.name());
        if let Some(s) = &self.probe {
            settings.push_str(&format!(
                ";probe;len={};seed={};sequences={};bos={};text_file={}",
                s.len,
                s.seed,
                s.sequences,
                s.bos,
                s.text_file.as_ref().map_or(String::new(), |p| p.display().to_string())
            ));
        }
        settings
    }
}

/// How a unit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Computed,
    Skipped,
    SameWeights,
    Failed,
}

impl Outcome {
    /// As the CLI's lines and Python's `outcome` name it.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Computed => "computed",
            Outcome::Skipped => "skipped",
            Outcome::SameWeights => "same weights",
            Outcome::Failed => "failed",
        }
    }
}

/// A unit done: how it ended, a note for its line (`: reason`, ` (as LINK)`), and its rows as
/// written (None when skipped: they are in its file, `path`).
#[derive(Debug, Clone)]
pub struct Done {
    pub outcome: Outcome,
    pub note: String,
    pub rows: Option<Table>,
    pub path: Option<PathBuf>,
}

/// A unit to open and measure: the link that opens it (pinned to the commit the Hub named, so
/// the rows are of the commit they say) and what its rows say of it.
#[derive(Debug, Clone, Default)]
pub struct Pending {
    pub link: String,
    pub facts: UnitFacts,
}

/// What `Sweep::prepare` found.
#[derive(Debug)]
pub enum Prepared {
    Done(Done),
    Measure(Pending),
}

/// The key-value metadata of a unit's file: what resuming and repeated weights read back.
pub mod key {
    pub const LINK: &str = "headprint.unit.link";
    pub const MODEL: &str = "headprint.unit.model";
    pub const REVISION: &str = "headprint.unit.revision";
    pub const COMMIT: &str = "headprint.unit.commit";
    pub const WEIGHTS: &str = "headprint.unit.weights_sha256";
    pub const SETTINGS: &str = "headprint.settings";
    pub const FAILED: &str = "headprint.failed";
}

/// What the Hub publishes about a unit, asked before any of its files: None for a unit not on
/// the Hub, and offline (the caches alone then say what a revision is, when it is opened).
pub fn published(unit: &Unit) -> Result<Option<Published>> {
    let Some((repo, revision)) = unit.hub() else { return Ok(None) };
    match crate::open::published(repo, revision) {
        Ok(published) => Ok(Some(published)),
        Err(Error::Offline { .. }) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Where a unit's file goes under `out`.
pub fn file_of(out: &Path, unit: &Unit) -> PathBuf {
    out.join(format!("{}.parquet", unit.file_stem()))
}

/// A unit already written (this run or before) whose rows a unit with the same weights reuses.
struct Twin {
    unit: Unit,
    /// Its head rows, once read.
    rows: Option<Table>,
    path: Option<PathBuf>,
}

/// The units of one sweep run in one process: the output folder (if any), the settings, and
/// the units whose weights are known, by the content hash of their weights.
pub struct Sweep {
    out: Option<PathBuf>,
    settings: Settings,
    /// The units computed or written so far by their weights' identity: the core's rule for
    /// repeated checkpoints, as the timeline and the page apply it.
    twins: Repeats<Twin>,
}

impl Sweep {
    /// A sweep writing to `out` (made if missing; files already there with the same settings
    /// are reused), or writing nothing.
    pub fn new(out: Option<&Path>, settings: Settings) -> Result<Sweep> {
        let mut twins = Repeats::default();
        if let Some(out) = out {
            std::fs::create_dir_all(out)
                .map_err(|e| Error::File { path: out.display().to_string(), reason: e.to_string() })?;
            twins = written_twins(out, &settings.key())?;
        }
        Ok(Sweep { out: out.map(Path::to_path_buf), settings, twins })
    }

    pub fn settings(&self) -> &Settings {
        &self.settings
    }

    pub fn out(&self) -> Option<&Path> {
        self.out.as_deref()
    }

    /// Runs one unit: `prepare`, then `measure` (given the link to open) and `finish`.
    pub fn unit(&mut self, unit: &Unit, measure: impl FnOnce(&str) -> Result<Table>) -> Done {
        match self.prepare(unit, published(unit)) {
            Prepared::Done(done) => done,
            Prepared::Measure(pending) => {
                let measured = measure(&pending.link);
                let done = finish(self.out.as_deref(), &self.settings, unit, &pending, measured);
                if done.outcome == Outcome::Computed
                    && let Some(rows) = &done.rows
                {
                    self.remember(unit, &pending.facts, rows);
                }
                done
            }
        }
    }

    /// Everything before a weight byte, given what the Hub published of the unit: a unit whose
    /// API answer failed is written as failed; one written already for its commit is skipped;
    /// one whose weights another unit has is written with that unit's rows. Else it is to be
    /// measured.
    pub fn prepare(&mut self, unit: &Unit, published: Result<Option<Published>>) -> Prepared {
        let path = self.out.as_deref().map(|out| file_of(out, unit));
        let mut facts = UnitFacts::default();
        let published = match published {
            Ok(published) => published,
            Err(e) => return Prepared::Done(fail(self.out.as_deref(), &self.settings, unit, &facts, &e.to_string())),
        };
        if let Some(published) = &published {
            facts.commit = Some(published.commit.clone());
            facts.weights_sha256 = identity(Some(published));
        }
        if let Some(path) = &path
            && self.already_written(path, published.as_ref())
        {
            return Prepared::Done(Done {
                outcome: Outcome::Skipped,
                note: String::new(),
                rows: None,
                path: Some(path.clone()),
            });
        }
        if let Some((twin, rows)) = facts.weights_sha256.clone().and_then(|weights| self.twin_rows(&weights, unit)) {
            facts.same_weights_as = Some(twin.named_from(unit));
            let table = unit_table(unit, &facts, Ok(&rows), self.settings.probe.is_some());
            return Prepared::Done(match write(self.out.as_deref(), &self.settings, unit, &facts, &table, false) {
                Ok(path) => Done {
                    outcome: Outcome::SameWeights,
                    note: format!(" (as {})", twin.link),
                    rows: Some(table),
                    path,
                },
                Err(e) => Done { outcome: Outcome::Failed, note: format!(": {e}"), rows: Some(table), path: None },
            });
        }
        let link = match (&published, unit.hub()) {
            (Some(published), Some((repo, _))) => format!("hf:{repo}@{}", published.commit),
            _ => unit.link.clone(),
        };
        Prepared::Measure(Pending { link, facts })
    }

    /// A unit measured (here or in another process) whose weights a later unit may share:
    /// `rows` are its file's rows (the unit's columns too) or its heads' alone.
    pub fn remember(&mut self, unit: &Unit, facts: &UnitFacts, rows: &Table) {
        let heads = heads_of(rows, self.settings.probe.is_some());
        let path = self.out.as_deref().map(|out| file_of(out, unit));
        // In place of a twin whose file could not be read back, if there was one.
        self.twins.replace(facts.weights_sha256.as_deref(), Twin { unit: unit.clone(), rows: Some(heads), path });
    }

    /// Another unit with these weights and its head rows (read from its file once), if any.
    fn twin_rows(&mut self, weights: &str, unit: &Unit) -> Option<(Unit, Table)> {
        let probe = self.settings.probe.is_some();
        let twin = self.twins.earlier_mut(Some(weights)).filter(|twin| twin.unit != *unit)?;
        if twin.rows.is_none() {
            // A twin whose file cannot be read is computed afresh rather than trusted.
            twin.rows = Some(heads_of(&rows_file::read(twin.path.as_deref()?).ok()?, probe));
        }
        Some((twin.unit.clone(), twin.rows.clone()?))
    }

    /// Whether `path` holds this unit's rows already: written without error, with the same
    /// settings, and for a Hub revision at the commit it is now.
    fn already_written(&self, path: &Path, published: Option<&Published>) -> bool {
        if !path.is_file() {
            return false;
        }
        let Ok(pairs) = rows_file::metadata(path) else { return false };
        let get = |key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str());
        get(key::FAILED) == Some("false")
            && get(key::SETTINGS) == Some(&self.settings.key())
            && get(key::COMMIT) == published.map(|p| p.commit.as_str())
    }
}

/// The head columns of a unit's rows (a file's rows hold the unit's columns too).
fn heads_of(rows: &Table, probe: bool) -> Table {
    let columns = head_columns(probe)
        .into_iter()
        .filter_map(|(name, _)| Some(Column { values: rows.column(&name)?.clone(), name }))
        .collect();
    Table { rows: rows.rows, columns }
}

/// The files already in `out` written with `settings` and without error, by the content hash of
/// their weights: earlier runs' and other shards' units that a repeated checkpoint can reuse.
fn written_twins(out: &Path, settings: &str) -> Result<Repeats<Twin>> {
    let mut twins = Repeats::default();
    let entries =
        std::fs::read_dir(out).map_err(|e| Error::File { path: out.display().to_string(), reason: e.to_string() })?;
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with('.') || !name.ends_with(".parquet") {
            continue;
        }
        // A file that cannot be read (another tool's, a disk error) is simply not reused.
        let Ok(pairs) = rows_file::metadata(&path) else { continue };
        let get = |key: &str| pairs.iter().find(|(k, _)| k == key).map(|(_, v)| v.clone());
        if get(key::SETTINGS).as_deref() != Some(settings) || get(key::FAILED).as_deref() != Some("false") {
            continue;
        }
        if let (Some(weights), Some(link), Some(model)) = (get(key::WEIGHTS), get(key::LINK), get(key::MODEL)) {
            let unit = Unit { model, revision: get(key::REVISION), link };
            twins.keep(Some(&weights), Twin { unit, rows: None, path: Some(path) });
        }
    }
    Ok(twins)
}

/// A unit measured: its rows (or its reason) laid out and, with an output folder, written.
pub fn finish(
    out: Option<&Path>,
    settings: &Settings,
    unit: &Unit,
    pending: &Pending,
    measured: Result<Table>,
) -> Done {
    let heads = match measured {
        Ok(heads) => heads,
        Err(e) => {
            // The opener's errors name the link already; the unit's link once is enough.
            let reason = e.to_string().replace(&pending.link, &unit.link);
            let prefix = format!("{}: ", unit.link);
            let reason = match reason.strip_prefix(&prefix) {
                Some(rest) if rest.contains(&unit.link) => rest.to_string(),
                _ => reason,
            };
            return fail(out, settings, unit, &pending.facts, &reason);
        }
    };
    let table = unit_table(unit, &pending.facts, Ok(&heads), settings.probe.is_some());
    match write(out, settings, unit, &pending.facts, &table, false) {
        Ok(path) => Done { outcome: Outcome::Computed, note: String::new(), rows: Some(table), path },
        Err(e) => Done { outcome: Outcome::Failed, note: format!(": {e}"), rows: Some(table), path: None },
    }
}

/// A failed unit's one row, written.
fn fail(out: Option<&Path>, settings: &Settings, unit: &Unit, facts: &UnitFacts, reason: &str) -> Done {
    let table = unit_table(unit, facts, Err(reason), settings.probe.is_some());
    let line = reason.lines().next().unwrap_or_default();
    match write(out, settings, unit, facts, &table, true) {
        Ok(path) => Done { outcome: Outcome::Failed, note: format!(": {line}"), rows: Some(table), path },
        Err(e) => Done {
            outcome: Outcome::Failed,
            note: format!(": {line} (and its file: {e})"),
            rows: Some(table),
            path: None,
        },
    }
}

/// Writes a unit's rows to its file under `out` with what resuming reads back; nothing
/// without `out`.
fn write(
    out: Option<&Path>,
    settings: &Settings,
    unit: &Unit,
    facts: &UnitFacts,
    table: &Table,
    failed: bool,
) -> Result<Option<PathBuf>> {
    let Some(out) = out else { return Ok(None) };
    let path = file_of(out, unit);
    let mut metadata = vec![
        (key::LINK, unit.link.clone()),
        (key::MODEL, unit.model.clone()),
        (key::SETTINGS, settings.key()),
        (key::FAILED, failed.to_string()),
    ];
    let optional =
        [(key::REVISION, &unit.revision), (key::COMMIT, &facts.commit), (key::WEIGHTS, &facts.weights_sha256)];
    metadata.extend(optional.into_iter().filter_map(|(k, v)| Some((k, v.clone()?))));
    rows_file::write(&path, table, &metadata)?;
    Ok(Some(path))
}

/// A unit's heads measured: the fingerprint, its backend, and with the probe its scores.
pub struct Measured {
    pub heads: Table,
    /// What computed the fingerprint (its `note` says why a GPU asked for was not used).
    pub backend: BackendInfo,
}

/// Opens `link` and measures it: the fingerprint in `settings.mode` and, with the probe, the
/// induction probe on `copies` (drawn here from this model when None, and kept: every revision
/// of a model runs the same sequences, as in a timeline). `progress` hears (stage, done, total):
/// "opening" (0 of 0), "Grams", "heads", "probe". Errors name the link.
pub fn measure(
    link: &str,
    settings: &Settings,
    copies: &mut Option<Vec<FirstCopy>>,
    backend: &mut Backend,
    progress: &mut dyn FnMut(&str, usize, usize),
) -> Result<Measured> {
    let named = |e: Error| Error::Invalid(format!("{link}: {e}"));
    progress("opening", 0, 0);
    let opened = OpenedModel::open(crate::open::open(link).map_err(named)?.files).map_err(named)?;
    let model = opened.stream().map_err(named)?;
    let fingerprint = fingerprint_stream_watched(&model, settings.mode, backend, &mut |stage, done, total| {
        progress(if stage == FingerprintStage::Grams { "Grams" } else { "heads" }, done, total)
    })
    .map_err(named)?;
    let induction = match &settings.probe {
        None => None,
        Some(probe) => {
            let bos = opened.bos(&model, probe.bos);
            if copies.is_none() {
                let source = probe.text_file.as_deref().map_or(CopySource::Random, CopySource::TextFile);
                let drawn = opened.first_copies(&model, &source, probe.len, probe.seed, probe.sequences);
                *copies = Some(drawn.map_err(named)?);
            }
            let drawn = copies.as_deref().unwrap_or_default();
            let bos = bos.as_ref().map(|b| b.id);
            let report = block_on(backend.with_fallback(async |backend| {
                induction_probe_with_progress(&model, drawn, bos, backend, &mut |done, total| {
                    progress("probe", done, total)
                })
                .await
            }))
            .map_err(named)?;
            Some(report)
        }
    };
    Ok(Measured { heads: head_table(&fingerprint, induction.as_ref()), backend: fingerprint.backend })
}

#[cfg(test)]
mod tests {
    use super::*;
    use headprint::sweep::Values;

    fn unit(revision: &str) -> Unit {
        Unit { model: "hf:o/m".into(), revision: Some(revision.into()), link: format!("hf:o/m@{revision}") }
    }

    fn published(commit: &str, hash: &str) -> Result<Option<Published>> {
        Ok(Some(Published {
            commit: commit.repeat(40),
            weights: vec![("model.safetensors".into(), Some(hash.into()))],
        }))
    }

    fn heads() -> Table {
        let columns = head_columns(false)
            .into_iter()
            .map(|(name, kind)| {
                let values = match kind {
                    headprint::sweep::Kind::Count => Values::Count(vec![Some(0), Some(1)]),
                    headprint::sweep::Kind::Number => Values::Number(vec![Some(0.5), None]),
                    headprint::sweep::Kind::Flag => Values::Flag(vec![Some(false), None]),
                    headprint::sweep::Kind::Text => Values::Text(vec![None, Some("x".into())]),
                };
                Column { name, values }
            })
            .collect();
        Table { rows: 2, columns }
    }

    #[test]
    fn settings_keys_are_the_clis() {
        let probe = ProbeSettings { len: 10, seed: 3, sequences: 2, bos: true, text_file: None };
        let settings = Settings { mode: Mode::Folded, probe: Some(probe) };
        assert_eq!(settings.key(), "mode=folded;probe;len=10;seed=3;sequences=2;bos=true;text_file=");
        assert_eq!(Settings { mode: Mode::Raw, probe: None }.key(), "mode=raw");
    }

    #[test]
    fn a_unit_with_remembered_weights_gets_their_rows_and_a_written_one_is_skipped() {
        let out = std::env::temp_dir().join(format!("headprint-native-sweep-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&out);
        let settings = Settings { mode: Mode::Folded, probe: None };
        let mut sweep = Sweep::new(Some(&out), settings.clone()).unwrap();
        let Prepared::Measure(pending) = sweep.prepare(&unit("step1"), published("a", "same")) else { panic!() };
        assert_eq!(pending.link, format!("hf:o/m@{}", "a".repeat(40)));
        let done = finish(Some(&out), &settings, &unit("step1"), &pending, Ok(heads()));
        assert_eq!(done.outcome, Outcome::Computed);
        sweep.remember(&unit("step1"), &pending.facts, done.rows.as_ref().unwrap());
        let Prepared::Done(twin) = sweep.prepare(&unit("step2"), published("b", "same")) else { panic!() };
        assert_eq!((twin.outcome, twin.note.as_str()), (Outcome::SameWeights, " (as hf:o/m@step1)"));
        let rows = twin.rows.unwrap();
        assert_eq!(rows.column("same_weights_as"), Some(&Values::Text(vec![Some("step1".into()); 2])));
        assert_eq!(rows.column("ov_scale"), heads().column("ov_scale"));
        assert_eq!(rows_file::read(&file_of(&out, &unit("step2"))).unwrap(), rows);

        // A fresh sweep on the folder: step1 is written for commit a, not for commit c; step3
        // shares step1's weights through its file.
        let mut again = Sweep::new(Some(&out), settings).unwrap();
        let Prepared::Done(skipped) = again.prepare(&unit("step1"), published("a", "same")) else { panic!() };
        assert_eq!(skipped.outcome, Outcome::Skipped);
        assert!(matches!(again.prepare(&unit("step1"), published("c", "other")), Prepared::Measure(_)));
        let Prepared::Done(third) = again.prepare(&unit("step3"), published("d", "same")) else { panic!() };
        assert_eq!(third.outcome, Outcome::SameWeights);
        let failed = again.prepare(&unit("step4"), Err(Error::Invalid("no such branch".into())));
        let Prepared::Done(failed) = failed else { panic!() };
        assert_eq!(failed.outcome, Outcome::Failed);
        assert_eq!(failed.rows.unwrap().column("error"), Some(&Values::Text(vec![Some("no such branch".into())])));
        let _ = std::fs::remove_dir_all(&out);
    }
}
