//! headprint: the spectral fingerprint of every attention head, next to what the head does.
//!
//! Data flows one way: files -> [`weights`] -> [`model`] -> [`analysis`] (circuits, spectra,
//! OV token logits) and [`forward`] -> [`probes`] -> [`compare`], and over a model's
//! checkpoints [`timeline`], and over many models and checkpoints [`sweep`]'s rows; [`backend`] runs the analysis's large products on the CPU or a
//! GPU. Nothing here knows about the browser: [`worker`]'s session answers the page's requests from the core, and the page's crate (`headprint-web`)
//! carries them to and from the browser. The command line is the `headprint-cli` crate.

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
pub mod repeats;
pub mod sweep;
pub mod timeline;
pub mod tokens;
pub mod weights;

pub mod worker;

pub use error::{Error, Result};
