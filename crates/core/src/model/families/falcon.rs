//! Falcon, in its three layouts of the fused `query_key_value` (as transformers splits them):
//! per head [q, k, v] (the original architecture without multi-query), multi-query [Q; k; v],
//! and the new decoder architecture's per key/value group [q x (heads / kv_heads), k, v].
//! Blocks are parallel (one norm shared, or `ln_attn` and `ln_mlp`) or sequential
//! (`post_attention_layernorm`); positions are rotary or ALiBi (the bias added before the
//! 1/sqrt(d_head) scale, its slopes in bf16, as Falcon computes them). Checkpoints saved for
//! Falcon's own code before transformers took it in say `RefinedWebModel` (7B's layout) or
//! `RefinedWeb` (40B's) and `n_head_kv`; their layout is read from the tensors they hold.

use super::super::{
    Activation, Blueprint, MlpKind, ModelConfig, NormKind, Positions, Reader, Sources, check_dimensions, config_f32,
    config_usize,
};
use super::{Family, FusedQkv, Layout, MlpNames, QkvNames, Sizes, activation, config_from, flag, require};
use crate::Result;

pub(super) const FAMILY: Family = Family {
    name: "falcon",
    model_types: &["falcon", "RefinedWebModel", "RefinedWeb"],
    marker: None,
    mlp_parts: &[".mlp."],
    blueprint,
};

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "Falcon")?;
    let mut sizes = Sizes::read(reader, json, "transformer.word_embeddings.weight", "transformer.h.")?;
    // Falcon's MLP width is its own key (4 x the width by default), not `intermediate_size`.
    sizes.d_mlp = config_usize(json, &["ffn_hidden_size"]).unwrap_or(4 * sizes.d_model);
    // Falcon's own code kept the new architecture's two norms (`ln_attn`, `ln_mlp`) without
    // the flag that transformers later added.
    let refined_web = super::text(json, "model_type").is_some_and(|t| t.starts_with("RefinedWeb"));
    let new_architecture =
        flag(json, "new_decoder_architecture", false) || (refined_web && reader.has("transformer.h.0.ln_attn.weight"));
    let multi_query = flag(json, "multi_query", true);
    let parallel = flag(json, "parallel_attn", true);
    sizes.kv_heads = match (new_architecture, multi_query) {
        (true, _) => config_usize(json, &["num_kv_heads", "n_head_kv"]).unwrap_or(sizes.heads),
        (false, true) => 1,
        (false, false) => sizes.heads,
    };
    // The new architecture's two norms by default; otherwise one, shared when parallel.
    let norms_in_parallel =
        config_usize(json, &["num_ln_in_parallel_attn"]).unwrap_or(if new_architecture { 2 } else { 1 });
    let two_norms = new_architecture && norms_in_parallel == 2;
    let parallel_block = new_architecture || parallel;
    let positions = match flag(json, "alibi", false) {
        true => Positions::Alibi { before_scale: true },
        false => super::rotary(json, sizes.d_head, false)?,
    };
    let config = ModelConfig {
        norm: NormKind::LayerNorm,
        norm_eps: config_f32(json, "layer_norm_epsilon", 1e-5),
        positions,
        mlp: MlpKind::Plain(activation(json, &["activation"], Activation::GeluErf)?),
        parallel_residual: parallel_block,
        features: super::super::Features { shared_norm: parallel_block && !two_norms, ..Default::default() },
        ..config_from("falcon", &sizes, json)
    };
    check_dimensions(&config, &Sources::HF_SPLIT)?;
    let fused: fn(&ModelConfig) -> FusedQkv = match (new_architecture, multi_query) {
        (true, _) => FusedQkv::per_group,
        (false, true) => FusedQkv::stacked,
        (false, false) => FusedQkv::per_head,
    };
    let (ln1, ln2) = match (two_norms, parallel_block) {
        (true, _) => ("ln_attn", Some("ln_mlp")),
        (false, true) => ("input_layernorm", None),
        (false, false) => ("input_layernorm", Some("post_attention_layernorm")),
    };
    let layout = Layout {
        prefix: "transformer.h.".into(),
        qkv: QkvNames::Fused { name: "self_attention.query_key_value", layout: fused },
        o: "self_attention.dense",
        ln1: Some(ln1),
        ln2,
        mlp: MlpNames::Plain { w_in: "mlp.dense_h_to_4h", w_out: "mlp.dense_4h_to_h" },
        ..Layout::llama()
    };
    let unembedding = super::unembedding(reader, json, true);
    Ok(Blueprint::new(config, "transformer.word_embeddings.weight", unembedding, "transformer.ln_f", layout, reader))
}
