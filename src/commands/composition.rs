//! `headprint composition`: how strongly each earlier head's output is read by each later head's
//! queries, keys and values, as the strongest pairs or the whole JSON report.

use headprint::Result;
use headprint::analysis::CompositionKind;
use headprint::analysis::composition::{DEFAULT_TOP, composition};
use headprint::model::ModelStream;

use crate::commands::{BackendArgs, Common, ModeArg, backend_line, print_note};
use crate::print::print_json_from;
use crate::{open, progress};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    common: Common,
    #[command(flatten)]
    mode: ModeArg,
    /// How many of the strongest pairs of each kind to list (and to put in the JSON's `top`).
    #[arg(long, default_value_t = DEFAULT_TOP)]
    top: usize,
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(args: Args) -> Result<()> {
    let opened = open::open(&args.common.model)?;
    let model = ModelStream::open(&opened.files)?;
    let mut backend = args.backend.open()?;
    let mode = args.mode.mode();
    let bar = progress::stage("composition", Some(model.config.layers), "layers");
    let report = composition(&model, mode, &mut backend, &mut |done, total| bar.set(done, total))?;
    drop(bar);
    print_note(&report.backend);
    if args.common.json {
        return print_json_from(&report.to_json(args.top), opened.link.as_ref());
    }
    let m = &report.model;
    println!("{}: {} layers x {} heads, d_model {}, d_head {}", m.family, m.layers, m.heads, m.d_model, m.d_head);
    println!("mode: {}", mode.name());
    println!("{}", backend_line(&report.backend));
    for kind in CompositionKind::ALL {
        let base = report.baseline(kind);
        println!(
            "\n{}-composition (baseline {:.4} ± {:.4}, random heads of these shapes)",
            kind.name().to_uppercase(),
            base.mean,
            base.spread
        );
        println!("{:<8} {:<8} {:>8} {:>8}", "from", "to", "score", "ratio");
        for edge in report.ranked(kind).into_iter().take(args.top) {
            println!("{:<8} {:<8} {:>8.4} {:>8.2}", edge.from, edge.to, edge.score, edge.ratio);
        }
    }
    Ok(())
}
