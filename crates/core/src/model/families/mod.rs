//! The registry of model families: one file each, declaring its config.json `model_type`s, how
//! to recognise its files without one, the name parts of its MLP tensors, and the function that
//! reads its configuration into the shared description. Detection and the streaming plan
//! iterate over this list; nothing outside these files names a family.
//!
//! Most families lay a layer out the way Llama does, with other names: [`Layout`] reads any of
//! them from a table of names, so a family file is its config keys, its features and that table.

mod bloom;
mod deepseek;
mod falcon;
mod gemma;
mod gpt2;
mod gptchar;
mod gptj;
mod gptneo;
mod granite;
mod llama;
mod mistral;
mod mixtral;
mod neox;
mod olmo;
mod opt;
mod phi;
mod phi3;
mod qwen;
mod smollm3;
mod stablelm;
mod transformer_lens;

use nalgebra::{DMatrix, DVector};

use super::{
    Attention, Blueprint, Experts, Layer, LayerAttention, LayerMap, LoadParts, Mlp, ModelConfig, Norm, Positions,
    Reader, rope_settings,
};
use crate::weights::TensorStore;
use crate::{Error, Result};

/// How a family's files are recognised when config.json has no `model_type`.
pub(crate) enum Marker {
    /// A tensor of exactly this name.
    Tensor(&'static str),
    /// A tensor whose name ends so.
    Suffix(&'static str),
}

/// One model family's file, as the registry sees it.
pub(crate) struct Family {
    pub name: &'static str,
    /// config.json `model_type`s it reads.
    pub model_types: &'static [&'static str],
    pub marker: Option<Marker>,
    /// Parts of the names of its MLP and expert tensors: what a fingerprint never reads.
    pub mlp_parts: &'static [&'static str],
    pub blueprint: fn(&Reader, Option<&serde_json::Value>) -> Result<Blueprint>,
}

/// Every family, in the order their markers are tried.
const FAMILIES: &[&Family] = &[
    &gptchar::FAMILY,
    &gpt2::FAMILY,
    &neox::FAMILY,
    &llama::FAMILY,
    &mistral::FAMILY,
    &mixtral::FAMILY,
    &qwen::QWEN2,
    &qwen::QWEN3,
    &gemma::GEMMA,
    &gemma::GEMMA2,
    &gemma::GEMMA3,
    &phi::FAMILY,
    &phi3::FAMILY,
    &olmo::OLMO,
    &olmo::OLMO2,
    &gptj::FAMILY,
    &gptneo::FAMILY,
    &opt::FAMILY,
    &stablelm::FAMILY,
    &bloom::FAMILY,
    &falcon::FAMILY,
    &granite::FAMILY,
    &smollm3::FAMILY,
    &deepseek::FAMILY,
    &transformer_lens::FAMILY,
];

/// The family of a checkpoint: config.json's `model_type` when it has one, else the first
/// family whose marker tensor the files hold.
pub(super) fn detect(store: &TensorStore, config: Option<&serde_json::Value>) -> Result<&'static Family> {
    if let Some(model_type) = config.and_then(|c| c.get("model_type")).and_then(|v| v.as_str()) {
        return FAMILIES.iter().copied().find(|f| f.model_types.contains(&model_type)).ok_or_else(|| {
            let known: Vec<&str> = FAMILIES.iter().flat_map(|f| f.model_types.iter().copied()).collect();
            Error::UnknownFamily(format!(
                "config.json says model_type \"{model_type}\"; headprint reads {}",
                known.join(", ")
            ))
        });
    }
    let found = FAMILIES.iter().copied().find(|f| match f.marker {
        Some(Marker::Tensor(name)) => store.contains(name),
        Some(Marker::Suffix(suffix)) => store.names().any(|n| n.ends_with(suffix)),
        None => false,
    });
    found.ok_or_else(|| {
        let mut sample: Vec<&str> = store.names().collect();
        sample.sort();
        sample.truncate(3);
        Error::UnknownFamily(format!("no known tensor names (first names: {})", sample.join(", ")))
    })
}

/// Whether a tensor is an MLP's or an expert's, by any family's name parts.
pub(super) fn is_mlp(name: &str) -> bool {
    FAMILIES.iter().any(|f| f.mlp_parts.iter().any(|part| name.contains(part)))
}

/// config.json, which every family but the character model needs.
pub(super) fn require<'a>(config: Option<&'a serde_json::Value>, family: &str) -> Result<&'a serde_json::Value> {
    config.ok_or_else(|| Error::BadConfig(format!("a {family} model needs its config.json beside the weights")))
}

