//! One error type for the whole core: every message names what was wrong and where,
//! so the CLI can print it as one line and the page can show it verbatim.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// A byte range of a file that could not be read: past its end, changed since its header
    /// was read, or refused by the browser.
    #[error("{file}: {reason}")]
    Unreadable { file: String, reason: String },
    #[error("{file}: not UTF-8 text")]
    NotText { file: String },
    #[error("no .safetensors file among the files given")]
    NoWeights,
    #[error("model.safetensors.index.json: {reason}")]
    BadIndex { reason: String },
    #[error("model.safetensors.index.json has no weight_map")]
    IndexWithoutWeightMap,
    #[error("shard `{shard}` named by the index is missing")]
    ShardMissing { shard: String },
    #[error("model.safetensors.index.json names a shard outside the model: {shard}")]
    ShardOutsideModel { shard: String },
    #[error("tensor `{tensor}` is in both {first} and {second}: give one model's files at a time")]
    TensorInTwoFiles { tensor: String, first: String, second: String },
    #[error("{file}: larger than {limit} bytes, too large for a model's small file")]
    SmallFileTooLarge { file: String, limit: u64 },
    /// The caller asked the work to stop (Python's Ctrl-C).
    #[error("stopped by Ctrl-C")]
    Interrupted,
    /// An environment variable that headprint reads holds something it cannot use.
    #[error("{name} must be {expected}, not `{value}`")]
    BadSetting { name: String, expected: String, value: String },
    #[error("{file}: not a safetensors file ({reason})")]
    NotSafetensors { file: String, reason: String },
    #[error("{file}: truncated: the header says {expected} bytes, the file has {actual}")]
    Truncated { file: String, expected: u64, actual: u64 },
    #[error("{file}: header length {claimed} bytes is absurd (limit {limit} bytes)")]
    HeaderTooLarge { file: String, claimed: u64, limit: u64 },
    #[error("{file}: header length {claimed} bytes runs past the end of the {actual}-byte file")]
    HeaderPastEnd { file: String, claimed: u64, actual: u64 },
    #[error("{file}: bad tensor table: {reason}")]
    BadOffsets { file: String, reason: String },
    #[error("{file}: tensor `{tensor}` has dtype {dtype}, which headprint cannot read (f32, f16, bf16 only)")]
    UnknownDtype { file: String, tensor: String, dtype: String },
    #[error("missing tensor `{tensor}` for a {family} model")]
    MissingTensor { family: String, tensor: String },
    #[error("tensor `{tensor}` has shape {actual:?}, expected {expected}")]
    BadShape { tensor: String, actual: Vec<usize>, expected: String },
    #[error("cannot tell which model family this is: {0}")]
    UnknownFamily(String),
    #[error("tensor `{tensor}` holds {count} non-finite values (NaN or Inf), e.g. at index {first_index}")]
    NonFinite { tensor: String, count: usize, first_index: usize },
    #[error("rows {start}..{end} of tensor `{tensor}` are out of range: it has {rows} rows")]
    RowsOutOfRange { tensor: String, start: usize, end: usize, rows: usize },
    #[error("bad config.json: {0}")]
    BadConfig(String),
    #[error("token id {id} is out of range (vocabulary size {vocab})")]
    TokenOutOfRange { id: usize, vocab: usize },
    #[error("{0}")]
    BadTokens(String),
    #[error("unknown head `{name}`: write L<layer>H<head>, with layer < {layers} and head < {heads}")]
    UnknownHead { name: String, layers: usize, heads: usize },
    #[error("head {head}: {circuit} circuit: {reason}")]
    Spectrum { head: String, circuit: String, reason: String },
    #[error("sequence of {len} tokens is longer than the model's context of {context}")]
    TooLong { len: usize, context: usize },
    #[error("bad suite: {0}")]
    BadSuite(String),
    #[error("tokenizer: {0}")]
    Tokenizer(String),
    /// An argument or a request out of range (a backend's name, an OV matrix's k).
    #[error("{0}")]
    Invalid(String),
    /// A file, or a file's name, that could not be read or written.
    #[error("{path}: {reason}")]
    File { path: String, reason: String },
    /// Weights whose structure makes no model (tensors numbered with gaps, a zero dimension
    /// read from the tensors, a character model's vocabulary metadata).
    #[error("{0}")]
    BadModel(String),
    /// A forward pass needs the MLPs, which this load left on disk.
    #[error("the model was loaded without its MLP weights")]
    MissingMlp,
    /// A model too large for the tab's worker, said with the numbers before it is read.
    #[error("{0}")]
    TooLargeForTab(String),
    /// The page and its workers disagree: a part of the pool's work that came twice or not at
    /// all, a model or layer the worker does not hold, a payload of the wrong size.
    #[error("{0}")]
    Worker(String),
    /// A figure could not be drawn or written.
    #[error("{0}")]
    Figure(String),
    /// A broken invariant inside headprint: a bug to report, not something the user did.
    #[error("{0}")]
    Internal(String),
    /// A model link that names no model (`hf:ORG/NAME[@REVISION]` or an http(s) folder).
    #[error("bad model link `{link}`: {reason}")]
    BadLink { link: String, reason: String },
    /// The network failed where retrying did not help.
    #[error("{what}: {reason}")]
    Network { what: String, reason: String },
    /// A server said the repository, revision or file does not exist.
    #[error("{what}: not found on the server{detail}")]
    NotFound { what: String, detail: String },
    /// The Hub refused without a token: a gated or private repository.
    #[error(
        "{repo}: the server refused access ({status}): the repository is gated or private; accept its terms on the Hub, then give the command line a token in HF_TOKEN (the page sends none)"
    )]
    Refused { repo: String, status: u16 },
    /// The bytes behind a pinned name are not those that were opened: never mix two versions.
    #[error(
        "{file} changed on the server since it was opened ({detail}); open the model again to read the new version"
    )]
    Changed { file: String, detail: String },
    /// Offline and not stored.
    #[error(
        "offline: {what} is not stored here; open it once online to keep it (the command line: without --offline and HF_HUB_OFFLINE)"
    )]
    Offline { what: String },
    /// A GPU product failed (device lost, out of memory, a limit); the backend falls back to the CPU.
    #[error("GPU: {0}")]
    Gpu(String),
}

pub type Result<T> = std::result::Result<T, Error>;
