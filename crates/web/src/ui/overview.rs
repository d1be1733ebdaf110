//! The layer x head grid coloured by one metric, the same metric as a bar chart.

use leptos::prelude::*;

use std::sync::Arc;

use super::browser::focus_id;
use super::canvas::{CanvasMatrix, DenseMatrix, GRID_CANVAS_HEADS, use_canvas};
use super::export::{ChartExport, ResultsExport};
use super::state::{Ctx, Sequence, Tab};
use headprint::analysis::{HeadFingerprint, HeadId};
use headprint::figures::metric::{ColourScale, Metric};
use headprint::figures::svg::{Bar, bar_chart, legend, num};

fn cell_id(id: HeadId) -> String {
    format!("cell-{id}")
}

#[component]
pub fn Overview() -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    let focused = RwSignal::new(ctx.head.get_untracked());
    let open = move |id: HeadId| {
        ctx.head.set(id);
        ctx.tab.set(Tab::Head);
    };

    let on_key = move |ev: web_sys::KeyboardEvent| {
        let Some(loaded) = ctx.loaded.get_untracked() else { return };
        let (layers, heads) = (loaded.info.config.layers, loaded.info.config.heads);
        let current = focused.get_untracked();
        let next = match ev.key().as_str() {
            "ArrowRight" => HeadId::new(current.layer, (current.head + 1).min(heads - 1)),
            "ArrowLeft" => HeadId::new(current.layer, current.head.saturating_sub(1)),
            "ArrowDown" => HeadId::new((current.layer + 1).min(layers - 1), current.head),
            "ArrowUp" => HeadId::new(current.layer.saturating_sub(1), current.head),
            "Home" => HeadId::new(current.layer, 0),
            "End" => HeadId::new(current.layer, heads - 1),
            _ => return,
        };
        ev.prevent_default();
        focused.set(next);
        focus_id(&cell_id(next));
    };

    view! {
        <section class="overview">
            <div class="controls">
                <label>
                    "Colour by "
                    <select
                        id="metric-select"
                        on:change=move |ev| {
                            if let Some(m) = Metric::from_key(&event_target_value(&ev)) {
                                ctx.metric.set(m);
                            }
                        }
                    >
                        {Metric::ALL
                            .into_iter()
                            .map(|m| {
                                view! {
                                    <option value=m.key() selected=move || ctx.metric.get() == m>
                                        {m.label()}
                                    </option>
                                }
                            })
                            .collect_view()}
                    </select>
                </label>
                <label>
                    "Behaviour measured on "
                    <select
                        id="sequence-select"
                        on:change=move |ev| {
                            if let Some(sequence) = Sequence::from_key(&event_target_value(&ev)) {
                                ctx.sequence.set(sequence);
                            }
                        }
                    >
                        <option value="random" selected=move || ctx.sequence.get() == Sequence::UniformRandom>
                            "uniform random tokens"
                        </option>
                        <option value="text" selected=move || ctx.sequence.get() == Sequence::HeldOutText>
                            "held-out text"
                        </option>
                    </select>
                </label>
                <ResultsExport />
                <p class="note" id="metric-note">
                    {move || {
                        let m = ctx.metric.get();
                        if m.behavioural() {
                            ctx.loaded
                                .get()
                                .and_then(|l| {
                                    l.run(ctx.sequence.get())
                                        .map(|run| match &run.report {
                                            Ok(_) => {
                                                format!(
                                                    "Measured by running the model on {}; the same in raw and folded mode.",
                                                    run.sequence,
                                                )
                                            }
                                            Err(e) => format!("The induction probe on {} failed: {e}", run.sequence),
                                        })
                                })
                                .unwrap_or_default()
                        } else {
                            format!("From the weights alone ({} mode).", ctx.mode.get().name())
                        }
                    }}
                </p>
            </div>
            {move || {
                let loaded = ctx.loaded.get()?;
                let metric = ctx.metric.get();
                let mode = ctx.mode.get();
                let selected = ctx.head.get();
                let config = &loaded.info.config;
                let sequence = ctx.sequence.get();
                let Some(fingerprint) = loaded.fingerprint(mode) else {
                    return Some(
                        view! { <p class="placeholder">"Fingerprinting every head in raw mode…"</p> }.into_any(),
                    );
                };
                let values: Vec<(HeadId, Option<f64>)> = fingerprint
                    .heads
                    .iter()
                    .map(|h| (h.id(), metric.value(h, loaded.scores(sequence, h.id()))))
                    .collect();
                // A circuit that could not be read: its cell says so, and why on hover.
                let errors: Vec<Option<String>> = fingerprint
                    .heads
                    .iter()
                    .map(|h| metric.circuit(h).and_then(|c| c.error.clone()))
                    .collect();
                let finite: Vec<f64> = values.iter().filter_map(|(_, v)| *v).collect();
                let scale = ColourScale::new(metric.scale(), &finite);
                let (stops, lo, hi) = scale.legend();
                let heads = config.heads;
                let dense = use_canvas(config.layers * heads, GRID_CANVAS_HEADS).then(|| {
                    // Many heads: one canvas, same colours as the buttons
                    // (docs/page.md#dense-views-which-charts-are-svg-and-which-are-canvas).
                    let fills = values
                        .iter()
                        .zip(&errors)
                        .map(|((_, v), error)| match (v, error) {
                            (_, Some(_)) => Some([0xfb, 0xe3, 0xe6]),
                            (Some(v), None) => Some(scale.rgb(*v)),
                            (None, None) => Some([0xdd, 0xdd, 0xdd]),
                        })
                        .collect();
                    let label = metric.label().to_string();
                    let cells: Vec<(Option<f64>, Option<String>)> =
                        values.iter().zip(&errors).map(|((_, v), e)| (*v, e.clone())).collect();
                    let bar_label = if metric.is_kappa() { format!("log10 {label}") } else { label.clone() };
                    let tip: super::canvas::Tip = Arc::new(move |layer, head| {
                        let (value, error) = cells.get(layer * heads + head)?;
                        let id = HeadId::new(layer, head);
                        Some(match (value, error) {
                            (_, Some(reason)) => format!("{id} {label}: error: {reason}"),
                            (Some(v), None) if v.is_infinite() => format!("{id} {label}: ∞"),
                            (Some(v), None) => format!("{id} {label}: {v}"),
                            (None, None) => format!("{id} {label}: –"),
                        })
                    });
                    let matrix = DenseMatrix {
                        title: format!("{} per head", metric.label()),
                        rows: (0..config.layers).map(|l| format!("L{l}")).collect(),
                        cols: (0..heads).map(|h| format!("H{h}")).collect(),
                        row_axis: String::new(),
                        fills,
                        scale: scale.bar(&bar_label),
                        marks: Vec::new(),
                        cell: DenseMatrix::cell_for(heads, 720.0, 26.0),
                        tip,
                    };
                    let at = (selected.layer, selected.head);
                    view! {
                        <div id="dense-grid">
                            <CanvasMatrix
                            matrix=Arc::new(matrix)
                            id="head-grid-canvas".to_string()
                            name=format!("{}-grid", metric.key())
                            on_open=Callback::new(move |(layer, head)| open(HeadId::new(layer, head)))
                            focus=at
                            selected=at
                        />
                        </div>
                    }
                });
                let is_dense = dense.is_some();
                // The button grid (small models); a canvas above the threshold.
                let grid = dense.is_none().then(|| {
                    let header = (0..heads)
                        .map(|h| view! { <div class="grid-head">{format!("H{h}")}</div> })
                        .collect_view();
                    let rows = (0..config.layers)
                        .map(|layer| {
                            let cells = (0..heads)
                                .map(|head| {
                                    let id = HeadId::new(layer, head);
                                    let value = values.get(layer * heads + head).and_then(|(_, v)| *v);
                                    let error = errors.get(layer * heads + head).cloned().flatten();
                                    let (fill, ink, text) = match (value, &error) {
                                        (_, Some(_)) => ("#fbe3e6".to_string(), "#8b0f1e", "error".to_string()),
                                        (Some(v), None) => {
                                            let s = scale.swatch(v);
                                            (s.fill, s.ink, num(v))
                                        }
                                        (None, None) => ("#ddd".to_string(), "#333", "–".to_string()),
                                    };
                                    let title = match &error {
                                        Some(reason) => format!("{id} {}: error: {reason}", metric.label()),
                                        None => format!("{id} {}: {text}", metric.label()),
                                    };
                                    let short = if text.len() > 6 { text.chars().take(6).collect() } else { text.clone() };
                                    view! {
                                        <button
                                            class="cell"
                                            class:selected=id == selected
                                            class:failed=error.is_some()
                                            id=cell_id(id)
                                            data-head=id.to_string()
                                            data-value=text.clone()
                                            title=title.clone()
                                            aria-label=title
                                            tabindex=move || if focused.get() == id { "0" } else { "-1" }
                                            style=format!("background:{fill};color:{ink}")
                                            on:focus=move |_| focused.set(id)
                                            on:click=move |_| open(id)
                                        >
                                            {short}
                                        </button>
                                    }
                                })
                                .collect_view();
                            view! {
                                <div class="grid-label">{format!("L{layer}")}</div>
                                {cells}
                            }
                        })
                        .collect_view();
                    view! {
                            <div class="grid-wrap">
                                <div
                                    class="grid"
                                    id="head-grid"
                                    role="grid"
                                    aria-label=format!("{} per head; arrow keys move, Enter opens", metric.label())
                                    style=format!("grid-template-columns: 3em repeat({heads}, minmax(2.6em, 4.2em))")
                                    on:keydown=on_key
                                >
                                    <div class="grid-corner"></div>
                                    {header}
                                    {rows}
                                </div>
                                <div class="legend-wrap" inner_html=legend("grid-scale", &stops, &lo, &hi)></div>
                            </div>
                    }
                });
                // The bars repeat the grid's values; above the canvas threshold they are left out
                // (a thousand SVG bars cost the page a long frame; the canvas gives each value).
                let bar_view = (!is_dense).then(|| {
                    let bars: Vec<Bar> = values
                        .iter()
                        .map(|(id, v)| {
                            let v = v.unwrap_or(f64::NAN);
                            Bar {
                                label: format!("{id} {}: {}", metric.label(), num(v)),
                                value: if v.is_nan() { 0.0 } else { scale.plotted(v) },
                                fill: if v.is_nan() { "#ddd".into() } else { scale.swatch(v).fill },
                                head: id.to_string(),
                                selected: *id == selected,
                            }
                        })
                        .collect();
                    let (axis_lo, axis_hi) = scale.axis();
                    let axis_name = if metric.is_kappa() {
                        format!("log10 {}", metric.label())
                    } else {
                        metric.label().to_string()
                    };
                    let chart = bar_chart(&bars, heads, axis_lo, axis_hi, &axis_name);
                    view! {
                        <h3>{axis_name}</h3>
                        <div
                            class="chart-scroll"
                            id="bar-chart"
                            inner_html=chart.clone()
                            on:click=move |ev| {
                                if let Some(id) = ctx.head_clicked(&ev) {
                                    open(id);
                                }
                            }
                        ></div>
                        <ChartExport svg=chart name=format!("{}-bars", metric.key()) />
                    }
                });
                Some(
                    view! {
                        {is_dense
                            .then(|| {
                                view! {
                                    <p class="note" id="grid-canvas-note">
                                        {format!(
                                            "{} heads, drawn on a canvas: hover or focus a cell for its exact value (the bar chart is left out at this size).",
                                            config.layers * heads,
                                        )}
                                    </p>
                                }
                            })}
                        {dense}
                        {grid}
                        {bar_view}
                        <p class="note">"Click a head (or a bar) to open it; in the grid, arrow keys move and Enter opens."</p>
                    }
                    .into_any(),
                )
            }}
        </section>
    }
}

