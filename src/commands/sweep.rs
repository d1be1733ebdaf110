//! `headprint sweep`: many models and checkpoints, one unit each, every unit's heads written as
//! one Parquet file under `--out` (docs/sweeps.md). A shard runs one part of the units; a unit
//! whose file is there for the same commit is skipped, and one whose weights the Hub says equal
//! another unit's reuses that unit's rows; neither fetches a weight byte.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use headprint::analysis::Mode;
use headprint::backend::Backend;
use headprint::probes::induction::FirstCopy;
use headprint::repeats::{Repeats, identity};
use headprint::sweep::{Table, Unit, UnitFacts, head_table, shard_range, unit_table, units};
use headprint::weights::remote::Published;
use headprint::{Error, Result};

use crate::commands::timeline::measure;
use crate::commands::{BackendArgs, ModeArg, RevisionArgs, SequenceArgs, print_note};
use crate::{open, rows_file};

#[derive(clap::Args)]
pub struct Args {
    /// The units: links (hf:ORG/NAME[@REV], url:…) and local checkpoints; with --revisions or
    /// --steps each Hub link without @REV stands for one unit per revision.
    #[arg(required = true, num_args = 1..)]
    models: Vec<String>,
    /// The folder the units' Parquet files go to (made if missing; shards may share it).
    #[arg(long)]
    out: PathBuf,
    #[command(flatten)]
    revisions: RevisionArgs,
    /// Also run the induction probe on every unit (reads the MLPs, which the fingerprint leaves
    /// on the server).
    #[arg(long)]
    probe: bool,
    #[command(flatten)]
    mode: ModeArg,
    /// Run only the I-th of N disjoint parts of the units (0-based, e.g. 3/64). Without it,
    /// Slurm's SLURM_ARRAY_TASK_ID / _COUNT / _MIN choose the part, else every unit runs.
    #[arg(long, value_parser = parse_shard)]
    shard: Option<Shard>,
    #[command(flatten)]
    sequence: SequenceArgs,
    #[command(flatten)]
    backend: BackendArgs,
}

/// One part of N of a sweep's units.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Shard {
    pub index: usize,
    pub count: usize,
}

fn parse_shard(text: &str) -> std::result::Result<Shard, String> {
    let (index, count) = text.split_once('/').ok_or("give the shard as I/N, e.g. 0/4")?;
    let number = |t: &str| t.trim().parse::<usize>().map_err(|_| format!("`{t}` in {text} is not a whole number"));
    let shard = Shard { index: number(index)?, count: number(count)? };
    if shard.count == 0 || shard.index >= shard.count {
        return Err(format!("shard {text}: I counts from 0 and must be below N"));
    }
    Ok(shard)
}

/// The part Slurm's job array names: task `ID` of `COUNT`, counted from `MIN` (with `--array`'s
/// step, `SLURM_ARRAY_TASK_STEP`, between them). None outside an array job.
fn slurm_shard(var: impl Fn(&str) -> Option<String>) -> Result<Option<Shard>> {
    let Some(id) = var("SLURM_ARRAY_TASK_ID") else { return Ok(None) };
    let number = |name: &str, default: Option<usize>| -> Result<usize> {
        match var(name) {
            Some(text) => {
                text.trim().parse().map_err(|_| Error::Invalid(format!("{name}=`{text}` is not a whole number")))
            }
            None => default.ok_or_else(|| Error::Invalid(format!("SLURM_ARRAY_TASK_ID is set but {name} is not"))),
        }
    };
    let id = number("SLURM_ARRAY_TASK_ID", None).map_err(|_| Error::Invalid(format!("SLURM_ARRAY_TASK_ID=`{id}`")))?;
    let (count, min, step) = (
        number("SLURM_ARRAY_TASK_COUNT", None)?,
        number("SLURM_ARRAY_TASK_MIN", Some(0))?,
        number("SLURM_ARRAY_TASK_STEP", Some(1))?,
    );
    let offset = id.checked_sub(min).filter(|o| o % step.max(1) == 0);
    match offset.map(|o| o / step.max(1)).filter(|&index| index < count) {
        Some(index) => Ok(Some(Shard { index, count })),
        None => Err(Error::Invalid(format!(
            "Slurm array task {id} is not one of {count} tasks from {min} in steps of {step}"
        ))),
    }
}

/// How a unit ended, for the summary.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Computed,
    Skipped,
    SameWeights,
    Failed,
}

/// A unit already written (this run or before) whose rows a unit with the same weights reuses.
struct Twin {
    unit: Unit,
    /// Its rows, once read.
    rows: Option<Table>,
    path: PathBuf,
}

/// The key-value metadata of a unit's file: what resuming and repeated weights read back.
mod key {
    pub const LINK: &str = "headprint.unit.link";
    pub const MODEL: &str = "headprint.unit.model";
    pub const REVISION: &str = "headprint.unit.revision";
    pub const COMMIT: &str = "headprint.unit.commit";
    pub const WEIGHTS: &str = "headprint.unit.weights_sha256";
    pub const SETTINGS: &str = "headprint.settings";
    pub const FAILED: &str = "headprint.failed";
}

