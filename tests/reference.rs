//! Every quantity against the independent Python references in tests/fixtures (built by
//! scripts/make_fixtures.py with transformers, TransformerLens 3.9.0 and numpy), to 1e-4 relative.

mod common;

use common::*;
use headprint::analysis::circuits::Grams;
use headprint::analysis::{Circuits, HeadId, Mode, OvTokenLogits, fingerprint_model};
use headprint::forward;
use headprint::model::LoadParts;
use headprint::probes::induction::{RepeatSource, induction_probe};
use headprint::tokens::Tokenizer;
use headprint::weights::ModelFiles;

/// Every head's four circuits against the reference's: eigenvalues as multisets, every metric.
fn check_heads(ours: &serde_json::Value, expected_heads: &[serde_json::Value], label: &str) {
    assert_eq!(ours.as_array().unwrap().len(), expected_heads.len(), "{label}: head count");
    for (got, want) in ours.as_array().unwrap().iter().zip(expected_heads) {
        let head = format!("{label} L{}H{}", want["layer"], want["head"]);
        assert_eq!((&got["layer"], &got["head"]), (&want["layer"], &want["head"]), "{head}: order");
        for circuit in ["qk", "qk_token", "ov", "ov_residual"] {
            let (g, w) = (&got[circuit], &want[circuit]);
            assert!(g["error"].is_null(), "{head} {circuit}: {}", g["error"]);
            let pairs = |v: &serde_json::Value| -> Vec<[f64; 2]> {
                v["eigenvalues"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|p| [p[0].as_f64().unwrap(), p[1].as_f64().unwrap()])
                    .collect()
            };
            assert_same_spectrum(&pairs(g), &pairs(w), &format!("{head} {circuit}"));
            for metric in ["copying_score", "imaginary_fraction", "departure_from_normality", "scale"] {
                assert_close(
                    g[metric].as_f64().unwrap(),
                    w[metric].as_f64().unwrap(),
                    1e-2,
                    &format!("{head} {circuit} {metric}"),
                );
            }
            // κ is sensitive to the eigenvectors' conditioning; tolerance scales with κ itself.
            let kappa = w["eigenvector_condition"].as_f64().unwrap();
            assert_close(
                g["eigenvector_condition"].as_f64().expect("finite κ"),
                kappa,
                1.0,
                &format!("{head} {circuit} κ"),
            );
            assert_eq!(g["defective"], false, "{head} {circuit}");
        }
    }
}

fn check_fingerprints(name: &str, mode: Mode, key: &str) {
    let model = load(name, LoadParts::Circuits);
    let reference = expected(name);
    let ours = serde_json::to_value(fingerprint_model(&model, mode).expect("fingerprint")).unwrap();
    check_heads(&ours["heads"], reference[key]["heads"].as_array().unwrap(), &format!("{name} {key}"));
}

#[test]
fn fingerprints_match_transformer_lens_folded() {
    for name in FAMILIES {
        check_fingerprints(name, Mode::Folded, "folded");
    }
}

#[test]
fn fingerprints_match_transformer_lens_raw() {
    for name in FAMILIES {
        check_fingerprints(name, Mode::Raw, "raw");
    }
}

#[test]
fn reduced_precision_files_match_float64_references_of_the_rounded_weights() {
    // The references were computed by numpy in float64 from the f16/bf16-rounded weights, so
    // every quantity of every circuit is held to the same tolerance as the f32 files.
    let reference = expected("gptchar");
    for (folder, dtype) in [("gptchar/f16", "f16"), ("gptchar/bf16", "bf16")] {
        let model =
            headprint::model::Model::load(&ModelFiles::from_path(&fixture(folder)).unwrap(), LoadParts::Circuits)
                .unwrap();
        for (mode, key) in [(Mode::Folded, format!("folded_{dtype}")), (Mode::Raw, format!("raw_{dtype}"))] {
            let ours = serde_json::to_value(fingerprint_model(&model, mode).unwrap()).unwrap();
            check_heads(&ours["heads"], reference[&key]["heads"].as_array().unwrap(), &format!("gptchar {key}"));
        }
        // The comparison can tell the rounded weights from the f32 ones: their references
        // differ by more than the tolerance.
        let differs = |key: &str| {
            let rounded = reference[key]["heads"].as_array().unwrap();
            rounded.iter().zip(reference["folded"]["heads"].as_array().unwrap()).any(|(r, f)| {
                let (a, b) = (r["ov"]["copying_score"].as_f64().unwrap(), f["ov"]["copying_score"].as_f64().unwrap());
                (a - b).abs() > 10.0 * TOLERANCE * b.abs().max(1e-2)
            })
        };
        assert!(differs(&format!("folded_{dtype}")), "{dtype}: rounding not visible at the tolerance");
    }
}

