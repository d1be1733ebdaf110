//! What the page holds: the types of one loaded model (the worker's results; the weights stay in
//! the worker) and of its settings, and the context of signals every view shares. Loading a model
//! is `loading.rs`; what is computed only when asked for, `effects.rs`.

use std::sync::Arc;

use leptos::prelude::*;

use super::workers;
use headprint::analysis::composition::Composition;
use headprint::analysis::{CompositionKind, HeadFingerprint, HeadId, Mode, ModelFingerprint};
use headprint::backend::BackendChoice;
use headprint::compare::{ComparisonRow, INDUCTION_HEAD_THRESHOLD};
use headprint::figures::metric::Metric;
use headprint::probes::Suite;
use headprint::probes::induction::HeadScores;
use headprint::timeline::{Checkpoint, Timeline};
use headprint::weights::remote::HUB_ENDPOINT;
use headprint::worker::pool::backend_found;
use headprint::worker::protocol::{InductionRun, ModelInfo, Progress, Timing};

/// The model the page opens with (one of its own static files).
pub const DEFAULT_MODEL_URL: &str = "models/nietzsche-char.safetensors";
/// Held-out Nietzsche (the last 10% of the corpus, never trained on), for in-distribution repeats.
pub const HELD_OUT_TEXT_URL: &str = "texts/nietzsche-heldout.txt";

/// Which repeated sequence the behavioural scores come from
/// (docs/methods.md#5-probes-running-the-model).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sequence {
    UniformRandom,
    HeldOutText,
}

impl Sequence {
    pub fn key(self) -> &'static str {
        match self {
            Sequence::UniformRandom => "random",
            Sequence::HeldOutText => "text",
        }
    }

    pub fn from_key(key: &str) -> Option<Sequence> {
        [Sequence::UniformRandom, Sequence::HeldOutText].into_iter().find(|s| s.key() == key)
    }
}

/// Where a model came from, as a share link names it.
#[derive(Clone, Debug, PartialEq)]
pub enum Origin {
    Demo,
    /// Local files: their names and SHA-256, computed once the analysis is shown (see `identify_files`).
    Local {
        name: String,
        sha256: RwSignal<Identity>,
    },
    /// A model by link, pinned to the commit it was opened at; `hub` is a Hub other than the
    /// public one; `fetched` the bytes the pool fetched to load and analyse it.
    Link {
        pinned: String,
        hub: Option<String>,
        fetched: f64,
    },
}

/// The SHA-256 of local files, as far as it is known.
#[derive(Clone, Debug, PartialEq)]
pub enum Identity {
    /// Still being computed by the hashing worker.
    Pending,
    Known(String),
    Failed(String),
}

/// One model as the page shows it: facts and results computed once by the worker.
pub struct Loaded {
    /// The worker's name for the model (caches key on it too).
    pub id: u64,
    pub name: String,
    pub origin: Origin,
    pub info: ModelInfo,
    pub folded: ModelFingerprint,
    /// Raw mode, once first shown (the worker computes it on demand).
    pub raw: Option<ModelFingerprint>,
    /// The induction probe on uniform random tokens (run at load) and, once asked for, on held-out text.
    pub random_run: InductionRun,
    pub text_run: Option<InductionRun>,
    /// Whether the runs above started with the model's BOS (the setting they were made with).
    pub probe_bos: bool,
    pub timings: Vec<Timing>,
    /// The backend the load asked for (the results say which one computed them).
    pub backend_asked: BackendChoice,
}

impl Loaded {
    /// None for raw mode until it has been computed.
    pub fn fingerprint(&self, mode: Mode) -> Option<&ModelFingerprint> {
        match mode {
            Mode::Folded => Some(&self.folded),
            Mode::Raw => self.raw.as_ref(),
        }
    }

    pub fn head(&self, mode: Mode, id: HeadId) -> Option<&HeadFingerprint> {
        self.fingerprint(mode)?.head(id)
    }

    /// Where the probes' forward passes run: the backend choice as the load found it (the GPU
    /// that computed the Grams, else the CPU), so the workers keep the device they opened.
    pub fn probe_backend(&self) -> BackendChoice {
        backend_found(&self.folded.backend)
    }

    pub fn run(&self, sequence: Sequence) -> Option<&InductionRun> {
        match sequence {
            Sequence::UniformRandom => Some(&self.random_run),
            Sequence::HeldOutText => self.text_run.as_ref(),
        }
    }

