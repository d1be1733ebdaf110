//! The `headprint` command line: the same core the page runs, printing readable tables or
//! the JSON contract that scripts and outside checks rely on.

mod driver;
mod http;
mod open;
mod progress;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand;
use clap::{Args, Parser, Subcommand, ValueEnum};
use headprint::analysis::ov_logits::{bottom_k, top_k};
use headprint::analysis::{Fingerprint, HeadId, Mode, ModelSummary, OvTokenLogits};
use headprint::backend::{Backend, BackendChoice};
use headprint::compare::{
    BEHAVIOURAL_SCORES, ComparisonRow, INDUCTION_HEAD_THRESHOLD, SPECTRAL_FEATURES, spearman, spearman_table,
};
use headprint::figures::output::{Figure, Format};
use headprint::figures::{copying, scatter, self_copy, spectrum, swap, verdicts};
use headprint::forward::{self, HeadOutputs};
use headprint::model::ModelStream;
use headprint::probes::induction::{
    DEFAULT_SEQUENCES, FirstCopy, InductionReport, RepeatSource, Spread, induction_cells, random_first_copies,
    text_window_first_copies,
};
use headprint::probes::{Suite, verdict_table};
use headprint::tokens::{Bos, Tokenizer, choose_bos, parse_ids, with_bos};
use headprint::weights::ModelFiles;
use headprint::{Error, Result};

use crate::open::{LinkFacts, LinkSettings};
use serde_json::json;

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

