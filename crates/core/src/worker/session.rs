//! The worker's side of the page, as plain Rust: it holds the loaded models and answers each
//! `Request` from the core. No browser here (the host feeds it `ByteSource`s, a clock and a
//! progress reporter), so it is tested natively like the rest of the core.

use std::collections::HashMap;
use std::rc::Rc;

use sha2::{Digest, Sha256};

use super::pool::{backend_found, combine_induction};
use super::protocol::{
    Analysis, GramsData, InductionRun, InductionShare, LinkSource, ModelId, ModelInfo, Pattern, PinnedLink,
    ProbeSequence, Progress, Reply, Request, Role, Scored, Timing,
};
use crate::analysis::circuits::{Grams, segments};
use crate::analysis::composition::{Composition, composition_on};
use crate::analysis::fingerprint::{fingerprint_layer, fingerprint_layer_on, fingerprint_layers};
use crate::analysis::ov_logits::{MatrixTokens, bottom_k, top_k};
use crate::analysis::singular::head_svd;
use crate::analysis::{HeadId, Mode, ModelFingerprint, OvTokenLogits};
use crate::backend::{Backend, BackendChoice, block_on, moved_between};
use crate::model::{ModelConfig, ModelStream, VOCAB_BLOCK, Weights};
use crate::probes::induction::{
    DEFAULT_SEQUENCES, SequenceScores, induction_cells, random_first_copies, score_sequences, text_window_first_copies,
};
use crate::probes::suite::VerdictRow;
use crate::probes::{Suite, attention_patterns, verdict_table};
use crate::tokens::{Bos, Tokenizer, choose_bos, with_bos};
use crate::weights::remote::{Client, LinkCache, ModelLink, NoCache, Opener, Patience, Transport};
use crate::weights::{ByteSource, ModelFiles};
use crate::{Error, Result};

/// Receives progress; the host forwards it to the page.
pub type Reporter = Rc<dyn Fn(Progress)>;

/// Longest first copy of the default induction probe (docs/methods.md#5-probes-running-the-model;
/// TransformerLens uses 50).
pub const INDUCTION_LEN: usize = 50;
/// Bytes hashed per read, so a large file never sits in memory whole.
const HASH_CHUNK: usize = 8 << 20;
/// The fetched bytes a worker holds in memory of each file of a model by link, where its host
/// keeps them nowhere else: a window or two of the ranges it reads; what it drops is fetched
/// again. (The tab's workers keep what they fetch as `Blob`s for the run instead.)
pub const LINK_BYTES_PER_FILE: u64 = 48 << 20;

/// The length of each copy of an induction probe's sequence: at most half the context.
pub fn probe_len(config: &ModelConfig) -> usize {
    config.context.map_or(INDUCTION_LEN, |c| INDUCTION_LEN.min(c / 2))
}

/// The default induction probe: uniform random tokens, seeds 0..8.
pub fn default_sequence(config: &ModelConfig) -> ProbeSequence {
    ProbeSequence::UniformRandom { seed: 0, len: probe_len(config), count: DEFAULT_SEQUENCES }
}

/// The length of each copy when a BOS takes one position of the context.
fn probe_len_with(config: &ModelConfig, len: usize, bos: Option<usize>) -> usize {
    match (config.context, bos) {
        (Some(context), Some(_)) if len.saturating_mul(2).saturating_add(1) > context => context.saturating_sub(1) / 2,
        _ => len,
    }
}

/// A loaded model: its files (read by byte range whenever weights are needed, never held as
/// f32 whole) and what every request needs that is small: the configuration, tokenizer, BOS and
/// the d_model x d_model Grams.
struct Held {
    files: ModelFiles,
    /// A model by link as opened.
    link: Option<PinnedLink>,
    config: ModelConfig,
    tokenizer: Tokenizer,
    /// None between a pool's `Open` and its `SetGrams`.
    grams: Option<Grams>,
    bos: Option<Bos>,
    parameters: u64,
    facts: Vec<(String, String)>,
}

