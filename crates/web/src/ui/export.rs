//! Exports: the shown model's results as JSON or CSV, and any chart as SVG or PNG. Files are
//! made in the tab and handed to the browser's download (nothing is sent anywhere).

use leptos::prelude::*;
use leptos::task::spawn_local;

use super::browser::{download_png, download_text};
use super::state::{Ctx, Loaded, Origin, Sequence};
use headprint::analysis::{HeadFingerprint, Mode};
use headprint::figures::metric::Metric;

/// PNG exports are drawn at this multiple of the chart's size (sharp on high-DPI screens).
const PNG_SCALE: f64 = 2.0;

/// A file-name stem from a model and chart name ("nietzsche-char-L2H0-qk").
pub(super) fn stem(model: &str, what: &str) -> String {
    let model = model.trim_end_matches(".safetensors");
    format!("{model}-{what}").chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' { c } else { '-' }).collect()
}

/// Everything the page computed for the model, as one JSON document.
pub fn results_json(loaded: &Loaded) -> Result<String, String> {
    let document = serde_json::json!({
        "model": loaded.name,
        // The files' SHA-256; null for the demo, or while it is still being computed.
        "sha256": loaded.sha256(),
        "config": loaded.info.config,
        "parameters": loaded.info.parameters,
        // What computed the Gram matrices: the CPU, or WebGPU naming its adapter (as the CLI records it).
        "backend": loaded.folded.backend,
        "folded": loaded.folded,
        // null until raw mode has been shown (the worker computes it on demand).
        "raw": loaded.raw,
        // Whether the probes below started with the model's BOS (`bos`, null when it has none).
        "prepend_bos": loaded.probe_bos,
        "bos": loaded.info.bos,
        // For a model by link: the link pinned to its commit, the files' total size, and the
        // bytes the page fetched to load and analyse it.
        "model_link": match &loaded.origin {
            Origin::Link { pinned, fetched, .. } => serde_json::json!({
                "pinned": pinned,
                "bytes_total": loaded.info.link.as_ref().map(|l| l.total_bytes),
                "bytes_fetched": *fetched as u64,
            }),
            _ => serde_json::Value::Null,
        },
        "induction": {
            "uniform_random": loaded.random_run,
            "held_out_text": loaded.text_run,
        },
    });
    serde_json::to_string_pretty(&document).map_err(|e| e.to_string())
}

/// One row per head and mode: every fingerprint metric and the behavioural scores.
pub fn results_csv(loaded: &Loaded) -> String {
    let spectral: Vec<Metric> = Metric::ALL.into_iter().filter(|m| !m.behavioural()).collect();
    let behavioural: Vec<Metric> = Metric::ALL.into_iter().filter(|m| m.behavioural()).collect();
    let mut header = vec!["head".to_string(), "layer".into(), "head_index".into(), "mode".into()];
    header.extend(spectral.iter().map(|m| m.key().to_string()));
    for sequence in [Sequence::UniformRandom, Sequence::HeldOutText] {
        header.extend(behavioural.iter().map(|m| format!("{}-{}", m.key(), sequence.key())));
        header.push(format!("induction-std-{}", sequence.key()));
    }
    header.push("prepend_bos".into());
    let mut lines = vec![header.join(",")];
    let cell =
        |v: Option<f64>| v.map(|v| if v.is_infinite() { "inf".into() } else { format!("{v}") }).unwrap_or_default();
    for mode in [Mode::Folded, Mode::Raw] {
        // Raw mode's rows once it has been computed (shown at least once).
        for head in loaded.fingerprint(mode).map(|f| f.heads.as_slice()).unwrap_or_default() {
            let id = HeadFingerprint::id(head);
            let mut row = vec![id.to_string(), id.layer.to_string(), id.head.to_string(), mode.name().to_string()];
            row.extend(spectral.iter().map(|m| cell(m.value(head, None))));
            for sequence in [Sequence::UniformRandom, Sequence::HeldOutText] {
                let scores = loaded.scores(sequence, id);
                row.extend(behavioural.iter().map(|m| cell(scores.and_then(|s| m.value(head, Some(s))))));
                row.push(cell(scores.and_then(|s| s.spread).map(|s| s.induction_score.std)));
            }
            row.push(loaded.probe_bos.to_string());
            lines.push(row.join(","));
        }
    }
    lines.join("\n") + "\n"
}

/// The JSON and CSV buttons for the shown model.
#[component]
pub fn ResultsExport() -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    let problem = RwSignal::new(None::<String>);
    let save = move |json: bool| {
        let Some(loaded) = ctx.loaded.get_untracked() else { return };
        let result = if json {
            results_json(&loaded).and_then(|text| {
                download_text(&format!("{}.json", stem(&loaded.name, "results")), &text, "application/json")
            })
        } else {
            download_text(&format!("{}.csv", stem(&loaded.name, "heads")), &results_csv(&loaded), "text/csv")
        };
        problem.set(result.err());
    };
    view! {
        <span class="export" role="group" aria-label="export results">
            "Export: "
            <button id="export-json" on:click=move |_| save(true)>"JSON"</button>
            <button id="export-csv" on:click=move |_| save(false)>"CSV"</button>
            {move || problem.get().map(|e| view! { <span class="error-inline">{e}</span> })}
        </span>
    }
}

/// Inline SVG as a file of its own: a standalone SVG needs its namespace (inline SVG in HTML does not).
fn standalone(svg: &str) -> String {
    if svg.contains("xmlns=") {
        svg.to_string()
    } else {
        svg.replacen("<svg ", r#"<svg xmlns="http://www.w3.org/2000/svg" "#, 1)
    }
}

/// SVG and PNG buttons under a chart.
#[component]
pub fn ChartExport(svg: String, name: String) -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    let svg = standalone(&svg);
    let problem = RwSignal::new(None::<String>);
    let file = move |extension: &str| {
        let model = ctx.loaded.get_untracked().map(|l| l.name.clone()).unwrap_or_default();
        format!("{}.{extension}", stem(&model, &name))
    };
    let (svg_for_png, file_for_png) = (svg.clone(), file.clone());
    view! {
        <span class="chart-export">
            <button
                class="small"
                data-export="svg"
                on:click=move |_| problem.set(download_text(&file("svg"), &svg, "image/svg+xml").err())
            >
                "SVG"
            </button>
            <button
                class="small"
                data-export="png"
                on:click=move |_| {
                    let (svg, file) = (svg_for_png.clone(), file_for_png("png"));
                    spawn_local(async move { problem.set(download_png(&file, &svg, PNG_SCALE).await.err()) });
                }
            >
                "PNG"
            </button>
            {move || problem.get().map(|e| view! { <span class="error-inline">{e}</span> })}
        </span>
    }
}
