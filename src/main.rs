//! The `headprint` command line: the same core the page runs, printing readable tables or
//! the JSON contract that scripts and outside checks rely on. This file parses the arguments
//! and hands each subcommand to its file in `commands/`.

mod commands;
mod loaded;
mod open;
mod print;
mod progress;

use std::process::ExitCode;

use clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand;
use clap::{Parser, Subcommand};
use headprint::Result;

use crate::commands::{attention, compare, composition, figure, fingerprint, ov_logits, probe, svd, sweep, timeline};

#[derive(Parser)]
#[command(name = "headprint", version, about = "Spectral fingerprints of attention heads, next to what they do")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    /// Never touch the network: models by link come from the caches or fail, naming what is
    /// missing (as HF_HUB_OFFLINE=1 does).
    #[arg(long, global = true)]
    offline: bool,
    /// Draw no progress on stderr (it is drawn only on a terminal anyway).
    #[arg(long, global = true)]
    quiet: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Eigenvalues, copying score, imaginary fraction, κ, departure from normality and scale of every head.
    Fingerprint(fingerprint::Args),
    /// Attention patterns of every head on a token sequence.
    Attention(attention::Args),
    /// Run a probe: induction scores on repeated sequences, or a suite's verdict table.
    Probe(probe::Args),
    /// The spectral-fingerprint study's table: each model's facts and the Spearman ρ of every spectral feature
    /// against every behavioural score across its heads.
    Compare(compare::Args),
    /// One model's checkpoints (Pythia's step{N} branches, or local folders): each head's fingerprint, and with
    /// --probe its induction score, as a series over the revisions, and the study's row per revision.
    Timeline(timeline::Args),
    /// Many models and checkpoints, one Parquet file of per-head rows each, in shards (Slurm
    /// arrays), resumable, and with repeated checkpoints found before a byte is fetched.
    Sweep(sweep::Args),
    /// The token-space OV circuit of one head read as logits.
    OvLogits(ov_logits::Args),
    /// Q-, K- and V-composition scores of every earlier head into every later one, beside a random baseline.
    Composition(composition::Args),
    /// The singular directions of one head's OV and QK circuits, read out through the vocabulary.
    Svd(svd::Args),
    /// Draw a figure into an SVG or PNG file (the file name's extension picks the format).
    Figure(figure::Args),
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::Fingerprint(args) => fingerprint::run(args),
        Command::Attention(args) => attention::run(args),
        Command::Probe(args) => probe::run(args),
        Command::Compare(args) => compare::run(args),
        Command::Timeline(args) => timeline::run(args),
        Command::Sweep(args) => sweep::run(args),
        Command::OvLogits(args) => ov_logits::run(args),
        Command::Composition(args) => composition::run(args),
        Command::Svd(args) => svd::run(args),
        Command::Figure(args) => figure::run(args),
    }
}

fn main() -> ExitCode {
    keep_freed_memory();
    end_quietly_on_a_closed_pipe();
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version print to stdout, and a bare `headprint` shows the help.
        Err(error) if !error.use_stderr() || error.kind() == DisplayHelpOnMissingArgumentOrSubcommand => error.exit(),
        Err(error) => {
            eprintln!("headprint: {}", usage_error_line(&error));
            return ExitCode::from(2);
        }
    };
    open::configure(cli.offline);
    progress::configure(cli.quiet);
    let outcome = run(cli.command);
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("headprint: {error}");
            ExitCode::FAILURE
        }
    }
}

/// Clap's usage error in one line: its first line without the `error: ` prefix, and where to
/// look next.
fn usage_error_line(error: &clap::Error) -> String {
    let rendered = error.render().to_string();
    let first = rendered.lines().next().unwrap_or_default();
    format!("{} (see `headprint --help`)", first.strip_prefix("error: ").unwrap_or(first))
}

/// A fingerprint allocates and frees blocks of megabytes to tens of megabytes (vocabulary rows,
/// a layer's weights and products) every few milliseconds. glibc maps most of them afresh and
/// gives them back on free (its mmap threshold, and trimming the heap's free top), so each use
/// faults its pages in again. M_TOP_PAD keeps 64 MB spare at the heap's top whenever it grows or
/// is trimmed, and a block that fits there is carved from it without a system call; a larger
/// block is still mapped on its own. What it saves is measured in docs/benchmarks.md ("The
/// allocator's spare memory").
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_memory() {
    // SAFETY: mallopt only sets an allocator parameter (under glibc's own lock).
    unsafe {
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_freed_memory() {}

/// Output piped into a reader that stops early (`headprint fingerprint … | head`) ends the
/// program quietly, as it ends other command-line tools, instead of a panic at the next print:
/// Rust ignores SIGPIPE by default, which makes every later write an error.
#[cfg(unix)]
fn end_quietly_on_a_closed_pipe() {
    // SAFETY: restores the signal's default action before any thread or output exists.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

#[cfg(not(unix))]
fn end_quietly_on_a_closed_pipe() {}
