//! Llama: RMSNorm, rotary on the whole head, grouped-query attention (query head h reads
//! key/value head h / (heads / kv_heads)), SwiGLU MLP, often sharded.

use super::{
    Activation, Attention, Blueprint, Family, Layer, LayerNames, LoadParts, Mlp, ModelConfig, NormKind, Positions,
    Reader, check_dimensions, config_agrees, config_f32, config_usize, count_indexed, rope_settings,
};
use crate::{Error, Result};

pub(super) fn blueprint(reader: &Reader, config_json: Option<&serde_json::Value>) -> Result<Blueprint> {
    let config_json = config_json.ok_or_else(|| Error::BadConfig("a Llama model needs its config.json".into()))?;
    let names = reader.names();
    let d_model = config_usize(config_json, &["hidden_size"])?;
    let heads = config_usize(config_json, &["num_attention_heads"])?;
    let kv_heads = config_usize(config_json, &["num_key_value_heads"]).unwrap_or(heads);
    let d_head = match config_usize(config_json, &["head_dim"]) {
        Ok(d_head) => d_head,
        Err(_) if heads > 0 && !d_model.is_multiple_of(heads) => {
            return Err(Error::BadConfig(format!(
                "`num_attention_heads` {heads} does not divide `hidden_size` {d_model} (and there is no `head_dim`)"
            )));
        }
        Err(_) => d_model / heads.max(1),
    };
    let (rope_base, scaling) = rope_settings(config_json)?;
    let [vocab, width] = reader.matrix_shape("model.embed_tokens.weight", "[vocab_size, hidden_size]")?;
    config_agrees(config_json, &["hidden_size"], width, "embedding columns (model width)")?;
    config_agrees(config_json, &["vocab_size"], vocab, "embedding rows (vocabulary)")?;
    let layers = count_indexed(&names, "model.layers.")?;
    config_agrees(config_json, &["num_hidden_layers"], layers, "layers")?;
    let config = ModelConfig {
        family: Family::Llama,
        layers,
        heads,
        kv_heads,
        d_model,
        d_head,
        d_mlp: config_usize(config_json, &["intermediate_size"])?,
        vocab,
        context: None,
        norm: NormKind::RmsNorm,
        norm_eps: config_f32(config_json, "rms_norm_eps", 1e-6),
        positions: Positions::Rotary { dims: d_head, base: rope_base, scaling },
        activation: Activation::Silu,
        parallel_residual: false,
        bos_token_id: None,
        config_special_ids: Vec::new(),
    };
    check_dimensions(&config)?;
    Ok(Blueprint {
        config,
        embedding: "model.embed_tokens.weight".into(),
        positions: None,
        unembedding: reader.has("lm_head.weight").then(|| "lm_head.weight".into()),
        unembedding_bias: None,
        final_norm: "model.norm".into(),
        layer_names: LayerNames::Llama,
        vocab_strings: None,
        facts: Vec::new(),
        parameter_count: reader.parameter_count(&[]),
    })
}

pub(super) fn layer(reader: &mut Reader, config: &ModelConfig, l: usize, parts: LoadParts) -> Result<Layer> {
    let d_model = config.d_model;
    let (d_q, d_kv, d_mlp) = (config.heads * config.d_head, config.kv_heads * config.d_head, config.d_mlp);
    let p = format!("model.layers.{l}");
    let attention = Attention {
        w_q: reader.linear(&format!("{p}.self_attn.q_proj.weight"), d_model, d_q)?,
        b_q: reader.optional_vector(&format!("{p}.self_attn.q_proj.bias"), d_q)?,
        w_k: reader.linear(&format!("{p}.self_attn.k_proj.weight"), d_model, d_kv)?,
        b_k: reader.optional_vector(&format!("{p}.self_attn.k_proj.bias"), d_kv)?,
        w_v: reader.linear(&format!("{p}.self_attn.v_proj.weight"), d_model, d_kv)?,
        b_v: reader.optional_vector(&format!("{p}.self_attn.v_proj.bias"), d_kv)?,
        w_o: reader.linear(&format!("{p}.self_attn.o_proj.weight"), d_q, d_model)?,
        b_o: reader.optional_vector(&format!("{p}.self_attn.o_proj.bias"), d_model)?,
    };
    let mlp = match parts {
        LoadParts::Circuits => None,
        LoadParts::Everything => Some(Mlp {
            w_in: reader.linear(&format!("{p}.mlp.up_proj.weight"), d_model, d_mlp)?,
            b_in: nalgebra::DVector::zeros(d_mlp),
            w_gate: Some(reader.linear(&format!("{p}.mlp.gate_proj.weight"), d_model, d_mlp)?),
            w_out: reader.linear(&format!("{p}.mlp.down_proj.weight"), d_mlp, d_model)?,
            b_out: nalgebra::DVector::zeros(d_model),
        }),
    };
    Ok(Layer {
        ln1: reader.norm(&format!("{p}.input_layernorm"), d_model, NormKind::RmsNorm)?,
        attention,
        ln2: reader.norm(&format!("{p}.post_attention_layernorm"), d_model, NormKind::RmsNorm)?,
        mlp,
    })
}
