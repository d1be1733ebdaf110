//! GPT-J: a parallel block reading one LayerNorm (`ln_1`), unbiased query/key/value/output
//! projections, a plain MLP with biases (`fc_in`, `fc_out`), an unembedding with a bias, and
//! rotary on the first `rotary_dim` dimensions of each head with neighbouring dimensions paired
//! (rotate-every-two), base 10000.

use super::super::{
    Activation, Blueprint, MlpKind, NormKind, Positions, Reader, RopeScaling, Sources, check_dimensions, config_f32,
    config_usize,
};
use super::{Family, Layout, MlpNames, QkvNames, Sizes, activation, config_from, require};
use crate::Result;

pub(super) const FAMILY: Family =
    Family { name: "gptj", model_types: &["gptj"], marker: None, mlp_parts: &[".mlp."], blueprint };

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "GPT-J")?;
    let sizes = Sizes::read(reader, json, "transformer.wte.weight", "transformer.h.")?;
    let rotary_dim = config_usize(json, &["rotary_dim"]).unwrap_or(sizes.d_head);
    let config = super::super::ModelConfig {
        norm: NormKind::LayerNorm,
        norm_eps: config_f32(json, "layer_norm_epsilon", 1e-5),
        positions: Positions::Rotary {
            dims: rotary_dim,
            base: 10_000.0,
            scaling: RopeScaling::None,
            interleaved: true,
        },
        mlp: MlpKind::Plain(activation(json, &["activation_function"], Activation::GeluTanh)?),
        parallel_residual: true,
        features: super::super::Features { shared_norm: true, ..Default::default() },
        ..config_from("gptj", &sizes, json)
    };
    check_dimensions(&config, &Sources::HF_SPLIT)?;
    let layout = Layout {
        prefix: "transformer.h.".into(),
        qkv: QkvNames::Separate { q: "attn.q_proj", k: "attn.k_proj", v: "attn.v_proj" },
        o: "attn.out_proj",
        ln1: Some("ln_1"),
        ln2: None,
        mlp: MlpNames::Plain { w_in: "mlp.fc_in", w_out: "mlp.fc_out" },
        ..Layout::llama()
    };
    let unembedding = super::unembedding(reader, json, false);
    let mut blueprint =
        Blueprint::new(config, "transformer.wte.weight", unembedding, "transformer.ln_f", layout, reader);
    blueprint.unembedding_bias = Some("lm_head.bias".into());
    Ok(blueprint)
}
