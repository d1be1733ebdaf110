//! A TransformerLens `HookedTransformer` as its Python object holds it, handed over by the Python
//! package (`python/headprint/_readers.py`), which writes this layout from the model's
//! attributes. The config is the model's `cfg`; the tensors keep TransformerLens's names and
//! shapes, with two departures that let the streaming reader treat them as it treats every
//! other family:
//! - norms are `blocks.{l}.ln1.weight` / `.bias` (TransformerLens's `w` / `b`), and absent for
//!   the weightless `LNPre` / `RMSPre` that `fold_ln` leaves;
//! - `unembed.W_U` is [d_vocab, d_model], TransformerLens's W_U transposed, so that the
//!   vocabulary is read a block of rows at a time.
//!
//! Attention weights stay per head ([heads, d_model, d_head], W_O [heads, d_head, d_model]). K
//! and V come as the model's `W_K` / `W_V` properties give them, grouped-query heads already
//! repeated, so every head has its own.

use nalgebra::DMatrix;

use super::super::{
    Activation, Attention, Blueprint, Layer, LayerMap, LoadParts, Mlp, MlpKind, ModelConfig, Norm, NormKind, Positions,
    Reader, RopeScaling, Sources, check_dimensions, config_f32, config_usize,
};
use super::{Family, flag, refuse_set, require, text};
use crate::{Error, Result};

pub(super) const FAMILY: Family = Family {
    name: "transformer_lens",
    model_types: &["hooked_transformer"],
    marker: None,
    mlp_parts: &[".mlp."],
    blueprint,
};

const SOURCES: Sources = Sources {
    heads: "cfg.n_heads",
    kv_heads: "cfg.n_heads",
    head_dim: "cfg.d_head",
    free_head_dim: true,
    from_config: true,
};

