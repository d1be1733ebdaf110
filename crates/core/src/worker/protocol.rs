//! What the page and its analysis worker say to each other. Every message is JSON, so the
//! worker's answers are the same plain data the CLI prints; files travel beside a `Load` as
//! browser `Blob`s (structured clone, no copy of their bytes).

use serde::{Deserialize, Serialize};

use crate::analysis::circuits::Grams;
use crate::analysis::composition::Composition;
use crate::analysis::singular::HeadSvd;
use crate::analysis::{HeadFingerprint, HeadId, Mode, ModelFingerprint};
use crate::backend::{BackendChoice, BackendInfo};
use crate::model::ModelConfig;
use crate::probes::Suite;
use crate::probes::induction::{InductionReport, SequenceScores};
use crate::probes::suite::VerdictRow;
use crate::tokens::Bos;

/// A model the worker holds is named by the number the page gave it when loading it.
pub type ModelId = u64;

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Request {
    /// Reads the files sent alongside (in `names` order) as model `model`. With `analyse`, also
    /// fingerprints every head (folded) and runs the default induction probe; without, only
    /// loads (the page already holds the results: a restart after a cancel). The Grams are
    /// computed on `backend` (the GPU through WebGPU, or the CPU; the results say which).
    Load {
        model: ModelId,
        names: Vec<String>,
        analyse: bool,
        prepend_bos: bool,
        #[serde(default)]
        backend: BackendChoice,
        /// A model by link instead of files (then none are sent).
        #[serde(default)]
        link: Option<LinkSource>,
    },
    /// The SHA-256 of the files sent alongside (share links name local files by it). The page
    /// asks a second worker for it once a load has begun, so the first heads never wait for a
    /// whole model to be read twice.
    Hash { names: Vec<String> },
    /// What the Hub publishes about a revision by link (`hf:ORG/NAME@REVISION`) before any of its
    /// files is read: its commit and its weights' content hashes (`Opener::published`), by which
    /// Heads over training finds a repeated checkpoint (`crate::repeats`).
    Published { link: LinkSource },
    /// Every head's fingerprint in one mode (the page asks for raw mode when it is first shown).
    Fingerprint { model: ModelId, mode: Mode },
    /// Drops a model the page no longer shows.
    Forget { model: ModelId },
    /// Pool: reads the files sent alongside as model `model` without computing anything large:
    /// header, config, tokenizer, and the check that this worker's share fits its memory (the
    /// lead holds the model for every later request, a helper only for the pool's parts).
    Open {
        model: ModelId,
        names: Vec<String>,
        role: Role,
        #[serde(default)]
        link: Option<LinkSource>,
    },
    /// Pool: the whole Grams of a model the lead holds, on a GPU that `backend` (`Gpu` or
    /// `Auto`) finds; answered `NoGpu` when it finds none.
    GpuGrams { model: ModelId, backend: BackendChoice },
    /// Pool: one segment of the Grams (`analysis::circuits::segments`), summed from zero.
    GramSegment { model: ModelId, segment: usize },
    /// Pool: the model's Grams, summed by the page from every segment in order.
    SetGrams { model: ModelId, grams: GramsData },
    /// Pool: one layer's heads, with the Grams set before. `backend` is where the Grams were
    /// computed: `Gpu` runs the layer's products on this worker's own GPU device (opened at the
    /// first such request and kept), `Cpu` on its CPU.
    FingerprintLayer { model: ModelId, mode: Mode, layer: usize, backend: BackendChoice },
    /// The induction probe on other repeated sequences, with or without the model's BOS, its
    /// forward pass on `backend` (the GPU through WebGPU, or the CPU; the run says which).
    Induction {
        model: ModelId,
        sequence: ProbeSequence,
        prepend_bos: bool,
        #[serde(default)]
        backend: BackendChoice,
    },
    /// Pool: share `share` of `shares` of an induction probe's sequences, each scored alone, on
    /// `backend` (this worker's own GPU device, or its CPU; the page averages every share's with
    /// `worker::pool::combine_induction`).
    InductionShare {
        model: ModelId,
        sequence: ProbeSequence,
        prepend_bos: bool,
        share: usize,
        shares: usize,
        #[serde(default)]
        backend: BackendChoice,
    },
    /// The tokens with the largest self-copy logits, raw and normalised.
    SelfCopy { model: ModelId, mode: Mode, head: HeadId, top: usize },
    /// One entry of the token-space OV circuit, tokens as written by the user.
    Pair { model: ModelId, mode: Mode, head: HeadId, from: String, to: String },
    /// What attending one token promotes and suppresses most.
    Row { model: ModelId, mode: Mode, head: HeadId, token: String, top: usize },
    /// A block of the token-space OV circuit as a token x token matrix: the `top` tokens by
    /// self-copy logit, or every token when `top` is None (small vocabularies).
    OvMatrix { model: ModelId, mode: Mode, head: HeadId, top: Option<usize> },
    /// One head's attention pattern on a text (after the model's BOS with `prepend_bos`), the
    /// forward pass on `backend`.
    Pattern {
        model: ModelId,
        head: HeadId,
        text: String,
        prepend_bos: bool,
        #[serde(default)]
        backend: BackendChoice,
    },
    /// A suite's verdict table for one head (each prompt after the model's BOS with
    /// `prepend_bos`), the forward pass on `backend`.
    Verdicts {
        model: ModelId,
        head: HeadId,
        suite: Suite,
        prepend_bos: bool,
        #[serde(default)]
        backend: BackendChoice,
    },
    /// Every ordered pair of heads' Q-, K- and V-composition scores in one mode
    /// (docs/methods.md#8-circuits-between-heads), the lead's backend computing the layer
    /// pairs' products (the GPU the load's Grams were made on, else the CPU).
    Composition { model: ModelId, mode: Mode },
    /// One head's singular directions, OV and QK, each block read out through the vocabulary
    /// (`tokens` at each end of each readout).
    Svd { model: ModelId, head: HeadId, mode: Mode, tokens: usize },
}

