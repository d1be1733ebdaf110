//! The page: Leptos (client-side rendering) over the core. Heavy work runs in the analysis
//! worker (`headprint::worker`), reached through `client`; the page holds only results. It fetches
//! the demo model on start and shows five views: the overview grid, one head, the circuits
//! between heads, probes, and the comparison of every model loaded in the session. The URL holds the view (`link`).

mod browser;
mod canvas;
mod circuits;
mod client;
mod compare;
mod effects;
mod exercises;
mod export;
mod head;
mod link;
mod loading;
mod overview;
mod pick;
mod pool;
mod print;
mod probes;
mod requested;
pub mod state;
mod stored;
mod timeline;
mod workers;

use leptos::prelude::*;
use leptos::task::spawn_local;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use headprint::analysis::Mode;
use headprint::backend::BackendChoice;
use state::{Ctx, DEFAULT_MODEL_URL, Tab};

#[wasm_bindgen(start)]
pub fn start() {
    console_error_panic_hook::set_once();
    crate::webgpu::register();
    // The same wasm also runs in the analysis worker, which has no window and no page.
    if web_sys::window().is_none() {
        return;
    }
    leptos::mount::mount_to_body(App);
}

/// Loads user files (picker or drop) into the page; the worker reads them by byte range.
fn load_user_files(ctx: Ctx, files: Vec<web_sys::File>) {
    if files.is_empty() {
        return;
    }
    let label = match files.iter().find(|f| f.name().ends_with(".safetensors")) {
        Some(weights) if files.len() == 1 => weights.name(),
        Some(weights) => format!("{} (+{} files)", weights.name(), files.len() - 1),
        None => files.iter().map(|f| f.name()).collect::<Vec<_>>().join(", "),
    };
    let named = files.into_iter().map(|f| (f.name(), f.unchecked_into::<web_sys::Blob>())).collect();
    spawn_local(loading::load(ctx, label, false, workers::ModelSource::files(named)));
}

fn load_default(ctx: Ctx) {
    spawn_local(async move {
        ctx.busy.set(Some(format!("Fetching {DEFAULT_MODEL_URL}…")));
        match browser::fetch_blob(DEFAULT_MODEL_URL).await {
            Ok(blob) => {
                let name = DEFAULT_MODEL_URL.rsplit('/').next().unwrap_or(DEFAULT_MODEL_URL).to_string();
                loading::load(ctx, name.clone(), true, workers::ModelSource::files(vec![(name, blob)])).await;
            }
            Err(message) => {
                ctx.show_error(format!("Could not fetch the demo model: {message}"));
                ctx.busy.set(None);
            }
        }
    });
}

/// Connects the worker's progress, memory and trouble reports to the page.
fn connect_worker(ctx: Ctx) {
    workers::set_hooks(workers::Hooks {
        on_progress: Box::new(move |mut progress| {
            // A load fills the preview grid (a raw fingerprint of the shown model does not).
            if ctx.loading.with_untracked(Option::is_some) {
                ctx.preview.update(|preview| state::Preview::update(preview, &mut progress));
            }
            progress.heads.clear();
            ctx.progress.set(Some(progress));
        }),
        on_memory: Box::new(move |bytes| ctx.worker_memory.set(bytes)),
        on_trouble: Box::new(move |message| ctx.show_error(message)),
        on_hashing: Box::new(move |progress| ctx.hashing.set(progress)),
        on_stall: Box::new(move |note| {
            ctx.stalled.update(|stalled| {
                let count = stalled.as_ref().map_or(0, |(count, _)| *count) + 1;
                *stalled = Some((count, note));
            })
        }),
    });
    // Start the worker (and its copy of the wasm) while the demo model downloads.
    workers::warm_up();
}

