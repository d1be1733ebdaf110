//! The worker's side of the page, as plain Rust: it holds the loaded models and answers each
//! `Request` from the core. No browser here (the host feeds it `ByteSource`s, a clock and a
//! progress reporter), so it is tested natively like the rest of the core.

use std::cell::Cell;
use std::collections::HashMap;
use std::rc::Rc;

use sha2::{Digest, Sha256};

use super::protocol::{
    Analysis, InductionRun, ModelId, ModelInfo, Pattern, ProbeSequence, Progress, Reply, Request, Scored, Timing,
};
use crate::analysis::circuits::Grams;
use crate::analysis::fingerprint::fingerprint_model_with_progress;
use crate::analysis::ov_logits::{bottom_k, top_k};
use crate::analysis::{Circuits, HeadId, Mode, ModelFingerprint, OvTokenLogits};
use crate::model::{LoadParts, Model};
use crate::probes::induction::{
    DEFAULT_SEQUENCES, induction_cells, induction_probe, random_first_copies, text_window_first_copies,
};
use crate::probes::verdict_table;
use crate::tokens::{Bos, Tokenizer, choose_bos, with_bos};
use crate::weights::{ByteSource, ModelFiles};
use crate::{Error, Result};

/// Receives progress; the host forwards it to the page.
pub type Reporter = Rc<dyn Fn(Progress)>;

/// Longest first copy of the default induction probe (spec section 4; TransformerLens uses 50).
pub const INDUCTION_LEN: usize = 50;
/// Bytes hashed per read, so a large file never sits in memory whole.
const HASH_CHUNK: usize = 8 << 20;

/// The length of each copy of an induction probe's sequence: at most half the context.
pub fn probe_len(config: &crate::model::ModelConfig) -> usize {
    config.context.map_or(INDUCTION_LEN, |c| INDUCTION_LEN.min(c / 2))
}

/// The default induction probe: uniform random tokens, seeds 0..8.
pub fn default_sequence(config: &crate::model::ModelConfig) -> ProbeSequence {
    ProbeSequence::UniformRandom { seed: 0, len: probe_len(config), count: DEFAULT_SEQUENCES }
}

/// The length of each copy when a BOS takes one position of the context.
fn probe_len_with(config: &crate::model::ModelConfig, len: usize, bos: Option<usize>) -> usize {
    match (config.context, bos) {
        (Some(context), Some(_)) if len.saturating_mul(2).saturating_add(1) > context => context.saturating_sub(1) / 2,
        _ => len,
    }
}

struct Held {
    model: Model,
    tokenizer: Tokenizer,
    grams: Grams,
    bos: Option<Bos>,
}

impl Held {
    /// Text or, for models without a vocabulary, comma-separated ids.
    fn encode(&self, text: &str) -> Result<Vec<usize>> {
        self.tokenizer.encode(text)
    }

    fn head(&self, head: HeadId) -> Result<HeadId> {
        HeadId::parse(&head.to_string(), &self.model.config)
    }

    fn scored(&self, values: &[f64], ids: Vec<usize>) -> Vec<Scored> {
        ids.into_iter().map(|i| (self.tokenizer.token_text(i), values[i])).collect()
    }

    /// Every head in one mode, reporting each head done.
    fn fingerprint(&self, mode: Mode, report: &Reporter) -> Result<ModelFingerprint> {
        let stage = format!("Fingerprinting heads ({})", mode.name());
        let heads = (self.model.config.layers * self.model.config.heads) as u64;
        let grid = Some((self.model.config.layers, self.model.config.heads));
        fingerprint_model_with_progress(&self.model, &self.grams, mode, &mut |head, done, _| {
            let heads_done = vec![head.clone()];
            report(Progress { stage: stage.clone(), done: done as u64, total: heads, grid, heads: heads_done });
        })
    }

    /// The BOS id to prepend, if asked for and the model has one.
    fn bos(&self, prepend_bos: bool) -> Option<usize> {
        self.bos.as_ref().filter(|_| prepend_bos).map(|b| b.id)
    }

    fn induction(&self, sequence: &ProbeSequence, prepend_bos: bool) -> InductionRun {
        let bos = self.bos(prepend_bos);
        // A BOS can leave one position too few for the copies asked for: they are shortened,
        // and the description names the length actually used.
        let sequence = match sequence {
            ProbeSequence::UniformRandom { len, .. } | ProbeSequence::TextWindow { len, .. } => {
                sequence.with_len(probe_len_with(&self.model.config, *len, bos))
            }
        };
        let report = (|| {
            let copies = match &sequence {
                ProbeSequence::UniformRandom { seed, len, count } => {
                    random_first_copies(&self.tokenizer.ordinary_ids(&self.model), *len, *seed, *count)?
                }
                ProbeSequence::TextWindow { text, seed, len, count } => {
                    text_window_first_copies(&self.encode(text)?, *len, *seed, *count)?
                }
            };
            induction_probe(&self.model, &copies, bos)
        })();
        let shown_bos = self.bos.as_ref().filter(|_| prepend_bos);
        InductionRun { sequence: sequence.describe(shown_bos), report: report.map_err(|e| e.to_string()) }
    }
}

/// A byte source that counts what is read through it, so loading can show progress.
struct Counted {
    inner: Box<dyn ByteSource>,
    read: Rc<Cell<u64>>,
    on_read: Rc<dyn Fn(u64)>,
}

impl ByteSource for Counted {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn len(&self) -> u64 {
        self.inner.len()
    }
    fn read_range(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let bytes = self.inner.read_range(offset, len)?;
        self.read.set(self.read.get() + len as u64);
        (self.on_read)(self.read.get());
        Ok(bytes)
    }
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
    models.get(&model).ok_or_else(|| Error::Io(format!("model {model} is not loaded in the worker")))
}