impl Held {
    /// The model's weights, read from its files as they are asked for (opening reads only the
    /// headers, config.json and the final norm).
    fn stream(&self) -> Result<ModelStream<'_>> {
        ModelStream::open(&self.files)
    }

    /// Bytes held between requests: the Grams, and the tokenizer counted as the pre-load estimate
    /// counts it (8 times its JSON, which the files keep too). The weight files are browser
    /// `File`s, outside wasm memory.
    fn resident_bytes(&self) -> u64 {
        let grams = self.grams.as_ref().map_or(0, Grams::bytes);
        grams + 8 * self.files.tokenizer_json.as_ref().map_or(0, |t| t.len() as u64)
    }

    /// Text or, for models without a vocabulary, comma-separated ids.
    fn encode(&self, text: &str) -> Result<Vec<usize>> {
        self.tokenizer.encode(text)
    }

    fn head(&self, head: HeadId) -> Result<HeadId> {
        HeadId::parse(&head.to_string(), &self.config)
    }

    fn grams(&self) -> Result<&Grams> {
        self.grams.as_ref().ok_or_else(|| Error::Worker("the model's Grams are not computed yet in this worker".into()))
    }

    fn info(&self) -> ModelInfo {
        ModelInfo {
            config: self.config.clone(),
            parameters: self.parameters,
            facts: self.facts.clone(),
            bos: self.bos.clone(),
            link: self.link.clone(),
        }
    }

    fn scored(&self, values: &[f64], ids: Vec<usize>) -> Vec<Scored> {
        ids.into_iter().map(|i| (self.tokenizer.token_text(i), values[i])).collect()
    }

    /// Every head in one mode, a layer read at a time, reporting each head as its layer is done
    /// (and the stage before the first layer is read).
    fn fingerprint(&self, mode: Mode, report: &Reporter) -> Result<ModelFingerprint> {
        let stage = fingerprint_stage(mode);
        let heads = (self.config.layers * self.config.heads) as u64;
        let grid = Some((self.config.layers, self.config.heads));
        report(Progress { stage: stage.clone(), done: 0, total: heads, grid, heads: Vec::new() });
        fingerprint_layers(&self.stream()?, self.grams()?, mode, &mut |head, done, _| {
            let heads_done = vec![head.clone()];
            report(Progress { stage: stage.clone(), done: done as u64, total: heads, grid, heads: heads_done });
        })
    }

    /// The BOS id to prepend, if asked for and the model has one.
    fn bos(&self, prepend_bos: bool) -> Option<usize> {
        self.bos.as_ref().filter(|_| prepend_bos).map(|b| b.id)
    }

    /// The whole induction probe on `backend` (see [`Held::induction_share`]).
    async fn induction(
        &self,
        sequence: &ProbeSequence,
        prepend_bos: bool,
        backend: &mut Backend,
        report: &Reporter,
    ) -> InductionRun {
        combine_induction(vec![self.induction_share(sequence, prepend_bos, 0, 1, backend, report).await])
    }

    /// Share `share` of `shares` of the probe's sequences (the pool gives each worker one),
    /// each run and scored alone, the forward pass on `backend`; a GPU that fails reruns the
    /// whole share on the CPU, and the share says so.
    async fn induction_share(
        &self,
        sequence: &ProbeSequence,
        prepend_bos: bool,
        share: usize,
        shares: usize,
        backend: &mut Backend,
        report: &Reporter,
    ) -> InductionShare {
        let bos = self.bos(prepend_bos);
        // A BOS can leave one position too few for the copies asked for: they are shortened,
        // and the description names the length actually used.
        let sequence = match sequence {
            ProbeSequence::UniformRandom { len, .. } | ProbeSequence::TextWindow { len, .. } => {
                sequence.with_len(probe_len_with(&self.config, *len, bos))
            }
        };
        let scores = self.share_scores(&sequence, bos, share, shares, backend, report).await;
        let shown_bos = self.bos.as_ref().filter(|_| prepend_bos);
        InductionShare {
            sequence: sequence.describe(shown_bos),
            bos,
            scores: scores.map_err(|e| e.to_string()),
            backend: backend.forward_info(),
        }
    }

    /// The scores of this share's sequences, run on `backend` (the whole share again on the CPU
    /// when the GPU fails).
    async fn share_scores(
        &self,
        sequence: &ProbeSequence,
        bos: Option<usize>,
        share: usize,
        shares: usize,
        backend: &mut Backend,
        report: &Reporter,
    ) -> Result<Vec<SequenceScores>> {
        if share >= shares {
            return Err(Error::Worker(format!("no share {share} of {shares} of the induction probe")));
        }
        let model = self.stream()?;
        let copies = match sequence {
            ProbeSequence::UniformRandom { seed, len, count } => {
                random_first_copies(&self.tokenizer.ordinary_ids(&model), *len, *seed, *count)?
            }
            ProbeSequence::TextWindow { text, seed, len, count } => {
                text_window_first_copies(&self.encode(text)?, *len, *seed, *count)?
            }
        };
        let mine = &copies[share * copies.len() / shares..(share + 1) * copies.len() / shares];
        if mine.is_empty() {
            return Ok(Vec::new());
        }
        backend
            .with_fallback(async |backend| {
                score_sequences(&model, mine, bos, backend, &mut |done, total| {
                    report(Progress::new(PROBE_STAGE, done as u64, total as u64))
                })
                .await
            })
            .await
    }

    /// One head's attention pattern on `text`, the forward pass on `backend`.
    async fn pattern(&self, head: HeadId, text: &str, prepend_bos: bool, backend: &mut Backend) -> Result<Pattern> {
        let head = self.head(head)?;
        let ids = with_bos(self.bos(prepend_bos), &self.encode(text)?);
        let stream = self.stream()?;
        let patterns = backend.with_fallback(async |backend| attention_patterns(&stream, &ids, backend).await).await?;
        let matrix = &patterns[head.layer][head.head];
        let rows = (0..ids.len()).map(|q| (0..ids.len()).map(|k| matrix[(q, k)] as f64).collect()).collect();
        Ok(Pattern {
            tokens: ids.iter().map(|&i| self.tokenizer.token_text(i)).collect(),
            rows,
            marks: induction_cells(&ids),
        })
    }

    /// A suite's verdict table for one head, the forward pass on `backend`.
    async fn verdicts(
        &self,
        head: HeadId,
        suite: &Suite,
        prepend_bos: bool,
        backend: &mut Backend,
    ) -> Result<Vec<VerdictRow>> {
        let (head, bos, stream) = (self.head(head)?, self.bos(prepend_bos), self.stream()?);
        backend
            .with_fallback(async |backend| verdict_table(&stream, &self.tokenizer, suite, head, bos, backend).await)
            .await
    }
}

