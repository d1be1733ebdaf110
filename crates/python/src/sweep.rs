//! `headprint.sweep`'s Rust half: the units planned in the caller (`SweepPlan`: what the Hub
//! publishes of each, which are written already, which share another's weights) and one unit
//! measured and written in whatever process a task runs in (`sweep_task`), both through
//! `headprint_native::sweep`, as the CLI's `headprint sweep` runs them. Rows cross into Python
//! as a dict of column name to list (None for null), which pickles as it is.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use headprint::analysis::Mode;
use headprint::backend::BackendChoice;
use headprint::sweep::{Kind, Table, Unit, UnitFacts, Values, sweep_columns, units};
use headprint::weights::remote::Published;
use headprint::{Error, Result};
use headprint_native::sweep::{Done, Pending, Prepared, ProbeSettings, Settings, Sweep, finish, measure, published};
use pyo3::prelude::*;
use pyo3::types::PyDict;

use crate::error;

/// The probe's sequences as Python gives them: (length, sequences, seed, bos).
type ProbeArgs = Option<(usize, usize, u64, bool)>;

fn settings_of(raw: bool, probe: ProbeArgs) -> Settings {
    let probe = probe.map(|(len, sequences, seed, bos)| ProbeSettings { len, seed, sequences, bos, text_file: None });
    Settings { mode: if raw { Mode::Raw } else { Mode::Folded }, probe }
}

fn kind_name(kind: Kind) -> &'static str {
    match kind {
        Kind::Count => "count",
        Kind::Number => "number",
        Kind::Flag => "flag",
        Kind::Text => "text",
    }
}

/// A table as a dict of column name to list.
fn rows_dict<'py>(py: Python<'py>, table: &Table) -> PyResult<Bound<'py, PyDict>> {
    let dict = PyDict::new(py);
    for column in &table.columns {
        match &column.values {
            Values::Count(v) => dict.set_item(&column.name, v)?,
            Values::Number(v) => dict.set_item(&column.name, v)?,
            Values::Flag(v) => dict.set_item(&column.name, v)?,
            Values::Text(v) => dict.set_item(&column.name, v)?,
        }
    }
    Ok(dict)
}

/// A dict of column name to list back as a table of a sweep's columns.
fn table_of(rows: &Bound<'_, PyDict>, probe: bool) -> PyResult<Table> {
    let mut table = Table::default();
    for (name, kind) in sweep_columns(probe) {
        let Some(list) = rows.get_item(&name)? else { continue };
        let values = match kind {
            Kind::Count => Values::Count(list.extract()?),
            Kind::Number => Values::Number(list.extract()?),
            Kind::Flag => Values::Flag(list.extract()?),
            Kind::Text => Values::Text(list.extract()?),
        };
        table.rows = values.len();
        table.columns.push(headprint::sweep::Column { name, values });
    }
    Ok(table)
}

/// A unit done as Python takes it: {"outcome", "note", "rows"}, the rows read from its file when
/// it was skipped.
fn done_dict<'py>(py: Python<'py>, done: Done) -> PyResult<Bound<'py, PyDict>> {
    let rows = match (done.rows, &done.path) {
        (Some(rows), _) => rows,
        (None, Some(path)) => headprint_native::rows_file::read(path).map_err(error)?,
        (None, None) => return Err(error(Error::Internal("a unit done with neither rows nor file".into()))),
    };
    let dict = PyDict::new(py);
    dict.set_item("outcome", done.outcome.name())?;
    dict.set_item("note", done.note)?;
    dict.set_item("rows", rows_dict(py, &rows)?)?;
    Ok(dict)
}

/// A sweep's units in the caller's process: planned from the links, each asked of the Hub once.
#[pyclass(module = "headprint", frozen)]
pub struct SweepPlan {
    units: Vec<Unit>,
    probe: bool,
    sweep: Mutex<Sweep>,
    /// What the Hub published of each unit, once asked (an error is a unit done, never asked
    /// again).
    published: Mutex<Vec<Option<Option<Published>>>>,
}

impl SweepPlan {
    fn unit(&self, index: usize) -> PyResult<&Unit> {
        self.units.get(index).ok_or_else(|| error(Error::Invalid(format!("no unit {index}"))))
    }
}

/// Plans a sweep: its units (as `headprint sweep` expands them) and, with `out`, the files
/// already written there. `backend` is checked here, by the core's parser, so that a bad one is
/// refused before any unit is asked of the Hub.
#[pyfunction]
#[pyo3(signature = (links, revisions, steps, out, raw, probe, backend))]
pub fn sweep_plan(
    links: Vec<String>,
    revisions: Vec<String>,
    steps: Vec<u64>,
    out: Option<PathBuf>,
    raw: bool,
    probe: ProbeArgs,
    backend: &str,
) -> PyResult<SweepPlan> {
    BackendChoice::parse(backend).map_err(error)?;
    let planned = units(&links, &revisions, &steps).map_err(error)?;
    let sweep = Sweep::new(out.as_deref(), settings_of(raw, probe)).map_err(error)?;
    Ok(SweepPlan {
        published: Mutex::new(vec![None; planned.len()]),
        units: planned,
        probe: probe.is_some(),
        sweep: Mutex::new(sweep),
    })
}

