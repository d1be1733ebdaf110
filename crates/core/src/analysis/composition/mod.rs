//! Composition between heads (docs/methods.md#8-circuits-between-heads): how much a head in an
//! earlier layer writes into the subspace a later head reads with its queries, keys or values.
//!
//! TransformerLens's `all_composition_scores` (Elhage et al. 2021), row-vector convention: with
//! W_OV = W_V W_O and W_QK = W_Q W_K^T, the score of a writer h1 and a reader h2 is
//! ‖W_OV¹ M²‖_F / (‖W_OV¹‖_F ‖M²‖_F), M² being W_QK² (Q), W_QK²ᵀ (K) or W_OV² (V).
//!
//! Two methods give the same numbers (to f64 rounding). The CPU counts each pair through the
//! heads' d_model x d_model Grams, d_model²/2 multiply-adds a pair ([`grams`]), where that pays
//! against d_head²·d_model (wide heads, narrow models); otherwise, and on a GPU, whole layers'
//! factors are multiplied in a few large products ([`products`]). Neither forms W_OV or W_QK.

mod grams;
mod products;

use nalgebra::DMatrix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};

use super::circuits::{HeadWeights, Mode};
use super::fingerprint::ModelSummary;
use super::head::HeadId;
use crate::Result;
use crate::backend::{Backend, BackendInfo, block_on, moved_between};
use crate::model::{LoadParts, ModelConfig, Weights};

/// Which side of a later head an earlier head's output is read by.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompositionKind {
    /// Into the queries: W_OV¹ W_QK².
    Q,
    /// Into the keys: W_OV¹ W_QK²ᵀ (a previous-token head into an induction head).
    K,
    /// Into the values: W_OV¹ W_OV².
    V,
}

impl CompositionKind {
    pub const ALL: [CompositionKind; 3] = [CompositionKind::Q, CompositionKind::K, CompositionKind::V];

    pub fn name(self) -> &'static str {
        match self {
            CompositionKind::Q => "q",
            CompositionKind::K => "k",
            CompositionKind::V => "v",
        }
    }

    /// `q`, `k` or `v` (either case).
    pub fn parse(text: &str) -> Result<CompositionKind> {
        match text.trim().to_ascii_lowercase().as_str() {
            "q" => Ok(CompositionKind::Q),
            "k" => Ok(CompositionKind::K),
            "v" => Ok(CompositionKind::V),
            _ => Err(crate::Error::Invalid(format!("unknown composition kind `{text}`: write q, k or v"))),
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// How many pairs the CLI's table and the report's `top` list per kind by default.
pub const DEFAULT_TOP: usize = 10;

/// Random draws the baseline averages over, and the seed of the first.
pub const BASELINE_SAMPLES: usize = 32;
pub const BASELINE_SEED: u64 = 0;

/// The score of random matrices of a model's shapes: what a score is to be compared with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    /// The mean score of [`BASELINE_SAMPLES`] draws of Gaussian W_Q, W_K, W_V, W_O.
    pub mean: f64,
    /// Their standard deviation.
    pub spread: f64,
    /// `1/√d_model`, the root mean square such a score has in expectation.
    pub rms: f64,
}

/// One writer → reader pair, as the tables and `top` list it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompositionEdge {
    pub kind: CompositionKind,
    pub from: String,
    pub to: String,
    pub score: f64,
    /// The score over the kind's baseline mean.
    pub ratio: f64,
}

/// Every ordered pair's three scores, flat in TransformerLens's layout: index
/// `((l1·heads + h1)·layers + l2)·heads + h2`, zero unless l1 < l2. In the page's messages the
/// values travel beside the JSON (a moved `Float64Array`: [`CompositionScores::take_values`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompositionScores {
    pub layers: usize,
    pub heads: usize,
    /// Per kind, in [`CompositionKind::ALL`]'s order.
    #[serde(skip)]
    values: [Vec<f64>; 3],
}

impl CompositionScores {
    fn zeros(layers: usize, heads: usize) -> CompositionScores {
        let n = (layers * heads).pow(2);
        CompositionScores { layers, heads, values: [vec![0.0; n], vec![0.0; n], vec![0.0; n]] }
    }