pub const PROBE_STAGE: &str = "Running the induction probe (layer by layer)";

/// The busy line while composition scores are computed.
pub fn composition_stage(mode: Mode) -> String {
    format!("Composition scores between heads ({}, layer by layer)", mode.name())
}

/// What the lead holds to compute composition scores, in bytes (f64 unless said): every
/// layer's writer blocks (layers·heads·d_head x d_model, kept until the last layer), one layer's
/// attention as read and its heads' weights and blocks (four d_model x d_head blocks a head),
/// the layer's readers side by side (d_model x 3·heads·d_head), one layer pair's product
/// (heads·d_head x 3·heads·d_head), and the scores twice (3 (layers·heads)², and the copy that
/// travels to the page).
pub fn estimated_composition_bytes(config: &ModelConfig) -> u64 {
    let [layers, heads, d_model, d_head] =
        [config.layers, config.heads, config.d_model, config.d_head].map(|v| v as u64);
    let width = heads * d_head;
    let writers = 8 * layers * width * d_model;
    let blocks = 8 * 4 * width * d_model;
    let readers = 8 * d_model * 3 * width;
    let product = 8 * width * 3 * width;
    let scores = 2 * 8 * 3 * (layers * heads).pow(2);
    BASE_BYTES + writers + Sizes::of(config, true).attention + blocks + readers + product + scores
}

/// The one-line refusal of composition scores the worker cannot hold, with the numbers.
fn composition_too_large(config: &ModelConfig, need: u64, held: u64) -> Error {
    let writers = 8 * (config.layers * config.heads * config.d_head * config.d_model) as u64;
    Error::TooLargeForTab(format!(
        "composition scores of this model ({} layers x {} heads, d_head {}, width {}) keep every layer's writers ({}, f64) and need about {} in the tab's analysis worker beside the {} it holds, over its budget of {} (wasm32 memory ends at 4.29 GB): the command line's `headprint composition` computes them with no such limit",
        config.layers,
        config.heads,
        config.d_head,
        config.d_model,
        gigabytes(writers),
        gigabytes(need),
        gigabytes(held),
        gigabytes(WORKER_BUDGET_BYTES),
    ))
}

/// What the analysis worker lets one load need at its peak: wasm32's memory ends at 4 GiB, and
/// a quarter of that is left for what the estimate does not count (the allocator's
/// fragmentation, the page's messages, the wasm code and stack).
pub const WORKER_BUDGET_BYTES: u64 = 3 << 30;
/// The worker before any model: code, stack, the allocator's first pages.
const BASE_BYTES: u64 = 64 << 20;

/// The analysis worker's peak while it loads, fingerprints and probes a model, estimated from
/// its header and config alone (nothing large is read to know it): what it holds throughout
/// plus the largest of what its stages hold one at a time, in f32 or f64 as the code keeps it.
/// Held: the Grams (f64: one d_model² matrix tied, three untied), their Cholesky factors (one
/// tied, two untied) and the tokenizer, at 8 times its JSON. Stages:
/// - the Gram stage: one segment's Grams (summed from zero, then added, or copied out to the
///   page when the pool shares the segments, the lead's too) and one block of vocabulary rows;
/// - a layer's fingerprints (the pool hands the lead layers too): see [`Sizes`]'s `attention`;
/// - the probe: one layer with its MLP (the forward pass) in f32, plus converting its largest
///   matrix: the decoded f32, the matrix and its transpose (12 bytes an element), and what the
///   induction probe's sequences hold (see `probe_bytes`).
pub fn estimated_peak_bytes(config: &ModelConfig, tied: bool, tokenizer_json: u64) -> u64 {
    let sizes = Sizes::of(config, tied);
    let probe = probe_bytes(config, DEFAULT_SEQUENCES);
    let stages = (2 * sizes.grams + sizes.gram_block).max(sizes.layer + probe).max(sizes.attention);
    BASE_BYTES + sizes.grams + sizes.factors + stages + 8 * tokenizer_json
}

