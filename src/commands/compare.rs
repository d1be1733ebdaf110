//! `headprint compare`: each model's facts, and the Spearman ρ of every spectral feature against
//! every behavioural score across its heads.

use headprint::analysis::Mode;
use headprint::backend::{Backend, BackendInfo};
use headprint::compare::{
    BEHAVIOURAL_SCORES, ComparedModel, ComparisonRow, Correlation, SPECTRAL_FEATURES, spearman_table,
};
use headprint::probes::induction::InductionReport;
use headprint::tokens::Bos;
use headprint::{Error, Result};
use serde_json::{Value, json};

use crate::commands::{BackendArgs, ModeArg, SequenceArgs, print_note};
use crate::loaded::load;
use crate::open::LinkFacts;
use crate::print::{describe_sequences, mean_spread, print_json, to_json};
use crate::progress;

#[derive(clap::Args)]
pub struct Args {
    /// Models (.safetensors files, folders or links), one row each.
    #[arg(required = true, num_args = 1..)]
    models: Vec<String>,
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

/// One model's part of the comparison.
struct Compared {
    row: ComparisonRow,
    bos: Option<Bos>,
    report: InductionReport,
    spearman: Vec<Correlation>,
    link: Option<Value>,
    /// What computed the fingerprint, and what ran the probe.
    fingerprint_backend: BackendInfo,
    probe_backend: BackendInfo,
}

pub fn run(args: Args) -> Result<()> {
    let threshold = args.sequence.threshold;
    let mode = args.mode.mode();
    let mut backend = args.backend.open()?;
    let models =
        args.models.iter().map(|given| compared(given, &args, mode, &mut backend)).collect::<Result<Vec<_>>>()?;
    let mut notes: Vec<&BackendInfo> = Vec::new();
    for model in &models {
        for backend in [&model.fingerprint_backend, &model.probe_backend] {
            if notes.iter().all(|seen| seen.note != backend.note) {
                print_note(backend);
                notes.push(backend);
            }
        }
    }
    if args.json {
        let entries = models
            .iter()
            .map(|model| {
                let mut value = to_json(&ComparedModel {
                    row: &model.row,
                    bos_token: model.bos.as_ref(),
                    induction_head_names: model.report.induction_heads(threshold),
                    head_scores: &model.report.heads,
                    spearman: &model.spearman,
                    backend: &model.fingerprint_backend,
                    probe_backend: &model.probe_backend,
                })?;
                if let (Some(object), Some(link)) = (value.as_object_mut(), &model.link) {
                    object.insert("model_link".into(), link.clone());
                }
                Ok(value)
            })
            .collect::<Result<Vec<_>>>()?;
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
    for Compared { row, .. } in &models {
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
    for Compared { row, fingerprint_backend, probe_backend, .. } in &models {
        println!(
            "backend of {}: fingerprint on {}, probe on {}",
            row.model,
            fingerprint_backend.label(),
            probe_backend.label()
        );
    }
    for Compared { row, spearman, .. } in &models {
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

/// One model fingerprinted and probed. Layers are read as they are needed, so any step can find
/// a bad file: its errors name the model.
fn compared(given: &str, args: &Args, mode: Mode, backend: &mut Backend) -> Result<Compared> {
    let named = |e: Error| Error::Invalid(format!("{given}: {e}"));
    let loaded = load(given).map_err(named)?;
    let model = loaded.model().map_err(named)?;
    let fingerprint = progress::fingerprint(&model, mode, backend).map_err(named)?;
    let bos = loaded.bos(&model, &args.sequence.bos);
    let copies = loaded.first_copies(&model, &args.sequence, None).map_err(named)?;
    let report = progress::induction_probe(&model, &copies, bos.as_ref().map(|b| b.id), backend).map_err(named)?;
    let sequence = describe_sequences(&report, copies.first().map_or(0, |c| c.tokens.len()), bos.as_ref());
    let row = ComparisonRow::new(&loaded.label, &fingerprint, Some(&report), &sequence, args.sequence.threshold);
    let spearman = spearman_table(&fingerprint, &report);
    Ok(Compared {
        row,
        bos,
        report,
        spearman,
        link: loaded.link.as_ref().map(LinkFacts::json),
        fingerprint_backend: fingerprint.backend.clone(),
        probe_backend: backend.forward_info(),
    })
}
