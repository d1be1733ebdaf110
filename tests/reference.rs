//! Every quantity against the independent Python references in tests/fixtures (built by
//! scripts/make_fixtures.py with transformers, TransformerLens 3.9.0 and numpy), to 1e-4 relative.

use crate::common;

use common::*;
use headprint::analysis::circuits::Grams;
use headprint::analysis::{Circuits, HeadId, Mode, OvTokenLogits, fingerprint_model};
use headprint::backend::{Backend, block_on};
use headprint::forward;
use headprint::model::LoadParts;
use headprint::probes::induction::{FirstCopy, RepeatSource, induction_probe, random_first_copies};
use headprint::tokens::{Tokenizer, choose_bos};
use headprint::weights::ModelFiles;

/// Every head's four circuits against the reference's: eigenvalues as multisets, every metric.
pub(crate) fn check_heads(ours: &serde_json::Value, expected_heads: &[serde_json::Value], label: &str) {
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
        check_forward(name, &output, &reference);
    }
}

/// A forward pass's patterns and logits against the reference's `forward` block.
pub(crate) fn check_forward(name: &str, output: &forward::ForwardOutput, reference: &serde_json::Value) {
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

fn ids(value: &serde_json::Value) -> Vec<usize> {
    value.as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as usize).collect()
}

fn tokenizer_of(name: &str, model: &headprint::model::Model) -> Tokenizer {
    let files = ModelFiles::from_path(&fixture(name)).unwrap();
    Tokenizer::for_model(model, files.tokenizer_json.as_deref()).unwrap()
}