/// A helper of the tab's pool: it holds the Grams and the tokenizer, computes Gram segments
/// (one segment's Grams, a block of rows, and the segment's entries copied out to the page),
/// reads one layer's attention at a time, and runs its share of the induction probe's
/// sequences (half of them at most: a pool with a helper has two workers or more).
pub fn estimated_helper_bytes(config: &ModelConfig, tied: bool, tokenizer_json: u64) -> u64 {
    let sizes = Sizes::of(config, tied);
    let probe = probe_bytes(config, DEFAULT_SEQUENCES.div_ceil(2));
    let stages = (2 * sizes.grams + sizes.gram_block).max(sizes.attention).max(sizes.layer + probe);
    BASE_BYTES + sizes.grams + sizes.factors + stages + 8 * tokenizer_json
}

/// What the forward pass holds of `sequences` induction sequences (BOS + 2 x 50 tokens) until
/// they are scored (f32 words): what each keeps (three cells of every head's pattern per
/// second-copy query, every head's standing at each counted position, about 12 words, a top token
/// per position), and, one sequence at a time, the largest of what passes through: a layer's
/// whole patterns, or its logits for a block of the vocabulary.
fn probe_bytes(config: &ModelConfig, sequences: usize) -> u64 {
    let (positions, n) = ((2 * INDUCTION_LEN + 1) as u64, INDUCTION_LEN as u64);
    let [layers, heads] = [config.layers, config.heads].map(|v| v as u64);
    let kept = layers * heads * (3 * n + 12 * n) + 2 * positions;
    let passing = (heads * positions * positions).max(positions * VOCAB_BLOCK as u64);
    4 * (sequences as u64 * kept + passing)
}

/// How many workers the pool uses for a model: up to `hardware` (at least 2), as many as fit
/// [`POOL_BUDGET_BYTES`] together (the lead and its helpers), and never fewer than the lead.
pub fn pool_workers(hardware: usize, lead_bytes: u64, helper_bytes: u64) -> usize {
    let room = POOL_BUDGET_BYTES.saturating_sub(lead_bytes);
    let helpers = room / helper_bytes.max(1);
    1 + (hardware.max(2) - 1).min(helpers as usize)
}

/// What every worker of the pool may need together (each also stays within its own
/// [`WORKER_BUDGET_BYTES`]): the pool does not multiply a large model's memory by the cores.
pub const POOL_BUDGET_BYTES: u64 = 4 << 30;

/// The sizes the estimates add up, in bytes.
struct Sizes {
    grams: u64,
    /// The Grams' Cholesky factors (`LayerProducts` multiplies with them), made once.
    factors: u64,
    gram_block: u64,
    /// One layer with its MLP, read for the forward pass.
    layer: u64,
    /// One layer's fingerprints, at the most of three moments: its attention read (f32) while
    /// its largest matrix converts (12 bytes an element); the attention beside its heads' f64
    /// weights (W_O twice: as stored and as the unembedding sees it); the attention and those
    /// weights beside the layer products' largest stacked input and its product
    /// (`LayerProducts::new`, f64, stacked from the attention as stored).
    attention: u64,
}

impl Sizes {
    fn of(config: &ModelConfig, tied: bool) -> Sizes {
        let ModelConfig { heads, kv_heads, d_model, d_head, d_mlp, .. } = *config;
        let [heads, kv_heads, d_model, d_head, d_mlp] = [heads, kv_heads, d_model, d_head, d_mlp].map(|v| v as u64);
        let grams = 8 * d_model * d_model * if tied { 1 } else { 3 };
        let factors = 8 * d_model * d_model * if tied { 1 } else { 2 };
        let gram_block = 1024 * d_model * (4 + 8 + 8) * if tied { 1 } else { 2 };
        let (d_q, d_kv) = (heads * d_head, kv_heads * d_head);
        let attention = d_model * (d_q + 2 * d_kv) + d_q * d_model;
        // Every (expert's) MLP matrix, and a mixture's router.
        let experts = match config.mlp {
            crate::model::MlpKind::Experts { experts, .. } => experts as u64,
            _ => 0,
        };
        let mlp = d_model * d_mlp * config.mlp.matrices() as u64 + d_model * experts;
        // Folded mode's copy of the attention weights where norms or a multiplier fold into
        // them (`circuits::circuit_attention`).
        let features = &config.features;
        let folds = features.qk_norm != crate::model::QkNorm::None
            || features.norm_sites != crate::model::NormSites::Pre
            || features.residual_multiplier.is_some();
        let folded_copy = if folds { 4 * attention } else { 0 };
        let largest_attention = (d_model * (d_q + 2 * d_kv)).max(d_q * d_model);
        let largest = (d_model * d_mlp).max(largest_attention);
        let head_weights = 8 * (attention + d_q * d_model);
        let stacked = 8 * d_model * (d_q + 2 * d_kv);
        Sizes {
            grams,
            factors,
            gram_block,
            layer: 4 * (attention + mlp) + 12 * largest,
            attention: folded_copy
                + (4 * attention + 12 * largest_attention)
                    .max(4 * attention + head_weights)
                    .max(4 * attention + head_weights + 2 * stacked),
        }
    }
}

