//! Circuits between heads (docs/methods.md#8-circuits-between-heads): every writer → reader
//! pair's Q-, K- or V-composition score as a layer×head by layer×head map (a canvas, through
//! `figures::matrix`, as the dense views are), the pairs at or above a ratio to the random
//! baseline as a graph of layers, and one head's writers and readers.

use std::sync::Arc;

use leptos::prelude::*;
use leptos::task::spawn_local;

use super::canvas::{CanvasMatrix, DenseMatrix, Tip};
use super::effects;
use super::export::ChartExport;
use super::state::{CircuitColour, Ctx};
use headprint::analysis::composition::Composition;
use headprint::analysis::{CompositionKind, HeadId};
use headprint::figures::colour::Scale;
use headprint::figures::svg::{GraphEdge, layer_graph, num};

/// The graph draws at most this many edges (the strongest): a large model's thousands of pairs
/// above a low ratio would hide each other.
const MAX_EDGES: usize = 1500;
/// How many writers and readers the selected head lists per kind.
const LISTED: usize = 5;
/// The map's size, about (CSS pixels).
const MAP_PX: f64 = 640.0;

fn kind_label(kind: CompositionKind) -> &'static str {
    match kind {
        CompositionKind::Q => "Q-composition (into the queries)",
        CompositionKind::K => "K-composition (into the keys)",
        CompositionKind::V => "V-composition (into the values)",
    }
}

/// Each kind's edge colour (the graph and the lists).
fn kind_colour(kind: CompositionKind) -> &'static str {
    match kind {
        CompositionKind::Q => "#2166ac",
        CompositionKind::K => "#b2182b",
        CompositionKind::V => "#1b7837",
    }
}

fn upper(kind: CompositionKind) -> String {
    kind.name().to_uppercase()
}

/// Every head, layer-major (the map's rows and columns).
fn heads_of(report: &Composition) -> Vec<HeadId> {
    let (layers, heads) = (report.scores.layers, report.scores.heads);
    (0..layers).flat_map(|l| (0..heads).map(move |h| HeadId::new(l, h))).collect()
}

/// The map: rows the writers, columns the readers, a cell coloured when its writer's layer is
/// earlier (else blank), by score or by ratio to the baseline.
fn composition_map(report: &Arc<Composition>, kind: CompositionKind, colour: CircuitColour) -> DenseMatrix {
    let heads = heads_of(report);
    let base = report.baseline(kind).mean;
    let value = move |score: f64| match colour {
        CircuitColour::Score => score,
        CircuitColour::Ratio => score / base,
    };
    let mut top = 0.0f64;
    let mut cells = Vec::with_capacity(heads.len() * heads.len());
    for &from in &heads {
        for &to in &heads {
            let v = (from.layer < to.layer).then(|| value(report.scores.get(kind, from, to)));
            top = top.max(v.filter(|v| v.is_finite()).unwrap_or(0.0));
            cells.push(v);
        }
    }
    let label = match colour {
        CircuitColour::Score => format!("{}-composition score", upper(kind)),
        CircuitColour::Ratio => format!("{} score / baseline", upper(kind)),
    };
    let scale = Scale::sequential(0.0, top, &label);
    let fills = cells.iter().map(|v| v.map(|v| scale.rgb(v))).collect();
    let names: Vec<String> = heads.iter().map(HeadId::to_string).collect();
    let (tip_report, tip_heads) = (report.clone(), heads.clone());
    let tip: Tip = Arc::new(move |r, c| {
        let (from, to) = (*tip_heads.get(r)?, *tip_heads.get(c)?);
        if from.layer >= to.layer {
            return None;
        }
        let score = tip_report.scores.get(kind, from, to);
        let base = tip_report.baseline(kind).mean;
        Some(format!(
            "{from} → {to}: {}-composition {} ({}× the baseline {})",
            upper(kind),
            num(score),
            num(score / base),
            num(base)
        ))
    });
    DenseMatrix {
        title: format!("{} between every pair of heads ({})", kind_label(kind), report.mode.name()),
        rows: names.clone(),
        cols: names,
        row_axis: "writer (earlier layer)".into(),
        fills,
        scale,
        marks: Vec::new(),
        cell: DenseMatrix::cell_for(heads.len(), MAP_PX, 22.0),
        tip,
    }
}

/// One writer → reader pair in a list.
#[derive(Clone)]
struct Pair {
    head: HeadId,
    score: f64,
    ratio: f64,
}

/// The heads that write into `head`'s `kind` side (`into`), or that it feeds, strongest first.
fn pairs(report: &Composition, kind: CompositionKind, head: HeadId, into: bool) -> Vec<Pair> {
    let base = report.baseline(kind).mean;
    let mut list: Vec<Pair> = heads_of(report)
        .into_iter()
        .filter(|other| if into { other.layer < head.layer } else { other.layer > head.layer })
        .map(|other| {
            let score = if into { report.scores.get(kind, other, head) } else { report.scores.get(kind, head, other) };
            Pair { head: other, score, ratio: score / base }
        })
        .collect();
    list.sort_by(|a, b| b.score.total_cmp(&a.score));
    list.truncate(LISTED);
    list
}

