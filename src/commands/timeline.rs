//! `headprint timeline`: one model's checkpoints fingerprinted (and probed) one at a time, as a
//! series per head and quantity, and the study's row per revision.

use std::path::Path;

use headprint::analysis::Mode;
use headprint::backend::{Backend, BackendInfo};
use headprint::probes::induction::FirstCopy;
use headprint::repeats::{Repeats, identity};
use headprint::timeline::{Checkpoint, Measured, Revision, Timeline, step_revisions};
use headprint::weights::remote::{DEFAULT_REVISION, ModelLink};
use headprint::{Error, Result};
use serde_json::{Value, json};

use crate::commands::{BackendArgs, ModeArg, RevisionArgs, SequenceArgs, print_note};
use crate::loaded::load;
use crate::open::LinkFacts;
use crate::print::{describe_sequences, mean_spread, print_json, to_json};
use crate::progress;
use headprint_native::open::published;

#[derive(clap::Args)]
pub struct Args {
    /// A model by link (hf:ORG/NAME) with --revisions or --steps, or the checkpoints themselves:
    /// local folders (or links), one revision each, in order.
    #[arg(required = true, num_args = 1..)]
    models: Vec<String>,
    #[command(flatten)]
    revisions: RevisionArgs,
    /// Also run the induction probe on every revision, on the same sequences each time (reads
    /// the MLPs, which the fingerprint leaves on the server).
    #[arg(long)]
    probe: bool,
    /// The series the table shows per head (default: induction_score with --probe, else
    /// qk_imaginary_fraction); --json has them all.
    #[arg(long)]
    show: Option<String>,
    /// Print JSON instead of tables.
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    mode: ModeArg,
    #[command(flatten)]
    sequence: SequenceArgs,
    #[command(flatten)]
    backend: BackendArgs,
}

/// A timeline with what the CLI reports beside each revision's row.
pub struct Gathered {
    pub timeline: Timeline,
    /// Per revision, in order; empty for a revision that failed.
    facts: Vec<Facts>,
}

/// What one revision's row says beside the study's columns: how it was fetched and computed.
#[derive(Default)]
pub(crate) struct Facts {
    /// `model_link`, for a revision by link.
    link: Option<Value>,
    backend: Option<BackendInfo>,
    probe_backend: Option<BackendInfo>,
}

impl Gathered {
    /// Each distinct note of the backends (a GPU asked for and not used), once.
    fn notes(&self) -> Vec<&BackendInfo> {
        let mut notes: Vec<&BackendInfo> = Vec::new();
        for info in self.facts.iter().flat_map(|f| f.backend.iter().chain(&f.probe_backend)) {
            if notes.iter().all(|seen| seen.note != info.note) {
                notes.push(info);
            }
        }
        notes
    }
}

pub fn run(args: Args) -> Result<()> {
    let mode = args.mode.mode();
    let sequence = args.probe.then_some(&args.sequence);
    let mut backend = args.backend.open()?;
    let gathered = gather(&args.models, &args.revisions, mode, sequence, &mut backend)?;
    let timeline = &gathered.timeline;
    let show = match &args.show {
        Some(name) => name.clone(),
        None if args.probe => "induction_score".into(),
        None => "qk_imaginary_fraction".into(),
    };
    // An unknown series is refused before anything is printed.
    timeline.check(&show)?;
    for note in gathered.notes() {
        print_note(note);
    }
    if args.json {
        let mut value = to_json(timeline)?;
        if let Some(rows) = value.get_mut("table").and_then(Value::as_array_mut) {
            for (row, facts) in rows.iter_mut().zip(&gathered.facts) {
                if let Some(row) = row.as_object_mut() {
                    for (key, fact) in [("backend", &facts.backend), ("probe_backend", &facts.probe_backend)] {
                        if let Some(info) = fact {
                            row.insert(key.into(), to_json(info)?);
                        }
                    }
                    if let Some(link) = &facts.link {
                        row.insert("model_link".into(), link.clone());
                    }
                }
            }
        }
        if let Some(object) = value.as_object_mut() {
            object.insert("mode".into(), json!(mode.name()));
            object.insert("threshold".into(), json!(args.sequence.threshold));
            object.insert("probe".into(), json!(args.probe));
        }
        return print_json(&value);
    }
    println!(
        "timeline of {}: {} revisions, spectral features {} mode\n",
        timeline.model,
        timeline.revisions.len(),
        mode.name()
    );
    let width = timeline.revisions.iter().map(|r| r.revision.chars().count()).max().unwrap_or(0).max(8);
    println!(
        "{:<width$} {:>8} {:<12} {:>10} {:>10}  prefix-copy accuracy",
        "revision", "step", "commit", "QK imag", "ind. heads"
    );
    for (revision, row) in timeline.revisions.iter().zip(&timeline.table) {
        let step = revision.step.map_or("-".into(), |s| s.to_string());
        let commit = revision.commit.as_deref().map_or("-", |c| &c[..c.len().min(12)]);
        match (&row.row, &row.error) {
            (Some(row), _) => println!(
                "{:<width$} {:>8} {:<12} {:>10.4} {:>10}  {}{}",
                revision.revision,
                step,
                commit,
                row.mean_qk_imaginary_fraction,
                row.induction_heads.map_or("-".into(), |n| n.to_string()),
                match (row.prefix_copy_accuracy, &row.prefix_copy_accuracy_spread) {
                    (Some(mean), Some(spread)) => mean_spread(mean, spread),
                    _ => "- (no --probe)".into(),
                },
                // Not fetched: the Hub publishes the same weights as this earlier revision's.
                revision.same_weights_as.as_ref().map_or(String::new(), |e| format!("  = {e} (same weights)"))
            ),
            (None, error) => {
                println!(
                    "{:<width$} {:>8} {:<12} error: {}",
                    revision.revision,
                    step,
                    commit,
                    error.as_deref().unwrap_or("")
                )
            }
        }
    }
    if args.probe {
        println!("\ninduction heads count heads with mean induction score >= {}", args.sequence.threshold);
    }
    if timeline.revisions.iter().any(|r| r.same_weights_as.is_some()) {
        println!(
            "\n`= REVISION`: the Hub publishes the same weights as that earlier revision's; not fetched again, its numbers are that revision's"
        );
    }
    println!("\n{show} per head, one column per revision in the order above:");
    print!("{:<7}", "head");
    for (index, revision) in timeline.revisions.iter().enumerate() {
        let mark = if revision.same_weights_as.is_some() { "=" } else { "" };
        print!(" {:>10}", format!("{mark}#{}", index + 1));
    }
    println!();
    for head in &timeline.heads {
        print!("{:<7}", format!("L{}H{}", head.layer, head.head));
        for value in timeline.series(head.layer, head.head, &show)? {
            print!(" {:>10}", value.map_or("-".into(), |v| format!("{v:.4}")));
        }
        println!();
    }
    Ok(())
}