#[derive(Args)]
struct Common {
    /// A .safetensors file, a folder with config.json / tokenizer.json / shards, or a link:
    /// hf:ORG/NAME[@REVISION] or an http(s) folder in the same layout.
    model: String,
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

#[derive(Subcommand)]
enum Command {
    /// Eigenvalues, copying score, imaginary fraction, κ, departure from normality and scale of every head.
    Fingerprint {
        #[command(flatten)]
        common: Common,
        /// Use the weights as stored (default: LayerNorm folded as TransformerLens's fold_ln does).
        #[arg(long)]
        raw: bool,
        /// Where the vocabulary-sized products run: auto (a hardware GPU if there is one, else
        /// the CPU), gpu (any adapter, software ones too; an error if there is none) or cpu.
        #[arg(long, default_value = "auto", value_parser = ["auto", "gpu", "cpu"])]
        backend: String,
    },
    /// Attention patterns of every head on a token sequence.
    Attention {
        #[command(flatten)]
        common: Common,
        /// Token ids, e.g. 3,1,4.
        #[arg(long, conflicts_with = "text")]
        tokens: Option<String>,
        /// Text, tokenized with the model's vocabulary.
        #[arg(long)]
        text: Option<String>,
        #[command(flatten)]
        bos: BosArg,
    },
    /// Run a probe: induction scores on repeated sequences, or a suite's verdict table.
    Probe(ProbeArgs),
    /// Seed 000's table: each model's facts and the Spearman ρ of every spectral feature
    /// against every behavioural score across its heads.
    Compare(CompareArgs),
    /// The token-space OV circuit of one head read as logits.
    OvLogits {
        #[command(flatten)]
        common: Common,
        #[arg(long)]
        head: String,
        /// How many top tokens to list.
        #[arg(long, default_value_t = 10)]
        top: usize,
        /// Two tokens A B (text or #id): how much attending A raises B.
        #[arg(long, num_args = 2, value_names = ["A", "B"])]
        pair: Option<Vec<String>>,
        /// One token: what attending it promotes and suppresses most.
        #[arg(long)]
        row: Option<String>,
        #[arg(long)]
        raw: bool,
    },
    /// Draw a figure into an SVG or PNG file (the file name's extension picks the format).
    Figure(FigureArgs),
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum FigureKind {
    /// Every head's OV copying score: the layer x head grid and the bars (seed 003, Figure 1).
    Copying,
    /// A head's QK and OV eigenvalues in the complex plane, beside the unit circle.
    Spectrum,
    /// A head's top self-copy logits, raw and normalised (Figure 2).
    SelfCopy,
    /// The swap suite's prompt pairs side by side, induction cells outlined (Figure 3).
    Swap,
    /// A suite's verdict table as a picture (Figures 4 and 5).
    Verdicts,
    /// One spectral feature against one behavioural score across heads, with Spearman's ρ.
    Scatter,
}

#[derive(Args)]
struct FigureArgs {
    /// A .safetensors file, a folder, or a link (hf:ORG/NAME[@REVISION], an http(s) folder).
    model: String,
    #[arg(long, value_enum)]
    kind: FigureKind,
    /// The file to write: FILE.svg or FILE.png.
    #[arg(long)]
    out: PathBuf,
    /// The head, e.g. L2H0 (default: the head with the largest OV copying score).
    #[arg(long)]
    head: Option<String>,
    /// verdicts: a built-in suite (quote, bracket) or a suite JSON file.
    #[arg(long, default_value = "quote")]
    suite: String,
    /// self-copy: how many tokens to show.
    #[arg(long, default_value_t = 10)]
    top: usize,
    /// scatter: the spectral feature on x, as compare names it (e.g. ov.copying_score).
    #[arg(long, default_value = "qk.imaginary_fraction")]
    x: String,
    /// scatter: the behavioural score on y (induction_score, previous_token_score, ...).
    #[arg(long, default_value = "induction_score")]
    y: String,
    /// Spectral values from the weights as stored (default: LayerNorm folded).
    #[arg(long)]
    raw: bool,
    #[command(flatten)]
    sequence: SequenceArgs,
}

#[derive(Args)]
struct BosArg {
    /// Do not start sequences with the model's BOS token (default: prepend it, as
    /// TransformerLens does, when config.json or the tokenizer names one).
    #[arg(long)]
    no_bos: bool,
}

/// How the induction probe's sequences are drawn.
#[derive(Args)]
struct SequenceArgs {
    /// Length of each drawn first copy.
    #[arg(long, default_value_t = 50)]
    len: usize,
    /// Seed of the first sequence; sequence i uses seed + i.
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// How many seeded sequences the scores average over.
    #[arg(long, default_value_t = DEFAULT_SEQUENCES, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..))]
    sequences: usize,
    /// Draw each first copy as a random window of this text file instead of uniform random tokens.
    #[arg(long)]
    text_file: Option<PathBuf>,
    /// Induction score at or above which a head counts as an induction head.
    #[arg(long, default_value_t = INDUCTION_HEAD_THRESHOLD)]
    threshold: f64,
    #[command(flatten)]
    bos: BosArg,
}

#[derive(Args)]
struct CompareArgs {
    /// Models (.safetensors files, folders or links), one row each.
    #[arg(required = true, num_args = 1..)]
    models: Vec<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    /// Spectral features from the weights as stored (default: LayerNorm folded).
    #[arg(long)]
    raw: bool,
    #[command(flatten)]
    sequence: SequenceArgs,
}

#[derive(Args)]
struct ProbeArgs {
    #[command(flatten)]
    common: Common,
    /// Induction / previous-token / duplicate-token scores, copy fidelity and prefix-copy accuracy.
    #[arg(long, conflicts_with = "suite")]
    induction: bool,
    /// One first copy as token ids (repeated once; no averaging over sequences).
    #[arg(long, conflicts_with_all = ["text_file", "sequences", "seed", "len"])]
    tokens: Option<String>,
    #[command(flatten)]
    sequence: SequenceArgs,
    /// A suite JSON file, or a built-in suite: quote, bracket, swap, exercises-demo.
    #[arg(long)]
    suite: Option<String>,
    /// The head for a suite, e.g. L5H0.
    #[arg(long)]
    head: Option<String>,
}

fn cli_main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // --help and --version print to stdout, and a bare `headprint` shows the help.
        Err(error) if !error.use_stderr() || error.kind() == DisplayHelpOnMissingArgumentOrSubcommand => error.exit(),
        Err(error) => {
            eprintln!("headprint: {}", usage_error_line(&error));
            return ExitCode::from(2);
        }
    };
    open::configure(LinkSettings { offline: cli.offline });
    progress::configure(cli.quiet);
    let outcome = run(cli.command);
    open::print_notes();
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

/// A model's files and tokenizer: its weights are read a layer at a time when a command
/// needs them (`model()`), never held whole.
struct Loaded {
    files: ModelFiles,
    tokenizer: Tokenizer,
    link: Option<LinkFacts>,
    label: String,
}

impl Loaded {
    /// The weights, read from the files as they are asked for.
    fn model(&self) -> Result<ModelStream<'_>> {
        ModelStream::open(&self.files)
    }

    /// The model's BOS unless switched off.
    fn bos(&self, arg: &BosArg) -> Result<Option<Bos>> {
        Ok(if arg.no_bos { None } else { choose_bos(&self.model()?, &self.tokenizer) })
    }

