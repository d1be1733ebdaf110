//! `headprint svd`: the singular directions of one head's OV and QK circuits, each block read
//! out through the vocabulary.

use headprint::Result;
use headprint::analysis::HeadId;
use headprint::analysis::singular::{CircuitSvd, DEFAULT_TOKENS, Readout, head_svd};

use crate::commands::{Common, ModeArg};
use crate::loaded::load;
use crate::print::{print_json_from, show};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    /// The head, e.g. L5H1 (layer and head, zero-based).
    #[arg(long)]
    head: String,
    #[command(flatten)]
    mode: ModeArg,
    /// How many tokens to list at each end of each readout.
    #[arg(long, default_value_t = DEFAULT_TOKENS)]
    tokens: usize,
}

pub fn run(args: Args) -> Result<()> {
    let loaded = load(&args.common.model)?;
    let model = loaded.model()?;
    let id = HeadId::parse(&args.head, &model.config)?;
    let mode = args.mode.mode();
    let report = head_svd(&model, &loaded.opened.tokenizer, id, mode, args.tokens)?;
    if args.common.json {
        return print_json_from(&report, loaded.link.as_ref());
    }
    println!("{} ({} mode): blocks split at a relative gap of {}", report.head, mode.name(), report.gap);
    print_circuit("OV", &report.ov, ("reads", "writes"));
    print_circuit("QK", &report.qk, ("query", "key"));
    Ok(())
}

fn print_circuit(name: &str, circuit: &CircuitSvd, (input, output): (&str, &str)) {
    let values: Vec<String> = circuit.singular_values.iter().map(|s| format!("{s:.4}")).collect();
    println!("\n{name} singular values: {}", values.join(" "));
    for direction in &circuit.directions {
        let indices: Vec<String> = direction.indices.iter().map(|i| i.to_string()).collect();
        let what = match (direction.null, direction.degenerate) {
            (true, _) => "null",
            (false, true) => "block, read as a subspace",
            (false, false) => "direction",
        };
        println!("  {} [{}] σ {:.4}", what, indices.join(","), direction.singular_values[0]);
        for (side, readout) in [(input, &direction.input), (output, &direction.output)] {
            if let Some(readout) = readout {
                println!("    {side:<6} + {}", tokens(readout, false));
                if readout.signed {
                    println!("    {side:<6} - {}", tokens(readout, true));
                }
            }
        }
    }
}

fn tokens(readout: &Readout, bottom: bool) -> String {
    let list = if bottom { &readout.bottom } else { &readout.top };
    list.iter().map(|t| format!("{} ({:.3})", show(&t.token), t.value)).collect::<Vec<_>>().join("  ")
}