/// A model loaded while another is shown: its grid as it fills, above the shown model's
/// overview, which stays until the new one's analysis (with its probe) is done.
#[component]
pub fn LoadingPreview() -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    move || {
        let name = ctx.loading.get()?;
        ctx.preview.with(Option::is_some).then(|| {
            view! {
                <section id="loading-preview" class="loading-preview">
                    <h2>{format!("Loading {name}")}</h2>
                    <p class="note">
                        "Its heads as they are fingerprinted; the model below stays shown until the analysis, with its induction probe, is done."
                    </p>
                    <PreviewGrid />
                </section>
            }
        })
    }
}

/// The grid of a model while it is still being fingerprinted: cells fill as heads come.
/// Above the canvas threshold it is a canvas, as the final grid is (a thousand HTML cells
/// rebuilt at every progress report would cost the page a long frame each).
#[component]
pub fn PreviewGrid() -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    move || {
        let preview = ctx.preview.get()?;
        let scale = ColourScale::new(Metric::OvCopying.scale(), &[]);
        let (layers, heads) = (preview.layers, preview.heads);
        // The heads done so far, by grid position.
        let mut done: Vec<Option<&HeadFingerprint>> = vec![None; layers * heads];
        for f in preview.done.iter().filter(|f| f.layer < layers && f.head < heads) {
            done[f.layer * heads + f.head] = Some(f);
        }
        let note = view! {
            <p class="note" id="preview-note">
                {format!("OV copying score, folded: {} of {} heads so far", preview.done.len(), layers * heads)}
            </p>
        };
        if use_canvas(layers * heads, GRID_CANVAS_HEADS) {
            let label = Metric::OvCopying.label();
            let fills = done
                .iter()
                .map(|f| {
                    Some(match f {
                        Some(f) if f.ov.error.is_some() => [0xfb, 0xe3, 0xe6],
                        Some(f) => scale.rgb(f.ov.copying_score),
                        None => [0xee, 0xee, 0xee],
                    })
                })
                .collect();
            let cells: Vec<Option<(f64, Option<String>)>> =
                done.iter().map(|f| f.map(|f| (f.ov.copying_score, f.ov.error.clone()))).collect();
            let tip: super::canvas::Tip = Arc::new(move |layer, head| {
                let id = HeadId::new(layer, head);
                Some(match cells.get(layer * heads + head)? {
                    Some((_, Some(reason))) => format!("{id} {label}: error: {reason}"),
                    Some((v, None)) => format!("{id} {label}: {v}"),
                    None => format!("{id} {label}: not fingerprinted yet"),
                })
            });
            let matrix = DenseMatrix {
                title: format!("{label} per head, so far"),
                rows: (0..layers).map(|l| format!("L{l}")).collect(),
                cols: (0..heads).map(|h| format!("H{h}")).collect(),
                row_axis: String::new(),
                fills,
                scale: scale.bar(label),
                marks: Vec::new(),
                cell: DenseMatrix::cell_for(heads, 720.0, 26.0),
                tip,
            };
            return Some(
                view! {
                    {note}
                    <div id="preview-grid" class="dense-wrap">
                        <CanvasMatrix
                            matrix=Arc::new(matrix)
                            id="preview-grid-canvas".to_string()
                            name="preview-grid".to_string()
                            no_export=true
                        />
                    </div>
                }
                .into_any(),
            );
        }
        let header = (0..heads).map(|h| view! { <div class="grid-head">{format!("H{h}")}</div> }).collect_view();
        let rows = (0..layers)
            .map(|layer| {
                let cells = (0..heads)
                    .map(|head| {
                        let done = done[layer * heads + head];
                        let title = done.and_then(|f| f.ov.error.clone()).unwrap_or_default();
                        let (style, text) = match done {
                            Some(f) if f.ov.error.is_some() => {
                                ("background:#fbe3e6;color:#8b0f1e".to_string(), "error".to_string())
                            }
                            Some(f) => {
                                let s = scale.swatch(f.ov.copying_score);
                                (format!("background:{};color:{}", s.fill, s.ink), num(f.ov.copying_score))
                            }
                            None => ("background:#eee;color:#888".to_string(), "…".to_string()),
                        };
                        view! {
                            <div class="cell pending" style=style title=title>
                                {text}
                            </div>
                        }
                    })
                    .collect_view();
                view! {
                    <div class="grid-label">{format!("L{layer}")}</div>
                    {cells}
                }
            })
            .collect_view();
        Some(
            view! {
                {note}
                <div
                    class="grid"
                    id="preview-grid"
                    style=format!("grid-template-columns: 3em repeat({heads}, minmax(2.6em, 4.2em))")
                >
                    <div class="grid-corner"></div>
                    {header}
                    {rows}
                </div>
            }
            .into_any(),
        )
    }
}
