//! How a GPU failure becomes an error and never a panic: errors inside one step (validation,
//! out of memory) are caught by the step's error scopes ([`Scopes`]); device loss and anything
//! else wgpu reports outside a call's return value is kept by its callbacks ([`Failure`]) and
//! taken by the next step's [`Gpu::check`]. Either way the step returns [`Error::Gpu`], which
//! the caller answers by falling back to the CPU.

use std::sync::{Arc, Mutex};

use super::Gpu;
use crate::{Error, Result};

/// The first error wgpu reported outside a call's return value, until a check takes it.
pub(super) type Failure = Arc<Mutex<Option<String>>>;

/// A new [`Failure`], fed by `device`'s callbacks for errors no scope caught and for its loss.
pub(super) fn watch(device: &wgpu::Device) -> Failure {
    let failure = Failure::default();
    let record = failure.clone();
    device.on_uncaptured_error(Arc::new(move |error: wgpu::Error| remember(&record, error.to_string())));
    let record = failure.clone();
    device.set_device_lost_callback(move |_, message| remember(&record, format!("device lost: {message}")));
    failure
}

impl Gpu {
    /// The first failure wgpu reported since the last check, as an error.
    pub(super) fn check(&self) -> Result<()> {
        match self.failure.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(reason) => Err(Error::Gpu(format!("{}: {reason}", self.adapter))),
            None => Ok(()),
        }
    }

    /// An error naming the adapter, as every GPU error does.
    pub(super) fn error(&self, reason: impl std::fmt::Display) -> Error {
        Error::Gpu(format!("{}: {reason}", self.adapter))
    }
}

/// The validation and out-of-memory error scopes around one step, so that what goes wrong in
/// it is its error.
/// (Pushed out-of-memory first; `invalid` is declared first so that dropping pops in order.)
pub(super) struct Scopes {
    invalid: wgpu::ErrorScopeGuard,
    out_of_memory: wgpu::ErrorScopeGuard,
}

impl Scopes {
    pub(super) fn push(device: &wgpu::Device) -> Scopes {
        let out_of_memory = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let invalid = device.push_error_scope(wgpu::ErrorFilter::Validation);
        Scopes { out_of_memory, invalid }
    }

    pub(super) async fn pop(self, gpu: &Gpu) -> Result<()> {
        let invalid = self.invalid.pop().await;
        let out_of_memory = self.out_of_memory.pop().await;
        match invalid.or(out_of_memory) {
            Some(error) => Err(gpu.error(one_line(&error.to_string()))),
            None => Ok(()),
        }
    }
}

fn remember(slot: &Mutex<Option<String>>, reason: String) {
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    // Keep the first: later errors usually follow from it.
    if slot.is_none() {
        *slot = Some(one_line(&reason));
    }
}

/// wgpu's multi-line error reports as one line, as the CLI and the page show them.
pub(super) fn one_line(text: &str) -> String {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}