    fn index(&self, from: HeadId, to: HeadId) -> usize {
        ((from.layer * self.heads + from.head) * self.layers + to.layer) * self.heads + to.head
    }

    /// Every kind's scores, one after another (Q, K, V), leaving them empty: what the page's
    /// worker moves beside its JSON.
    pub fn take_values(&mut self) -> Vec<f64> {
        let [q, k, v] = std::mem::take(&mut self.values);
        [q, k, v].concat()
    }

    /// Puts back what [`CompositionScores::take_values`] took, checked against the shape.
    pub fn put_values(&mut self, values: Vec<f64>) -> Result<()> {
        let n = (self.layers * self.heads).pow(2);
        if values.len() != 3 * n {
            return Err(crate::Error::Worker(format!(
                "{} numbers came for the composition scores of {} layers x {} heads ({} expected)",
                values.len(),
                self.layers,
                self.heads,
                3 * n
            )));
        }
        let mut kinds = values.chunks(n.max(1)).map(<[f64]>::to_vec);
        let mut next = || kinds.next().unwrap_or_default();
        self.values = [next(), next(), next()];
        Ok(())
    }

    pub fn get(&self, kind: CompositionKind, from: HeadId, to: HeadId) -> f64 {
        self.values[kind.index()][self.index(from, to)]
    }

    /// One kind's scores, flat (the layout above): what a `[layers, heads, layers, heads]`
    /// array holds.
    pub fn flat(&self, kind: CompositionKind) -> &[f64] {
        &self.values[kind.index()]
    }

    /// One kind's scores nested `[l1][h1][l2][h2]`, as the JSON holds them.
    pub fn nested(&self, kind: CompositionKind) -> Vec<Vec<Vec<Vec<f64>>>> {
        let (layers, heads) = (self.layers, self.heads);
        let flat = self.flat(kind);
        flat.chunks(heads)
            .collect::<Vec<_>>()
            .chunks(layers)
            .map(|to_layers| to_layers.iter().map(|row| row.to_vec()).collect::<Vec<_>>())
            .collect::<Vec<_>>()
            .chunks(heads)
            .map(|from_heads| from_heads.to_vec())
            .collect()
    }
}

/// The composition report: the contract of `composition --json`, the page's Circuits tab and
/// Python's `composition`. (Serialized as is, it is the page's message, the scores beside it;
/// `to_json` is the CLI's form.)
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Composition {
    pub model: ModelSummary,
    pub mode: Mode,
    pub backend: BackendInfo,
    pub scores: CompositionScores,
    /// Per kind, in [`CompositionKind::ALL`]'s order (equal when the three circuits' head widths
    /// are, as in every family headprint reads).
    pub baseline: [Baseline; 3],
}

impl Composition {
    pub fn baseline(&self, kind: CompositionKind) -> Baseline {
        self.baseline[kind.index()]
    }

    /// Every pair l1 < l2 of one kind, strongest first (ties in head order).
    pub fn ranked(&self, kind: CompositionKind) -> Vec<CompositionEdge> {
        let (layers, heads) = (self.scores.layers, self.scores.heads);
        let base = self.baseline(kind).mean;
        let mut edges = Vec::new();
        for l1 in 0..layers {
            for h1 in 0..heads {
                for l2 in l1 + 1..layers {
                    for h2 in 0..heads {
                        let (from, to) = (HeadId::new(l1, h1), HeadId::new(l2, h2));
                        let score = self.scores.get(kind, from, to);
                        edges.push(CompositionEdge {
                            kind,
                            from: from.to_string(),
                            to: to.to_string(),
                            score,
                            ratio: score / base,
                        });
                    }
                }
            }
        }
        // A stable sort keeps head order among equal scores.
        edges.sort_by(|a, b| b.score.total_cmp(&a.score));
        edges
    }