    /// The probe's first copies: given ids (one sequence), text windows or random draws.
    fn first_copies(&self, args: &SequenceArgs, given: Option<&str>) -> Result<Vec<FirstCopy>> {
        match (given, &args.text_file) {
            (Some(ids), _) => Ok(vec![FirstCopy { tokens: parse_ids(ids)?, source: RepeatSource::Given }]),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
                text_window_first_copies(&self.tokenizer.encode(&text)?, args.len, args.seed, args.sequences)
            }
            (None, None) => {
                random_first_copies(&self.tokenizer.ordinary_ids(&self.model()?), args.len, args.seed, args.sequences)
            }
        }
    }
}

fn load(common: &Common) -> Result<Loaded> {
    let opened = open::open(&common.model)?;
    let files = opened.files;
    let tokenizer = Tokenizer::for_model(&ModelStream::open(&files)?, files.tokenizer_json.as_deref())?;
    Ok(Loaded { files, tokenizer, link: opened.link, label: opened.label })
}

fn print_json(value: &impl serde::Serialize) -> Result<()> {
    println!("{}", serde_json::to_string(value).map_err(|e| Error::Invalid(e.to_string()))?);
    Ok(())
}

/// A report with, for a model by link, its `model_link`: the pinned link and the bytes fetched.
fn print_json_from(value: &impl serde::Serialize, link: Option<&LinkFacts>) -> Result<()> {
    let mut value = serde_json::to_value(value).map_err(|e| Error::Invalid(e.to_string()))?;
    if let (Some(link), Some(object)) = (link, value.as_object_mut()) {
        object.insert("model_link".into(), link.json());
    }
    print_json(&value)
}

