//! The fingerprint of every head of a model: QK (residual space), OV (token space) and OV
//! (residual space), serialised in the CLI's JSON contract.

use serde::ser::SerializeStruct;
use serde::{Deserialize, Serialize};

use super::HeadId;
use super::circuits::{Circuits, Grams, Mode};
use super::spectrum::Fingerprint;
use crate::model::{Model, ModelConfig};
use crate::{Error, Result};

#[derive(Debug, Clone, Serialize, Deserialize)]
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
        let ModelConfig { family, layers, heads, kv_heads, d_model, d_head, vocab, .. } = model.config;
        ModelSummary {
            family: family.name().into(),
            layers,
            heads,
            kv_heads,
            d_model,
            d_head,
            vocab,
            parameters: model.parameter_count,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct HeadFingerprint {
    pub layer: usize,
    pub head: usize,
    pub qk: Fingerprint,
    pub ov: Fingerprint,
    pub ov_residual: Fingerprint,
}

impl HeadFingerprint {
    pub fn id(&self) -> HeadId {
        HeadId::new(self.layer, self.head)
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelFingerprint {
    pub model: ModelSummary,
    pub mode: String,
    pub heads: Vec<HeadFingerprint>,
}

impl ModelFingerprint {
    pub fn head(&self, id: HeadId) -> Option<&HeadFingerprint> {
        self.heads.iter().find(|h| h.layer == id.layer && h.head == id.head)
    }
}

impl Serialize for Fingerprint {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> std::result::Result<S::Ok, S::Error> {
        let mut s = serializer.serialize_struct("Fingerprint", 7)?;
        let pairs: Vec<[f64; 2]> = self.eigenvalues.iter().map(|l| [l.re, l.im]).collect();
        s.serialize_field("eigenvalues", &pairs)?;
        s.serialize_field("copying_score", &self.copying_score)?;
        s.serialize_field("imaginary_fraction", &self.imaginary_fraction)?;
        // JSON has no infinity: a defective matrix is null plus the flag.
        s.serialize_field("eigenvector_condition", &self.eigenvector_condition)?;
        s.serialize_field("defective", &self.eigenvector_condition.is_none())?;
        s.serialize_field("departure_from_normality", &self.departure_from_normality)?;
        s.serialize_field("scale", &self.scale)?;
        s.end()
    }
}

/// The wire form of a fingerprint (what `Serialize` above writes), read back by the page.
#[derive(Deserialize)]
struct FingerprintWire {
    eigenvalues: Vec<[f64; 2]>,
    copying_score: f64,
    imaginary_fraction: f64,
    eigenvector_condition: Option<f64>,
    departure_from_normality: f64,
    scale: f64,
}

impl<'de> Deserialize<'de> for Fingerprint {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> std::result::Result<Self, D::Error> {
        let wire = FingerprintWire::deserialize(deserializer)?;
        Ok(Fingerprint {
            eigenvalues: wire.eigenvalues.into_iter().map(|[re, im]| super::spectrum::Eigenvalue { re, im }).collect(),
            copying_score: wire.copying_score,
            imaginary_fraction: wire.imaginary_fraction,
            eigenvector_condition: wire.eigenvector_condition,
            departure_from_normality: wire.departure_from_normality,
            scale: wire.scale,
        })
    }
}

/// The three fingerprints of one head.
pub fn fingerprint_head(circuits: &Circuits, id: HeadId) -> Result<HeadFingerprint> {
    let weights = circuits.head_weights(id);
    let spectrum = |circuit: &str, factored: super::Factored| {
        factored.fingerprint().map_err(|reason| Error::Spectrum {
            head: id.to_string(),
            circuit: circuit.into(),
            reason,
        })
    };
    Ok(HeadFingerprint {
        layer: id.layer,
        head: id.head,
        qk: spectrum("QK", circuits.qk(&weights))?,
        ov: spectrum("OV", circuits.ov_token(&weights))?,
        ov_residual: spectrum("OV (residual)", circuits.ov_residual(&weights))?,
    })
}

/// Fingerprints every head, one after another; `each(head, done, total)` sees every head as it
/// is done (the page's worker streams them to the page, so the grid fills while it works).
pub fn fingerprint_model_with_progress(
    model: &Model,
    grams: &Grams,
    mode: Mode,
    each: &mut dyn FnMut(&HeadFingerprint, usize, usize),
) -> Result<ModelFingerprint> {
    let circuits = Circuits::new(model, grams, mode);
    let total = model.config.layers * model.config.heads;
    let mut heads = Vec::with_capacity(total);
    for (done, id) in HeadId::all(&model.config).enumerate() {
        let head = fingerprint_head(&circuits, id)?;
        each(&head, done + 1, total);
        heads.push(head);
    }
    Ok(ModelFingerprint { model: ModelSummary::of(model), mode: mode.name().into(), heads })
}

/// Fingerprints every head, on all cores where there are threads (native), else in turn.
pub fn fingerprint_model(model: &Model, mode: Mode) -> Result<ModelFingerprint> {
    let grams = Grams::compute(model);
    #[cfg(not(target_arch = "wasm32"))]
    {
        let circuits = Circuits::new(model, &grams, mode);
        let ids: Vec<HeadId> = HeadId::all(&model.config).collect();
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get()).min(ids.len().max(1));
        let chunk = ids.len().div_ceil(workers).max(1);
        let heads: Result<Vec<Vec<HeadFingerprint>>> = std::thread::scope(|scope| {
            let handles: Vec<_> = ids
                .chunks(chunk)
                .map(|part| {
                    let circuits = &circuits;
                    scope.spawn(move || {
                        part.iter().map(|&id| fingerprint_head(circuits, id)).collect::<Result<Vec<_>>>()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().expect("fingerprint worker panicked")).collect()
        });
        Ok(ModelFingerprint { model: ModelSummary::of(model), mode: mode.name().into(), heads: heads?.concat() })
    }
    #[cfg(target_arch = "wasm32")]
    fingerprint_model_with_progress(model, &grams, mode, &mut |_, _, _| {})
}
