//! Heads over training, in the compare tab: the revisions of one repository by link opened one
//! after the other (each kept in the page's store, as any model by link), lined up by the core's
//! timeline; a slider over the revisions colours the layer x head grid, and a head's line over
//! training stands beside its spectrum at the chosen revision, above the study's table over
//! training.

use std::sync::Arc;

use leptos::prelude::*;
use leptos::task::spawn_local;

use super::client;
use super::loading::next_model_id;
use super::state::{Ctx, Followed};
use super::workers::{Failure, ModelSource};
use headprint::analysis::HeadId;
use headprint::figures::metric::{ColourScale, Metric};
use headprint::figures::svg::{complex_plane, num, series_line};
use headprint::repeats::{Repeats, identity};
use headprint::timeline::{Checkpoint, Measured, Revision, Timeline};
use headprint::weights::remote::ModelLink;
use headprint::worker::protocol::{Analysis, LinkSource, Reply, Request};

/// Opens every revision of `repo` in turn, through the workers as a model by link is opened,
/// and lines them up; a revision that fails keeps its reason on its row. Before a revision is
/// opened, a worker asks the Hub's API for its weights' hashes: a revision whose weights are an
/// earlier revision's is not fetched or computed, and reuses and names that revision's results
/// (the sweep's and the CLI timeline's rule, `headprint::repeats`).
pub async fn follow(ctx: Ctx, repo: String, revisions: Vec<String>) {
    ctx.timeline.set(None);
    let mut checkpoints: Vec<Checkpoint> = Vec::with_capacity(revisions.len());
    // Each revision computed so far by its weights' identity, as its index in `checkpoints`.
    let mut repeats: Repeats<usize> = Repeats::default();
    for (index, revision) in revisions.iter().enumerate() {
        ctx.busy.set(Some(format!(
            "Following {repo} over training: revision {} of {} ({revision})…",
            index + 1,
            revisions.len()
        )));
        let link = format!("{repo}@{revision}");
        let source = LinkSource { link: link.clone(), hub: ctx.hub.get_untracked(), offline: false };
        // When the API cannot say (offline, an older mirror), the revision is opened as before.
        let published =
            match client::request(&Request::Published { link: source.clone() }, &ModelSource::default()).await {
                Ok(Reply::Published(published)) => Some(published),
                Err(Failure::Cancelled) => {
                    ctx.show_error(format!("Cancelled: {repo} was not followed over training."));
                    ctx.busy.set(None);
                    ctx.progress.set(None);
                    return;
                }
                _ => None,
            };
        let weights = identity(published.as_ref());
        if let Some(&earlier) = repeats.earlier(weights.as_deref())
            && let (Some(now), Some(Checkpoint { revision: first, outcome: Ok(measured) })) =
                (&published, checkpoints.get(earlier))
        {
            let mut measured = measured.clone();
            measured.label = format!("{repo}@{}", now.commit);
            let repeating = Revision::repeating(revision, Some(now.commit.clone()), &first.revision);
            checkpoints.push(Checkpoint { revision: repeating, outcome: Ok(measured) });
            continue;
        }
        let model = next_model_id();
        let request = Request::Load {
            model,
            names: Vec::new(),
            analyse: true,
            prepend_bos: ctx.prepend_bos.get_untracked(),
            backend: ctx.backend.get_untracked(),
            link: Some(source.clone()),
        };
        let (revision, outcome) = match client::request(&request, &ModelSource::link(source)).await {
            Ok(Reply::Analysed(analysis)) => {
                let Analysis { info, folded, induction, .. } = *analysis;
                // The workers keep no revision but the shown model; the store keeps its bytes.
                let _ = client::request(&Request::Forget { model }, &ModelSource::default()).await;
                let label = info.link.map_or(link, |l| l.pinned);
                let opened = Revision::opened(revision, Some(&label));
                repeats.keep(weights.as_deref(), checkpoints.len());
                let measured = Measured {
                    label,
                    fingerprint: folded,
                    induction: induction.report.ok(),
                    sequence: induction.sequence,
                };
                (opened, Ok(measured))
            }
            Ok(_) => (Revision::new(revision, None), Err(format!("{link}: the worker gave an unexpected answer"))),
            // Cancel stops the whole timeline, not one revision.
            Err(Failure::Cancelled) => {
                ctx.show_error(format!("Cancelled: {repo} was not followed over training."));
                ctx.busy.set(None);
                ctx.progress.set(None);
                return;
            }
            // The workers' failures name the link already.
            Err(e) => (Revision::new(revision, None), Err(e.to_string())),
        };
        checkpoints.push(Checkpoint { revision, outcome });
    }
    match Timeline::new(&repo, &checkpoints, ctx.threshold.get_untracked()) {
        Ok(timeline) => ctx.timeline.set(Some(Arc::new(Followed { timeline, checkpoints }))),
        Err(e) => ctx.show_error(format!("Could not line up {repo}'s revisions: {e}")),
    }
    ctx.busy.set(None);
    ctx.progress.set(None);
}