/// What `cfg` may switch on that headprint does not compute: refused by name, never ignored.
const REFUSED: &[(&str, &str)] = &[
    ("use_normalization_before_and_after", "norms after attention and the MLP are not read from a HookedTransformer"),
    ("attn_scores_soft_cap", "soft-capped attention scores are not read from a HookedTransformer"),
    ("output_logits_soft_cap", "soft-capped logits are not read from a HookedTransformer"),
    ("use_qk_norm", "query and key norms are not read from a HookedTransformer"),
    ("use_local_attn", "local attention is not read from a HookedTransformer"),
    ("num_experts", "mixtures of experts are not read from a HookedTransformer"),
    ("post_embedding_ln", "a norm after the embedding is not read from a HookedTransformer"),
    ("scale_attn_by_inverse_layer_idx", "scaling attention by the layer index is not implemented"),
    ("use_logn_attn", "log-n attention scaling is not implemented"),
    ("use_NTK_by_parts_rope", "NTK-by-parts rotary scaling is not read from a HookedTransformer"),
    ("use_dynamic_ntk_rope", "dynamic NTK rotary scaling is not implemented"),
    ("use_yarn_rope", "YaRN rotary scaling is not read from a HookedTransformer"),
    ("use_attention_sinks", "attention sinks are not implemented"),
    ("clip_qkv", "clipping the queries, keys and values is not implemented"),
];

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let cfg = require(config, "TransformerLens")?;
    for (key, why) in REFUSED {
        // TransformerLens writes 0 or -1 for a soft cap that is off.
        let off = cfg.get(*key).and_then(|v| v.as_f64()).is_some_and(|v| v <= 0.0);
        if !off {
            refuse_set(cfg, key, why)?;
        }
    }
    if text(cfg, "attention_dir").is_some_and(|d| d != "causal") {
        return Err(Error::BadConfig("cfg.attention_dir must be \"causal\": headprint reads decoders".into()));
    }
    let (layers, heads, d_model, d_head, vocab) = (
        config_usize(cfg, &["n_layers"])?,
        config_usize(cfg, &["n_heads"])?,
        config_usize(cfg, &["d_model"])?,
        config_usize(cfg, &["d_head"])?,
        config_usize(cfg, &["d_vocab"])?,
    );
    if cfg.get("d_vocab_out").and_then(|v| v.as_u64()).is_some_and(|out| out as usize != vocab) {
        return Err(Error::BadConfig(
            "cfg.d_vocab_out differs from cfg.d_vocab: the unembedding must read the embedding's tokens".into(),
        ));
    }
    let attention_only = flag(cfg, "attn_only", false);
    let d_mlp = if attention_only { 0 } else { config_usize(cfg, &["d_mlp"])? };
    let normalization = text(cfg, "normalization_type").unwrap_or("LN");
    let (norm, weighted) = match normalization {
        "LN" => (NormKind::LayerNorm, true),
        "LNPre" => (NormKind::LayerNorm, false),
        "RMS" => (NormKind::RmsNorm, true),
        "RMSPre" => (NormKind::RmsNorm, false),
        other => {
            return Err(Error::BadConfig(format!(
                "cfg.normalization_type {other} is not read (LN, LNPre, RMS and RMSPre are)"
            )));
        }
    };
    if flag(cfg, "final_rms", false) && norm == NormKind::LayerNorm {
        return Err(Error::BadConfig("cfg.final_rms with LayerNorm blocks is not implemented".into()));
    }
    let activation = match text(cfg, "act_fn") {
        Some(name) => Activation::from_name(name, "cfg.act_fn")?,
        None if attention_only => Activation::GeluTanh,
        None => return Err(Error::BadConfig("missing `act_fn`".into())),
    };
    let (positions, context) = match text(cfg, "positional_embedding_type").unwrap_or("standard") {
        "standard" => (Positions::Learned, Some(config_usize(cfg, &["n_ctx"])?)),
        "rotary" => {
            let dims = config_usize(cfg, &["rotary_dim"]).unwrap_or(d_head);
            let base = config_f32(cfg, "rotary_base", 10000.0);
            let interleaved = flag(cfg, "rotary_adjacent_pairs", false);
            (Positions::Rotary { dims, base, scaling: RopeScaling::None, interleaved }, None)
        }
        other => {
            return Err(Error::BadConfig(format!(
                "cfg.positional_embedding_type {other} is not read (standard and rotary are)"
            )));
        }
    };
    let mut config = ModelConfig {
        family: "transformer_lens".into(),
        layers,
        heads,
        kv_heads: heads,
        d_model,
        d_head,
        d_mlp,
        vocab,
        context,
        norm,
        norm_eps: config_f32(cfg, "eps", 1e-5),
        positions,
        mlp: if flag(cfg, "gated_mlp", false) { MlpKind::Gated(activation) } else { MlpKind::Plain(activation) },
        parallel_residual: flag(cfg, "parallel_attn_mlp", false),
        features: Default::default(),
        bos_token_id: None,
        config_special_ids: Vec::new(),
        characters: false,
    };
    config.features.attention_only = attention_only;
    // TransformerLens divides the scores by `attn_scale` (√d_head unless set), or by nothing.
    config.features.attention_scale = Some(match flag(cfg, "use_attn_scale", true) {
        true => 1.0 / config_f32(cfg, "attn_scale", (d_head as f32).sqrt()),
        false => 1.0,
    });
    check_dimensions(&config, &SOURCES)?;
    let mut blueprint = Blueprint::new(
        config,
        "embed.W_E",
        Some("unembed.W_U".into()),
        "ln_final",
        TransformerLensLayers { weighted, attention_only },
        reader,
    );
    blueprint.positions = matches!(blueprint.config.positions, Positions::Learned).then(|| "pos_embed.W_pos".into());
    blueprint.unembedding_bias = Some("unembed.b_U".into());
    blueprint.final_norm = weighted.then(|| "ln_final".into());
    Ok(blueprint)
}

/// Whether the norms have weights (`LN`, `RMS`), and whether the blocks have MLPs.
struct TransformerLensLayers {
    weighted: bool,
    attention_only: bool,
}

impl TransformerLensLayers {
    fn norm(&self, reader: &mut Reader, prefix: &str, config: &ModelConfig) -> Result<Norm> {
        match self.weighted {
            true => reader.model_norm(prefix, config),
            false => Ok(Norm { weight: nalgebra::DVector::from_element(config.d_model, 1.0), bias: None }),
        }
    }
}

