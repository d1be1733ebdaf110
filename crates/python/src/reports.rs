//! The reports Python reads: typed objects over the core's fingerprint, induction probe,
//! comparison row and OV logits, made by the `Model`'s methods. Each number reads as the CLI's
//! JSON writes it: None where the JSON has null (a failed circuit's NaN, an undefined ρ).

use std::sync::Arc;

use headprint::analysis::{Fingerprint, HeadFingerprint as CoreHead, ModelFingerprint};
use headprint::backend::BackendInfo;
use headprint::compare::{ComparisonRow, Correlation};
use headprint::probes::induction::{HeadScores as CoreScores, ProbeReport, Spread as CoreSpread};
use numpy::{Complex64, PyArray1, PyArrayMethods};
use pyo3::IntoPyObjectExt;
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use serde_json::Value;

use crate::error;
use crate::model::Probed;

/// A number as the reports' JSON writes it: None where JSON has null (NaN, ±∞).
fn number(v: f64) -> Option<f64> {
    v.is_finite().then_some(v)
}

/// A record of facts (the model's summary, the backend, the BOS, the link) as the plain dict
/// its JSON reads as.
fn facts<'py>(py: Python<'py>, value: &impl serde::Serialize) -> PyResult<Bound<'py, PyAny>> {
    let value = serde_json::to_value(value).map_err(|e| error(headprint::Error::Internal(e.to_string())))?;
    plain(py, &value)
}

fn plain<'py>(py: Python<'py>, value: &Value) -> PyResult<Bound<'py, PyAny>> {
    match value {
        Value::Null => Ok(py.None().into_bound(py)),
        Value::Bool(b) => b.into_bound_py_any(py),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => i.into_bound_py_any(py),
            (None, Some(u)) => u.into_bound_py_any(py),
            _ => n.as_f64().unwrap_or(f64::NAN).into_bound_py_any(py),
        },
        Value::String(s) => s.into_bound_py_any(py),
        Value::Array(items) => {
            let items = items.iter().map(|v| plain(py, v)).collect::<PyResult<Vec<_>>>()?;
            Ok(PyList::new(py, items)?.into_any())
        }
        Value::Object(map) => {
            let dict = PyDict::new(py);
            for (key, entry) in map {
                dict.set_item(key, plain(py, entry)?)?;
            }
            Ok(dict.into_any())
        }
    }
}

/// One circuit's fingerprint of one head.
#[pyclass(module = "headprint", frozen)]
pub struct Spectrum {
    spectrum: Fingerprint,
}

#[pymethods]
impl Spectrum {
    /// complex128 [d_head], |λ| descending; empty when the circuit could not be read.
    #[getter]
    fn eigenvalues<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        let values = self.spectrum.eigenvalues.iter().map(|l| Complex64::new(l.re, l.im)).collect();
        PyArray1::from_vec(py, values).into_any()
    }

    #[getter]
    fn copying_score(&self) -> Option<f64> {
        number(self.spectrum.copying_score)
    }

    #[getter]
    fn imaginary_fraction(&self) -> Option<f64> {
        number(self.spectrum.imaginary_fraction)
    }

    /// κ of the eigenvectors; None when defective or unread.
    #[getter]
    fn eigenvector_condition(&self) -> Option<f64> {
        self.spectrum.eigenvector_condition.and_then(number)
    }

    /// None when the circuit could not be read.
    #[getter]
    fn defective(&self) -> Option<bool> {
        self.spectrum.error.is_none().then_some(self.spectrum.defective())
    }

    #[getter]
    fn departure_from_normality(&self) -> Option<f64> {
        number(self.spectrum.departure_from_normality)
    }

    #[getter]
    fn scale(&self) -> Option<f64> {
        number(self.spectrum.scale)
    }

    /// Why the circuit has no fingerprint; None when it has one.
    #[getter]
    fn error(&self) -> Option<String> {
        self.spectrum.error.clone()
    }
}