fn run(command: Command) -> Result<()> {
    match command {
        Command::Fingerprint { common, raw, backend } => {
            // Read a layer at a time: a model of any size fingerprints in the memory of its
            // Grams and one layer's attention.
            let opened = open::open(&common.model)?;
            let model = ModelStream::open(&opened.files)?;
            let choice = BackendChoice::parse(&backend)?;
            let mut backend = crate::driver::quietly(|| Backend::select(choice))?;
            let report = progress::fingerprint(&model, if raw { Mode::Raw } else { Mode::Folded }, &mut backend)?;
            if let Some(note) = &report.backend.note {
                eprintln!("note: {note}");
            }
            if common.json {
                return print_json_from(&report, opened.link.as_ref());
            }
            print_summary(&report.model);
            println!("mode: {}", report.mode);
            println!("backend: {}\n", report.backend.label());
            println!(
                "{:<7} {:>9} {:>9} {:>9} {:>9} {:>10}   {:>9} {:>9} {:>10}   {:>10} {:>10} {:>10}",
                "head",
                "OV copy",
                "OV imag",
                "OV κ",
                "OV dep",
                "OV scale",
                "QK copy",
                "QK imag",
                "QK κ",
                "QKtok copy",
                "QKtok imag",
                "QKtok κ"
            );
            for h in &report.heads {
                let (ov, qk, qk_token) = (&h.ov, &h.qk, &h.qk_token);
                println!(
                    "{:<7} {:>9} {:>9} {:>9} {:>9} {:>10}   {:>9} {:>9} {:>10}   {:>10} {:>10} {:>10}",
                    h.id().to_string(),
                    number(ov, ov.copying_score),
                    number(ov, ov.imaginary_fraction),
                    kappa(ov),
                    number(ov, ov.departure_from_normality),
                    number(ov, ov.scale),
                    number(qk, qk.copying_score),
                    number(qk, qk.imaginary_fraction),
                    kappa(qk),
                    number(qk_token, qk_token.copying_score),
                    number(qk_token, qk_token.imaginary_fraction),
                    kappa(qk_token)
                );
            }
            for error in report.heads.iter().flat_map(|h| h.errors()) {
                println!("error: {error}");
            }
            Ok(())
        }
        Command::Attention { common, tokens, text, bos } => {
            let loaded = load(&common)?;
            let ids = match (tokens, text) {
                (Some(ids), _) => parse_ids(&ids)?,
                (None, Some(text)) => loaded.tokenizer.encode(&text)?,
                (None, None) => return Err(Error::BadTokens("give --tokens 3,1,4 or --text \"...\"".into())),
            };
            let bos_token = loaded.bos(&bos)?;
            let ids = with_bos(bos_token.as_ref().map(|b| b.id), &ids);
            let output = forward::run(&loaded.model()?, &ids)?;
            let patterns: Vec<Vec<Vec<Vec<f32>>>> = output
                .patterns
                .iter()
                .map(|heads| {
                    heads.iter().map(|p| p.row_iter().map(|r| r.iter().copied().collect()).collect()).collect()
                })
                .collect();
            if common.json {
                return print_json_from(
                    &json!({"tokens": ids, "prepend_bos": !bos.no_bos, "bos": bos_token, "patterns": patterns}),
                    loaded.link.as_ref(),
                );
            }
            let labels: Vec<String> = ids.iter().map(|&i| loaded.tokenizer.token_text(i)).collect();
            for (layer, heads) in patterns.iter().enumerate() {
                for (head, rows) in heads.iter().enumerate() {
                    println!("L{layer}H{head}: top key per query");
                    for (q, row) in rows.iter().enumerate() {
                        let k = (0..=q).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap_or(0);
                        println!("  {q:>3} {:<8} -> {k:>3} {:<8} {:.4}", show(&labels[q]), show(&labels[k]), row[k]);
                    }
                }
            }
            Ok(())
        }
        Command::Probe(args) => probe(args),
        Command::Figure(args) => figure(args),
        Command::Compare(args) => compare(args),
        Command::OvLogits { common, head, top, pair, row, raw } => {
            let loaded = load(&common)?;
            let (model, tokenizer) = (&loaded.model()?, &loaded.tokenizer);
            let id = HeadId::parse(&head, &model.config)?;
            let mode = if raw { Mode::Raw } else { Mode::Folded };
            // One layer and blocks of W_E / W_U rows: no Grams needed for the token view.
            let logits = OvTokenLogits::of_head(model, id, mode)?;
            let diagonal = logits.diagonal();
            let normalised = logits.normalised_diagonal();
            let entry =
                |i: usize, values: &[f64]| json!({"token": tokenizer.token_text(i), "id": i, "value": values[i]});
            let mut report = json!({
                "head": id.to_string(),
                "mode": mode.name(),
                "top_raw": top_k(&diagonal, top).into_iter().map(|i| entry(i, &diagonal)).collect::<Vec<_>>(),
                "top_normalised": top_k(&normalised, top).into_iter().map(|i| entry(i, &normalised)).collect::<Vec<_>>(),
            });
            if let Some(pair) = &pair {
                let (from, to) = (tokenizer.single(&pair[0])?, tokenizer.single(&pair[1])?);
                report["pair"] = json!({"from": tokenizer.token_text(from), "to": tokenizer.token_text(to), "from_id": from, "to_id": to, "value": logits.entry(from, to)?});
            }
            if let Some(row) = &row {
                let from = tokenizer.single(row)?;
                let values = logits.row(from)?;
                report["row"] = json!({
                    "from": tokenizer.token_text(from),
                    "promotes": top_k(&values, top).into_iter().map(|i| entry(i, &values)).collect::<Vec<_>>(),
                    "suppresses": bottom_k(&values, top).into_iter().map(|i| entry(i, &values)).collect::<Vec<_>>(),
                });
            }
            if common.json {
                return print_json(&report);
            }
            println!("{id} OV self-copy logits ({} mode)", mode.name());
            println!("{:<14} {:>10}   {:<14} {:>10}", "raw", "", "normalised", "");
            let (raw_rows, norm_rows) =
                (report["top_raw"].as_array().unwrap(), report["top_normalised"].as_array().unwrap());
            for (a, b) in raw_rows.iter().zip(norm_rows) {
                println!(
                    "{:<14} {:>10.4}   {:<14} {:>10.4}",
                    show(a["token"].as_str().unwrap()),
                    a["value"].as_f64().unwrap(),
                    show(b["token"].as_str().unwrap()),
                    b["value"].as_f64().unwrap()
                );
            }
            if let Some(p) = report.get("pair") {
                let value = p["value"].as_f64().unwrap();
                let verb = if value >= 0.0 { "raises" } else { "lowers" };
                println!(
                    "\nattending {} {verb} {} by {:+.4}",
                    show(p["from"].as_str().unwrap()),
                    show(p["to"].as_str().unwrap()),
                    value
                );
            }
            if let Some(r) = report.get("row") {
                println!("\nattending {}:", show(r["from"].as_str().unwrap()));
                for (label, key) in [("promotes", "promotes"), ("suppresses", "suppresses")] {
                    let list: Vec<String> = r[key]
                        .as_array()
                        .unwrap()
                        .iter()
                        .map(|e| format!("{} {:+.3}", show(e["token"].as_str().unwrap()), e["value"].as_f64().unwrap()))
                        .collect();
                    println!("  {label}: {}", list.join(", "));
                }
            }
            Ok(())
        }
    }
}

/// A built-in suite by name, or a suite JSON file.
fn load_suite(name: &str) -> Result<Suite> {
    match Suite::builtin(name) {
        Some(suite) => Ok(suite),
        None => {
            let text = std::fs::read_to_string(name).map_err(|e| Error::BadSuite(format!("{name}: {e}")))?;
            Suite::from_json(&text)
        }
    }
}

