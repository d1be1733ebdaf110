//! The CLI contract: JSON shapes that scripts rely on, and one-line errors.

use crate::common;

use common::{assert_verdicts_match, expected, fixture, headprint, json};
use serde_json::Value;

#[test]
fn fingerprint_json_contract() {
    let path = fixture("pythia");
    let report = json(&["fingerprint", path.to_str().unwrap(), "--json"]);
    let model = &report["model"];
    assert_eq!(
        (model["family"].as_str(), model["layers"].as_u64(), model["heads"].as_u64()),
        (Some("neox"), Some(2), Some(4))
    );
    assert_eq!(
        (model["d_model"].as_u64(), model["d_head"].as_u64(), model["vocab"].as_u64()),
        (Some(32), Some(8), Some(50))
    );
    let heads = report["heads"].as_array().unwrap();
    assert_eq!(heads.len(), 8);
    for circuit in ["qk", "qk_token", "ov", "ov_residual"] {
        let f = &heads[5][circuit];
        assert!(f["error"].is_null() && f["defective"] == false, "{circuit}");
        assert_eq!(f["eigenvalues"].as_array().unwrap().len(), 8);
        for key in ["copying_score", "imaginary_fraction", "eigenvector_condition", "departure_from_normality", "scale"]
        {
            assert!(f[key].is_number(), "{circuit}.{key}");
        }
    }
    assert_eq!((heads[5]["layer"].as_u64(), heads[5]["head"].as_u64()), (Some(1), Some(1)));
    // --raw changes the folded numbers of a LayerNorm model.
    let raw = json(&["fingerprint", path.to_str().unwrap(), "--raw", "--json"]);
    assert_ne!(raw["heads"][0]["qk"]["copying_score"], report["heads"][0]["qk"]["copying_score"]);
}

#[test]
fn attention_json_contract() {
    let path = fixture("llama");
    // Llama's config.json names bos_token_id 1: it goes in front unless --no-bos.
    let report = json(&["attention", path.to_str().unwrap(), "--tokens", "3,1,4,1,5", "--json"]);
    assert_eq!(report["tokens"], serde_json::json!([1, 3, 1, 4, 1, 5]));
    assert_eq!((report["prepend_bos"].as_bool(), report["bos"]["id"].as_u64()), (Some(true), Some(1)));
    let patterns = report["patterns"].as_array().unwrap();
    assert_eq!(patterns.len(), 2);
    let p = &patterns[1][3];
    assert_eq!(p.as_array().unwrap().len(), 6);
    let row: Vec<f64> = p[5].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-5);
    assert_eq!(p[0][1].as_f64(), Some(0.0), "causal");
    let plain = json(&["attention", path.to_str().unwrap(), "--tokens", "3,1,4,1,5", "--no-bos", "--json"]);
    assert_eq!(plain["tokens"], serde_json::json!([3, 1, 4, 1, 5]));
    assert!(plain["bos"].is_null());
    // Position 0 attends only to itself; with the BOS in front that is the BOS, without it token 3,
    // so the rows of the same token differ (the BOS changes what every later position sees).
    assert_ne!(plain["patterns"][1][3][4], report["patterns"][1][3][5]);
}

fn numbers(value: &Value) -> Vec<f64> {
    value.as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect()
}