pub fn run(args: Args) -> Result<()> {
    let all = units(&args.models, &args.revisions.revisions, &args.revisions.steps)?;
    let shard = match args.shard {
        Some(shard) => shard,
        None => slurm_shard(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))?
            .unwrap_or(Shard { index: 0, count: 1 }),
    };
    let mine = &all[shard_range(all.len(), shard.index, shard.count)];
    std::fs::create_dir_all(&args.out)
        .map_err(|e| Error::File { path: args.out.display().to_string(), reason: e.to_string() })?;
    let mode = args.mode.mode();
    let settings = settings_of(&args, mode);
    let mut sweep = Sweep {
        args: &args,
        mode,
        twins: written_twins(&args.out, &settings)?,
        settings,
        backend: None,
        copies: HashMap::new(),
    };
    println!(
        "sweep shard {}/{}: {} of {} units, files in {}",
        shard.index,
        shard.count,
        mine.len(),
        all.len(),
        args.out.display()
    );
    let mut outcomes = Vec::with_capacity(mine.len());
    for unit in mine {
        let (outcome, said) = sweep.unit(unit);
        println!("{:<12} {}{}", describe(outcome), unit.link, said);
        outcomes.push(outcome);
    }
    let count = |wanted: Outcome| outcomes.iter().filter(|&&o| o == wanted).count();
    println!(
        "\n{} computed, {} already written (skipped), {} with the same weights as another unit, {} failed",
        count(Outcome::Computed),
        count(Outcome::Skipped),
        count(Outcome::SameWeights),
        count(Outcome::Failed)
    );
    match count(Outcome::Failed) {
        0 => Ok(()),
        failed => Err(Error::Invalid(format!(
            "{failed} of {} units failed; their files say why in `error`, and a rerun tries them again",
            mine.len()
        ))),
    }
}

fn describe(outcome: Outcome) -> &'static str {
    match outcome {
        Outcome::Computed => "computed",
        Outcome::Skipped => "skipped",
        Outcome::SameWeights => "same weights",
        Outcome::Failed => "failed",
    }
}

/// What makes two files of one unit interchangeable besides its commit: the spectral mode and,
/// with the probe, its sequences.
fn settings_of(args: &Args, mode: Mode) -> String {
    let mut settings = format!("mode={}", mode.name());
    if args.probe {
        let s = &args.sequence;
        settings.push_str(&format!(
            ";probe;len={};seed={};sequences={};bos={};text_file={}",
            s.len,
            s.seed,
            s.sequences,
            !s.bos.no_bos,
            s.text_file.as_ref().map_or(String::new(), |p| p.display().to_string())
        ));
    }
    settings
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
            twins.keep(Some(&weights), Twin { unit, rows: None, path });
        }
    }
    Ok(twins)
}

struct Sweep<'a> {
    args: &'a Args,
    mode: Mode,
    settings: String,
    /// The units computed or written so far by their weights' identity: the core's rule for
    /// repeated checkpoints, as the timeline and the page apply it.
    twins: Repeats<Twin>,
    /// Opened at the first unit that computes: a sweep that only skips needs no GPU.
    backend: Option<Backend>,
    /// The probe's first copies per model, drawn once: every revision of a model runs the same
    /// sequences, as in a timeline.
    copies: HashMap<String, Option<Vec<FirstCopy>>>,
}

