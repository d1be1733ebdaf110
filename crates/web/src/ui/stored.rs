//! "Stored models": what the page keeps of models opened by link (`crate::stored`), each with
//! its size and a button to remove it, and the line that says when the browser's storage is full.

use leptos::prelude::*;
use leptos::task::spawn_local;

use super::size;
use crate::stored::indexed_db::{self, StoredModel};

/// The list, hidden while nothing is stored. Refreshed each time the page's writes settle.
#[component]
pub fn StoredModels() -> impl IntoView {
    let models = RwSignal::new(Vec::<StoredModel>::new());
    let pending = RwSignal::new(0usize);
    let full = RwSignal::new(None::<String>);
    let failed = RwSignal::new(None::<String>);
    // A browser without a store for the page (a private window) lists nothing and says nothing:
    // models by link run from the network, keeping nothing.
    let refresh = move || {
        spawn_local(async move {
            if let Ok(list) = indexed_db::list().await {
                models.set(list);
            }
        })
    };
    indexed_db::set_hooks(indexed_db::Hooks {
        on_pending: Box::new(move |count| {
            pending.set(count);
            if count == 0 {
                refresh();
            }
        }),
        on_full: Box::new(move |figures| {
            let used = figures.map_or(String::new(), |usage| {
                format!(" ({} used of the {} it allows this site)", size(usage.used), size(usage.allowed))
            });
            full.set(Some(format!(
                "The browser's storage for this page is full{used}: what is fetched from now on is not kept for offline use, and models by link run from the network. Remove a stored model to make room."
            )));
        }),
    });
    refresh();
    let remove = move |prefix: String| {
        spawn_local(async move {
            match indexed_db::remove(&prefix).await {
                Ok(()) => {
                    full.set(None);
                    failed.set(None);
                }
                Err(reason) => failed.set(Some(format!("Could not remove the stored model: {reason}"))),
            }
            refresh();
        })
    };
    view! {
        {move || {
            full.get().map(|line| view! { <p class="stored-full" id="stored-full" role="status">{line}</p> })
        }}
        {move || failed.get().map(|line| view! { <p class="stored-full" role="status">{line}</p> })}
        <Show when=move || models.with(|m| !m.is_empty())>
            <details class="stored-models" id="stored-models" data-pending=move || pending.get().to_string()>
                <summary>
                    {move || {
                        models.with(|m| {
                            let bytes: f64 = m.iter().map(|s| s.bytes).sum();
                            format!("Stored models: {} ({}), kept for repeat visits and offline use", m.len(), size(bytes))
                        })
                    }}
                </summary>
                <ul>
                    <For each=move || models.get() key=|m| (m.prefix.clone(), m.bytes.to_bits()) let:model>
                        <li data-prefix=model.prefix.clone()>
                            <span class="stored-name">{model.name.clone()}</span>
                            {format!(" — {} ", size(model.bytes))}
                            <button class="small remove-stored" on:click={
                                let prefix = model.prefix.clone();
                                move |_| remove(prefix.clone())
                            }>
                                "Remove"
                            </button>
                        </li>
                    </For>
                </ul>
            </details>
        </Show>
    }
}
