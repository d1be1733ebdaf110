//! What the page computes only once it is asked for, and the effects that ask: the held-out
//! text's probe, a rerun of the probe when the BOS switch changes, raw mode's fingerprints, a
//! share link's timeline, and (asked by the Circuits tab) composition scores. Each runs once
//! per model (and mode) and attaches its result to the shown model.

use std::sync::Arc;

use leptos::prelude::*;
use leptos::task::spawn_local;

use super::state::{Ctx, HELD_OUT_TEXT_URL, HeldComposition, Loaded, Sequence};
use super::workers::{Failure, ModelSource};
use super::{browser, client, timeline};
use headprint::analysis::Mode;
use headprint::worker::protocol::{InductionRun, ProbeSequence, Reply, Request};

/// Starts the effects that ask for what is computed lazily, each when first needed.
pub fn start(ctx: Ctx) {
    // A link's timeline is gathered once the first model is shown (the pool is then free).
    Effect::new(move |started: Option<bool>| {
        if started == Some(true) || ctx.loaded.with(Option::is_none) {
            return started.unwrap_or(false);
        }
        match ctx.timeline_asked.get_untracked() {
            Some((repo, revisions)) => {
                spawn_local(timeline::follow(ctx, repo, revisions));
                true
            }
            None => true,
        }
    });
    // The held-out-text probe runs the first time its scores are asked for.
    Effect::new(move |_| {
        if ctx.sequence.get() == Sequence::HeldOutText
            && ctx.loaded.with(|l| l.as_ref().is_some_and(|l| l.text_run.is_none()))
        {
            spawn_local(ensure_text_run(ctx));
        }
    });
    // The probe reruns when the BOS switch no longer matches what the shown model ran with.
    Effect::new(move |_| {
        let prepend_bos = ctx.prepend_bos.get();
        if ctx.loaded.with(|l| l.as_ref().is_some_and(|l| l.probe_bos != prepend_bos)) {
            spawn_local(ensure_bos(ctx));
        }
    });
    // Raw mode's fingerprints are computed the first time raw mode is shown.
    Effect::new(move |_| {
        if ctx.mode.get() == Mode::Raw && ctx.loaded.with(|l| l.as_ref().is_some_and(|l| l.raw.is_none())) {
            spawn_local(ensure_raw(ctx));
        }
    });
}