fn gigabytes(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / 1e9)
}

/// SHA-256 of each file (read in chunks), combined into one hex string for several files.
fn sha256_of(named: &[(String, Box<dyn ByteSource>)], report: &dyn Fn(u64)) -> Result<String> {
    let mut done = 0u64;
    let mut lines: Vec<(String, String)> = Vec::with_capacity(named.len());
    for (name, source) in named {
        let mut hasher = Sha256::new();
        let mut offset = 0u64;
        while offset < source.len() {
            let len = HASH_CHUNK.min((source.len() - offset) as usize);
            hasher.update(source.read_range(offset, len)?);
            offset += len as u64;
            done += len as u64;
            report(done);
        }
        lines.push((name.rsplit(['/', '\\']).next().unwrap_or(name).to_string(), hex(&hasher.finalize())));
    }
    if let [(_, only)] = lines.as_slice() {
        return Ok(only.clone());
    }
    lines.sort();
    let joined: String = lines.iter().map(|(name, sha)| format!("{name}:{sha}\n")).collect();
    Ok(hex(&Sha256::digest(joined.as_bytes())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn held_in(models: &HashMap<ModelId, Held>, model: ModelId) -> Result<&Held> {
    models.get(&model).ok_or_else(|| not_loaded(model))
}

fn not_loaded(model: ModelId) -> Error {
    Error::Worker(format!("model {model} is not loaded in the worker"))
}

/// The backend for `choice`: the one `kept` if it is the same choice and still what was asked
/// for (a GPU that fell back to the CPU, or an `auto` that found none, is tried anew).
async fn kept_backend(kept: &mut Option<(BackendChoice, Backend)>, choice: BackendChoice) -> &mut Backend {
    let keep =
        matches!(kept, Some((was, backend)) if *was == choice && (backend.is_gpu() || choice == BackendChoice::Cpu));
    if !keep {
        *kept = Some((choice, Backend::open_or_cpu(choice).await));
    }
    &mut kept.as_mut().expect("just filled").1
}

/// The backend for `choice`: `cpu` for the CPU (a kept GPU stays kept for the next request
/// that asks for one), else the one [`kept_backend`] gives.
async fn backend_for<'a>(
    kept: &'a mut Option<(BackendChoice, Backend)>,
    cpu: &'a mut Backend,
    choice: BackendChoice,
) -> &'a mut Backend {
    match choice {
        BackendChoice::Cpu => cpu,
        other => kept_backend(kept, other).await,
    }
}

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

    /// Answers one request. `files` are the files of a `Load`, in its `names` order. Whatever
    /// may run on a GPU waits for it (in the browser): a load, the pool's GPU Grams, a layer's
    /// heads and the forward passes (the probes, a pattern, a verdict table); everything else is
    /// answered at once.
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
            Request::GpuGrams { model, backend } => self.gpu_grams(model, backend, report).await,
            Request::FingerprintLayer { model, mode, layer, backend } => {
                self.fingerprint_layer(model, mode, layer, backend).await
            }
            Request::Induction { model, sequence, prepend_bos, backend } => {
                let held = held_in(&self.models, model)?;
                let mut cpu = Backend::cpu();
                let backend = backend_for(&mut self.backend, &mut cpu, backend).await;
                Ok(Reply::Induction(held.induction(&sequence, prepend_bos, backend, &report).await))
            }
            Request::InductionShare { model, sequence, prepend_bos, share, shares, backend } => {
                let held = held_in(&self.models, model)?;
                let mut cpu = Backend::cpu();
                let backend = backend_for(&mut self.backend, &mut cpu, backend).await;
                let scored = held.induction_share(&sequence, prepend_bos, share, shares, backend, &report).await;
                Ok(Reply::InductionShare(scored))
            }
            Request::Pattern { model, head, text, prepend_bos, backend } => {
                let held = held_in(&self.models, model)?;
                let mut cpu = Backend::cpu();
                let backend = backend_for(&mut self.backend, &mut cpu, backend).await;
                Ok(Reply::Pattern(held.pattern(head, &text, prepend_bos, backend).await?))
            }
            Request::Verdicts { model, head, suite, prepend_bos, backend } => {
                let held = held_in(&self.models, model)?;
                let mut cpu = Backend::cpu();
                let backend = backend_for(&mut self.backend, &mut cpu, backend).await;
                Ok(Reply::Verdicts(held.verdicts(head, &suite, prepend_bos, backend).await?))
            }
            Request::Composition { model, mode } => {
                Ok(Reply::Composition(Box::new(self.composition(model, mode, report).await?)))
            }
            other => self.answer_now(other, files, report),
        }
    }

    /// Every pair's composition scores of a model this worker holds, the layer pairs' products
    /// on the backend its Grams were made on (this worker's GPU device, kept, or the CPU; a GPU
    /// that fails reruns it all on the CPU), after checking that what it keeps fits beside the
    /// models held.
    async fn composition(&mut self, model: ModelId, mode: Mode, report: Reporter) -> Result<Composition> {
        let held = held_in(&self.models, model)?;
        let need = estimated_composition_bytes(&held.config);
        let cached = self.logits.as_ref().map_or(0, |(_, logits)| logits.bytes());
        let resident = self.models.values().map(Held::resident_bytes).sum::<u64>() + cached;
        if need + resident > WORKER_BUDGET_BYTES {
            return Err(composition_too_large(&held.config, need, resident));
        }
        let choice = held.grams.as_ref().map_or(BackendChoice::Cpu, |grams| backend_found(&grams.backend));
        let mut cpu = Backend::cpu();
        let backend = backend_for(&mut self.backend, &mut cpu, choice).await;
        let stream = held.stream()?;
        let stage = composition_stage(mode);
        report(Progress::new(stage.clone(), 0, held.config.layers as u64));
        backend
            .with_fallback(async |backend| {
                composition_on(&stream, mode, backend, &mut |done, layers| {
                    report(Progress::new(stage.clone(), done as u64, layers as u64))
                })
                .await
            })
            .await
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

    fn answer_now(&mut self, request: Request, files: Vec<Box<dyn ByteSource>>, report: Reporter) -> Result<Reply> {
        match request {
            Request::Load { .. }
            | Request::GpuGrams { .. }
            | Request::FingerprintLayer { .. }
            | Request::Induction { .. }
            | Request::InductionShare { .. }
            | Request::Pattern { .. }
            | Request::Verdicts { .. }
            | Request::Composition { .. } => {
                Err(Error::Internal("what may run on a GPU is answered by `answer`".into()))
            }
            Request::Hash { names } => {
                if names.len() != files.len() {
                    return Err(Error::Worker(format!("{} file names for {} files", names.len(), files.len())));
                }
                let total: u64 = files.iter().map(|f| f.len()).sum();
                let named: Vec<(String, Box<dyn ByteSource>)> = names.into_iter().zip(files).collect();
                let hashing = move |done| report(Progress::new("Identifying the files (SHA-256)", done, total));
                Ok(Reply::Hashed { sha256: sha256_of(&named, &hashing)? })
            }
            Request::Fingerprint { model, mode } => {
                let held = self.held(model)?;
                let started = (self.clock)();
                let fingerprint = held.fingerprint(mode, &report)?;
                let timing = Timing { step: format!("fingerprint {}", mode.name()), ms: (self.clock)() - started };
                Ok(Reply::Fingerprint { fingerprint: Box::new(fingerprint), timing })
            }
            Request::Published { link } => self.published(&link),
            Request::Forget { model } => {
                self.models.remove(&model);
                if self.logits.as_ref().is_some_and(|((m, ..), _)| *m == model) {
                    self.logits = None;
                }
                Ok(Reply::Done)
            }
            Request::SelfCopy { model, mode, head, top } => {
                let (held, logits) = self.logits(model, mode, head)?;
                let (raw, normalised) = (logits.diagonal(), logits.normalised_diagonal());
                let k = top.min(raw.len());
                Ok(Reply::SelfCopy {
                    raw: held.scored(&raw, top_k(&raw, k)),
                    normalised: held.scored(&normalised, top_k(&normalised, k)),
                })
            }
            Request::Pair { model, mode, head, from, to } => {
                let (held, logits) = self.logits(model, mode, head)?;
                let (i, j) = (held.tokenizer.single(&from)?, held.tokenizer.single(&to)?);
                let value = logits.entry(i, j)?;
                Ok(Reply::Pair { from: held.tokenizer.token_text(i), to: held.tokenizer.token_text(j), value })
            }
            Request::Row { model, mode, head, token, top } => {
                let (held, logits) = self.logits(model, mode, head)?;
                let i = held.tokenizer.single(&token)?;
                let values = logits.row(i)?;
                let k = top.min(values.len());
                Ok(Reply::Row {
                    token: held.tokenizer.token_text(i),
                    promotes: held.scored(&values, top_k(&values, k)),
                    suppresses: held.scored(&values, bottom_k(&values, k)),
                })
            }
            Request::OvMatrix { model, mode, head, top } => {
                let (held, logits) = self.logits(model, mode, head)?;
                let tokens = top.map_or(MatrixTokens::All, MatrixTokens::Top);
                let matrix = logits.matrix(tokens)?;
                Ok(Reply::OvMatrix {
                    tokens: matrix.tokens.iter().map(|&i| held.tokenizer.token_text(i)).collect(),
                    ids: matrix.tokens,
                    values: matrix.values,
                })
            }
            Request::Svd { model, head, mode, tokens } => {
                let held = self.held(model)?;
                let head = held.head(head)?;
                Ok(Reply::Svd(Box::new(head_svd(&held.stream()?, &held.tokenizer, head, mode, tokens)?)))
            }
            Request::Open { model, names, role, link } => {
                let (held, opening) = self.open(names, files, link, role)?;
                let info = Box::new(held.info());
                let segments = segments(held.config.vocab);
                self.models.insert(model, held);
                let (tied, lead_bytes, helper_bytes) = (opening.tied, opening.lead_bytes, opening.helper_bytes);
                Ok(Reply::Opened { info, tied, segments, lead_bytes, helper_bytes })
            }
            Request::GramSegment { model, segment } => {
                let held = self.held(model)?;
                if segment >= segments(held.config.vocab) {
                    return Err(Error::Worker(format!("no Gram segment {segment} in this model")));
                }
                let grams = Grams::segment(&held.stream()?, &mut Backend::cpu(), segment)?;
                Ok(Reply::GramSegment { segment, grams: GramsData::of(&grams) })
            }
            Request::SetGrams { model, grams } => {
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
        }
    }

    fn held(&self, model: ModelId) -> Result<&Held> {
        held_in(&self.models, model)
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

    /// Reads a model's files: header, config, tokenizer and BOS, after checking that this
    /// worker's share of it fits beside the models it holds. Nothing large is read.
    fn open(
        &mut self,
        names: Vec<String>,
        files: Vec<Box<dyn ByteSource>>,
        link: Option<LinkSource>,
        role: Role,
    ) -> Result<(Held, Opening)> {
        let link_cache = self.link_cache.take();
        let (files, link) = match link {
            Some(source) => self.open_link(&source, link_cache)?,
            None => {
                if names.len() != files.len() {
                    return Err(Error::Worker(format!("{} file names for {} files", names.len(), files.len())));
                }
                let named: Vec<(String, Box<dyn ByteSource>)> = names.into_iter().zip(files).collect();
                (ModelFiles::from_named(named)?, None)
            }
        };
        let (config, parameters, facts, tokenizer, bos, opening) = {
            let model = ModelStream::open(&files)?;
            let tokenizer_bytes = files.tokenizer_json.as_ref().map_or(0, |t| t.len() as u64);
            let fetched_bytes = if link.is_some() { files.weights.len() as u64 * LINK_BYTES_PER_FILE } else { 0 };
            let lead_bytes = estimated_peak_bytes(&model.config, model.tied(), tokenizer_bytes) + fetched_bytes;
            let helper_bytes = estimated_helper_bytes(&model.config, model.tied(), tokenizer_bytes) + fetched_bytes;
            let need = if role == Role::Lead { lead_bytes } else { helper_bytes };
            // The model shown stays held while this one loads (the page keeps both).
            // So does the OV token view cached for the page (vocab x d_head sides: 100 MB on Pythia-1B).
            let cached = self.logits.as_ref().map_or(0, |(_, logits)| logits.bytes());
            let held = self.models.values().map(Held::resident_bytes).sum::<u64>() + cached;
            if need + held > WORKER_BUDGET_BYTES {
                return Err(too_large(&model.config, need, held));
            }
            let tokenizer = Tokenizer::for_model(&model, files.tokenizer_json.as_deref())?;
            let bos = choose_bos(&model, &tokenizer);
            let opening = Opening { tied: model.tied(), lead_bytes, helper_bytes };
            (model.config.clone(), model.parameter_count, model.facts().to_vec(), tokenizer, bos, opening)
        };
        Ok((Held { files, link, config, tokenizer, grams: None, bos, parameters, facts }, opening))
    }

    /// What the Hub publishes about a revision by link: no file of it is read.
    fn published(&self, source: &LinkSource) -> Result<Reply> {
        let transport =
            self.transport.ok_or_else(|| Error::Internal("this worker cannot fetch models by link".into()))?;
        let ModelLink::Hub { repo, revision } = ModelLink::parse(&source.link)? else {
            return Err(Error::Invalid(format!(
                "{}: only a Hub revision (hf:ORG/NAME@REVISION) has published hashes",
                source.link
            )));
        };
        let client = Client::new(transport(), &source.hub, None, Patience::default());
        let client = std::sync::Arc::new(if source.offline { client.offline() } else { client });
        let cache = NoCache { budget: 0 };
        Ok(Reply::Published(Opener::new(client, &cache, &source.hub).published(&repo, &revision)?))
    }

    /// A model by link: its small files fetched whole, its weights read by range as asked.
    fn open_link(
        &self,
        source: &LinkSource,
        cache: Option<Box<dyn LinkCache>>,
    ) -> Result<(ModelFiles, Option<PinnedLink>)> {
        let transport =
            self.transport.ok_or_else(|| Error::Internal("this worker cannot fetch models by link".into()))?;
        let link = ModelLink::parse(&source.link)?;
        // The page sends no token: a gated model needs the command line.
        let client = Client::new(transport(), &source.hub, None, Patience::default());
        let client = std::sync::Arc::new(if source.offline { client.offline() } else { client });
        let cache = cache.unwrap_or_else(|| Box::new(NoCache { budget: LINK_BYTES_PER_FILE }));
        let opened = Opener::new(client, cache.as_ref(), &source.hub).open(&link)?;
        let pinned = PinnedLink { pinned: opened.pinned.to_string(), total_bytes: opened.total_bytes };
        Ok((opened.files, Some(pinned)))
    }

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
        let (mut held, opening) = self.open(names, files, link, Role::Lead)?;
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
        let folded = held.fingerprint(Mode::Folded, &report)?;
        timings.push(timed("fingerprint folded", started));

        report(Progress::new(PROBE_STAGE, 0, held.config.layers as u64 + 1));
        let started = clock();
        let induction = held.induction(&default_sequence(&held.config), prepend_bos, backend, &report).await;
        timings.push(timed("induction probe", started));

        let info = held.info();
        self.models.insert(id, held);
        Ok(Reply::Analysed(Box::new(Analysis { info, folded, induction, timings })))
    }
}

/// What opening a model tells the pool besides the model itself.
struct Opening {
    tied: bool,
    lead_bytes: u64,
    helper_bytes: u64,
}

/// The busy line while the Grams are computed (the page's pool names the stage the same way).
pub fn gram_stage(tied: bool) -> &'static str {
    if tied {
        "Computing the embedding Grams (reading W_E)"
    } else {
        "Computing the embedding Grams (reading W_E and W_U)"
    }
}

