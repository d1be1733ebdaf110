//! headprint: the spectral fingerprint of every attention head, next to what the head does.
//!
//! Data flows one way: files -> [`weights`] -> [`model`] -> [`analysis`] (circuits, spectra,
//! OV token logits) and [`forward`] -> [`probes`]. Nothing here knows about the browser.

pub mod analysis;
pub mod error;
pub mod forward;
pub mod model;
pub mod probes;
pub mod tokens;
pub mod weights;

pub use error::{Error, Result};

/// The page (Leptos, client-side rendering): views over the core above. Browser-only.
#[cfg(target_arch = "wasm32")]
pub mod ui;
