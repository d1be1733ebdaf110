//! StableLM: Llama's names with LayerNorm (weight and bias), rotary over
//! `partial_rotary_factor` of each head, optional query/key/value biases, optionally a
//! parallel block reading one norm (`use_parallel_residual`), and optionally a LayerNorm per
//! head on the queries and keys, each head its own (`q_layernorm.norms.{h}`).

use super::super::{Activation, Blueprint, MlpKind, NormKind, QkNorm, Reader, config_f32};
use super::llama::llama_shaped;
use super::{Family, Layout, activation, flag, require};
use crate::Result;

pub(super) const FAMILY: Family =
    Family { name: "stablelm", model_types: &["stablelm"], marker: None, mlp_parts: &[".mlp."], blueprint };

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "StableLM")?;
    llama_shaped(reader, json, "stablelm", false, |config, _| {
        config.mlp = MlpKind::Gated(activation(json, &["hidden_act"], Activation::Silu)?);
        config.norm = NormKind::LayerNorm;
        config.norm_eps = config_f32(json, "layer_norm_eps", 1e-5);
        let parallel = flag(json, "use_parallel_residual", false);
        config.parallel_residual = parallel;
        config.features.shared_norm = parallel;
        let qk_norm = flag(json, "qk_layernorm", false);
        if qk_norm {
            config.features.qk_norm = QkNorm::PerHead;
        }
        Ok(Layout {
            ln2: (!parallel).then_some("post_attention_layernorm"),
            q_norm: qk_norm.then_some("self_attn.q_layernorm"),
            k_norm: qk_norm.then_some("self_attn.k_layernorm"),
            ..Layout::llama()
        })
    })
}
