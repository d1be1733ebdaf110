//! Browser tests (wasm-bindgen-test): the core's pipeline as the page runs it, in wasm, and
//! the page's chart builders. `CHROMEDRIVER=/usr/bin/chromedriver cargo test --target wasm32-unknown-unknown -p headprint --no-default-features --test wasm_pipeline`
#![cfg(target_arch = "wasm32")]

use headprint::analysis::circuits::{Grams, HeadWeights};
use headprint::analysis::fingerprint::fingerprint_layers;
use headprint::analysis::{HeadId, Mode, OvTokenLogits};
use headprint::backend::{Backend, block_on};
use headprint::figures::svg;
use headprint::model::{LoadParts, Model, ModelStream, Weights};
use headprint::probes::{Suite, verdict_table};
use headprint::tokens::Tokenizer;
use headprint::weights::{ByteSource, MemorySource, ModelFiles};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn fixture() -> (Model, Tokenizer) {
    let bytes = include_bytes!("../../../tests/fixtures/gptchar/model.safetensors").to_vec();
    let source: Box<dyn ByteSource> = Box::new(MemorySource::new("model.safetensors", bytes));
    let files = ModelFiles::from_named(vec![("model.safetensors".into(), source)]).unwrap();
    let model = Model::load(&files, LoadParts::Everything).unwrap();
    let tokenizer = Tokenizer::for_model(&model, None).unwrap();
    (model, tokenizer)
}

#[wasm_bindgen_test]
fn the_page_pipeline_runs_in_wasm() {
    let (model, tokenizer) = fixture();
    // As the worker does: the weights streamed from the file's bytes, Grams from row blocks,
    // fingerprints a layer at a time, a head's OV token view from its layer and W_E / W_U rows.
    let bytes = include_bytes!("../../../tests/fixtures/gptchar/model.safetensors").to_vec();
    let source: Box<dyn ByteSource> = Box::new(MemorySource::new("model.safetensors", bytes));
    let files = ModelFiles::from_named(vec![("model.safetensors".into(), source)]).unwrap();
    let stream = ModelStream::open(&files).unwrap();
    let mut rows_read = 0;
    let grams = Grams::stream_with_progress(&stream, &mut Backend::cpu(), &mut |done, _| rows_read = done).unwrap();
    assert_eq!(rows_read, stream.config.vocab);
    let heads = stream.config.layers * stream.config.heads;
    for mode in [Mode::Folded, Mode::Raw] {
        let mut streamed = 0;
        let fp = fingerprint_layers(&stream, &grams, mode, &mut |_, done, _| streamed = done).unwrap();
        assert_eq!((fp.heads.len(), streamed), (heads, heads));
        assert!(fp.heads.iter().all(|h| h.errors().is_empty() && !h.qk_token.eigenvalues.is_empty()));
    }
    let layer = stream.layer(0, LoadParts::Circuits).unwrap();
    let weights = HeadWeights::new(&stream.config, &layer, &stream.ln_final, 0, Mode::Folded);
    let logits = OvTokenLogits::read(&stream, &weights, Mode::Folded).unwrap();
    assert_eq!(logits.diagonal().len(), model.config.vocab);
    // The tiny fixture lacks characters of the suite: a message, not a panic.
    let bracket = Suite::builtin("bracket").unwrap();
    let error = block_on(verdict_table(&model, &tokenizer, &bracket, HeadId::new(1, 0), None, &mut Backend::cpu()))
        .unwrap_err();
    assert!(error.to_string().contains("is not in the model's vocabulary"), "{error}");
    // The planted model covers the suites: its table in wasm matches the Python reference.
    let bytes = include_bytes!("../../../tests/fixtures/gptchar-induction/model.safetensors").to_vec();
    let source: Box<dyn ByteSource> = Box::new(MemorySource::new("model.safetensors", bytes));
    let planted = Model::load(
        &ModelFiles::from_named(vec![("model.safetensors".into(), source)]).unwrap(),
        LoadParts::Everything,
    )
    .unwrap();
    let tokenizer = Tokenizer::for_model(&planted, None).unwrap();
    // The CPU's future is ready at once: in the browser too it runs without awaiting.
    let rows =
        block_on(verdict_table(&planted, &tokenizer, &bracket, HeadId::new(0, 1), None, &mut Backend::cpu())).unwrap();
    let reference: serde_json::Value =
        serde_json::from_str(include_str!("../../../tests/fixtures/gptchar-induction/expected.json")).unwrap();
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

/// A file past 4 GiB, as each of Llama-3-8B's shards is: only the header and the bytes asked
/// for exist, and every read is recorded.
struct Sparse {
    header: Vec<u8>,
    len: u64,
    reads: std::cell::RefCell<Vec<(u64, usize)>>,
}

impl ByteSource for Sparse {
    fn name(&self) -> &str {
        "model-00001-of-00004.safetensors"
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn read_range(&self, offset: u64, len: usize) -> headprint::Result<Vec<u8>> {
        self.reads.borrow_mut().push((offset, len));
        Ok(match offset {
            0 => self.header[..len].to_vec(),
            8 => self.header[8..8 + len].to_vec(),
            _ => 1.5f32.to_le_bytes().repeat(len / 4),
        })
    }
}

#[wasm_bindgen_test]
fn a_file_over_4_gib_opens_and_reads_at_its_true_offsets() {
    // wasm32's usize is 32 bits: byte offsets past 4 GiB must stay u64 all the way to the read.
    let (big, late) = (5u64 << 30, 8u64);
    let table = format!(
        r#"{{"big":{{"dtype":"F32","shape":[{}],"data_offsets":[0,{big}]}},"late":{{"dtype":"F32","shape":[2],"data_offsets":[{big},{}]}}}}"#,
        big / 4,
        big + late
    );
    let mut header = (table.len() as u64).to_le_bytes().to_vec();
    header.extend_from_slice(table.as_bytes());
    let len = header.len() as u64 + big + late;
    let source = Sparse { header, len, reads: Default::default() };
    let file = headprint::weights::SafetensorsFile::open(&source).expect("a 5 GiB file opens in wasm");
    let entry = &file.entries()["late"];
    let data_start = 8 + table.len() as u64;
    assert_eq!((entry.start, entry.end), (data_start + big, data_start + big + late));
    let tensor = file.read("late").unwrap().unwrap();
    assert_eq!(tensor.data, vec![1.5, 1.5]);
    assert_eq!(source.reads.borrow().last(), Some(&(data_start + big, 8)));
}