/// One head's four circuits.
#[pyclass(module = "headprint", frozen)]
pub struct HeadFingerprint {
    head: CoreHead,
}

fn spectrum(f: &Fingerprint) -> Spectrum {
    Spectrum { spectrum: f.clone() }
}

#[pymethods]
impl HeadFingerprint {
    #[getter]
    fn layer(&self) -> usize {
        self.head.layer
    }

    #[getter]
    fn head(&self) -> usize {
        self.head.head
    }

    /// `L5H1`.
    #[getter]
    fn name(&self) -> String {
        self.head.id().to_string()
    }

    #[getter]
    fn qk(&self) -> Spectrum {
        spectrum(&self.head.qk)
    }

    #[getter]
    fn qk_token(&self) -> Spectrum {
        spectrum(&self.head.qk_token)
    }

    #[getter]
    fn ov(&self) -> Spectrum {
        spectrum(&self.head.ov)
    }

    #[getter]
    fn ov_residual(&self) -> Spectrum {
        spectrum(&self.head.ov_residual)
    }
}

/// Every head's fingerprint: the core's `ModelFingerprint`, and the model's link if it has one.
#[pyclass(module = "headprint", frozen)]
pub struct FingerprintReport {
    report: Arc<ModelFingerprint>,
    link: Option<Value>,
}

impl FingerprintReport {
    pub fn new(report: Arc<ModelFingerprint>, link: Option<Value>) -> FingerprintReport {
        FingerprintReport { report, link }
    }
}

#[pymethods]
impl FingerprintReport {
    /// "folded" or "raw".
    #[getter]
    fn mode(&self) -> String {
        self.report.mode.clone()
    }

    /// The model's facts (family, layers, heads, d_model, d_head, vocab, parameters, ...).
    #[getter]
    fn model<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        facts(py, &self.report.model)
    }

    /// What computed the large products.
    #[getter]
    fn backend<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        facts(py, &self.report.backend)
    }

    /// The pinned link of a model opened by link; None otherwise.
    #[getter]
    fn model_link<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        plain(py, self.link.as_ref().unwrap_or(&Value::Null))
    }

    #[getter]
    fn heads(&self) -> Vec<HeadFingerprint> {
        self.report.heads.iter().map(|h| HeadFingerprint { head: h.clone() }).collect()
    }

    /// One circuit's eigenvalues ("ov", "qk", "ov_residual" or "qk_token"), complex128
    /// [layers, heads, d_head]; NaN where a head's circuit has none.
    fn eigenvalues<'py>(&self, py: Python<'py>, circuit: &str) -> PyResult<Bound<'py, PyAny>> {
        if !CIRCUITS.contains(&circuit) {
            let choices = CIRCUITS.join(", ");
            return Err(error(headprint::Error::Invalid(format!("circuit \"{circuit}\": choose one of {choices}"))));
        }
        let facts = &self.report.model;
        let (layers, heads, width) = (facts.layers, facts.heads, facts.d_head);
        let mut out = vec![Complex64::new(f64::NAN, 0.0); layers * heads * width];
        for head in &self.report.heads {
            let start = (head.layer * heads + head.head) * width;
            let values = of(head, circuit).map_or(&[][..], |f| &f.eigenvalues[..]);
            for (slot, l) in out[start..start + width].iter_mut().zip(values) {
                *slot = Complex64::new(l.re, l.im);
            }
        }
        Ok(PyArray1::from_vec(py, out).reshape([layers, heads, width])?.into_any())
    }

    fn __repr__(&self) -> String {
        format!("<headprint.FingerprintReport {} heads, {}>", self.report.heads.len(), self.report.mode)
    }
}

/// The circuits' names, as the report's keys.
const CIRCUITS: [&str; 4] = ["ov", "qk", "ov_residual", "qk_token"];

