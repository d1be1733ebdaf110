//! A model as Python holds it: its files (opened from a path or link, or made of the tensors a
//! Python object holds), its tokenizer, and the results already computed, so that asking for
//! the eigenvalues after the fingerprint computes nothing again.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use headprint::analysis::circuits::HeadWeights;
use headprint::analysis::composition::{Composition, composition};
use headprint::analysis::singular::head_svd;
use headprint::analysis::{
    Factored, Fingerprint, FingerprintStage, HeadFingerprint, HeadId, Mode, ModelFingerprint, ModelSummary,
    OvTokenLogits, fingerprint_stream_watched,
};
use headprint::backend::{Backend, BackendChoice, BackendInfo, block_on};
use headprint::compare::{ComparisonRow, spearman_table};
use headprint::model::{CopySource, LoadParts, ModelStream, OpenedModel, Weights};
use headprint::parallel::map_each;
use headprint::probes::attention_patterns;
use headprint::probes::induction::induction_probe_with_progress;
use headprint::tokens::{Bos, with_bos};
use headprint::weights::{ByteSource, ModelFiles};
use headprint::{Error, Result};
use numpy::{PyArray1, PyArrayMethods};
use pyo3::prelude::*;
use serde_json::Value;

use crate::reports::{AttentionPatterns, Comparison, FingerprintReport, InductionReport, OvLogits, listed};
use crate::running::{StopFlag, Stoppable, off_the_lock};

/// What a probe's sequences are: the same arguments give the same report.
#[derive(Clone, PartialEq, Eq, Hash)]
struct ProbeKey {
    length: usize,
    sequences: usize,
    seed: u64,
    bos: bool,
}

/// An induction probe's report, the BOS its sequences began with, and the backend that ran it.
pub struct Probed {
    pub report: headprint::probes::induction::InductionReport,
    pub bos: Option<Bos>,
    pub backend: BackendInfo,
}

struct Held {
    opened: OpenedModel,
    link: Option<Value>,
    label: String,
    stop: StopFlag,
    fingerprints: Mutex<HashMap<(bool, String), Arc<ModelFingerprint>>>,
    /// The residual-space circuits alone, by mode (`raw`), in the fingerprint's shape (the
    /// token-space circuits marked not computed).
    residual: Mutex<HashMap<bool, Arc<ModelFingerprint>>>,
    probes: Mutex<HashMap<(ProbeKey, String), Arc<Probed>>>,
    /// Composition scores by mode (`raw`) and backend: the three kinds come from one report.
    compositions: Mutex<HashMap<(bool, String), Arc<Composition>>>,
}

