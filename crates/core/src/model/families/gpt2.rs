//! GPT-2: Hugging Face's Conv1D layout (weights stored in x out, fused QKV, unembedding tied
//! to `wte`) and nanoGPT's nn.Linear variant (out x in), told apart by the fused QKV shape.

use super::super::{
    Activation, Attention, Blueprint, Layer, LayerMap, LoadParts, Mlp, MlpKind, ModelConfig, NormKind, Positions,
    Reader, Sources, check_dimensions, config_agrees, config_f32, config_usize, count_indexed,
};
use super::{Family, Marker};
use crate::{Error, Result};

pub(super) const FAMILY: Family = Family {
    name: "gpt2",
    model_types: &["gpt2"],
    marker: Some(Marker::Suffix("attn.c_attn.weight")),
    mlp_parts: &[".mlp."],
    blueprint,
};

const SOURCES: Sources = Sources {
    heads: "config.json `n_head`",
    kv_heads: "config.json `n_head`",
    head_dim: "n_embd / n_head",
    free_head_dim: false,
    from_config: true,
};

fn blueprint(reader: &Reader, config_json: Option<&serde_json::Value>) -> Result<Blueprint> {
    let names = reader.names();
    let prefix = if reader.has("transformer.wte.weight") { "transformer." } else { "" };
    let embedding = format!("{prefix}wte.weight");
    let [vocab, d_model] = reader.matrix_shape(&embedding, "[vocab, n_embd]")?;
    let config_json = config_json.ok_or_else(|| {
        Error::BadConfig(
            "a GPT-2 model needs its config.json beside the weights (the head count is not in the tensor shapes)"
                .into(),
        )
    })?;
    let heads = config_usize(config_json, &["n_head", "num_attention_heads"])?;
    let layers = count_indexed(&names, &format!("{prefix}h."))?;
    config_agrees(config_json, &["n_layer", "num_hidden_layers"], layers, "layers")?;
    config_agrees(config_json, &["vocab_size"], vocab, "embedding rows (vocabulary)")?;
    config_agrees(config_json, &["n_embd", "hidden_size"], d_model, "embedding columns (model width)")?;
    let [context, _] = reader.matrix_shape(&format!("{prefix}wpe.weight"), "[n_positions, n_embd]")?;
    let activation = match config_json.get("activation_function").and_then(|v| v.as_str()).unwrap_or("gelu_new") {
        "relu" => Activation::Relu,
        "gelu" => Activation::GeluErf,
        _ => Activation::GeluTanh,
    };
    // Conv1D stores c_attn as [d_model, 3 d_model]; nn.Linear as [3 d_model, d_model].
    let qkv_shape = reader.shape(&format!("{prefix}h.0.attn.c_attn.weight"))?;
    let linear_layout = qkv_shape == [3 * d_model, d_model];
    let d_mlp = reader
        .shape(&format!("{prefix}h.0.mlp.c_fc.weight"))?
        .into_iter()
        .find(|&d| d != d_model)
        .unwrap_or(4 * d_model);
    let config = ModelConfig {
        family: "gpt2".into(),
        layers,
        heads,
        kv_heads: heads,
        d_model,
        d_head: d_model / heads.max(1),
        d_mlp,
        vocab,
        context: Some(context),
        norm: NormKind::LayerNorm,
        norm_eps: config_f32(config_json, "layer_norm_epsilon", 1e-5),
        positions: Positions::Learned,
        mlp: MlpKind::Plain(activation),
        parallel_residual: false,
        features: Default::default(),
        bos_token_id: None,
        config_special_ids: Vec::new(),
        characters: false,
    };
    check_dimensions(&config, &SOURCES)?;

    // nanoGPT saves lm_head.weight even though it is tied; an untied one is honoured. Compared
    // a block of rows at a time, so that neither copy is ever whole in memory.
    let (unembedding, copies): (_, &[&str]) = match reader.has("lm_head.weight") {
        true => match reader.same_values(&embedding, "lm_head.weight", vocab, d_model)? {
            true => (None, &["lm_head.weight"]),
            false => (Some("lm_head.weight".to_string()), &[]),
        },
        false => (None, &[]),
    };
    Ok(Blueprint {
        config,
        positions: Some(format!("{prefix}wpe.weight")),
        embedding_norm: None,
        embedding,
        unembedding,
        unembedding_bias: None,
        final_norm: Some(format!("{prefix}ln_f")),
        layers: Box::new(Gpt2Layers { prefix: prefix.into(), linear_layout }),
        vocab_strings: None,
        facts: Vec::new(),
        parameter_count: reader.parameter_count(copies),
    })
}

/// Layers under `prefix` (`transformer.` or none); `linear_layout`: nanoGPT's out x in weights
/// rather than Hugging Face's Conv1D in x out.
struct Gpt2Layers {
    prefix: String,
    linear_layout: bool,
}

impl LayerMap for Gpt2Layers {
    fn layer(&self, reader: &mut Reader, config: &ModelConfig, l: usize, parts: LoadParts) -> Result<Layer> {
        layer(reader, config, &self.prefix, self.linear_layout, l, parts)
    }
}

fn layer(
    reader: &mut Reader,
    config: &ModelConfig,
    prefix: &str,
    linear_layout: bool,
    l: usize,
    parts: LoadParts,
) -> Result<Layer> {
    let ModelConfig { d_model, d_mlp, .. } = *config;
    // Reads a weight as the in x out map whichever layout the file uses.
    let weight = |reader: &mut Reader, name: &str, d_in: usize, d_out: usize| {
        if linear_layout { reader.linear(name, d_in, d_out) } else { reader.matrix(name, d_in, d_out) }
    };
    let p = format!("{prefix}h.{l}");
    let qkv = weight(reader, &format!("{p}.attn.c_attn.weight"), d_model, 3 * d_model)?;
    let qkv_bias = reader.optional_vector(&format!("{p}.attn.c_attn.bias"), 3 * d_model)?;
    let attention = Attention {
        w_q: qkv.columns(0, d_model).into_owned(),
        w_k: qkv.columns(d_model, d_model).into_owned(),
        w_v: qkv.columns(2 * d_model, d_model).into_owned(),
        b_q: qkv_bias.rows(0, d_model).into_owned(),
        b_k: qkv_bias.rows(d_model, d_model).into_owned(),
        b_v: qkv_bias.rows(2 * d_model, d_model).into_owned(),
        w_o: weight(reader, &format!("{p}.attn.c_proj.weight"), d_model, d_model)?,
        b_o: reader.optional_vector(&format!("{p}.attn.c_proj.bias"), d_model)?,
        q_norm: None,
        k_norm: None,
    };
    let mlp = match parts {
        LoadParts::Circuits => None,
        LoadParts::Everything => Some(Mlp {
            w_in: weight(reader, &format!("{p}.mlp.c_fc.weight"), d_model, d_mlp)?,
            b_in: reader.optional_vector(&format!("{p}.mlp.c_fc.bias"), d_mlp)?,
            w_gate: None,
            w_out: weight(reader, &format!("{p}.mlp.c_proj.weight"), d_mlp, d_model)?,
            b_out: reader.optional_vector(&format!("{p}.mlp.c_proj.bias"), d_model)?,
        }),
    };
    Ok(Layer {
        ln1: Some(reader.norm(&format!("{p}.ln_1"), d_model, NormKind::LayerNorm)?),
        attention,
        ln2: Some(reader.norm(&format!("{p}.ln_2"), d_model, NormKind::LayerNorm)?),
        attention_out_norm: None,
        mlp_out_norm: None,
        mlp,
        experts: None,
    })
}
