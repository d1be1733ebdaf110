//! One head: QK (residual and token space) and OV spectra in the complex plane, every
//! fingerprint metric explained, OV self-copy logits (raw and normalised), pair lookup and what
//! a token promotes. A circuit that could not be read says why instead of showing numbers.

use leptos::prelude::*;

use std::sync::Arc;

use super::canvas::{CanvasMatrix, ov_matrix};
use super::export::ChartExport;
use super::requested::requested;
use super::state::Ctx;
use headprint::analysis::ov_logits::MATRIX_MAX;
use headprint::analysis::singular::{CircuitSvd, Direction, HeadSvd, Readout};
use headprint::analysis::{Fingerprint, HeadId};
use headprint::figures::svg::{complex_plane, num, signed, visible};
use headprint::model::Positions;
use headprint::worker::protocol::{Reply, Request, Scored};

const TOP: usize = 15;
/// Vocabularies up to this size open the OV matrix on every token (the demo's 84 characters).
const MATRIX_ALL_UP_TO: usize = 128;
/// The OV matrix's k: default and the control's range.
const MATRIX_K: usize = 64;
const MATRIX_K_MIN: usize = 8;
const MATRIX_K_MAX: usize = 512;
const ROW_TOP: usize = 8;
/// Tokens at each end of a singular direction's readout.
const SVD_TOKENS: usize = 6;

/// A metric's name, its one-line explanation and how to read it from a fingerprint.
type MetricRow = (&'static str, &'static str, Box<dyn Fn(&Fingerprint) -> String>);

/// One entry of a bar list: token, value, bar length in [0, 1].
fn bar_list(items: Vec<Scored>, id: &'static str) -> impl IntoView {
    let max = items.iter().map(|(_, v)| v.abs()).filter(|v| v.is_finite()).fold(0.0, f64::max);
    let rows = items
        .into_iter()
        .map(|(token, v)| {
            let width = if max > 0.0 { 100.0 * v.abs() / max } else { 0.0 };
            let class = if v >= 0.0 { "bar pos" } else { "bar neg" };
            view! {
                <li title=format!("{}: {v:.6}", visible(&token))>
                    <span class="tok">{visible(&token)}</span>
                    <span class="bar-track">
                        <span class=class style=format!("width:{width:.1}%")></span>
                    </span>
                    <span class="val">{signed(v)}</span>
                </li>
            }
        })
        .collect_view();
    view! { <ol class="bar-list" id=id>{rows}</ol> }
}

fn kappa(f: &Fingerprint) -> String {
    match f.eigenvector_condition {
        Some(k) => num(k),
        None => "∞ (defective)".into(),
    }
}

/// A readout's tokens: `top` (and `bottom`, for a lone direction) with their values.
fn readout_view(readout: Option<Readout>, side: &'static str) -> impl IntoView {
    let Some(readout) = readout else {
        return view! { <span class="note">"—"</span> }.into_any();
    };
    let tokens = |list: &[headprint::analysis::singular::TokenValue]| {
        list.iter()
            .map(|t| view! { <span class="svd-token" title=format!("id {}: {}", t.id, t.value)>{visible(&t.token)}</span> })
            .collect_view()
    };
    let top_label = if readout.signed { "+ " } else { "span " };
    let bottom = (!readout.bottom.is_empty()).then(|| {
        view! {
            <div class="svd-end">
                <span class="svd-sign">"− "</span>
                {tokens(&readout.bottom)}
            </div>
        }
    });
    view! {
        <div class="svd-readout" data-side=side title=format!("through {}", readout.through)>
            <div class="svd-end">
                <span class="svd-sign">{top_label}</span>
                {tokens(&readout.top)}
            </div>
            {bottom}
        </div>
    }
    .into_any()
}

/// One block of directions: its indices and values, degenerate or null, and its tokens.
fn direction_row(direction: Direction) -> impl IntoView {
    let indices = match direction.indices.as_slice() {
        [i] => format!("{}", i + 1),
        [first, .., last] => format!("{}–{}", first + 1, last + 1),
        [] => String::new(),
    };
    let values = direction.singular_values.iter().map(|v| num(*v)).collect::<Vec<_>>().join(", ");
    let tag = if direction.null {
        "null: not read out"
    } else if direction.degenerate {
        "degenerate: read as a subspace"
    } else {
        ""
    };
    let class = if direction.null {
        "block null"
    } else if direction.degenerate {
        "block degenerate"
    } else {
        "block"
    };
    view! {
        <tr class=class>
            <td>{indices}</td>
            <td>{values}</td>
            <td class="svd-tag">{tag}</td>
            <td>{readout_view(direction.input, "input")}</td>
            <td>{readout_view(direction.output, "output")}</td>
        </tr>
    }
}