/// The busy line while heads are fingerprinted.
pub fn fingerprint_stage(mode: Mode) -> String {
    format!("Fingerprinting heads ({})", mode.name())
}

/// The one-line refusal of a model the worker cannot hold, with the numbers.
fn too_large(config: &ModelConfig, need: u64, held: u64) -> Error {
    let beside = match held {
        0 => String::new(),
        held => format!(" beside the {} the model shown holds", gigabytes(held)),
    };
    Error::TooLargeForTab(format!(
        "this model ({} layers x {} heads, width {}, vocabulary {}) needs about {} in the tab's analysis worker{beside}, over its budget of {} (wasm32 memory ends at 4.29 GB): the command line's `headprint fingerprint` reads it with no such limit",
        config.layers,
        config.heads,
        config.d_model,
        config.vocab,
        gigabytes(need),
        gigabytes(WORKER_BUDGET_BYTES),
    ))
}

#[cfg(test)]
mod tests {
    use super::Sizes;
    use crate::model::{Activation, MlpKind, ModelConfig, NormKind, NormSites, Positions, QkNorm};

    fn config(mlp: MlpKind) -> ModelConfig {
        ModelConfig {
            family: "test".into(),
            layers: 2,
            heads: 8,
            kv_heads: 2,
            d_model: 256,
            d_head: 32,
            d_mlp: 1024,
            vocab: 1000,
            context: None,
            norm: NormKind::RmsNorm,
            norm_eps: 1e-6,
            positions: Positions::Nope,
            mlp,
            parallel_residual: false,
            features: Default::default(),
            bos_token_id: None,
            config_special_ids: Vec::new(),
            characters: false,
        }
    }