    /// The `top` strongest pairs of each kind, kinds in order.
    pub fn top(&self, top: usize) -> Vec<CompositionEdge> {
        CompositionKind::ALL.iter().flat_map(|&kind| self.ranked(kind).into_iter().take(top)).collect()
    }

    /// The pairs whose score is `factor` times the kind's baseline or more (the Circuits graph's
    /// edges), all kinds.
    pub fn above_baseline(&self, factor: f64) -> Vec<CompositionEdge> {
        CompositionKind::ALL
            .iter()
            .flat_map(|&kind| self.ranked(kind).into_iter().take_while(|e| e.ratio >= factor))
            .collect()
    }

    /// The report as JSON: `heads` (names, layer-major), `scores` (`q`, `k`, `v`, each nested
    /// `[l1][h1][l2][h2]`), `baseline` per kind and `top` (`top` pairs per kind).
    pub fn to_json(&self, top: usize) -> CompositionJson {
        let kinds = |f: &dyn Fn(CompositionKind) -> _| PerKind {
            q: f(CompositionKind::Q),
            k: f(CompositionKind::K),
            v: f(CompositionKind::V),
        };
        CompositionJson {
            model: self.model.clone(),
            mode: self.mode,
            backend: self.backend.clone(),
            heads: (0..self.scores.layers)
                .flat_map(|l| (0..self.scores.heads).map(move |h| HeadId::new(l, h).to_string()))
                .collect(),
            scores: kinds(&|kind| self.scores.nested(kind)),
            baseline: PerKind {
                q: self.baseline(CompositionKind::Q),
                k: self.baseline(CompositionKind::K),
                v: self.baseline(CompositionKind::V),
            },
            top: self.top(top),
        }
    }
}

/// Three of a thing, one per kind, under the kinds' names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PerKind<T> {
    pub q: T,
    pub k: T,
    pub v: T,
}

/// The JSON form of a [`Composition`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CompositionJson {
    pub model: ModelSummary,
    pub mode: Mode,
    pub backend: BackendInfo,
    pub heads: Vec<String>,
    pub scores: PerKind<Vec<Vec<Vec<Vec<f64>>>>>,
    pub baseline: PerKind<Baseline>,
    pub top: Vec<CompositionEdge>,
}

/// `each(weights)` of every head of layer `layer`, on every core: the layer's attention is read
/// (no MLP or vocabulary byte) and dropped once every head's result is made.
fn each_head<T: Send>(
    model: &(impl Weights + ?Sized),
    layer: usize,
    mode: Mode,
    each: impl Fn(HeadWeights) -> T + Sync + Send,
) -> Result<Vec<T>> {
    let config = model.config();
    let weights = model.layer(layer, LoadParts::Circuits)?;
    let head_numbers: Vec<usize> = (0..config.heads).collect();
    // The final norm alone crosses into the threads (the tab's weights are not `Sync`).
    let ln_final = model.ln_final();
    Ok(crate::parallel::map_each(&head_numbers, |&h| each(HeadWeights::new(config, &weights, ln_final, h, mode))))
}

/// Every pair's composition scores of a model, reading each layer's attention (no MLP or
/// vocabulary byte): through the heads' Grams or as layer products ([`through_grams`]).
/// `each(done, total)` follows the work.
pub async fn composition_on(
    model: &(impl Weights + ?Sized),
    mode: Mode,
    backend: &mut Backend,
    each: &mut dyn FnMut(usize, usize),
) -> Result<Composition> {
    let config = model.config();
    let start = backend.bytes_moved();
    let scores = if through_grams(config, backend.is_gpu()) {
        grams::scores(model, mode, grams::PASS_BYTES, each)?
    } else {
        products::scores(model, mode, backend, each).await?
    };
    let mut info = backend.info();
    if let Some(moved) = moved_between(start, backend.bytes_moved()) {
        info.add_stage("composition", moved);
    }
    let base = baseline(config.d_model, config.d_head);
    Ok(Composition {
        model: ModelSummary::from_config(config, model.parameter_count()),
        mode,
        backend: info,
        scores,
        baseline: [base; 3],
    })
}

