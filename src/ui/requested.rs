//! Worker answers as signals: a view names what it needs (a request built from other signals),
//! and gets the latest answer. A new request supersedes the old one; a late answer to a
//! superseded request is dropped.

use leptos::prelude::*;
use leptos::task::spawn_local;

use super::client;
use crate::worker::protocol::{Reply, Request};

/// The answer to `request()` (None while there is nothing to ask or no answer yet),
/// turned into `T` by `read` (which rejects an unexpected reply kind).
pub fn requested<T>(
    request: impl Fn() -> Option<Request> + 'static,
    read: fn(Reply) -> Option<T>,
) -> ReadSignal<Option<Result<T, String>>>
where
    T: Send + Sync + 'static,
{
    let answer = RwSignal::new(None::<Result<T, String>>);
    let asked = StoredValue::new(0u64);
    Effect::new(move |_| {
        let Some(request) = request() else {
            answer.set(None);
            return;
        };
        let generation = asked.get_value() + 1;
        asked.set_value(generation);
        spawn_local(async move {
            let result = client::request(&request, &Vec::new())
                .await
                .and_then(|reply| read(reply).ok_or_else(|| "unexpected answer from the worker".to_string()));
            // The view may be gone by now (another tab): then nobody is listening.
            if asked.try_get_value() == Some(generation) {
                answer.try_set(Some(result));
            }
        });
    });
    answer.read_only()
}
