//! GPT-Neo: learned positions (`wpe`), unbiased query/key/value projections under
//! `attn.attention.` with a biased `out_proj`, a plain MLP (`c_fc`, `c_proj` as nn.Linear), a
//! tied unembedding, no 1/sqrt(d_head) on the attention scores, and local layers (a window of
//! `window_size`) alternating with global ones as `attention_types` lists them.

use super::super::{
    Activation, Blueprint, Error, MlpKind, NormKind, Positions, Reader, Sources, check_dimensions, config_f32,
    config_usize,
};
use super::{Family, Layout, MlpNames, QkvNames, Sizes, activation, config_from, layer_attention, require};
use crate::Result;

pub(super) const FAMILY: Family =
    Family { name: "gptneo", model_types: &["gpt_neo"], marker: None, mlp_parts: &[".mlp."], blueprint };

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "GPT-Neo")?;
    let sizes = Sizes::read(reader, json, "transformer.wte.weight", "transformer.h.")?;
    let [context, _] = reader.matrix_shape("transformer.wpe.weight", "[max_position_embeddings, hidden_size]")?;
    let window = config_usize(json, &["window_size"]).unwrap_or(256);
    let windows = attention_layers(json, sizes.layers)?.into_iter().map(|local| local.then_some(window)).collect();
    let config = super::super::ModelConfig {
        context: Some(context),
        norm: NormKind::LayerNorm,
        norm_eps: config_f32(json, "layer_norm_epsilon", 1e-5),
        positions: Positions::Learned,
        mlp: MlpKind::Plain(activation(json, &["activation_function"], Activation::GeluTanh)?),
        features: super::super::Features {
            attention_scale: Some(1.0),
            layers: layer_attention(windows, vec![None; sizes.layers]),
            ..Default::default()
        },
        ..config_from("gptneo", &sizes, json)
    };
    check_dimensions(&config, &Sources::HF_SPLIT)?;
    let layout = Layout {
        prefix: "transformer.h.".into(),
        qkv: QkvNames::Separate { q: "attn.attention.q_proj", k: "attn.attention.k_proj", v: "attn.attention.v_proj" },
        o: "attn.attention.out_proj",
        ln1: Some("ln_1"),
        ln2: Some("ln_2"),
        mlp: MlpNames::Plain { w_in: "mlp.c_fc", w_out: "mlp.c_proj" },
        ..Layout::llama()
    };
    let unembedding = super::unembedding(reader, json, true);
    let mut blueprint =
        Blueprint::new(config, "transformer.wte.weight", unembedding, "transformer.ln_f", layout, reader);
    blueprint.positions = Some("transformer.wpe.weight".into());
    Ok(blueprint)
}

/// Which layers are local, from `attention_types` (`[[["global", "local"], 12]]`: the pair
/// repeated 12 times), or `attention_layers` where the file lists each layer.
fn attention_layers(json: &serde_json::Value, layers: usize) -> Result<Vec<bool>> {
    let bad = |what: String| Error::BadConfig(format!("`attention_types` {what}"));
    let kinds: Vec<String> = match (json.get("attention_layers"), json.get("attention_types")) {
        (Some(serde_json::Value::Array(each)), _) => {
            each.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()
        }
        (_, Some(serde_json::Value::Array(groups))) => {
            let mut kinds = Vec::new();
            for group in groups {
                let (Some(pattern), Some(times)) =
                    (group.get(0).and_then(|p| p.as_array()), group.get(1).and_then(|t| t.as_u64()))
                else {
                    return Err(bad(format!("holds {group}, not [[kinds], count]")));
                };
                for _ in 0..times.min(layers as u64 + 1) {
                    kinds.extend(pattern.iter().filter_map(|k| k.as_str().map(str::to_string)));
                }
            }
            kinds
        }
        _ => (0..layers).map(|l| if l % 2 == 0 { "global" } else { "local" }.to_string()).collect(),
    };
    if kinds.len() != layers {
        return Err(bad(format!("gives {} layers but the model has {layers}", kinds.len())));
    }
    kinds
        .iter()
        .map(|k| match k.as_str() {
            "global" => Ok(false),
            "local" => Ok(true),
            other => Err(bad(format!("holds \"{other}\": GPT-Neo's layers are \"global\" or \"local\""))),
        })
        .collect()
}
