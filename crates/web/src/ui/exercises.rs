//! Exercise sheets: each question is answered first, then the page reveals what the model
//! does (the attention, the induction score against the threshold, the OV row) and keeps the
//! score. Checking is the core's (`probes::exercise`); this file asks the worker and draws.

use std::collections::BTreeMap;

use leptos::prelude::*;

use super::pick::{activates, cell_of};
use super::requested::requested;
use super::state::{Ctx, Sequence};
use headprint::analysis::HeadId;
use headprint::figures::svg::{attention_legend, heatmap, key_picker, visible};
use headprint::probes::Suite;
use headprint::probes::exercise::{Answer, Score};
use headprint::probes::question::Question;
use headprint::probes::suite::{Prompt, VerdictRow};
use headprint::worker::protocol::{Reply, Request, Scored};

/// How many promoted tokens an OV question reveals.
const OV_TOP: usize = 5;

/// The answer grid's and the revealed heatmap's size, about (pixels).
const PICKER_PX: f64 = 360.0;

/// What the model does, as the reveal shows it.
#[derive(Clone)]
enum Truth {
    Attend(VerdictRow),
    Induction { score: f64, threshold: f64 },
    Ov(Vec<Scored>),
}

impl Truth {
    fn answer(&self) -> Result<Answer, String> {
        match self {
            Truth::Attend(row) => Ok(Answer::attended(row)),
            Truth::Induction { score, threshold } => Ok(Answer::induction(*score, *threshold)),
            Truth::Ov(promotes) => Answer::promoted(promotes).map_err(|e| e.to_string()),
        }
    }

    fn reveal(&self) -> String {
        match self {
            Truth::Attend(row) => format!(
                "The query {} `{}` attends most to {} `{}` (weight {:.4}, {}).",
                row.query_position,
                visible(&row.query_token),
                row.top.position,
                visible(&row.top.token),
                row.top.weight,
                row.top.labels()
            ),
            Truth::Induction { score, threshold } => format!(
                "Its mean induction score is {score:.3}; the threshold is {threshold}: {}.",
                if score >= threshold { "an induction head" } else { "not an induction head" }
            ),
            Truth::Ov(promotes) => format!(
                "It promotes most: {}.",
                promotes.iter().map(|(t, v)| format!("`{}` {v:+.4}", visible(t))).collect::<Vec<_>>().join(", ")
            ),
        }
    }
}

/// The sheet's questions and the score; shown when the suite has any.
#[component]
pub fn Exercises() -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    // Outcomes by prompt id, for the sheet shown (a new sheet starts a new score).
    let outcomes = RwSignal::new(BTreeMap::<String, bool>::new());
    Effect::new(move |_| {
        ctx.suite.track();
        outcomes.set(BTreeMap::new());
    });
    move || {
        let suite: Suite = ctx.suite.get();
        let asked: Vec<(Prompt, Question)> =
            suite.prompts.iter().filter_map(|p| p.question.clone().map(|q| (p.clone(), q))).collect();
        if asked.is_empty() {
            return None;
        }
        let questions = asked.len();
        let items = asked
            .into_iter()
            .map(|(prompt, question)| view! { <Exercise prompt=prompt question=question outcomes=outcomes /> })
            .collect_view();
        Some(view! {
            <h3>"Exercises"</h3>
            <p class="note">"Answer each question first; checking runs the model and reveals what it does."</p>
            <ol class="exercises" id="exercises">{items}</ol>
            <p class="score" id="exercise-score">
                {move || format!("Score: {}", Score::tally(questions, outcomes.get().into_values()).summary())}
            </p>
        })
    }
}

