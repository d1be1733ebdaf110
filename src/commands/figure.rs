//! `headprint figure`: a figure drawn into an SVG or PNG file.

use std::path::PathBuf;

use clap::ValueEnum;
use headprint::analysis::composition::composition;
use headprint::analysis::ov_logits::top_k;
use headprint::analysis::{Fingerprint, HeadId, Mode, OvTokenLogits};
use headprint::backend::{Backend, block_on};
use headprint::compare::{BEHAVIOURAL_SCORES, SPECTRAL_FEATURES, spearman};
use headprint::figures::composition::CompositionChart;
use headprint::figures::output::{Figure, Format};
use headprint::figures::timeline::TimelineChart;
use headprint::figures::{copying, scatter, self_copy, spectrum, swap, verdicts};
use headprint::forward::{self, HeadOutputs, Keep, Logits};
use headprint::probes::induction::induction_cells;
use headprint::probes::verdict_table;
use headprint::tokens::with_bos;
use headprint::{Error, Result};

use crate::commands::{ModeArg, RevisionArgs, SequenceArgs};
use crate::loaded::{load, load_suite};
use crate::progress;

#[derive(clap::Args)]
pub struct Args {
    /// A .safetensors file, a folder, or a link (hf:ORG/NAME[@REVISION], an http(s) folder);
    /// for --kind timeline, the checkpoints as `headprint timeline` takes them.
    #[arg(required = true, num_args = 1..)]
    models: Vec<String>,
    #[arg(long, value_enum)]
    kind: Kind,
    /// The file to write: FILE.svg or FILE.png.
    #[arg(long)]
    out: PathBuf,
    /// The head, e.g. L2H0 (default: the head with the largest OV copying score).
    #[arg(long)]
    head: Option<String>,
    /// verdicts: a built-in suite (quote, bracket) or a suite JSON file.
    #[arg(long, default_value = "quote")]
    suite: String,
    /// self-copy: how many tokens to show; timeline: how many heads (those whose score peaks
    /// highest), unless --head names one.
    #[arg(long)]
    top: Option<usize>,
    /// scatter: the spectral feature on x, as compare names it (e.g. ov.copying_score);
    /// timeline: the feature of the upper panel (compare's name, or a series of `timeline --json`).
    #[arg(long, default_value = "qk.imaginary_fraction")]
    x: String,
    /// scatter: the behavioural score on y (induction_score, previous_token_score, ...);
    /// timeline: the score of the lower panel.
    #[arg(long, default_value = "induction_score")]
    y: String,
    /// composition: the ratio to the random baseline a pair must reach to be drawn as an edge.
    #[arg(long, default_value_t = 2.0)]
    above: f64,
    #[command(flatten)]
    revisions: RevisionArgs,
    #[command(flatten)]
    mode: ModeArg,
    #[command(flatten)]
    sequence: SequenceArgs,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    /// Every head's OV copying score: the layer x head grid and the bars (the character-transformer case study's figure 1).
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
    /// Heads over training: a feature and a score of the top heads as lines over the checkpoints
    /// (log step axis), above the study's table over training.
    Timeline,
    /// Every writer x reader pair's Q-, K- and V-composition over its random baseline, and the
    /// strongest pairs (--top, default 60, at --above times the baseline or more) as a graph of layers.
    Composition,
}

pub fn run(args: Args) -> Result<()> {
    // A wrong file name fails before any work.
    Format::of(&args.out)?;
    let mode = args.mode.mode();
    let figure = match (args.kind, &args.models[..]) {
        (Kind::Timeline, _) => timeline_chart(&args, mode)?,
        (Kind::Composition, [model]) => composition_chart(&args, model, mode)?,
        (_, [model]) if args.revisions.revisions.is_empty() && args.revisions.steps.is_empty() => {
            one_model_figure(&args, model, mode)?
        }
        (_, [_]) => return Err(Error::Invalid("--revisions and --steps go with --kind timeline".into())),
        _ => return Err(Error::Invalid("this figure takes one model; several are for --kind timeline".into())),
    };
    figure.write(&args.out)?;
    let (width, height) = figure.size();
    println!("wrote {} ({width} x {height} px)", args.out.display());
    Ok(())
}

/// The timeline's figure: every checkpoint fingerprinted and probed (the score and the table
/// need the probe), then the heads chosen.
fn timeline_chart(args: &Args, mode: Mode) -> Result<Figure> {
    let feature = args.x.replace('.', "_");
    let mut backend = Backend::cpu();
    let gathered =
        crate::commands::timeline::gather(&args.models, &args.revisions, mode, Some(&args.sequence), &mut backend)?;
    let timeline = gathered.timeline;
    // An unknown feature or score is refused, not drawn empty.
    timeline.check(&feature)?;
    timeline.check(&args.y)?;
    let heads = match &args.head {
        Some(head) => vec![timeline.head(head).map(|id| (id.layer, id.head))?],
        None => timeline.top_heads(&args.y, args.top.unwrap_or(5))?,
    };
    Ok(Figure::Timeline(TimelineChart {
        title: format!("{}: {} and {} over training ({} mode)", timeline.model, feature, args.y, mode.name()),
        threshold: (args.y == "induction_score").then_some(args.sequence.threshold),
        feature,
        score: args.y.clone(),
        heads,
        timeline,
    }))
}