/// The probe on the reference's given first copies, after the reference's BOS: every
/// sequence's scores, the means and the spreads against numpy; copy fidelity and each
/// position's rank exactly against TransformerLens (the reference records that no candidate
/// comes within 0.6% of the true token, far above f32 rounding).
#[test]
fn induction_scores_match_reference() {
    for name in FAMILIES {
        let model = load(name, LoadParts::Everything);
        let reference = &expected(name)["induction"];
        let bos = reference["bos"].as_u64().map(|b| b as usize);
        let copies: Vec<FirstCopy> = reference["sequences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| FirstCopy { tokens: ids(&s["first_copy"]), source: RepeatSource::Given })
            .collect();
        assert!(copies.len() >= 2, "{name}: several sequences");
        let report = block_on(induction_probe(&model, &copies, bos, &mut Backend::cpu())).unwrap();
        assert_eq!(report.sequences.len(), copies.len());
        for (got, want) in report.sequences.iter().zip(reference["sequences"].as_array().unwrap()) {
            assert_eq!(got.tokens, ids(&want["tokens"]), "{name}: BOS + copy + copy");
            assert_eq!(got.prefix_copy_accuracy, want["prefix_copy_accuracy"].as_f64().unwrap(), "{name} prefix copy");
            for ((scores, ranks), want) in got.heads.iter().zip(&got.copy_ranks).zip(want["heads"].as_array().unwrap())
            {
                let head = format!("{name} L{}H{}", scores.layer, scores.head);
                assert_eq!(ranks, &ids(&want["copy_ranks"]), "{head} copy ranks");
                assert_eq!(scores.copy_fidelity, want["copy_fidelity"].as_f64().unwrap(), "{head} copy fidelity");
                for (metric, value) in [
                    ("induction_score", scores.induction_score),
                    ("previous_token_score", scores.previous_token_score),
                    ("duplicate_token_score", scores.duplicate_token_score),
                ] {
                    assert_close(value, want[metric].as_f64().unwrap(), 1.0, &format!("{head} {metric}"));
                }
            }
        }
        assert_close(
            report.prefix_copy_accuracy,
            reference["prefix_copy_accuracy"].as_f64().unwrap(),
            1.0,
            "mean prefix copy",
        );
        let accuracy_spread = &reference["prefix_copy_accuracy_spread"];
        for (got, key) in [
            (report.prefix_copy_accuracy_spread.std, "std"),
            (report.prefix_copy_accuracy_spread.min, "min"),
            (report.prefix_copy_accuracy_spread.max, "max"),
        ] {
            assert_close(got, accuracy_spread[key].as_f64().unwrap(), 1.0, &format!("{name} prefix copy {key}"));
        }
        let (means, spreads) = (reference["heads"].as_array().unwrap(), reference["heads_spread"].as_array().unwrap());
        assert_eq!(report.heads.len(), means.len());
        for ((got, want), want_spread) in report.heads.iter().zip(means).zip(spreads) {
            let spread = got.spread.expect("means carry their spread");
            for (metric, value, metric_spread) in [
                ("induction_score", got.induction_score, spread.induction_score),
                ("previous_token_score", got.previous_token_score, spread.previous_token_score),
                ("duplicate_token_score", got.duplicate_token_score, spread.duplicate_token_score),
                ("copy_fidelity", got.copy_fidelity, spread.copy_fidelity),
            ] {
                let what = format!("{name} L{}H{} {metric}", got.layer, got.head);
                assert_close(value, want[metric].as_f64().unwrap(), 1.0, &format!("{what} mean"));
                for (v, key) in [(metric_spread.std, "std"), (metric_spread.min, "min"), (metric_spread.max, "max")] {
                    assert_close(v, want_spread[metric][key].as_f64().unwrap(), 1.0, &format!("{what} {key}"));
                }
            }
        }
    }
}

/// The BOS each fixture's config / tokenizer names, and the ids random probe tokens come from:
/// Pythia's tokenizer knows 44 tokens for 50 embedding rows, so rows 44-49 must never be drawn,
/// nor the special tokens of any tokenizer or config.json.
#[test]
fn bos_and_ordinary_vocabulary_match_reference() {
    for name in FAMILIES {
        let model = load(name, LoadParts::Circuits);
        let reference = expected(name);
        let tokenizer = tokenizer_of(name, &model);
        let bos = choose_bos(&model, &tokenizer);
        assert_eq!(serde_json::to_value(&bos).unwrap(), reference["bos"], "{name} BOS");
        let ordinary = tokenizer.ordinary_ids(&model);
        assert_eq!(ordinary, ids(&reference["ordinary_ids"]), "{name} ordinary ids");
        if let Some(bos) = bos {
            assert!(!ordinary.contains(&bos.id), "{name}: the BOS is never a random probe token");
        }
    }
    let model = load("pythia", LoadParts::Circuits);
    let tokenizer = tokenizer_of("pythia", &model);
    let Tokenizer::Hugging(hugging) = &tokenizer else { panic!("pythia has a tokenizer.json") };
    let known = hugging.get_vocab_size(true);
    assert!(known < model.config.vocab, "the fixture pads its embedding: {known} < {}", model.config.vocab);
    let drawn = random_first_copies(&tokenizer.ordinary_ids(&model), 200, 0, 8).unwrap();
    for copy in &drawn {
        assert!(copy.tokens.iter().all(|&t| t < known), "a padding row was drawn: {:?}", copy.tokens);
        assert!(!copy.tokens.iter().any(|t| tokenizer.special_ids().contains(t)), "a special token was drawn");
    }
}

#[test]
fn out_of_range_bos_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("headprint-bad-bos-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(fixture("gpt2/model.safetensors"), dir.join("model.safetensors")).unwrap();
    let config = std::fs::read_to_string(fixture("gpt2/config.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&config).unwrap();
    config["bos_token_id"] = 50256.into();
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let error = headprint::model::Model::load(&ModelFiles::from_path(&dir).unwrap(), LoadParts::Circuits)
        .expect_err("a BOS outside the vocabulary is refused")
        .to_string();
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(error.contains("bos_token_id 50256") && error.contains("40 tokens"), "{error}");
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
            let logits = OvTokenLogits::new(&Circuits::new(&model, &grams, mode), head).unwrap();
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

/// Per-head outputs on request: none by default; whole (`z W_O` per head, position x d_model)
/// or projected, and the two agree; the final norm's scale is what the final norm divides by.
#[test]
fn forward_keeps_head_outputs_on_request() {
    use headprint::forward::{HeadOutputs, run_with};
    for name in ["gptchar", "llama"] {
        let model = load(name, LoadParts::Everything);
        let tokens = ids(&expected(name)["forward"]["tokens"]);
        let plain = forward::run(&model, &tokens).unwrap();
        assert!(plain.head_outputs.is_empty());
        let full = run_with(&model, &tokens, HeadOutputs::Full.into()).unwrap();
        assert_eq!(full.head_outputs.len(), model.config.layers);
        assert_eq!(full.logits, plain.logits, "keeping outputs changes nothing else");
        let directions = nalgebra::DMatrix::from_fn(model.config.d_model, 3, |i, j| ((i * 7 + j * 3) % 5) as f32 - 2.0);
        let projected = run_with(&model, &tokens, HeadOutputs::Projected(&directions).into()).unwrap();
        for (whole, part) in full.head_outputs.iter().flatten().zip(projected.head_outputs.iter().flatten()) {
            assert_eq!(whole.shape(), (tokens.len(), model.config.d_model));
            let expected_part = whole * &directions;
            let scale = expected_part.amax().max(1.0);
            assert!((part - expected_part).amax() <= 1e-5 * scale, "{name}: projection of the whole output");
        }
    }
    // The final norm's scale against TransformerLens's `ln_final.hook_scale` (LayerNorm and RMSNorm).
    for name in FAMILIES {
        let model = load(name, LoadParts::Everything);
        let sequence = &expected(name)["induction"]["sequences"][0];
        let output = run_with(&model, &ids(&sequence["tokens"]), HeadOutputs::None.into()).unwrap();
        for (t, (got, want)) in output.final_scale.iter().zip(floats(&sequence["final_scale"])).enumerate() {
            assert_close(*got as f64, want, 1.0, &format!("{name} final scale at {t}"));
        }
    }
}

/// Without `bos_token_id` in config.json the tokenizer's special `<|endoftext|>` is the BOS;
/// with neither, there is none.
#[test]
fn bos_falls_back_to_the_tokenizer() {
    let dir = std::env::temp_dir().join(format!("headprint-bos-fallback-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["model.safetensors", "tokenizer.json"] {
        std::fs::copy(fixture("gpt2").join(file), dir.join(file)).unwrap();
    }
    let config = std::fs::read_to_string(fixture("gpt2/config.json")).unwrap();
    let mut config: serde_json::Value = serde_json::from_str(&config).unwrap();
    config.as_object_mut().unwrap().remove("bos_token_id");
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    let files = ModelFiles::from_path(&dir).unwrap();
    let model = headprint::model::Model::load(&files, LoadParts::Circuits).unwrap();
    let with_tokenizer = Tokenizer::for_model(&model, files.tokenizer_json.as_deref()).unwrap();
    let bos = choose_bos(&model, &with_tokenizer).expect("the tokenizer names one");
    assert_eq!((bos.id, bos.token.as_str(), bos.source.as_str()), (1, "<|endoftext|>", "tokenizer special token"));
    let ids_only = Tokenizer::for_model(&model, None).unwrap();
    assert_eq!(choose_bos(&model, &ids_only), None);
    std::fs::remove_dir_all(&dir).unwrap();
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
