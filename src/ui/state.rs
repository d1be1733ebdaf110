//! What the page holds for one loaded model, how it gets there, and the overview's metrics.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use leptos::prelude::*;

use super::browser::next_tick;
use crate::analysis::circuits::Grams;
use crate::analysis::fingerprint::fingerprint_model_with_progress;
use crate::analysis::{Circuits, HeadFingerprint, HeadId, Mode, ModelFingerprint, OvTokenLogits};
use crate::model::{LoadParts, Model};
use crate::probes::Suite;
use crate::probes::induction::{HeadScores, InductionReport, RepeatSource, induction_probe, random_first_copy};
use crate::tokens::Tokenizer;
use crate::weights::{ByteSource, MemorySource, ModelFiles};

/// The model the page opens with (one of its own static files).
pub const DEFAULT_MODEL_URL: &str = "models/nietzsche-char.safetensors";

/// Seed and length cap of the overview's induction probe (uniform random tokens).
pub const INDUCTION_SEED: u64 = 0;
pub const INDUCTION_LEN: usize = 50;

/// One model and everything computed from it once.
pub struct Loaded {
    /// Distinguishes loads (caches key on it).
    pub id: u64,
    pub name: String,
    pub model: Model,
    pub tokenizer: Tokenizer,
    pub grams: Grams,
    pub folded: ModelFingerprint,
    pub raw: ModelFingerprint,
    pub induction: Result<InductionReport, String>,
    pub induction_len: usize,
}

impl Loaded {
    pub fn fingerprint(&self, mode: Mode) -> &ModelFingerprint {
        match mode {
            Mode::Folded => &self.folded,
            Mode::Raw => &self.raw,
        }
    }

    pub fn head(&self, mode: Mode, id: HeadId) -> Option<&HeadFingerprint> {
        self.fingerprint(mode).head(id)
    }

    pub fn scores(&self, id: HeadId) -> Option<&HeadScores> {
        self.induction.as_ref().ok()?.heads.iter().find(|h| h.layer == id.layer && h.head == id.head)
    }

    pub fn heads(&self) -> Vec<HeadId> {
        HeadId::all(&self.model.config).collect()
    }

    pub fn logits(&self, mode: Mode, id: HeadId) -> OvTokenLogits {
        OvTokenLogits::new(&Circuits::new(&self.model, &self.grams, mode), id)
    }

    /// The head with the largest OV copying score (folded): where the page starts.
    pub fn best_copier(&self) -> HeadId {
        self.folded
            .heads
            .iter()
            .max_by(|a, b| a.ov.copying_score.total_cmp(&b.ov.copying_score))
            .map(HeadFingerprint::id)
            .unwrap_or(HeadId::new(0, 0))
    }