/// A model named by link (`hf:ORG/NAME@REVISION`, `url:FOLDER/`, an http(s) folder), and the
/// Hub's address to resolve `hf:` links against. Each worker fetches what it reads itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LinkSource {
    pub link: String,
    pub hub: String,
    /// The browser is offline: read only what the page stored, and say what is missing.
    #[serde(default)]
    pub offline: bool,
}

/// What a worker of the pool does with a model it opens.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Role {
    /// Holds the model for every request (probes, token views) and takes a share of the parts.
    Lead,
    /// Only takes a share of the parts (Gram segments, layers' heads).
    Helper,
}

/// Grams passing between the page and a worker. The entries travel beside the JSON as a
/// `Float64Array` (the host moves them), never as text: their bits arrive unchanged and
/// nothing is parsed.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GramsData {
    pub d_model: usize,
    pub tied: bool,
    pub backend: BackendInfo,
    #[serde(skip)]
    pub values: Vec<f64>,
}

impl GramsData {
    pub fn of(grams: &Grams) -> GramsData {
        let d_model = grams.embed.nrows();
        GramsData { d_model, tied: grams.tied, backend: grams.backend.clone(), values: grams.values() }
    }

    pub fn grams(&self) -> crate::Result<Grams> {
        let mut grams = Grams::from_values(self.d_model, self.tied, &self.values)?;
        grams.backend = self.backend.clone();
        Ok(grams)
    }
}

impl Request {
    /// Takes out the numbers that travel beside this request's JSON (a moved `Float64Array`,
    /// never text), if it carries any: the Grams' entries.
    pub fn take_payload(&mut self) -> Option<Vec<f64>> {
        match self {
            Request::SetGrams { grams, .. } => Some(std::mem::take(&mut grams.values)),
            _ => None,
        }
    }

    /// Puts back what [`Request::take_payload`] took, once the JSON is read.
    pub fn put_payload(&mut self, values: Vec<f64>) {
        if let Request::SetGrams { grams, .. } = self {
            grams.values = values;
        }
    }
}

impl Reply {
    /// Takes out the numbers that travel beside this reply's JSON (a moved `Float64Array`,
    /// never text), if it carries any: the Grams' entries, an attention pattern's or an OV
    /// matrix's rows, the composition scores (3 (layers·heads)², 25 MB on Llama-3-8B). As JSON numbers a 512-token pattern's 262k weights cost the page's main
    /// thread a long frame to copy and parse; moved, they cost a copy.
    pub fn take_payload(&mut self) -> Option<Vec<f64>> {
        match self {
            Reply::GramSegment { grams, .. } | Reply::Grams { grams } => Some(std::mem::take(&mut grams.values)),
            Reply::Pattern(pattern) => Some(std::mem::take(&mut pattern.rows).into_iter().flatten().collect()),
            Reply::OvMatrix { values, .. } => Some(std::mem::take(values).into_iter().flatten().collect()),
            Reply::Composition(composition) => Some(composition.scores.take_values()),
            _ => None,
        }
    }