/// The pairs at or above `ratio` of one kind, strongest first, at most [`MAX_EDGES`], and how
/// many there were.
fn edges(report: &Composition, kind: CompositionKind, ratio: f64) -> (Vec<GraphEdge>, usize) {
    let above: Vec<_> = report.ranked(kind).into_iter().take_while(|e| e.ratio >= ratio).collect();
    let strongest = above.first().map_or(1.0, |e| e.ratio);
    let count = above.len();
    let parse = |name: &str| -> Option<(usize, usize)> {
        let (l, h) = name.strip_prefix('L')?.split_once('H')?;
        Some((l.parse().ok()?, h.parse().ok()?))
    };
    let drawn = above
        .into_iter()
        .take(MAX_EDGES)
        .filter_map(|e| {
            Some(GraphEdge {
                from: parse(&e.from)?,
                to: parse(&e.to)?,
                // Width from the threshold (thin) to the strongest pair (thick).
                weight: if strongest > ratio { (e.ratio - ratio) / (strongest - ratio) } else { 1.0 },
                title: format!("{} → {}: {} {} ({}× baseline)", e.from, e.to, upper(kind), num(e.score), num(e.ratio)),
            })
        })
        .collect();
    (drawn, count)
}

/// A list of pairs, each a button that opens its head here.
fn pair_list(ctx: Ctx, list: Vec<Pair>, id: String, ratio: f64) -> impl IntoView {
    if list.is_empty() {
        return view! { <p class="note" id=id>"none"</p> }.into_any();
    }
    let items = list
        .into_iter()
        .map(|p| {
            let strong = p.ratio >= ratio;
            view! {
                <li class:above=strong title=format!("score {} = {}× the baseline", p.score, p.ratio)>
                    <button class="link-button" data-head=p.head.to_string() on:click=move |_| ctx.head.set(p.head)>
                        {p.head.to_string()}
                    </button>
                    {format!(" {} ({}×)", num(p.score), num(p.ratio))}
                </li>
            }
        })
        .collect_view();
    view! { <ol class="pair-list" id=id>{items}</ol> }.into_any()
}

/// The selected head's writers (into its Q, K and V) and readers (whom it feeds), per kind.
fn head_panel(ctx: Ctx, report: &Composition, head: HeadId, ratio: f64) -> impl IntoView + use<> {
    let column = |into: bool| {
        CompositionKind::ALL
            .into_iter()
            .map(|kind| {
                let id = format!("{}-{}", if into { "writers" } else { "readers" }, kind.name());
                let heading = if into {
                    format!("into its {} (writers)", upper(kind))
                } else {
                    format!("through their {} (readers)", upper(kind))
                };
                view! {
                    <div>
                        <h4 style=format!("color:{}", kind_colour(kind))>{heading}</h4>
                        {pair_list(ctx, pairs(report, kind, head, into), id, ratio)}
                    </div>
                }
            })
            .collect_view()
    };
    view! {
        <div id="circuit-head" data-head=head.to_string()>
            <h3>{format!("{head}: who writes into it")}</h3>
            <div class="side-by-side three">{column(true)}</div>
            <h3>{format!("{head}: whom it feeds")}</h3>
            <div class="side-by-side three">{column(false)}</div>
            <p class="note">
                "Score (its ratio to the random baseline); bold at or above the graph's ratio. A head feeds only later layers."
            </p>
        </div>
    }
}

