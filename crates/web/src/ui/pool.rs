//! The page's pool of analysis workers: a load's two large stages split across every core.
//! The Grams go out as segments of vocabulary rows (each worker asks for the next segment when
//! it is done, and returns that segment's d_model x d_model Grams), summed here in segment
//! order; the sum goes back to every worker; then the heads go out a layer at a time. Only
//! these small matrices and the heads pass between page and workers: each worker reads its own
//! weights from the `File`s by byte range. The order of the sums is fixed
//! (`worker::pool::GramSum`), so the numbers are those of one worker doing it all.
//!
//! The induction probe's sequences are shared out too, one share to each worker.
//!
//! The lead (worker 0) holds the models for every other request.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::rc::Rc;

use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::browser;
use super::workers::{self, Failure, ModelSource};
use crate::stored;
use headprint::analysis::circuits::{Grams, segment_rows};
use headprint::analysis::{Mode, ModelFingerprint};
use headprint::backend::{BackendChoice, BackendInfo};
use headprint::model::ModelConfig;
use headprint::worker::memory::pool_workers;
use headprint::worker::pool::{GramSum, LayerHeads, PartQueue, backend_found, combine_induction};
use headprint::worker::protocol::{
    Analysis, GramsData, InductionRun, ModelId, ModelInfo, ProbeSequence, Progress, Reply, Request, Role, Timing,
};
use headprint::worker::stages::{PROBE_STAGE, default_sequence, fingerprint_stage, gram_stage};

/// What the page keeps of a model the pool holds, to split its later fingerprints.
#[derive(Clone)]
struct Pooled {
    config: ModelConfig,
    parameters: u64,
    backend: BackendInfo,
    /// How many workers hold it (the lead and the first helpers): the lead alone for a model by
    /// link that the page's store did not hold whole when it was opened.
    workers: usize,
}

thread_local! {
    static MODELS: RefCell<HashMap<ModelId, Pooled>> = RefCell::default();
}

/// One piece of pool work: the workers it may use, the pool generation it belongs to (a
/// cancel ends it), and whether the page shows its progress.
#[derive(Clone, Copy)]
struct Run {
    model: ModelId,
    workers: usize,
    generation: u64,
    shows_progress: bool,
}

impl Run {
    fn report(&self, progress: Progress) {
        if self.shows_progress {
            workers::report(progress);
        }
    }

    async fn send(&self, worker: usize, request: Request, files: &ModelSource) -> Result<Reply, Failure> {
        workers::send_to(worker, request, files, self.shows_progress && worker == 0, self.generation).await
    }
}

fn now() -> f64 {
    web_sys::window().and_then(|w| w.performance()).map_or(0.0, |p| p.now())
}

fn unexpected(what: &str) -> Failure {
    Failure::Failed(format!("a worker gave an unexpected answer to {what}"))
}

/// Runs `work(worker)` on every worker at once; the first error (a cancel is one) is the
/// result, and `work` should stop taking parts once a `failed` flag is set.
async fn on_every_worker<F, Fut>(workers: usize, work: F) -> Result<(), Failure>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<(), Failure>> + 'static,
{
    let promises: js_sys::Array = (0..workers)
        .map(|w| {
            let part = work(w);
            JsValue::from(wasm_bindgen_futures::future_to_promise(async move {
                part.await.map(|()| JsValue::UNDEFINED).map_err(|e| e.to_js())
            }))
        })
        .collect();
    JsFuture::from(js_sys::Promise::all(&promises)).await.map(|_| ()).map_err(|e| Failure::from_js(&e))
}

