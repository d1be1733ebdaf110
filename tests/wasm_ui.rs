//! Browser tests (wasm-bindgen-test): the core's pipeline as the page runs it, in wasm, and
//! the page's chart builders. `CHROMEDRIVER=/usr/bin/chromedriver cargo test --target wasm32-unknown-unknown --no-default-features --test wasm_ui`
#![cfg(target_arch = "wasm32")]

use headprint::analysis::circuits::Grams;
use headprint::analysis::fingerprint::fingerprint_model_with_progress;
use headprint::analysis::{Circuits, HeadId, Mode, OvTokenLogits};
use headprint::model::{LoadParts, Model};
use headprint::probes::{Suite, verdict_table};
use headprint::tokens::Tokenizer;
use headprint::ui::svg;
use headprint::weights::{ByteSource, MemorySource, ModelFiles};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn fixture() -> (Model, Tokenizer) {
    let bytes = include_bytes!("fixtures/gptchar/model.safetensors").to_vec();
    let source: Box<dyn ByteSource> = Box::new(MemorySource::new("model.safetensors", bytes));
    let files = ModelFiles::from_named(vec![("model.safetensors".into(), source)]).unwrap();
    let model = Model::load(&files, LoadParts::Everything).unwrap();
    let tokenizer = Tokenizer::for_model(&model, None).unwrap();
    (model, tokenizer)
}

#[wasm_bindgen_test]
fn the_page_pipeline_runs_in_wasm() {
    let (model, tokenizer) = fixture();
    let grams = Grams::compute(&model);
    let heads = model.config.layers * model.config.heads;
    for mode in [Mode::Folded, Mode::Raw] {
        let fp = fingerprint_model_with_progress(&model, &grams, mode, &mut |_, _, _| {}).unwrap();
        assert_eq!(fp.heads.len(), heads);
        assert!(fp.heads.iter().all(|h| h.errors().is_empty() && !h.qk_token.eigenvalues.is_empty()));
    }
    let logits = OvTokenLogits::new(&Circuits::new(&model, &grams, Mode::Folded), HeadId::new(0, 0)).unwrap();
    assert_eq!(logits.diagonal().len(), model.config.vocab);
    // The tiny fixture lacks characters of the suite: a message, not a panic.
    let error =
        verdict_table(&model, &tokenizer, &Suite::builtin("bracket").unwrap(), HeadId::new(1, 0), None).unwrap_err();
    assert!(error.to_string().contains("is not in the model's vocabulary"), "{error}");
    // The planted model covers the suites: its table in wasm matches the Python reference.
    let bytes = include_bytes!("fixtures/gptchar-induction/model.safetensors").to_vec();
    let source: Box<dyn ByteSource> = Box::new(MemorySource::new("model.safetensors", bytes));
    let planted = Model::load(
        &ModelFiles::from_named(vec![("model.safetensors".into(), source)]).unwrap(),
        LoadParts::Everything,
    )
    .unwrap();
    let tokenizer = Tokenizer::for_model(&planted, None).unwrap();
    let rows =
        verdict_table(&planted, &tokenizer, &Suite::builtin("bracket").unwrap(), HeadId::new(0, 1), None).unwrap();
    let reference: serde_json::Value =
        serde_json::from_str(include_str!("fixtures/gptchar-induction/expected.json")).unwrap();
    let want = reference["verdicts"]["bracket"]["L0H1"].as_array().unwrap();
    assert_eq!(rows.len(), want.len());
    for (row, want) in rows.iter().zip(want) {
        assert_eq!(row.top.position as u64, want["top"]["position"].as_u64().unwrap(), "{}", row.id);
        assert_eq!(row.top.verdict.label(), want["top"]["verdict"].as_str().unwrap(), "{}", row.id);
        assert_eq!(row.top.also.map(|v| v.label()), want["top"]["also"].as_str(), "{}", row.id);
    }
}

#[wasm_bindgen_test]
fn a_broken_file_is_an_error_message() {
    let source: Box<dyn ByteSource> = Box::new(MemorySource::new("broken.safetensors", vec![0xff; 11]));
    let files = ModelFiles::from_named(vec![("broken.safetensors".into(), source)]).unwrap();
    let error = Model::load(&files, LoadParts::Everything).unwrap_err().to_string();
    assert!(error.contains("broken.safetensors"), "{error}");
}

#[wasm_bindgen_test]
fn charts_escape_tokens_and_mark_induction_cells() {
    let tokens: Vec<String> = ["<", "&", "<", "&"].iter().map(|s| s.to_string()).collect();
    let ids = [0, 1, 0, 1];
    let marks = headprint::probes::induction::induction_cells(&ids);
    assert_eq!(marks, vec![(2, 1), (3, 2)]);
    let rows: Vec<Vec<f64>> =
        (0..4).map(|q| (0..4).map(|k| if k <= q { 1.0 / (q + 1) as f64 } else { 0.0 }).collect()).collect();
    let out = svg::heatmap(&rows, &tokens, &marks, None, 400.0, "t");
    assert!(out.contains("&lt;") && out.contains("&amp;") && !out.contains("><<"));
    assert_eq!(out.matches("induction-cell").count(), 2);
}
