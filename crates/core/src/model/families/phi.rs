//! Phi 1, 1.5 and 2: a parallel block whose attention and MLP read one LayerNorm
//! (`input_layernorm`), biased projections with the output one named `dense`, a plain MLP
//! (`fc1`, `fc2`, with biases), `final_layernorm`, an unembedding with a bias, rotary over
//! `partial_rotary_factor` of each head, and optionally a LayerNorm shared by the heads on the
//! queries and keys (`qk_layernorm`).

use super::super::{Activation, Blueprint, MlpKind, NormKind, QkNorm, Reader, Sources, check_dimensions, config_f32};
use super::llama::rotary_config;
use super::{Family, Layout, MlpNames, Sizes, activation, flag, require};
use crate::Result;

pub(super) const FAMILY: Family =
    Family { name: "phi", model_types: &["phi"], marker: None, mlp_parts: &[".mlp."], blueprint };

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "Phi")?;
    let sizes = Sizes::read(reader, json, "model.embed_tokens.weight", "model.layers.")?;
    let mut config = rotary_config("phi", &sizes, json)?;
    config.mlp = MlpKind::Plain(activation(json, &["hidden_act"], Activation::GeluTanh)?);
    config.norm = NormKind::LayerNorm;
    config.norm_eps = config_f32(json, "layer_norm_eps", 1e-5);
    config.parallel_residual = true;
    config.features.shared_norm = true;
    let qk_norm = flag(json, "qk_layernorm", false);
    if qk_norm {
        config.features.qk_norm = QkNorm::PerHead;
    }
    check_dimensions(&config, &Sources::HF_SPLIT)?;
    let layout = Layout {
        o: "self_attn.dense",
        ln2: None,
        q_norm: qk_norm.then_some("self_attn.q_layernorm"),
        k_norm: qk_norm.then_some("self_attn.k_layernorm"),
        mlp: MlpNames::Plain { w_in: "mlp.fc1", w_out: "mlp.fc2" },
        ..Layout::llama()
    };
    let unembedding = super::unembedding(reader, json, false);
    let mut blueprint =
        Blueprint::new(config, "model.embed_tokens.weight", unembedding, "model.final_layernorm", layout, reader);
    blueprint.unembedding_bias = Some("lm_head.bias".into());
    Ok(blueprint)
}