/// Stops the running work: the analysis worker is replaced when it was busy (the shown model
/// stays), and the hashing worker stops.
fn cancel(ctx: Ctx) {
    let analysing = ctx.busy.get_untracked().is_some()
        || ctx.progress.get_untracked().is_some()
        || ctx.running.with_untracked(|r| !r.is_empty());
    if analysing {
        client::restart(workers::Failure::Cancelled);
    }
    workers::cancel_hashing();
    ctx.progress.set(None);
    ctx.busy.set(None);
    ctx.hashing.set(None);
    ctx.running.set(Vec::new());
}

#[component]
fn App() -> impl IntoView {
    let ctx = Ctx::default();
    provide_context(ctx);
    connect_worker(ctx);
    // A share link sets the view first; then the model it names by link opens, or the demo
    // (also when the link names a local file: the page asks for it and shows the demo meanwhile).
    match link::apply(ctx, &link::current()) {
        link::Opening::Link(model) => spawn_local(loading::load_link(ctx, model)),
        link::Opening::Demo => load_default(ctx),
    }
    // Written only when it changed: `replaceState` with a long prompt's link is not free, and a
    // tab switch reruns this twice with the same link.
    Effect::new(move |written: Option<Option<String>>| {
        let fragment = link::fragment(ctx);
        if let Some(new) = &fragment
            && written.flatten().as_ref() != Some(new)
        {
            link::write(new);
        }
        fragment
    });
    effects::start(ctx);
    let dragging = RwSignal::new(false);

    let tab_button = move |tab: Tab, label: &'static str| {
        view! {
            <button
                id=format!("tab-{}", tab.key())
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
    let mode_button = move |mode: Mode, label: &'static str, title: &'static str| {
        view! {
            <button
                id=format!("mode-{}", mode.name())
                class:active=move || ctx.mode.get() == mode
                aria-pressed=move || (ctx.mode.get() == mode).to_string()
                title=title
                on:click=move |_| ctx.mode.set(mode)
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
                {tab_button(Tab::Overview, "Overview")}
                {tab_button(Tab::Head, "Head")}
                {tab_button(Tab::Circuits, "Circuits")}
                {tab_button(Tab::Probes, "Probes")}
                {tab_button(Tab::Compare, "Compare")}
                <span class="mode" role="group" aria-label="weights">
                    "Weights: "
                    {mode_button(
                        Mode::Folded,
                        "Folded",
                        "LayerNorm weights folded into the reading weights (TransformerLens fold_ln)",
                    )}
                    {mode_button(Mode::Raw, "Raw", "Weights exactly as stored")}
                    <button id="print-view" title="Print this view as a handout, with its share link and QR code" on:click=move |_| print::print_page()>
                        "Print"
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
                            <overview::PreviewGrid />
                        }
                            .into_any()
                    }
                    Some(_) => {
                        match ctx.tab.get() {
                            Tab::Overview => {
                                view! {
                                    <overview::LoadingPreview />
                                    <overview::Overview />
                                }
                                    .into_any()
                            }
                            Tab::Head => view! { <head::HeadView /> }.into_any(),
                            Tab::Circuits => view! { <circuits::Circuits /> }.into_any(),
                            Tab::Probes => view! { <probes::Probes /> }.into_any(),
                            Tab::Compare => view! { <compare::Compare /> }.into_any(),
                        }
                    }
                }}
            </main>
            <print::PrintHandout />
            <footer>
                "Everything runs in this tab; no file leaves your computer. Drop model files anywhere on the page. "
                <span id="worker-memory">
                    {move || ctx.worker_memory.with(workers::Memory::describe)}
                </span>
            </footer>
        </div>
    }
}

/// A file input that loads what the user picks (files, or a whole folder).
fn file_button(ctx: Ctx, id: &'static str, label: &'static str, folder: bool) -> impl IntoView {
    view! {
        <label class="file-button">
            {label}
            <input
                id=id
                type="file"
                multiple=true
                prop:webkitdirectory=folder
                accept=".safetensors,.json"
                on:change=move |ev| {
                    let input: web_sys::HtmlInputElement = event_target(&ev);
                    let files = browser::file_list(input.files());
                    input.set_value("");
                    load_user_files(ctx, files);
                }
            />
        </label>
    }
}