    /// Puts back what [`Reply::take_payload`] took, once the JSON is read (the matrices' sides
    /// are their token counts).
    pub fn put_payload(&mut self, values: Vec<f64>) -> crate::Result<()> {
        match self {
            Reply::GramSegment { grams, .. } | Reply::Grams { grams } => grams.values = values,
            Reply::Pattern(pattern) => pattern.rows = square(values, pattern.tokens.len())?,
            Reply::OvMatrix { tokens, values: rows, .. } => *rows = square(values, tokens.len())?,
            Reply::Composition(composition) => composition.scores.put_values(values)?,
            _ => {}
        }
        Ok(())
    }
}

/// `values` as the rows of an n x n matrix.
fn square(values: Vec<f64>, n: usize) -> crate::Result<Vec<Vec<f64>>> {
    if values.len() != n * n {
        return Err(crate::Error::Worker(format!("{} numbers came for a {n} x {n} matrix", values.len())));
    }
    Ok(values.chunks(n.max(1)).map(<[f64]>::to_vec).collect())
}

/// The first copies of the induction probe's repeated sequences
/// (docs/methods.md#5-probes-running-the-model): `count` of them, seeds `seed, seed + 1, ...`;
/// the scores are their means.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum ProbeSequence {
    /// `len` tokens drawn uniformly (seeded) from the tokenizer's ordinary vocabulary.
    UniformRandom { seed: u64, len: usize, count: usize },
    /// A seeded window of `len` tokens of a text (the demo ships held-out Nietzsche).
    TextWindow { text: String, seed: u64, len: usize, count: usize },
}

impl ProbeSequence {
    /// The same sequences with copies of `len` tokens (the length a probe actually used).
    pub fn with_len(&self, len: usize) -> ProbeSequence {
        let mut copy = self.clone();
        match &mut copy {
            ProbeSequence::UniformRandom { len: l, .. } | ProbeSequence::TextWindow { len: l, .. } => *l = len,
        }
        copy
    }

    /// How many seeded sequences the probe averages over.
    pub fn count(&self) -> usize {
        match self {
            ProbeSequence::UniformRandom { count, .. } | ProbeSequence::TextWindow { count, .. } => *count,
        }
    }

    /// How the page names the sequences a score came from.
    pub fn describe(&self, bos: Option<&Bos>) -> String {
        // Seeds wrap past u64::MAX as the probe draws them; a count of 0 is refused by the probe.
        let seeds = |seed: u64, count: usize| match count {
            0 => "no sequences".to_string(),
            1 => format!("seed {seed}"),
            _ => format!("mean of {count}, seeds {seed}–{}", seed.wrapping_add(count as u64 - 1)),
        };
        let after = bos.map_or(String::new(), |b| format!(", after BOS {}", b.token));
        match self {
            ProbeSequence::UniformRandom { seed, len, count } => {
                format!("{len} uniformly random tokens repeated twice ({}{after})", seeds(*seed, *count))
            }
            ProbeSequence::TextWindow { seed, len, count, .. } => {
                format!("a {len}-token window of held-out text repeated twice ({}{after})", seeds(*seed, *count))
            }
        }
    }
}

/// The facts the page shows about a loaded model.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ModelInfo {
    pub config: ModelConfig,
    pub parameters: u64,
    pub facts: Vec<(String, String)>,
    /// The BOS token probes can start with, and where it came from; None for character models
    /// and models whose config and tokenizer name none.
    pub bos: Option<Bos>,
    /// For a model by link: the link pinned to its commit, and its files' total size.
    #[serde(default)]
    pub link: Option<PinnedLink>,
}

/// A model by link as it was opened.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PinnedLink {
    /// The link that reads the same bytes forever (a Hub link names the commit).
    pub pinned: String,
    pub total_bytes: u64,
}

/// An induction probe's scores and the sequence they were measured on.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InductionRun {
    pub sequence: String,
    pub report: Result<InductionReport, String>,
    /// What ran the probe's forward pass (a GPU that failed on the way: the CPU, with a note).
    #[serde(default)]
    pub backend: BackendInfo,
}