impl Sweep<'_> {
    /// Runs one unit and writes its file; what happened, and a note for its line.
    fn unit(&mut self, unit: &Unit) -> (Outcome, String) {
        let path = self.args.out.join(format!("{}.parquet", unit.file_stem()));
        let mut facts = UnitFacts::default();
        // Before any file of the unit is read: its commit and the hash of its weights.
        let published = match unit.hub() {
            Some((repo, revision)) => match open::published(repo, revision) {
                Ok(published) => Some(published),
                // Offline, the caches alone say what a revision is: the unit is opened as usual.
                Err(Error::Offline { .. }) => None,
                Err(e) => return self.fail(unit, &path, &facts, &e.to_string()),
            },
            None => None,
        };
        if let Some(published) = &published {
            facts.commit = Some(published.commit.clone());
            facts.weights_sha256 = identity(Some(published));
        }
        if self.already_written(&path, published.as_ref()) {
            return (Outcome::Skipped, String::new());
        }
        if let Some((twin, rows)) = facts.weights_sha256.clone().and_then(|weights| self.twin_rows(&weights, unit)) {
            facts.same_weights_as = Some(twin.named_from(unit));
            let table = unit_table(unit, &facts, Ok(&rows), self.args.probe);
            return match self.write(&path, unit, &facts, &table, false) {
                Ok(()) => (Outcome::SameWeights, format!(" (as {})", twin.link)),
                Err(e) => (Outcome::Failed, format!(": {e}")),
            };
        }
        // Pinned to the commit the Hub named, so the rows are of the commit they say.
        let link = match (&published, unit.hub()) {
            (Some(published), Some((repo, _))) => format!("hf:{repo}@{}", published.commit),
            _ => unit.link.clone(),
        };
        let heads = self.measure(unit, &link);
        let heads = match heads {
            Ok(heads) => heads,
            Err(e) => {
                // The opener's errors name the link already; the unit's link once is enough.
                let reason = e.to_string().replace(&link, &unit.link);
                let prefix = format!("{}: ", unit.link);
                let reason = match reason.strip_prefix(&prefix) {
                    Some(rest) if rest.contains(&unit.link) => rest.to_string(),
                    _ => reason,
                };
                return self.fail(unit, &path, &facts, &reason);
            }
        };
        let table = unit_table(unit, &facts, Ok(&heads), self.args.probe);
        if let Err(e) = self.write(&path, unit, &facts, &table, false) {
            return (Outcome::Failed, format!(": {e}"));
        }
        // In place of a twin whose file could not be read back, if there was one.
        self.twins.replace(facts.weights_sha256.as_deref(), Twin { unit: unit.clone(), rows: Some(heads), path });
        (Outcome::Computed, String::new())
    }

    /// Another unit with these weights and its rows (read from its file once), if there is one.
    fn twin_rows(&mut self, weights: &str, unit: &Unit) -> Option<(Unit, Table)> {
        let twin = self.twins.earlier_mut(Some(weights)).filter(|twin| twin.unit != *unit)?;
        if twin.rows.is_none() {
            // A twin whose file cannot be read is computed afresh rather than trusted.
            twin.rows = Some(rows_file::read(&twin.path).ok()?);
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
            && get(key::SETTINGS) == Some(&self.settings)
            && get(key::COMMIT) == published.map(|p| p.commit.as_str())
    }

    /// The unit's heads as rows: opened, fingerprinted and with `--probe` probed.
    fn measure(&mut self, unit: &Unit, link: &str) -> Result<Table> {
        if self.backend.is_none() {
            let backend = self.args.backend.open()?;
            self.backend = Some(backend);
        }
        let backend = self.backend.as_mut().ok_or_else(|| Error::Internal("no backend".into()))?;
        let sequence = self.args.probe.then_some(&self.args.sequence);
        let copies = self.copies.entry(unit.model.clone()).or_default();
        let (measured, _, _) = measure(link, self.mode, sequence, copies, backend)?;
        print_note(&measured.fingerprint.backend);
        Ok(head_table(&measured.fingerprint, measured.induction.as_ref()))
    }

    fn fail(&self, unit: &Unit, path: &Path, facts: &UnitFacts, reason: &str) -> (Outcome, String) {
        let table = unit_table(unit, facts, Err(reason), self.args.probe);
        let line = reason.lines().next().unwrap_or_default();
        match self.write(path, unit, facts, &table, true) {
            Ok(()) => (Outcome::Failed, format!(": {line}")),
            Err(e) => (Outcome::Failed, format!(": {line} (and its file: {e})")),
        }
    }

    fn write(&self, path: &Path, unit: &Unit, facts: &UnitFacts, table: &Table, failed: bool) -> Result<()> {
        let mut metadata = vec![
            (key::LINK, unit.link.clone()),
            (key::MODEL, unit.model.clone()),
            (key::SETTINGS, self.settings.clone()),
            (key::FAILED, failed.to_string()),
        ];
        let optional =
            [(key::REVISION, &unit.revision), (key::COMMIT, &facts.commit), (key::WEIGHTS, &facts.weights_sha256)];
        metadata.extend(optional.into_iter().filter_map(|(k, v)| Some((k, v.clone()?))));
        rows_file::write(path, table, &metadata)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env<'a>(pairs: &'a [(&str, &str)]) -> impl Fn(&str) -> Option<String> + 'a {
        move |name| pairs.iter().find(|(n, _)| *n == name).map(|(_, v)| v.to_string())
    }

    #[test]
    fn shards_parse_and_slurm_names_the_same_part() {
        assert_eq!(parse_shard("3/64"), Ok(Shard { index: 3, count: 64 }));
        assert!(parse_shard("4/4").is_err() && parse_shard("1/0").is_err() && parse_shard("2").is_err());
        assert_eq!(slurm_shard(env(&[])).unwrap(), None);
        let array = [("SLURM_ARRAY_TASK_ID", "5"), ("SLURM_ARRAY_TASK_COUNT", "4"), ("SLURM_ARRAY_TASK_MIN", "2")];
        assert_eq!(slurm_shard(env(&array)).unwrap(), Some(Shard { index: 3, count: 4 }));
        let stepped = [
            ("SLURM_ARRAY_TASK_ID", "4"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_ARRAY_TASK_MIN", "0"),
            ("SLURM_ARRAY_TASK_STEP", "2"),
        ];
        assert_eq!(slurm_shard(env(&stepped)).unwrap(), Some(Shard { index: 2, count: 3 }));
        let outside = [("SLURM_ARRAY_TASK_ID", "9"), ("SLURM_ARRAY_TASK_COUNT", "4"), ("SLURM_ARRAY_TASK_MIN", "0")];
        assert!(slurm_shard(env(&outside)).is_err());
    }
}