impl Held {
    fn stream(&self) -> Result<ModelStream<'_>> {
        self.opened.stream()
    }

    /// The fingerprint in `raw` or folded mode on `backend`, computed unless already held.
    fn fingerprint(
        &self,
        raw: bool,
        backend: &str,
        progress: &crate::running::Progress,
    ) -> Result<Arc<ModelFingerprint>> {
        let key = (raw, backend.to_string());
        if let Some(done) = self.fingerprints.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
            return Ok(done.clone());
        }
        let model = self.stream()?;
        let mut computing = select(backend)?;
        let mode = if raw { Mode::Raw } else { Mode::Folded };
        let report = fingerprint_stream_watched(&model, mode, &mut computing, &mut |stage, done, total| {
            progress.set(if stage == FingerprintStage::Grams { "Grams" } else { "heads" }, done, total)
        })?;
        let report = Arc::new(report);
        self.fingerprints.lock().unwrap_or_else(|e| e.into_inner()).insert(key, report.clone());
        Ok(report)
    }

    /// Every head's residual-space circuits (`qk`, `ov_residual`) without the vocabulary's
    /// Grams, in the fingerprint's shape: a full fingerprint computes them the same way (from
    /// `HeadWeights`, on the CPU), so these are its numbers, bit for bit, at a fraction of its work.
    fn residual_circuits(&self, raw: bool, progress: &crate::running::Progress) -> Result<Arc<ModelFingerprint>> {
        if let Some(done) = self.residual.lock().unwrap_or_else(|e| e.into_inner()).get(&raw) {
            return Ok(done.clone());
        }
        let model = self.stream()?;
        let config = &model.config;
        let mode = if raw { Mode::Raw } else { Mode::Folded };
        let mut heads = Vec::with_capacity(config.layers * config.heads);
        for l in 0..config.layers {
            let layer = model.layer(l, LoadParts::Circuits)?;
            let ids: Vec<usize> = (0..config.heads).collect();
            let circuits = map_each(&ids, |&head| {
                let weights = HeadWeights::new(config, &layer, model.ln_final(), head, mode);
                let spectrum = |f: Factored| f.fingerprint().unwrap_or_else(Fingerprint::failed);
                (spectrum(weights.qk()), spectrum(weights.ov_residual()))
            });
            for (head, (qk, ov_residual)) in circuits.into_iter().enumerate() {
                let skipped = || Fingerprint::failed("not computed: the residual-space circuits alone".into());
                heads.push(HeadFingerprint { layer: l, head, qk, qk_token: skipped(), ov: skipped(), ov_residual });
            }
            progress.set("heads", (l + 1) * config.heads, config.layers * config.heads);
        }
        let done = Arc::new(ModelFingerprint {
            model: ModelSummary::from_config(config, model.parameter_count),
            mode: mode.name().into(),
            backend: BackendInfo::default(),
            heads,
        });
        self.residual.lock().unwrap_or_else(|e| e.into_inner()).insert(raw, done.clone());
        Ok(done)
    }

    /// The induction probe on the sequences `key` names, computed unless already held.
    fn induction(&self, key: ProbeKey, backend: &str, progress: &crate::running::Progress) -> Result<Arc<Probed>> {
        let cache_key = (key.clone(), backend.to_string());
        if let Some(done) = self.probes.lock().unwrap_or_else(|e| e.into_inner()).get(&cache_key) {
            return Ok(done.clone());
        }
        let model = self.stream()?;
        let bos = self.opened.bos(&model, key.bos);
        let copies = self.opened.first_copies(&model, &CopySource::Random, key.length, key.seed, key.sequences)?;
        let mut computing = select(backend)?;
        let bos_id = bos.as_ref().map(|b| b.id);
        let report = block_on(computing.with_fallback(async |computing| {
            induction_probe_with_progress(&model, &copies, bos_id, computing, &mut |done, total| {
                progress.set("probe", done, total)
            })
            .await
        }))?;
        let done = Arc::new(Probed { report, bos, backend: computing.forward_info() });
        self.probes.lock().unwrap_or_else(|e| e.into_inner()).insert(cache_key, done.clone());
        Ok(done)
    }
}

/// The backend asked for, the GPU driver's harmless chatter kept off stderr while it opens.
pub(crate) fn select(name: &str) -> Result<Backend> {
    let choice = BackendChoice::parse(name)?;
    headprint_native::driver::quietly(|| Backend::select(choice))
}

/// A model that headprint has opened. Made by `headprint.load`; every function takes it.
#[pyclass(module = "headprint", frozen)]
pub struct Model {
    held: Arc<Held>,
}

impl Model {
    /// The model whose files are `files`, every read of them stoppable by Ctrl-C.
    pub fn new(mut files: ModelFiles, link: Option<Value>, label: String) -> Result<Model> {
        let stop = StopFlag::default();
        files.weights = std::mem::take(&mut files.weights)
            .into_iter()
            .map(|inner| Box::new(Stoppable { inner, stop: stop.clone() }) as Box<dyn ByteSource>)
            .collect();
        let held = Held {
            opened: OpenedModel::open(files)?,
            link,
            label,
            stop,
            fingerprints: Mutex::default(),
            residual: Mutex::default(),
            probes: Mutex::default(),
            compositions: Mutex::default(),
        };
        Ok(Model { held: Arc::new(held) })
    }
}

#[pymethods]
impl Model {
    /// How tables name the model: the path, the pinned link, or what Python object it came from.
    #[getter]
    fn label(&self) -> String {
        self.held.label.clone()
    }