thread_local! {
    /// Follow-up computations in flight, by model and kind: the effects that ask for them rerun
    /// whenever the shown model's results change, and one request each is enough.
    static IN_FLIGHT: std::cell::RefCell<std::collections::HashSet<(u64, &'static str)>> = Default::default();
}

/// Marks `(model, what)` as in flight until dropped; None when it already is.
struct InFlight((u64, &'static str));

impl InFlight {
    fn start(model: u64, what: &'static str) -> Option<InFlight> {
        IN_FLIGHT.with_borrow_mut(|set| set.insert((model, what))).then_some(InFlight((model, what)))
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        IN_FLIGHT.with_borrow_mut(|set| set.remove(&self.0));
    }
}

/// Runs the induction probe on held-out text once per model (fetched from the page's own files).
pub async fn ensure_text_run(ctx: Ctx) {
    let Some(loaded) = ctx.loaded.get_untracked() else { return };
    if loaded.text_run.is_some() {
        return;
    }
    let Some(_in_flight) = InFlight::start(loaded.id, "text") else { return };
    ctx.busy.set(Some("Running the induction probe on held-out text…".into()));
    let run = match browser::fetch_text(HELD_OUT_TEXT_URL).await {
        Ok(text) => {
            let len = headprint::worker::stages::probe_len(&loaded.info.config);
            let count = headprint::probes::induction::DEFAULT_SEQUENCES;
            let sequence = ProbeSequence::TextWindow { text, seed: 0, len, count };
            let request = Request::Induction {
                model: loaded.id,
                sequence: sequence.clone(),
                prepend_bos: loaded.probe_bos,
                backend: loaded.probe_backend(),
            };
            let describe = || sequence.describe(loaded.info.bos.as_ref().filter(|_| loaded.probe_bos));
            match client::request(&request, &ModelSource::default()).await {
                Ok(Reply::Induction(run)) => run,
                Ok(_) => InductionRun::failed(describe(), "unexpected answer".into()),
                Err(e) => InductionRun::failed(describe(), e.to_string()),
            }
        }
        Err(e) => InductionRun::failed("held-out text".into(), e),
    };
    ctx.busy.set(None);
    attach(ctx, loaded.id, |l| l.with(None, Some(run), None));
}

/// Reruns the shown model's probe when the BOS switch changed since it ran (models without a
/// BOS run the same either way), and replaces its row of the spectral-fingerprint study's table.
pub async fn ensure_bos(ctx: Ctx) {
    let prepend_bos = ctx.prepend_bos.get_untracked();
    let Some(loaded) = ctx.loaded.get_untracked().filter(|l| l.probe_bos != prepend_bos) else { return };
    if loaded.info.bos.is_none() {
        attach(ctx, loaded.id, |l| Loaded {
            text_run: l.text_run.clone(),
            ..l.rerun(l.random_run.clone(), prepend_bos)
        });
        return;
    }
    let Some(_in_flight) = InFlight::start(loaded.id, "bos") else { return };
    ctx.busy
        .set(Some(format!("Running the induction probe {} the BOS…", if prepend_bos { "with" } else { "without" })));
    let sequence = headprint::worker::stages::default_sequence(&loaded.info.config);
    let request = Request::Induction {
        model: loaded.id,
        sequence: sequence.clone(),
        prepend_bos,
        backend: loaded.probe_backend(),
    };
    let run = match client::request(&request, &ModelSource::default()).await {
        Ok(Reply::Induction(run)) => run,
        Ok(_) => InductionRun::failed(sequence.describe(None), "unexpected answer".into()),
        Err(e) => InductionRun::failed(sequence.describe(None), e.to_string()),
    };
    ctx.busy.set(None);
    attach(ctx, loaded.id, |l| l.rerun(run, prepend_bos));
    if let Some(shown) = ctx.loaded.get_untracked().filter(|l| l.id == loaded.id) {
        let row = shown.comparison(Sequence::UniformRandom);
        ctx.compared.update(|rows| {
            for existing in rows.iter_mut().filter(|r| r.id == row.id && r.sequence == row.sequence) {
                *existing = row.clone();
            }
        });
    }
}

/// Updates the shown model with more results, unless another model is shown by now.
fn attach(ctx: Ctx, id: u64, update: impl FnOnce(&Loaded) -> Loaded) {
    if let Some(loaded) = ctx.loaded.get_untracked().filter(|l| l.id == id) {
        ctx.loaded.set(Some(Arc::new(update(&loaded))));
    }
}

/// Computes raw mode's fingerprints once per model, when raw mode is first shown.
pub async fn ensure_raw(ctx: Ctx) {
    let Some(loaded) = ctx.loaded.get_untracked().filter(|l| l.raw.is_none()) else { return };
    let Some(_in_flight) = InFlight::start(loaded.id, "raw") else { return };
    ctx.busy.set(Some("Fingerprinting every head in raw mode…".into()));
    let reply =
        client::request(&Request::Fingerprint { model: loaded.id, mode: Mode::Raw }, &ModelSource::default()).await;
    ctx.busy.set(None);
    ctx.progress.set(None);
    match reply {
        Ok(Reply::Fingerprint { fingerprint, timing }) => {
            attach(ctx, loaded.id, |l| l.with(Some(*fingerprint), None, Some(timing)))
        }
        Ok(_) => ctx.show_error("Raw mode: unexpected answer from the worker".into()),
        Err(Failure::Cancelled) => ctx.mode.set(Mode::Folded),
        Err(e) => ctx.show_error(format!("Raw mode could not be computed: {e}")),
    }
}

/// Computes the shown model's composition scores in the current mode, once per model and mode
/// (the Circuits tab asks when shown). Progress is the worker's, a layer at a time, and Cancel
/// stops it; the answer, or why there is none, is kept until asked again.
pub async fn ensure_composition(ctx: Ctx) {
    let Some(loaded) = ctx.loaded.get_untracked() else { return };
    let mode = ctx.mode.get_untracked();
    if ctx.composition.with_untracked(|c| c.as_ref().is_some_and(|c| c.model == loaded.id && c.mode == mode)) {
        return;
    }
    let what = match mode {
        Mode::Folded => "composition folded",
        Mode::Raw => "composition raw",
    };
    let Some(_in_flight) = InFlight::start(loaded.id, what) else { return };
    let pairs = (loaded.info.config.layers * loaded.info.config.heads).pow(2);
    ctx.busy.set(Some(format!("Computing composition scores ({}, {pairs} ordered pairs of heads)…", mode.name())));
    let reply = client::request(&Request::Composition { model: loaded.id, mode }, &ModelSource::default()).await;
    ctx.busy.set(None);
    ctx.progress.set(None);
    let result = match reply {
        Ok(Reply::Composition(composition)) => Ok(Arc::new(*composition)),
        Ok(_) => Err("unexpected answer from the worker".to_string()),
        Err(Failure::Cancelled) => Err("Cancelled.".to_string()),
        Err(e) => Err(e.to_string()),
    };
    if ctx.loaded.with_untracked(|l| l.as_ref().is_some_and(|l| l.id == loaded.id)) {
        ctx.composition.set(Some(HeldComposition { model: loaded.id, mode, result }));
    }
}