fn figure(args: FigureArgs) -> Result<()> {
    // A wrong file name fails before any work.
    Format::of(&args.out)?;
    let common = Common { model: args.model.clone(), json: false };
    let loaded = load(&common)?;
    let (model, tokenizer) = (&loaded.model()?, &loaded.tokenizer);
    let mode = if args.raw { Mode::Raw } else { Mode::Folded };
    let path = std::path::Path::new(&args.model);
    let name = match loaded.link {
        Some(_) => loaded.label.clone(),
        None => path.file_name().map_or_else(|| args.model.clone(), |n| n.to_string_lossy().into()),
    };
    // The fingerprint (Grams and every head) only where the figure or the default head needs it:
    // on a large model it is the slow part.
    let needs_fingerprint =
        args.head.is_none() || matches!(args.kind, FigureKind::Copying | FigureKind::Spectrum | FigureKind::Scatter);
    let fingerprint =
        if needs_fingerprint { Some(progress::fingerprint(model, mode, &mut Backend::cpu())?) } else { None };
    let fingerprinted = || fingerprint.as_ref().ok_or_else(|| Error::Invalid("the figure needs no fingerprint".into()));
    let head = match &args.head {
        Some(head) => HeadId::parse(head, &model.config)?,
        None => fingerprinted()?
            .heads
            .iter()
            .filter(|h| h.ov.error.is_none())
            .max_by(|a, b| a.ov.copying_score.total_cmp(&b.ov.copying_score))
            .map(|h| h.id())
            .ok_or_else(|| Error::Invalid("no head's OV circuit could be read: give --head".into()))?,
    };
    let bos = loaded.bos(&args.sequence.bos)?.map(|b| b.id);
    let figure = match args.kind {
        FigureKind::Copying => Figure::Copying(copying::CopyingScores {
            layers: model.config.layers,
            heads: model.config.heads,
            values: fingerprinted()?.heads.iter().map(|h| h.ov.error.is_none().then_some(h.ov.copying_score)).collect(),
            title: format!("{name}: OV copying score of every head ({} mode)", mode.name()),
        }),
        FigureKind::Spectrum => {
            let h = fingerprinted()?.head(head).ok_or_else(|| Error::Invalid(format!("no fingerprint for {head}")))?;
            let plane = |name: &str, f: &headprint::analysis::Fingerprint, colour| spectrum::Plane {
                name: name.into(),
                eigenvalues: f.eigenvalues.clone(),
                note: match &f.error {
                    Some(reason) => format!("error: {reason}"),
                    None => format!(
                        "copying score {:.3} · imaginary fraction {:.3} · κ {}",
                        f.copying_score,
                        f.imaginary_fraction,
                        f.eigenvector_condition.map_or("∞ (defective)".into(), |k| format!("{k:.1}"))
                    ),
                },
                colour,
            };
            Figure::Spectrum(spectrum::Spectra {
                title: format!("{name}: {head} eigenvalues ({} mode)", mode.name()),
                planes: vec![
                    plane("QK: W_Q W_Kᵀ", &h.qk, plotters::style::RGBColor(33, 102, 172)),
                    plane("OV: W_E W_V W_O W_U", &h.ov, plotters::style::RGBColor(230, 97, 1)),
                ],
            })
        }
        FigureKind::SelfCopy => {
            let logits = OvTokenLogits::of_head(model, head, mode)?;
            let entries = |values: &[f64]| {
                top_k(values, args.top).into_iter().map(|i| (tokenizer.token_text(i), values[i])).collect()
            };
            Figure::SelfCopy(self_copy::SelfCopy {
                title: format!("{name}: {head} self-copy logits, top {} ({} mode)", args.top, mode.name()),
                raw: entries(&logits.diagonal()),
                normalised: entries(&logits.normalised_diagonal()),
            })
        }
        FigureKind::Swap => {
            let suite = load_suite("swap")?;
            let encoded: Vec<Vec<usize>> = suite
                .prompts
                .iter()
                .map(|prompt| Ok(with_bos(bos, &tokenizer.encode(&prompt.text)?)))
                .collect::<Result<_>>()?;
            // Every prompt through each layer in one pass: a streamed model is read once.
            let runs: Vec<(&[usize], HeadOutputs)> =
                encoded.iter().map(|ids| (ids.as_slice(), HeadOutputs::None)).collect();
            let mut prompts = Vec::new();
            for range in forward::batches(model, &runs) {
                let outputs = forward::run_batch(model, &runs[range.clone()], &mut |_, _| {})?;
                let batch = suite.prompts[range.clone()].iter().zip(&encoded[range]).zip(&outputs);
                for ((prompt, ids), output) in batch {
                    let matrix = &output.patterns[head.layer][head.head];
                    prompts.push(swap::Prompt {
                        id: prompt.id.clone(),
                        text: prompt.text.clone(),
                        tokens: ids.iter().map(|&i| tokenizer.token_text(i)).collect(),
                        rows: (0..ids.len())
                            .map(|q| (0..ids.len()).map(|k| f64::from(matrix[(q, k)])).collect())
                            .collect(),
                        marks: induction_cells(ids),
                    });
                }
            }
            Figure::Swap(swap::Swap {
                title: format!(
                    "{name}: {head} on the swap pairs (rows: queries, columns: keys; induction cells outlined)"
                ),
                prompts,
            })
        }
        FigureKind::Verdicts => {
            let suite = load_suite(&args.suite)?;
            let rows = verdict_table(model, tokenizer, &suite, head, bos)?;
            Figure::Verdicts(verdicts::Verdicts {
                title: format!("{name}: {head} on the {} suite (query outlined in black)", suite.name),
                rows,
            })
        }
        FigureKind::Scatter => {
            let feature = by_name(&SPECTRAL_FEATURES, &args.x, "spectral feature")?;
            let score = by_name(&BEHAVIOURAL_SCORES, &args.y, "behavioural score")?;
            let copies = loaded.first_copies(&args.sequence, None)?;
            let report = progress::induction_probe(model, &copies, bos)?;
            let points: Vec<(String, f64, f64)> = fingerprinted()?
                .heads
                .iter()
                .filter_map(|f| {
                    let s = report.heads.iter().find(|s| s.layer == f.layer && s.head == f.head)?;
                    Some((f.id().to_string(), feature(f), score(s)))
                })
                .collect();
            let (x, y): (Vec<f64>, Vec<f64>) = points.iter().map(|p| (p.1, p.2)).unzip();
            let n = x.iter().zip(&y).filter(|(a, b)| !a.is_nan() && !b.is_nan()).count();
            Figure::Scatter(scatter::Scatter {
                title: format!(
                    "{name}: {} vs {} across heads ({} mode; {} sequences)",
                    args.x,
                    args.y,
                    mode.name(),
                    report.sequences.len()
                ),
                x_name: args.x.clone(),
                y_name: args.y.clone(),
                rho: spearman(&x, &y),
                n,
                points,
                named: 4,
            })
        }
    };
    figure.write(&args.out)?;
    let (width, height) = figure.size();
    println!("wrote {} ({width} x {height} px)", args.out.display());
    Ok(())
}

