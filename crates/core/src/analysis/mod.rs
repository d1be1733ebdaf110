//! Weight-space analysis: circuits of each head, their spectra and fingerprints, and the
//! OV circuit read as token logits (docs/methods.md#2-circuits-of-one-head to
//! docs/methods.md#4-ov-token-logits).

pub mod circuits;
pub mod composition;
pub mod fingerprint;
pub mod head;
pub mod ov_logits;
pub mod singular;
pub mod spectrum;

pub use circuits::{Circuits, Mode};
pub use composition::{Composition, CompositionKind};
pub use fingerprint::{
    FingerprintStage, HeadFingerprint, ModelFingerprint, ModelSummary, fingerprint_model, fingerprint_stream,
    fingerprint_stream_watched, fingerprint_stream_with,
};
pub use head::HeadId;
pub use ov_logits::OvTokenLogits;
pub use spectrum::{Eigenvalue, Factored, Fingerprint};
