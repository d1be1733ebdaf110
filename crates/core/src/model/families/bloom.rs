//! BLOOM: a LayerNorm on the embedding (`word_embeddings_layernorm`), a fused query/key/value
//! projection laid out per head ([q, k, v] for each), ALiBi instead of positions (the bias
//! added after the 1/sqrt(d_head) scale), a plain tanh-GELU MLP, a tied unembedding.

use super::super::{
    Activation, Blueprint, MlpKind, NormKind, Positions, Reader, Sources, check_dimensions, config_f32,
};
use super::{Family, FusedQkv, Layout, MlpNames, QkvNames, Sizes, config_from, refuse_set, require};
use crate::Result;

pub(super) const FAMILY: Family =
    Family { name: "bloom", model_types: &["bloom"], marker: None, mlp_parts: &[".mlp."], blueprint };

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "BLOOM")?;
    refuse_set(
        json,
        "apply_residual_connection_post_layernorm",
        "residual connections taken after the norm are not implemented",
    )?;
    let mut sizes = Sizes::read(reader, json, "transformer.word_embeddings.weight", "transformer.h.")?;
    // BLOOM's MLP is always four times the width.
    sizes.d_mlp = 4 * sizes.d_model;
    let config = super::super::ModelConfig {
        norm: NormKind::LayerNorm,
        norm_eps: config_f32(json, "layer_norm_epsilon", 1e-5),
        positions: Positions::Alibi { before_scale: false },
        mlp: MlpKind::Plain(Activation::GeluTanh),
        features: super::super::Features { embedding_norm: true, ..Default::default() },
        ..config_from("bloom", &sizes, json)
    };
    check_dimensions(&config, &Sources::HF_SPLIT)?;
    let layout = Layout {
        prefix: "transformer.h.".into(),
        qkv: QkvNames::Fused { name: "self_attention.query_key_value", layout: FusedQkv::per_head },
        o: "self_attention.dense",
        mlp: MlpNames::Plain { w_in: "mlp.dense_h_to_4h", w_out: "mlp.dense_4h_to_h" },
        ..Layout::llama()
    };
    let unembedding = super::unembedding(reader, json, true);
    let mut blueprint =
        Blueprint::new(config, "transformer.word_embeddings.weight", unembedding, "transformer.ln_f", layout, reader);
    blueprint.embedding_norm = Some("transformer.word_embeddings_layernorm".into());
    Ok(blueprint)
}
