//! Worker answers as signals: a view names what it needs (a request built from other signals),
//! and gets the latest answer. A new request supersedes the old one; a late answer to a
//! superseded request is dropped.

use leptos::prelude::*;
use leptos::task::spawn_local;

use std::sync::atomic::{AtomicU64, Ordering};

use super::client;
use super::state::Ctx;
use super::workers::{Failure, ModelSource};
use headprint::worker::protocol::{Reply, Request};

static NEXT_TICKET: AtomicU64 = AtomicU64::new(1);

/// The answer to `request()` (None while there is nothing to ask or no answer yet),
/// turned into `T` by `read` (which rejects an unexpected reply kind).
pub fn requested<T>(
    request: impl Fn() -> Option<Request> + 'static,
    read: fn(Reply) -> Option<T>,
) -> ReadSignal<Option<Result<T, Failure>>>
where
    T: Send + Sync + 'static,
{
    let answer = RwSignal::new(None::<Result<T, Failure>>);
    let asked = StoredValue::new(0u64);
    Effect::new(move |_| {
        let Some(request) = request() else {
            answer.set(None);
            return;
        };
        let generation = asked.get_value() + 1;
        asked.set_value(generation);
        // A suite, or a head's singular directions read through a large vocabulary, can take
        // long on a big model: the busy line names it, and Cancel stops it.
        let label = match &request {
            Request::Verdicts { suite, head, .. } => Some(format!("Running the suite {} on {head}…", suite.name)),
            Request::Svd { head, .. } => Some(format!("Reading {head}'s singular directions through the vocabulary…")),
            _ => None,
        };
        let running = label.and_then(|label| {
            use_context::<Ctx>().map(|ctx| {
                let ticket = NEXT_TICKET.fetch_add(1, Ordering::Relaxed);
                ctx.running.update(|r| r.push((ticket, label)));
                (ctx, ticket)
            })
        });
        spawn_local(async move {
            let result = client::request(&request, &ModelSource::default()).await.and_then(|reply| {
                read(reply).ok_or_else(|| Failure::Failed("unexpected answer from the worker".into()))
            });
            if let Some((ctx, ticket)) = running {
                ctx.running.try_update(|r| r.retain(|(t, _)| *t != ticket));
            }
            // The view may be gone by now (another tab): then nobody is listening.
            if asked.try_get_value() == Some(generation) {
                answer.try_set(Some(result));
            }
        });
    });
    answer.read_only()
}