/// How long the worker took for each step of the load (the browser benchmark reads `data-json`).
fn timings(steps: &[headprint::worker::protocol::Timing]) -> impl IntoView + use<> {
    let total: f64 = steps.iter().map(|t| t.ms).sum();
    let json = serde_json::to_string(steps).unwrap_or_default();
    let list = steps.iter().map(|t| view! { <li>{format!("{}: {:.0} ms", t.step, t.ms)}</li> }).collect_view();
    view! {
        <details class="timings" id="timings" data-json=json>
            <summary>{format!("analysed in {:.1} s", total / 1000.0)}</summary>
            <ul>{list}</ul>
        </details>
    }
}

/// A byte count as people read it: kB, MB or GB.
pub(crate) fn size(bytes: f64) -> String {
    match bytes {
        b if b >= 1e9 => format!("{:.2} GB", b / 1e9),
        b if b >= 1e6 => format!("{:.1} MB", b / 1e6),
        b => format!("{:.1} kB", b / 1e3),
    }
}

/// "Open from the Hub or a link": a Hub repository (`hf:ORG/NAME[@REVISION]`) or a web folder
/// in the Hub's layout, fetched by byte range by the workers; Enter or the button opens it.
fn link_field(ctx: Ctx) -> impl IntoView {
    let text = RwSignal::new(String::new());
    let open = move || {
        let link = text.get_untracked();
        if !link.trim().is_empty() {
            spawn_local(loading::load_link(ctx, link));
        }
    };
    view! {
        <form class="link-field" on:submit=move |ev| {
            ev.prevent_default();
            open();
        }>
            <label for="model-link">"Open from the Hub or a link: "</label>
            <input
                id="model-link"
                type="text"
                size="34"
                placeholder="hf:openai-community/gpt2"
                title="hf:ORG/NAME, hf:ORG/NAME@REVISION (a branch such as step1000, a tag or a commit), or a web folder holding config.json and the safetensors files. Only the tensors an analysis reads are fetched; the share link names the commit."
                prop:value=move || text.get()
                on:input=move |ev| text.set(event_target_value(&ev))
            />
            <button id="open-link" type="submit">"Open"</button>
            <span class="hint">"e.g. hf:openai-community/gpt2, hf:EleutherAI/pythia-160m@step1000"</span>
        </form>
    }
}

/// Where the Gram matrices are computed: auto (a hardware GPU through WebGPU when the browser
/// offers one), the GPU (any adapter, software ones too) or the CPU. Changing it analyses the
/// shown model again.
fn backend_setting(ctx: Ctx) -> impl IntoView {
    let choose = move |ev: leptos::ev::Event| {
        let choice = BackendChoice::parse(&event_target_value(&ev)).unwrap_or_default();
        ctx.backend.set(choice);
        let shown = ctx.loaded.get_untracked().filter(|l| l.backend_asked != choice);
        if let (Some(loaded), Some(files), None) = (shown, client::shown_files(), ctx.busy.get_untracked()) {
            let demo = matches!(loaded.origin, state::Origin::Demo);
            spawn_local(loading::load(ctx, loaded.name.clone(), demo, files));
        }
    };
    let chosen = move |choice: BackendChoice| move || ctx.backend.get() == choice;
    view! {
        <label class="setting" title="Where the Gram matrices (the vocabulary-sized products) are computed. Auto uses WebGPU on a hardware GPU and otherwise the CPU; GPU uses any WebGPU adapter, software ones too. Both give the same numbers (to ~1e-9).">
            "Compute on "
            <select id="backend-choice" on:change=choose>
                <option value="auto" prop:selected=chosen(BackendChoice::Auto)>"auto"</option>
                <option value="gpu" prop:selected=chosen(BackendChoice::Gpu)>"GPU (WebGPU)"</option>
                <option value="cpu" prop:selected=chosen(BackendChoice::Cpu)>"CPU"</option>
            </select>
        </label>
    }
}

