//! The worker's side of the page, as plain Rust: it holds the loaded models and answers each
//! `Request` from the core. No browser here (the host feeds it `ByteSource`s, a clock and a
//! progress reporter), so it is tested natively like the rest of the core.
//!
//! The session only dispatches: [`Session::answer`] matches every request once, and each arm
//! calls the one handler that answers it. What the handlers need lives beside it: the held
//! model and what is computed from it (`held.rs`), opening a model (`opening.rs`), the memory
//! estimates and budgets (`memory.rs`), hashing (`hashing.rs`), the kept backend
//! (`backends.rs`) and the stages' names (`stages.rs`).

use std::collections::HashMap;
use std::rc::Rc;

use super::backends::{backend_for, kept_backend};
use super::hashing::hash;
use super::held::{Held, held_in, not_loaded};
use super::memory::{WORKER_BUDGET_BYTES, composition_too_large, estimated_composition_bytes};
use super::opening::{Fetching, open, published};
use super::pool::backend_found;
use super::protocol::{
    Analysis, GramsData, LinkSource, ModelId, ProbeSequence, Progress, Reply, Request, Role, Timing,
};
use super::stages::{PROBE_STAGE, composition_stage, default_sequence, gram_stage};
use crate::analysis::circuits::{Grams, segments};
use crate::analysis::composition::composition_on;
use crate::analysis::fingerprint::{fingerprint_layer, fingerprint_layer_on};
use crate::analysis::ov_logits::{MatrixTokens, bottom_k, top_k};
use crate::analysis::singular::head_svd;
use crate::analysis::{HeadId, Mode, OvTokenLogits};
use crate::backend::{Backend, BackendChoice, block_on, moved_between};
use crate::model::Weights;
use crate::probes::Suite;
use crate::weights::ByteSource;
use crate::weights::remote::{LinkCache, Transport};
use crate::{Error, Result};

/// Receives progress; the host forwards it to the page.
pub type Reporter = Rc<dyn Fn(Progress)>;

/// What a `Load` asks for besides reading the files.
struct Loading {
    analyse: bool,
    prepend_bos: bool,
    backend: BackendChoice,
}

pub struct Session {
    models: HashMap<ModelId, Held>,
    /// The last head's OV token logits: the head view asks for several readings of one head.
    logits: Option<((ModelId, Mode, HeadId), OvTokenLogits)>,
    /// Milliseconds since some origin (`performance.now()` in the browser).
    clock: fn() -> f64,
    /// The backend the last load asked for, kept open for the next (a GPU device and its
    /// compiled kernels are worth keeping).
    backend: Option<(BackendChoice, Backend)>,
    /// The host's HTTP, for models by link (the tab's is synchronous XHR).
    transport: Option<fn() -> Box<dyn Transport>>,
    /// Where the next model opened by link finds what was fetched before and keeps what it
    /// fetches (the tab's: what the page stored for it); without one, a run's memory only.
    link_cache: Option<Box<dyn LinkCache>>,
}

impl Session {
    pub fn new(clock: fn() -> f64) -> Self {
        Session { models: HashMap::new(), logits: None, clock, backend: None, transport: None, link_cache: None }
    }

    /// A session that opens models by link through `transport`.
    pub fn with_transport(mut self, transport: fn() -> Box<dyn Transport>) -> Self {
        self.transport = Some(transport);
        self
    }

    /// The cache the next open by link reads from and keeps to (used once).
    pub fn keep_links_in(&mut self, cache: Box<dyn LinkCache>) {
        self.link_cache = Some(cache);
    }

    /// Models currently held (the page keeps at most the shown one and the one loading).
    pub fn models_held(&self) -> usize {
        self.models.len()
    }

    /// Answers one request where nothing awaits (natively; see [`block_on`]).
    pub fn handle(&mut self, request: Request, files: Vec<Box<dyn ByteSource>>, report: Reporter) -> Result<Reply> {
        block_on(self.answer(request, files, report))
    }

