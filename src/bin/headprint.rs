//! The `headprint` command line: the same core the page runs, printing readable tables or
//! the JSON contract that scripts and outside checks rely on.

// The CLI reads files from disk, so it exists natively only; a wasm32 build of the whole
// package (`cargo build --target wasm32-unknown-unknown`) gets an empty binary.
#[cfg(not(target_arch = "wasm32"))]
mod native {
    use std::path::PathBuf;
    use std::process::ExitCode;

    use clap::{Args, Parser, Subcommand};
    use headprint::analysis::ov_logits::{bottom_k, top_k};
    use headprint::analysis::{
        Circuits, HeadId, Mode, ModelSummary, OvTokenLogits, circuits::Grams, fingerprint_model,
    };
    use headprint::model::{LoadParts, Model};
    use headprint::probes::induction::{RepeatSource, induction_probe, random_first_copy, text_window_first_copy};
    use headprint::probes::{Suite, verdict_table};
    use headprint::tokens::{Tokenizer, parse_ids};
    use headprint::weights::ModelFiles;
    use headprint::{Error, Result, forward};
    use serde_json::json;

    #[derive(Parser)]
    #[command(name = "headprint", version, about = "Spectral fingerprints of attention heads, next to what they do")]
    struct Cli {
        #[command(subcommand)]
        command: Command,
    }

