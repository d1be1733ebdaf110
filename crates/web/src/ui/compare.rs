//! The spectral-fingerprint study's table for every model loaded in the session, and a scatter of
//! any spectral feature against any behavioural score across the shown model's heads, with
//! Spearman's ρ.

use leptos::prelude::*;

use super::export::ChartExport;
use super::state::{Ctx, Tab};
use headprint::compare::{ComparisonRow, spearman};
use headprint::figures::metric::Metric;
use headprint::figures::svg::{Point, num, scatter};

/// The spectral-fingerprint study's claimed rows (model, mean QK imaginary fraction, induction
/// heads, prefix-copy accuracy), shown beside what the weights say: claims to test, not facts.
const CLAIMED: [(&str, f64, usize, f64); 4] = [
    ("GPT-2 Small", 0.12, 8, 0.82),
    ("Pythia-1B", 0.18, 15, 0.89),
    ("Llama-2-7B", 0.21, 22, 0.94),
    ("Llama-3-8B", 0.25, 28, 0.96),
];

fn row_view(row: &ComparisonRow) -> impl IntoView + use<> {
    let accuracy = match (row.prefix_copy_accuracy, row.prefix_copy_accuracy_spread) {
        (Some(mean), Some(spread)) if row.sequences.len() > 1 => format!(
            "{:.1}% ± {:.1} (min {:.1}, max {:.1})",
            100.0 * mean,
            100.0 * spread.std,
            100.0 * spread.min,
            100.0 * spread.max
        ),
        (Some(mean), _) => format!("{:.1}%", 100.0 * mean),
        (None, _) => "–".into(),
    };
    view! {
        <tr>
            <td>{row.model.clone()}</td>
            <td class="num">{row.parameters.to_string()}</td>
            <td class="num">{row.heads.to_string()}</td>
            <td class="num">{format!("{:.3}", row.mean_qk_imaginary_fraction)}</td>
            <td class="num">{row.induction_heads.map(|n| n.to_string()).unwrap_or_else(|| "–".into())}</td>
            <td class="num">{accuracy}</td>
            <td class="note">{row.sequence.clone()}</td>
        </tr>
    }
}

fn metric_select(id: &'static str, label: &'static str, signal: RwSignal<Metric>, behavioural: bool) -> impl IntoView {
    view! {
        <label>
            {label}
            <select
                id=id
                on:change=move |ev| {
                    if let Some(m) = Metric::from_key(&event_target_value(&ev)) {
                        signal.set(m);
                    }
                }
            >
                {Metric::ALL
                    .into_iter()
                    .filter(|m| m.behavioural() == behavioural)
                    .map(|m| view! { <option value=m.key() selected=move || signal.get() == m>{m.label()}</option> })
                    .collect_view()}
            </select>
        </label>
    }
}