#[pymethods]
impl SweepPlan {
    /// The units in order, as (model, revision, link).
    fn units(&self) -> Vec<(String, Option<String>, String)> {
        self.units.iter().map(|u| (u.model.clone(), u.revision.clone(), u.link.clone())).collect()
    }

    /// Unit `index` up to its first weight byte: done ({"outcome", "note", "rows"}: failed,
    /// skipped, or with the same weights as a unit remembered), or to measure ({"link",
    /// "commit", "weights_sha256"}: the pinned link and what its rows say of it).
    fn prepare<'py>(&self, py: Python<'py>, index: usize) -> PyResult<Bound<'py, PyDict>> {
        let unit = self.unit(index)?.clone();
        let known = self.published.lock().unwrap_or_else(|e| e.into_inner())[index].clone();
        let answer = match known {
            Some(known) => Ok(known),
            None => py.detach(|| published(&unit)),
        };
        if let Ok(answer) = &answer {
            self.published.lock().unwrap_or_else(|e| e.into_inner())[index] = Some(answer.clone());
        }
        let prepared = py.detach(|| self.sweep.lock().unwrap_or_else(|e| e.into_inner()).prepare(&unit, answer));
        match prepared {
            Prepared::Done(done) => done_dict(py, done),
            Prepared::Measure(Pending { link, facts }) => {
                let dict = PyDict::new(py);
                dict.set_item("link", link)?;
                dict.set_item("commit", facts.commit)?;
                dict.set_item("weights_sha256", facts.weights_sha256)?;
                Ok(dict)
            }
        }
    }

    /// Unit `index` was measured with these rows: a later unit with its weights reuses them.
    fn remember(
        &self,
        index: usize,
        commit: Option<String>,
        weights_sha256: Option<String>,
        rows: &Bound<'_, PyDict>,
    ) -> PyResult<()> {
        let unit = self.unit(index)?;
        let facts = UnitFacts { commit, weights_sha256, same_weights_as: None };
        let table = table_of(rows, self.probe)?;
        self.sweep.lock().unwrap_or_else(|e| e.into_inner()).remember(unit, &facts, &table);
        Ok(())
    }
}

/// One unit opened, measured on `backend` and, with `out`, written to its file: what a task of
/// `headprint.sweep` runs, in whatever process. Returns {"outcome", "note", "rows"}; a unit that
/// fails is a row with its reason in `error`, as the CLI writes it.
#[pyfunction]
#[pyo3(signature = (model, revision, unit_link, link, commit, weights_sha256, out, raw, probe, backend))]
#[allow(clippy::too_many_arguments)]
pub fn sweep_task<'py>(
    py: Python<'py>,
    model: String,
    revision: Option<String>,
    unit_link: String,
    link: String,
    commit: Option<String>,
    weights_sha256: Option<String>,
    out: Option<PathBuf>,
    raw: bool,
    probe: ProbeArgs,
    backend: String,
) -> PyResult<Bound<'py, PyDict>> {
    let unit = Unit { model, revision, link: unit_link };
    let settings = settings_of(raw, probe);
    let pending = Pending { link, facts: UnitFacts { commit, weights_sha256, same_weights_as: None } };
    let done = py.detach(|| {
        let measured = crate::model::select(&backend).and_then(|mut computing| {
            let mut copies = None;
            measure(&pending.link, &settings, &mut copies, &mut computing, &mut |_, _, _| {}).map(|m| m.heads)
        });
        if let Some(out) = &out
            && let Err(e) = make_folder(out)
        {
            return Err(e);
        }
        Ok(finish(out.as_deref(), &settings, &unit, &pending, measured))
    });
    done_dict(py, done.map_err(error)?)
}

fn make_folder(out: &Path) -> Result<()> {
    std::fs::create_dir_all(out).map_err(|e| Error::File { path: out.display().to_string(), reason: e.to_string() })
}

/// Every row of a sweep's file, as a dict of column name to list.
#[pyfunction]
pub fn read_sweep_file<'py>(py: Python<'py>, path: PathBuf) -> PyResult<Bound<'py, PyDict>> {
    let table = py.detach(|| headprint_native::rows_file::read(&path)).map_err(error)?;
    rows_dict(py, &table)
}

/// Every column of a sweep's rows in order, as (name, kind): "count", "number", "flag" or
/// "text".
#[pyfunction]
pub fn sweep_columns_of(probe: bool) -> Vec<(String, &'static str)> {
    sweep_columns(probe).into_iter().map(|(name, kind)| (name, kind_name(kind))).collect()
}
