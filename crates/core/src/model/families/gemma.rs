//! Gemma 1, 2 and 3. All three: RMSNorm scaling by `1 + w` (computed in f32), the embedding
//! times sqrt(d_model) as the residual stream receives it (a tied unembedding is the stored,
//! unscaled W_E), GeGLU with the tanh GELU, often one key/value head.
//! Gemma 2 adds sandwich norms (`post_attention_layernorm` normalises the attention output,
//! `pre_`/`post_feedforward_layernorm` the MLP's input and output), the attention scale
//! `query_pre_attn_scalar^-0.5`, tanh soft-capping of the attention scores and the final
//! logits, and a sliding window on every other layer (the first included).
//! Gemma 3 adds per-head query/key norms, five local layers to one global by default, and the
//! local layers' own rotary base (`rope_local_base_freq`, no scaling); multimodal checkpoints
//! (`gemma3`) keep the text model under `language_model.model.` with its config in `text_config`.

use super::super::{Activation, Blueprint, MlpKind, NormSites, Positions, QkNorm, Reader, rope_settings};
use super::llama::llama_shaped_at;
use super::{Family, Layout, activation, layer_attention, positive, require, text, windows};
use crate::{Error, Result};

pub(super) const GEMMA: Family =
    Family { name: "gemma", model_types: &["gemma"], marker: None, mlp_parts: &[".mlp."], blueprint: gemma };

pub(super) const GEMMA2: Family =
    Family { name: "gemma2", model_types: &["gemma2"], marker: None, mlp_parts: &[".mlp."], blueprint: gemma2 };

pub(super) const GEMMA3: Family = Family {
    name: "gemma3",
    model_types: &["gemma3_text", "gemma3"],
    marker: None,
    mlp_parts: &[".mlp."],
    blueprint: gemma3,
};

/// The activation: `hidden_activation`, else `hidden_act`, where Gemma's legacy "gelu" means
/// the tanh approximation (as transformers reads it).
fn gemma_activation(json: &serde_json::Value) -> Result<Activation> {
    match text(json, "hidden_activation").or_else(|| text(json, "hidden_act")) {
        Some("gelu") => Ok(Activation::GeluTanh),
        _ => activation(json, &["hidden_activation", "hidden_act"], Activation::GeluTanh),
    }
}

/// What every Gemma shares: `1 + w` norms, the scaled embedding, GeGLU.
fn common(config: &mut super::super::ModelConfig, json: &serde_json::Value) -> Result<()> {
    config.mlp = MlpKind::Gated(gemma_activation(json)?);
    config.features.norm_plus_one = true;
    // transformers multiplies by `hidden_size ** 0.5` cast to the weights' type.
    config.features.embedding_scale = Some((config.d_model as f64).sqrt() as f32);
    Ok(())
}

fn gemma(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "Gemma")?;
    llama_shaped_at(reader, json, "model.", "gemma", true, |config, _| {
        common(config, json)?;
        Ok(Layout::llama())
    })
}

/// Gemma 2 and 3's scale and soft-caps, and their sandwich norms.
fn sandwich(config: &mut super::super::ModelConfig, json: &serde_json::Value) -> Result<Layout> {
    let scalar = positive(json, "query_pre_attn_scalar")?.unwrap_or(256.0);
    config.features.attention_scale = Some((scalar as f64).powf(-0.5) as f32);
    config.features.attention_softcap = positive(json, "attn_logit_softcapping")?;
    config.features.final_softcap = positive(json, "final_logit_softcapping")?;
    config.features.norm_sites = NormSites::Sandwich;
    Ok(Layout {
        ln2: Some("pre_feedforward_layernorm"),
        attention_out_norm: Some("post_attention_layernorm"),
        mlp_out_norm: Some("post_feedforward_layernorm"),
        ..Layout::llama()
    })
}