/// The entry of a named list (`compare`'s features and scores), or an error listing the names.
fn by_name<T: Copy>(list: &[(&str, T)], name: &str, what: &str) -> Result<T> {
    list.iter().find(|(n, _)| *n == name).map(|(_, f)| *f).ok_or_else(|| {
        let names: Vec<&str> = list.iter().map(|(n, _)| *n).collect();
        Error::Invalid(format!("unknown {what} `{name}`: use one of {}", names.join(", ")))
    })
}

fn probe(args: ProbeArgs) -> Result<()> {
    let loaded = load(&args.common)?;
    let (model, tokenizer) = (&loaded.model()?, &loaded.tokenizer);
    let bos = loaded.bos(&args.sequence.bos)?;
    let bos_id = bos.as_ref().map(|b| b.id);
    if let Some(suite_name) = &args.suite {
        let suite = load_suite(suite_name)?;
        let head_name =
            args.head.as_deref().or(suite.head.as_deref()).ok_or_else(|| Error::BadSuite("give --head L5H0".into()))?;
        let head = HeadId::parse(head_name, &model.config)?;
        let rows = verdict_table(model, tokenizer, &suite, head, bos_id)?;
        if args.common.json {
            return print_json(&json!({
                "suite": suite.name,
                "head": head.to_string(),
                "prepend_bos": !args.sequence.bos.no_bos,
                "bos": bos,
                "rows": rows,
            }));
        }
        println!("suite {} on {head}; {}", suite.name, describe_bos(bos.as_ref()));
        println!("{:<6} {:<28} {:>4}  {:<30} {:<30}", "id", "prompt", "q", "top (pos tok weight)", "runner-up");
        for row in &rows {
            let cell = |a: &headprint::probes::suite::Attended| {
                format!("{} {} {:.4} {}", a.position, show(&a.token), a.weight, a.labels())
            };
            println!(
                "{:<6} {:<28} {:>4}  {:<30} {:<30}",
                row.id,
                show(&row.text),
                row.query_position,
                cell(&row.top),
                row.runner_up.as_ref().map(cell).unwrap_or_default()
            );
            if !row.caveat.is_empty() {
                println!("       note: {}", row.caveat);
            }
        }
        return Ok(());
    }
    if !args.induction {
        return Err(Error::Invalid("probe needs --induction or --suite FILE --head LxHy".into()));
    }
    let threshold = args.sequence.threshold;
    let copies = loaded.first_copies(&args.sequence, args.tokens.as_deref())?;
    let report = progress::induction_probe(model, &copies, bos_id)?;
    if args.common.json {
        let mut value = serde_json::to_value(&report).map_err(|e| Error::Invalid(e.to_string()))?;
        value["prepend_bos"] = json!(!args.sequence.bos.no_bos);
        value["bos_token"] = json!(bos);
        value["threshold"] = json!(threshold);
        value["induction_heads"] = json!(report.induction_heads(threshold));
        return print_json_from(&value, loaded.link.as_ref());
    }
    println!(
        "{} repeated sequence(s) of {} tokens ({}); {}",
        report.sequences.len(),
        report.tokens.len(),
        describe_sources(&report),
        describe_bos(bos.as_ref())
    );
    println!("prefix-copy accuracy: {}", mean_spread(report.prefix_copy_accuracy, &report.prefix_copy_accuracy_spread));
    let heads = report.induction_heads(threshold);
    println!(
        "induction heads (score >= {threshold}): {}\n",
        if heads.is_empty() { "none".into() } else { heads.join(" ") }
    );
    println!(
        "{:<7} {:>10} {:>10} {:>10} {:>10}   {:>8}  (± population std over sequences)",
        "head", "induction", "previous", "duplicate", "copy fid.", "ind. ±"
    );
    for h in &report.heads {
        println!(
            "{:<7} {:>10.4} {:>10.4} {:>10.4} {:>10.4}   {:>8.4}",
            format!("L{}H{}", h.layer, h.head),
            h.induction_score,
            h.previous_token_score,
            h.duplicate_token_score,
            h.copy_fidelity,
            h.spread.map_or(0.0, |s| s.induction_score.std)
        );
    }
    Ok(())
}