    /// Answers one request: each kind by its one handler. `files` are the files of a `Load`,
    /// an `Open` or a `Hash`, in its `names` order. Whatever may run on a GPU waits for it (in
    /// the browser): a load, the pool's GPU Grams, a layer's heads, composition scores and the
    /// forward passes (the probes, a pattern, a verdict table); everything else is answered at
    /// once.
    pub async fn answer(
        &mut self,
        request: Request,
        files: Vec<Box<dyn ByteSource>>,
        report: Reporter,
    ) -> Result<Reply> {
        match request {
            Request::Load { model, names, analyse, prepend_bos, backend, link } => {
                self.load(model, names, files, link, Loading { analyse, prepend_bos, backend }, report).await
            }
            Request::Hash { names } => Ok(Reply::Hashed { sha256: hash(names, files, &*report)? }),
            Request::Fingerprint { model, mode } => self.fingerprint(model, mode, &report),
            Request::Published { link } => published(&link, self.transport),
            Request::Forget { model } => Ok(self.forget(model)),
            Request::Open { model, names, role, link } => self.open(model, names, files, link, role),
            Request::GpuGrams { model, backend } => self.gpu_grams(model, backend, report).await,
            Request::GramSegment { model, segment } => self.gram_segment(model, segment),
            Request::SetGrams { model, grams } => self.set_grams(model, grams),
            Request::FingerprintLayer { model, mode, layer, backend } => {
                self.fingerprint_layer(model, mode, layer, backend).await
            }
            Request::Induction { model, sequence, prepend_bos, backend } => {
                self.induction(model, &sequence, prepend_bos, backend, report).await
            }
            Request::InductionShare { model, sequence, prepend_bos, share, shares, backend } => {
                let share = Share { share, shares, prepend_bos, backend };
                self.induction_share(model, &sequence, share, report).await
            }
            Request::SelfCopy { model, mode, head, top } => self.self_copy(model, mode, head, top),
            Request::Pair { model, mode, head, from, to } => self.pair(model, mode, head, &from, &to),
            Request::Row { model, mode, head, token, top } => self.row(model, mode, head, &token, top),
            Request::OvMatrix { model, mode, head, top } => self.ov_matrix(model, mode, head, top),
            Request::Pattern { model, head, text, prepend_bos, backend } => {
                self.pattern(model, head, &text, prepend_bos, backend).await
            }
            Request::Verdicts { model, head, suite, prepend_bos, backend } => {
                self.verdicts(model, head, &suite, prepend_bos, backend).await
            }
            Request::Composition { model, mode } => self.composition(model, mode, report).await,
            Request::Svd { model, head, mode, tokens } => self.svd(model, head, mode, tokens),
        }
    }

    fn held(&self, model: ModelId) -> Result<&Held> {
        held_in(&self.models, model)
    }

    /// Bytes held between requests: every model's (the shown one stays held while another
    /// loads: the page keeps both) and the OV token view cached for the page (vocab x d_head
    /// sides: 100 MB on Pythia-1B).
    fn resident_bytes(&self) -> u64 {
        let cached = self.logits.as_ref().map_or(0, |(_, logits)| logits.bytes());
        self.models.values().map(Held::resident_bytes).sum::<u64>() + cached
    }

    fn logits(&mut self, model: ModelId, mode: Mode, head: HeadId) -> Result<(&Held, &OvTokenLogits)> {
        // Borrows `models` and `logits` apart, so the cache can be filled while `held` is borrowed.
        let held = held_in(&self.models, model)?;
        let head = held.head(head)?;
        let key = (model, mode, head);
        if self.logits.as_ref().is_none_or(|(k, _)| *k != key) {
            // One layer and a block of W_E / W_U rows at a time; the two vocab x d_head sides kept.
            self.logits = Some((key, OvTokenLogits::of_head(&held.stream()?, head, mode)?));
        }
        Ok((held, &self.logits.as_ref().expect("just filled").1))
    }

    /// Opens a model's files as `role`, checking first that it fits beside what this worker
    /// holds (the cache kept for links is used once).
    fn open_held(
        &mut self,
        names: Vec<String>,
        files: Vec<Box<dyn ByteSource>>,
        link: Option<LinkSource>,
        role: Role,
    ) -> Result<(Held, super::opening::Opening)> {
        let fetching = Fetching { transport: self.transport, cache: self.link_cache.take() };
        open(names, files, link, role, fetching, self.resident_bytes())
    }

