//! `headprint._headprint`, the Rust half of the Python package (`python/headprint/`): models
//! opened by path or link, or made of the tensors a Python object holds, and the core's
//! computations on them, off the interpreter's lock. The Python half turns the results into
//! pandas and numpy and reads TransformerLens and transformers objects. The core's reports cross
//! as typed objects (`reports.rs`, `between.rs`), never as JSON text.

mod arrays;
mod between;
mod model;
mod reports;
mod running;
mod sweep;

use headprint::weights::{ByteSource, MemorySource, ModelFiles};
use numpy::PyUntypedArray;
use pyo3::create_exception;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::arrays::{Bytes, HeldTensor, HeldTensors};
use crate::model::Model;

create_exception!(
    headprint,
    Error,
    PyValueError,
    "What headprint could not do, in one line: a bad file, link or argument."
);

/// The core's error as `headprint.Error`, with the message the CLI prints.
pub(crate) fn error(error: headprint::Error) -> PyErr {
    Error::new_err(error.to_string())
}

/// Opens a model by path (a .safetensors file or a folder) or link (`hf:ORG/NAME@REV`, an
/// http(s) folder), through the caches the CLI uses.
#[pyfunction]
fn open(py: Python<'_>, source: String) -> PyResult<Model> {
    py.detach(|| {
        let opened = headprint_native::open::open(&source)?;
        let link = opened.link.as_ref().map(|l| l.json());
        Model::new(opened.files, link, opened.label)
    })
    .map_err(error)
}

/// A model made of tensors Python holds: `tensors` is a list of (name, safetensors dtype,
/// shape, a C-contiguous numpy array of the bytes), read in place.
#[pyfunction]
#[pyo3(signature = (config_json, tensors, tokenizer_json, label))]
fn from_tensors(
    config_json: String,
    tensors: Vec<(String, String, Vec<usize>, Bound<'_, PyUntypedArray>)>,
    tokenizer_json: Option<Vec<u8>>,
    label: String,
) -> PyResult<Model> {
    let held = tensors
        .into_iter()
        .map(|(name, dtype, shape, array)| {
            let bytes = Bytes::of(&array, &name)?;
            Ok(HeldTensor { name, dtype, shape, bytes })
        })
        .collect::<headprint::Result<Vec<_>>>()
        .map_err(error)?;
    let weights = HeldTensors::new(&label, held).map_err(error)?;
    let mut files: Vec<(String, Box<dyn ByteSource>)> = vec![
        ("model.safetensors".into(), Box::new(weights)),
        ("config.json".into(), Box::new(MemorySource::new("config.json", config_json.into_bytes()))),
    ];
    if let Some(tokenizer) = tokenizer_json {
        files.push(("tokenizer.json".into(), Box::new(MemorySource::new("tokenizer.json", tokenizer))));
    }
    let files = ModelFiles::from_named(files).map_err(error)?;
    Model::new(files, None, label).map_err(error)
}

/// How links are opened from now on: `offline` never touches the network; `on_note(text)`
/// receives the network's notes (a retried request, a stalled server).
#[pyfunction]
#[pyo3(signature = (offline, on_note))]
fn configure_links(offline: bool, on_note: Py<PyAny>) {
    let on_note = move |note: &str| {
        Python::attach(|py| {
            let _ = on_note.call1(py, (note,));
        })
    };
    headprint_native::open::configure(headprint_native::open::LinkSettings {
        offline,
        on_note: Some(Box::new(on_note)),
    });
}

/// The core's defaults, as module attributes the Python functions' signatures read: the CLI's
/// flags default to the same constants.
fn add_defaults(m: &Bound<'_, PyModule>) -> PyResult<()> {
    use headprint::probes::induction::{DEFAULT_LENGTH, DEFAULT_SEED, DEFAULT_SEQUENCES};
    m.add("INDUCTION_HEAD_THRESHOLD", headprint::compare::INDUCTION_HEAD_THRESHOLD)?;
    m.add("DEFAULT_LENGTH", DEFAULT_LENGTH)?;
    m.add("DEFAULT_SEQUENCES", DEFAULT_SEQUENCES)?;
    m.add("DEFAULT_SEED", DEFAULT_SEED)?;
    m.add("DEFAULT_SVD_TOKENS", headprint::analysis::singular::DEFAULT_TOKENS)?;
    Ok(())
}

#[pymodule]
fn _headprint(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("Error", m.py().get_type::<Error>())?;
    add_defaults(m)?;
    m.add_class::<Model>()?;
    m.add_class::<reports::FingerprintReport>()?;
    m.add_class::<reports::HeadFingerprint>()?;
    m.add_class::<reports::Spectrum>()?;
    m.add_class::<reports::InductionReport>()?;
    m.add_class::<reports::HeadScores>()?;
    m.add_class::<reports::HeadSpread>()?;
    m.add_class::<reports::Spread>()?;
    m.add_class::<reports::Comparison>()?;
    m.add_class::<reports::OvLogits>()?;
    m.add_class::<reports::AttentionPatterns>()?;
    m.add_class::<between::Composition>()?;
    m.add_class::<between::CircuitSvd>()?;
    m.add_class::<between::Direction>()?;
    m.add_function(wrap_pyfunction!(open, m)?)?;
    m.add_function(wrap_pyfunction!(from_tensors, m)?)?;
    m.add_function(wrap_pyfunction!(configure_links, m)?)?;
    m.add_class::<sweep::SweepPlan>()?;
    m.add_function(wrap_pyfunction!(sweep::sweep_plan, m)?)?;
    m.add_function(wrap_pyfunction!(sweep::sweep_task, m)?)?;
    m.add_function(wrap_pyfunction!(sweep::read_sweep_file, m)?)?;
    m.add_function(wrap_pyfunction!(sweep::sweep_columns_of, m)?)?;
    Ok(())
}