    pub fn scores(&self, sequence: Sequence, id: HeadId) -> Option<&HeadScores> {
        self.run(sequence)?.report.as_ref().ok()?.heads.iter().find(|h| h.layer == id.layer && h.head == id.head)
    }

    pub fn heads(&self) -> Vec<HeadId> {
        HeadId::all(&self.info.config).collect()
    }

    /// The head with the largest OV copying score (folded): where the page starts.
    pub fn best_copier(&self) -> HeadId {
        self.folded
            .heads
            .iter()
            .filter(|h| h.ov.error.is_none())
            .max_by(|a, b| a.ov.copying_score.total_cmp(&b.ov.copying_score))
            .map(HeadFingerprint::id)
            .unwrap_or(HeadId::new(0, 0))
    }

    /// The spectral-fingerprint study's row for this model (folded QK, the chosen sequence's
    /// behaviour), with the induction scores to count induction heads at any threshold.
    pub fn comparison(&self, sequence: Sequence) -> Compared {
        let run = self.run(sequence).unwrap_or(&self.random_run);
        let report = run.report.as_ref().ok();
        Compared {
            id: self.id,
            sequence,
            row: ComparisonRow::new(&self.name, &self.folded, report, &run.sequence, INDUCTION_HEAD_THRESHOLD),
            induction_scores: report.map(|r| r.heads.iter().map(|h| h.induction_score).collect()),
        }
    }

    /// A copy with more results (the page's signal holds an immutable `Arc<Loaded>`).
    pub(super) fn with(
        &self,
        raw: Option<ModelFingerprint>,
        text_run: Option<InductionRun>,
        timing: Option<Timing>,
    ) -> Loaded {
        Loaded {
            raw: raw.or_else(|| self.raw.clone()),
            text_run: text_run.or_else(|| self.text_run.clone()),
            timings: self.timings.iter().cloned().chain(timing).collect(),
            ..self.rerun(self.random_run.clone(), self.probe_bos)
        }
    }

    /// The files' SHA-256 once known (local files only).
    pub fn sha256(&self) -> Option<String> {
        match &self.origin {
            Origin::Local { sha256, .. } => match sha256.get_untracked() {
                Identity::Known(hex) => Some(hex),
                _ => None,
            },
            Origin::Demo | Origin::Link { .. } => None,
        }
    }

    /// A copy whose probes were rerun with the BOS switched (the held-out text run is dropped
    /// until asked for again).
    pub(super) fn rerun(&self, random_run: InductionRun, probe_bos: bool) -> Loaded {
        Loaded {
            id: self.id,
            name: self.name.clone(),
            origin: self.origin.clone(),
            info: self.info.clone(),
            folded: self.folded.clone(),
            raw: self.raw.clone(),
            random_run,
            text_run: None,
            probe_bos,
            timings: self.timings.clone(),
            backend_asked: self.backend_asked,
        }
    }
}

/// One row of the spectral-fingerprint study's table as loaded, re-countable at any induction-head
/// threshold.
#[derive(Clone, Debug, PartialEq)]
pub struct Compared {
    /// The worker's name for the model (a BOS rerun replaces its row).
    pub id: u64,
    pub sequence: Sequence,
    pub row: ComparisonRow,
    /// Every head's mean induction score; None when the probe failed.
    pub induction_scores: Option<Vec<f64>>,
}

impl Compared {
    pub fn at(&self, threshold: f64) -> ComparisonRow {
        ComparisonRow {
            threshold,
            induction_heads: self.induction_scores.as_ref().map(|s| s.iter().filter(|&&v| v >= threshold).count()),
            ..self.row.clone()
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tab {
    Overview,
    Head,
    Circuits,
    Probes,
    Compare,
}

impl Tab {
    pub const ALL: [Tab; 5] = [Tab::Overview, Tab::Head, Tab::Circuits, Tab::Probes, Tab::Compare];

    pub fn key(self) -> &'static str {
        match self {
            Tab::Overview => "overview",
            Tab::Head => "head",
            Tab::Circuits => "circuits",
            Tab::Probes => "probes",
            Tab::Compare => "compare",
        }
    }

    pub fn from_key(key: &str) -> Option<Tab> {
        Tab::ALL.into_iter().find(|t| t.key() == key)
    }
}

/// What colours the Circuits tab's map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CircuitColour {
    /// The composition score itself.
    Score,
    /// The score over the kind's random baseline.
    Ratio,
}

impl CircuitColour {
    pub fn key(self) -> &'static str {
        match self {
            CircuitColour::Score => "score",
            CircuitColour::Ratio => "ratio",
        }
    }