    #[derive(Args)]
    struct Common {
        /// A .safetensors file, or a folder with config.json / tokenizer.json / shards.
        model: PathBuf,
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
        },
        /// Run a probe: induction scores on a repeated sequence, or a suite's verdict table.
        Probe(ProbeArgs),
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
    }

    #[derive(Args)]
    struct ProbeArgs {
        #[command(flatten)]
        common: Common,
        /// Induction / previous-token / duplicate-token scores and prefix-copy accuracy.
        #[arg(long, conflicts_with = "suite")]
        induction: bool,
        /// First copy as token ids (repeated once).
        #[arg(long)]
        tokens: Option<String>,
        /// Length of a drawn first copy.
        #[arg(long, default_value_t = 50)]
        len: usize,
        #[arg(long, default_value_t = 0)]
        seed: u64,
        /// Draw the first copy as a random window of this text file instead of uniform random tokens.
        #[arg(long)]
        text_file: Option<PathBuf>,
        /// A suite JSON file, or a built-in suite: quote, bracket, swap.
        #[arg(long)]
        suite: Option<String>,
        /// The head for a suite, e.g. L5H0.
        #[arg(long)]
        head: Option<String>,
    }

    pub fn main() -> ExitCode {
        let cli = Cli::parse();
        match run(cli.command) {
            Ok(()) => ExitCode::SUCCESS,
            Err(error) => {
                eprintln!("headprint: {error}");
                ExitCode::FAILURE
            }
        }
    }

    struct Loaded {
        model: Model,
        tokenizer: Tokenizer,
    }

    fn load(common: &Common, parts: LoadParts) -> Result<Loaded> {
        let files = ModelFiles::from_path(&common.model)?;
        let model = Model::load(&files, parts)?;
        let tokenizer = Tokenizer::for_model(&model, files.tokenizer_json.as_deref())?;
        Ok(Loaded { model, tokenizer })
    }

    fn print_json(value: &impl serde::Serialize) -> Result<()> {
        println!("{}", serde_json::to_string(value).map_err(|e| Error::Invalid(e.to_string()))?);
        Ok(())
    }

    fn run(command: Command) -> Result<()> {
        match command {
            Command::Fingerprint { common, raw } => {
                let loaded = load(&common, LoadParts::Circuits)?;
                let report = fingerprint_model(&loaded.model, if raw { Mode::Raw } else { Mode::Folded })?;
                if common.json {
                    return print_json(&report);
                }
                print_summary(&report.model);
                println!("mode: {}\n", report.mode);
                println!(
                    "{:<7} {:>9} {:>9} {:>9} {:>9} {:>10}   {:>9} {:>9} {:>10}",
                    "head", "OV copy", "OV imag", "OV κ", "OV dep", "OV scale", "QK copy", "QK imag", "QK κ"
                );
                for h in &report.heads {
                    println!(
                        "{:<7} {:>9.4} {:>9.4} {:>9} {:>9.4} {:>10.4}   {:>9.4} {:>9.4} {:>10}",
                        h.id().to_string(),
                        h.ov.copying_score,
                        h.ov.imaginary_fraction,
                        kappa(h.ov.eigenvector_condition),
                        h.ov.departure_from_normality,
                        h.ov.scale,
                        h.qk.copying_score,
                        h.qk.imaginary_fraction,
                        kappa(h.qk.eigenvector_condition)
                    );
                }
                Ok(())
            }
            Command::Attention { common, tokens, text } => {
                let loaded = load(&common, LoadParts::Everything)?;
                let ids = match (tokens, text) {
                    (Some(ids), _) => parse_ids(&ids)?,
                    (None, Some(text)) => loaded.tokenizer.encode(&text)?,
                    (None, None) => return Err(Error::BadTokens("give --tokens 3,1,4 or --text \"...\"".into())),
                };
                let output = forward::run(&loaded.model, &ids)?;
                let patterns: Vec<Vec<Vec<Vec<f32>>>> = output
                    .patterns
                    .iter()
                    .map(|heads| {
                        heads.iter().map(|p| p.row_iter().map(|r| r.iter().copied().collect()).collect()).collect()
                    })
                    .collect();
                if common.json {
                    return print_json(&json!({"tokens": ids, "patterns": patterns}));
                }
                let labels: Vec<String> = ids.iter().map(|&i| loaded.tokenizer.token_text(i)).collect();
                for (layer, heads) in patterns.iter().enumerate() {
                    for (head, rows) in heads.iter().enumerate() {
                        println!("L{layer}H{head}: top key per query");
                        for (q, row) in rows.iter().enumerate() {
                            let k = (0..=q).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap_or(0);
                            println!(
                                "  {q:>3} {:<8} -> {k:>3} {:<8} {:.4}",
                                show(&labels[q]),
                                show(&labels[k]),
                                row[k]
                            );
                        }
                    }
                }
                Ok(())
            }
            Command::Probe(args) => probe(args),
            Command::OvLogits { common, head, top, pair, row, raw } => {
                let loaded = load(&common, LoadParts::Circuits)?;
                let (model, tokenizer) = (&loaded.model, &loaded.tokenizer);
                let id = HeadId::parse(&head, &model.config)?;
                let grams = Grams::compute(model);
                let mode = if raw { Mode::Raw } else { Mode::Folded };
                let logits = OvTokenLogits::new(&Circuits::new(model, &grams, mode), id);
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
                            .map(|e| {
                                format!("{} {:+.3}", show(e["token"].as_str().unwrap()), e["value"].as_f64().unwrap())
                            })
                            .collect();
                        println!("  {label}: {}", list.join(", "));
                    }
                }
                Ok(())
            }
        }
    }

    fn probe(args: ProbeArgs) -> Result<()> {
        let loaded = load(&args.common, LoadParts::Everything)?;
        let (model, tokenizer) = (&loaded.model, &loaded.tokenizer);
        if let Some(suite_name) = &args.suite {
            let suite = match Suite::builtin(suite_name) {
                Some(suite) => suite,
                None => {
                    let text = std::fs::read_to_string(suite_name)
                        .map_err(|e| Error::BadSuite(format!("{suite_name}: {e}")))?;
                    Suite::from_json(&text)?
                }
            };
            let head_name = args
                .head
                .as_deref()
                .or(suite.head.as_deref())
                .ok_or_else(|| Error::BadSuite("give --head L5H0".into()))?;
            let head = HeadId::parse(head_name, &model.config)?;
            let rows = verdict_table(model, tokenizer, &suite, head)?;
            if args.common.json {
                return print_json(&json!({"suite": suite.name, "head": head.to_string(), "rows": rows}));
            }
            println!("suite {} on {head}", suite.name);
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
        let (first_copy, source) = match (&args.tokens, &args.text_file) {
            (Some(ids), _) => (parse_ids(ids)?, RepeatSource::Given),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path).map_err(|e| Error::Io(format!("{}: {e}", path.display())))?;
                (
                    text_window_first_copy(&tokenizer.encode(&text)?, args.len, args.seed)?,
                    RepeatSource::TextWindow { seed: args.seed },
                )
            }
            (None, None) => (
                random_first_copy(model.config.vocab, args.len, args.seed, &tokenizer.special_ids())?,
                RepeatSource::UniformRandom { seed: args.seed },
            ),
        };
        let report = induction_probe(model, &first_copy, source)?;
        if args.common.json {
            return print_json(&report);
        }
        println!("repeated sequence: {} tokens ({:?})", report.tokens.len(), report.source);
        println!("prefix-copy accuracy: {:.4}\n", report.prefix_copy_accuracy);
        println!("{:<7} {:>10} {:>10} {:>10}", "head", "induction", "previous", "duplicate");
        for h in &report.heads {
            println!(
                "{:<7} {:>10.4} {:>10.4} {:>10.4}",
                format!("L{}H{}", h.layer, h.head),
                h.induction_score,
                h.previous_token_score,
                h.duplicate_token_score
            );
        }
        Ok(())
    }

    fn print_summary(model: &ModelSummary) {
        println!(
            "{}: {} layers x {} heads, d_model {}, d_head {}, vocab {}, {} parameters",
            model.family, model.layers, model.heads, model.d_model, model.d_head, model.vocab, model.parameters
        );
    }

    fn kappa(value: Option<f64>) -> String {
        value.map_or("inf".into(), |k| format!("{k:.3}"))
    }

    /// Makes whitespace tokens visible in tables.
    fn show(token: &str) -> String {
        token.replace('\n', "\\n").replace(' ', "␣")
    }
}

#[cfg(not(target_arch = "wasm32"))]
fn main() -> std::process::ExitCode {
    native::main()
}

#[cfg(target_arch = "wasm32")]
fn main() {}
