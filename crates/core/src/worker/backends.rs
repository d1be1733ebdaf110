//! The backend a request computes on: the CPU, or the GPU device the worker opened for an
//! earlier request and keeps (a device and its compiled kernels are worth keeping).

use crate::backend::{Backend, BackendChoice};

/// The backend for `choice`: the one `kept` if it is the same choice and still what was asked
/// for (a GPU that fell back to the CPU, or an `auto` that found none, is tried anew).
pub(super) async fn kept_backend(kept: &mut Option<(BackendChoice, Backend)>, choice: BackendChoice) -> &mut Backend {
    let keep =
        matches!(kept, Some((was, backend)) if *was == choice && (backend.is_gpu() || choice == BackendChoice::Cpu));
    if !keep {
        *kept = Some((choice, Backend::open_or_cpu(choice).await));
    }
    &mut kept.as_mut().expect("just filled").1
}

/// The backend for `choice`: `cpu` for the CPU (a kept GPU stays kept for the next request
/// that asks for one), else the one [`kept_backend`] gives.
pub(super) async fn backend_for<'a>(
    kept: &'a mut Option<(BackendChoice, Backend)>,
    cpu: &'a mut Backend,
    choice: BackendChoice,
) -> &'a mut Backend {
    match choice {
        BackendChoice::Cpu => cpu,
        other => kept_backend(kept, other).await,
    }
}