    pub fn from_key(key: &str) -> Option<CircuitColour> {
        [CircuitColour::Score, CircuitColour::Ratio].into_iter().find(|c| c.key() == key)
    }
}

/// The edges' default: a score twice the random baseline's mean.
pub const DEFAULT_EDGE_RATIO: f64 = 2.0;

/// A model's composition scores in one mode, as the worker answered (or why not).
#[derive(Clone, Debug)]
pub struct HeldComposition {
    pub model: u64,
    pub mode: Mode,
    pub result: Result<Arc<Composition>, String>,
}

/// The grid of a model still loading: its shape and the heads done so far (folded).
#[derive(Clone, Debug)]
pub struct Preview {
    pub layers: usize,
    pub heads: usize,
    pub done: Vec<HeadFingerprint>,
}

impl Preview {
    /// Takes a progress report's finished heads; a new shape starts a new preview.
    pub fn update(preview: &mut Option<Preview>, progress: &mut Progress) {
        let Some((layers, heads)) = progress.grid else { return };
        if preview.as_ref().is_none_or(|p| (p.layers, p.heads) != (layers, heads)) {
            *preview = Some(Preview { layers, heads, done: Vec::new() });
        }
        if let Some(preview) = preview {
            preview.done.append(&mut progress.heads);
        }
    }
}

/// A share link's model that is not loaded yet (the page asks for the file).
#[derive(Clone, Debug, PartialEq)]
pub struct Awaited {
    pub name: String,
    /// The first hex digits of the SHA-256 the link was made with.
    pub sha256_prefix: String,
}

/// The page's shared state (all `Copy` handles).
#[derive(Clone, Copy)]
pub struct Ctx {
    pub loaded: RwSignal<Option<Arc<Loaded>>>,
    pub mode: RwSignal<Mode>,
    pub head: RwSignal<HeadId>,
    pub tab: RwSignal<Tab>,
    pub metric: RwSignal<Metric>,
    pub sequence: RwSignal<Sequence>,
    /// What is being done right now (loading, analysing).
    pub busy: RwSignal<Option<String>>,
    /// The running request's progress, while there is one.
    pub progress: RwSignal<Option<Progress>>,
    /// The share link's SHA-256, while the hashing worker reads the files.
    pub hashing: RwSignal<Option<Progress>>,
    /// Requests the workers abandoned since the current load began, because the server stopped
    /// answering (they are asked again), and the last one's note.
    pub stalled: RwSignal<Option<(u32, String)>>,
    /// Suites being run (verdict tables), by request: named in the busy line, with Cancel.
    pub running: RwSignal<Vec<(u64, String)>>,
    /// Heads fingerprinted so far while a model loads (the grid fills as they come).
    pub preview: RwSignal<Option<Preview>>,
    /// The model being loaded, by name, while a load runs: a model loaded after another shows
    /// its grid filling in above the shown one's (a large model's probe can take many minutes).
    pub loading: RwSignal<Option<String>>,
    /// The worker's wasm memory (bytes; the peak so far).
    pub worker_memory: RwSignal<workers::Memory>,
    /// The last load's error, shown until the next successful load.
    pub error: RwSignal<Option<ErrorLine>>,
    /// The suite in the probes view (built-in or loaded).
    pub suite: RwSignal<Suite>,
    pub prompt: RwSignal<String>,
    /// The spectral-fingerprint study's table: one row per model loaded in this session.
    pub compared: RwSignal<Vec<Compared>>,
    /// Whether probes, patterns and verdicts start with the model's BOS (docs/methods.md#1-conventions).
    pub prepend_bos: RwSignal<bool>,
    /// Induction score at or above which a head counts as an induction head.
    pub threshold: RwSignal<f64>,
    /// A share link's local model, until the user opens it.
    pub awaited: RwSignal<Option<Awaited>>,
    /// The head a share link asked for, applied when its model has loaded.
    pub linked_head: RwSignal<Option<String>>,
    /// Where the next load computes its Gram matrices (`backend=` in a link; auto when absent).
    pub backend: RwSignal<BackendChoice>,
    /// The Hub `hf:` links are read from (a share link's `hub=`; else the public Hub).
    pub hub: RwSignal<String>,
    /// The repository and revisions the compare tab follows over training (`timeline=` and
    /// `revisions=` in a link), and the timeline once gathered.
    pub timeline_asked: RwSignal<Option<(String, Vec<String>)>>,
    pub timeline: RwSignal<Option<Arc<Followed>>>,
    /// The Circuits tab: the kind shown, what colours the map, the edges' ratio to the
    /// baseline, and the shown model's scores once computed (one mode at a time).
    pub circuit_kind: RwSignal<CompositionKind>,
    pub circuit_colour: RwSignal<CircuitColour>,
    pub edge_ratio: RwSignal<f64>,
    pub composition: RwSignal<Option<HeldComposition>>,
}

