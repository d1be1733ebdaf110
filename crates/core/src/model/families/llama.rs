//! Llama: RMSNorm, rotary on the whole head, grouped-query attention (query head h reads
//! key/value head h / (heads / kv_heads)), SwiGLU MLP, often sharded.

use super::super::{Blueprint, ModelConfig, Positions, Reader, Sources, check_dimensions, rope_settings};
use super::{Family, Layout, Marker, Sizes, config_from, require};
use crate::Result;

pub(super) const FAMILY: Family = Family {
    name: "llama",
    model_types: &["llama"],
    marker: Some(Marker::Suffix("self_attn.q_proj.weight")),
    mlp_parts: &[".mlp."],
    blueprint,
};

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "Llama")?;
    let sizes = Sizes::read(reader, json, "model.embed_tokens.weight", "model.layers.")?;
    let (base, scaling) = rope_settings(json)?;
    let config = ModelConfig {
        positions: Positions::Rotary { dims: sizes.d_head, base, scaling, interleaved: false },
        ..config_from("llama", &sizes, json)
    };
    check_dimensions(&config, &Sources::HF)?;
    // Checkpoints that tie the unembedding leave `lm_head` out of the file.
    let unembedding = reader.has("lm_head.weight").then(|| "lm_head.weight".into());
    Ok(Blueprint::new(config, "model.embed_tokens.weight", unembedding, "model.norm", Layout::llama(), reader))
}

/// The config most Llama-shaped families start from: [`config_from`] with rotary positions
/// over `fraction` of each head, checked.
pub(super) fn rotary_config(family: &str, sizes: &Sizes, json: &serde_json::Value) -> Result<ModelConfig> {
    Ok(ModelConfig { positions: super::rotary(json, sizes.d_head, false)?, ..config_from(family, sizes, json) })
}

/// Reads a Llama-shaped family: `model.embed_tokens`, `model.layers.`, `model.norm`, with the
/// config `adjust` makes of the defaults and the layout it names.
pub(super) fn llama_shaped(
    reader: &Reader,
    json: &serde_json::Value,
    family: &str,
    tied_by_default: bool,
    adjust: impl FnOnce(&mut ModelConfig, &Sizes) -> Result<Layout>,
) -> Result<Blueprint> {
    llama_shaped_at(reader, json, "model.", family, tied_by_default, adjust)
}

/// [`llama_shaped`] with the model's tensors under `prefix` (`model.`, or a multimodal
/// checkpoint's `language_model.model.`).
pub(super) fn llama_shaped_at(
    reader: &Reader,
    json: &serde_json::Value,
    prefix: &str,
    family: &str,
    tied_by_default: bool,
    adjust: impl FnOnce(&mut ModelConfig, &Sizes) -> Result<Layout>,
) -> Result<Blueprint> {
    let embedding = format!("{prefix}embed_tokens.weight");
    let sizes = Sizes::read(reader, json, &embedding, &format!("{prefix}layers."))?;
    let mut config = rotary_config(family, &sizes, json)?;
    let layout = Layout { prefix: format!("{prefix}layers."), ..adjust(&mut config, &sizes)? };
    check_dimensions(&config, &Sources::HF)?;
    let unembedding = super::unembedding(reader, json, tied_by_default);
    Ok(Blueprint::new(config, &embedding, unembedding, &format!("{prefix}norm"), layout, reader))
}