#[test]
fn induction_probe_contract() {
    let path = fixture("gpt2");
    let args = ["probe", path.to_str().unwrap(), "--induction", "--len", "6", "--seed", "7", "--json"];
    let report = json(&args);
    // BOS <|endoftext|> (id 1, config.json) + 6 tokens twice.
    assert_eq!(report["tokens"].as_array().unwrap().len(), 13);
    assert_eq!((report["tokens"][0].as_u64(), report["bos"].as_u64()), (Some(1), Some(1)));
    assert_eq!(report["bos_token"]["token"], "<|endoftext|>");
    assert_eq!(report["tokens"][1], report["tokens"][7]);
    // Eight sequences by default, seeds 7..14, each drawn from the ordinary vocabulary.
    let sequences = report["sequences"].as_array().unwrap();
    assert_eq!(sequences.len(), 8);
    let ordinary: Vec<u64> =
        common::expected("gpt2")["ordinary_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
    for (i, sequence) in sequences.iter().enumerate() {
        assert_eq!(sequence["source"]["seed"].as_u64(), Some(7 + i as u64));
        let tokens: Vec<u64> = sequence["tokens"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap()).collect();
        assert_eq!(tokens[0], 1);
        assert!(tokens[1..].iter().all(|t| ordinary.contains(t)), "{tokens:?}");
    }
    assert_eq!(sequences[0]["tokens"], report["tokens"]);
    // The means and spreads are those of the per-sequence numbers.
    let accuracies: Vec<f64> = sequences.iter().map(|s| s["prefix_copy_accuracy"].as_f64().unwrap()).collect();
    for acc in &accuracies {
        assert!((acc * 5.0 - (acc * 5.0).round()).abs() < 1e-9, "counts of 5 positions: {acc}");
    }
    let mean = accuracies.iter().sum::<f64>() / 8.0;
    assert!((report["prefix_copy_accuracy"].as_f64().unwrap() - mean).abs() < 1e-12);
    let head = &report["heads"][3];
    let per_sequence: Vec<f64> = sequences.iter().map(|s| s["heads"][3]["induction_score"].as_f64().unwrap()).collect();
    let head_mean = per_sequence.iter().sum::<f64>() / 8.0;
    let std = (per_sequence.iter().map(|v| (v - head_mean).powi(2)).sum::<f64>() / 8.0).sqrt();
    assert!((head["induction_score"].as_f64().unwrap() - head_mean).abs() < 1e-12);
    assert!((head["spread"]["induction_score"]["std"].as_f64().unwrap() - std).abs() < 1e-12);
    let lowest = per_sequence.iter().copied().fold(f64::INFINITY, f64::min);
    assert_eq!(head["spread"]["induction_score"]["min"].as_f64(), Some(lowest));
    for key in ["layer", "head", "induction_score", "previous_token_score", "duplicate_token_score", "copy_fidelity"] {
        assert!(head[key].is_number(), "{key}");
    }
    let fidelity = head["copy_fidelity"].as_f64().unwrap();
    assert!((fidelity * 40.0 - (fidelity * 40.0).round()).abs() < 1e-9, "5 positions x 8 sequences: {fidelity}");
    // The threshold decides which heads count.
    assert_eq!(report["threshold"].as_f64(), Some(0.4));
    let all = json(&[&args[..], &["--threshold", "0"]].concat());
    assert_eq!(all["induction_heads"].as_array().unwrap().len(), 4);
    let none = json(&[&args[..], &["--threshold", "1.01"]].concat());
    assert_eq!(none["induction_heads"], serde_json::json!([]));
    // The same seed draws the same sequences; --sequences and --no-bos change what is run.
    let again = json(&args);
    assert_eq!(again["tokens"], report["tokens"]);
    let three = json(&[&args[..], &["--sequences", "3", "--no-bos"]].concat());
    assert_eq!(three["sequences"].as_array().unwrap().len(), 3);
    assert_eq!(three["tokens"].as_array().unwrap().len(), 12);
    assert_eq!(&three["tokens"].as_array().unwrap()[..6], &report["tokens"].as_array().unwrap()[1..7]);
    assert_eq!((three["prepend_bos"].as_bool(), three["bos"].is_null()), (Some(false), true));
    // Given tokens are one sequence, used as they are (after the BOS).
    let given = json(&["probe", path.to_str().unwrap(), "--induction", "--tokens", "4,5,6", "--json"]);
    assert_eq!(given["tokens"], serde_json::json!([1, 4, 5, 6, 4, 5, 6]));
    assert_eq!(given["sequences"].as_array().unwrap().len(), 1);
    assert_eq!(given["heads"][0]["spread"]["induction_score"]["std"].as_f64(), Some(0.0));
    // A character model has no BOS.
    let chars = json(&["probe", fixture("gptchar").to_str().unwrap(), "--induction", "--len", "6", "--json"]);
    assert_eq!(chars["tokens"].as_array().unwrap().len(), 12);
    assert!(chars["bos"].is_null());
}

/// Every command that runs the model takes `--backend` and names in its JSON what ran it; asked
/// for the CPU, that is the CPU with no note, and the table says so too.
#[test]
fn the_commands_that_run_the_model_name_their_backend() {
    let (chars, planted) = (fixture("gptchar"), fixture("gptchar-induction"));
    let (chars, planted) = (chars.to_str().unwrap(), planted.to_str().unwrap());
    let cpu = serde_json::json!({"name": "cpu"});
    let runs: [&[&str]; 4] = [
        &["probe", planted, "--induction", "--len", "6", "--sequences", "2"],
        &["probe", planted, "--suite", "bracket", "--head", "L1H1"],
        &["attention", chars, "--text", "abab"],
        &["compare", chars, "--len", "6", "--sequences", "2"],
    ];
    for args in runs {
        let (ok, stdout, stderr) = headprint(&[args, &["--json", "--backend", "cpu"]].concat());
        assert!(ok, "{args:?}: {stderr}");
        assert!(!stderr.contains("note:"), "{args:?}: {stderr}");
        let report: Value = serde_json::from_str(&stdout).expect("JSON");
        match args[0] {
            "compare" => {
                let model = &report["models"][0];
                assert_eq!((&model["backend"], &model["probe_backend"]), (&cpu, &cpu), "{args:?}");
            }
            _ => assert_eq!(report["backend"], cpu, "{args:?}"),
        }
        let (ok, table, _) = headprint(&[args, &["--backend", "cpu"]].concat());
        let line = if args[0] == "compare" { "fingerprint on CPU, probe on CPU" } else { "backend: CPU" };
        assert!(ok && table.contains(line), "{args:?}: {table}");
    }
    let (ok, _, stderr) = headprint(&["probe", planted, "--induction", "--backend", "tpu"]);
    assert!(!ok && stderr.contains("tpu"), "{stderr}");
}

/// Ranks from 1, ties sharing their mean rank, counted pairwise (not by sorting, so not the
/// same computation as the tool's).
fn mean_ranks(values: &[f64]) -> Vec<f64> {
    values
        .iter()
        .map(|&v| {
            let below = values.iter().filter(|&&w| w < v).count() as f64;
            let equal = values.iter().filter(|&&w| w == v).count() as f64;
            below + (equal + 1.0) / 2.0
        })
        .collect()
}

fn spearman_by_hand(x: &[f64], y: &[f64]) -> Option<f64> {
    let (rx, ry) = (mean_ranks(x), mean_ranks(y));
    let n = x.len() as f64;
    let (mx, my) = (rx.iter().sum::<f64>() / n, ry.iter().sum::<f64>() / n);
    let sxy: f64 = rx.iter().zip(&ry).map(|(a, b)| (a - mx) * (b - my)).sum();
    let sxx: f64 = rx.iter().map(|a| (a - mx).powi(2)).sum();
    let syy: f64 = ry.iter().map(|b| (b - my).powi(2)).sum();
    (sxx > 0.0 && syy > 0.0).then(|| sxy / (sxx * syy).sqrt())
}

#[test]
fn compare_makes_seed_000s_table() {
    let (chars, pythia) = (fixture("gptchar"), fixture("pythia"));
    let report = json(&["compare", chars.to_str().unwrap(), pythia.to_str().unwrap(), "--len", "6", "--json"]);
    assert_eq!((report["threshold"].as_f64(), report["mode"].as_str()), (Some(0.4), Some("folded")));
    let models = report["models"].as_array().unwrap();
    assert_eq!(models.len(), 2);
    for (path, entry) in [(&chars, &models[0]), (&pythia, &models[1])] {
        let what = path.display().to_string();
        let fingerprint = json(&["fingerprint", path.to_str().unwrap(), "--json"]);
        assert_eq!(entry["parameters"], fingerprint["model"]["parameters"], "{what}");
        let fingerprint_heads = fingerprint["heads"].as_array().unwrap();
        let mean_imaginary =
            fingerprint_heads.iter().map(|h| h["qk"]["imaginary_fraction"].as_f64().unwrap()).sum::<f64>()
                / fingerprint_heads.len() as f64;
        assert!((entry["mean_qk_imaginary_fraction"].as_f64().unwrap() - mean_imaginary).abs() < 1e-12, "{what}");
        // The behavioural columns are the probe's, on the same sequences.
        let probe = json(&["probe", path.to_str().unwrap(), "--induction", "--len", "6", "--json"]);
        assert_eq!(entry["prefix_copy_accuracy"], probe["prefix_copy_accuracy"], "{what}");
        assert_eq!(entry["prefix_copy_accuracy_spread"], probe["prefix_copy_accuracy_spread"], "{what}");
        assert_eq!(entry["head_scores"], probe["heads"], "{what}");
        assert_eq!(entry["sequences"].as_array().unwrap().len(), 8);
        let scores = entry["head_scores"].as_array().unwrap();
        let above = scores.iter().filter(|h| h["induction_score"].as_f64().unwrap() >= 0.4).count();
        assert_eq!(entry["induction_heads"].as_u64(), Some(above as u64), "{what}");
        // Every spectral feature against every behavioural score, ρ recomputed here.
        let spearman = entry["spearman"].as_array().unwrap();
        assert_eq!(spearman.len(), 15 * 4);
        for correlation in spearman {
            let (spectral, behavioural) =
                (correlation["spectral"].as_str().unwrap(), correlation["behavioural"].as_str().unwrap());
            // Every circuit of these fixtures reads: ρ is over all their heads.
            assert_eq!(correlation["n"].as_u64(), Some(fingerprint_heads.len() as u64), "{what} {spectral}");
            let (circuit, feature) = spectral.split_once('.').unwrap();
            let x: Vec<f64> =
                fingerprint_heads.iter().map(|h| h[circuit][feature].as_f64().unwrap_or(f64::INFINITY)).collect();
            let y = numbers(&Value::Array(scores.iter().map(|h| h[behavioural].clone()).collect()));
            let want = spearman_by_hand(&x, &y);
            match (correlation["rho"].as_f64(), want) {
                (Some(got), Some(want)) => {
                    assert!((got - want).abs() < 1e-12, "{what} {spectral} {behavioural}: {got} vs {want}")
                }
                (got, want) => assert_eq!(got, want, "{what} {spectral} {behavioural}: defined in one only"),
            }
        }
        assert!(spearman.iter().filter(|c| c["rho"].is_number()).count() >= 30, "{what}: ρ mostly defined");
    }
    // The table names the columns, one line per model.
    let (ok, stdout, _) = headprint(&["compare", chars.to_str().unwrap(), pythia.to_str().unwrap(), "--len", "6"]);
    assert!(ok && stdout.contains("prefix-copy accuracy") && stdout.contains("copy_fidelity"), "{stdout}");
}

#[test]
fn suite_verdicts_and_ov_logits() {
    let path = fixture("gptchar");
    let suite = std::env::temp_dir().join("headprint-cli-suite.json");
    std::fs::write(
        &suite,
        r#"{"name": "mini", "prompts": [{"id": "Q1", "text": "a \"b\" \"b"}, {"id": "B1", "text": "(a (b) c"}]}"#,
    )
    .unwrap();
    let report =
        json(&["probe", path.to_str().unwrap(), "--suite", suite.to_str().unwrap(), "--head", "L1H1", "--json"]);
    let rows = report["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0]["query_position"].as_u64(), Some(7));
    // A built-in suite on the planted model: its table against the Python reference.
    let planted = fixture("gptchar-induction");
    let report = json(&["probe", planted.to_str().unwrap(), "--suite", "bracket", "--head", "L1H1", "--json"]);
    assert_eq!((report["suite"].as_str(), report["head"].as_str()), (Some("bracket"), Some("L1H1")));
    assert_verdicts_match(&report["rows"], &expected("gptchar-induction")["verdicts"]["bracket"]["L1H1"], "CLI");
    let (ok, table, _) = headprint(&["probe", planted.to_str().unwrap(), "--suite", "bracket", "--head", "L1H1"]);
    assert!(ok && table.contains("position-0 sink (also open bracket still to close)"), "{table}");
    let logits =
        json(&["ov-logits", path.to_str().unwrap(), "--head", "L1H0", "--top", "3", "--pair", "(", ")", "--json"]);
    assert_eq!(logits["top_raw"].as_array().unwrap().len(), 3);
    assert_eq!(logits["pair"]["from"], "(");
    assert!(logits["pair"]["value"].is_number());
}

#[test]
fn suite_positions_count_from_the_bos() {
    // With a BOS (gpt2's <|endoftext|>) positions count from it: a given query moves by one.
    let gpt2 = fixture("gpt2");
    let suite = std::env::temp_dir().join("headprint-cli-bos-suite.json");
    std::fs::write(&suite, r#"{"name": "q", "prompts": [{"id": "A", "text": "the cat sat", "query": 1}]}"#).unwrap();
    let with_bos =
        json(&["probe", gpt2.to_str().unwrap(), "--suite", suite.to_str().unwrap(), "--head", "L1H0", "--json"]);
    let plain = json(&[
        "probe",
        gpt2.to_str().unwrap(),
        "--suite",
        suite.to_str().unwrap(),
        "--head",
        "L1H0",
        "--no-bos",
        "--json",
    ]);
    let (a, b) = (&with_bos["rows"][0], &plain["rows"][0]);
    assert_eq!((a["query_position"].as_u64(), b["query_position"].as_u64()), (Some(2), Some(1)));
    assert_eq!(a["query_token"], b["query_token"]);
    assert_eq!(a["tokens"][0], "<|endoftext|>");
    assert_eq!(a["tokens"].as_array().unwrap().len(), b["tokens"].as_array().unwrap().len() + 1);
}

#[test]
fn errors_are_one_line_and_nonzero() {
    let path = fixture("gptchar");
    let not_weights = fixture("gptchar/expected.json");
    let cases: [(&[&str], &str); 7] = [
        (&["fingerprint", "--bogus"], "unexpected argument '--bogus'"),
        (&["probe", path.to_str().unwrap(), "--sequences", "many"], "invalid value 'many'"),
        (&["frobnicate"], "unrecognized subcommand 'frobnicate'"),
        (&["ov-logits", path.to_str().unwrap(), "--head", "L9H0"], "unknown head `L9H0`"),
        (&["attention", path.to_str().unwrap(), "--tokens", "1,99"], "token id 99 is out of range"),
        (&["fingerprint", "/nonexistent/model.safetensors"], "/nonexistent/model.safetensors"),
        (&["fingerprint", not_weights.to_str().unwrap()], "no .safetensors file"),
    ];
    for (args, needle) in cases {
        let (ok, stdout, stderr) = headprint(args);
        assert!(!ok, "{args:?} should fail");
        assert!(stdout.is_empty());
        assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
        assert!(stderr.starts_with("headprint: ") && stderr.contains(needle), "{stderr}");
    }
}

#[test]
fn a_zeroed_head_is_an_error_in_its_row_and_the_rest_are_reported() {
    let path = std::env::temp_dir().join(format!("headprint-dead-head-{}.safetensors", std::process::id()));
    std::fs::write(&path, common::with_zeroed_tensor("gptchar", common::DEAD_VALUE)).unwrap();
    let dead = json(&["fingerprint", path.to_str().unwrap(), "--json"]);
    let normal = json(&["fingerprint", fixture("gptchar").join("model.safetensors").to_str().unwrap(), "--json"]);
    common::assert_only_the_dead_head_fails(&dead, &normal);
    let (ok, table, stderr) = headprint(&["fingerprint", path.to_str().unwrap()]);
    std::fs::remove_file(&path).ok();
    assert!(ok, "{stderr}");
    let row = table.lines().find(|l| l.starts_with("L0H1 ")).expect("L0H1's row");
    assert!(row.contains("error"), "{row}");
    assert!(!table.lines().find(|l| l.starts_with("L0H0 ")).unwrap().contains("error"));
    assert!(table.contains("error: head L0H1: OV circuit: the circuit is zero"), "{table}");
}

/// A reader that stops early (`headprint fingerprint … --json | head -c 16`) ends the command
/// quietly. The report is larger than a pipe's buffer, so the command is still writing when the
/// reader goes.
#[test]
fn a_reader_that_stops_early_ends_the_command_quietly() {
    use std::io::Read;
    use std::process::{Command, Stdio};
    let demo = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("public/models/nietzsche-char.safetensors");
    let mut child = Command::new(env!("CARGO_BIN_EXE_headprint"))
        .args(["fingerprint", demo.to_str().unwrap(), "--json", "--backend", "cpu"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("runs");
    let mut stdout = child.stdout.take().unwrap();
    let mut first = [0u8; 16];
    stdout.read_exact(&mut first).expect("the report begins");
    drop(stdout);
    let out = child.wait_with_output().expect("ends");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.is_empty(), "nothing on stderr, no panic: {stderr}");
}
