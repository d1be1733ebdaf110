//! `headprint fingerprint`: every head's spectral fingerprint, as a table or JSON.

use headprint::Result;
use headprint::analysis::{Fingerprint, ModelSummary};
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
    #[command(flatten)]
    backend: BackendArgs,
}

pub fn run(args: Args) -> Result<()> {
    // Read a layer at a time: a model of any size fingerprints in the memory of its Grams and
    // one layer's attention.
    let opened = open::open(&args.common.model)?;
    let model = ModelStream::open(&opened.files)?;
    let mut backend = args.backend.open()?;
    let report = progress::fingerprint(&model, args.mode.mode(), &mut backend)?;
    print_note(&report.backend);
    if args.common.json {
        return print_json_from(&report, opened.link.as_ref());
    }
    print_summary(&report.model);
    println!("mode: {}", report.mode);
    println!("{}\n", backend_line(&report.backend));
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

/// κ for the table: `inf` when the eigenvectors are numerically dependent.
fn kappa(circuit: &Fingerprint) -> String {
    match (&circuit.error, circuit.eigenvector_condition) {
        (Some(_), _) => "error".into(),
        (None, Some(k)) => format!("{k:.3}"),
        (None, None) => "inf".into(),
    }
}