    /// `Load`: opens a model, computes its Grams and, when asked, analyses it as the page first
    /// shows it (folded fingerprints and the default induction probe).
    async fn load(
        &mut self,
        id: ModelId,
        names: Vec<String>,
        files: Vec<Box<dyn ByteSource>>,
        link: Option<LinkSource>,
        Loading { analyse, prepend_bos, backend }: Loading,
        report: Reporter,
    ) -> Result<Reply> {
        let clock = self.clock;
        let mut timings = Vec::new();
        let timed = |step: &str, since: f64| Timing { step: step.into(), ms: clock() - since };

        let started = clock();
        let (mut held, opening) = self.open_held(names, files, link, Role::Lead)?;
        timings.push(timed("load", started));

        let started = clock();
        let stage = gram_stage(opening.tied);
        // Named before the first block is read, so the busy line never shows the stage before.
        report(Progress::new(stage, 0, held.config.vocab as u64));
        let backend = kept_backend(&mut self.backend, backend).await;
        let grams = Grams::gather(&held.stream()?, backend, &mut |done, vocab| {
            report(Progress::new(stage, done as u64, vocab as u64))
        })
        .await?;
        timings.push(timed("gram", started));
        held.grams = Some(grams);
        if !analyse {
            self.models.insert(id, held);
            return Ok(Reply::Loaded);
        }

        // Folded only: what the overview shows first. Raw mode is asked for when first shown.
        let started = clock();
        let folded = held.fingerprint(Mode::Folded, &*report)?;
        timings.push(timed("fingerprint folded", started));

        report(Progress::new(PROBE_STAGE, 0, held.config.layers as u64 + 1));
        let started = clock();
        let induction = held.induction(&default_sequence(&held.config), prepend_bos, backend, &*report).await;
        timings.push(timed("induction probe", started));

        let info = held.info();
        self.models.insert(id, held);
        Ok(Reply::Analysed(Box::new(Analysis { info, folded, induction, timings })))
    }

    /// `Fingerprint`: every head of a held model in one mode.
    fn fingerprint(&self, model: ModelId, mode: Mode, report: &Reporter) -> Result<Reply> {
        let held = self.held(model)?;
        let started = (self.clock)();
        let fingerprint = held.fingerprint(mode, &**report)?;
        let timing = Timing { step: format!("fingerprint {}", mode.name()), ms: (self.clock)() - started };
        Ok(Reply::Fingerprint { fingerprint: Box::new(fingerprint), timing })
    }

    /// `Forget`: drops a model and the OV token view cached for it.
    fn forget(&mut self, model: ModelId) -> Reply {
        self.models.remove(&model);
        if self.logits.as_ref().is_some_and(|((m, ..), _)| *m == model) {
            self.logits = None;
        }
        Reply::Done
    }

    /// Pool, `Open`: a model's files read and checked as `role`, its Grams still to come.
    fn open(
        &mut self,
        model: ModelId,
        names: Vec<String>,
        files: Vec<Box<dyn ByteSource>>,
        link: Option<LinkSource>,
        role: Role,
    ) -> Result<Reply> {
        let (held, opening) = self.open_held(names, files, link, role)?;
        let info = Box::new(held.info());
        let segments = segments(held.config.vocab);
        self.models.insert(model, held);
        let (tied, lead_bytes, helper_bytes) = (opening.tied, opening.lead_bytes, opening.helper_bytes);
        Ok(Reply::Opened { info, tied, segments, lead_bytes, helper_bytes })
    }

    /// Pool: the Grams of a model the lead holds, on the GPU `choice` finds; `NoGpu` (with
    /// the reason) when it finds none, so the page splits them across the pool's CPUs instead.
    async fn gpu_grams(&mut self, model: ModelId, choice: BackendChoice, report: Reporter) -> Result<Reply> {
        let backend = kept_backend(&mut self.backend, choice).await;
        if !backend.is_gpu() {
            return Ok(Reply::NoGpu { backend: backend.info() });
        }
        let stream = held_in(&self.models, model)?.stream()?;
        let stage = gram_stage(stream.tied());
        report(Progress::new(stage, 0, stream.config().vocab as u64));
        let grams =
            Grams::gather(&stream, backend, &mut |done, vocab| report(Progress::new(stage, done as u64, vocab as u64)))
                .await?;
        Ok(Reply::Grams { grams: GramsData::of(&grams) })
    }

    /// Pool, `GramSegment`: one segment's Grams on the CPU.
    fn gram_segment(&self, model: ModelId, segment: usize) -> Result<Reply> {
        let held = self.held(model)?;
        if segment >= segments(held.config.vocab) {
            return Err(Error::Worker(format!("no Gram segment {segment} in this model")));
        }
        let grams = Grams::segment(&held.stream()?, &mut Backend::cpu(), segment)?;
        Ok(Reply::GramSegment { segment, grams: GramsData::of(&grams) })
    }

