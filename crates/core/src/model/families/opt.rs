//! OPT: learned positions whose table starts 2 rows in (`embed_positions`, offset 2), biased
//! projections, a plain ReLU MLP outside any `.mlp.` (`fc1`, `fc2`), per-layer norms named
//! `self_attn_layer_norm` and `final_layer_norm`, a tied unembedding. OPT-350m's post-norm
//! layers and its embedding projections are refused by name.

use super::super::{
    Activation, Blueprint, Error, MlpKind, NormKind, Positions, Reader, Sources, check_dimensions, config_usize,
};
use super::{Family, Layout, MlpNames, QkvNames, Sizes, activation, config_from, flag, require};
use crate::Result;

pub(super) const FAMILY: Family =
    Family { name: "opt", model_types: &["opt"], marker: None, mlp_parts: &[".fc1.", ".fc2."], blueprint };

/// Rows of `embed_positions` before position 0's.
const POSITION_OFFSET: usize = 2;

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "OPT")?;
    if !flag(json, "do_layer_norm_before", true) {
        return Err(Error::BadConfig(
            "config.json sets `do_layer_norm_before` to false: OPT's post-norm layers (OPT-350m) are not implemented"
                .into(),
        ));
    }
    let sizes = Sizes::read(reader, json, "model.decoder.embed_tokens.weight", "model.decoder.layers.")?;
    if let Ok(projected) = config_usize(json, &["word_embed_proj_dim"])
        && projected != sizes.d_model
    {
        return Err(Error::BadConfig(format!(
            "config.json sets `word_embed_proj_dim` to {projected}, not `hidden_size` {}: OPT's embedding projections are not implemented",
            sizes.d_model
        )));
    }
    let [rows, _] =
        reader.matrix_shape("model.decoder.embed_positions.weight", "[max_position_embeddings + 2, hidden_size]")?;
    let context = rows.checked_sub(POSITION_OFFSET).filter(|&c| c > 0).ok_or_else(|| {
        Error::BadModel(format!(
            "`embed_positions` has {rows} rows; OPT's table needs its offset of {POSITION_OFFSET} and more"
        ))
    })?;
    let config = super::super::ModelConfig {
        context: Some(context),
        norm: NormKind::LayerNorm,
        norm_eps: 1e-5,
        positions: Positions::Learned,
        mlp: MlpKind::Plain(activation(json, &["activation_function"], Activation::Relu)?),
        features: super::super::Features { position_offset: POSITION_OFFSET, ..Default::default() },
        ..config_from("opt", &sizes, json)
    };
    check_dimensions(&config, &Sources::HF_SPLIT)?;
    let layout = Layout {
        prefix: "model.decoder.layers.".into(),
        qkv: QkvNames::Separate { q: "self_attn.q_proj", k: "self_attn.k_proj", v: "self_attn.v_proj" },
        o: "self_attn.out_proj",
        ln1: Some("self_attn_layer_norm"),
        ln2: Some("final_layer_norm"),
        mlp: MlpNames::Plain { w_in: "fc1", w_out: "fc2" },
        ..Layout::llama()
    };
    let unembedding = super::unembedding(reader, json, true);
    let mut blueprint = Blueprint::new(
        config,
        "model.decoder.embed_tokens.weight",
        unembedding,
        "model.decoder.final_layer_norm",
        layout,
        reader,
    );
    blueprint.positions = Some("model.decoder.embed_positions.weight".into());
    Ok(blueprint)
}
