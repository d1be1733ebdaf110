//! What the fuzz targets share: a model from bytes, both held (`Model::load`) and streamed as the
//! page's worker and the CLI read it (`ModelStream`), exercised cheaply enough for many
//! executions a second.

use std::sync::OnceLock;

use headprint::analysis::{Mode, fingerprint_stream};
use headprint::model::{LoadParts, Model, ModelConfig, ModelStream};
use headprint::weights::{ByteSource, MemorySource, ModelFiles};

/// The test fixtures the targets build on (small: tens of kilobytes).
pub const GPTCHAR: &[u8] = include_bytes!("../../tests/fixtures/gptchar/model.safetensors");
pub const GPT2: &[u8] = include_bytes!("../../tests/fixtures/gpt2/model.safetensors");
pub const GPT2_CONFIG: &str = include_str!("../../tests/fixtures/gpt2/config.json");
pub const PYTHIA: &[u8] = include_bytes!("../../tests/fixtures/pythia-hub/model.safetensors");
pub const PYTHIA_CONFIG: &str = include_str!("../../tests/fixtures/pythia-hub/config.json");
pub const LLAMA: &[u8] = include_bytes!("../../tests/fixtures/llama32/model.safetensors");
pub const LLAMA_CONFIG: &str = include_str!("../../tests/fixtures/llama32/config.json");
/// Families with the features beyond the plain block (sandwich norms and soft-caps, ALiBi and a
/// fused layout, experts and windows, query/key norms over the whole projection).
pub const GEMMA2: &[u8] = include_bytes!("../../tests/fixtures/families/gemma2/model.safetensors");
pub const FALCON_RW: &[u8] = include_bytes!("../../tests/fixtures/families/falcon-rw/model.safetensors");
pub const MIXTRAL: &[u8] = include_bytes!("../../tests/fixtures/families/mixtral/model.safetensors");
pub const OLMO2: &[u8] = include_bytes!("../../tests/fixtures/families/olmo2/model.safetensors");

/// The character fixture, loaded once per process (the targets that run a model on what they
/// parse share it).
pub fn gptchar() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| load(GPTCHAR, None, LoadParts::Everything).expect("the character fixture loads"))
}

/// A model from one weights file and an optional config.json, through `ModelFiles` as the page
/// and the CLI assemble it.
pub fn load(weights: &[u8], config: Option<&[u8]>, parts: LoadParts) -> headprint::Result<Model> {
    Model::load(&files(weights, config)?, parts)
}

fn files(weights: &[u8], config: Option<&[u8]>) -> headprint::Result<ModelFiles> {
    let mut named: Vec<(String, Box<dyn ByteSource>)> =
        vec![("model.safetensors".into(), Box::new(MemorySource::new("model.safetensors", weights.to_vec())))];
    if let Some(config) = config {
        named.push(("config.json".into(), Box::new(MemorySource::new("config.json", config.to_vec()))));
    }
    ModelFiles::from_named(named)
}

/// The same files read as the page's worker and the CLI read them: opened for streaming (the
/// headers, config and final norm only), then, where the model is small, the Grams from blocks
/// of rows, every layer read and fingerprinted, and a forward pass layer by layer.
pub fn stream(weights: &[u8], config: Option<&[u8]>) {
    let Ok(files) = files(weights, config) else { return };
    let Ok(model) = ModelStream::open(&files) else { return };
    if !small(&model.config) {
        return;
    }
    let _ = fingerprint_stream(&model, Mode::Folded);
    let _ = headprint::forward::run(&model, &probe_ids(&model.config));
}

fn small(c: &ModelConfig) -> bool {
    c.d_model <= 64 && c.layers <= 4 && c.vocab <= 512 && c.d_mlp <= 512
}

fn probe_ids(c: &ModelConfig) -> Vec<usize> {
    (0..c.context.unwrap_or(8).min(8)).map(|i| i % c.vocab).collect()
}

/// Runs what a loaded model is used for, where the model is small enough to stay fast.
pub fn exercise(model: &Model) {
    if !small(&model.config) {
        return;
    }
    let _ = headprint::forward::run(model, &probe_ids(&model.config));
    let _ = headprint::analysis::fingerprint_model(model, Mode::Folded);
}
