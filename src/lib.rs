//! headprint: the spectral fingerprint of every attention head, next to what the head does.
//!
//! Data flows one way: files -> [`weights`] -> [`model`] -> [`analysis`] (circuits, spectra,
//! OV token logits) and [`forward`] -> [`probes`] -> [`compare`]; [`backend`] runs the analysis's
//! large products on the CPU or a GPU. Nothing here knows about the
//! browser except [`worker`]'s host and [`ui`] (both wasm-only); [`worker`]'s session answers the
//! page's requests from the core.

pub mod analysis;
pub mod backend;
pub mod compare;
pub mod error;
pub mod figures;
pub mod forward;
pub mod link;
pub mod model;
pub mod parallel;
pub mod probes;
pub mod tokens;
pub mod weights;

pub mod worker;

pub use error::{Error, Result};

/// The page (Leptos, client-side rendering): views over the core above. Browser-only.
#[cfg(target_arch = "wasm32")]
pub mod ui;

/// The page's charts are pure strings built from numbers and the files' token texts; compiled
/// natively too, so the tests check what the page draws (its escaping included).
#[cfg(not(target_arch = "wasm32"))]
#[path = "ui/svg.rs"]
pub mod svg;