#[test]
fn parameter_counts_match_the_models_own() {
    // Hugging Face's num_parameters() (gpt.py: the PyTorch module's parameters): a tied
    // unembedding, which nanoGPT files store a second time as lm_head.weight, counts once.
    for name in FAMILIES {
        let model = load(name, LoadParts::Circuits);
        assert_eq!(model.parameter_count, expected(name)["parameters"].as_u64().unwrap(), "{name}");
    }
}

#[test]
fn forward_pass_matches_hugging_face() {
    for name in FAMILIES {
        let model = load(name, LoadParts::Everything);
        let reference = expected(name);
        let tokens: Vec<usize> =
            reference["forward"]["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as usize).collect();
        let output = forward::run(&model, &tokens).expect("forward");
        for (layer, heads) in reference["forward"]["patterns"].as_array().unwrap().iter().enumerate() {
            for (head, rows) in heads.as_array().unwrap().iter().enumerate() {
                for (q, row) in rows.as_array().unwrap().iter().enumerate() {
                    for (k, value) in floats(row).into_iter().enumerate() {
                        let got = output.patterns[layer][head][(q, k)] as f64;
                        assert_close(got, value, 1.0, &format!("{name} pattern L{layer}H{head} [{q},{k}]"));
                    }
                }
            }
        }
        for (t, row) in reference["forward"]["logits"].as_array().unwrap().iter().enumerate() {
            for (v, value) in floats(row).into_iter().enumerate() {
                assert_close(output.logits[(t, v)] as f64, value, 1.0, &format!("{name} logits [{t},{v}]"));
            }
        }
    }
}

#[test]
fn induction_scores_match_reference() {
    for name in FAMILIES {
        let model = load(name, LoadParts::Everything);
        let reference = expected(name);
        let first: Vec<usize> = reference["induction"]["first_copy"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t.as_u64().unwrap() as usize)
            .collect();
        let report = induction_probe(&model, &first, RepeatSource::Given).unwrap();
        assert_close(
            report.prefix_copy_accuracy,
            reference["induction"]["prefix_copy_accuracy"].as_f64().unwrap(),
            1.0,
            "prefix copy",
        );
        for (got, want) in report.heads.iter().zip(reference["induction"]["heads"].as_array().unwrap()) {
            for (metric, value) in [
                ("induction_score", got.induction_score),
                ("previous_token_score", got.previous_token_score),
                ("duplicate_token_score", got.duplicate_token_score),
            ] {
                assert_close(
                    value,
                    want[metric].as_f64().unwrap(),
                    1.0,
                    &format!("{name} L{}H{} {metric}", got.layer, got.head),
                );
            }
        }
    }
}

#[test]
fn ov_token_logits_match_full_matrix() {
    for name in FAMILIES {
        let model = load(name, LoadParts::Circuits);
        let grams = Grams::compute(&model);
        let entries = expected(name)["ov_token_logits"].as_array().unwrap().clone();
        assert_eq!(entries.len(), 6, "{name}: three heads in each mode");
        for reference in &entries {
            let mode = match reference["mode"].as_str().unwrap() {
                "folded" => Mode::Folded,
                _ => Mode::Raw,
            };
            let head = HeadId::parse(reference["head"].as_str().unwrap(), &model.config).unwrap();
            let what = format!("{name} {} {head}", mode.name());
            let logits = OvTokenLogits::new(&Circuits::new(&model, &grams, mode), head);
            let scale = floats(&reference["diagonal"]).iter().fold(0.0f64, |m, v| m.max(v.abs()));
            let diagonal = logits.diagonal();
            assert_eq!(diagonal.len(), model.config.vocab, "{what}");
            for (got, want) in diagonal.iter().zip(floats(&reference["diagonal"])) {
                assert_close(*got, want, scale, &format!("{what} diagonal"));
            }
            for (got, want) in logits.normalised_diagonal().iter().zip(floats(&reference["normalised_diagonal"])) {
                assert_close(*got, want, 1e-2, &format!("{what} normalised diagonal"));
            }
            for pair in reference["pairs"].as_array().unwrap() {
                let (i, j, value) =
                    (pair[0].as_u64().unwrap() as usize, pair[1].as_u64().unwrap() as usize, pair[2].as_f64().unwrap());
                assert_close(logits.entry(i, j).unwrap(), value, scale, &format!("{what} pair ({i},{j})"));
            }
            let token = reference["row"]["token"].as_u64().unwrap() as usize;
            for (got, want) in logits.row(token).unwrap().iter().zip(floats(&reference["row"]["values"])) {
                assert_close(*got, want, scale, &format!("{what} row"));
            }
        }
    }
}

#[test]
fn tokenizer_json_matches_hugging_face_tokenizers() {
    let model = load("gpt2", LoadParts::Circuits);
    let files = ModelFiles::from_path(&fixture("gpt2")).unwrap();
    let tokenizer = Tokenizer::for_model(&model, files.tokenizer_json.as_deref()).unwrap();
    let reference = &expected("gpt2")["tokenizer"];
    let ids: Vec<usize> = reference["ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as usize).collect();
    assert_eq!(tokenizer.encode(reference["text"].as_str().unwrap()).unwrap(), ids);
}

#[test]
fn character_vocabulary_comes_from_metadata() {
    let model = load("gptchar", LoadParts::Circuits);
    let vocab: Vec<String> = serde_json::from_value(expected("gptchar")["vocab"].clone()).unwrap();
    assert_eq!(model.vocab_strings.as_ref(), Some(&vocab));
    let tokenizer = Tokenizer::for_model(&model, None).unwrap();
    let text = expected("gptchar")["forward"]["text"].as_str().unwrap().to_string();
    let ids = tokenizer.encode(&text).unwrap();
    let tokens: Vec<usize> = expected("gptchar")["forward"]["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_u64().unwrap() as usize)
        .collect();
    assert_eq!(ids, tokens);
}

#[test]
fn a_zeroed_head_is_an_error_in_its_own_cells_only() {
    for mode in [Mode::Folded, Mode::Raw] {
        let normal = load("gptchar", LoadParts::Circuits);
        let mut dead = normal.clone();
        let d_head = dead.config.d_head;
        dead.layers[0].attention.w_v.columns_mut(d_head, d_head).fill(0.0);
        let report = fingerprint_model(&dead, mode).expect("the model still fingerprints");
        let normal = serde_json::to_value(fingerprint_model(&normal, mode).unwrap()).unwrap();
        assert_only_the_dead_head_fails(&serde_json::to_value(&report).unwrap(), &normal);
        let errors: Vec<String> = report.heads.iter().flat_map(|h| h.errors()).map(|e| e.to_string()).collect();
        assert_eq!(errors.len(), 2, "{errors:?}");
        assert!(errors[0].starts_with("head L0H1: OV circuit: "), "{errors:?}");
        assert!(errors[1].starts_with("head L0H1: OV (residual) circuit: "), "{errors:?}");
        // The same bytes zeroed in the file give the same report.
        let files = ModelFiles::from_named(vec![(
            "dead.safetensors".into(),
            Box::new(headprint::weights::MemorySource::new(
                "dead.safetensors",
                with_zeroed_tensor("gptchar", DEAD_VALUE),
            )),
        )])
        .unwrap();
        let from_file = headprint::model::Model::load(&files, LoadParts::Circuits).unwrap();
        let from_file = serde_json::to_value(fingerprint_model(&from_file, mode).unwrap()).unwrap();
        assert_only_the_dead_head_fails(&from_file, &normal);
    }
}