/// Opens the model on the lead, then on as many helpers as the estimates let the pool use, and
/// computes its Grams: on the lead's GPU when `backend` asks for one and it finds one, else
/// across the pool's CPUs. Silent (`shows_progress` false) when a restart reloads the shown model.
pub async fn open(
    model: ModelId,
    names: Vec<String>,
    files: ModelSource,
    shows_progress: bool,
    backend: BackendChoice,
) -> Result<OpenModel, Failure> {
    let generation = workers::generation();
    let mut run = Run { model, workers: 1, generation, shows_progress };
    let mut timings = Vec::new();
    let started = now();
    let mut files = files;
    if let Some(source) = files.link.as_mut() {
        source.offline = !browser::online();
        files.stored = stored::indexed_db::catalog(&source.link).await;
    }
    let open = Request::Open { model, names: names.clone(), role: Role::Lead, link: files.link.clone() };
    let Reply::Opened { info, tied, segments, lead_bytes, helper_bytes } = run.send(0, open, &files).await? else {
        return Err(unexpected("opening the model"));
    };
    // A model by link that the page's store does not hold whole is read by the lead alone: each
    // worker fetches what it reads, and the probe at load reads every layer, so layers shared
    // out would be fetched twice (GPT-2 Small: 554 MB instead of 498 MB until the overview).
    // The lead keeps what it fetches, so every byte comes once; once the store holds the model,
    // the next open shares the work out again.
    let stored_whole = match (&files.stored, &info.link) {
        (Some(catalog), Some(link)) => {
            stored::indexed_db::stored_bytes(catalog, &link.pinned) >= link.total_bytes as f64
        }
        (None, Some(_)) => false,
        _ => true,
    };
    run.workers = if stored_whole { pool_workers(workers::pool_size(), lead_bytes, helper_bytes) } else { 1 };
    // Helpers open the commit the lead opened, never the branch again (a push meanwhile
    // would mix two versions in one result).
    if let (Some(source), Some(opened)) = (files.link.as_mut(), info.link.as_ref()) {
        source.link = opened.pinned.clone();
        stored::indexed_db::name_model(&opened.pinned);
    }
    let helpers = {
        let files = files.clone();
        move |w: usize| {
            let (files, names) = (files.clone(), names.clone());
            async move {
                if w == 0 {
                    return Ok(());
                }
                let link = files.link.clone();
                match run.send(w, Request::Open { model, names, role: Role::Helper, link }, &files).await? {
                    Reply::Opened { .. } => Ok(()),
                    _ => Err(unexpected("opening the model")),
                }
            }
        }
    };
    on_every_worker(run.workers, helpers).await?;
    timings.push(Timing { step: "load".into(), ms: now() - started });

    let started = now();
    let grams = match backend {
        BackendChoice::Cpu => grams(run, &info.config, tied, segments).await?,
        BackendChoice::Gpu | BackendChoice::Auto => {
            match run.send(0, Request::GpuGrams { model, backend }, &ModelSource::default()).await? {
                Reply::Grams { grams } => grams.grams().map_err(|e| e.to_string())?,
                // No GPU (or only a software one under `auto`): the CPUs, with the reason kept.
                Reply::NoGpu { backend } => {
                    let mut grams = grams(run, &info.config, tied, segments).await?;
                    grams.backend = backend;
                    grams
                }
                _ => return Err(unexpected("the Grams on the GPU")),
            }
        }
    };
    let data = GramsData::of(&grams);
    on_every_worker(run.workers, |w| {
        let data = data.clone();
        async move {
            match run.send(w, Request::SetGrams { model, grams: data }, &ModelSource::default()).await? {
                Reply::Done => Ok(()),
                _ => Err(unexpected("the Grams")),
            }
        }
    })
    .await?;
    timings.push(Timing { step: "gram".into(), ms: now() - started });
    let pooled = Pooled {
        config: info.config.clone(),
        parameters: info.parameters,
        backend: grams.backend.clone(),
        workers: run.workers,
    };
    MODELS.with_borrow_mut(|m| m.insert(model, pooled));
    Ok(OpenModel { info: *info, run, timings })
}

/// A model the pool has opened and holds the Grams of.
pub struct OpenModel {
    info: ModelInfo,
    run: Run,
    timings: Vec<Timing>,
}