    #[test]
    fn composition_keeps_every_layers_writers() {
        // GPT-2 Small: 12 x 12 x 64 x 768 f64 writers are 57 MB; the whole stays small.
        let mut gpt2 = config(MlpKind::Plain(Activation::GeluTanh));
        (gpt2.layers, gpt2.heads, gpt2.kv_heads, gpt2.d_model, gpt2.d_head) = (12, 12, 12, 768, 64);
        let bytes = super::estimated_composition_bytes(&gpt2);
        assert!(bytes > 8 * 12 * 12 * 64 * 768 && bytes < 300 << 20, "{bytes}");
    }

    #[test]
    fn a_layer_counts_every_experts_matrices_and_the_router() {
        let gated = Sizes::of(&config(MlpKind::Gated(Activation::Silu)), true);
        let experts = Sizes::of(&config(MlpKind::Experts { experts: 8, top_k: 2, activation: Activation::Silu }), true);
        // Seven more experts of three d_model x d_mlp matrices, and the router's d_model x 8, in f32.
        assert_eq!(experts.layer - gated.layer, 4 * (7 * 3 * 256 * 1024 + 256 * 8));
        assert_eq!(experts.attention, gated.attention);
    }

    #[test]
    fn norms_that_fold_into_the_attention_add_its_folded_copy() {
        let plain = config(MlpKind::Gated(Activation::Silu));
        let mut qk_norms = plain.clone();
        qk_norms.features.qk_norm = QkNorm::PerHead;
        let mut post_norms = plain.clone();
        post_norms.features.norm_sites = NormSites::Post;
        let attention = (256 * (8 * 32 + 2 * 2 * 32) + 8 * 32 * 256) as u64;
        for folded in [qk_norms, post_norms] {
            assert_eq!(Sizes::of(&folded, true).attention - Sizes::of(&plain, true).attention, 4 * attention);
        }
    }
}
