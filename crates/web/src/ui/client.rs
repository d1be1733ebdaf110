//! The page's requests, routed: loads, fingerprints and induction probes are split across the
//! pool (`pool.rs`), a `Forget` goes to every worker, and everything else to the lead, which
//! holds the models (`workers.rs`). After a cancel or a crash, fresh workers load again the
//! model the page shows (its results stay on the page; only the workers' copies are rebuilt).

use std::cell::RefCell;

use super::pool;
use super::workers::{self, Failure, ModelSource};
use headprint::backend::BackendChoice;
use headprint::worker::protocol::{ModelId, Reply, Request};

thread_local! {
    /// The model the page shows, its files and the backend its Grams were asked of: what fresh
    /// workers load again.
    static SHOWN: RefCell<Option<(ModelId, ModelSource, BackendChoice)>> = const { RefCell::new(None) };
}

/// Sends one request (with the files of a `Load`) and waits for the answer.
pub async fn request(request: &Request, files: &ModelSource) -> Result<Reply, Failure> {
    match request.clone() {
        Request::Load { model, names, analyse: true, prepend_bos, backend, .. } => {
            pool::analyse(model, names, files.clone(), prepend_bos, backend).await
        }
        Request::Load { model, names, analyse: false, backend, .. } => {
            pool::open(model, names, files.clone(), false, backend).await.map(|_| Reply::Loaded)
        }
        Request::Fingerprint { model, mode } => pool::fingerprint(model, mode).await,
        Request::Induction { model, sequence, prepend_bos, backend } => {
            pool::induction(model, sequence, prepend_bos, backend).await
        }
        Request::Forget { model } => pool::forget(model).await,
        request => workers::send_to(0, request, files, true, workers::generation()).await,
    }
}

/// Remembers the files of the model the page now shows (to load again after a restart).
pub fn set_shown(model: ModelId, files: ModelSource, backend: BackendChoice) {
    SHOWN.with_borrow_mut(|shown| *shown = Some((model, files, backend)));
    workers::set_reload(reload_shown);
}

/// The shown model's files (to analyse it again, e.g. on another backend).
pub fn shown_files() -> Option<ModelSource> {
    SHOWN.with_borrow(|shown| shown.as_ref().map(|(_, files, _)| files.clone()))
}

/// Stops the pool at once (whatever it is doing), fails every waiting request with `reason`,
/// and starts fresh workers that load the shown model again.
pub fn restart(reason: Failure) {
    workers::stop(reason);
    reload_shown();
}

fn reload_shown() {
    let Some((model, files, backend)) = SHOWN.with_borrow(Clone::clone) else { return };
    wasm_bindgen_futures::spawn_local(async move {
        let names = files.names();
        // A reload cancelled in turn is reloaded by the restart that cancelled it.
        if let Err(e) = pool::open(model, names, files, false, backend).await
            && e != Failure::Cancelled
            && let Some(hooks) = workers::hooks()
        {
            (hooks.on_trouble)(format!("The fresh workers could not load the shown model again: {e}"));
        }
    });
}