/// Hands parts `0..parts` out to the workers in contiguous blocks ([`PartQueue`]): `ask(part)` is a
/// part's request, `take(part, reply)` keeps its answer (parts come back in any order). The
/// first error (a cancel is one) is the result, and no worker takes another part after it.
async fn share_out(
    run: Run,
    parts: usize,
    ask: impl Fn(usize) -> Request + 'static,
    take: impl FnMut(usize, Reply) -> Result<(), Failure> + 'static,
) -> Result<(), Failure> {
    struct Queue {
        parts: PartQueue,
        failed: bool,
    }
    let queue = Rc::new(RefCell::new(Queue { parts: PartQueue::new(parts, run.workers), failed: false }));
    let (ask, take) = (Rc::new(ask), Rc::new(RefCell::new(take)));
    on_every_worker(run.workers, |w| {
        let (queue, ask, take) = (queue.clone(), ask.clone(), take.clone());
        async move {
            loop {
                let part = {
                    let mut q = queue.borrow_mut();
                    match q.parts.claim(w) {
                        Some(part) if !q.failed => part,
                        _ => return Ok(()),
                    }
                };
                let kept = match run.send(w, ask(part), &ModelSource::default()).await {
                    Ok(reply) => (take.borrow_mut())(part, reply),
                    Err(e) => Err(e),
                };
                if let Err(e) = kept {
                    queue.borrow_mut().failed = true;
                    return Err(e);
                }
            }
        }
    })
    .await
}

/// The Grams from every segment, shared out in blocks, summed in segment order.
async fn grams(run: Run, config: &ModelConfig, tied: bool, segments: usize) -> Result<Grams, Failure> {
    let (vocab, model, stage) = (config.vocab, run.model, gram_stage(tied));
    run.report(Progress::new(stage, 0, vocab as u64));
    let sum = Rc::new(RefCell::new((GramSum::new(config.d_model, tied, segments), 0)));
    let adding = sum.clone();
    share_out(
        run,
        segments,
        move |segment| Request::GramSegment { model, segment },
        move |segment, reply| {
            let Reply::GramSegment { grams, .. } = reply else {
                return Err(unexpected("a Gram segment"));
            };
            let (sum, rows_done) = &mut *adding.borrow_mut();
            sum.add(segment, grams.grams().map_err(|e| e.to_string())?).map_err(|e| e.to_string())?;
            *rows_done += segment_rows(vocab, segment).len();
            run.report(Progress::new(stage, *rows_done as u64, vocab as u64));
            Ok(())
        },
    )
    .await?;
    let (sum, _) =
        Rc::try_unwrap(sum).map_err(|_| Failure::Failed("the Gram sum is still shared".into()))?.into_inner();
    Ok(sum.finish()?)
}

/// Every head in one mode, a layer at a time, shared out in blocks; each layer's heads fill the
/// grid as they come.
async fn heads(run: Run, pooled: &Pooled, mode: Mode) -> Result<ModelFingerprint, Failure> {
    let config = &pooled.config;
    let (layers, per_layer, model) = (config.layers, config.heads, run.model);
    // Grams made on a GPU: each worker runs its layers' products on its own device too.
    let backend = backend_found(&pooled.backend);
    let stage = fingerprint_stage(mode);
    let total = (layers * per_layer) as u64;
    let grid = Some((layers, per_layer));
    run.report(Progress { stage: stage.clone(), done: 0, total, grid, heads: Vec::new() });
    let collected = Rc::new(RefCell::new((LayerHeads::new(layers), 0)));
    let collecting = collected.clone();
    share_out(
        run,
        layers,
        move |layer| Request::FingerprintLayer { model, mode, layer, backend },
        move |layer, reply| {
            let Reply::Heads { heads, gpu_bytes } = reply else {
                return Err(unexpected("a layer's heads"));
            };
            let (collected, done) = &mut *collecting.borrow_mut();
            *done += heads.len();
            run.report(Progress { stage: stage.clone(), done: *done as u64, total, grid, heads: heads.clone() });
            Ok(collected.add(layer, heads, gpu_bytes)?)
        },
    )
    .await?;
    let (collected, _) =
        Rc::try_unwrap(collected).map_err(|_| Failure::Failed("the heads are still shared".into()))?.into_inner();
    Ok(collected.finish(config, pooled.parameters, &pooled.backend, mode)?)
}