/// Whether a model's scores are counted through the heads' Grams (on the CPU, where that pays)
/// rather than as layer products.
pub fn through_grams(config: &ModelConfig, on_gpu: bool) -> bool {
    !on_gpu && grams::pays(config, grams::PASS_BYTES)
}

/// What the Gram count holds at most, in bytes: see [`grams::held_bytes`].
pub fn grams_held_bytes(config: &ModelConfig) -> u64 {
    grams::held_bytes(config, grams::PASS_BYTES)
}

/// [`composition_on`] where nothing awaits; a GPU that fails on the way is dropped and the
/// whole computation runs again on the CPU (the report's `backend` says so).
pub fn composition(
    model: &(impl Weights + ?Sized),
    mode: Mode,
    backend: &mut Backend,
    each: &mut dyn FnMut(usize, usize),
) -> Result<Composition> {
    block_on(backend.with_fallback(async |backend| composition_on(model, mode, backend, each).await))
}

/// R of the thin QR of `w` (rows ≥ columns): `w^T w = R^T R`.
fn r_factor(w: &DMatrix<f64>) -> DMatrix<f64> {
    w.clone().qr().r()
}

fn unit(mut m: DMatrix<f64>) -> DMatrix<f64> {
    let norm = m.norm();
    if norm > 0.0 {
        m /= norm;
    }
    m
}

/// One standard normal value (Box–Muller; only the baseline draws them, so no distribution
/// crate for it).
fn normal(rng: &mut ChaCha8Rng) -> f64 {
    let u: f64 = 1.0 - rng.random::<f64>();
    let v: f64 = rng.random::<f64>();
    (-2.0 * u.ln()).sqrt() * (std::f64::consts::TAU * v).cos()
}

fn gaussian(rng: &mut ChaCha8Rng, rows: usize, columns: usize) -> DMatrix<f64> {
    DMatrix::from_fn(rows, columns, |_, _| normal(rng))
}

/// The composition score of random heads of these shapes: [`BASELINE_SAMPLES`] pairs of heads
/// whose W_Q, W_K, W_V, W_O are independent standard Gaussians, seeded, scored as the model's
/// heads are. Gaussian weights are rotation-invariant, so Q-, K- and V-composition share one
/// distribution (whatever the heads' width, as long as it is one width) and E[score²] is exactly
/// 1/d_model (docs/methods.md#8-circuits-between-heads).
pub fn baseline(d_model: usize, d_head: usize) -> Baseline {
    // Each sample's two heads draw all four matrices, W_Q, W_K, W_V (d_model x d_head) and W_O
    // (d_head x d_model), one after the other from one seeded stream, though only the writer's
    // W_V, W_O and the reader's W_Q, W_K enter the score: the stream is entered where each of
    // those starts (a normal value is two f64 draws, four 32-bit words), so the samples are
    // independent of each other's work and the draws stay those of every head.
    let matrix_words = 4 * (d_model * d_head) as u128;
    let draw = |sample: &usize| {
        let first = 8 * *sample as u128;
        let at = |matrix: u128, rows: usize, columns: usize| {
            let mut rng = ChaCha8Rng::seed_from_u64(BASELINE_SEED);
            rng.set_word_pos((first + matrix) * matrix_words);
            gaussian(&mut rng, rows, columns)
        };
        let (w_v, w_o) = (at(2, d_model, d_head), at(3, d_head, d_model));
        let (w_q, w_k) = (at(4, d_model, d_head), at(5, d_model, d_head));
        let writer = unit(r_factor(&w_v) * w_o);
        let reader = unit(w_q * r_factor(&w_k).transpose());
        (writer * reader).norm()
    };
    let numbers: Vec<usize> = (0..BASELINE_SAMPLES).collect();
    let samples = crate::parallel::map_each(&numbers, draw);
    let mean = samples.iter().sum::<f64>() / samples.len() as f64;
    let variance = samples.iter().map(|s| (s - mean).powi(2)).sum::<f64>() / (samples.len() - 1) as f64;
    Baseline { mean, spread: variance.sqrt(), rms: (d_model as f64).recip().sqrt() }
}
