//! `headprint probe`: induction scores on repeated sequences, or a suite's verdict table.

use headprint::analysis::HeadId;
use headprint::backend::{Backend, block_on};
use headprint::probes::induction::ProbeReport;
use headprint::probes::suite::Attended;
use headprint::probes::verdict_table;
use headprint::{Error, Result};
use serde_json::json;

use crate::commands::{BackendArgs, Common, SequenceArgs, backend_line, print_note};
use crate::loaded::{Loaded, load, load_suite};
use crate::print::{describe_bos, describe_sources, mean_spread, print_json, print_json_from, show};
use crate::progress;

#[derive(clap::Args)]
pub struct Args {
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
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(args: Args) -> Result<()> {
    let loaded = load(&args.common.model)?;
    if args.suite.is_none() && !args.induction {
        return Err(Error::Invalid("probe needs --induction or --suite FILE --head LxHy".into()));
    }
    let mut backend = args.backend.open()?;
    match &args.suite {
        Some(suite) => suite_table(&loaded, &args, suite, &mut backend),
        None => induction(&loaded, &args, &mut backend),
    }
}

/// Where one head attends from each prompt's query, as a verdict table.
fn suite_table(loaded: &Loaded, args: &Args, suite_name: &str, backend: &mut Backend) -> Result<()> {
    let (model, tokenizer) = (&loaded.model()?, &loaded.opened.tokenizer);
    let bos = loaded.bos(model, &args.sequence.bos);
    let suite = load_suite(suite_name)?;
    let head_name =
        args.head.as_deref().or(suite.head.as_deref()).ok_or_else(|| Error::BadSuite("give --head L5H0".into()))?;
    let head = HeadId::parse(head_name, &model.config)?;
    let bos_id = bos.as_ref().map(|b| b.id);
    let rows = block_on(
        backend.with_fallback(async |backend| verdict_table(model, tokenizer, &suite, head, bos_id, backend).await),
    )?;
    let backend = backend.forward_info();
    print_note(&backend);
    if args.common.json {
        return print_json(&json!({
            "suite": suite.name,
            "head": head.to_string(),
            "prepend_bos": !args.sequence.bos.no_bos,
            "bos": bos,
            "backend": backend,
            "rows": rows,
        }));
    }
    println!("suite {} on {head}; {}", suite.name, describe_bos(bos.as_ref()));
    println!("{}", backend_line(&backend));
    println!("{:<6} {:<28} {:>4}  {:<30} {:<30}", "id", "prompt", "q", "top (pos tok weight)", "runner-up");
    let cell = |a: &Attended| format!("{} {} {:.4} {}", a.position, show(&a.token), a.weight, a.labels());
    for row in &rows {
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
    Ok(())
}

/// The induction probe's scores of every head, averaged over the drawn sequences.
fn induction(loaded: &Loaded, args: &Args, backend: &mut Backend) -> Result<()> {
    let model = &loaded.model()?;
    let bos = loaded.bos(model, &args.sequence.bos);
    let threshold = args.sequence.threshold;
    let copies = loaded.first_copies(model, &args.sequence, args.tokens.as_deref())?;
    let report = progress::induction_probe(model, &copies, bos.as_ref().map(|b| b.id), backend)?;
    let backend = backend.forward_info();
    print_note(&backend);
    let heads = report.induction_heads(threshold);
    if args.common.json {
        let reported = ProbeReport::new(&report, &backend, !args.sequence.bos.no_bos, bos.as_ref(), threshold);
        return print_json_from(&reported, loaded.link.as_ref());
    }
    println!(
        "{} repeated sequence(s) of {} tokens ({}); {}",
        report.sequences.len(),
        report.tokens.len(),
        describe_sources(&report),
        describe_bos(bos.as_ref())
    );
    println!("{}", backend_line(&backend));
    println!("prefix-copy accuracy: {}", mean_spread(report.prefix_copy_accuracy, &report.prefix_copy_accuracy_spread));
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