/// A per-head weight [heads, rows, cols] as one matrix: `rows x (heads · cols)` with head h's
/// columns at h · cols (W_Q, W_K, W_V), or `(heads · rows) x cols` with its rows at h · rows
/// (W_O, whose stored bytes are already that matrix).
fn per_head(
    reader: &mut Reader,
    name: &str,
    [heads, rows, cols]: [usize; 3],
    side_by_side: bool,
) -> Result<DMatrix<f32>> {
    let tensor = reader.tensor(name, &[heads, rows, cols])?;
    if !side_by_side {
        return Ok(DMatrix::from_row_slice(heads * rows, cols, &tensor.data));
    }
    Ok(DMatrix::from_fn(rows, heads * cols, |r, c| tensor.data[(c / cols) * rows * cols + r * cols + c % cols]))
}

impl LayerMap for TransformerLensLayers {
    fn layer(&self, reader: &mut Reader, config: &ModelConfig, l: usize, parts: LoadParts) -> Result<Layer> {
        let ModelConfig { heads, d_model, d_head, d_mlp, .. } = *config;
        let p = format!("blocks.{l}");
        let input = |reader: &mut Reader, which: &str| {
            per_head(reader, &format!("{p}.attn.W_{which}"), [heads, d_model, d_head], true)
        };
        let bias = |reader: &mut Reader, which: &str| -> Result<nalgebra::DVector<f32>> {
            let name = format!("{p}.attn.b_{which}");
            match reader.has(&name) {
                true => Ok(nalgebra::DVector::from_vec(reader.tensor(&name, &[heads, d_head])?.data)),
                false => Ok(nalgebra::DVector::zeros(heads * d_head)),
            }
        };
        let attention = Attention {
            w_q: input(reader, "Q")?,
            b_q: bias(reader, "Q")?,
            w_k: input(reader, "K")?,
            b_k: bias(reader, "K")?,
            w_v: input(reader, "V")?,
            b_v: bias(reader, "V")?,
            w_o: per_head(reader, &format!("{p}.attn.W_O"), [heads, d_head, d_model], false)?,
            b_o: reader.optional_vector(&format!("{p}.attn.b_O"), d_model)?,
            q_norm: None,
            k_norm: None,
        };
        let mlp = match (parts, self.attention_only) {
            (LoadParts::Everything, false) => Some(self.mlp(reader, config, &p, d_mlp)?),
            _ => None,
        };
        Ok(Layer {
            ln1: Some(self.norm(reader, &format!("{p}.ln1"), config)?),
            attention,
            ln2: (!self.attention_only).then(|| self.norm(reader, &format!("{p}.ln2"), config)).transpose()?,
            attention_out_norm: None,
            mlp_out_norm: None,
            mlp,
            experts: None,
        })
    }
}

impl TransformerLensLayers {
    fn mlp(&self, reader: &mut Reader, config: &ModelConfig, p: &str, d_mlp: usize) -> Result<Mlp> {
        let d_model = config.d_model;
        let b_in = reader.optional_vector(&format!("{p}.mlp.b_in"), d_mlp)?;
        let w_gate = match config.mlp {
            MlpKind::Gated(_) => {
                // TransformerLens adds a gated MLP's b_in after the gate's product, where every
                // other family adds it to the up projection; only a zero bias means the same.
                if b_in.iter().any(|&b| b != 0.0) {
                    return Err(Error::BadModel(format!(
                        "{p}.mlp.b_in is not zero: TransformerLens's gated MLP adds it after the gate, which headprint does not compute"
                    )));
                }
                Some(reader.matrix(&format!("{p}.mlp.W_gate"), d_model, d_mlp)?)
            }
            _ => None,
        };
        Ok(Mlp {
            w_in: reader.matrix(&format!("{p}.mlp.W_in"), d_model, d_mlp)?,
            b_in,
            w_gate,
            w_out: reader.matrix(&format!("{p}.mlp.W_out"), d_mlp, d_model)?,
            b_out: reader.optional_vector(&format!("{p}.mlp.b_out"), d_model)?,
        })
    }
}
