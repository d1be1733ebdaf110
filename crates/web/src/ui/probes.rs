//! Running the model: a prompt's attention pattern for one head (induction cells marked),
//! verdict tables for prompt suites, swap pairs side by side, suites loaded and saved as JSON.

use leptos::prelude::*;
use leptos::task::spawn_local;

use super::browser::{download_text, file_list, read_file};
use std::sync::Arc;

use super::canvas::{CanvasMatrix, HEATMAP_CANVAS_TOKENS, attention_matrix, use_canvas};
use super::exercises::Exercises;
use super::export::ChartExport;
use super::head::HeadSelect;
use super::requested::requested;
use super::state::Ctx;
use super::workers::Failure;
use headprint::analysis::HeadId;
use headprint::figures::svg::{attention_legend, heatmap, visible};
use headprint::probes::Suite;
use headprint::probes::exercise::{LINK_LIMIT, link_form};
use headprint::probes::suite::{Attended, Verdict};
use headprint::worker::protocol::{Pattern, Reply, Request};

fn attended(a: &Attended) -> String {
    format!("{} `{}`", a.position, visible(&a.token))
}

/// The shown head's attention pattern on `text`, asked of the worker.
fn pattern_of(ctx: Ctx, text: impl Fn() -> String + 'static) -> ReadSignal<Option<Result<Pattern, Failure>>> {
    requested(
        move || {
            ctx.loaded.get().map(|l| Request::Pattern {
                model: l.id,
                head: ctx.head.get(),
                text: text(),
                prepend_bos: ctx.prepend_bos.get(),
                backend: l.probe_backend(),
            })
        },
        |reply| match reply {
            Reply::Pattern(p) => Some(p),
            _ => None,
        },
    )
}

/// One swap-pair side: a prompt's heatmap with its caption.
#[component]
fn PairSide(id: String, text: String) -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    let shown = text.clone();
    let pattern = pattern_of(ctx, move || shown.clone());
    move || {
        let head = ctx.head.get();
        Some(match pattern.get()? {
            Ok(p) => {
                let svg = heatmap(&p.rows, &p.tokens, &p.marks, None, 480.0, &format!("{id}: {head}"));
                view! {
                    <figure>
                        <div inner_html=svg.clone()></div>
                        <figcaption>{format!("{id}: {text}")} <ChartExport svg=svg name=format!("{head}-{id}") /></figcaption>
                    </figure>
                }
                .into_any()
            }
            Err(e) => view! { <p class="error-inline">{format!("{id}: {e}")}</p> }.into_any(),
        })
    }
}