/// A labelled text input bound to `value`.
fn text_field(
    id: &'static str,
    label: &'static str,
    placeholder: &'static str,
    value: RwSignal<String>,
) -> impl IntoView {
    view! {
        <label>
            {label}
            <input
                id=id
                type="text"
                placeholder=placeholder
                prop:value=move || value.get()
                on:change=move |ev| value.set(event_target_value(&ev))
            />
        </label>
    }
}

#[component]
pub fn TimelineView() -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    let asked = ctx.timeline_asked.get_untracked();
    let repo = RwSignal::new(asked.as_ref().map(|a| a.0.clone()).unwrap_or_default());
    let revisions = RwSignal::new(asked.map(|a| a.1.join(",")).unwrap_or_default());
    let at = RwSignal::new(0usize);
    let metric = RwSignal::new(Metric::Induction);
    let head = RwSignal::new(None::<HeadId>);
    let start = move |_| {
        if ctx.busy.get_untracked().is_some() {
            ctx.show_error("The page is busy (see the line above); follow the revisions once it is done.".into());
            return;
        }
        let listed: Vec<String> =
            revisions.get_untracked().split(',').map(|r| r.trim().to_string()).filter(|r| !r.is_empty()).collect();
        let text = repo.get_untracked().trim().to_string();
        match ModelLink::parse(&text) {
            Ok(ModelLink::Hub { repo, .. }) if !text.contains('@') && !listed.is_empty() => {
                let repo = format!("hf:{repo}");
                ctx.timeline_asked.set(Some((repo.clone(), listed.clone())));
                at.set(0);
                spawn_local(follow(ctx, repo, listed));
            }
            _ => ctx.show_error(format!(
                "To follow a model over training, give a repository as hf:ORG/NAME (no @) and its revisions, e.g. step0,step1000; not `{text}`"
            )),
        }
    };

    let table = move || {
        let followed = ctx.timeline.get()?;
        let rows = followed
            .timeline
            .revisions
            .iter()
            .zip(&followed.timeline.table)
            .map(|(revision, row)| {
                let step = revision.step.map_or("–".into(), |s| s.to_string());
                let commit = revision.commit.as_deref().map_or("–".to_string(), |c| c[..c.len().min(12)].to_string());
                // A revision not fetched: the Hub publishes the same weights as an earlier one's.
                let same = revision.same_weights_as.clone().map(|earlier| {
                    let title = format!(
                        "The Hub publishes the same weights for {} as for {earlier}: not fetched again, its numbers are {earlier}'s",
                        revision.revision
                    );
                    view! {
                        " "
                        <span class="same-weights" title=title>
                            {format!("= {earlier}")}
                        </span>
                    }
                });
                match (&row.row, &row.error) {
                    (Some(row), _) => view! {
                        <tr class:repeated=revision.same_weights_as.is_some()>
                            <td>{revision.revision.clone()} {same}</td>
                            <td class="num">{step}</td>
                            <td>{commit}</td>
                            <td class="num">{format!("{:.3}", row.mean_qk_imaginary_fraction)}</td>
                            <td class="num">{row.induction_heads.map_or("–".into(), |n| n.to_string())}</td>
                            <td class="num">
                                {row.prefix_copy_accuracy.map_or("–".into(), |a| format!("{:.1}%", 100.0 * a))}
                            </td>
                        </tr>
                    }
                    .into_any(),
                    (None, error) => view! {
                        <tr class="failed">
                            <td>{revision.revision.clone()}</td>
                            <td class="num">{step}</td>
                            <td>{commit}</td>
                            <td colspan="3" class="note">{format!("error: {}", error.clone().unwrap_or_default())}</td>
                        </tr>
                    }
                    .into_any(),
                }
            })
            .collect_view();
        Some(view! {
            <table class="verdicts" id="timeline-table">
                <thead>
                    <tr>
                        <th>"revision"</th>
                        <th>"step"</th>
                        <th>"commit"</th>
                        <th>"mean QK imaginary fraction"</th>
                        <th>"induction heads"</th>
                        <th>"prefix-copy accuracy"</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        })
    };

    let grid = move || {
        let followed = ctx.timeline.get()?;
        let (index, metric) = (at.get().min(followed.checkpoints.len().saturating_sub(1)), metric.get());
        let ids: Vec<HeadId> = followed.timeline.heads.iter().map(|h| HeadId::new(h.layer, h.head)).collect();
        let values: Vec<f64> = ids.iter().filter_map(|&id| followed.value(index, metric, id)).collect();
        let scale = ColourScale::new(metric.scale(), &values);
        let layers = ids.iter().map(|id| id.layer + 1).max().unwrap_or(0);
        let selected = head.get();
        let rows = (0..layers)
            .map(|layer| {
                let cells = ids
                    .iter()
                    .filter(|id| id.layer == layer)
                    .map(|&id| {
                        let value = followed.value(index, metric, id);
                        let (fill, ink, text) = match value {
                            Some(v) => {
                                let swatch = scale.swatch(v);
                                (swatch.fill, swatch.ink, num(v))
                            }
                            None => ("#eee".to_string(), "#555", "–".to_string()),
                        };
                        view! {
                            <td>
                                <button
                                    class="timeline-cell"
                                    class:selected=selected == Some(id)
                                    data-head=id.to_string()
                                    title=format!("{id}: {} {text}", metric.label())
                                    style=format!("background:{fill};color:{ink}")
                                    on:click=move |_| head.set(Some(id))
                                >
                                    {text.clone()}
                                </button>
                            </td>
                        }
                    })
                    .collect_view();
                view! {
                    <tr>
                        <th>{format!("L{layer}")}</th>
                        {cells}
                    </tr>
                }
            })
            .collect_view();
        let names = &followed.timeline.revisions;
        let last = names.len().saturating_sub(1);
        let shown = names
            .get(index)
            .map(|r| match &r.same_weights_as {
                Some(earlier) => format!("{} (= {earlier}: the same weights)", r.revision),
                None => r.revision.clone(),
            })
            .unwrap_or_default();
        Some(view! {
            <div class="controls">
                <label>
                    "Revision "
                    <input
                        id="timeline-slider"
                        type="range"
                        min="0"
                        max=last.to_string()
                        step="1"
                        prop:value=move || at.get().to_string()
                        on:input=move |ev| {
                            if let Ok(value) = event_target_value(&ev).parse::<usize>() {
                                at.set(value);
                            }
                        }
                    />
                </label>
                <span id="timeline-at">{shown}</span>
            </div>
            <table class="timeline-grid" id="timeline-grid">
                <tbody>{rows}</tbody>
            </table>
        })
    };

    let head_panel = move || {
        let followed = ctx.timeline.get()?;
        let id = head.get()?;
        let (index, metric) = (at.get(), metric.get());
        let values: Vec<Option<f64>> = (0..followed.checkpoints.len()).map(|i| followed.value(i, metric, id)).collect();
        let names: Vec<String> = followed.timeline.revisions.iter().map(|r| r.revision.clone()).collect();
        let line = series_line(
            &values,
            &followed.timeline.revisions,
            index,
            metric.label(),
            &format!("{id}: {} over training", metric.label()),
        );
        let measured = followed.checkpoints.get(index)?.outcome.as_ref().ok();
        // The circuit the metric reads, or QK for a behavioural score.
        let spectrum = measured.and_then(|m| m.fingerprint.head(id)).map(|h| {
            let circuit = metric.circuit(h).unwrap_or(&h.qk);
            complex_plane(&circuit.eigenvalues, "#2166ac", true, &format!("{id} at {}", names[index]))
        });
        Some(view! {
            <h4>{format!("{id}: {} over training, and its spectrum at {}", metric.label(), names[index])}</h4>
            <div class="timeline-head">
                <div class="chart-scroll" id="timeline-line" inner_html=line></div>
                <div class="chart-scroll" id="timeline-spectrum" inner_html=spectrum.unwrap_or_default()></div>
            </div>
        })
    };

    view! {
        <h3>"Heads over training"</h3>
        <p class="note">
            "Follow one model over its checkpoints: every revision is opened by link in turn (each kept in this browser's store), fingerprinted and probed; pick a revision with the slider and a head in the grid."
        </p>
        <div class="controls">
            {text_field("timeline-repo", "Repository ", "hf:EleutherAI/pythia-14m", repo)}
            {text_field("timeline-revisions", "Revisions ", "step0,step512,step1000,step143000", revisions)}
            <button id="timeline-run" on:click=start>
                "Follow over training"
            </button>
            <label>
                "Colour by "
                <select
                    id="timeline-metric"
                    on:change=move |ev| {
                        if let Some(m) = Metric::from_key(&event_target_value(&ev)) {
                            metric.set(m);
                        }
                    }
                >
                    {Metric::ALL
                        .into_iter()
                        .map(|m| view! { <option value=m.key() selected=move || metric.get() == m>{m.label()}</option> })
                        .collect_view()}
                </select>
            </label>
        </div>
        {grid}
        {head_panel}
        {table}
    }
}