    /// Pool, `SetGrams`: the Grams the page summed, for a model opened without them.
    fn set_grams(&mut self, model: ModelId, grams: GramsData) -> Result<Reply> {
        let grams = grams.grams()?;
        let held = self.models.get_mut(&model).ok_or_else(|| not_loaded(model))?;
        if grams.embed.nrows() != held.config.d_model {
            return Err(Error::Invalid(format!(
                "Grams of width {} for a model of width {}",
                grams.embed.nrows(),
                held.config.d_model
            )));
        }
        held.grams = Some(grams);
        Ok(Reply::Done)
    }

    /// Pool: one layer's heads, its products on `choice`'s backend (this worker's own GPU
    /// device, kept for the next layer, or the CPU). A GPU that fails, or that this worker cannot
    /// open, leaves the layer to the CPU, which gives the same numbers to ~1e-11.
    async fn fingerprint_layer(
        &mut self,
        model: ModelId,
        mode: Mode,
        layer: usize,
        choice: BackendChoice,
    ) -> Result<Reply> {
        let held = held_in(&self.models, model)?;
        if layer >= held.config.layers {
            return Err(Error::Worker(format!("no layer {layer} in this model")));
        }
        let (stream, grams) = (held.stream()?, held.grams()?);
        let (heads, gpu_bytes) = match choice {
            BackendChoice::Cpu => (fingerprint_layer(&stream, grams, mode, layer)?, None),
            gpu => {
                let backend = kept_backend(&mut self.backend, gpu).await;
                let start = backend.bytes_moved();
                let heads = backend
                    .with_fallback(async |backend| {
                        fingerprint_layer_on(&stream, &grams.for_products(), mode, layer, backend).await
                    })
                    .await?;
                (heads, moved_between(start, backend.bytes_moved()))
            }
        };
        Ok(Reply::Heads { heads, gpu_bytes })
    }

    /// `Induction`: the whole induction probe on `choice`'s backend.
    async fn induction(
        &mut self,
        model: ModelId,
        sequence: &ProbeSequence,
        prepend_bos: bool,
        choice: BackendChoice,
        report: Reporter,
    ) -> Result<Reply> {
        let held = held_in(&self.models, model)?;
        let mut cpu = Backend::cpu();
        let backend = backend_for(&mut self.backend, &mut cpu, choice).await;
        Ok(Reply::Induction(held.induction(sequence, prepend_bos, backend, &*report).await))
    }

    /// Pool, `InductionShare`: one worker's share of the induction probe's sequences.
    async fn induction_share(
        &mut self,
        model: ModelId,
        sequence: &ProbeSequence,
        Share { share, shares, prepend_bos, backend }: Share,
        report: Reporter,
    ) -> Result<Reply> {
        let held = held_in(&self.models, model)?;
        let mut cpu = Backend::cpu();
        let backend = backend_for(&mut self.backend, &mut cpu, backend).await;
        let scored = held.induction_share(sequence, prepend_bos, share, shares, backend, &*report).await;
        Ok(Reply::InductionShare(scored))
    }

    /// `SelfCopy`: the head's tokens that copy themselves most, raw and normalised.
    fn self_copy(&mut self, model: ModelId, mode: Mode, head: HeadId, top: usize) -> Result<Reply> {
        let (held, logits) = self.logits(model, mode, head)?;
        let (raw, normalised) = (logits.diagonal(), logits.normalised_diagonal());
        let k = top.min(raw.len());
        Ok(Reply::SelfCopy {
            raw: held.scored(&raw, top_k(&raw, k)),
            normalised: held.scored(&normalised, top_k(&normalised, k)),
        })
    }

    /// `Pair`: the OV logit from one token to another.
    fn pair(&mut self, model: ModelId, mode: Mode, head: HeadId, from: &str, to: &str) -> Result<Reply> {
        let (held, logits) = self.logits(model, mode, head)?;
        let (i, j) = (held.opened.tokenizer.single(from)?, held.opened.tokenizer.single(to)?);
        let value = logits.entry(i, j)?;
        Ok(Reply::Pair { from: held.opened.tokenizer.token_text(i), to: held.opened.tokenizer.token_text(j), value })
    }

