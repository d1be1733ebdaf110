//! `headprint ov-logits`: the token-space OV circuit of one head read as logits.

use headprint::Result;
use headprint::analysis::ov_logits::{bottom_k, top_k};
use headprint::analysis::{HeadId, Mode, OvTokenLogits};
use headprint::tokens::Tokenizer;
use serde::Serialize;

use crate::commands::{Common, ModeArg};
use crate::loaded::load;
use crate::print::{print_json, show};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// The head, e.g. L5H1 (layer and head, zero-based).
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
    #[command(flatten)]
    mode: ModeArg,
}

/// What the command prints, as a table or as JSON.
#[derive(Serialize)]
struct Report {
    head: String,
    mode: &'static str,
    /// The largest self-copy logits: attending a token raises that same token.
    top_raw: Vec<Logit>,
    /// The largest self-copy logits divided by ||W_E[i,:]|| · ||W_U[:,i]||.
    top_normalised: Vec<Logit>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pair: Option<Pair>,
    #[serde(skip_serializing_if = "Option::is_none")]
    row: Option<Row>,
}

/// One token's logit.
#[derive(Serialize)]
struct Logit {
    token: String,
    id: usize,
    value: f64,
}

/// How much attending `from` raises `to`.
#[derive(Serialize)]
struct Pair {
    from: String,
    to: String,
    from_id: usize,
    to_id: usize,
    value: f64,
}

/// What attending one token promotes and suppresses most.
#[derive(Serialize)]
struct Row {
    from: String,
    promotes: Vec<Logit>,
    suppresses: Vec<Logit>,
}

pub fn run(args: Args) -> Result<()> {
    let loaded = load(&args.common.model)?;
    let (model, tokenizer) = (&loaded.model()?, &loaded.opened.tokenizer);
    let id = HeadId::parse(&args.head, &model.config)?;
    let mode = args.mode.mode();
    // One layer and blocks of W_E / W_U rows: no Grams needed for the token view.
    let logits = OvTokenLogits::of_head(model, id, mode)?;
    let report = report(&logits, tokenizer, id, mode, &args)?;
    if args.common.json {
        return print_json(&report);
    }
    println!("{id} OV self-copy logits ({} mode)", mode.name());
    println!("{:<14} {:>10}   {:<14} {:>10}", "raw", "", "normalised", "");
    for (a, b) in report.top_raw.iter().zip(&report.top_normalised) {
        println!("{:<14} {:>10.4}   {:<14} {:>10.4}", show(&a.token), a.value, show(&b.token), b.value);
    }
    if let Some(pair) = &report.pair {
        let verb = if pair.value >= 0.0 { "raises" } else { "lowers" };
        println!("\nattending {} {verb} {} by {:+.4}", show(&pair.from), show(&pair.to), pair.value);
    }
    if let Some(row) = &report.row {
        println!("\nattending {}:", show(&row.from));
        for (label, list) in [("promotes", &row.promotes), ("suppresses", &row.suppresses)] {
            let list: Vec<String> = list.iter().map(|e| format!("{} {:+.3}", show(&e.token), e.value)).collect();
            println!("  {label}: {}", list.join(", "));
        }
    }
    Ok(())
}

fn report(logits: &OvTokenLogits, tokenizer: &Tokenizer, id: HeadId, mode: Mode, args: &Args) -> Result<Report> {
    let listed = |indices: Vec<usize>, values: &[f64]| -> Vec<Logit> {
        indices.into_iter().map(|i| Logit { token: tokenizer.token_text(i), id: i, value: values[i] }).collect()
    };
    let diagonal = logits.diagonal();
    let normalised = logits.normalised_diagonal();
    let pair = match args.pair.as_deref() {
        Some([from, to]) => {
            let (from, to) = (tokenizer.single(from)?, tokenizer.single(to)?);
            Some(Pair {
                from: tokenizer.token_text(from),
                to: tokenizer.token_text(to),
                from_id: from,
                to_id: to,
                value: logits.entry(from, to)?,
            })
        }
        _ => None,
    };
    let row = match &args.row {
        Some(written) => {
            let from = tokenizer.single(written)?;
            let values = logits.row(from)?;
            Some(Row {
                from: tokenizer.token_text(from),
                promotes: listed(top_k(&values, args.top), &values),
                suppresses: listed(bottom_k(&values, args.top), &values),
            })
        }
        None => None,
    };
    Ok(Report {
        head: id.to_string(),
        mode: mode.name(),
        top_raw: listed(top_k(&diagonal, args.top), &diagonal),
        top_normalised: listed(top_k(&normalised, args.top), &normalised),
        pair,
        row,
    })
}