/// One circuit of a head by its name in the report: "ov", "qk", "ov_residual" or "qk_token".
fn of<'a>(head: &'a CoreHead, circuit: &str) -> Option<&'a Fingerprint> {
    match circuit {
        "ov" => Some(&head.ov),
        "qk" => Some(&head.qk),
        "ov_residual" => Some(&head.ov_residual),
        "qk_token" => Some(&head.qk_token),
        _ => None,
    }
}

/// A score's spread over the probe's sequences.
#[pyclass(module = "headprint", frozen, get_all)]
#[derive(Clone)]
pub struct Spread {
    std: Option<f64>,
    min: Option<f64>,
    max: Option<f64>,
}

impl From<CoreSpread> for Spread {
    fn from(s: CoreSpread) -> Spread {
        Spread { std: number(s.std), min: number(s.min), max: number(s.max) }
    }
}

/// The spread of each of a head's scores.
#[pyclass(module = "headprint", frozen, get_all)]
#[derive(Clone)]
pub struct HeadSpread {
    induction_score: Spread,
    previous_token_score: Spread,
    duplicate_token_score: Spread,
    copy_fidelity: Spread,
}

/// One head's induction-probe scores: means over the sequences, with their spread.
#[pyclass(module = "headprint", frozen)]
pub struct HeadScores {
    scores: CoreScores,
}

#[pymethods]
impl HeadScores {
    #[getter]
    fn layer(&self) -> usize {
        self.scores.layer
    }

    #[getter]
    fn head(&self) -> usize {
        self.scores.head
    }

    /// `L5H1`.
    #[getter]
    fn name(&self) -> String {
        headprint::analysis::HeadId::new(self.scores.layer, self.scores.head).to_string()
    }

    #[getter]
    fn induction_score(&self) -> Option<f64> {
        number(self.scores.induction_score)
    }

    #[getter]
    fn previous_token_score(&self) -> Option<f64> {
        number(self.scores.previous_token_score)
    }

    #[getter]
    fn duplicate_token_score(&self) -> Option<f64> {
        number(self.scores.duplicate_token_score)
    }

    #[getter]
    fn copy_fidelity(&self) -> Option<f64> {
        number(self.scores.copy_fidelity)
    }

    /// None for a single sequence's scores.
    #[getter]
    fn spread(&self) -> Option<HeadSpread> {
        self.scores.spread.map(|s| HeadSpread {
            induction_score: s.induction_score.into(),
            previous_token_score: s.previous_token_score.into(),
            duplicate_token_score: s.duplicate_token_score.into(),
            copy_fidelity: s.copy_fidelity.into(),
        })
    }
}

/// The induction probe as `probe --induction --json` reports it (the core's `ProbeReport`).
#[pyclass(module = "headprint", frozen)]
pub struct InductionReport {
    probed: Arc<Probed>,
    prepend_bos: bool,
    threshold: f64,
}

impl InductionReport {
    pub fn new(probed: Arc<Probed>, prepend_bos: bool, threshold: f64) -> InductionReport {
        InductionReport { probed, prepend_bos, threshold }
    }

    fn report(&self) -> ProbeReport<'_> {
        let Probed { report, bos, backend } = &*self.probed;
        ProbeReport::new(report, backend, self.prepend_bos, bos.as_ref(), self.threshold)
    }
}

#[pymethods]
impl InductionReport {
    #[getter]
    fn heads(&self) -> Vec<HeadScores> {
        self.probed.report.heads.iter().map(|h| HeadScores { scores: h.clone() }).collect()
    }

    /// Mean over the sequences.
    #[getter]
    fn prefix_copy_accuracy(&self) -> Option<f64> {
        number(self.probed.report.prefix_copy_accuracy)
    }

    /// The heads whose mean induction score reaches the threshold, as `L5H1`.
    #[getter]
    fn induction_heads(&self) -> Vec<String> {
        self.report().induction_heads
    }

    #[getter]
    fn threshold(&self) -> f64 {
        self.threshold
    }

    #[getter]
    fn prepend_bos(&self) -> bool {
        self.prepend_bos
    }