/// Every revision named, fingerprinted (and probed when `sequence` is given) one after the
/// other, each opened through the caches, so a revision read before costs no network. A
/// revision that fails keeps its reason on its row and the others go on; none opening is an error.
/// Before a Hub revision is opened its weights' identity is asked of the Hub's API: a revision
/// whose weights are an earlier revision's is not fetched or computed, and its results are that
/// revision's, marked `same_weights_as` (the sweep's rule, `headprint::repeats`).
pub fn gather(
    given: &[String],
    revisions: &RevisionArgs,
    mode: Mode,
    sequence: Option<&SequenceArgs>,
    backend: &mut Backend,
) -> Result<Gathered> {
    let (model, named) = checkpoints(given, revisions)?;
    let mut checkpoints = Vec::with_capacity(named.len());
    let mut facts = Vec::with_capacity(named.len());
    // Drawn once, from the first revision that opens: every revision runs the same sequences.
    let mut copies: Option<Vec<FirstCopy>> = None;
    // Each revision computed so far by its weights' identity, as its index in `checkpoints`.
    let mut repeats: Repeats<usize> = Repeats::default();
    for (revision, link) in named {
        // Offline, or when the API cannot say, the revision is simply opened as before.
        let hub = match ModelLink::looks_like_link(&link).then(|| ModelLink::parse(&link)) {
            Some(Ok(ModelLink::Hub { repo, revision })) => published(&repo, &revision).ok().map(|p| (repo, p)),
            _ => None,
        };
        let weights = identity(hub.as_ref().map(|(_, p)| p));
        if let Some(&earlier) = repeats.earlier(weights.as_deref())
            && let (Some((repo, now)), Some(Checkpoint { revision: first, outcome: Ok(measured) })) =
                (&hub, checkpoints.get(earlier))
        {
            let mut measured: Measured = measured.clone();
            measured.label = format!("hf:{repo}@{}", now.commit);
            let repeating = Revision::repeating(&revision, Some(now.commit.clone()), &first.revision);
            facts.push(Facts::default());
            checkpoints.push(Checkpoint { revision: repeating, outcome: Ok(measured) });
            continue;
        }
        let (revision, outcome) = match measure(&link, mode, sequence, &mut copies, backend) {
            Ok((measured, pinned, known)) => {
                facts.push(known);
                repeats.keep(weights.as_deref(), checkpoints.len());
                (Revision::opened(&revision, pinned.as_deref()), Ok(measured))
            }
            Err(e) => {
                facts.push(Facts::default());
                (Revision::new(&revision, None), Err(e.to_string()))
            }
        };
        checkpoints.push(Checkpoint { revision, outcome });
    }
    if checkpoints.iter().all(|c| c.outcome.is_err()) {
        let first = checkpoints.first().and_then(|c| c.outcome.as_ref().err()).cloned().unwrap_or_default();
        return Err(Error::Invalid(format!("no revision could be read; the first: {first}")));
    }
    let threshold = sequence.map_or(headprint::compare::INDUCTION_HEAD_THRESHOLD, |s| s.threshold);
    Ok(Gathered { timeline: Timeline::new(&model, &checkpoints, threshold)?, facts })
}