    /// Text or, for models without a vocabulary, comma-separated ids.
    pub fn encode(&self, text: &str) -> crate::Result<Vec<usize>> {
        match self.tokenizer {
            Tokenizer::IdsOnly { .. } => crate::tokens::parse_ids(text),
            _ => self.tokenizer.encode(text),
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tab {
    Overview,
    Head,
    Probes,
}

/// The page's shared state (all `Copy` handles).
#[derive(Clone, Copy)]
pub struct Ctx {
    pub loaded: RwSignal<Option<Arc<Loaded>>>,
    pub mode: RwSignal<Mode>,
    pub head: RwSignal<HeadId>,
    pub tab: RwSignal<Tab>,
    pub metric: RwSignal<Metric>,
    /// What is being done right now (loading, analysing).
    pub busy: RwSignal<Option<String>>,
    /// The last load's error, shown until the next successful load.
    pub error: RwSignal<Option<String>>,
    /// The suite in the probes view (built-in or loaded).
    pub suite: RwSignal<Suite>,
    pub prompt: RwSignal<String>,
}

impl Default for Ctx {
    fn default() -> Self {
        Ctx {
            loaded: RwSignal::new(None),
            mode: RwSignal::new(Mode::Folded),
            head: RwSignal::new(HeadId::new(0, 0)),
            tab: RwSignal::new(Tab::Overview),
            metric: RwSignal::new(Metric::OvCopying),
            busy: RwSignal::new(None),
            error: RwSignal::new(None),
            suite: RwSignal::new(Suite::builtin("bracket").expect("built-in suite")),
            prompt: RwSignal::new(DEFAULT_PROMPT.to_string()),
        }
    }
}

pub const DEFAULT_PROMPT: &str = "(a(b)c) \"abc\" (a(b)c) \"abc\"";

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// Loads and analyses a model from named files. On failure the page keeps what it had.
pub async fn load(ctx: Ctx, label: String, files: Vec<(String, Vec<u8>)>) {
    match analyse(ctx, label.clone(), files).await {
        Ok(loaded) => {
            let start = loaded.best_copier();
            let keep = ctx.head.get_untracked();
            let config = &loaded.model.config;
            let head = if ctx.loaded.with_untracked(Option::is_none)
                || keep.layer >= config.layers
                || keep.head >= config.heads
            {
                start
            } else {
                keep
            };
            ctx.head.set(head);
            ctx.loaded.set(Some(Arc::new(loaded)));
            ctx.error.set(None);
        }
        Err(message) => {
            let kept = ctx.loaded.with_untracked(|l| l.as_ref().map(|l| l.name.clone()));
            let tail = match kept {
                Some(name) => format!(" (still showing {name})"),
                None => String::new(),
            };
            ctx.error.set(Some(format!("Could not load {label}: {message}{tail}")));
        }
    }
    ctx.busy.set(None);
}

async fn step(ctx: Ctx, what: String) {
    ctx.busy.set(Some(what));
    next_tick().await;
}

async fn analyse(ctx: Ctx, label: String, files: Vec<(String, Vec<u8>)>) -> Result<Loaded, String> {
    step(ctx, format!("Reading {label}…")).await;
    let named: Vec<(String, Box<dyn ByteSource>)> = files
        .into_iter()
        .map(|(name, bytes)| {
            let source: Box<dyn ByteSource> = Box::new(MemorySource::new(name.clone(), bytes));
            (name, source)
        })
        .collect();
    let files = ModelFiles::from_named(named).map_err(|e| e.to_string())?;
    let model = Model::load(&files, LoadParts::Everything).map_err(|e| e.to_string())?;
    let tokenizer = Tokenizer::for_model(&model, files.tokenizer_json.as_deref()).map_err(|e| e.to_string())?;
    drop(files);
    step(ctx, format!("Fingerprinting {} heads (folded)…", model.config.layers * model.config.heads)).await;
    let grams = Grams::compute(&model);
    let folded =
        fingerprint_model_with_progress(&model, &grams, Mode::Folded, &mut |_, _| true).map_err(|e| e.to_string())?;
    step(ctx, "Fingerprinting (raw)…".into()).await;
    let raw =
        fingerprint_model_with_progress(&model, &grams, Mode::Raw, &mut |_, _| true).map_err(|e| e.to_string())?;
    step(ctx, "Running the induction probe…".into()).await;
    let induction_len = model.config.context.map_or(INDUCTION_LEN, |c| INDUCTION_LEN.min(c / 2));
    let induction = random_first_copy(model.config.vocab, induction_len, INDUCTION_SEED, &tokenizer.special_ids())
        .and_then(|first| induction_probe(&model, &first, RepeatSource::UniformRandom { seed: INDUCTION_SEED }))
        .map_err(|e| e.to_string());
    Ok(Loaded {
        id: NEXT_ID.fetch_add(1, Ordering::Relaxed),
        name: label,
        model,
        tokenizer,
        grams,
        folded,
        raw,
        induction,
        induction_len,
    })
}

/// How a metric is coloured.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scale {
    /// [-1, 1], diverging.
    Signed,
    /// [0, 1], sequential.
    Unit,
    /// [0, max], sequential.
    Positive,
    /// κ: log10, [0, max], ∞ at the top.
    LogKappa,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Metric {
    OvCopying,
    QkCopying,
    QkImaginary,
    OvImaginary,
    QkKappa,
    OvKappa,
    QkDeparture,
    OvDeparture,
    QkScale,
    OvScale,
    Induction,
    PreviousToken,
    DuplicateToken,
}

impl Metric {
    pub const ALL: [Metric; 13] = [
        Metric::OvCopying,
        Metric::QkCopying,
        Metric::QkImaginary,
        Metric::OvImaginary,
        Metric::QkKappa,
        Metric::OvKappa,
        Metric::QkDeparture,
        Metric::OvDeparture,
        Metric::QkScale,
        Metric::OvScale,
        Metric::Induction,
        Metric::PreviousToken,
        Metric::DuplicateToken,
    ];

    pub fn key(self) -> &'static str {
        match self {
            Metric::OvCopying => "ov-copying",
            Metric::QkCopying => "qk-copying",
            Metric::QkImaginary => "qk-imaginary",
            Metric::OvImaginary => "ov-imaginary",
            Metric::QkKappa => "qk-kappa",
            Metric::OvKappa => "ov-kappa",
            Metric::QkDeparture => "qk-departure",
            Metric::OvDeparture => "ov-departure",
            Metric::QkScale => "qk-scale",
            Metric::OvScale => "ov-scale",
            Metric::Induction => "induction",
            Metric::PreviousToken => "previous-token",
            Metric::DuplicateToken => "duplicate-token",
        }
    }

    pub fn from_key(key: &str) -> Option<Metric> {
        Metric::ALL.into_iter().find(|m| m.key() == key)
    }

    pub fn label(self) -> &'static str {
        match self {
            Metric::OvCopying => "OV copying score",
            Metric::QkCopying => "QK copying score",
            Metric::QkImaginary => "QK imaginary fraction",
            Metric::OvImaginary => "OV imaginary fraction",
            Metric::QkKappa => "QK eigenvector condition κ",
            Metric::OvKappa => "OV eigenvector condition κ",
            Metric::QkDeparture => "QK departure from normality",
            Metric::OvDeparture => "OV departure from normality",
            Metric::QkScale => "QK scale Σ|λ|",
            Metric::OvScale => "OV scale Σ|λ|",
            Metric::Induction => "induction score",
            Metric::PreviousToken => "previous-token score",
            Metric::DuplicateToken => "duplicate-token score",
        }
    }

    pub fn scale(self) -> Scale {
        match self {
            Metric::OvCopying | Metric::QkCopying => Scale::Signed,
            Metric::QkKappa | Metric::OvKappa => Scale::LogKappa,
            Metric::QkScale | Metric::OvScale => Scale::Positive,
            _ => Scale::Unit,
        }
    }

    /// Whether it comes from running the model (same in raw and folded mode).
    pub fn behavioural(self) -> bool {
        matches!(self, Metric::Induction | Metric::PreviousToken | Metric::DuplicateToken)
    }

    /// The value for one head; κ of a defective matrix is +∞; None when not measured.
    pub fn value(self, fingerprint: &HeadFingerprint, scores: Option<&HeadScores>) -> Option<f64> {
        let (qk, ov) = (&fingerprint.qk, &fingerprint.ov);
        Some(match self {
            Metric::OvCopying => ov.copying_score,
            Metric::QkCopying => qk.copying_score,
            Metric::QkImaginary => qk.imaginary_fraction,
            Metric::OvImaginary => ov.imaginary_fraction,
            Metric::QkKappa => qk.eigenvector_condition.unwrap_or(f64::INFINITY),
            Metric::OvKappa => ov.eigenvector_condition.unwrap_or(f64::INFINITY),
            Metric::QkDeparture => qk.departure_from_normality,
            Metric::OvDeparture => ov.departure_from_normality,
            Metric::QkScale => qk.scale,
            Metric::OvScale => ov.scale,
            Metric::Induction => scores?.induction_score,
            Metric::PreviousToken => scores?.previous_token_score,
            Metric::DuplicateToken => scores?.duplicate_token_score,
        })
    }
}

/// Maps values of one metric to colours (the range comes from all heads' values).
pub struct ColourScale {
    pub scale: Scale,
    pub max: f64,
}

impl ColourScale {
    pub fn new(scale: Scale, values: &[f64]) -> Self {
        let finite_max = values.iter().copied().filter(|v| v.is_finite()).fold(0.0, f64::max);
        let max = match scale {
            Scale::Signed | Scale::Unit => 1.0,
            Scale::Positive => finite_max.max(f64::MIN_POSITIVE),
            Scale::LogKappa => finite_max.max(1.0).log10().max(1.0),
        };
        ColourScale { scale, max }
    }