    /// Every head's fingerprint: the CLI's `fingerprint --json`.
    #[pyo3(signature = (raw, backend, progress=None))]
    fn fingerprint(
        &self,
        py: Python<'_>,
        raw: bool,
        backend: String,
        progress: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<FingerprintReport> {
        let held = self.held.clone();
        let report = off_the_lock(py, &self.held.stop, progress, move |shown| held.fingerprint(raw, &backend, &shown))?;
        Ok(FingerprintReport::new(report, self.held.link.clone()))
    }

    /// Every head's fingerprint of one circuit, in the fingerprint's shape: from the
    /// fingerprint held for (`raw`, `backend`) if there is one; for the residual-space circuits
    /// (`qk`, `ov_residual`) otherwise without the vocabulary's Grams; else from the whole
    /// fingerprint, computed here.
    #[pyo3(signature = (circuit, raw, backend, progress=None))]
    fn circuit(
        &self,
        py: Python<'_>,
        circuit: String,
        raw: bool,
        backend: String,
        progress: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<FingerprintReport> {
        let held = self.held.clone();
        let report = off_the_lock(py, &self.held.stop, progress, move |shown| {
            let key = (raw, backend.clone());
            let whole = held.fingerprints.lock().unwrap_or_else(|e| e.into_inner()).get(&key).cloned();
            match (whole, circuit.as_str()) {
                (Some(whole), _) => Ok(whole),
                (None, "qk" | "ov_residual") => held.residual_circuits(raw, &shown),
                (None, _) => held.fingerprint(raw, &backend, &shown),
            }
        })?;
        Ok(FingerprintReport::new(report, self.held.link.clone()))
    }

    /// The induction probe: the CLI's `probe --induction --json`.
    #[pyo3(signature = (length, sequences, seed, bos, threshold, backend, progress=None))]
    #[allow(clippy::too_many_arguments)]
    fn induction(
        &self,
        py: Python<'_>,
        length: usize,
        sequences: usize,
        seed: u64,
        bos: bool,
        threshold: f64,
        backend: String,
        progress: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<InductionReport> {
        let held = self.held.clone();
        let key = ProbeKey { length, sequences, seed, bos };
        let done = off_the_lock(py, &self.held.stop, progress, move |shown| held.induction(key, &backend, &shown))?;
        Ok(InductionReport::new(done, bos, threshold))
    }

    /// Attention patterns on `tokens` (ids) or `text`: the CLI's `attention --json`.
    #[pyo3(signature = (tokens, text_in, bos, backend, progress=None))]
    fn attention(
        &self,
        py: Python<'_>,
        tokens: Option<Vec<usize>>,
        text_in: Option<String>,
        bos: bool,
        backend: String,
        progress: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<AttentionPatterns> {
        let held = self.held.clone();
        let (patterns, shape, ids, info) = off_the_lock(py, &self.held.stop, progress, move |_| {
            let ids = match (tokens, text_in) {
                (Some(ids), _) => ids,
                (None, Some(text)) => held.opened.tokenizer.encode(&text)?,
                (None, None) => return Err(Error::BadTokens("give token ids or a string".into())),
            };
            let model = held.stream()?;
            let bos_id = held.opened.bos(&model, bos).map(|b| b.id);
            let ids = with_bos(bos_id, &ids);
            let mut computing = select(&backend)?;
            let computed =
                block_on(computing.with_fallback(async |computing| attention_patterns(&model, &ids, computing).await))?;
            let n = ids.len();
            let (layers, heads) = (computed.len(), computed.first().map_or(0, Vec::len));
            let mut flat = Vec::with_capacity(layers * heads * n * n);
            for pattern in computed.iter().flatten() {
                // nalgebra is column-major; the array is [query, key] row-major.
                flat.extend(pattern.transpose().iter().copied());
            }
            Ok((flat, [layers, heads, n, n], ids, computing.forward_info()))
        })?;
        let array = PyArray1::from_vec(py, patterns).reshape(shape)?;
        Ok(AttentionPatterns::new(array.into_any(), ids, info))
    }

    /// One head's token-space OV circuit read as self-copy logits: the CLI's `ov-logits --json`
    /// top lists.
    fn ov_logits(&self, py: Python<'_>, head: String, top: usize, raw: bool) -> PyResult<OvLogits> {
        let held = self.held.clone();
        off_the_lock(py, &self.held.stop, None, move |_| {
            let model = held.stream()?;
            let id = HeadId::parse(&head, &model.config)?;
            let mode = if raw { Mode::Raw } else { Mode::Folded };
            let logits = OvTokenLogits::of_head(&model, id, mode)?;
            let text = |i| held.opened.tokenizer.token_text(i);
            Ok(OvLogits {
                head: id.to_string(),
                mode: mode.name().into(),
                top_raw: listed(&logits.diagonal(), top, text),
                top_normalised: listed(&logits.normalised_diagonal(), top, text),
            })
        })
    }

    /// The study's table row of this model, from its fingerprint and induction probe (computed
    /// here unless already held): the CLI's `compare --json` entry.
    #[pyo3(signature = (raw, length, sequences, seed, bos, threshold, backend, progress=None))]
    #[allow(clippy::too_many_arguments)]
    fn compare(
        &self,
        py: Python<'_>,
        raw: bool,
        length: usize,
        sequences: usize,
        seed: u64,
        bos: bool,
        threshold: f64,
        backend: String,
        progress: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<Comparison> {
        let held = self.held.clone();
        let key = ProbeKey { length, sequences, seed, bos };
        off_the_lock(py, &self.held.stop, progress, move |shown| {
            let fingerprint = held.fingerprint(raw, &backend, &shown)?;
            let done = held.induction(key, &backend, &shown)?;
            let Probed { report, bos: bos_token, .. } = &*done;
            let sequence = headprint_native::describe::sequences(report, length, bos_token.as_ref());
            let row = ComparisonRow::new(&held.label, &fingerprint, Some(report), &sequence, threshold);
            Ok(Comparison::new(row, report.induction_heads(threshold), spearman_table(&fingerprint, report)))
        })
    }

    /// The layer x head grid of OV copying scores as SVG (the CLI's `figure copying`), from the
    /// fingerprint held for (`raw`, `backend`), computed here if there is none.
    #[pyo3(signature = (raw, backend, title))]
    fn grid_svg(&self, py: Python<'_>, raw: bool, backend: String, title: String) -> PyResult<String> {
        let held = self.held.clone();
        off_the_lock(py, &self.held.stop, None, move |shown| {
            let fingerprint = held.fingerprint(raw, &backend, &shown)?;
            let figure = headprint::figures::output::Figure::Copying(headprint::figures::copying::CopyingScores {
                layers: fingerprint.model.layers,
                heads: fingerprint.model.heads,
                values: fingerprint.heads.iter().map(|h| h.ov.error.is_none().then_some(h.ov.copying_score)).collect(),
                title,
            });
            let bytes = figure.render(headprint::figures::output::Format::Svg)?;
            String::from_utf8(bytes).map_err(|e| Error::Internal(e.to_string()))
        })
    }

    /// Every pair's composition scores in `raw` or folded mode on `backend`, computed unless
    /// already held.
    #[pyo3(signature = (raw, backend, progress=None))]
    fn composition(
        &self,
        py: Python<'_>,
        raw: bool,
        backend: String,
        progress: Option<&Bound<'_, PyAny>>,
    ) -> PyResult<crate::between::Composition> {
        let held = self.held.clone();
        let report = off_the_lock(py, &self.held.stop, progress, move |shown| {
            let key = (raw, backend.clone());
            if let Some(done) = held.compositions.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
                return Ok(done.clone());
            }
            let model = held.stream()?;
            let mut computing = select(&backend)?;
            let mode = if raw { Mode::Raw } else { Mode::Folded };
            let report = Arc::new(composition(&model, mode, &mut computing, &mut |done, total| {
                shown.set("layers", done, total)
            })?);
            held.compositions.lock().unwrap_or_else(|e| e.into_inner()).insert(key, report.clone());
            Ok(report)
        })?;
        Ok(crate::between::Composition::new(report))
    }

    /// One head's OV and QK singular directions, each block read out through the vocabulary
    /// (`tokens` at each end): (ov, qk, the blocks' relative gap, the null tolerance).
    fn svd(
        &self,
        py: Python<'_>,
        head: String,
        raw: bool,
        tokens: usize,
    ) -> PyResult<(crate::between::CircuitSvd, crate::between::CircuitSvd, f64, f64)> {
        let held = self.held.clone();
        let report = off_the_lock(py, &self.held.stop, None, move |_| {
            let model = held.stream()?;
            let id = HeadId::parse(&head, &model.config)?;
            let mode = if raw { Mode::Raw } else { Mode::Folded };
            head_svd(&model, &held.opened.tokenizer, id, mode, tokens)
        })?;
        Ok(crate::between::circuits(report))
    }

    fn __repr__(&self) -> String {
        format!("<headprint.Model {}>", self.held.label)
    }
}