fn compare(args: CompareArgs) -> Result<()> {
    let threshold = args.sequence.threshold;
    let mode = if args.raw { Mode::Raw } else { Mode::Folded };
    let mut models = Vec::new();
    for given in &args.models {
        let common = Common { model: given.clone(), json: args.json };
        // Layers are read as they are needed, so any step can find a bad file: name it.
        let named = |e: Error| Error::Invalid(format!("{given}: {e}"));
        let loaded = load(&common).map_err(named)?;
        let model = loaded.model().map_err(named)?;
        let fingerprint = progress::fingerprint(&model, mode, &mut Backend::cpu()).map_err(named)?;
        let bos = loaded.bos(&args.sequence.bos).map_err(named)?;
        let copies = loaded.first_copies(&args.sequence, None).map_err(named)?;
        let report = progress::induction_probe(&model, &copies, bos.as_ref().map(|b| b.id)).map_err(named)?;
        let sequence = format!(
            "{} sequences of {} tokens repeated twice ({}); {}",
            report.sequences.len(),
            copies[0].tokens.len(),
            describe_sources(&report),
            describe_bos(bos.as_ref())
        );
        let row = ComparisonRow::new(&loaded.label, &fingerprint, Some(&report), &sequence, threshold);
        let spearman = spearman_table(&fingerprint, &report);
        let source = loaded.link.as_ref().map(LinkFacts::json);
        models.push((row, bos, report, spearman, source));
    }
    if args.json {
        let entries: Vec<serde_json::Value> = models
            .iter()
            .map(|(row, bos, report, spearman, source)| {
                let mut value = serde_json::to_value(row).unwrap_or_default();
                value["bos_token"] = json!(bos);
                value["induction_head_names"] = json!(report.induction_heads(threshold));
                value["head_scores"] = json!(report.heads);
                value["spearman"] = json!(spearman);
                if let Some(source) = source {
                    value["model_link"] = source.clone();
                }
                value
            })
            .collect();
        return print_json(&json!({
            "mode": mode.name(),
            "threshold": threshold,
            "prepend_bos": !args.sequence.bos.no_bos,
            "models": entries,
        }));
    }
    println!(
        "{:<32} {:>12} {:>10} {:>10}  {:<34} sequences",
        "model", "parameters", "QK imag", "ind. heads", "prefix-copy accuracy"
    );
    for (row, ..) in &models {
        println!(
            "{:<32} {:>12} {:>10.4} {:>10}  {:<34} {}",
            row.model,
            row.parameters,
            row.mean_qk_imaginary_fraction,
            row.induction_heads.unwrap_or(0),
            mean_spread(
                row.prefix_copy_accuracy.unwrap_or(f64::NAN),
                &row.prefix_copy_accuracy_spread.unwrap_or_default()
            ),
            row.sequence
        );
    }
    println!(
        "\ninduction heads count heads with mean induction score >= {threshold}; spectral features {} mode",
        mode.name()
    );
    for (row, _, _, spearman, _) in &models {
        let fewest = spearman.iter().map(|c| c.n).min().unwrap_or(0);
        let counted = if fewest == row.heads {
            format!("the {} heads", row.heads)
        } else {
            format!("the heads whose circuits could be read ({fewest} to {} of {})", row.heads, row.heads)
        };
        println!("\nSpearman ρ across {counted} of {}:", row.model);
        print!("{:<30}", "");
        for (name, _) in BEHAVIOURAL_SCORES {
            print!(" {name:>22}");
        }
        println!();
        for (feature, _) in SPECTRAL_FEATURES {
            print!("{feature:<30}");
            for (score, _) in BEHAVIOURAL_SCORES {
                let rho = spearman.iter().find(|c| c.spectral == feature && c.behavioural == score).and_then(|c| c.rho);
                print!(" {:>22}", rho.map_or("undefined".into(), |r| format!("{r:+.3}")));
            }
            println!();
        }
    }
    Ok(())
}