/// One circuit's singular values (bars, each block shaded in turn) and its blocks' tokens.
fn circuit_svd_view(
    circuit: CircuitSvd,
    id: &'static str,
    title: &'static str,
    sides: (&'static str, &'static str),
) -> impl IntoView {
    let top = circuit.singular_values.first().copied().filter(|v| *v > 0.0).unwrap_or(1.0);
    let block_of: Vec<usize> = (0..circuit.singular_values.len())
        .map(|i| circuit.blocks.iter().position(|b| b.contains(&i)).unwrap_or(0))
        .collect();
    let bars = circuit
        .singular_values
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let class = if block_of[i].is_multiple_of(2) { "sv-bar even" } else { "sv-bar odd" };
            view! {
                <span
                    class=class
                    title=format!("σ{} = {v} (block {})", i + 1, block_of[i] + 1)
                    style=format!("height:{:.1}%", 100.0 * v / top)
                ></span>
            }
        })
        .collect_view();
    let rows = circuit.directions.into_iter().map(direction_row).collect_view();
    view! {
        <div class="svd-circuit" id=id>
            <h4>{title}</h4>
            <div class="sv-bars" aria-label="singular values, largest first">{bars}</div>
            <table class="svd-blocks">
                <thead>
                    <tr>
                        <th>"#"</th>
                        <th>"σ"</th>
                        <th></th>
                        <th>{sides.0}</th>
                        <th>{sides.1}</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
        </div>
    }
}

/// Both circuits' singular directions.
fn svd_view(svd: HeadSvd) -> impl IntoView {
    let note = format!(
        "Blocks: neighbouring singular values within a relative gap of {} share a block, whose directions are defined only up to a rotation; it is read as a subspace (each token's norm of projection onto it). Null: below {} of the largest.",
        svd.gap,
        num(svd.null_tolerance)
    );
    view! {
        <p class="note">{note}</p>
        <div class="side-by-side svd">
            {circuit_svd_view(svd.ov, "svd-ov", "OV = W_V W_O", ("reads (W_E)", "writes (W_U)"))}
            {circuit_svd_view(svd.qk, "svd-qk", "QK = W_Q W_Kᵀ", ("query side (W_E)", "key side (W_E)"))}
        </div>
    }
}

/// Picks the page's current head (shared by the head and probes views).
#[component]
pub fn HeadSelect(id: &'static str) -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    move || {
        let loaded = ctx.loaded.get()?;
        let current = ctx.head.get();
        let options = loaded
            .heads()
            .into_iter()
            .map(|h| view! { <option value=h.to_string() selected=h == current>{h.to_string()}</option> })
            .collect_view();
        Some(view! {
            <label>
                "Head "
                <select
                    id=id
                    on:change=move |ev| {
                        if let Some(l) = ctx.loaded.get_untracked()
                            && let Ok(h) = HeadId::parse(&event_target_value(&ev), &l.info.config)
                        {
                            ctx.head.set(h);
                        }
                    }
                >
                    {options}
                </select>
            </label>
        })
    }
}