    /// `Row`: the tokens one token promotes and suppresses most.
    fn row(&mut self, model: ModelId, mode: Mode, head: HeadId, token: &str, top: usize) -> Result<Reply> {
        let (held, logits) = self.logits(model, mode, head)?;
        let i = held.opened.tokenizer.single(token)?;
        let values = logits.row(i)?;
        let k = top.min(values.len());
        Ok(Reply::Row {
            token: held.opened.tokenizer.token_text(i),
            promotes: held.scored(&values, top_k(&values, k)),
            suppresses: held.scored(&values, bottom_k(&values, k)),
        })
    }

    /// `OvMatrix`: the token x token OV logits, of every token or the top ones by self-copy.
    fn ov_matrix(&mut self, model: ModelId, mode: Mode, head: HeadId, top: Option<usize>) -> Result<Reply> {
        let (held, logits) = self.logits(model, mode, head)?;
        let tokens = top.map_or(MatrixTokens::All, MatrixTokens::Top);
        let matrix = logits.matrix(tokens)?;
        Ok(Reply::OvMatrix {
            tokens: matrix.tokens.iter().map(|&i| held.opened.tokenizer.token_text(i)).collect(),
            ids: matrix.tokens,
            values: matrix.values,
        })
    }

    /// `Pattern`: one head's attention pattern on `text`.
    async fn pattern(
        &mut self,
        model: ModelId,
        head: HeadId,
        text: &str,
        prepend_bos: bool,
        choice: BackendChoice,
    ) -> Result<Reply> {
        let held = held_in(&self.models, model)?;
        let mut cpu = Backend::cpu();
        let backend = backend_for(&mut self.backend, &mut cpu, choice).await;
        Ok(Reply::Pattern(held.pattern(head, text, prepend_bos, backend).await?))
    }

    /// `Verdicts`: a suite's verdict table for one head.
    async fn verdicts(
        &mut self,
        model: ModelId,
        head: HeadId,
        suite: &Suite,
        prepend_bos: bool,
        choice: BackendChoice,
    ) -> Result<Reply> {
        let held = held_in(&self.models, model)?;
        let mut cpu = Backend::cpu();
        let backend = backend_for(&mut self.backend, &mut cpu, choice).await;
        Ok(Reply::Verdicts(held.verdicts(head, suite, prepend_bos, backend).await?))
    }

    /// Every pair's composition scores of a model this worker holds, on the backend its Grams
    /// were made on (this worker's GPU device, kept, or the CPU; a GPU that fails reruns it all
    /// on the CPU), after checking that what that backend's method keeps fits beside the models
    /// held.
    async fn composition(&mut self, model: ModelId, mode: Mode, report: Reporter) -> Result<Reply> {
        let resident = self.resident_bytes();
        let held = held_in(&self.models, model)?;
        let choice = held.grams.as_ref().map_or(BackendChoice::Cpu, |grams| backend_found(&grams.backend));
        let mut cpu = Backend::cpu();
        let backend = backend_for(&mut self.backend, &mut cpu, choice).await;
        let need = estimated_composition_bytes(&held.config, backend.is_gpu());
        if need + resident > WORKER_BUDGET_BYTES {
            return Err(composition_too_large(&held.config, backend.is_gpu(), need, resident));
        }
        let stream = held.stream()?;
        let stage = composition_stage(mode);
        report(Progress::new(stage.clone(), 0, held.config.layers as u64));
        let composition = backend
            .with_fallback(async |backend| {
                composition_on(&stream, mode, backend, &mut |done, layers| {
                    report(Progress::new(stage.clone(), done as u64, layers as u64))
                })
                .await
            })
            .await?;
        Ok(Reply::Composition(Box::new(composition)))
    }

    /// `Svd`: one head's singular directions, read out through the embedding and unembedding.
    fn svd(&self, model: ModelId, head: HeadId, mode: Mode, tokens: usize) -> Result<Reply> {
        let held = self.held(model)?;
        let head = held.head(head)?;
        Ok(Reply::Svd(Box::new(head_svd(&held.stream()?, &held.opened.tokenizer, head, mode, tokens)?)))
    }
}

/// What an `InductionShare` asks for besides the model and its sequences.
struct Share {
    share: usize,
    shares: usize,
    prepend_bos: bool,
    backend: BackendChoice,
}