/// A string field of config.json.
pub(super) fn text<'a>(config: &'a serde_json::Value, key: &str) -> Option<&'a str> {
    config.get(key).and_then(|v| v.as_str())
}

/// A boolean field of config.json (absent or null: `default`).
pub(super) fn flag(config: &serde_json::Value, key: &str, default: bool) -> bool {
    config.get(key).and_then(|v| v.as_bool()).unwrap_or(default)
}

/// A number field of config.json that must be absent or null: headprint does not implement it,
/// and ignoring it would give wrong numbers silently.
pub(super) fn refuse_set(config: &serde_json::Value, key: &str, why: &str) -> Result<()> {
    match config.get(key) {
        None | Some(serde_json::Value::Null) | Some(serde_json::Value::Bool(false)) => Ok(()),
        Some(value) => Err(Error::BadConfig(format!("config.json sets `{key}` to {value}: {why}"))),
    }
}

/// A positive number field of config.json, when present and not null.
pub(super) fn positive(config: &serde_json::Value, key: &str) -> Result<Option<f32>> {
    match config.get(key) {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(value) => match value.as_f64() {
            Some(v) if v.is_finite() && v > 0.0 => Ok(Some(v as f32)),
            _ => Err(Error::BadConfig(format!("`{key}` is {value}, not a positive number"))),
        },
    }
}

/// The rotary embedding over `fraction` of each head (config.json's `partial_rotary_factor`,
/// top level or under `rope_parameters`), with the base and scaling of [`rope_settings`].
pub(super) fn rotary(config: &serde_json::Value, d_head: usize, interleaved: bool) -> Result<Positions> {
    let fraction = config
        .get("rope_parameters")
        .and_then(|r| r.get("partial_rotary_factor"))
        .or_else(|| config.get("partial_rotary_factor"))
        .and_then(|v| v.as_f64())
        .unwrap_or(1.0);
    if !(fraction > 0.0 && fraction <= 1.0) {
        return Err(Error::BadConfig(format!(
            "`partial_rotary_factor` {fraction} must be a fraction of the head, above 0 and at most 1"
        )));
    }
    let (base, scaling) = rope_settings(config)?;
    Ok(Positions::Rotary { dims: (d_head as f64 * fraction) as usize, base, scaling, interleaved })
}

/// The sliding window of each layer from config.json: `layer_types` (transformers' list of
/// "sliding_attention" and "full_attention") where the file has it, else `sliding` says which
/// layers slide. A window larger than the context, or one the config enables without a size,
/// is an error naming the key.
pub(super) fn windows(
    config: &serde_json::Value,
    layers: usize,
    sliding: impl Fn(usize) -> bool,
) -> Result<Vec<Option<usize>>> {
    let window = match config.get("sliding_window") {
        None | Some(serde_json::Value::Null) => None,
        Some(value) => match value.as_u64() {
            Some(w) if w > 0 => Some(w as usize),
            _ => return Err(Error::BadConfig(format!("`sliding_window` is {value}, not a positive whole number"))),
        },
    };
    if let (Some(w), Some(context)) = (window, config.get("max_position_embeddings").and_then(|v| v.as_u64()))
        && w as u64 > context
    {
        return Err(Error::BadConfig(format!(
            "`sliding_window` {w} is larger than the context `max_position_embeddings` {context}"
        )));
    }
    let listed = matches!(config.get("layer_types"), Some(serde_json::Value::Array(_)));
    if window.is_none() && !listed {
        return Ok(vec![None; layers]);
    }
    let types = match config.get("layer_types") {
        Some(serde_json::Value::Array(items)) => {
            if items.len() != layers {
                return Err(Error::BadConfig(format!(
                    "`layer_types` lists {} layers but the model has {layers}",
                    items.len()
                )));
            }
            let mut types = Vec::with_capacity(layers);
            for item in items {
                types.push(match item.as_str() {
                    Some("sliding_attention") => true,
                    Some("full_attention") => false,
                    _ => {
                        return Err(Error::BadConfig(format!(
                            "`layer_types` holds {item}: headprint reads \"sliding_attention\" and \"full_attention\""
                        )));
                    }
                });
            }
            types
        }
        _ => (0..layers).map(&sliding).collect(),
    };
    match window {
        Some(w) => Ok(types.into_iter().map(|slides| slides.then_some(w)).collect()),
        None if types.iter().any(|&t| t) => {
            Err(Error::BadConfig("`layer_types` has sliding layers but `sliding_window` gives no size".into()))
        }
        None => Ok(vec![None; layers]),
    }
}