#[component]
fn Exercise(prompt: Prompt, question: Question, outcomes: RwSignal<BTreeMap<String, bool>>) -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    let id = prompt.id.clone();
    let head_name = question.head().to_string();
    let head = move || {
        let loaded = ctx.loaded.get()?;
        Some(HeadId::parse(&head_name, &loaded.info.config).map_err(|e| e.to_string()))
    };
    let head = Memo::new(move |_| head());
    let draft = RwSignal::new(String::new());
    let given = RwSignal::new(None::<Answer>);

    // The attention question's truth: the verdict row of this prompt alone, for the question's head.
    let one_prompt = Suite {
        name: format!("exercise {id}"),
        description: String::new(),
        head: None,
        prompts: vec![Prompt { question: None, ..prompt.clone() }],
        pairs: Vec::new(),
    };
    let attend = matches!(question, Question::Attend { .. });
    let pattern_text = prompt.text.clone();
    let verdict = requested(
        move || {
            if !attend {
                return None;
            }
            let head = head.get()?.ok()?;
            let loaded = ctx.loaded.get()?;
            Some(Request::Verdicts {
                model: loaded.id,
                head,
                suite: one_prompt.clone(),
                prepend_bos: ctx.prepend_bos.get(),
                backend: loaded.probe_backend(),
            })
        },
        |reply| match reply {
            Reply::Verdicts(mut rows) if !rows.is_empty() => Some(rows.swap_remove(0)),
            _ => None,
        },
    );
    let after = match &question {
        Question::OvTop { after, .. } => Some(after.clone()),
        _ => None,
    };
    let ov_row = requested(
        move || {
            let head = head.get()?.ok()?;
            after.clone().and_then(|token| {
                Some(Request::Row { model: ctx.loaded.get()?.id, mode: ctx.mode.get(), head, token, top: OV_TOP })
            })
        },
        |reply| match reply {
            Reply::Row { promotes, .. } => Some(promotes),
            _ => None,
        },
    );
    let kind = question.clone();
    let truth = move || -> Option<Result<Truth, String>> {
        let head = match head.get()? {
            Ok(head) => head,
            Err(e) => return Some(Err(e)),
        };
        Some(match &kind {
            Question::Attend { .. } => verdict.get()?.map(Truth::Attend).map_err(|e| e.to_string()),
            Question::Induction { .. } => {
                let loaded = ctx.loaded.get()?;
                loaded
                    .scores(Sequence::UniformRandom, head)
                    .map(|s| Truth::Induction { score: s.induction_score, threshold: ctx.threshold.get() })
                    .ok_or_else(|| "the induction probe has no score for this head".to_string())
            }
            Question::OvTop { .. } => ov_row.get()?.map(Truth::Ov).map_err(|e| e.to_string()),
        })
    };
    let truth = Signal::derive(truth);

    let check_id = id.clone();
    let check = move |answer: Answer| {
        let Some(Ok(truth)) = truth.get_untracked() else { return };
        if let Ok(right) = truth.answer().and_then(|t| answer.matches(&t).map_err(|e| e.to_string())) {
            outcomes.update(|o| {
                o.insert(check_id.clone(), right);
            });
            given.set(Some(answer));
        }
    };

    // The answer's control: positions of the prompt (attention), yes/no, or a token.
    let input = {
        let check = check.clone();
        let question = question.clone();
        move || -> AnyView {
            if given.get().is_some() {
                return ().into_any();
            }
            let check = check.clone();
            match &question {
                Question::Attend { head } => match verdict.get() {
                    Some(Ok(row)) => {
                        // The prompt's grid without weights: the student clicks (or tabs to
                        // and presses Enter on) the key they predict; the query's row holds the choices.
                        let svg = key_picker(
                            &row.tokens,
                            row.query_position,
                            PICKER_PX,
                            &format!("Choose the key {head} attends to most from query {}", row.query_position),
                        );
                        let by_key = check.clone();
                        view! {
                            <p class="note">
                                {format!(
                                    "Click the key you predict in row {} (or Tab to it and press Enter).",
                                    row.query_position,
                                )}
                            </p>
                            <div
                                class="chart-scroll answer-heatmap"
                                inner_html=svg
                                on:click=move |ev| {
                                    if let Some((_, key)) = cell_of(&ev) {
                                        check(Answer::Position(key));
                                    }
                                }
                                on:keydown=move |ev| {
                                    if activates(&ev)
                                        && let Some((_, key)) = cell_of(&ev)
                                    {
                                        by_key(Answer::Position(key));
                                    }
                                }
                            ></div>
                        }
                        .into_any()
                    }
                    _ => ().into_any(),
                },
                Question::Induction { .. } => {
                    let no = check.clone();
                    view! {
                        <button class="answer-yes" on:click=move |_| check(Answer::YesNo(true))>"Yes"</button>
                        <button class="answer-no" on:click=move |_| no(Answer::YesNo(false))>"No"</button>
                    }
                    .into_any()
                }
                Question::OvTop { .. } => view! {
                    <input
                        class="answer-token"
                        type="text"
                        size="4"
                        placeholder="token"
                        on:input=move |ev| draft.set(event_target_value(&ev))
                    />
                    <button
                        class="check"
                        on:click=move |_| {
                            let token = draft.get_untracked();
                            if !token.is_empty() {
                                check(Answer::Token(token));
                            }
                        }
                    >
                        "Check"
                    </button>
                }
                .into_any(),
            }
        }
    };

    let outcome_id = id.clone();
    let reveal = move || {
        let answer = given.get()?;
        let right = outcomes.get().get(&outcome_id).copied()?;
        let shown = match &answer {
            Answer::Position(p) => format!("key {p}"),
            Answer::YesNo(yes) => (if *yes { "yes" } else { "no" }).to_string(),
            Answer::Token(t) => format!("`{}`", visible(t)),
        };
        let truth = truth.get().and_then(Result::ok)?;
        Some(view! {
            <p class="reveal" class:right=right class:wrong=!right>
                <strong>{if right { "Right" } else { "Wrong" }}</strong>
                {format!(" (you answered {shown}). {}", truth.reveal())}
            </p>
        })
    };
    // Once answered, an attention question shows the head's real pattern on the prompt, the
    // query's row boxed.
    let attention_head = head;
    let revealed_pattern = requested(
        move || {
            if !attend || given.get().is_none() {
                return None;
            }
            let loaded = ctx.loaded.get()?;
            Some(Request::Pattern {
                model: loaded.id,
                head: attention_head.get()?.ok()?,
                text: pattern_text.clone(),
                prepend_bos: ctx.prepend_bos.get(),
                backend: loaded.probe_backend(),
            })
        },
        |reply| match reply {
            Reply::Pattern(p) => Some(p),
            _ => None,
        },
    );
    // Every attention legend has the same colours, so ids that differ only in dropped characters
    // may share a gradient harmlessly.
    let gradient = format!("reveal-{}", id.chars().filter(char::is_ascii_alphanumeric).collect::<String>());
    let revealed_heatmap = move || {
        let pattern = revealed_pattern.get()?.ok()?;
        let query = verdict.get()?.ok()?.query_position;
        let head = attention_head.get()?.ok()?;
        let svg =
            heatmap(&pattern.rows, &pattern.tokens, &[], Some(query), PICKER_PX, &format!("{head} attention pattern"));
        Some(view! {
            <div class="chart-scroll revealed-heatmap" inner_html=svg></div>
            <div class="legend-wrap" inner_html=attention_legend(&gradient)></div>
        })
    };
    let problem = move || match truth.get() {
        Some(Err(e)) => Some(view! { <p class="error-inline">{e}</p> }),
        _ => None,
    };
    let note = (!prompt.note.is_empty()).then(|| prompt.note.clone());
    view! {
        <li class="exercise" data-id=id.clone()>
            <p>
                <span class="prompt-text">{visible(&prompt.text)}</span>
                " — "
                {question.text()}
            </p>
            <div class="answer">{input}</div>
            {problem}
            {reveal}
            {revealed_heatmap}
            {move || given.get().and(note.clone()).map(|n| view! { <p class="note">{n}</p> })}
        </li>
    }
}