fn gemma2(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "Gemma 2")?;
    llama_shaped_at(reader, json, "model.", "gemma2", true, |config, sizes| {
        common(config, json)?;
        let layout = sandwich(config, json)?;
        let windows = windows(json, sizes.layers, |l| l % 2 == 0)?;
        config.features.layers = layer_attention(windows, vec![None; sizes.layers]);
        Ok(layout)
    })
}

fn gemma3(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let outer = require(config, "Gemma 3")?;
    // A multimodal checkpoint: the text model's config inside, its tensors under a prefix.
    let (json, prefix) = match outer.get("text_config").filter(|t| t.is_object()) {
        Some(text_config) => {
            let prefix = ["language_model.model.", "model.language_model."]
                .into_iter()
                .find(|p| reader.has(&format!("{p}embed_tokens.weight")))
                .ok_or_else(|| {
                    Error::BadModel(
                        "a multimodal Gemma 3 checkpoint without `language_model.model.embed_tokens.weight`".into(),
                    )
                })?;
            (with_text_defaults(text_config), prefix)
        }
        None => (outer.clone(), "model."),
    };
    let json = &json;
    llama_shaped_at(reader, json, prefix, "gemma3", true, |config, sizes| {
        common(config, json)?;
        let layout = sandwich(config, json)?;
        config.features.qk_norm = QkNorm::PerHead;
        let pattern = super::super::config_usize(json, &["sliding_window_pattern"]).unwrap_or(6).max(1);
        let windows = windows(json, sizes.layers, |l| (l + 1) % pattern != 0)?;
        let (global, local) = gemma3_rotary(json, config.d_head)?;
        config.positions = global;
        let positions = windows.iter().map(|w| w.is_some().then_some(local)).collect();
        config.features.layers = layer_attention(windows, positions);
        Ok(Layout { q_norm: Some("self_attn.q_norm"), k_norm: Some("self_attn.k_norm"), ..layout })
    })
}

/// The global and local layers' rotary settings: from `rope_parameters.full_attention` and
/// `.sliding_attention` (transformers 5's files), else `rope_theta` with `rope_scaling` (default
/// base 1e6) and `rope_local_base_freq` (default 1e4) with no scaling.
fn gemma3_rotary(json: &serde_json::Value, d_head: usize) -> Result<(Positions, Positions)> {
    let rotary = |base: f32, scaling| Positions::Rotary { dims: d_head, base, scaling, interleaved: false };
    let per_type = json.get("rope_parameters").filter(|r| r.get("full_attention").is_some());
    if let Some(parameters) = per_type {
        let of = |kind: &str| -> Result<Positions> {
            let table = parameters.get(kind).cloned().unwrap_or_default();
            let (base, scaling) = rope_settings(&serde_json::json!({ "rope_parameters": table }))?;
            Ok(rotary(base, scaling))
        };
        return Ok((of("full_attention")?, of("sliding_attention")?));
    }
    let mut global = json.clone();
    if global.get("rope_theta").is_none() {
        global["rope_theta"] = serde_json::json!(1_000_000.0);
    }
    let (base, scaling) = rope_settings(&global)?;
    let local = positive(json, "rope_local_base_freq")?.unwrap_or(10_000.0);
    Ok((rotary(base, scaling), rotary(local, super::super::RopeScaling::None)))
}

/// A multimodal checkpoint's `text_config`, with Gemma3TextConfig's defaults for the keys such
/// files leave out.
fn with_text_defaults(text_config: &serde_json::Value) -> serde_json::Value {
    let mut json = text_config.clone();
    for (key, value) in [
        ("num_attention_heads", serde_json::json!(8)),
        ("num_key_value_heads", serde_json::json!(4)),
        ("head_dim", serde_json::json!(256)),
        ("query_pre_attn_scalar", serde_json::json!(256)),
        ("rms_norm_eps", serde_json::json!(1e-6)),
        ("sliding_window", serde_json::json!(4096)),
    ] {
        if json.get(key).is_none_or(|v| v.is_null()) {
            json[key] = value;
        }
    }
    json
}
