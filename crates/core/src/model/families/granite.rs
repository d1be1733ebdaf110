//! Granite: Llama's layout with four multipliers: on the embedding (`embedding_multiplier`), on
//! the attention scores in place of 1/sqrt(d_head) (`attention_multiplier`), on each block's
//! outputs before they join the stream (`residual_multiplier`), and a divisor of the logits
//! (`logits_scaling`).

use super::super::{Activation, Blueprint, MlpKind, Reader};
use super::llama::llama_shaped;
use super::{Family, Layout, activation, positive, require};
use crate::Result;

pub(super) const FAMILY: Family =
    Family { name: "granite", model_types: &["granite"], marker: None, mlp_parts: &[".mlp."], blueprint };

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "Granite")?;
    llama_shaped(reader, json, "granite", false, |config, _| {
        config.mlp = MlpKind::Gated(activation(json, &["hidden_act"], Activation::Silu)?);
        let features = &mut config.features;
        features.embedding_scale = positive(json, "embedding_multiplier")?.filter(|&m| m != 1.0);
        features.attention_scale = positive(json, "attention_multiplier")?;
        features.residual_multiplier = positive(json, "residual_multiplier")?.filter(|&m| m != 1.0);
        features.logits_divisor = positive(json, "logits_scaling")?.filter(|&m| m != 1.0);
        Ok(Layout::llama())
    })
}