/// The loaded model's facts, the file pickers, progress with cancel, the status and error lines.
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
                            let c = &l.info.config;
                            let facts = l
                                .info
                                .facts
                                .iter()
                                .map(|(k, v)| view! { <span class="fact">{format!("{k}: {v}")}</span> })
                                .collect_view();
                            let accuracy = match &l.random_run.report {
                                Ok(r) => format!(
                                    "prefix-copy accuracy {:.0}% ± {:.0} over {} sequences",
                                    100.0 * r.prefix_copy_accuracy,
                                    100.0 * r.prefix_copy_accuracy_spread.std,
                                    r.sequences.len()
                                ),
                                Err(_) => String::new(),
                            };
                            let bos = match &l.info.bos {
                                Some(b) => format!("BOS {} (id {}, from {})", b.token, b.id, b.source),
                                None => "no BOS token (character models and models whose config and tokenizer name none)".into(),
                            };
                            let hash = match &l.origin {
                                state::Origin::Local { sha256, .. } => match sha256.get() {
                                    state::Identity::Known(hex) => format!("SHA-256 {}…", &hex[..12.min(hex.len())]),
                                    state::Identity::Pending => "SHA-256: computing…".into(),
                                    state::Identity::Failed(why) => format!("SHA-256 unknown ({why})"),
                                },
                                state::Origin::Demo => "the demo model".into(),
                                state::Origin::Link { pinned, fetched, .. } => {
                                    let source = if pinned.starts_with("hf:") {
                                        "from the Hub, pinned to its commit"
                                    } else {
                                        "from a web folder"
                                    };
                                    let total = l.info.link.as_ref().map_or(0.0, |link| link.total_bytes as f64);
                                    format!("{source}: {} fetched of {}", size(*fetched), size(total))
                                }
                            };
                            let backend = &l.folded.backend;
                            // A GPU asked for and not used, or one that failed, is said aloud;
                            // `auto` finding no hardware GPU is the ordinary case (a tooltip).
                            let note = backend.note.clone().filter(|note| {
                                l.backend_asked == BackendChoice::Gpu || note.starts_with("the GPU failed")
                            });
                            // What ran the probe's forward pass, when a GPU was in play: the
                            // GPU, or the CPU it fell back to (the reason is the tooltip).
                            let probe = &l.random_run.backend;
                            let probe_label = match (probe.name == "gpu", backend.name == "gpu") {
                                _ if l.random_run.report.is_err() => None,
                                (true, _) => Some("probe on WebGPU"),
                                (false, true) => Some("probe on CPU"),
                                (false, false) => None,
                            };
                            let probe_view = probe_label.map(|label| {
                                view! {
                                    <span class="fact" id="probe-backend" title=probe.note.clone().unwrap_or_default()>
                                        {label}
                                    </span>
                                }
                            });
                            let backend_view = view! {
                                <span class="fact" id="model-backend" title=backend.note.clone().unwrap_or_default()>
                                    {
                                        // What the GPU did, when it did: the Grams and every
                                        // layer's products (the probe says its own beside it).
                                        let work = if backend.name == "gpu" { "Grams and products" } else { "Computed" };
                                        match backend.bytes_moved_text() {
                                            Some(moved) => format!("{work} on {} ({moved})", backend.label()),
                                            None => format!("{work} on {}", backend.label()),
                                        }
                                    }
                                </span>
                                {probe_view}
                                {note
                                    .map(|note| {
                                        view! {
                                            <span class="backend-note" id="backend-note" role="status">
                                                {note}
                                            </span>
                                        }
                                    })}
                            };
                            view! {
                                <strong id="model-name">{l.name.clone()}</strong>
                                <span>
                                    {format!(
                                        "{} · {} layers × {} heads · d_model {} · d_head {} · vocab {} · {} parameters",
                                        c.family,
                                        c.layers,
                                        c.heads,
                                        c.d_model,
                                        c.d_head,
                                        c.vocab,
                                        l.info.parameters,
                                    )}
                                </span>
                                <span>{accuracy}</span>
                                <span class="fact" id="model-bos">{bos}</span>
                                <span class="fact" id="model-hash">{hash}</span>
                                {backend_view}
                                {timings(&l.timings)}
                                {facts}
                            }
                        })
                }}
            </div>
            <label class="setting" title="As TransformerLens (prepend_bos=True): probes, patterns and verdict prompts start with the model's BOS token, and positions count from it. Models without a BOS are unaffected.">
                <input
                    id="prepend-bos"
                    type="checkbox"
                    prop:checked=move || ctx.prepend_bos.get()
                    on:change=move |ev| ctx.prepend_bos.set(event_target_checked(&ev))
                />
                " Start sequences with the model's BOS"
            </label>
            {backend_setting(ctx)}
            {file_button(ctx, "file-input", "Open model files…", false)}
            {file_button(ctx, "folder-input", "Open a folder…", true)}
            <span class="hint">".safetensors, or config.json + tokenizer.json + shards + index"</span>
            {link_field(ctx)}
            <stored::StoredModels />
            {move || {
                ctx.awaited
                    .get()
                    .map(|a| {
                        view! {
                            <p class="awaited" id="awaited" role="status">
                                {format!(
                                    "This link shows {} (SHA-256 {}…). Open that file to restore the view; the demo model is shown meanwhile.",
                                    a.name,
                                    a.sha256_prefix,
                                )}
                            </p>
                        }
                    })
            }}
            <div class="busy" id="busy" aria-live="polite">
                {move || ctx.busy.get().unwrap_or_default()}
                {move || {
                    ctx.progress
                        .get()
                        .map(|p| {
                            let fraction = if p.total > 0 { p.done as f64 / p.total as f64 } else { 0.0 };
                            view! {
                                <span class="progress">
                                    <progress id="progress" max="1" value=fraction></progress>
                                    {format!(" {} {:.0}%", p.stage, 100.0 * fraction)}
                                </span>
                            }
                        })
                }}
                {move || {
                    // A stall is never silent: progress stopped for the timeout, and this says
                    // why, while the work it interrupted goes on.
                    let working = ctx.busy.with(Option::is_some) || ctx.progress.with(Option::is_some);
                    ctx.stalled.get().filter(|_| working).map(|(count, note)| {
                        let times = if count > 1 { format!(" ({count} times)") } else { String::new() };
                        view! {
                            <span id="stalled">
                                {format!(" The connection stalled{times}: {note}; asked again for what was missing.")}
                            </span>
                        }
                    })
                }}
                {move || {
                    // A suite's run shows only when nothing bigger is named.
                    ctx.busy
                        .with(Option::is_none)
                        .then(|| ctx.running.with(|r| r.first().map(|(_, label)| label.clone())))
                        .flatten()
                        .map(|label| view! { <span id="running-suite">{label}</span> })
                }}
                {move || {
                    ctx.hashing
                        .get()
                        .map(|p| {
                            let fraction = if p.total > 0 { p.done as f64 / p.total as f64 } else { 0.0 };
                            view! {
                                <span class="progress" id="hashing">
                                    {format!(" {} for the share link {:.0}%", p.stage, 100.0 * fraction)}
                                </span>
                            }
                        })
                }}
                {move || {
                    (ctx.busy.get().is_some()
                        || ctx.progress.get().is_some()
                        || ctx.hashing.get().is_some()
                        || ctx.running.with(|r| !r.is_empty()))
                        .then(|| {
                            view! {
                                <button id="cancel" class="small" on:click=move |_| cancel(ctx)>
                                    "Cancel"
                                </button>
                            }
                        })
                }}
            </div>
            {move || {
                ctx.error
                    .get()
                    .map(|e| {
                        view! {
                            <p class="error" id="load-error" role="alert">
                                {e.text}
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
