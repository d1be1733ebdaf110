//! The CLI contract (issue 2): JSON shapes that scripts rely on, and one-line errors.

mod common;

use std::process::Command;

use common::{assert_verdicts_match, expected, fixture};
use serde_json::Value;

fn headprint(args: &[&str]) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_headprint")).args(args).output().expect("runs");
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

fn json(args: &[&str]) -> Value {
    let (ok, stdout, stderr) = headprint(args);
    assert!(ok, "{args:?} failed: {stderr}");
    serde_json::from_str(&stdout).expect("JSON on stdout")
}

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
    for circuit in ["qk", "ov", "ov_residual"] {
        let f = &heads[5][circuit];
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
    let report = json(&["attention", path.to_str().unwrap(), "--tokens", "3,1,4,1,5", "--json"]);
    assert_eq!(report["tokens"], serde_json::json!([3, 1, 4, 1, 5]));
    let patterns = report["patterns"].as_array().unwrap();
    assert_eq!(patterns.len(), 2);
    let p = &patterns[1][3];
    assert_eq!(p.as_array().unwrap().len(), 5);
    let row: Vec<f64> = p[4].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-5);
    assert_eq!(p[0][1].as_f64(), Some(0.0), "causal");
}

#[test]
fn induction_probe_contract() {
    let path = fixture("gptchar");
    let report = json(&["probe", path.to_str().unwrap(), "--induction", "--len", "6", "--seed", "7", "--json"]);
    assert_eq!(report["tokens"].as_array().unwrap().len(), 12);
    assert_eq!(report["tokens"][0], report["tokens"][6]);
    let acc = report["prefix_copy_accuracy"].as_f64().unwrap();
    assert!(
        (0.0..=1.0).contains(&acc) && (acc * 5.0 - (acc * 5.0).round()).abs() < 1e-9,
        "counts of 5 positions: {acc}"
    );
    let head = &report["heads"][3];
    for key in ["layer", "head", "induction_score", "previous_token_score", "duplicate_token_score"] {
        assert!(head[key].is_number(), "{key}");
    }
    // The same seed draws the same sequence; given tokens are used as they are.
    let again = json(&["probe", path.to_str().unwrap(), "--induction", "--len", "6", "--seed", "7", "--json"]);
    assert_eq!(again["tokens"], report["tokens"]);
    let given = json(&["probe", path.to_str().unwrap(), "--induction", "--tokens", "4,5,6", "--json"]);
    assert_eq!(given["tokens"], serde_json::json!([4, 5, 6, 4, 5, 6]));
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
fn errors_are_one_line_and_nonzero() {
    let path = fixture("gptchar");
    let not_weights = fixture("gptchar/expected.json");
    let cases: [(&[&str], &str); 4] = [
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
