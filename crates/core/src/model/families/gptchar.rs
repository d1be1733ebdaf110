//! Karpathy's "Let's build GPT" gpt.py character model: no config file, so every
//! hyperparameter comes from tensor shapes and key names; the characters travel in the
//! file's metadata under `vocab`.

use nalgebra::{DMatrix, DVector};

use super::super::{
    Activation, Attention, Blueprint, Layer, LayerMap, LoadParts, Mlp, MlpKind, ModelConfig, NormKind, Positions,
    Reader, Sources, check_dimensions, count_indexed,
};
use super::{Family, Marker};
use crate::{Error, Result};

pub(super) const FAMILY: Family = Family {
    name: "gptchar",
    model_types: &["gptchar"],
    marker: Some(Marker::Tensor("token_embedding_table.weight")),
    mlp_parts: &[".ffwd."],
    blueprint: |reader, _| blueprint(reader),
};

/// The numbers all come from the tensors.
const SOURCES: Sources = Sources {
    heads: "heads in the tensor names",
    kv_heads: "heads in the tensor names",
    head_dim: "query rows",
    free_head_dim: false,
    from_config: false,
};

fn blueprint(reader: &Reader) -> Result<Blueprint> {
    let names = reader.names();
    let [vocab, d_model] = reader.matrix_shape("token_embedding_table.weight", "[vocab, n_embd]")?;
    let [context, _] = reader.matrix_shape("position_embedding_table.weight", "[block_size, n_embd]")?;
    let layers = count_indexed(&names, "blocks.")?;
    let heads = count_indexed(&names, "blocks.0.sa.heads.")?;
    let [d_head, _] = reader.matrix_shape("blocks.0.sa.heads.0.query.weight", "[head_size, n_embd]")?;
    let [d_mlp, _] = reader.matrix_shape("blocks.0.ffwd.net.0.weight", "[4 n_embd, n_embd]")?;
    let config = ModelConfig {
        family: "gptchar".into(),
        layers,
        heads,
        kv_heads: heads,
        d_model,
        d_head,
        d_mlp,
        vocab,
        context: Some(context),
        norm: NormKind::LayerNorm,
        norm_eps: 1e-5,
        positions: Positions::Learned,
        mlp: MlpKind::Plain(Activation::Relu),
        parallel_residual: false,
        features: Default::default(),
        bos_token_id: None,
        config_special_ids: Vec::new(),
        characters: true,
    };
    check_dimensions(&config, &SOURCES)?;

    let vocab_strings = match reader.metadata("vocab") {
        Some(text) => {
            let list: Vec<String> = serde_json::from_str(&text).map_err(|e| {
                Error::BadModel(format!("the file's metadata `vocab` is not a JSON list of strings: {e}"))
            })?;
            if list.len() != vocab {
                return Err(Error::BadModel(format!(
                    "the file's metadata `vocab` has {} entries, the embedding has {vocab} rows",
                    list.len()
                )));
            }
            Some(list)
        }
        None => None,
    };
    let facts = ["steps", "tokens_seen", "val_loss", "seed", "trained_with"]
        .iter()
        .filter_map(|k| reader.metadata(k).map(|v| (k.to_string(), v)))
        .collect();
    Ok(Blueprint {
        config,
        embedding: "token_embedding_table.weight".into(),
        positions: Some("position_embedding_table.weight".into()),
        embedding_norm: None,
        unembedding: Some("lm_head.weight".into()),
        unembedding_bias: Some("lm_head.bias".into()),
        final_norm: Some("ln_f".into()),
        layers: Box::new(GptCharLayers),
        vocab_strings,
        facts,
        parameter_count: reader.parameter_count(&[]),
    })
}

struct GptCharLayers;

impl LayerMap for GptCharLayers {
    /// Layer `l`: one tensor per head for each of query, key and value, stacked here.
    fn layer(&self, reader: &mut Reader, config: &ModelConfig, l: usize, parts: LoadParts) -> Result<Layer> {
        layer(reader, config, l, parts)
    }
}

fn layer(reader: &mut Reader, config: &ModelConfig, l: usize, parts: LoadParts) -> Result<Layer> {
    let ModelConfig { d_model, heads, d_head, d_mlp, .. } = *config;
    let prefix = format!("blocks.{l}");
    let mut per_head = |kind: &str| -> Result<DMatrix<f32>> {
        let mut stacked = DMatrix::zeros(d_model, heads * d_head);
        for h in 0..heads {
            let w = reader.linear(&format!("{prefix}.sa.heads.{h}.{kind}.weight"), d_model, d_head)?;
            stacked.columns_mut(h * d_head, d_head).copy_from(&w);
        }
        Ok(stacked)
    };
    let w_q = per_head("query")?;
    let w_k = per_head("key")?;
    let w_v = per_head("value")?;
    let attention = Attention {
        w_q,
        b_q: DVector::zeros(heads * d_head),
        w_k,
        b_k: DVector::zeros(heads * d_head),
        w_v,
        b_v: DVector::zeros(heads * d_head),
        w_o: reader.linear(&format!("{prefix}.sa.proj.weight"), heads * d_head, d_model)?,
        b_o: reader.optional_vector(&format!("{prefix}.sa.proj.bias"), d_model)?,
        q_norm: None,
        k_norm: None,
    };
    let mlp = match parts {
        LoadParts::Circuits => None,
        LoadParts::Everything => Some(Mlp {
            w_in: reader.linear(&format!("{prefix}.ffwd.net.0.weight"), d_model, d_mlp)?,
            b_in: reader.optional_vector(&format!("{prefix}.ffwd.net.0.bias"), d_mlp)?,
            w_gate: None,
            w_out: reader.linear(&format!("{prefix}.ffwd.net.2.weight"), d_mlp, d_model)?,
            b_out: reader.optional_vector(&format!("{prefix}.ffwd.net.2.bias"), d_model)?,
        }),
    };
    Ok(Layer {
        ln1: Some(reader.norm(&format!("{prefix}.ln1"), d_model, NormKind::LayerNorm)?),
        attention,
        ln2: Some(reader.norm(&format!("{prefix}.ln2"), d_model, NormKind::LayerNorm)?),
        attention_out_norm: None,
        mlp_out_norm: None,
        mlp,
        experts: None,
    })
}