#[component]
pub fn Compare() -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    let feature = RwSignal::new(Metric::QkImaginary);
    let behaviour = RwSignal::new(Metric::Induction);

    let table = move || {
        let threshold = ctx.threshold.get();
        let mut rows = ctx.compared.get();
        // The shown model's held-out-text row, once that probe has run.
        if let Some(loaded) = ctx.loaded.get()
            && loaded.text_run.is_some()
        {
            rows.push(loaded.comparison(super::state::Sequence::HeldOutText));
        }
        rows.iter().map(|r| row_view(&r.at(threshold))).collect_view()
    };
    let claimed = CLAIMED
        .iter()
        .map(|(model, imaginary, heads, accuracy)| {
            view! {
                <tr class="claimed">
                    <td>{*model}</td>
                    <td class="num">"–"</td>
                    <td class="num">"–"</td>
                    <td class="num">{format!("{imaginary:.2}")}</td>
                    <td class="num">{heads.to_string()}</td>
                    <td class="num">{format!("{:.0}%", 100.0 * accuracy)}</td>
                    <td class="note">"claimed by the spectral-fingerprint study"</td>
                </tr>
            }
        })
        .collect_view();

    let plot = move || {
        let loaded = ctx.loaded.get()?;
        let (mode, sequence, selected) = (ctx.mode.get(), ctx.sequence.get(), ctx.head.get());
        let (x_metric, y_metric) = (feature.get(), behaviour.get());
        let mut xs = Vec::new();
        let mut ys = Vec::new();
        let mut points = Vec::new();
        for head in &loaded.fingerprint(mode)?.heads {
            let id = head.id();
            let scores = loaded.scores(sequence, id);
            let (Some(x), Some(y)) = (x_metric.value(head, scores), y_metric.value(head, scores)) else { continue };
            xs.push(x);
            ys.push(y);
            // κ is skewed over orders of magnitude: plot log10 κ (∞ is left out of the plot, not of ρ).
            let plotted = if x_metric.is_kappa() { x.log10() } else { x };
            points.push(Point {
                x: plotted,
                y,
                label: format!("{id}: {} {}, {} {}", x_metric.label(), num(x), y_metric.label(), num(y)),
                head: id.to_string(),
                highlighted: id == selected,
            });
        }
        let rho = spearman(&xs, &ys);
        let x_name = if x_metric.is_kappa() {
            format!("log10 {} ({} mode)", x_metric.label(), mode.name())
        } else {
            format!("{} ({} mode)", x_metric.label(), mode.name())
        };
        let svg = scatter(&points, &x_name, y_metric.label(), &format!("{} vs {}", x_metric.label(), y_metric.label()));
        let run = loaded.run(sequence).map(|r| r.sequence.clone()).unwrap_or_default();
        let summary = match rho {
            Some(rho) => format!("Spearman's ρ = {rho:+.3} over {} heads (behaviour on {run}).", xs.len()),
            None => {
                format!("Spearman's ρ is undefined here ({} heads with both values, or a constant side).", xs.len())
            }
        };
        Some(view! {
            <p class="rho" id="spearman">{summary}</p>
            <div
                class="chart-scroll"
                id="scatter"
                inner_html=svg.clone()
                on:click=move |ev| {
                    if let Some(id) = ctx.head_clicked(&ev) {
                        ctx.head.set(id);
                        ctx.tab.set(Tab::Head);
                    }
                }
            ></div>
            <ChartExport svg=svg name=format!("{}-vs-{}", x_metric.key(), y_metric.key()) />
        })
    };

    view! {
        <section class="compare">
            <h3>"Models in this session, as in the spectral-fingerprint study's table"</h3>
            <p class="note">
                {move || format!(
                    "Mean QK imaginary fraction over heads (folded); induction heads: mean induction score ≥ {}; prefix-copy accuracy: mean over the same repeated sequences ± their standard deviation (population), with the lowest and highest. Open more models to add rows. The study's own numbers are listed below as claims to test.",
                    ctx.threshold.get(),
                )}
            </p>
            <div class="controls">
                <label>
                    "Induction head threshold "
                    <input
                        id="threshold"
                        type="number"
                        min="0"
                        max="1"
                        step="0.05"
                        prop:value=move || ctx.threshold.get().to_string()
                        on:change=move |ev| {
                            if let Ok(value) = event_target_value(&ev).parse::<f64>()
                                && (0.0..=1.0).contains(&value)
                            {
                                ctx.threshold.set(value);
                            }
                        }
                    />
                </label>
            </div>
            <table class="verdicts" id="compare-table">
                <thead>
                    <tr>
                        <th>"model"</th>
                        <th>"parameters"</th>
                        <th>"heads"</th>
                        <th>"mean QK imaginary fraction"</th>
                        <th>"induction heads"</th>
                        <th>"prefix-copy accuracy"</th>
                        <th>"measured on"</th>
                    </tr>
                </thead>
                <tbody>{table} {claimed}</tbody>
            </table>
            <h3>"Does a spectral feature predict behaviour? (this model, across heads)"</h3>
            <div class="controls">
                {metric_select("scatter-x", "Spectral feature ", feature, false)}
                {metric_select("scatter-y", "Behavioural score ", behaviour, true)}
            </div>
            {plot}
            <super::timeline::TimelineView />
        </section>
    }
}