/// What the page's error line says, and whether it reports a load that failed: the next model
/// shown clears that, but not other errors (a link's file that does not match, say).
#[derive(Clone, Debug, PartialEq)]
pub struct ErrorLine {
    pub text: String,
    pub failed_load: bool,
}

impl Ctx {
    /// The shown model's head that a click landed on (a chart's element with `data-head`).
    pub fn head_clicked(&self, event: &web_sys::Event) -> Option<HeadId> {
        let name = super::browser::data_head_of(event)?;
        HeadId::parse(&name, &self.loaded.get_untracked()?.info.config).ok()
    }

    pub fn show_error(&self, text: String) {
        self.error.set(Some(ErrorLine { text, failed_load: false }));
    }

    pub(super) fn show_failed_load(&self, text: String) {
        self.error.set(Some(ErrorLine { text, failed_load: true }));
    }
}

impl Default for Ctx {
    fn default() -> Self {
        Ctx {
            loaded: RwSignal::new(None),
            mode: RwSignal::new(Mode::Folded),
            head: RwSignal::new(HeadId::new(0, 0)),
            tab: RwSignal::new(Tab::Overview),
            metric: RwSignal::new(Metric::OvCopying),
            sequence: RwSignal::new(Sequence::UniformRandom),
            busy: RwSignal::new(None),
            progress: RwSignal::new(None),
            hashing: RwSignal::new(None),
            stalled: RwSignal::new(None),
            running: RwSignal::new(Vec::new()),
            preview: RwSignal::new(None),
            loading: RwSignal::new(None),
            worker_memory: RwSignal::new(workers::Memory::default()),
            error: RwSignal::new(None),
            suite: RwSignal::new(Suite::builtin("bracket").expect("built-in suite")),
            prompt: RwSignal::new(DEFAULT_PROMPT.to_string()),
            compared: RwSignal::new(Vec::new()),
            prepend_bos: RwSignal::new(true),
            threshold: RwSignal::new(INDUCTION_HEAD_THRESHOLD),
            awaited: RwSignal::new(None),
            linked_head: RwSignal::new(None),
            backend: RwSignal::new(BackendChoice::Auto),
            hub: RwSignal::new(HUB_ENDPOINT.to_string()),
            timeline_asked: RwSignal::new(None),
            timeline: RwSignal::new(None),
            circuit_kind: RwSignal::new(CompositionKind::K),
            circuit_colour: RwSignal::new(CircuitColour::Ratio),
            edge_ratio: RwSignal::new(DEFAULT_EDGE_RATIO),
            composition: RwSignal::new(None),
        }
    }
}

pub const DEFAULT_PROMPT: &str = "(a(b)c) \"abc\" (a(b)c) \"abc\"";

/// A timeline with each revision's results (the grid and the spectrum read them).
pub struct Followed {
    pub timeline: Timeline,
    pub checkpoints: Vec<Checkpoint>,
}

impl Followed {
    /// One head's value of `metric` at revision `index`; None where that revision failed or the
    /// value is unknown.
    pub fn value(&self, index: usize, metric: Metric, id: HeadId) -> Option<f64> {
        let measured = self.checkpoints.get(index)?.outcome.as_ref().ok()?;
        let head = measured.fingerprint.head(id)?;
        let scores =
            measured.induction.as_ref().and_then(|r| r.heads.iter().find(|s| s.layer == id.layer && s.head == id.head));
        metric.value(head, scores)
    }
}
