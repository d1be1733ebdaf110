//! Helpers shared by the integration tests: fixture paths and tolerant comparisons.
#![allow(dead_code)]

use std::path::PathBuf;

use headprint::model::{LoadParts, Model};
use headprint::weights::ModelFiles;

pub const FAMILIES: [&str; 7] = ["gptchar", "gpt2", "gpt2-nanogpt", "pythia", "llama", "pythia-hub", "llama32"];

/// Relative tolerance of every comparison against the Python references.
pub const TOLERANCE: f64 = 1e-4;

/// Runs the CLI: (success, stdout, stderr).
pub fn headprint(args: &[&str]) -> (bool, String, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_headprint")).args(args).output().expect("runs");
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

/// Runs the CLI, which must succeed, and parses its stdout as JSON.
pub fn json(args: &[&str]) -> serde_json::Value {
    let (ok, stdout, stderr) = headprint(args);
    assert!(ok, "{args:?} failed: {stderr}");
    serde_json::from_str(&stdout).expect("JSON on stdout")
}

pub fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
}

pub fn expected(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixture(name).join("expected.json")).expect("expected.json");
    serde_json::from_str(&text).expect("valid JSON")
}

pub fn load(name: &str, parts: LoadParts) -> Model {
    Model::load(&ModelFiles::from_path(&fixture(name)).expect("files"), parts).expect("model loads")
}

/// |actual - expected| <= TOLERANCE * max(|expected|, floor).
pub fn assert_close(actual: f64, expected: f64, floor: f64, what: &str) {
    let allowed = TOLERANCE * expected.abs().max(floor);
    assert!((actual - expected).abs() <= allowed, "{what}: got {actual}, expected {expected} (allowed ±{allowed:e})");
}

/// Eigenvalues as multisets: every expected value has its own actual value within tolerance
/// of the spectrum's largest magnitude.
pub fn assert_same_spectrum(actual: &[[f64; 2]], expected: &[[f64; 2]], what: &str) {
    assert_eq!(actual.len(), expected.len(), "{what}: eigenvalue count");
    let largest = expected.iter().map(|e| e[0].hypot(e[1])).fold(0.0, f64::max);
    let mut unused: Vec<[f64; 2]> = actual.to_vec();
    for e in expected {
        let (index, distance) = unused
            .iter()
            .enumerate()
            .map(|(i, a)| (i, (a[0] - e[0]).hypot(a[1] - e[1])))
            .min_by(|a, b| a.1.total_cmp(&b.1))
            .expect("an unused eigenvalue");
        assert!(
            distance <= TOLERANCE * largest,
            "{what}: expected eigenvalue {e:?} has no match (nearest off by {distance:e}); got {actual:?}"
        );
        unused.remove(index);
    }
}

pub fn floats(value: &serde_json::Value) -> Vec<f64> {
    value.as_array().expect("array").iter().map(|v| v.as_f64().expect("number")).collect()
}

/// A fixture's `model.safetensors` with one tensor's bytes set to zero (the header is read
/// here, independently of the engine): a model with one dead head.
pub fn with_zeroed_tensor(name: &str, tensor: &str) -> Vec<u8> {
    let mut bytes = std::fs::read(fixture(name).join("model.safetensors")).expect("fixture file");
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).expect("header");
    let offsets = &header[tensor]["data_offsets"];
    let (start, end) = (offsets[0].as_u64().expect("tensor") as usize, offsets[1].as_u64().unwrap() as usize);
    bytes[8 + header_len + start..8 + header_len + end].fill(0);
    bytes
}

/// The tensor zeroed by the resilience tests: W_V of gptchar's L0H1.
pub const DEAD_VALUE: &str = "blocks.0.sa.heads.1.value.weight";

/// Checks a fingerprint report (as JSON) of gptchar with `DEAD_VALUE` zeroed: L0H1's two OV
/// circuits are errors (null numbers, no eigenvalues), everything else equals `normal`.
pub fn assert_only_the_dead_head_fails(report: &serde_json::Value, normal: &serde_json::Value) {
    let heads = report["heads"].as_array().expect("heads");
    assert_eq!(heads.len(), normal["heads"].as_array().unwrap().len());
    for (got, want) in heads.iter().zip(normal["heads"].as_array().unwrap()) {
        let dead = got["layer"] == 0 && got["head"] == 1;
        for circuit in ["qk", "qk_token", "ov", "ov_residual"] {
            let f = &got[circuit];
            if dead && circuit.starts_with("ov") {
                let error = f["error"].as_str().unwrap_or_else(|| panic!("L0H1 {circuit} has an error: {f}"));
                assert!(error.contains("zero"), "L0H1 {circuit}: {error}");
                assert_eq!(f["eigenvalues"], serde_json::json!([]), "L0H1 {circuit}");
                for key in ["copying_score", "imaginary_fraction", "eigenvector_condition", "defective", "scale"] {
                    assert!(f[key].is_null(), "L0H1 {circuit} {key}: {}", f[key]);
                }
            } else {
                assert_eq!(f, &want[circuit], "L{}H{} {circuit} is unaffected", got["layer"], got["head"]);
            }
        }
    }
}

/// Verdict rows (the JSON of `Vec<VerdictRow>`) against the Python reference rows of
/// tests/fixtures/gptchar-induction/expected.json: top and runner-up keys, their labels, weights
/// and the query's whole attention row.
pub fn assert_verdicts_match(rows: &serde_json::Value, reference: &serde_json::Value, what: &str) {
    let (rows, reference) = (rows.as_array().expect("rows"), reference.as_array().expect("reference rows"));
    assert_eq!(rows.len(), reference.len(), "{what}: rows");
    for (got, want) in rows.iter().zip(reference) {
        let id = want["id"].as_str().unwrap();
        assert_eq!(got["id"], want["id"], "{what}");
        assert_eq!(got["query_position"], want["query_position"], "{what} {id}: query");
        for (g, w) in floats(&got["attention"]).iter().zip(floats(&want["attention"])) {
            assert_close(*g, w, 1.0, &format!("{what} {id}: attention"));
        }
        for key in ["top", "runner_up"] {
            let (g, w) = (&got[key], &want[key]);
            assert_eq!(g["position"], w["position"], "{what} {id}: {key} position");
            assert_eq!(g["token"], w["token"], "{what} {id}: {key} token");
            assert_eq!(g["verdict"], w["verdict"], "{what} {id}: {key} verdict");
            // Absent in our JSON when no second label applies; null in the reference.
            let also = |v: &serde_json::Value| v.get("also").cloned().unwrap_or(serde_json::Value::Null);
            assert_eq!(also(g), also(w), "{what} {id}: {key} second label");
            assert_close(g["weight"].as_f64().unwrap(), w["weight"].as_f64().unwrap(), 1.0, &format!("{what} {id}"));
        }
        assert_eq!(got["verdict"], want["top"]["verdict"], "{what} {id}: the row's verdict is the top key's");
    }
}

/// A fixture's `model.safetensors` with one `__metadata__` entry set to `value` (the header is
/// rewritten here, independently of the engine; data offsets are relative, so they stay valid).
pub fn with_metadata(name: &str, key: &str, value: &str) -> Vec<u8> {
    let bytes = std::fs::read(fixture(name).join("model.safetensors")).expect("fixture file");
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let mut header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).expect("header");
    header["__metadata__"][key] = serde_json::Value::String(value.into());
    let header = serde_json::to_vec(&header).unwrap();
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(&header);
    out.extend_from_slice(&bytes[8 + header_len..]);
    out
}
