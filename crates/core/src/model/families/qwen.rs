//! Qwen 2 / 2.5 and Qwen 3: Llama's layout. Qwen2 adds biases on the query, key and value
//! projections and an optional sliding window on the layers from `max_window_layers` on;
//! Qwen3 drops the biases and adds a per-head RMSNorm on the queries and keys (`q_norm`,
//! `k_norm`, before the rotary embedding), with an explicit `head_dim`.

use super::super::{Activation, Blueprint, MlpKind, QkNorm, Reader};
use super::llama::llama_shaped;
use super::{Family, Layout, activation, flag, layer_attention, require, windows};
use crate::Result;

pub(super) const QWEN2: Family =
    Family { name: "qwen2", model_types: &["qwen2"], marker: None, mlp_parts: &[".mlp."], blueprint: qwen2 };

pub(super) const QWEN3: Family =
    Family { name: "qwen3", model_types: &["qwen3"], marker: None, mlp_parts: &[".mlp."], blueprint: qwen3 };

fn qwen2(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "Qwen2")?;
    read(reader, json, "qwen2", false)
}

fn qwen3(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "Qwen3")?;
    read(reader, json, "qwen3", true)
}

fn read(reader: &Reader, json: &serde_json::Value, family: &str, qk_norm: bool) -> Result<Blueprint> {
    llama_shaped(reader, json, family, false, |config, sizes| {
        config.mlp = MlpKind::Gated(activation(json, &["hidden_act"], Activation::Silu)?);
        // transformers keeps the window only when `use_sliding_window` is set, and then on the
        // layers from `max_window_layers` on (`layer_types`, where the file has it, says which).
        let first_sliding = super::super::config_usize(json, &["max_window_layers"]).unwrap_or(0);
        let windows = match flag(json, "use_sliding_window", false) {
            true => windows(json, sizes.layers, |l| l >= first_sliding)?,
            false => vec![None; sizes.layers],
        };
        config.features.layers = layer_attention(windows, vec![None; sizes.layers]);
        if qk_norm {
            config.features.qk_norm = QkNorm::PerHead;
        }
        Ok(Layout {
            q_norm: qk_norm.then_some("self_attn.q_norm"),
            k_norm: qk_norm.then_some("self_attn.k_norm"),
            ..Layout::llama()
        })
    })
}