/// One revision opened, fingerprinted and, with `sequence`, probed; with its pinned link when it
/// came by link, and its row's facts. The sweep measures each of its units so too.
pub(crate) fn measure(
    link: &str,
    mode: Mode,
    sequence: Option<&SequenceArgs>,
    copies: &mut Option<Vec<FirstCopy>>,
    backend: &mut Backend,
) -> Result<(Measured, Option<String>, Facts)> {
    let named = |e: Error| Error::Invalid(format!("{link}: {e}"));
    let loaded = load(link).map_err(named)?;
    let pinned = loaded.link.as_ref().map(|l| l.pinned.clone());
    let model = loaded.model().map_err(named)?;
    let fingerprint = progress::fingerprint(&model, mode, backend).map_err(named)?;
    let mut facts = Facts { backend: Some(fingerprint.backend.clone()), ..Facts::default() };
    let (induction, described) = match sequence {
        None => (None, String::new()),
        Some(args) => {
            let bos = loaded.bos(&model, &args.bos);
            if copies.is_none() {
                *copies = Some(loaded.first_copies(&model, args, None).map_err(named)?);
            }
            let drawn = copies.as_deref().unwrap_or_default();
            let report =
                progress::induction_probe(&model, drawn, bos.as_ref().map(|b| b.id), backend).map_err(named)?;
            facts.probe_backend = Some(backend.forward_info());
            let described = describe_sequences(&report, drawn.first().map_or(0, |c| c.tokens.len()), bos.as_ref());
            (Some(report), described)
        }
    };
    facts.link = loaded.link.as_ref().map(LinkFacts::json);
    let measured = Measured { label: loaded.label.clone(), fingerprint, induction, sequence: described };
    Ok((measured, pinned, facts))
}

/// The model's name and each revision with what opens it: `--revisions`/`--steps` of one
/// repository by link, or the models given, one revision each.
fn checkpoints(given: &[String], revisions: &RevisionArgs) -> Result<(String, Vec<(String, String)>)> {
    let listed =
        if revisions.steps.is_empty() { revisions.revisions.clone() } else { step_revisions(&revisions.steps) };
    if listed.is_empty() {
        let named = given.iter().map(|g| (revision_name(g), g.clone())).collect();
        return Ok((model_name(given), named));
    }
    let [one] = given else {
        return Err(Error::Invalid(
            "--revisions and --steps name revisions of one model by link; give local checkpoints one by one instead"
                .into(),
        ));
    };
    let repo = match ModelLink::looks_like_link(one).then(|| ModelLink::parse(one)).transpose()? {
        Some(ModelLink::Hub { repo, revision }) if revision == DEFAULT_REVISION && !one.contains('@') => repo,
        Some(ModelLink::Hub { .. }) => {
            return Err(Error::Invalid(format!(
                "{one}: with --revisions or --steps, name the repository without @REVISION"
            )));
        }
        _ => {
            return Err(Error::Invalid(format!(
                "{one}: --revisions and --steps name revisions of a Hub repository (hf:ORG/NAME); give local checkpoints one by one instead"
            )));
        }
    };
    if let Some(empty) = listed.iter().find(|r| r.trim().is_empty()) {
        return Err(Error::Invalid(format!("--revisions has an empty name (`{empty}`) in its list")));
    }
    let named = listed.into_iter().map(|r| (r.clone(), format!("hf:{repo}@{r}"))).collect();
    Ok((format!("hf:{repo}"), named))
}

/// A checkpoint's revision as the timeline names it: a Hub link's revision, else what was given.
fn revision_name(given: &str) -> String {
    match ModelLink::parse(given) {
        Ok(ModelLink::Hub { revision, .. }) if ModelLink::looks_like_link(given) => revision,
        _ => given.to_string(),
    }
}

/// The timeline's model: the repository when every checkpoint is one of its revisions, the
/// folder holding every local checkpoint, else the checkpoints as given.
fn model_name(given: &[String]) -> String {
    let repos: Vec<Option<String>> = given
        .iter()
        .map(|g| match ModelLink::looks_like_link(g).then(|| ModelLink::parse(g)) {
            Some(Ok(ModelLink::Hub { repo, .. })) => Some(repo),
            _ => None,
        })
        .collect();
    if let Some(Some(first)) = repos.first()
        && repos.iter().all(|r| r.as_ref() == Some(first))
    {
        return format!("hf:{first}");
    }
    let parents: Vec<Option<&Path>> = given.iter().map(|g| Path::new(g.trim_end_matches('/')).parent()).collect();
    match parents.first() {
        Some(Some(first)) if !first.as_os_str().is_empty() && parents.iter().all(|p| p == &Some(*first)) => {
            first.display().to_string()
        }
        _ => given.join(" "),
    }
}