/// A whole load, as one worker's `Load { analyse: true }` answers it: open, Grams and folded
/// fingerprint across the pool, then the induction probe on the lead.
pub async fn analyse(
    model: ModelId,
    names: Vec<String>,
    files: ModelSource,
    prepend_bos: bool,
    backend: BackendChoice,
) -> Result<Reply, Failure> {
    let OpenModel { info, run, mut timings } = open(model, names, files, true, backend).await?;
    let pooled = pooled(model)?;

    let started = now();
    let folded = heads(run, &pooled, Mode::Folded).await?;
    timings.push(Timing { step: "fingerprint folded".into(), ms: now() - started });

    run.report(Progress::new(PROBE_STAGE, 0, info.config.layers as u64 + 1));
    let started = now();
    let probe_backend = backend_found(&pooled.backend);
    let induction = probe(run, default_sequence(&info.config), prepend_bos, probe_backend).await?;
    timings.push(Timing { step: "induction probe".into(), ms: now() - started });
    Ok(Reply::Analysed(Box::new(Analysis { info, folded, induction, timings })))
}

/// An induction probe with its sequences shared out, one share to each worker (the lead's
/// progress is the one shown), averaged in sequence order. On a GPU the lead runs them all: its
/// device takes every sequence in one batch, and each other worker would upload the whole model
/// again to a device of its own.
async fn probe(
    run: Run,
    sequence: ProbeSequence,
    prepend_bos: bool,
    backend: BackendChoice,
) -> Result<InductionRun, Failure> {
    let workers = if backend == BackendChoice::Gpu { 1 } else { run.workers };
    let shares = workers.min(sequence.count()).max(1);
    let collected = Rc::new(RefCell::new(vec![None; shares]));
    let model = run.model;
    on_every_worker(shares, |share| {
        let (collected, sequence) = (collected.clone(), sequence.clone());
        async move {
            let ask = Request::InductionShare { model, sequence, prepend_bos, share, shares, backend };
            let Reply::InductionShare(scored) = run.send(share, ask, &ModelSource::default()).await? else {
                return Err(unexpected("a share of the induction probe"));
            };
            collected.borrow_mut()[share] = Some(scored);
            Ok(())
        }
    })
    .await?;
    let collected =
        Rc::try_unwrap(collected).map_err(|_| Failure::Failed("the probe's shares are still shared".into()))?;
    let shares = collected.into_inner().into_iter().collect::<Option<Vec<_>>>();
    Ok(combine_induction(
        shares.ok_or_else(|| Failure::Failed("a share of the induction probe did not come back".into()))?,
    ))
}

/// The induction probe on other sequences of a held model, across the pool, on `backend`.
pub async fn induction(
    model: ModelId,
    sequence: ProbeSequence,
    prepend_bos: bool,
    backend: BackendChoice,
) -> Result<Reply, Failure> {
    let pooled = pooled(model)?;
    let workers = pooled.workers;
    let run = Run { model, workers, generation: workers::generation(), shows_progress: true };
    Ok(Reply::Induction(probe(run, sequence, prepend_bos, backend).await?))
}

fn pooled(model: ModelId) -> Result<Pooled, Failure> {
    MODELS
        .with_borrow(|m| m.get(&model).cloned())
        .ok_or_else(|| Failure::Failed(format!("model {model} is not loaded in the workers")))
}

/// Every head of a held model in one mode (raw mode, when first shown), across the pool.
pub async fn fingerprint(model: ModelId, mode: Mode) -> Result<Reply, Failure> {
    let pooled = pooled(model)?;
    let run = Run { model, workers: pooled.workers, generation: workers::generation(), shows_progress: true };
    let started = now();
    let fingerprint = heads(run, &pooled, mode).await?;
    let timing = Timing { step: format!("fingerprint {}", mode.name()), ms: now() - started };
    Ok(Reply::Fingerprint { fingerprint: Box::new(fingerprint), timing })
}

/// Drops a model from every worker that holds it.
pub async fn forget(model: ModelId) -> Result<Reply, Failure> {
    let workers = MODELS.with_borrow_mut(|m| m.remove(&model)).map_or(1, |p| p.workers);
    let run = Run { model, workers, generation: workers::generation(), shows_progress: false };
    on_every_worker(workers, |w| async move {
        run.send(w, Request::Forget { model }, &ModelSource::default()).await.map(|_| ())
    })
    .await?;
    Ok(Reply::Done)
}