#[component]
pub fn Circuits() -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    // The scores are asked for when the tab is first shown (per model and mode).
    Effect::new(move |_| {
        let mode = ctx.mode.get();
        let Some(loaded) = ctx.loaded.get() else { return };
        let held = ctx.composition.with(|c| c.as_ref().is_some_and(|c| c.model == loaded.id && c.mode == mode));
        if !held {
            spawn_local(effects::ensure_composition(ctx));
        }
    });
    let current = move || {
        let held = ctx.composition.get()?;
        let loaded = ctx.loaded.get()?;
        (held.model == loaded.id && held.mode == ctx.mode.get()).then_some(held.result)
    };

    let controls = view! {
        <div class="controls">
            <label>
                "Kind "
                <select
                    id="circuit-kind"
                    on:change=move |ev| {
                        if let Ok(kind) = CompositionKind::parse(&event_target_value(&ev)) {
                            ctx.circuit_kind.set(kind);
                        }
                    }
                >
                    {CompositionKind::ALL
                        .into_iter()
                        .map(|k| {
                            view! {
                                <option value=k.name() selected=move || ctx.circuit_kind.get() == k>
                                    {kind_label(k)}
                                </option>
                            }
                        })
                        .collect_view()}
                </select>
            </label>
            <label>
                "Colour by "
                <select
                    id="circuit-colour"
                    on:change=move |ev| {
                        if let Some(c) = CircuitColour::from_key(&event_target_value(&ev)) {
                            ctx.circuit_colour.set(c);
                        }
                    }
                >
                    <option value="ratio" selected=move || ctx.circuit_colour.get() == CircuitColour::Ratio>
                        "ratio to the random baseline"
                    </option>
                    <option value="score" selected=move || ctx.circuit_colour.get() == CircuitColour::Score>
                        "score"
                    </option>
                </select>
            </label>
            <label title="The graph draws the pairs whose score is at least this many times the random baseline's mean">
                "Edges at ≥ "
                <input
                    id="circuit-ratio"
                    type="range"
                    min="1"
                    max="10"
                    step="0.1"
                    prop:value=move || ctx.edge_ratio.get().to_string()
                    on:input=move |ev| {
                        if let Ok(r) = event_target_value(&ev).parse::<f64>() {
                            ctx.edge_ratio.set(r);
                        }
                    }
                />
                <span id="circuit-ratio-value">{move || format!(" {}× baseline", num(ctx.edge_ratio.get()))}</span>
            </label>
        </div>
    };

    let body = move || {
        let result = current()?;
        let report = match result {
            Ok(report) => report,
            Err(e) => {
                return Some(
                    view! {
                        <p class="error-inline" id="circuits-error">
                            {format!("No composition scores: {e} ")}
                            <button class="small" id="circuits-again" on:click=move |_| ctx.composition.set(None)>
                                "Compute again"
                            </button>
                        </p>
                    }
                    .into_any(),
                );
            }
        };
        let kind = ctx.circuit_kind.get();
        let base = report.baseline(kind);
        let summary = format!(
            "Baseline (random Gaussian heads of these shapes, {} mode scores): mean {} ± {} (1/√d_model = {}). Computed on {}.",
            report.mode.name(),
            num(base.mean),
            num(base.spread),
            num(base.rms),
            report.backend.label(),
        );
        let map = {
            let report = report.clone();
            move || {
                let chart = Arc::new(composition_map(&report, ctx.circuit_kind.get(), ctx.circuit_colour.get()));
                let heads = heads_of(&report);
                let on_open = Callback::new(move |(_, c): (usize, usize)| {
                    if let Some(&head) = heads.get(c) {
                        ctx.head.set(head);
                    }
                });
                let name = format!("composition-{}", ctx.circuit_kind.get().name());
                view! { <CanvasMatrix matrix=chart id="circuit-map-canvas".to_string() name=name on_open=on_open /> }
            }
        };
        let graph = {
            let report = report.clone();
            move || {
                let (kind, ratio, head) = (ctx.circuit_kind.get(), ctx.edge_ratio.get(), ctx.head.get());
                let (layers, heads) = (report.scores.layers, report.scores.heads);
                let (drawn, count) = edges(&report, kind, ratio);
                let selected = (head.layer < layers && head.head < heads).then_some((head.layer, head.head));
                let title = format!("{} at ≥ {}× baseline ({})", kind_label(kind), num(ratio), report.mode.name());
                let svg = layer_graph(layers, heads, &drawn, kind_colour(kind), selected, &title);
                let caption = match count {
                    0 => format!("No pair reaches {}× the baseline: lower the ratio.", num(ratio)),
                    n if n > drawn.len() => {
                        format!("{n} pairs at ≥ {}× the baseline; the strongest {} drawn.", num(ratio), drawn.len())
                    }
                    n => format!("{n} pairs at ≥ {}× the baseline.", num(ratio)),
                };
                view! {
                    <p class="note" id="circuit-graph-caption" data-edges=count>{caption}</p>
                    <div
                        class="chart-scroll"
                        id="circuit-graph"
                        inner_html=svg.clone()
                        on:click=move |ev| {
                            if let Some(id) = ctx.head_clicked(&ev) {
                                ctx.head.set(id);
                            }
                        }
                    ></div>
                    <ChartExport svg=svg name=format!("composition-graph-{}", kind.name()) />
                }
            }
        };
        let panel = {
            let report = report.clone();
            move || {
                let head = ctx.head.get();
                (head.layer < report.scores.layers && head.head < report.scores.heads)
                    .then(|| head_panel(ctx, &report, head, ctx.edge_ratio.get()))
            }
        };
        Some(
            view! {
                <p class="note" id="circuits-baseline">{summary}</p>
                <div class="circuits-views">
                    <div>
                        <h3>"Every pair: writer (row) → reader (column)"</h3>
                        <div id="circuit-map">{map}</div>
                    </div>
                    <div>
                        <h3>"Pairs above the baseline, as a graph of layers"</h3>
                        {graph}
                    </div>
                </div>
                {panel}
            }
            .into_any(),
        )
    };

    view! {
        <section class="circuits-view">
            {controls}
            <p class="note">
                "How much each head's output is read by a later head's queries (Q), keys (K) or values (V): ‖W_OV¹ M²‖_F / (‖W_OV¹‖_F ‖M²‖_F), from the weights alone (docs/methods.md, section 8). A previous-token head K-composing with an induction head is the classic pair. Click a cell or a node to see a head's writers and readers."
            </p>
            {move || {
                current()
                    .is_none()
                    .then(|| view! { <p class="placeholder" id="circuits-waiting">"Computing composition scores…"</p> })
            }}
            {body}
        </section>
    }
}