    /// Position on the colour map, in [0, 1] (or [-1, 1] for signed).
    fn position(&self, v: f64) -> f64 {
        match self.scale {
            Scale::Signed => v,
            Scale::Unit => v,
            Scale::Positive => v / self.max,
            Scale::LogKappa => {
                if v.is_finite() {
                    v.max(1.0).log10() / self.max
                } else {
                    1.0
                }
            }
        }
    }

    pub fn swatch(&self, v: f64) -> super::svg::Swatch {
        match self.scale {
            Scale::Signed => super::svg::diverging(self.position(v)),
            _ => super::svg::viridis(self.position(v)),
        }
    }

    /// Gradient stops and end labels for the legend.
    pub fn legend(&self) -> (Vec<(f64, String)>, String, String) {
        let stops = (0..=10)
            .map(|i| {
                let t = i as f64 / 10.0;
                let colour = match self.scale {
                    Scale::Signed => super::svg::diverging(2.0 * t - 1.0).fill,
                    _ => super::svg::viridis(t).fill,
                };
                (t, colour)
            })
            .collect();
        let (lo, hi) = match self.scale {
            Scale::Signed => ("−1 (suppresses)".to_string(), "+1 (copies)".to_string()),
            Scale::Unit => ("0".to_string(), "1".to_string()),
            Scale::Positive => ("0".to_string(), super::svg::num(self.max)),
            Scale::LogKappa => {
                ("κ = 1".to_string(), format!("κ ≥ {} (∞ = defective)", super::svg::num(10f64.powf(self.max))))
            }
        };
        (stops, lo, hi)
    }

    /// The value axis of the bar chart.
    pub fn axis(&self) -> (f64, f64) {
        match self.scale {
            Scale::Signed => (-1.0, 1.0),
            Scale::Unit => (0.0, 1.0),
            Scale::Positive => (0.0, self.max),
            Scale::LogKappa => (0.0, self.max),
        }
    }

    /// The value as plotted on the bar chart's axis (κ as log10).
    pub fn plotted(&self, v: f64) -> f64 {
        match self.scale {
            Scale::LogKappa => {
                if v.is_finite() {
                    v.max(1.0).log10()
                } else {
                    self.max
                }
            }
            _ => v,
        }
    }
}