    /// The BOS the sequences began with ({id, token, source}); None without one.
    #[getter]
    fn bos_token<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        facts(py, &self.report().bos_token)
    }

    /// What ran the probe.
    #[getter]
    fn backend<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        facts(py, self.report().backend)
    }
}

/// One model's row of the study's table (the core's `ComparisonRow`) and its Spearman table.
#[pyclass(module = "headprint", frozen)]
pub struct Comparison {
    row: ComparisonRow,
    induction_head_names: Vec<String>,
    spearman: Vec<Correlation>,
}

impl Comparison {
    pub fn new(row: ComparisonRow, induction_head_names: Vec<String>, spearman: Vec<Correlation>) -> Comparison {
        Comparison { row, induction_head_names, spearman }
    }
}

#[pymethods]
impl Comparison {
    #[getter]
    fn model(&self) -> String {
        self.row.model.clone()
    }

    #[getter]
    fn parameters(&self) -> u64 {
        self.row.parameters
    }

    #[getter]
    fn heads(&self) -> usize {
        self.row.heads
    }

    #[getter]
    fn mean_qk_imaginary_fraction(&self) -> Option<f64> {
        number(self.row.mean_qk_imaginary_fraction)
    }

    #[getter]
    fn induction_heads(&self) -> Option<usize> {
        self.row.induction_heads
    }

    #[getter]
    fn prefix_copy_accuracy(&self) -> Option<f64> {
        self.row.prefix_copy_accuracy.and_then(number)
    }

    #[getter]
    fn threshold(&self) -> Option<f64> {
        number(self.row.threshold)
    }

    /// The probe's sequences in one phrase.
    #[getter]
    fn sequence(&self) -> String {
        self.row.sequence.clone()
    }

    #[getter]
    fn induction_head_names(&self) -> Vec<String> {
        self.induction_head_names.clone()
    }

    /// Every spectral feature against every behavioural score: (feature, score, ρ or None, heads).
    #[getter]
    fn spearman(&self) -> Vec<(String, String, Option<f64>, usize)> {
        self.spearman.iter().map(|c| (c.spectral.clone(), c.behavioural.clone(), c.rho.and_then(number), c.n)).collect()
    }
}

/// A token of an OV-logits list: (token, id, value).
type Logit = (String, usize, Option<f64>);

/// Every head's attention pattern on one sequence, the ids it ran and what ran it: the CLI's
/// `attention --json`.
#[pyclass(module = "headprint", frozen)]
pub struct AttentionPatterns {
    /// float32 [layers, heads, query, key], made once so that each read shares it.
    patterns: Py<PyAny>,
    /// The ids run, the BOS first when there was one.
    #[pyo3(get)]
    tokens: Vec<usize>,
    backend: BackendInfo,
}

impl AttentionPatterns {
    pub fn new(patterns: Bound<'_, PyAny>, tokens: Vec<usize>, backend: BackendInfo) -> AttentionPatterns {
        AttentionPatterns { patterns: patterns.unbind(), tokens, backend }
    }
}

#[pymethods]
impl AttentionPatterns {
    /// float32 [layers, heads, query, key].
    #[getter]
    fn patterns<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        self.patterns.bind(py).clone()
    }

    /// What ran the forward pass.
    #[getter]
    fn backend<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        facts(py, &self.backend)
    }
}

/// One head's token-space OV circuit read as self-copy logits: the top tokens by the raw
/// diagonal and by the diagonal normalised by each row's spread.
#[pyclass(module = "headprint", frozen, get_all)]
pub struct OvLogits {
    /// `L5H1`.
    pub head: String,
    /// "folded" or "raw".
    pub mode: String,
    pub top_raw: Vec<Logit>,
    pub top_normalised: Vec<Logit>,
}

/// The top `top` of `values`, each with its token's text.
pub fn listed(values: &[f64], top: usize, text: impl Fn(usize) -> String) -> Vec<Logit> {
    headprint::analysis::ov_logits::top_k(values, top).into_iter().map(|i| (text(i), i, number(values[i]))).collect()
}
