//! Mixtral: Mistral's attention and a mixture of experts in place of the MLP: a router
//! (`block_sparse_moe.gate`) picks `num_experts_per_tok` of `num_local_experts` SwiGLU experts
//! (`experts.{e}.w1` gate, `w3` up, `w2` down) per token, weighted by the router's softmax
//! renormalised over the chosen.

use super::super::{Activation, Blueprint, MlpKind, Reader, config_usize};
use super::llama::llama_shaped;
use super::{Family, Layout, MlpNames, activation, layer_attention, require, windows};
use crate::Result;

pub(super) const FAMILY: Family =
    Family { name: "mixtral", model_types: &["mixtral"], marker: None, mlp_parts: &[".block_sparse_moe."], blueprint };

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "Mixtral")?;
    llama_shaped(reader, json, "mixtral", false, |config, sizes| {
        config.mlp = MlpKind::Experts {
            experts: config_usize(json, &["num_local_experts"])?,
            top_k: config_usize(json, &["num_experts_per_tok"])?,
            activation: activation(json, &["hidden_act"], Activation::Silu)?,
        };
        let windows = windows(json, sizes.layers, |_| true)?;
        config.features.layers = layer_attention(windows, vec![None; sizes.layers]);
        Ok(Layout {
            mlp: MlpNames::Experts {
                router: "block_sparse_moe.gate",
                experts: "block_sparse_moe.experts",
                gate: "w1",
                up: "w3",
                down: "w2",
            },
            ..Layout::llama()
        })
    })
}
