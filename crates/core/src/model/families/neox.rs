//! GPT-NeoX / Pythia: fused QKV interleaved per head ([head][q,k,v][d_head] along the output
//! dimension), partial rotary, parallel attention + MLP, untied `embed_out`.

use nalgebra::{DMatrix, DVector};

use super::super::{
    Activation, Attention, Blueprint, Layer, LayerMap, LoadParts, Mlp, MlpKind, ModelConfig, NormKind, Positions,
    Reader, Sources, check_dimensions, config_agrees, config_f32, config_usize, count_indexed, rope_settings,
};
use super::{Family, Marker};
use crate::{Error, Result};

pub(super) const FAMILY: Family = Family {
    name: "neox",
    model_types: &["gpt_neox"],
    marker: Some(Marker::Suffix("attention.query_key_value.weight")),
    mlp_parts: &[".mlp."],
    blueprint,
};

const SOURCES: Sources = Sources {
    heads: "config.json `num_attention_heads`",
    kv_heads: "config.json `num_attention_heads`",
    head_dim: "hidden_size / heads",
    free_head_dim: false,
    from_config: true,
};

fn blueprint(reader: &Reader, config_json: Option<&serde_json::Value>) -> Result<Blueprint> {
    let config_json = config_json.ok_or_else(|| Error::BadConfig("a GPT-NeoX model needs its config.json".into()))?;
    let names = reader.names();
    let d_model = config_usize(config_json, &["hidden_size"])?;
    let heads = config_usize(config_json, &["num_attention_heads"])?;
    let d_head = d_model / heads.max(1);
    // Newer transformers keep the rotary fraction under `rope_parameters`, older ones at top level.
    let rotary_fraction = config_json
        .get("rope_parameters")
        .and_then(|r| r.get("partial_rotary_factor"))
        .or_else(|| config_json.get("rotary_pct"))
        .and_then(|v| v.as_f64())
        .unwrap_or(1.0);
    if !(rotary_fraction > 0.0 && rotary_fraction <= 1.0) {
        let key = if config_json.get("rotary_pct").is_some() { "rotary_pct" } else { "partial_rotary_factor" };
        return Err(Error::BadConfig(format!(
            "`{key}` {rotary_fraction} must be a fraction of the head, above 0 and at most 1"
        )));
    }
    let (rotary_base, scaling) = rope_settings(config_json)?;
    let [vocab, width] = reader.matrix_shape("gpt_neox.embed_in.weight", "[vocab_size, hidden_size]")?;
    config_agrees(config_json, &["hidden_size"], width, "embedding columns (model width)")?;
    config_agrees(config_json, &["vocab_size"], vocab, "embedding rows (vocabulary)")?;
    let layers = count_indexed(&names, "gpt_neox.layers.")?;
    config_agrees(config_json, &["num_hidden_layers"], layers, "layers")?;
    let config = ModelConfig {
        family: "neox".into(),
        layers,
        heads,
        kv_heads: heads,
        d_model,
        d_head,
        d_mlp: config_usize(config_json, &["intermediate_size"]).unwrap_or(4 * d_model),
        vocab,
        context: None,
        norm: NormKind::LayerNorm,
        norm_eps: config_f32(config_json, "layer_norm_eps", 1e-5),
        positions: Positions::Rotary {
            dims: (d_head as f64 * rotary_fraction) as usize,
            base: rotary_base,
            scaling,
            interleaved: false,
        },
        mlp: MlpKind::Plain(if config_json.get("hidden_act").and_then(|v| v.as_str()) == Some("gelu_new") {
            Activation::GeluTanh
        } else {
            Activation::GeluErf
        }),
        parallel_residual: config_json.get("use_parallel_residual").and_then(|v| v.as_bool()).unwrap_or(true),
        features: Default::default(),
        bos_token_id: None,
        config_special_ids: Vec::new(),
        characters: false,
    };
    check_dimensions(&config, &SOURCES)?;
    Ok(Blueprint {
        config,
        embedding: "gpt_neox.embed_in.weight".into(),
        positions: None,
        embedding_norm: None,
        // The hub's files call the unembedding `embed_out`; a state_dict saved directly from
        // newer transformers calls it `lm_head`.
        unembedding: Some(if reader.has("embed_out.weight") { "embed_out.weight" } else { "lm_head.weight" }.into()),
        unembedding_bias: None,
        final_norm: Some("gpt_neox.final_layer_norm".into()),
        layers: Box::new(NeoxLayers),
        vocab_strings: None,
        facts: Vec::new(),
        parameter_count: reader.parameter_count(&[]),
    })
}

struct NeoxLayers;

impl LayerMap for NeoxLayers {
    fn layer(&self, reader: &mut Reader, config: &ModelConfig, l: usize, parts: LoadParts) -> Result<Layer> {
        layer(reader, config, l, parts)
    }
}

fn layer(reader: &mut Reader, config: &ModelConfig, l: usize, parts: LoadParts) -> Result<Layer> {
    let ModelConfig { d_model, heads, d_head, d_mlp, .. } = *config;
    let p = format!("gpt_neox.layers.{l}");
    let qkv = reader.linear(&format!("{p}.attention.query_key_value.weight"), d_model, 3 * d_model)?;
    let qkv_bias = reader.optional_vector(&format!("{p}.attention.query_key_value.bias"), 3 * d_model)?;
    // Un-interleave: head h's q, k, v are columns (3h + 0|1|2) * d_head of the fused map.
    let split = |which: usize| {
        let mut w = DMatrix::zeros(d_model, d_model);
        let mut b = DVector::zeros(d_model);
        for h in 0..heads {
            let source = (3 * h + which) * d_head;
            w.columns_mut(h * d_head, d_head).copy_from(&qkv.columns(source, d_head));
            b.rows_mut(h * d_head, d_head).copy_from(&qkv_bias.rows(source, d_head));
        }
        (w, b)
    };
    let ((w_q, b_q), (w_k, b_k), (w_v, b_v)) = (split(0), split(1), split(2));
    let attention = Attention {
        w_q,
        b_q,
        w_k,
        b_k,
        w_v,
        b_v,
        w_o: reader.linear(&format!("{p}.attention.dense.weight"), d_model, d_model)?,
        b_o: reader.optional_vector(&format!("{p}.attention.dense.bias"), d_model)?,
        q_norm: None,
        k_norm: None,
    };
    let mlp = match parts {
        LoadParts::Circuits => None,
        LoadParts::Everything => Some(Mlp {
            w_in: reader.linear(&format!("{p}.mlp.dense_h_to_4h.weight"), d_model, d_mlp)?,
            b_in: reader.optional_vector(&format!("{p}.mlp.dense_h_to_4h.bias"), d_mlp)?,
            w_gate: None,
            w_out: reader.linear(&format!("{p}.mlp.dense_4h_to_h.weight"), d_mlp, d_model)?,
            b_out: reader.optional_vector(&format!("{p}.mlp.dense_4h_to_h.bias"), d_model)?,
        }),
    };
    Ok(Layer {
        ln1: Some(reader.norm(&format!("{p}.input_layernorm"), d_model, NormKind::LayerNorm)?),
        attention,
        ln2: Some(reader.norm(&format!("{p}.post_attention_layernorm"), d_model, NormKind::LayerNorm)?),
        attention_out_norm: None,
        mlp_out_norm: None,
        mlp,
        experts: None,
    })
}
