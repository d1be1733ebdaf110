//! Loading a model into the page: the workers open and analyse it, and it becomes the shown one
//! (local files, a model by link, the demo); local files are identified for share links.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use leptos::prelude::*;

use super::client;
use super::state::{Ctx, Identity, Loaded, Origin, Sequence};
use super::workers::{self, Failure, ModelSource};
use headprint::analysis::HeadId;
use headprint::weights::remote::{HUB_ENDPOINT, ModelLink};
use headprint::worker::protocol::{Analysis, LinkSource, Reply, Request};

static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A new name for a model the workers will hold.
pub fn next_model_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Loads and analyses a model in the worker. On failure (or cancel) the page keeps what it had.
pub async fn load(ctx: Ctx, label: String, demo: bool, files: ModelSource) {
    ctx.busy.set(Some(format!("Loading {label}…")));
    ctx.preview.set(None);
    ctx.stalled.set(None);
    ctx.loading.set(Some(label.clone()));
    let id = next_model_id();
    let names = files.names();
    let prepend_bos = ctx.prepend_bos.get_untracked();
    let backend = ctx.backend.get_untracked();
    // Local files are identified for share links in a second worker once the analysis is shown:
    // hashing the whole file beside the analysis would take a core from the pool and delay the
    // grid, and nothing on screen needs the hash before then.
    let identity = RwSignal::new(Identity::Pending);
    let link = files.link.clone();
    let fetched_before = workers::fetched();
    let reply =
        client::request(&Request::Load { model: id, names, analyse: true, prepend_bos, backend, link }, &files).await;
    match reply {
        Ok(Reply::Analysed(analysis)) => {
            let Analysis { info, folded, induction, timings } = *analysis;
            let origin = match (&files.link, &info.link) {
                (Some(source), Some(opened)) => {
                    let hub = (source.hub != HUB_ENDPOINT).then(|| source.hub.clone());
                    Origin::Link { pinned: opened.pinned.clone(), hub, fetched: workers::fetched() - fetched_before }
                }
                _ if demo => Origin::Demo,
                _ => Origin::Local { name: label.clone(), sha256: identity },
            };
            // A model by link is named by its pinned link: the commit it shows.
            let label = match &origin {
                Origin::Link { pinned, .. } => pinned.clone(),
                _ => label,
            };
            let loaded = Loaded {
                id,
                name: label,
                origin,
                info,
                folded,
                raw: None,
                random_run: induction,
                text_run: None,
                probe_bos: prepend_bos,
                timings,
                backend_asked: backend,
            };
            if matches!(loaded.origin, Origin::Local { .. }) {
                leptos::task::spawn_local(identify_files(ctx, files.clone(), identity));
            }
            // Reloads (a restart, another backend) read the commit shown, not the branch.
            let mut files = files;
            if let (Origin::Link { pinned, .. }, Some(source)) = (&loaded.origin, files.link.as_mut()) {
                source.link = pinned.clone();
            }
            show(ctx, loaded, files);
        }
        Ok(_) => ctx.show_failed_load(format!("Could not load {label}: the worker gave an unexpected answer")),
        Err(message) => {
            let kept = ctx.loaded.with_untracked(|l| l.as_ref().map(|l| l.name.clone()));
            let tail = match kept {
                Some(name) => format!(" (still showing {name})"),
                None => String::new(),
            };
            if message == Failure::Cancelled {
                ctx.show_error(format!("Cancelled: {label} was not loaded{tail}."));
            } else {
                ctx.show_failed_load(format!("Could not load {label}: {message}{tail}"));
            }
            // The worker holds nothing for a failed load; nothing to forget.
        }
    }
    ctx.busy.set(None);
    ctx.progress.set(None);
    ctx.preview.set(None);
    ctx.loading.set(None);
}

/// Opens a model by link (`hf:ORG/NAME[@REVISION]`, `url:FOLDER/`, an http(s) folder): each
/// worker of the pool fetches the byte ranges it reads itself. A link that names no model is
/// said on the error line and changes nothing.
pub async fn load_link(ctx: Ctx, text: String) {
    let text = text.trim().to_string();
    if let Err(e) = ModelLink::parse(&text) {
        ctx.show_error(format!("Could not open {text}: {e}"));
        return;
    }
    let source = ModelSource::link(LinkSource { link: text.clone(), hub: ctx.hub.get_untracked(), offline: false });
    load(ctx, text, false, source).await;
}

/// Makes a freshly analysed model the shown one.
fn show(ctx: Ctx, loaded: Loaded, files: ModelSource) {
    let config = &loaded.info.config;
    let linked = ctx.linked_head.get_untracked().and_then(|name| HeadId::parse(&name, config).ok());
    let keep = ctx.head.get_untracked();
    let head = match linked {
        Some(head) => head,
        None if ctx.loaded.with_untracked(Option::is_none)
            || keep.layer >= config.layers
            || keep.head >= config.heads =>
        {
            loaded.best_copier()
        }
        None => keep,
    };
    if let Origin::Local { sha256, .. } = &loaded.origin
        && let Identity::Known(hex) = sha256.get_untracked()
    {
        check_awaited(ctx, &hex);
    }
    if ctx.awaited.with_untracked(Option::is_none) {
        ctx.linked_head.set(None);
    }
    if let Some(previous) = ctx.loaded.get_untracked() {
        leptos::task::spawn_local(async move {
            // Best effort: the worker only frees memory.
            let _ = client::request(&Request::Forget { model: previous.id }, &ModelSource::default()).await;
        });
    }
    client::set_shown(loaded.id, files, loaded.backend_asked);
    let row = loaded.comparison(Sequence::UniformRandom);
    ctx.compared.update(|rows| rows.push(row));
    ctx.head.set(head);
    ctx.loaded.set(Some(Arc::new(loaded)));
    if ctx.error.with_untracked(|e| e.as_ref().is_some_and(|e| e.failed_load)) {
        ctx.error.set(None);
    }
}

/// Computes local files' SHA-256 in the hashing worker; a share link that waits for a file is
/// checked once it is known (if its model is shown by then; else `show` checks it).
async fn identify_files(ctx: Ctx, files: ModelSource, identity: RwSignal<Identity>) {
    let result = workers::identify(&files).await;
    identity.set(match result {
        Ok(hex) => Identity::Known(hex),
        Err(failure) => Identity::Failed(failure.to_string()),
    });
    let shown = ctx.loaded.with_untracked(|l| {
        l.as_ref().is_some_and(|l| matches!(&l.origin, Origin::Local { sha256, .. } if *sha256 == identity))
    });
    if let (true, Identity::Known(hex)) = (shown, identity.get_untracked()) {
        check_awaited(ctx, &hex);
    }
}

/// A share link names a local file by its SHA-256's first digits: the shown file must match.
fn check_awaited(ctx: Ctx, sha256: &str) {
    let Some(awaited) = ctx.awaited.get_untracked() else { return };
    if sha256.starts_with(&awaited.sha256_prefix) {
        ctx.awaited.set(None);
        ctx.linked_head.set(None);
    } else {
        ctx.show_error(format!(
            "The link was made with {} (SHA-256 {}…), but this file's SHA-256 is {}…: it is not the same file.",
            awaited.name,
            awaited.sha256_prefix,
            &sha256[..awaited.sha256_prefix.len().min(sha256.len())]
        ));
    }
}