/// Per-layer attention settings from each layer's window (empty where no layer differs).
pub(super) fn layer_attention(windows: Vec<Option<usize>>, positions: Vec<Option<Positions>>) -> Vec<LayerAttention> {
    let layers: Vec<LayerAttention> =
        windows.into_iter().zip(positions).map(|(window, positions)| LayerAttention { window, positions }).collect();
    if layers.iter().all(|l| *l == LayerAttention::default()) { Vec::new() } else { layers }
}

/// The numbers most families' config.json give: width, heads, key/value heads, head width,
/// MLP width, layers (counted from `prefix` in the names) and vocabulary (from `embedding`'s
/// shape), each checked against the tensors.
pub(super) struct Sizes {
    pub d_model: usize,
    pub heads: usize,
    pub kv_heads: usize,
    pub d_head: usize,
    pub d_mlp: usize,
    pub layers: usize,
    pub vocab: usize,
}

impl Sizes {
    pub fn read(reader: &Reader, config: &serde_json::Value, embedding: &str, layer_prefix: &str) -> Result<Sizes> {
        use super::{config_agrees, config_usize, count_indexed};
        let d_model = config_usize(config, &["hidden_size", "n_embd", "n_embed", "d_model"])?;
        let heads = config_usize(config, &["num_attention_heads", "n_head", "num_heads"])?;
        let kv_heads = config_usize(config, &["num_key_value_heads", "num_kv_heads"]).unwrap_or(heads);
        let d_head = match config_usize(config, &["head_dim"]) {
            Ok(d_head) => d_head,
            Err(_) if heads > 0 && !d_model.is_multiple_of(heads) => {
                return Err(Error::BadConfig(format!(
                    "`num_attention_heads` {heads} does not divide `hidden_size` {d_model} (and there is no `head_dim`)"
                )));
            }
            Err(_) => d_model / heads.max(1),
        };
        let [vocab, width] = reader.matrix_shape(embedding, "[vocab_size, hidden_size]")?;
        config_agrees(config, &["hidden_size", "n_embd", "n_embed"], width, "embedding columns (model width)")?;
        config_agrees(config, &["vocab_size"], vocab, "embedding rows (vocabulary)")?;
        let layers = count_indexed(&reader.names(), layer_prefix)?;
        config_agrees(config, &["num_hidden_layers", "n_layer", "num_layers"], layers, "layers")?;
        let d_mlp = config_usize(config, &["intermediate_size", "ffn_dim", "n_inner"]).unwrap_or(4 * d_model);
        Ok(Sizes { d_model, heads, kv_heads, d_head, d_mlp, layers, vocab })
    }
}

/// How a fused query/key/value projection interleaves its rows: in `groups` groups, each of
/// `queries` query heads, then `keys` key heads, then as many value heads.
#[derive(Clone, Copy)]
pub(super) struct FusedQkv {
    pub groups: usize,
    pub queries: usize,
    pub keys: usize,
}

impl FusedQkv {
    /// [Q; K; V] one after the other (Phi-3's `qkv_proj`, Falcon's multi-query layout).
    pub fn stacked(config: &ModelConfig) -> FusedQkv {
        FusedQkv { groups: 1, queries: config.heads, keys: config.kv_heads }
    }
    /// [q, k, v] per head (BLOOM, Falcon's original layout).
    pub fn per_head(config: &ModelConfig) -> FusedQkv {
        FusedQkv { groups: config.heads, queries: 1, keys: 1 }
    }
    /// [q x (heads / kv_heads), k, v] per key/value group (Falcon's new decoder architecture).
    pub fn per_group(config: &ModelConfig) -> FusedQkv {
        FusedQkv { groups: config.kv_heads, queries: config.heads / config.kv_heads.max(1), keys: 1 }
    }
}

/// Names of a layer's query, key and value projections.
pub(super) enum QkvNames {
    /// Three projections (each with an optional bias).
    Separate {
        q: &'static str,
        k: &'static str,
        v: &'static str,
    },
    Fused {
        name: &'static str,
        layout: fn(&ModelConfig) -> FusedQkv,
    },
}

