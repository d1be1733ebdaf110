//! `headprint sweep`: many models and checkpoints, one unit each, every unit's heads written as
//! one Parquet file under `--out` (docs/sweeps.md). A shard runs one part of the units; a unit
//! whose file is there for the same commit is skipped, and one whose weights the Hub says equal
//! another unit's reuses that unit's rows; neither fetches a weight byte. Each unit is run by
//! `headprint_native::sweep`, as Python's `headprint.sweep` runs it; this is its command line.

use std::collections::HashMap;
use std::path::PathBuf;

use headprint::backend::Backend;
use headprint::probes::induction::FirstCopy;
use headprint::sweep::{shard_range, units};
use headprint::{Error, Result};
use headprint_native::sweep::{Outcome, ProbeSettings, Settings, Sweep, measure};

use crate::commands::{BackendArgs, ModeArg, RevisionArgs, SequenceArgs, print_note};
use crate::progress;

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

pub fn run(args: Args) -> Result<()> {
    let all = units(&args.models, &args.revisions.revisions, &args.revisions.steps)?;
    let shard = match args.shard {
        Some(shard) => shard,
        None => slurm_shard(|name| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))?
            .unwrap_or(Shard { index: 0, count: 1 }),
    };
    let mine = &all[shard_range(all.len(), shard.index, shard.count)];
    let s = &args.sequence;
    let probe = args.probe.then(|| ProbeSettings {
        len: s.len,
        seed: s.seed,
        sequences: s.sequences,
        bos: !s.bos.no_bos,
        text_file: s.text_file.clone(),
    });
    let settings = Settings { mode: args.mode.mode(), probe };
    let mut sweep = Sweep::new(Some(&args.out), settings.clone())?;
    println!(
        "sweep shard {}/{}: {} of {} units, files in {}",
        shard.index,
        shard.count,
        mine.len(),
        all.len(),
        args.out.display()
    );
    // Opened at the first unit that computes: a sweep that only skips needs no GPU.
    let mut backend: Option<Backend> = None;
    // The probe's first copies per model, drawn once: every revision of a model runs the same
    // sequences, as in a timeline.
    let mut copies: HashMap<String, Option<Vec<FirstCopy>>> = HashMap::new();
    let mut outcomes = Vec::with_capacity(mine.len());
    for unit in mine {
        let done = sweep.unit(unit, |link| {
            if backend.is_none() {
                backend = Some(args.backend.open()?);
            }
            let backend = backend.as_mut().ok_or_else(|| Error::Internal("no backend".into()))?;
            let copies = copies.entry(unit.model.clone()).or_default();
            let measured = measure(link, &settings, copies, backend, &mut shown(link))?;
            print_note(&measured.backend);
            Ok(measured.heads)
        });
        println!("{:<12} {}{}", done.outcome.name(), unit.link, done.note);
        outcomes.push(done.outcome);
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

/// Progress bars for a unit's stages: a spinner while `link` opens, then the Grams' vocabulary
/// rows, the heads and the probe's layers.
fn shown(link: &str) -> impl FnMut(&str, usize, usize) + '_ {
    let mut bar: Option<(String, progress::Stage)> = None;
    move |stage, done, total| {
        if bar.as_ref().is_none_or(|(showing, _)| showing != stage) {
            let (label, counted, unit) = match stage {
                "opening" => ("opening", false, ""),
                "Grams" => ("Grams", true, "vocabulary rows"),
                "heads" => ("heads", true, "heads"),
                _ => ("probe", true, "layers"),
            };
            let opened = match bar.take() {
                Some((_, opened)) => {
                    opened.switch(label, counted, unit);
                    opened
                }
                None => progress::stage(label, counted.then_some(total), unit),
            };
            if stage == "opening" {
                opened.message(link.to_string());
            }
            bar = Some((stage.to_string(), opened));
        }
        if let Some((_, bar)) = bar.as_ref().filter(|_| stage != "opening") {
            bar.set(done, total);
        }
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