/// What a `Load` asks for besides reading the files.
struct Loading {
    analyse: bool,
    prepend_bos: bool,
}

pub struct Session {
    models: HashMap<ModelId, Held>,
    /// The last head's OV token logits: the head view asks for several readings of one head.
    logits: Option<((ModelId, Mode, HeadId), OvTokenLogits)>,
    /// Milliseconds since some origin (`performance.now()` in the browser).
    clock: fn() -> f64,
}

impl Session {
    pub fn new(clock: fn() -> f64) -> Self {
        Session { models: HashMap::new(), logits: None, clock }
    }

    /// Models currently held (the page keeps at most the shown one and the one loading).
    pub fn models_held(&self) -> usize {
        self.models.len()
    }

    /// Answers one request. `files` are the files of a `Load`, in its `names` order.
    pub fn handle(&mut self, request: Request, files: Vec<Box<dyn ByteSource>>, report: Reporter) -> Result<Reply> {
        match request {
            Request::Load { model, names, analyse, prepend_bos } => {
                self.load(model, names, files, Loading { analyse, prepend_bos }, report)
            }
            Request::Hash { names } => {
                if names.len() != files.len() {
                    return Err(Error::Io(format!("{} file names for {} files", names.len(), files.len())));
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
            Request::Forget { model } => {
                self.models.remove(&model);
                if self.logits.as_ref().is_some_and(|((m, ..), _)| *m == model) {
                    self.logits = None;
                }
                Ok(Reply::Done)
            }
            Request::Induction { model, sequence, prepend_bos } => {
                Ok(Reply::Induction(self.held(model)?.induction(&sequence, prepend_bos)))
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
            Request::Pattern { model, head, text, prepend_bos } => {
                let held = self.held(model)?;
                let head = held.head(head)?;
                let ids = with_bos(held.bos(prepend_bos), &held.encode(&text)?);
                let output = crate::forward::run(&held.model, &ids)?;
                let matrix = &output.patterns[head.layer][head.head];
                let rows = (0..ids.len()).map(|q| (0..ids.len()).map(|k| matrix[(q, k)] as f64).collect()).collect();
                Ok(Reply::Pattern(Pattern {
                    tokens: ids.iter().map(|&i| held.tokenizer.token_text(i)).collect(),
                    rows,
                    marks: induction_cells(&ids),
                }))
            }
            Request::Verdicts { model, head, suite, prepend_bos } => {
                let held = self.held(model)?;
                let bos = held.bos(prepend_bos);
                Ok(Reply::Verdicts(verdict_table(&held.model, &held.tokenizer, &suite, held.head(head)?, bos)?))
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
            let circuits = Circuits::new(&held.model, &held.grams, mode);
            self.logits = Some((key, OvTokenLogits::new(&circuits, head)));
        }
        Ok((held, &self.logits.as_ref().expect("just filled").1))
    }

    fn load(
        &mut self,
        id: ModelId,
        names: Vec<String>,
        files: Vec<Box<dyn ByteSource>>,
        Loading { analyse, prepend_bos }: Loading,
        report: Reporter,
    ) -> Result<Reply> {
        if names.len() != files.len() {
            return Err(Error::Io(format!("{} file names for {} files", names.len(), files.len())));
        }
        let clock = self.clock;
        let mut timings = Vec::new();
        let timed = |step: &str, since: f64| Timing { step: step.into(), ms: clock() - since };
        let total: u64 = files.iter().map(|f| f.len()).sum();
        let named: Vec<(String, Box<dyn ByteSource>)> = names.into_iter().zip(files).collect();

        let started = clock();
        let read = Rc::new(Cell::new(0));
        let reading_report = report.clone();
        let on_read: Rc<dyn Fn(u64)> =
            Rc::new(move |done| reading_report(Progress::new("Reading tensors", done, total)));
        let counted = named
            .into_iter()
            .map(|(name, inner)| {
                let source: Box<dyn ByteSource> =
                    Box::new(Counted { inner, read: read.clone(), on_read: on_read.clone() });
                (name, source)
            })
            .collect();
        let files = ModelFiles::from_named(counted)?;
        let model = Model::load(&files, LoadParts::Everything)?;
        let tokenizer = Tokenizer::for_model(&model, files.tokenizer_json.as_deref())?;
        drop(files);
        timings.push(timed("load", started));

        report(Progress::new("Computing the embedding Grams", 0, 1));
        let started = clock();
        let grams = Grams::compute(&model);
        timings.push(timed("gram", started));
        let bos = choose_bos(&model, &tokenizer);
        let held = Held { model, tokenizer, grams, bos };
        if !analyse {
            self.models.insert(id, held);
            return Ok(Reply::Loaded);
        }

        // Folded only: what the overview shows first. Raw mode is asked for when first shown.
        let started = clock();
        let folded = held.fingerprint(Mode::Folded, &report)?;
        timings.push(timed("fingerprint folded", started));

        report(Progress::new("Running the induction probe", 0, 1));
        let started = clock();
        let induction = held.induction(&default_sequence(&held.model.config), prepend_bos);
        timings.push(timed("induction probe", started));

        let info = ModelInfo {
            config: held.model.config.clone(),
            parameters: held.model.parameter_count,
            facts: held.model.facts.clone(),
            bos: held.bos.clone(),
        };
        self.models.insert(id, held);
        Ok(Reply::Analysed(Box::new(Analysis { info, folded, induction, timings })))
    }
}
