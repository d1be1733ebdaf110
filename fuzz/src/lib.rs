//! What the fuzz targets share: loading a model from bytes as the page does, and exercising a
//! loaded model cheaply enough for many executions a second.

use headprint::model::{LoadParts, Model};
use headprint::weights::{ByteSource, MemorySource, ModelFiles};

/// The test fixtures the targets build on (small: tens of kilobytes).
pub const GPTCHAR: &[u8] = include_bytes!("../../tests/fixtures/gptchar/model.safetensors");
pub const GPT2: &[u8] = include_bytes!("../../tests/fixtures/gpt2/model.safetensors");
pub const GPT2_CONFIG: &str = include_str!("../../tests/fixtures/gpt2/config.json");
pub const PYTHIA: &[u8] = include_bytes!("../../tests/fixtures/pythia-hub/model.safetensors");
pub const PYTHIA_CONFIG: &str = include_str!("../../tests/fixtures/pythia-hub/config.json");
pub const LLAMA: &[u8] = include_bytes!("../../tests/fixtures/llama32/model.safetensors");
pub const LLAMA_CONFIG: &str = include_str!("../../tests/fixtures/llama32/config.json");

/// A model from one weights file and an optional config.json, through `ModelFiles` as the page
/// and the CLI assemble it.
pub fn load(weights: &[u8], config: Option<&[u8]>, parts: LoadParts) -> headprint::Result<Model> {
    let mut named: Vec<(String, Box<dyn ByteSource>)> =
        vec![("model.safetensors".into(), Box::new(MemorySource::new("model.safetensors", weights.to_vec())))];
    if let Some(config) = config {
        named.push(("config.json".into(), Box::new(MemorySource::new("config.json", config.to_vec()))));
    }
    Model::load(&ModelFiles::from_named(named)?, parts)
}

/// Runs what a loaded model is used for, where the model is small enough to stay fast.
pub fn exercise(model: &Model) {
    let c = &model.config;
    if c.d_model > 64 || c.layers > 4 || c.vocab > 512 || c.d_mlp > 512 {
        return;
    }
    let ids: Vec<usize> = (0..c.context.unwrap_or(8).min(8)).map(|i| i % c.vocab).collect();
    let _ = headprint::forward::run(model, &ids);
    let _ = headprint::analysis::fingerprint_model(model, headprint::analysis::Mode::Folded);
}