/// The composition maps and graph: the model's attention weights alone, on the CPU.
fn composition_chart(args: &Args, given: &str, mode: Mode) -> Result<Figure> {
    let opened = crate::open::open(given)?;
    let model = headprint::model::ModelStream::open(&opened.files)?;
    let bar = progress::stage("composition", Some(model.config.layers), "layers");
    let report = composition(&model, mode, &mut Backend::cpu(), &mut |done, total| bar.set(done, total))?;
    drop(bar);
    let title = format!("{}: composition between heads ({} mode)", opened.label, mode.name());
    Ok(Figure::Composition(CompositionChart::of(&report, args.above, args.top.unwrap_or(60), title)))
}

/// Every figure of one model.
fn one_model_figure(args: &Args, given: &str, mode: Mode) -> Result<Figure> {
    let loaded = load(given)?;
    let (model, tokenizer) = (&loaded.model()?, &loaded.opened.tokenizer);
    let path = std::path::Path::new(given);
    let name = match loaded.link {
        Some(_) => loaded.label.clone(),
        None => path.file_name().map_or_else(|| given.to_string(), |n| n.to_string_lossy().into()),
    };
    // The fingerprint (Grams and every head) only where the figure or the default head needs it:
    // on a large model it is the slow part.
    let needs_fingerprint = args.head.is_none() || matches!(args.kind, Kind::Copying | Kind::Spectrum | Kind::Scatter);
    let mut backend = Backend::cpu();
    let fingerprint = if needs_fingerprint { Some(progress::fingerprint(model, mode, &mut backend)?) } else { None };
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
    let bos = loaded.bos(model, &args.sequence.bos).map(|b| b.id);
    Ok(match args.kind {
        Kind::Copying => Figure::Copying(copying::CopyingScores {
            layers: model.config.layers,
            heads: model.config.heads,
            values: fingerprinted()?.heads.iter().map(|h| h.ov.error.is_none().then_some(h.ov.copying_score)).collect(),
            title: format!("{name}: OV copying score of every head ({} mode)", mode.name()),
        }),
        Kind::Spectrum => {
            let h = fingerprinted()?.head(head).ok_or_else(|| Error::Invalid(format!("no fingerprint for {head}")))?;
            let plane = |name: &str, f: &Fingerprint, colour| spectrum::Plane {
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
        Kind::SelfCopy => {
            let logits = OvTokenLogits::of_head(model, head, mode)?;
            let entries = |values: &[f64]| {
                top_k(values, args.top.unwrap_or(10))
                    .into_iter()
                    .map(|i| (tokenizer.token_text(i), values[i]))
                    .collect()
            };
            Figure::SelfCopy(self_copy::SelfCopy {
                title: format!(
                    "{name}: {head} self-copy logits, top {} ({} mode)",
                    args.top.unwrap_or(10),
                    mode.name()
                ),
                raw: entries(&logits.diagonal()),
                normalised: entries(&logits.normalised_diagonal()),
            })
        }
        Kind::Swap => {
            let suite = load_suite("swap")?;
            let encoded: Vec<Vec<usize>> = suite
                .prompts
                .iter()
                .map(|prompt| Ok(with_bos(bos, &tokenizer.encode(&prompt.text)?)))
                .collect::<Result<_>>()?;
            // Every prompt through each layer in one pass: a streamed model is read once.
            let runs: Vec<(&[usize], Keep)> = encoded
                .iter()
                .map(|ids| (ids.as_slice(), Keep { logits: Logits::None, ..HeadOutputs::None.into() }))
                .collect();
            let mut prompts = Vec::new();
            for range in forward::batches(model, &runs) {
                let outputs = block_on(backend.forward(model, &runs[range.clone()], &mut |_, _| {}))?;
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
        Kind::Verdicts => {
            let suite = load_suite(&args.suite)?;
            let rows = block_on(verdict_table(model, tokenizer, &suite, head, bos, &mut backend))?;
            Figure::Verdicts(verdicts::Verdicts {
                title: format!("{name}: {head} on the {} suite (query outlined in black)", suite.name),
                rows,
            })
        }
        Kind::Scatter => {
            let feature = by_name(&SPECTRAL_FEATURES, &args.x, "spectral feature")?;
            let score = by_name(&BEHAVIOURAL_SCORES, &args.y, "behavioural score")?;
            let copies = loaded.first_copies(model, &args.sequence, None)?;
            let report = progress::induction_probe(model, &copies, bos, &mut backend)?;
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
        Kind::Timeline | Kind::Composition => {
            return Err(Error::Internal("this figure is drawn apart from the one-model figures".into()));
        }
    })
}

/// The entry of a named list (`compare`'s features and scores), or an error listing the names.
fn by_name<T: Copy>(list: &[(&str, T)], name: &str, what: &str) -> Result<T> {
    list.iter().find(|(n, _)| *n == name).map(|(_, f)| *f).ok_or_else(|| {
        let names: Vec<&str> = list.iter().map(|(n, _)| *n).collect();
        Error::Invalid(format!("unknown {what} `{name}`: use one of {}", names.join(", ")))
    })
}
