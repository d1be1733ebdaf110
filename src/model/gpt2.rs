//! GPT-2: Hugging Face's Conv1D layout (weights stored in x out, fused QKV, unembedding tied
//! to `wte`) and nanoGPT's nn.Linear variant (out x in), told apart by the fused QKV shape.

use super::{
    Activation, Attention, Family, Layer, LoadParts, Mlp, Model, ModelConfig, NormKind, Positions, Reader,
    check_dimensions, config_agrees, config_f32, config_usize, count_indexed,
};
use crate::{Error, Result};

pub(super) fn load(reader: &mut Reader, config_json: Option<&serde_json::Value>, parts: LoadParts) -> Result<Model> {
    let names = reader.names();
    let prefix = if reader.has("transformer.wte.weight") { "transformer." } else { "" };
    let [vocab, d_model] = reader.matrix_shape(&format!("{prefix}wte.weight"), "[vocab, n_embd]")?;
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
        family: Family::Gpt2,
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
        activation,
        parallel_residual: false,
        bos_token_id: None,
        config_special_ids: Vec::new(),
    };
    check_dimensions(&config)?;

    // Reads a weight as the in x out map whichever layout the file uses.
    let weight = |reader: &mut Reader, name: &str, d_in: usize, d_out: usize| {
        if linear_layout { reader.linear(name, d_in, d_out) } else { reader.matrix(name, d_in, d_out) }
    };
    let w_e = reader.matrix(&format!("{prefix}wte.weight"), vocab, d_model)?;
    let w_pos = reader.matrix(&format!("{prefix}wpe.weight"), context, d_model)?;
    let mut layer_list = Vec::with_capacity(layers);
    for l in 0..layers {
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
        layer_list.push(Layer {
            ln1: reader.norm(&format!("{p}.ln_1"), d_model, NormKind::LayerNorm)?,
            attention,
            ln2: reader.norm(&format!("{p}.ln_2"), d_model, NormKind::LayerNorm)?,
            mlp,
        });
    }
    // nanoGPT saves lm_head.weight even though it is tied; an untied one is honoured.
    let (w_u, copies): (_, &[&str]) = match reader.has("lm_head.weight") {
        true => {
            let head = reader.matrix("lm_head.weight", vocab, d_model)?;
            if head == w_e { (None, &["lm_head.weight"]) } else { (Some(head.transpose()), &[]) }
        }
        false => (None, &[]),
    };
    Ok(Model {
        w_e,
        w_pos: Some(w_pos),
        layers: layer_list,
        ln_final: reader.norm(&format!("{prefix}ln_f"), d_model, NormKind::LayerNorm)?,
        w_u,
        b_u: None,
        vocab_strings: None,
        facts: Vec::new(),
        parameter_count: reader.parameter_count(copies),
        config,
    })
}
