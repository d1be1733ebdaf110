//! The fingerprint of every head of a model: QK (residual and token space), OV (token space)
//! and OV (residual space), serialised in the CLI's JSON contract. A circuit that cannot be
//! read is an error in its own fingerprint; the other circuits and heads are unaffected.

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};

use super::HeadId;
use super::circuits::{Grams, HeadWeights, LayerProducts, Mode, ProductGrams};
use super::spectrum::Fingerprint;
use crate::backend::{Backend, BackendInfo, block_on, moved_between};
use crate::model::{Layer, LoadParts, Model, ModelConfig, ModelStream, Norm, Weights};
use crate::parallel::map_each;
use crate::{Error, Result};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelSummary {
    pub family: String,
    pub layers: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub d_model: usize,
    pub d_head: usize,
    pub vocab: usize,
    pub parameters: u64,
}

impl ModelSummary {
    pub fn of(model: &Model) -> Self {
        Self::from_config(&model.config, model.parameter_count)
    }

    pub fn from_config(config: &ModelConfig, parameters: u64) -> Self {
        let ModelConfig { ref family, layers, heads, kv_heads, d_model, d_head, vocab, .. } = *config;
        ModelSummary { family: family.clone(), layers, heads, kv_heads, d_model, d_head, vocab, parameters }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeadFingerprint {
    pub layer: usize,
    pub head: usize,
    /// Residual space: `W_Q W_K^T`.
    pub qk: Fingerprint,
    /// Token space: `W_E W_Q W_K^T W_E^T`.
    pub qk_token: Fingerprint,
    /// Token space: `W_E W_V W_O W_U`.
    pub ov: Fingerprint,
    /// Residual space: `W_V W_O`.
    pub ov_residual: Fingerprint,
}

impl HeadFingerprint {
    pub fn id(&self) -> HeadId {
        HeadId::new(self.layer, self.head)
    }

    /// The four circuits with the names their errors use.
    pub fn circuits(&self) -> [(&'static str, &Fingerprint); 4] {
        [("QK", &self.qk), ("QK (tokens)", &self.qk_token), ("OV", &self.ov), ("OV (residual)", &self.ov_residual)]
    }

    /// Every circuit of this head that could not be read, as a specific error.
    pub fn errors(&self) -> Vec<Error> {
        self.circuits()
            .into_iter()
            .filter_map(|(circuit, f)| {
                let reason = f.error.clone()?;
                Some(Error::Spectrum { head: self.id().to_string(), circuit: circuit.into(), reason })
            })
            .collect()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelFingerprint {
    pub model: ModelSummary,
    pub mode: String,
    /// What computed the large products (the CPU, or a GPU naming its adapter).
    #[serde(default)]
    pub backend: BackendInfo,
    pub heads: Vec<HeadFingerprint>,
}

impl ModelFingerprint {
    pub fn head(&self, id: HeadId) -> Option<&HeadFingerprint> {
        self.heads.iter().find(|h| h.layer == id.layer && h.head == id.head)
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Fingerprint", 8)?;
        let pairs: Vec<[f64; 2]> = self.eigenvalues.iter().map(|l| [l.re, l.im]).collect();
        // A failed circuit's numbers are NaN: null in JSON, as is its `defective` (unknown).
        let number = |v: f64| v.is_finite().then_some(v);
        s.serialize_field("eigenvalues", &pairs)?;
        s.serialize_field("copying_score", &number(self.copying_score))?;
        s.serialize_field("imaginary_fraction", &number(self.imaginary_fraction))?;
        // JSON has no infinity: a defective matrix is null plus the flag.
        s.serialize_field("eigenvector_condition", &self.eigenvector_condition)?;
        s.serialize_field("defective", &self.error.is_none().then_some(self.defective()))?;
        s.serialize_field("departure_from_normality", &number(self.departure_from_normality))?;
        s.serialize_field("scale", &number(self.scale))?;
        s.serialize_field("error", &self.error)?;
        s.end()
    }
}

/// The wire form of a fingerprint (what `Serialize` above writes), read back by the page.
#[derive(Deserialize)]
struct FingerprintWire {
    eigenvalues: Vec<[f64; 2]>,
    copying_score: Option<f64>,
    imaginary_fraction: Option<f64>,
    eigenvector_condition: Option<f64>,
    departure_from_normality: Option<f64>,
    scale: Option<f64>,
    #[serde(default)]
    error: Option<String>,
}

impl<'de> Deserialize<'de> for Fingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let wire = FingerprintWire::deserialize(deserializer)?;
        let number = |v: Option<f64>| v.unwrap_or(f64::NAN);
        Ok(Fingerprint {
            eigenvalues: wire.eigenvalues.into_iter().map(|[re, im]| super::spectrum::Eigenvalue { re, im }).collect(),
            copying_score: number(wire.copying_score),
            imaginary_fraction: number(wire.imaginary_fraction),
            eigenvector_condition: wire.eigenvector_condition,
            departure_from_normality: number(wire.departure_from_normality),
            scale: number(wire.scale),
            error: wire.error,
        })
    }
}

/// The four fingerprints of one head; a circuit that cannot be read carries its error.
fn fingerprint_circuits(
    id: HeadId,
    weights: &HeadWeights,
    qk_token: std::result::Result<super::Factored, String>,
    ov: std::result::Result<super::Factored, String>,
) -> HeadFingerprint {
    let spectrum = |factored: std::result::Result<super::Factored, String>| {
        factored.and_then(|f| f.fingerprint()).unwrap_or_else(Fingerprint::failed)
    };
    HeadFingerprint {
        layer: id.layer,
        head: id.head,
        qk: spectrum(Ok(weights.qk())),
        qk_token: spectrum(qk_token),
        ov: spectrum(ov),
        ov_residual: spectrum(Ok(weights.ov_residual())),
    }
}

/// Every head of one layer: the layer's Gram products as a few large products on `backend`
/// ([`LayerProducts`], from the weights as stored), then each head's four spectra from its
/// weights folded in `mode` (threaded on native). Fails only when the backend does (a GPU: the
/// caller falls back to the CPU).
async fn fingerprint_layer_heads(
    config: &ModelConfig,
    layer: &Layer,
    ln_final: &Norm,
    mode: Mode,
    grams: &ProductGrams,
    index: usize,
    backend: &mut Backend,
) -> Result<Vec<HeadFingerprint>> {
    let products = LayerProducts::new(config, layer, ln_final, mode, grams, backend).await?;
    let ids: Vec<HeadId> = (0..config.heads).map(|h| HeadId::new(index, h)).collect();
    // Each head's f64 weights are made where its spectra are, and dropped with them: a whole
    // layer's at once are 5 x d_model x heads x d_head f64 entries (670 MB for Llama-3-8B).
    Ok(map_each(&ids, |&id| {
        let w = &HeadWeights::new(config, layer, ln_final, id.head, mode);
        let token =
            |circuit: &dyn Fn(&LayerProducts) -> super::Factored| products.as_ref().map(circuit).map_err(Clone::clone);
        fingerprint_circuits(id, w, token(&|p| p.qk_token(id.head)), token(&|p| p.ov_token(id.head)))
    }))
}

/// Fingerprints every head of a held model, on all cores where there are threads (native), else
/// in turn; everything on the CPU.
pub fn fingerprint_model(model: &Model, mode: Mode) -> Result<ModelFingerprint> {
    let grams = Grams::compute(model).for_products();
    let backend = &mut Backend::cpu();
    let mut heads = Vec::with_capacity(model.config.layers * model.config.heads);
    for (l, layer) in model.layers.iter().enumerate() {
        heads.extend(block_on(fingerprint_layer_heads(
            &model.config,
            layer,
            &model.ln_final,
            mode,
            &grams,
            l,
            backend,
        ))?);
    }
    let backend = grams.backend.clone();
    Ok(ModelFingerprint { model: ModelSummary::of(model), mode: mode.name().into(), backend, heads })
}

/// The same fingerprints as `fingerprint_model`, from a model read a layer at a time: the
/// Grams from blocks of vocabulary rows, then each layer's attention read, fingerprinted
/// (threaded across its heads on native) and dropped. Memory is the Grams and one layer,
/// never the whole model.
pub fn fingerprint_stream(model: &ModelStream, mode: Mode) -> Result<ModelFingerprint> {
    fingerprint_stream_with(model, mode, &mut Backend::cpu())
}

/// `fingerprint_stream` with the large products (the Grams and every layer's) on `backend`. A
/// GPU that fails on the way is dropped and everything is computed again on the CPU, so no
/// result mixes the two; the fingerprint's `backend` says which it was, and why.
pub fn fingerprint_stream_with(model: &ModelStream, mode: Mode, backend: &mut Backend) -> Result<ModelFingerprint> {
    fingerprint_stream_watched(model, mode, backend, &mut |_, _, _| {})
}

/// The part of a fingerprint under way, for a progress display.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FingerprintStage {
    /// Vocabulary rows summed into the Grams.
    Grams,
    /// Heads fingerprinted, a layer at a time.
    Heads,
}

/// `fingerprint_stream_with`, calling `watch(stage, done, total)` as the Grams' rows and the
/// heads are done (a GPU that fails starts the count again on the CPU).
pub fn fingerprint_stream_watched(
    model: &ModelStream,
    mode: Mode,
    backend: &mut Backend,
    watch: &mut dyn FnMut(FingerprintStage, usize, usize),
) -> Result<ModelFingerprint> {
    block_on(backend.with_fallback(async |backend| {
        // Only what the layers' products need is kept of the Grams: the matrices themselves go.
        let grams = Grams::gather(model, backend, &mut |done, total| watch(FingerprintStage::Grams, done, total))
            .await?
            .for_products();
        let start = backend.bytes_moved();
        let heads = &mut |_: &HeadFingerprint, done, total| watch(FingerprintStage::Heads, done, total);
        let mut fingerprint = fingerprint_layers_on(model, &grams, mode, backend, heads).await?;
        if let Some(moved) = moved_between(start, backend.bytes_moved()) {
            fingerprint.backend.add_stage("heads", moved);
        }
        Ok(fingerprint)
    }))
}

/// Every head of a model read a layer at a time, given its Grams, on the CPU: see
/// [`fingerprint_layers_on`].
pub fn fingerprint_layers(
    model: &ModelStream,
    grams: &Grams,
    mode: Mode,
    each: &mut dyn FnMut(&HeadFingerprint, usize, usize),
) -> Result<ModelFingerprint> {
    block_on(fingerprint_layers_on(model, &grams.for_products(), mode, &mut Backend::cpu(), each))
}

/// Every head of a model read a layer at a time, given what its products need of the Grams
/// ([`Grams::for_products`]): each layer's attention is read, its products computed on
/// `backend`, its heads fingerprinted (threaded on native) and the layer dropped.
/// `each(head, done, total)` sees every head, in order, as its layer is done (the tab's worker
/// streams them).
pub async fn fingerprint_layers_on(
    model: &ModelStream<'_>,
    grams: &ProductGrams,
    mode: Mode,
    backend: &mut Backend,
    each: &mut dyn FnMut(&HeadFingerprint, usize, usize),
) -> Result<ModelFingerprint> {
    let config = &model.config;
    let total = config.layers * config.heads;
    let mut heads = Vec::with_capacity(total);
    for l in 0..config.layers {
        for head in fingerprint_layer_on(model, grams, mode, l, backend).await? {
            heads.push(head);
            each(heads.last().expect("just pushed"), heads.len(), total);
        }
    }
    Ok(assemble_fingerprint(&model.config, model.parameter_count, &grams.backend, mode, heads))
}

/// The heads of one layer, in order, on the CPU: see [`fingerprint_layer_on`]. The tab's pool
/// hands each worker layers this way.
pub fn fingerprint_layer(model: &ModelStream, grams: &Grams, mode: Mode, layer: usize) -> Result<Vec<HeadFingerprint>> {
    block_on(fingerprint_layer_on(model, &grams.for_products(), mode, layer, &mut Backend::cpu()))
}

/// The heads of one layer, in order, given what its products need of the Grams
/// ([`Grams::for_products`]): the layer's attention read, its products computed on `backend`,
/// its heads fingerprinted (threaded on native) and the layer dropped.
pub async fn fingerprint_layer_on(
    model: &ModelStream<'_>,
    grams: &ProductGrams,
    mode: Mode,
    layer: usize,
    backend: &mut Backend,
) -> Result<Vec<HeadFingerprint>> {
    let weights = model.layer(layer, LoadParts::Circuits)?;
    fingerprint_layer_heads(&model.config, &weights, &model.ln_final, mode, grams, layer, backend).await
}

/// A model's fingerprint from its heads in order (the layer-by-layer path and the tab's pool
/// assemble it the same way).
pub fn assemble_fingerprint(
    config: &ModelConfig,
    parameters: u64,
    backend: &BackendInfo,
    mode: Mode,
    heads: Vec<HeadFingerprint>,
) -> ModelFingerprint {
    let summary = ModelSummary::from_config(config, parameters);
    ModelFingerprint { model: summary, mode: mode.name().into(), backend: backend.clone(), heads }
}