impl InductionRun {
    /// A probe that did not run, and why.
    pub fn failed(sequence: String, reason: String) -> InductionRun {
        InductionRun { sequence, report: Err(reason), backend: BackendInfo::default() }
    }
}

/// A share of an induction probe's sequences, scored by one worker of the pool.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct InductionShare {
    /// The whole probe's sequence, described (as [`InductionRun`]'s).
    pub sequence: String,
    /// The BOS put in front of every sequence.
    pub bos: Option<usize>,
    pub scores: Result<Vec<SequenceScores>, String>,
    /// What ran this share's forward pass.
    #[serde(default)]
    pub backend: BackendInfo,
}

/// One timed step of a load (the browser benchmark reads these).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Timing {
    pub step: String,
    pub ms: f64,
}

/// Everything a load computes once.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Analysis {
    pub info: ModelInfo,
    pub folded: ModelFingerprint,
    pub induction: InductionRun,
    pub timings: Vec<Timing>,
}

/// A token with a value (self-copy logit, promoted logit, ...).
pub type Scored = (String, f64);

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Pattern {
    pub tokens: Vec<String>,
    /// `rows[query][key]`, causal (keys after the query are 0). Travels beside the JSON (see
    /// [`Reply::take_payload`]).
    #[serde(skip)]
    pub rows: Vec<Vec<f64>>,
    /// Induction cells (query, key).
    pub marks: Vec<(usize, usize)>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum Reply {
    Analysed(Box<Analysis>),
    /// SHA-256 of the files (hex): of the one file, or of the sorted `name:sha256` lines of several.
    Hashed {
        sha256: String,
    },
    Fingerprint {
        fingerprint: Box<ModelFingerprint>,
        timing: Timing,
    },
    Loaded,
    Done,
    Published(crate::weights::remote::Published),
    Induction(InductionRun),
    InductionShare(InductionShare),
    SelfCopy {
        raw: Vec<Scored>,
        normalised: Vec<Scored>,
    },
    Pair {
        from: String,
        to: String,
        value: f64,
    },
    Row {
        token: String,
        promotes: Vec<Scored>,
        suppresses: Vec<Scored>,
    },
    Pattern(Pattern),
    /// `values[i][j]`: attending to `tokens[i]` raises the logit of `tokens[j]` by this much;
    /// `ids` are the tokens' ids.
    OvMatrix {
        tokens: Vec<String>,
        ids: Vec<usize>,
        /// Travels beside the JSON (see [`Reply::take_payload`]).
        #[serde(skip)]
        values: Vec<Vec<f64>>,
    },
    Verdicts(Vec<VerdictRow>),
    /// The composition report; its scores travel beside the JSON (see [`Reply::take_payload`]).
    Composition(Box<Composition>),
    Svd(Box<HeadSvd>),
    /// Pool: the model is open. `segments` is how many Gram segments to ask for; `lead_bytes`
    /// and `helper_bytes` are the estimated peaks of the lead and of each helper.
    Opened {
        info: Box<ModelInfo>,
        tied: bool,
        segments: usize,
        lead_bytes: u64,
        helper_bytes: u64,
    },
    GramSegment {
        segment: usize,
        grams: GramsData,
    },
    /// Pool: one layer's heads, with the bytes its products moved to and from this worker's
    /// GPU (None when the CPU computed them).
    Heads {
        heads: Vec<HeadFingerprint>,
        #[serde(skip_serializing_if = "Option::is_none", default)]
        gpu_bytes: Option<crate::backend::BytesMoved>,
    },
    /// Pool: a model's whole Grams (from a GPU).
    Grams {
        grams: GramsData,
    },
    /// Pool: no GPU for the Grams; `backend` is the CPU with the reason as its note.
    NoGpu {
        backend: BackendInfo,
    },
}

/// How far a long request has come: `done` of `total` units of `stage`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Progress {
    pub stage: String,
    pub done: u64,
    pub total: u64,
    /// While fingerprinting: the model's (layers, heads) and the heads finished since the last
    /// report, so the page can fill the grid before the whole load is done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub grid: Option<(usize, usize)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub heads: Vec<HeadFingerprint>,
}

impl Progress {
    pub fn new(stage: impl Into<String>, done: u64, total: u64) -> Self {
        Progress { stage: stage.into(), done, total, grid: None, heads: Vec::new() }
    }
}
