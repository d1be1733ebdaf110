//! OLMo and OLMo-2. OLMo: Llama's names with LayerNorms that have no weight or bias in the
//! file (non-parametric, eps 1e-5); its `clip_qkv` is refused by name. OLMo-2: RMSNorm after
//! attention and after the MLP instead of before (`x + N(attn(x))`), and RMSNorms on the
//! whole query and key projections (`q_norm`, `k_norm`, heads x d_head wide).

use super::super::{Activation, Blueprint, MlpKind, NormKind, NormSites, QkNorm, Reader};
use super::llama::llama_shaped;
use super::{Family, Layout, activation, refuse_set, require};
use crate::Result;

pub(super) const OLMO: Family =
    Family { name: "olmo", model_types: &["olmo"], marker: None, mlp_parts: &[".mlp."], blueprint: olmo };

pub(super) const OLMO2: Family =
    Family { name: "olmo2", model_types: &["olmo2"], marker: None, mlp_parts: &[".mlp."], blueprint: olmo2 };

fn olmo(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "OLMo")?;
    refuse_set(json, "clip_qkv", "clipping the queries, keys and values is not implemented")?;
    llama_shaped(reader, json, "olmo", false, |config, _| {
        config.mlp = MlpKind::Gated(activation(json, &["hidden_act"], Activation::Silu)?);
        config.norm = NormKind::LayerNorm;
        // OlmoLayerNorm fixes its epsilon.
        config.norm_eps = 1e-5;
        Ok(Layout { ln1: None, ln2: None, plain_norms: true, ..Layout::llama() })
    })
    .map(|mut blueprint| {
        blueprint.final_norm = None;
        blueprint
    })
}

fn olmo2(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "OLMo-2")?;
    llama_shaped(reader, json, "olmo2", false, |config, _| {
        config.mlp = MlpKind::Gated(activation(json, &["hidden_act"], Activation::Silu)?);
        config.features.norm_sites = NormSites::Post;
        config.features.qk_norm = QkNorm::Whole;
        Ok(Layout {
            ln1: None,
            ln2: None,
            attention_out_norm: Some("post_attention_layernorm"),
            mlp_out_norm: Some("post_feedforward_layernorm"),
            q_norm: Some("self_attn.q_norm"),
            k_norm: Some("self_attn.k_norm"),
            ..Layout::llama()
        })
    })
}