#[component]
pub fn HeadView() -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    let pair_from = RwSignal::new("(".to_string());
    let pair_to = RwSignal::new(")".to_string());
    let row_token = RwSignal::new("(".to_string());
    let fit = RwSignal::new(false);

    let spectra = move || {
        let loaded = ctx.loaded.get()?;
        let mode = ctx.mode.get();
        let id = ctx.head.get();
        let fp = loaded.head(mode, id)?.clone();
        let rotary = matches!(loaded.info.config.positions, Positions::Rotary { .. });
        let zoom = fit.get();
        let qk_plot = complex_plane(&fp.qk.eigenvalues, "#2166ac", zoom, &format!("{id} QK eigenvalues"));
        let qk_token_plot =
            complex_plane(&fp.qk_token.eigenvalues, "#5e3c99", zoom, &format!("{id} QK (tokens) eigenvalues"));
        let ov_plot = complex_plane(&fp.ov.eigenvalues, "#e66101", zoom, &format!("{id} OV eigenvalues"));
        let explain: [MetricRow; 5] = [
            (
                "copying score",
                "Σ Re λ / Σ |λ|: +1 = maps every direction to a positive multiple of itself (copying); 0 = rotation; negative = suppression.",
                Box::new(|f: &Fingerprint| signed(f.copying_score)),
            ),
            (
                "imaginary fraction",
                "Σ |Im λ| / Σ |λ|: how much of the circuit rotates rather than scales (0 to 1).",
                Box::new(|f: &Fingerprint| num(f.imaginary_fraction)),
            ),
            (
                "eigenvector condition κ",
                "How skewed the eigenvectors are: 1 for a normal circuit, large when they nearly coincide, ∞ when defective.",
                Box::new(kappa),
            ),
            (
                "departure from normality",
                "Henrici's measure, 0 (normal) to 1: the skew that eigenvalues do not show, without needing eigenvectors.",
                Box::new(|f: &Fingerprint| num(f.departure_from_normality)),
            ),
            (
                "scale",
                "Σ |λ|: the circuit's overall strength, to compare heads.",
                Box::new(|f: &Fingerprint| num(f.scale)),
            ),
        ];
        // A circuit that could not be read shows "error" in every row; the reason is below.
        let shown = |f: &Fingerprint, get: &dyn Fn(&Fingerprint) -> String| match f.error {
            Some(_) => "error".to_string(),
            None => get(f),
        };
        let rows = explain
            .iter()
            .map(|(name, text, get)| {
                view! {
                    <tr>
                        <th scope="row">{*name}</th>
                        <td class="num">{shown(&fp.qk, get)}</td>
                        <td class="num">{shown(&fp.qk_token, get)}</td>
                        <td class="num">{shown(&fp.ov, get)}</td>
                        <td class="num">{shown(&fp.ov_residual, get)}</td>
                        <td class="explain">{*text}</td>
                    </tr>
                }
            })
            .collect_view();
        let errors: Vec<String> = fp.errors().iter().map(ToString::to_string).collect();
        let errors = (!errors.is_empty()).then(|| {
            view! {
                <ul class="error-inline" id="head-errors">
                    {errors.into_iter().map(|e| view! { <li>{e}</li> }).collect_view()}
                </ul>
            }
        });
        let behaviour = match loaded.run(ctx.sequence.get()) {
            Some(run) => match (&run.report, loaded.scores(ctx.sequence.get(), id)) {
                (Ok(_), Some(s)) => {
                    let spread =
                        |get: fn(&headprint::probes::induction::HeadSpread) -> headprint::probes::induction::Spread| {
                            s.spread.map(|sp| format!(" ± {:.3}", get(&sp).std)).unwrap_or_default()
                        };
                    format!(
                        "Running the model on {}: induction score {:.3}{}, previous-token score {:.3}{}, duplicate-token score {:.3}{}, copy fidelity {:.3}{} (means ± population standard deviation over the sequences).",
                        run.sequence,
                        s.induction_score,
                        spread(|sp| sp.induction_score),
                        s.previous_token_score,
                        spread(|sp| sp.previous_token_score),
                        s.duplicate_token_score,
                        spread(|sp| sp.duplicate_token_score),
                        s.copy_fidelity,
                        spread(|sp| sp.copy_fidelity)
                    )
                }
                (Err(e), _) => format!("The induction probe on {} failed: {e}", run.sequence),
                (Ok(_), None) => String::new(),
            },
            None => String::new(),
        };
        Some(view! {
            <div class="planes">
                <figure id="qk-plane">
                    <div inner_html=qk_plot.clone()></div>
                    <ChartExport svg=qk_plot name=format!("{id}-qk-eigenvalues") />
                    <figcaption>
                        {format!("QK: eigenvalues of W_Q W_Kᵀ ({} mode)", mode.name())}
                        {rotary.then(|| view! { <br /><em>"Rotary model: this is QK at relative offset 0, without biases."</em> })}
                    </figcaption>
                </figure>
                <figure id="qk-token-plane">
                    <div inner_html=qk_token_plot.clone()></div>
                    <ChartExport svg=qk_token_plot name=format!("{id}-qk-token-eigenvalues") />
                    <figcaption>
                        {format!("QK (tokens): eigenvalues of W_E W_Q W_Kᵀ W_Eᵀ ({} mode)", mode.name())}
                        {rotary.then(|| view! { <br /><em>"Rotary model: offset 0, without biases, as for QK."</em> })}
                    </figcaption>
                </figure>
                <figure id="ov-plane">
                    <div inner_html=ov_plot.clone()></div>
                    <ChartExport svg=ov_plot name=format!("{id}-ov-eigenvalues") />
                    <figcaption>"OV: eigenvalues of W_E W_V W_O W_U (token space)"</figcaption>
                </figure>
            </div>
            <p class="note" id="qk-basis-note">
                "Two QK spectra, because the residual-space one depends on the basis. Writing the residual stream in another basis, x → xS, turns W_Q W_Kᵀ into S⁻¹ (W_Q W_Kᵀ) S⁻ᵀ: a congruence, not a similarity, so its eigenvalues change (folding LayerNorm's weights into W_Q and W_K is such a rescaling, which is why folded and raw QK differ). In token space W_E becomes W_E S and the S cancels: W_E W_Q W_Kᵀ W_Eᵀ is the same in every residual basis, because the tokens fix the basis. Its folded and raw spectra still differ, since raw mode leaves the norm weights out. OV has no such problem: a change of basis acts on it by similarity, which keeps eigenvalues."
            </p>
            {errors}
            <table class="metrics" id="metrics-table">
                <thead>
                    <tr>
                        <th></th>
                        <th>"QK"</th>
                        <th>"QK (tokens)"</th>
                        <th>"OV (tokens)"</th>
                        <th>"OV (residual)"</th>
                        <th>"what it means"</th>
                    </tr>
                </thead>
                <tbody>{rows}</tbody>
            </table>
            <p class="behaviour">{behaviour}</p>
        })
    };

    let current = move || ctx.loaded.get().map(|l| (l.id, ctx.mode.get(), ctx.head.get()));
    let self_copy = requested(
        move || current().map(|(model, mode, head)| Request::SelfCopy { model, mode, head, top: TOP }),
        |reply| match reply {
            Reply::SelfCopy { raw, normalised } => Some((raw, normalised)),
            _ => None,
        },
    );
    let pair = requested(
        move || {
            current().map(|(model, mode, head)| Request::Pair {
                model,
                mode,
                head,
                from: pair_from.get(),
                to: pair_to.get(),
            })
        },
        |reply| match reply {
            Reply::Pair { from, to, value } => Some((from, to, value)),
            _ => None,
        },
    );
    let row = requested(
        move || {
            current().map(|(model, mode, head)| Request::Row {
                model,
                mode,
                head,
                token: row_token.get(),
                top: ROW_TOP,
            })
        },
        |reply| match reply {
            Reply::Row { token, promotes, suppresses } => Some((token, promotes, suppresses)),
            _ => None,
        },
    );

    let svd = requested(
        move || current().map(|(model, mode, head)| Request::Svd { model, head, mode, tokens: SVD_TOKENS }),
        |reply| match reply {
            Reply::Svd(svd) => Some(*svd),
            _ => None,
        },
    );
    let svd_section = move || {
        Some(match svd.get()? {
            Ok(svd) => svd_view(svd).into_any(),
            Err(e) => view! { <p class="error-inline" id="svd-error">{e.to_string()}</p> }.into_any(),
        })
    };

    // The OV matrix: every token for small vocabularies, else the top k by self-copy logit.
    let vocab = move || ctx.loaded.get().map_or(0, |l| l.info.config.vocab);
    let matrix_all = RwSignal::new(vocab() <= MATRIX_ALL_UP_TO);
    let matrix_k = RwSignal::new(MATRIX_K);
    let matrix = requested(
        move || {
            let top = if matrix_all.get() { None } else { Some(matrix_k.get()) };
            current().map(|(model, mode, head)| Request::OvMatrix { model, mode, head, top })
        },
        |reply| match reply {
            Reply::OvMatrix { tokens, values, .. } => Some((tokens, values)),
            _ => None,
        },
    );
    let matrix_view = move || {
        let head = ctx.head.get();
        let mode = ctx.mode.get();
        Some(match matrix.get()? {
            Ok((tokens, values)) => {
                let title = format!("{head} OV logits, {} tokens ({})", tokens.len(), mode.name());
                let chart = Arc::new(ov_matrix(&tokens, &values, title, 760.0));
                view! {
                    <div id="ov-matrix">
                        <CanvasMatrix matrix=chart id="ov-matrix-canvas".to_string() name=format!("{head}-ov-matrix") />
                    </div>
                }
                .into_any()
            }
            Err(e) => view! { <p class="error-inline" id="ov-matrix-error">{e.to_string()}</p> }.into_any(),
        })
    };

    let self_copy_view = move || {
        Some(match self_copy.get()? {
            Ok((raw, normalised)) => view! {
                <div class="side-by-side">
                    <div>
                        <h4>"raw self-copy logit"</h4>
                        {bar_list(raw, "self-copy-raw")}
                    </div>
                    <div>
                        <h4>"normalised by ‖W_E[i]‖ · ‖W_U[:, i]‖"</h4>
                        {bar_list(normalised, "self-copy-normalised")}
                    </div>
                </div>
            }
            .into_any(),
            Err(e) => view! { <p class="error-inline">{e.to_string()}</p> }.into_any(),
        })
    };

    let pair_view = move || {
        Some(match pair.get()? {
            Ok((from, to, v)) => {
                let verb = if v >= 0.0 { "raises" } else { "lowers" };
                let amount = if v >= 0.0 { signed(v) } else { num(-v) };
                let text = format!("attending `{}` {verb} `{}` by {amount}", visible(&from), visible(&to));
                view! { <p class="pair-result" id="pair-result">{text}</p> }.into_any()
            }
            Err(e) => view! { <p class="pair-result error-inline" id="pair-result">{e.to_string()}</p> }.into_any(),
        })
    };

    let row_view = move || {
        Some(match row.get()? {
            Ok((token, up, down)) => view! {
                <div class="side-by-side">
                    <div>
                        <h4>{format!("attending `{}` promotes", visible(&token))}</h4>
                        {bar_list(up, "row-promotes")}
                    </div>
                    <div>
                        <h4>{format!("attending `{}` suppresses", visible(&token))}</h4>
                        {bar_list(down, "row-suppresses")}
                    </div>
                </div>
            }
            .into_any(),
            Err(e) => view! { <p class="error-inline">{e.to_string()}</p> }.into_any(),
        })
    };

    view! {
        <section class="head-view">
            <div class="controls">
                <HeadSelect id="head-select" />
                <h2 id="head-title">{move || ctx.head.get().to_string()}</h2>
                <label>
                    <input
                        type="checkbox"
                        id="zoom-spectra"
                        prop:checked=move || fit.get()
                        on:change=move |ev| fit.set(event_target_checked(&ev))
                    />
                    " zoom the planes to the eigenvalues (the dashed unit circle may fall outside)"
                </label>
            </div>
            {spectra}
            <h3>"Singular directions"</h3>
            <p class="note">
                "The SVD of each circuit (TransformerLens's decompose_head): σ largest first, and each direction's tokens at both ends: what the head reads and what its OV writes, or what its queries and keys look for. A lone direction's sign is arbitrary: only the pairing of the two sides' + (and −) ends carries meaning."
            </p>
            <div id="svd">{svd_section}</div>
            <h3>"OV circuit as token logits"</h3>
            <p class="note">
                "Entry (i, j) of W_E W_V W_O W_U: how much attending to token i raises the logit of token j. Self-copy: i = j."
            </p>
            {self_copy_view}
            <h3>"OV circuit as a token × token matrix"</h3>
            <p class="note">
                "Row i (the attended token), column j (a logit): how much attending to token i raises (orange) or lowers (blue) the logit of token j. A copying head has a bright diagonal. Small vocabularies show every token in id order; otherwise the k tokens with the largest self-copy logits, largest first."
            </p>
            <div class="pair-inputs">
                <label>
                    <input
                        type="checkbox"
                        id="ov-matrix-all"
                        prop:checked=move || matrix_all.get()
                        prop:disabled=move || { vocab() > MATRIX_MAX }
                        on:change=move |ev| matrix_all.set(event_target_checked(&ev))
                    />
                    {move || format!(" every token ({})", vocab())}
                </label>
                <label>
                    " or the top k by self-copy logit, k = "
                    <input
                        type="number"
                        id="ov-matrix-k"
                        min=MATRIX_K_MIN
                        max=MATRIX_K_MAX
                        size="5"
                        prop:value=move || matrix_k.get().to_string()
                        prop:disabled=move || matrix_all.get()
                        on:change=move |ev| {
                            if let Ok(k) = event_target_value(&ev).trim().parse::<usize>() {
                                matrix_k.set(k);
                            }
                        }
                    />
                </label>
            </div>
            {matrix_view}
            <h3>"Pair lookup"</h3>
            <div class="pair-inputs">
                "attending "
                <input
                    id="pair-from"
                    size="8"
                    prop:value=move || pair_from.get()
                    on:input=move |ev| pair_from.set(event_target_value(&ev))
                    aria-label="attended token"
                />
                " → logit of "
                <input
                    id="pair-to"
                    size="8"
                    prop:value=move || pair_to.get()
                    on:input=move |ev| pair_to.set(event_target_value(&ev))
                    aria-label="promoted token"
                />
                <span class="hint">" (a token as text, or #id)"</span>
            </div>
            {pair_view}
            <h3>"What attending a token does"</h3>
            <div class="pair-inputs">
                "token "
                <input
                    id="row-token"
                    size="8"
                    prop:value=move || row_token.get()
                    on:input=move |ev| row_token.set(event_target_value(&ev))
                    aria-label="attended token"
                />
            </div>
            {row_view}
        </section>
    }
}