/// Names of a layer's MLP.
pub(super) enum MlpNames {
    /// `act(x W_in) W_out`, each with an optional bias.
    Plain {
        w_in: &'static str,
        w_out: &'static str,
    },
    Gated {
        gate: &'static str,
        up: &'static str,
        down: &'static str,
    },
    /// One projection holding [gate; up] (Phi-3's `gate_up_proj`).
    FusedGateUp {
        gate_up: &'static str,
        down: &'static str,
    },
    /// `{experts}.{e}.{gate|up|down}` and a router (Mixtral's `block_sparse_moe`).
    Experts {
        router: &'static str,
        experts: &'static str,
        gate: &'static str,
        up: &'static str,
        down: &'static str,
    },
}

/// A layer's tensor names, relative to `{prefix}{l}.`; a norm name is the prefix of its
/// `.weight` (and `.bias`).
pub(super) struct Layout {
    pub prefix: String,
    pub qkv: QkvNames,
    pub o: &'static str,
    /// The attention's input norm (None: it reads the stream, or [`Layout::plain_norms`]).
    pub ln1: Option<&'static str>,
    /// The MLP's input norm (None: the stream, or ln1's when the block shares one norm).
    pub ln2: Option<&'static str>,
    pub attention_out_norm: Option<&'static str>,
    pub mlp_out_norm: Option<&'static str>,
    pub q_norm: Option<&'static str>,
    pub k_norm: Option<&'static str>,
    pub mlp: MlpNames,
    /// Norms without weights in the file (OLMo's non-parametric LayerNorm): weight 1, no bias.
    pub plain_norms: bool,
}

impl Layout {
    /// Llama's names under `model.layers.`; a family changes what differs.
    pub fn llama() -> Layout {
        Layout {
            prefix: "model.layers.".into(),
            qkv: QkvNames::Separate { q: "self_attn.q_proj", k: "self_attn.k_proj", v: "self_attn.v_proj" },
            o: "self_attn.o_proj",
            ln1: Some("input_layernorm"),
            ln2: Some("post_attention_layernorm"),
            attention_out_norm: None,
            mlp_out_norm: None,
            q_norm: None,
            k_norm: None,
            mlp: MlpNames::Gated { gate: "mlp.gate_proj", up: "mlp.up_proj", down: "mlp.down_proj" },
            plain_norms: false,
        }
    }

    fn norm(&self, reader: &mut Reader, p: &str, name: Option<&str>, config: &ModelConfig) -> Result<Option<Norm>> {
        match name {
            Some(name) => Ok(Some(reader.model_norm(&format!("{p}{name}"), config)?)),
            None if self.plain_norms => {
                Ok(Some(Norm { weight: DVector::from_element(config.d_model, 1.0), bias: None }))
            }
            None => Ok(None),
        }
    }

    /// A query or key norm `width` wide: a per-head norm stored once for all heads (d_head
    /// wide) repeated for each; one per head (StableLM's `norms.{h}`) stacked.
    fn head_norm(
        &self,
        reader: &mut Reader,
        p: &str,
        name: Option<&str>,
        heads: usize,
        config: &ModelConfig,
    ) -> Result<Option<Norm>> {
        let Some(name) = name else { return Ok(None) };
        let width = heads * config.d_head;
        let whole = format!("{p}{name}");
        if reader.has(&format!("{whole}.weight")) {
            let stored = reader.shape(&format!("{whole}.weight"))?;
            let own = if stored == [width] { width } else { config.d_head };
            let norm = reader.norm_of_width(&whole, own, config)?;
            return Ok(Some(repeat_norm(norm, width)));
        }
        let mut parts = Vec::with_capacity(heads);
        for h in 0..heads {
            parts.push(reader.norm_of_width(&format!("{whole}.norms.{h}"), config.d_head, config)?);
        }
        let stack = |pick: fn(&Norm) -> Option<&DVector<f32>>| -> Option<DVector<f32>> {
            let pieces: Option<Vec<&DVector<f32>>> = parts.iter().map(pick).collect();
            pieces.map(|p| DVector::from_iterator(width, p.into_iter().flat_map(|v| v.iter().copied())))
        };
        Ok(Some(Norm { weight: stack(|n| Some(&n.weight)).unwrap_or_default(), bias: stack(|n| n.bias.as_ref()) }))
    }

