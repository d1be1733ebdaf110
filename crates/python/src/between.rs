//! The circuits between heads as Python sees them: typed objects over the core's reports
//! (`Composition`, `HeadSvd`), their matrices as numpy arrays, made by the `Model`'s methods.

use headprint::analysis::composition::{Baseline, Composition as CoreComposition, CompositionEdge};
use headprint::analysis::singular::{CircuitSvd as CoreCircuit, Direction as CoreDirection, HeadSvd as CoreHeadSvd};
use headprint::analysis::{CompositionKind, singular};
use std::sync::Arc;

use nalgebra::DMatrix;
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;

use crate::error;

/// A matrix as a row-major numpy array of its shape.
fn array<'py>(py: Python<'py>, m: &DMatrix<f64>) -> PyResult<Bound<'py, PyAny>> {
    let values = m.transpose().as_slice().to_vec();
    Ok(PyArray1::from_vec(py, values).reshape([m.nrows(), m.ncols()])?.into_any())
}

fn kind(name: &str) -> PyResult<CompositionKind> {
    CompositionKind::parse(name).map_err(error)
}

/// Every pair's Q-, K- and V-composition scores, and the random baseline of each kind.
#[pyclass(module = "headprint", frozen, name = "Composition")]
pub struct Composition {
    report: Arc<CoreComposition>,
}

impl Composition {
    pub fn new(report: Arc<CoreComposition>) -> Composition {
        Composition { report }
    }
}

/// A pair as Python lists it: (kind, from, to, score, ratio).
type Edge = (String, String, String, f64, f64);

fn edge_tuple(edge: CompositionEdge) -> Edge {
    (edge.kind.name().to_string(), edge.from, edge.to, edge.score, edge.ratio)
}

#[pymethods]
impl Composition {
    #[getter]
    fn layers(&self) -> usize {
        self.report.scores.layers
    }

    #[getter]
    fn heads(&self) -> usize {
        self.report.scores.heads
    }

    /// "folded" or "raw": how the weights were read.
    #[getter]
    fn mode(&self) -> &'static str {
        self.report.mode.name()
    }

    /// What computed the products, in words.
    #[getter]
    fn backend(&self) -> String {
        self.report.backend.label()
    }

    /// One kind's scores (`kind` "q", "k" or "v"), float64 [layers, heads, layers, heads]:
    /// [l1, h1, l2, h2] is how much h1's output is read by h2, 0 unless l1 < l2.
    fn scores<'py>(&self, py: Python<'py>, kind_name: &str) -> PyResult<Bound<'py, PyAny>> {
        let (layers, heads) = (self.report.scores.layers, self.report.scores.heads);
        let flat = self.report.scores.flat(kind(kind_name)?).to_vec();
        Ok(PyArray1::from_vec(py, flat).reshape([layers, heads, layers, heads])?.into_any())
    }

    /// The score of random heads of the model's shapes: (mean, standard deviation, 1/√d_model).
    fn baseline(&self, kind_name: &str) -> PyResult<(f64, f64, f64)> {
        let Baseline { mean, spread, rms } = self.report.baseline(kind(kind_name)?);
        Ok((mean, spread, rms))
    }

    /// Every pair l1 < l2 of one kind, strongest first: (kind, from, to, score, ratio to the
    /// baseline's mean).
    fn ranked(&self, kind_name: &str) -> PyResult<Vec<Edge>> {
        Ok(self.report.ranked(kind(kind_name)?).into_iter().map(edge_tuple).collect())
    }

    fn __repr__(&self) -> String {
        format!(
            "<headprint.Composition {} layers x {} heads, {}>",
            self.report.scores.layers,
            self.report.scores.heads,
            self.report.mode.name()
        )
    }
}

/// A readout's tokens: (id, text, value).
type Tokens = Vec<(usize, String, f64)>;

/// A direction, or a block of directions read as one subspace, with its tokens.
#[pyclass(module = "headprint", frozen, get_all)]
pub struct Direction {
    /// The directions' indices (singular values descending).
    indices: Vec<usize>,
    singular_values: Vec<f64>,
    /// More than one direction: only their span is defined.
    degenerate: bool,
    /// Numerically null: not read out.
    null: bool,
    /// Signed readouts (a lone direction) list both ends; a block's lists the largest norms of
    /// projection onto its span.
    signed: bool,
    input_top: Tokens,
    input_bottom: Tokens,
    output_top: Tokens,
    output_bottom: Tokens,
}

impl From<&CoreDirection> for Direction {
    fn from(d: &CoreDirection) -> Direction {
        let listed = |readout: &Option<singular::Readout>, bottom: bool| -> Tokens {
            readout.as_ref().map_or_else(Vec::new, |r| {
                let list = if bottom { &r.bottom } else { &r.top };
                list.iter().map(|t| (t.id, t.token.clone(), t.value)).collect()
            })
        };
        Direction {
            indices: d.indices.clone(),
            singular_values: d.singular_values.clone(),
            degenerate: d.degenerate,
            null: d.null,
            signed: d.input.as_ref().is_some_and(|r| r.signed),
            input_top: listed(&d.input, false),
            input_bottom: listed(&d.input, true),
            output_top: listed(&d.output, false),
            output_bottom: listed(&d.output, true),
        }
    }
}

/// One circuit's singular value decomposition, its blocks and their readouts.
#[pyclass(module = "headprint", frozen)]
pub struct CircuitSvd {
    circuit: CoreCircuit,
    #[pyo3(get)]
    head: String,
    /// "ov" or "qk".
    #[pyo3(get)]
    circuit_name: String,
}

#[pymethods]
impl CircuitSvd {
    /// float64 [d_head], descending.
    #[getter]
    fn singular_values<'py>(&self, py: Python<'py>) -> Bound<'py, PyAny> {
        PyArray1::from_vec(py, self.circuit.singular_values.clone()).into_any()
    }

    /// float64 [d_model, d_head]: column i is direction i's input side (OV: what the head reads;
    /// QK: the query side).
    #[getter]
    #[allow(non_snake_case)]
    fn U<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        array(py, &self.circuit.u)
    }

    /// float64 [d_model, d_head]: column i is direction i's output side (OV: what it writes;
    /// QK: the key side).
    #[getter]
    #[allow(non_snake_case)]
    fn V<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        array(py, &self.circuit.v)
    }

    /// Contiguous runs of indices covering every direction once.
    #[getter]
    fn blocks(&self) -> Vec<Vec<usize>> {
        self.circuit.blocks.clone()
    }

    /// Indices of the numerically null directions.
    #[getter]
    fn null(&self) -> Vec<usize> {
        self.circuit.null.clone()
    }

    /// One entry per block, in order.
    #[getter]
    fn directions(&self) -> Vec<Direction> {
        self.circuit.directions.iter().map(Direction::from).collect()
    }

    fn __repr__(&self) -> String {
        format!(
            "<headprint.CircuitSvd {} {}: {} values in {} blocks>",
            self.head,
            self.circuit_name,
            self.circuit.singular_values.len(),
            self.circuit.blocks.len()
        )
    }
}

/// Both circuits' decompositions of one head.
pub fn circuits(report: CoreHeadSvd) -> (CircuitSvd, CircuitSvd, f64, f64) {
    let CoreHeadSvd { head, gap, null_tolerance, ov, qk, .. } = report;
    let named = |circuit, name: &str| CircuitSvd { circuit, head: head.clone(), circuit_name: name.into() };
    (named(ov, "ov"), named(qk, "qk"), gap, null_tolerance)
}