#[component]
pub fn Probes() -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    let draft = RwSignal::new(ctx.prompt.get_untracked());
    let suite_error = RwSignal::new(None::<String>);

    let run_prompt = move || ctx.prompt.set(draft.get_untracked());

    let prompt_pattern = pattern_of(ctx, move || ctx.prompt.get());
    let prompt_view = move || {
        let head = ctx.head.get();
        Some(match prompt_pattern.get()? {
            Ok(p) => {
                let on_marks: f64 = p.marks.iter().map(|&(q, k)| p.rows[q][k]).sum();
                let queries = p.marks.iter().map(|m| m.0).collect::<std::collections::BTreeSet<_>>().len();
                let summary = if queries > 0 {
                    format!(
                        "{} tokens; induction cells (outlined) hold {:.1}% of the attention of the {queries} queries that have one.",
                        p.tokens.len(),
                        100.0 * on_marks / queries as f64
                    )
                } else {
                    format!("{} tokens; no token repeats, so there are no induction cells.", p.tokens.len())
                };
                let title = format!("{head} attention pattern");
                if use_canvas(p.tokens.len(), HEATMAP_CANVAS_TOKENS) {
                    // A long prompt: one canvas, its colour bar drawn beside the cells.
                    let matrix = Arc::new(attention_matrix(&p, title, 620.0));
                    return Some(
                        view! {
                            <p class="note" id="pattern-summary">{summary}</p>
                            <div id="prompt-heatmap" class="dense-wrap">
                                <CanvasMatrix
                                    matrix=matrix
                                    id="prompt-heatmap-canvas".to_string()
                                    name=format!("{head}-attention")
                                />
                            </div>
                        }
                        .into_any(),
                    );
                }
                let svg = heatmap(&p.rows, &p.tokens, &p.marks, None, 620.0, &title);
                view! {
                    <p class="note" id="pattern-summary">{summary}</p>
                    <div class="chart-scroll" id="prompt-heatmap" inner_html=svg.clone()></div>
                    <div class="legend-wrap" id="prompt-heatmap-scale" inner_html=attention_legend("prompt-heatmap-gradient")></div>
                    <ChartExport svg=svg name=format!("{head}-attention") />
                }
                .into_any()
            }
            Err(e) => view! { <p class="error-inline" id="prompt-error">{e.to_string()}</p> }.into_any(),
        })
    };

    let verdict_rows = requested(
        move || {
            ctx.loaded.get().map(|l| Request::Verdicts {
                model: l.id,
                head: ctx.head.get(),
                suite: ctx.suite.get(),
                prepend_bos: ctx.prepend_bos.get(),
                backend: l.probe_backend(),
            })
        },
        |reply| match reply {
            Reply::Verdicts(rows) => Some(rows),
            _ => None,
        },
    );
    let verdicts = move || {
        // On an exercise sheet the table would give the answers away: each question reveals its own.
        if ctx.suite.with(|s| s.prompts.iter().any(|p| p.question.is_some())) {
            return Some(
                view! {
                    <p class="note" id="verdict-hidden">
                        "An exercise sheet: the verdict table is hidden so it does not give the answers away; each question below reveals its own once answered."
                    </p>
                }
                .into_any(),
            );
        }
        Some(match verdict_rows.get()? {
            Ok(rows) => {
                let body = rows
                    .into_iter()
                    .map(|r| {
                        let query = format!("{} `{}`", r.query_position, visible(&r.query_token));
                        let runner = r.runner_up.as_ref().map(attended).unwrap_or_default();
                        let runner_weight =
                            r.runner_up.as_ref().map(|a| format!("{:.4}", a.weight)).unwrap_or_default();
                        let runner_verdict = r.runner_up.as_ref().map(Attended::labels).unwrap_or_default();
                        let caveat = (!r.caveat.is_empty()).then(|| view! { <p class="note caveat">{r.caveat.clone()}</p> });
                        view! {
                            <tr>
                                <td>{r.id.clone()}</td>
                                <td class="prompt-text" title=r.note.clone()>{visible(&r.text)}</td>
                                <td>{query}</td>
                                <td>{attended(&r.top)}</td>
                                <td class="num">{format!("{:.4}", r.top.weight)}</td>
                                <td>{runner}</td>
                                <td class="num">{runner_weight}</td>
                                <td class="verdict" data-verdict=r.verdict.label() data-also=r.top.also.map(Verdict::label)>
                                    {r.top.labels()}
                                    <span class="runner-verdict">{format!(" (runner-up: {runner_verdict})")}</span>
                                    {caveat}
                                </td>
                            </tr>
                        }
                    })
                    .collect_view();
                view! {
                    <table class="verdicts" id="verdict-table">
                        <thead>
                            <tr>
                                <th>"id"</th>
                                <th>"prompt"</th>
                                <th>"query"</th>
                                <th>"top key"</th>
                                <th>"weight"</th>
                                <th>"runner-up"</th>
                                <th>"weight"</th>
                                <th>"verdict"</th>
                            </tr>
                        </thead>
                        <tbody>{body}</tbody>
                    </table>
                }
                .into_any()
            }
            Err(Failure::Cancelled) => view! {
                <p class="error-inline" id="verdict-error">
                    "Cancelled: the suite was not run. Choose it again to run it."
                </p>
            }
            .into_any(),
            Err(e) => view! { <p class="error-inline" id="verdict-error">{e.to_string()}</p> }.into_any(),
        })
    };

    let pairs = move || {
        let suite = ctx.suite.get();
        if suite.pairs.is_empty() {
            return None;
        }
        let text_of = |id: &str| suite.prompts.iter().find(|p| p.id == id).map(|p| p.text.clone()).unwrap_or_default();
        let figures = suite
            .pairs
            .iter()
            .map(|(a, b)| {
                view! {
                    <div class="pair">
                        <PairSide id=a.clone() text=text_of(a) />
                        <PairSide id=b.clone() text=text_of(b) />
                    </div>
                }
            })
            .collect_view();
        Some(view! {
            <h3>"Swap pairs"</h3>
            <p class="note">"Each pair differs only by swapped words; outlined cells are induction cells."</p>
            <div class="legend-wrap" id="swap-pairs-scale" inner_html=attention_legend("swap-pairs-gradient")></div>
            <div id="swap-pairs">{figures}</div>
        })
    };

    let choose_builtin = move |name: String| {
        if let Some(suite) = Suite::builtin(&name) {
            ctx.suite.set(suite);
            suite_error.set(None);
        }
    };

    let load_suite = move |ev: leptos::ev::Event| {
        let input: web_sys::HtmlInputElement = event_target(&ev);
        let files = file_list(input.files());
        input.set_value("");
        let Some(file) = files.into_iter().next() else { return };
        spawn_local(async move {
            let result = read_file(&file).await.and_then(|bytes| {
                let text = String::from_utf8(bytes).map_err(|_| format!("{}: not UTF-8 text", file.name()))?;
                Suite::from_json(&text).map_err(|e| format!("{}: {e}", file.name()))
            });
            match result {
                Ok(suite) => {
                    ctx.suite.set(suite);
                    suite_error.set(None);
                }
                Err(e) => suite_error.set(Some(e)),
            }
        });
    };

    let save_suite = move |_| {
        let suite = ctx.suite.get_untracked();
        let result = serde_json::to_string_pretty(&suite)
            .map_err(|e| e.to_string())
            .and_then(|json| download_text(&format!("{}.json", suite.name), &json, "application/json"));
        if let Err(e) = result {
            suite_error.set(Some(e));
        }
    };

    let add_prompt = move |_| {
        let text = draft.get_untracked();
        if text.is_empty() {
            return;
        }
        ctx.suite.update(|suite| {
            let n = suite.prompts.len() + 1;
            let mut id = format!("P{n}");
            let mut bump = n;
            while suite.prompts.iter().any(|p| p.id == id) {
                bump += 1;
                id = format!("P{bump}");
            }
            suite.prompts.push(headprint::probes::suite::Prompt {
                id,
                text,
                query: None,
                note: String::new(),
                question: None,
            });
        });
    };

    let written_for = move || {
        let suite = ctx.suite.get();
        let loaded = ctx.loaded.get()?;
        let name = suite.head?;
        let id = HeadId::parse(&name, &loaded.info.config).ok();
        Some(view! {
            <span class="note">
                {format!("Written for {name}. ")}
                {id
                    .map(|id| {
                        view! {
                            <button class="link" on:click=move |_| ctx.head.set(id)>
                                {format!("Use {id}")}
                            </button>
                        }
                    })}
            </span>
        })
    };

    view! {
        <section class="probes">
            <div class="controls">
                <HeadSelect id="probe-head-select" />
            </div>
            <h3>"Prompt"</h3>
            <div class="prompt-editor">
                <textarea
                    id="prompt-input"
                    rows="3"
                    prop:value=move || draft.get()
                    on:input=move |ev| draft.set(event_target_value(&ev))
                    on:keydown=move |ev| {
                        if ev.key() == "Enter" && (ev.ctrl_key() || ev.meta_key()) {
                            ev.prevent_default();
                            run_prompt();
                        }
                    }
                ></textarea>
                <div>
                    <button id="run-prompt" class="primary" on:click=move |_| run_prompt()>
                        "Run"
                    </button>
                    <button id="add-prompt" on:click=add_prompt title="Append this prompt to the suite below">
                        "Add to suite"
                    </button>
                </div>
            </div>
            {prompt_view}
            <h3>"Verdict table"</h3>
            <div class="controls">
                <label>
                    "Suite "
                    <select id="suite-select" on:change=move |ev| choose_builtin(event_target_value(&ev))>
                        {move || {
                            let current = ctx.suite.get().name;
                            let builtin = Suite::BUILTIN.iter().any(|b| *b == current);
                            let mut options: Vec<_> = Suite::BUILTIN
                                .iter()
                                .map(|b| {
                                    view! { <option value=*b selected=current == *b>{*b}</option> }.into_any()
                                })
                                .collect();
                            if !builtin {
                                options
                                    .push(
                                        view! {
                                            <option value="" selected=true>
                                                {format!("{current} (loaded)")}
                                            </option>
                                        }
                                            .into_any(),
                                    );
                            }
                            options
                        }}
                    </select>
                </label>
                <label class="file-button small">
                    "Load suite JSON…"
                    <input id="suite-file" type="file" accept=".json,application/json" on:change=load_suite />
                </label>
                <button id="save-suite" on:click=save_suite>
                    "Save suite JSON"
                </button>
                {written_for}
            </div>
            <p class="note">{move || ctx.suite.get().description}</p>
            {move || {
                let suite = ctx.suite.get();
                (!Suite::BUILTIN.contains(&suite.name.as_str()) && link_form(&suite).is_none())
                    .then(|| {
                        view! {
                            <p class="note" id="sheet-too-long">
                                {format!(
                                    "This suite is too large for a share link (over {LINK_LIMIT} characters compressed): the link leaves it out; share its JSON file (Save suite JSON).",
                                )}
                            </p>
                        }
                    })
            }}
            {move || suite_error.get().map(|e| view! { <p class="error-inline" id="suite-error">{e}</p> })}
            {verdicts}
            <Exercises />
            {pairs}
        </section>
    }
}