    fn mlp(&self, reader: &mut Reader, p: &str, config: &ModelConfig) -> Result<(Option<Mlp>, Option<Experts>)> {
        let (d_model, d_mlp) = (config.d_model, config.d_mlp);
        let bias =
            |reader: &mut Reader, name: &str, len: usize| reader.optional_vector(&format!("{p}{name}.bias"), len);
        let linear =
            |reader: &mut Reader, name: &str, d_in, d_out| reader.linear(&format!("{p}{name}.weight"), d_in, d_out);
        let gated = |reader: &mut Reader, gate: &str, up: &str, down: &str| -> Result<Mlp> {
            Ok(Mlp {
                w_in: linear(reader, up, d_model, d_mlp)?,
                b_in: bias(reader, up, d_mlp)?,
                w_gate: Some(linear(reader, gate, d_model, d_mlp)?),
                w_out: linear(reader, down, d_mlp, d_model)?,
                b_out: bias(reader, down, d_model)?,
            })
        };
        Ok(match self.mlp {
            MlpNames::Plain { w_in, w_out } => (
                Some(Mlp {
                    w_in: linear(reader, w_in, d_model, d_mlp)?,
                    b_in: bias(reader, w_in, d_mlp)?,
                    w_gate: None,
                    w_out: linear(reader, w_out, d_mlp, d_model)?,
                    b_out: bias(reader, w_out, d_model)?,
                }),
                None,
            ),
            MlpNames::Gated { gate, up, down } => (Some(gated(reader, gate, up, down)?), None),
            MlpNames::FusedGateUp { gate_up, down } => {
                let fused = linear(reader, gate_up, d_model, 2 * d_mlp)?;
                (
                    Some(Mlp {
                        w_gate: Some(fused.columns(0, d_mlp).into_owned()),
                        w_in: fused.columns(d_mlp, d_mlp).into_owned(),
                        b_in: DVector::zeros(d_mlp),
                        w_out: linear(reader, down, d_mlp, d_model)?,
                        b_out: bias(reader, down, d_model)?,
                    }),
                    None,
                )
            }
            MlpNames::Experts { router, experts, gate, up, down } => {
                let count = match config.mlp {
                    super::MlpKind::Experts { experts, .. } => experts,
                    _ => return Err(Error::Internal("expert tensors on a model without experts".into())),
                };
                let router = linear(reader, router, d_model, count)?;
                let experts = (0..count)
                    .map(|e| {
                        gated(
                            reader,
                            &format!("{experts}.{e}.{gate}"),
                            &format!("{experts}.{e}.{up}"),
                            &format!("{experts}.{e}.{down}"),
                        )
                    })
                    .collect::<Result<Vec<Mlp>>>()?;
                (None, Some(Experts { router, experts }))
            }
        })
    }
}

/// `norm` (as wide as one head, or `width`) repeated to `width`.
fn repeat_norm(norm: Norm, width: usize) -> Norm {
    let repeat = |v: DVector<f32>| {
        let n = v.len();
        DVector::from_fn(width, |i, _| v[i % n])
    };
    Norm { weight: repeat(norm.weight), bias: norm.bias.map(repeat) }
}

impl LayerMap for Layout {
    fn layer(&self, reader: &mut Reader, config: &ModelConfig, l: usize, parts: LoadParts) -> Result<Layer> {
        let d_model = config.d_model;
        let (d_q, d_kv) = (config.heads * config.d_head, config.kv_heads * config.d_head);
        let p = format!("{}{l}.", self.prefix);
        let weight =
            |reader: &mut Reader, name: &str, d_in, d_out| reader.linear(&format!("{p}{name}.weight"), d_in, d_out);
        let bias = |reader: &mut Reader, name: &str, len| reader.optional_vector(&format!("{p}{name}.bias"), len);
        let (w_q, b_q, w_k, b_k, w_v, b_v) = match self.qkv {
            QkvNames::Separate { q, k, v } => (
                weight(reader, q, d_model, d_q)?,
                bias(reader, q, d_q)?,
                weight(reader, k, d_model, d_kv)?,
                bias(reader, k, d_kv)?,
                weight(reader, v, d_model, d_kv)?,
                bias(reader, v, d_kv)?,
            ),
            QkvNames::Fused { name, layout } => {
                let fused = weight(reader, name, d_model, d_q + 2 * d_kv)?;
                let fused_bias = bias(reader, name, d_q + 2 * d_kv)?;
                split_fused(&fused, &fused_bias, layout(config), config.d_head)
            }
        };
        let attention = Attention {
            w_q,
            b_q,
            w_k,
            b_k,
            w_v,
            b_v,
            w_o: weight(reader, self.o, d_q, d_model)?,
            b_o: bias(reader, self.o, d_model)?,
            q_norm: self.head_norm(reader, &p, self.q_norm, config.heads, config)?,
            k_norm: self.head_norm(reader, &p, self.k_norm, config.kv_heads, config)?,
        };
        let ln1 = self.norm(reader, &p, self.ln1, config)?;
        let ln2 = match (self.ln2, config.features.shared_norm) {
            (None, true) => ln1.clone(),
            (name, _) => self.norm(reader, &p, name, config)?,
        };
        let (mlp, experts) = match parts {
            LoadParts::Circuits => (None, None),
            LoadParts::Everything => self.mlp(reader, &p, config)?,
        };
        let out_norm = |reader: &mut Reader, name: Option<&str>| match name {
            Some(name) => reader.model_norm(&format!("{p}{name}"), config).map(Some),
            None => Ok(None),
        };
        Ok(Layer {
            ln1,
            attention,
            ln2,
            attention_out_norm: out_norm(reader, self.attention_out_norm)?,
            mlp_out_norm: out_norm(reader, self.mlp_out_norm)?,
            mlp,
            experts,
        })
    }
}

