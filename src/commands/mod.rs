//! The subcommands, one file each with its arguments (`Args`) and its `run`, and the argument
//! groups several of them share.

pub mod attention;
pub mod compare;
pub mod composition;
pub mod figure;
pub mod fingerprint;
pub mod ov_logits;
pub mod probe;
pub mod svd;
pub mod sweep;
pub mod timeline;

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use headprint::Result;
use headprint::analysis::Mode;
use headprint::backend::{Backend, BackendChoice, BackendInfo};
use headprint::compare::INDUCTION_HEAD_THRESHOLD;
use headprint::probes::induction::{DEFAULT_LENGTH, DEFAULT_SEED, DEFAULT_SEQUENCES};

use headprint_native::driver;

/// The model and the output format, as most commands take them.
#[derive(Args)]
pub struct Common {
    /// A .safetensors file, a folder with config.json / tokenizer.json / shards, or a link:
    /// hf:ORG/NAME[@REVISION] or an http(s) folder in the same layout.
    pub model: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// How the weights are read: folded (the default) or as stored.
#[derive(Args)]
pub struct ModeArg {
    /// Use the weights as stored (default: LayerNorm folded as TransformerLens's fold_ln does).
    #[arg(long)]
    raw: bool,
}

impl ModeArg {
    pub fn mode(&self) -> Mode {
        if self.raw { Mode::Raw } else { Mode::Folded }
    }
}

#[derive(Args)]
pub struct BosArg {
    /// Do not start sequences with the model's BOS token (default: prepend it, as
    /// TransformerLens does, when config.json or the tokenizer names one).
    #[arg(long)]
    pub no_bos: bool,
}

/// How the induction probe's sequences are drawn.
#[derive(Args)]
pub struct SequenceArgs {
    /// Length of each drawn first copy.
    #[arg(long, default_value_t = DEFAULT_LENGTH)]
    pub len: usize,
    /// Seed of the first sequence; sequence i uses seed + i.
    #[arg(long, default_value_t = DEFAULT_SEED)]
    pub seed: u64,
    /// How many seeded sequences the scores average over.
    #[arg(long, default_value_t = DEFAULT_SEQUENCES, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    pub sequences: usize,
    /// Draw each first copy as a random window of this text file instead of uniform random tokens.
    #[arg(long)]
    pub text_file: Option<PathBuf>,
    /// Induction score at or above which a head counts as an induction head.
    #[arg(long, default_value_t = INDUCTION_HEAD_THRESHOLD)]
    pub threshold: f64,
    #[command(flatten)]
    pub bos: BosArg,
}

/// Which checkpoints of one repository a timeline reads.
#[derive(Args)]
pub struct RevisionArgs {
    /// Revisions of the one model by link (hf:ORG/NAME), comma-separated: branches, tags or
    /// commits, in the order to draw them (e.g. step0,step1000,step143000).
    #[arg(long, value_delimiter = ',', conflicts_with = "steps")]
    pub revisions: Vec<String>,
    /// Training steps of a repository whose checkpoints are branches named step{N} (Pythia's),
    /// comma-separated: --steps 0,1000 reads the revisions step0 and step1000.
    #[arg(long, value_delimiter = ',')]
    pub steps: Vec<u64>,
}

/// Where a command computes, as the commands that compute take it.
#[derive(Args)]
pub struct BackendArgs {
    /// Where the large products and the forward pass run: auto (a hardware GPU if there is
    /// one, else the CPU), gpu (any adapter, software ones too; an error if there is none) or cpu.
    #[arg(long, value_enum, default_value = "auto")]
    backend: BackendArg,
}

/// `--backend`, as the core's `BackendChoice`.
#[derive(Clone, Copy, ValueEnum)]
enum BackendArg {
    Auto,
    Gpu,
    Cpu,
}

impl From<BackendArg> for BackendChoice {
    fn from(arg: BackendArg) -> Self {
        match arg {
            BackendArg::Auto => BackendChoice::Auto,
            BackendArg::Gpu => BackendChoice::Gpu,
            BackendArg::Cpu => BackendChoice::Cpu,
        }
    }
}

impl BackendArgs {
    /// The backend asked for, the GPU driver's harmless chatter kept off stderr while it opens.
    pub fn open(&self) -> Result<Backend> {
        driver::quietly(|| Backend::select(self.backend.into()))
    }
}

/// Says on stderr, in one line, why the GPU asked for or tried was not used.
pub fn print_note(backend: &BackendInfo) {
    if let Some(note) = &backend.note {
        eprintln!("note: {note}");
    }
}

/// The tables' `backend:` line: what computed, and the bytes a GPU moved.
pub fn backend_line(backend: &BackendInfo) -> String {
    match backend.bytes_moved_text() {
        Some(moved) => format!("backend: {} ({moved})", backend.label()),
        None => format!("backend: {}", backend.label()),
    }
}
