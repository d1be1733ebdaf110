//! The page: Leptos (client-side rendering) over the core. It fetches the demo model on
//! start, analyses it once (fingerprints in both modes, the induction probe), and shows three
//! views: the overview grid, one head, and probes. Local files load through a picker or by
//! drag-and-drop; a failed load shows the core's message and keeps the previous model.

mod browser;
mod head;
mod overview;
mod probes;
pub mod state;
pub mod svg;

use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::prelude::*;

use crate::analysis::Mode;
use state::{Ctx, DEFAULT_MODEL_URL, Tab};

#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
    leptos::mount::mount_to_body(App);
}

/// Loads user files (picker or drop) into the page.
fn load_user_files(ctx: Ctx, files: Vec<web_sys::File>) {
    if files.is_empty() {
        return;
    }
    spawn_local(async move {
        let names: Vec<String> = files.iter().map(|f| f.name()).collect();
        let label = names.join(", ");
        ctx.busy.set(Some(format!("Reading {label}…")));
        let mut read = Vec::with_capacity(files.len());
        for file in &files {
            match browser::read_file(file).await {
                Ok(bytes) => read.push((file.name(), bytes)),
                Err(message) => {
                    ctx.error.set(Some(format!("Could not load {label}: {message}")));
                    ctx.busy.set(None);
                    return;
                }
            }
        }
        state::load(ctx, label, read).await;
    });
}

fn load_default(ctx: Ctx) {
    spawn_local(async move {
        ctx.busy.set(Some(format!("Fetching {DEFAULT_MODEL_URL}…")));
        match browser::fetch_bytes(DEFAULT_MODEL_URL).await {
            Ok(bytes) => {
                let name = DEFAULT_MODEL_URL.rsplit('/').next().unwrap_or(DEFAULT_MODEL_URL).to_string();
                state::load(ctx, name.clone(), vec![(name, bytes)]).await;
            }
            Err(message) => {
                ctx.error.set(Some(format!("Could not fetch the demo model: {message}")));
                ctx.busy.set(None);
            }
        }
    });
}

#[component]
fn App() -> impl IntoView {
    let ctx = Ctx::default();
    provide_context(ctx);
    load_default(ctx);
    let dragging = RwSignal::new(false);

    let tab_button = move |tab: Tab, label: &'static str, id: &'static str| {
        view! {
            <button
                id=id
                role="tab"
                class="tab"
                aria-selected=move || (ctx.tab.get() == tab).to_string()
                class:active=move || ctx.tab.get() == tab
                on:click=move |_| ctx.tab.set(tab)
            >
                {label}
            </button>
        }
    };

    view! {
        <div
            class="app"
            class:dragging=move || dragging.get()
            on:dragover=move |ev| {
                ev.prevent_default();
                dragging.set(true);
            }
            on:dragleave=move |_| dragging.set(false)
            on:drop=move |ev| {
                ev.prevent_default();
                dragging.set(false);
                let files = browser::file_list(ev.data_transfer().and_then(|d| d.files()));
                load_user_files(ctx, files);
            }
        >
            <header>
                <h1>"headprint"</h1>
                <p class="tagline">"The spectral fingerprint of every attention head, next to what the head does."</p>
                <ModelBar />
            </header>
            <nav role="tablist">
                {tab_button(Tab::Overview, "Overview", "tab-overview")}
                {tab_button(Tab::Head, "Head", "tab-head")}
                {tab_button(Tab::Probes, "Probes", "tab-probes")}
                <span class="mode" role="group" aria-label="weights">
                    "Weights: "
                    <button
                        id="mode-folded"
                        class:active=move || ctx.mode.get() == Mode::Folded
                        aria-pressed=move || (ctx.mode.get() == Mode::Folded).to_string()
                        title="LayerNorm weights folded into the reading weights (TransformerLens fold_ln)"
                        on:click=move |_| ctx.mode.set(Mode::Folded)
                    >
                        "Folded"
                    </button>
                    <button
                        id="mode-raw"
                        class:active=move || ctx.mode.get() == Mode::Raw
                        aria-pressed=move || (ctx.mode.get() == Mode::Raw).to_string()
                        title="Weights exactly as stored"
                        on:click=move |_| ctx.mode.set(Mode::Raw)
                    >
                        "Raw"
                    </button>
                </span>
            </nav>
            <main>
                {move || match ctx.loaded.get() {
                    None => {
                        view! {
                            <p class="placeholder">
                                {move || ctx.busy.get().unwrap_or_else(|| "No model loaded.".into())}
                            </p>
                        }
                            .into_any()
                    }
                    Some(_) => {
                        match ctx.tab.get() {
                            Tab::Overview => view! { <overview::Overview /> }.into_any(),
                            Tab::Head => view! { <head::HeadView /> }.into_any(),
                            Tab::Probes => view! { <probes::Probes /> }.into_any(),
                        }
                    }
                }}
            </main>
            <footer>
                "Everything runs in this tab; no file leaves your computer. Drop model files anywhere on the page."
            </footer>
        </div>
    }
}

/// The loaded model's facts, the file picker, the status and error lines.
#[component]
fn ModelBar() -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    view! {
        <section class="model-bar">
            <div class="model-info" id="model-info">
                {move || {
                    ctx.loaded
                        .get()
                        .map(|l| {
                            let c = &l.model.config;
                            let facts = l
                                .model
                                .facts
                                .iter()
                                .map(|(k, v)| view! { <span class="fact">{format!("{k}: {v}")}</span> })
                                .collect_view();
                            let accuracy = match &l.induction {
                                Ok(r) => format!("prefix-copy accuracy {:.0}%", 100.0 * r.prefix_copy_accuracy),
                                Err(_) => String::new(),
                            };
                            view! {
                                <strong id="model-name">{l.name.clone()}</strong>
                                <span>
                                    {format!(
                                        "{} · {} layers × {} heads · d_model {} · d_head {} · vocab {} · {} parameters",
                                        c.family.name(),
                                        c.layers,
                                        c.heads,
                                        c.d_model,
                                        c.d_head,
                                        c.vocab,
                                        l.model.parameter_count,
                                    )}
                                </span>
                                <span>{accuracy}</span>
                                {facts}
                            }
                        })
                }}
            </div>
            <label class="file-button">
                "Open model files…"
                <input
                    id="file-input"
                    type="file"
                    multiple=true
                    accept=".safetensors,.json"
                    on:change=move |ev| {
                        let input: web_sys::HtmlInputElement = event_target(&ev);
                        let files = browser::file_list(input.files());
                        input.set_value("");
                        load_user_files(ctx, files);
                    }
                />
            </label>
            <span class="hint">".safetensors, or several files: config.json, tokenizer.json, shards + index"</span>
            <p class="busy" id="busy" aria-live="polite">
                {move || ctx.busy.get().unwrap_or_default()}
            </p>
            {move || {
                ctx.error
                    .get()
                    .map(|e| {
                        view! {
                            <p class="error" id="load-error" role="alert">
                                {e}
                                <button class="dismiss" on:click=move |_| ctx.error.set(None)>
                                    "×"
                                </button>
                            </p>
                        }
                    })
            }}
        </section>
    }
}