/// The query, key and value weights and biases of a fused projection (d_model x (Q + 2 KV)
/// columns) laid out as `layout` says, each as the separate projections hold them.
type Split = (DMatrix<f32>, DVector<f32>, DMatrix<f32>, DVector<f32>, DMatrix<f32>, DVector<f32>);

fn split_fused(fused: &DMatrix<f32>, bias: &DVector<f32>, layout: FusedQkv, d_head: usize) -> Split {
    let FusedQkv { groups, queries, keys } = layout;
    let rows = fused.nrows();
    let (mut w_q, mut w_k, mut w_v) = (
        DMatrix::zeros(rows, groups * queries * d_head),
        DMatrix::zeros(rows, groups * keys * d_head),
        DMatrix::zeros(rows, groups * keys * d_head),
    );
    let (mut b_q, mut b_k, mut b_v) =
        (DVector::zeros(w_q.ncols()), DVector::zeros(w_k.ncols()), DVector::zeros(w_v.ncols()));
    let group_width = (queries + 2 * keys) * d_head;
    for g in 0..groups {
        let start = g * group_width;
        let parts = [
            (&mut w_q, &mut b_q, g * queries * d_head, start, queries * d_head),
            (&mut w_k, &mut b_k, g * keys * d_head, start + queries * d_head, keys * d_head),
            (&mut w_v, &mut b_v, g * keys * d_head, start + (queries + keys) * d_head, keys * d_head),
        ];
        for (w, b, to, from, width) in parts {
            w.columns_mut(to, width).copy_from(&fused.columns(from, width));
            b.rows_mut(to, width).copy_from(&bias.rows(from, width));
        }
    }
    (w_q, b_q, w_k, b_k, w_v, b_v)
}

/// The ModelConfig most families start from: pre-norm RMSNorm, no learned positions, the
/// plain features; a family file changes what differs.
pub(super) fn config_from(family: &str, sizes: &Sizes, config: &serde_json::Value) -> ModelConfig {
    ModelConfig {
        family: family.into(),
        layers: sizes.layers,
        heads: sizes.heads,
        kv_heads: sizes.kv_heads,
        d_model: sizes.d_model,
        d_head: sizes.d_head,
        d_mlp: sizes.d_mlp,
        vocab: sizes.vocab,
        context: None,
        norm: super::NormKind::RmsNorm,
        norm_eps: super::config_f32(config, "rms_norm_eps", 1e-6),
        positions: Positions::Learned,
        mlp: super::MlpKind::Gated(super::Activation::Silu),
        parallel_residual: false,
        features: Default::default(),
        bos_token_id: None,
        config_special_ids: Vec::new(),
        characters: false,
    }
}

/// The unembedding: `lm_head.weight` unless config.json ties it (`tie_word_embeddings`, true
/// unless the family says otherwise) or the file has none.
pub(super) fn unembedding(reader: &Reader, config: &serde_json::Value, tied_by_default: bool) -> Option<String> {
    let tied = flag(config, "tie_word_embeddings", tied_by_default);
    (!tied && reader.has("lm_head.weight")).then(|| "lm_head.weight".into())
}

/// The activation config.json names under the first of `keys` present, else `default`.
pub(super) fn activation(
    config: &serde_json::Value,
    keys: &[&str],
    default: super::Activation,
) -> Result<super::Activation> {
    match keys.iter().find_map(|k| text(config, k).map(|v| (*k, v))) {
        Some((key, name)) => super::Activation::from_name(name, key),
        None => Ok(default),
    }
}