fn mean_spread(mean: f64, spread: &Spread) -> String {
    format!("{mean:.4} ± {:.4} [{:.4}, {:.4}]", spread.std, spread.min, spread.max)
}

fn describe_sources(report: &InductionReport) -> String {
    let seeds: Vec<String> = report
        .sequences
        .iter()
        .filter_map(|s| match s.source {
            RepeatSource::UniformRandom { seed } => Some(format!("random seed {seed}")),
            RepeatSource::TextWindow { seed } => Some(format!("text window seed {seed}")),
            RepeatSource::Given => None,
        })
        .collect();
    match (seeds.first(), seeds.last()) {
        (Some(first), Some(last)) if seeds.len() > 1 => format!("{first} .. {last}"),
        (Some(first), _) => first.clone(),
        _ => "given tokens".into(),
    }
}

fn describe_bos(bos: Option<&Bos>) -> String {
    match bos {
        Some(b) => format!("BOS {} (id {}, from {}) prepended", show(&b.token), b.id, b.source),
        None => "no BOS".into(),
    }
}

fn print_summary(model: &ModelSummary) {
    println!(
        "{}: {} layers x {} heads, d_model {}, d_head {}, vocab {}, {} parameters",
        model.family, model.layers, model.heads, model.d_model, model.d_head, model.vocab, model.parameters
    );
}

/// One of a circuit's numbers for the table; `error` when the circuit could not be read.
fn number(circuit: &Fingerprint, value: f64) -> String {
    match circuit.error {
        Some(_) => "error".into(),
        None => format!("{value:.4}"),
    }
}

fn kappa(circuit: &Fingerprint) -> String {
    match (&circuit.error, circuit.eigenvector_condition) {
        (Some(_), _) => "error".into(),
        (None, Some(k)) => format!("{k:.3}"),
        (None, None) => "inf".into(),
    }
}

/// Makes whitespace tokens visible in tables.
fn show(token: &str) -> String {
    token.replace('\n', "\\n").replace(' ', "␣")
}

fn main() -> std::process::ExitCode {
    keep_freed_memory();
    cli_main()
}

/// A fingerprint allocates and frees blocks of megabytes to tens of megabytes (vocabulary rows,
/// a layer's weights and products) every few milliseconds. glibc maps most of them afresh and
/// gives them back on free (its mmap threshold, and trimming the heap's free top), so each use
/// faulted its pages in again: 149k minor page faults for GPT-2 Small. M_TOP_PAD keeps 64 MB
/// spare at the heap's top whenever it grows or is trimmed, and a block that fits there is carved
/// from it without a system call: 22k faults, about 0.25 s less wall time (with 0.3 s less system
/// time), peak RSS within a few MB. Blocks larger than the spare are mapped as before. Measured
/// with the equivalent `MALLOC_TOP_PAD_` (docs/benchmarks.md).
#[cfg(all(target_os = "linux", target_env = "gnu"))]
fn keep_freed_memory() {
    // SAFETY: mallopt only sets an allocator parameter (under glibc's own lock).
    unsafe {
        libc::mallopt(libc::M_TOP_PAD, 64 << 20);
    }
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn keep_freed_memory() {}
