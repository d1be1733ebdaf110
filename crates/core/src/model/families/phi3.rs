//! Phi-3 / Phi-4: Llama's layout with fused projections, split once at load: `qkv_proj` holds
//! [Q; K; V] and `gate_up_proj` [gate; up]. A `sliding_window` applies to every layer; long
//! context checkpoints' `longrope` scaling is refused by name (see `rope_settings`).

use super::super::{Activation, Blueprint, MlpKind, Reader};
use super::llama::llama_shaped;
use super::{Family, FusedQkv, Layout, MlpNames, QkvNames, activation, layer_attention, require, windows};
use crate::Result;

pub(super) const FAMILY: Family =
    Family { name: "phi3", model_types: &["phi3"], marker: None, mlp_parts: &[".mlp."], blueprint };

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "Phi-3")?;
    llama_shaped(reader, json, "phi3", false, |config, sizes| {
        config.mlp = MlpKind::Gated(activation(json, &["hidden_act"], Activation::Silu)?);
        let windows = windows(json, sizes.layers, |_| true)?;
        config.features.layers = layer_attention(windows, vec![None; sizes.layers]);
        Ok(Layout {
            qkv: QkvNames::Fused { name: "self_attn.qkv_proj", layout: FusedQkv::stacked },
            mlp: MlpNames::FusedGateUp { gate_up: "mlp.gate_up_proj", down: "mlp.down_proj" },
            ..Layout::llama()
        })
    })
}
