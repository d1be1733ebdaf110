//! One shared description of a transformer, in TransformerLens's row-vector convention
//! (`q = x W_Q`), and one file per model family mapping its tensor names onto it.

mod gpt2;
mod gptchar;
mod llama;
mod neox;
mod stream;

pub use stream::{ModelStream, VOCAB_BLOCK, Weights};

use std::ops::Range;

use nalgebra::{DMatrix, DVector};
use serde::{Deserialize, Serialize};

use crate::weights::{ModelFiles, Tensor, TensorStore};
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Family {
    /// Karpathy's "Let's build GPT" gpt.py character model.
    GptChar,
    Gpt2,
    Neox,
    Llama,
}

impl Family {
    pub fn name(self) -> &'static str {
        match self {
            Family::GptChar => "gptchar",
            Family::Gpt2 => "gpt2",
            Family::Neox => "neox",
            Family::Llama => "llama",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum NormKind {
    LayerNorm,
    RmsNorm,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Activation {
    Relu,
    /// GPT-2's tanh approximation.
    GeluTanh,
    /// Exact (erf) GELU, as GPT-NeoX uses.
    GeluErf,
    /// SiLU inside a gated (SwiGLU) MLP.
    Silu,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Positions {
    /// A learned table added to the token embedding.
    Learned,
    /// Rotary embedding on the first `dims` dimensions of each query/key head (HF rotate-half layout).
    Rotary { dims: usize, base: f32, scaling: RopeScaling },
}

/// How a checkpoint stretches its rotary frequencies for longer contexts (config.json
/// `rope_scaling`, or `rope_parameters` in newer transformers).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum RopeScaling {
    None,
    /// Every frequency divided by `factor` (position interpolation).
    Linear {
        factor: f32,
    },
    /// Llama 3.x: low frequencies divided by `factor`, high ones kept, a smooth blend between.
    Llama3 {
        factor: f32,
        low_freq_factor: f32,
        high_freq_factor: f32,
        original_context: f32,
    },
}

impl Positions {
    /// The rotary inverse frequencies θ_i = base^(-2i/dims), i < dims/2, with the checkpoint's
    /// scaling applied exactly as Hugging Face computes them (f32); empty for learned positions.
    pub fn inverse_frequencies(&self) -> Vec<f32> {
        let Positions::Rotary { dims, base, scaling } = *self else { return Vec::new() };
        (0..dims / 2)
            .map(|i| {
                let plain = 1.0 / base.powf((2 * i) as f32 / dims as f32);
                match scaling {
                    RopeScaling::None => plain,
                    RopeScaling::Linear { factor } => plain / factor,
                    RopeScaling::Llama3 { factor, low_freq_factor, high_freq_factor, original_context } => {
                        let wavelength = 2.0 * std::f32::consts::PI / plain;
                        if wavelength < original_context / high_freq_factor {
                            plain
                        } else if wavelength > original_context / low_freq_factor {
                            plain / factor
                        } else {
                            let smooth = (original_context / wavelength - low_freq_factor)
                                / (high_freq_factor - low_freq_factor);
                            (1.0 - smooth) * plain / factor + smooth * plain
                        }
                    }
                }
            })
            .collect()
    }
}

/// Rotary settings from config.json: the base (`rope_theta`, older NeoX `rotary_emb_base`, or
/// inside `rope_parameters`) and the scaling (`rope_scaling`, or `rope_parameters.rope_type`).
/// An unknown scaling type is an error: its positions would silently be wrong.
pub fn rope_settings(config: &serde_json::Value) -> Result<(f32, RopeScaling)> {
    let nested = config.get("rope_parameters").filter(|v| v.is_object());
    let number = |key: &str| -> Option<f64> {
        nested.and_then(|r| r.get(key)).and_then(|v| v.as_f64()).or_else(|| config.get(key).and_then(|v| v.as_f64()))
    };
    let base = number("rope_theta").or_else(|| number("rotary_emb_base")).unwrap_or(10000.0) as f32;
    let scaling_table = config.get("rope_scaling").filter(|v| v.is_object()).or(nested);
    let Some(table) = scaling_table else { return Ok((base, RopeScaling::None)) };
    let kind = table.get("rope_type").or_else(|| table.get("type")).and_then(|v| v.as_str()).unwrap_or("default");
    let field = |key: &str| -> Result<f32> {
        table.get(key).and_then(|v| v.as_f64()).map(|v| v as f32).ok_or_else(|| {
            Error::BadConfig(format!("rope scaling of type \"{kind}\" needs a number `{key}` in config.json"))
        })
    };
    let scaling = match kind {
        "default" => RopeScaling::None,
        "linear" => RopeScaling::Linear { factor: field("factor")? },
        "llama3" => RopeScaling::Llama3 {
            factor: field("factor")?,
            low_freq_factor: field("low_freq_factor")?,
            high_freq_factor: field("high_freq_factor")?,
            original_context: field("original_max_position_embeddings")?,
        },
        other => {
            return Err(Error::BadConfig(format!(
                "rope scaling of type \"{other}\" is not supported (headprint applies \"linear\" and \"llama3\")"
            )));
        }
    };
    if let RopeScaling::Linear { factor } | RopeScaling::Llama3 { factor, .. } = scaling
        && !(factor.is_finite() && factor > 0.0)
    {
        return Err(Error::BadConfig(format!("rope scaling factor {factor} must be a positive number")));
    }
    if let RopeScaling::Llama3 { low_freq_factor, high_freq_factor, .. } = scaling
        && high_freq_factor.partial_cmp(&low_freq_factor) != Some(std::cmp::Ordering::Greater)
    {
        return Err(Error::BadConfig(format!(
            "llama3 rope scaling needs high_freq_factor ({high_freq_factor}) above low_freq_factor ({low_freq_factor})"
        )));
    }
    Ok((base, scaling))
}

// Serde: the page's worker sends the configuration to the page.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ModelConfig {
    pub family: Family,
    pub layers: usize,
    pub heads: usize,
    /// Key/value heads (< heads for grouped-query attention).
    pub kv_heads: usize,
    pub d_model: usize,
    pub d_head: usize,
    pub d_mlp: usize,
    pub vocab: usize,
    /// Longest sequence the model takes, where it has a limit (learned positions).
    pub context: Option<usize>,
    pub norm: NormKind,
    pub norm_eps: f32,
    pub positions: Positions,
    pub activation: Activation,
    /// GPT-NeoX: attention and MLP both read the same residual.
    pub parallel_residual: bool,
    /// config.json's `bos_token_id`, checked to be a row of the embedding.
    #[serde(default)]
    pub bos_token_id: Option<usize>,
    /// The ids config.json names `bos_token_id`, `eos_token_id` or `pad_token_id` that are inside
    /// the vocabulary: never drawn as random probe tokens, even without a tokenizer.
    #[serde(default)]
    pub config_special_ids: Vec<usize>,
}

impl ModelConfig {
    /// The key/value head a query head reads (grouped-query attention).
    pub fn kv_head_of(&self, head: usize) -> usize {
        head / (self.heads / self.kv_heads)
    }
}

#[derive(Debug, Clone)]
pub struct Norm {
    pub weight: DVector<f32>,
    /// None for RMSNorm.
    pub bias: Option<DVector<f32>>,
}

/// Attention weights of one layer. Head h of W_Q is columns h*d_head.. of `w_q`;
/// head h of W_O is rows h*d_head.. of `w_o`.
#[derive(Debug, Clone)]
pub struct Attention {
    pub w_q: DMatrix<f32>,
    pub b_q: DVector<f32>,
    pub w_k: DMatrix<f32>,
    pub b_k: DVector<f32>,
    pub w_v: DMatrix<f32>,
    pub b_v: DVector<f32>,
    pub w_o: DMatrix<f32>,
    pub b_o: DVector<f32>,
}

#[derive(Debug, Clone)]
pub struct Mlp {
    /// d_model x d_mlp (the "up" projection for gated MLPs).
    pub w_in: DMatrix<f32>,
    pub b_in: DVector<f32>,
    /// Gated MLPs only: d_model x d_mlp.
    pub w_gate: Option<DMatrix<f32>>,
    pub w_out: DMatrix<f32>,
    pub b_out: DVector<f32>,
}

#[derive(Debug, Clone)]
pub struct Layer {
    pub ln1: Norm,
    pub attention: Attention,
    pub ln2: Norm,
    /// Not loaded when only circuits are wanted (saves most of a large model's memory).
    pub mlp: Option<Mlp>,
}

/// What to read from the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LoadParts {
    /// Attention and embeddings: enough for every circuit and fingerprint.
    Circuits,
    /// Everything, for running the model.
    Everything,
}

#[derive(Debug, Clone)]
pub struct Model {
    pub config: ModelConfig,
    /// vocab x d_model.
    pub w_e: DMatrix<f32>,
    /// context x d_model, for learned positions.
    pub w_pos: Option<DMatrix<f32>>,
    pub layers: Vec<Layer>,
    pub ln_final: Norm,
    /// d_model x vocab; None when the unembedding is tied to `w_e` (then W_U = W_E^T).
    pub w_u: Option<DMatrix<f32>>,
    pub b_u: Option<DVector<f32>>,
    /// Token strings for character models (file metadata `vocab`).
    pub vocab_strings: Option<Vec<String>>,
    /// The file's own metadata worth showing (training facts of the demo model).
    pub facts: Vec<(String, String)>,
    pub parameter_count: u64,
}

impl Model {
    /// Detects the family, maps its tensors and checks every shape.
    pub fn load(files: &ModelFiles, parts: LoadParts) -> Result<Model> {
        let store = TensorStore::open(files)?;
        store.announce(|name| !is_buffer(name) && (parts == LoadParts::Everything || !is_mlp(name)));
        let blueprint = Blueprint::read(&store, files)?;
        let mut reader = Reader { store: &store, family: blueprint.config.family };
        let (vocab, d_model) = (blueprint.config.vocab, blueprint.config.d_model);
        let w_e = reader.matrix(&blueprint.embedding, vocab, d_model)?;
        let w_pos = match &blueprint.positions {
            Some(name) => Some(reader.matrix(name, blueprint.config.context.unwrap_or(0), d_model)?),
            None => None,
        };
        let layers = (0..blueprint.config.layers)
            .map(|l| blueprint.layer(&mut reader, l, parts))
            .collect::<Result<Vec<Layer>>>()?;
        let ln_final = reader.norm(&blueprint.final_norm, d_model, blueprint.config.norm)?;
        let w_u = match &blueprint.unembedding {
            Some(name) => Some(reader.linear(name, d_model, vocab)?),
            None => None,
        };
        let b_u = match &blueprint.unembedding_bias {
            Some(name) => Some(reader.optional_vector(name, vocab)?),
            None => None,
        };
        Ok(Model {
            w_e,
            w_pos,
            layers,
            ln_final,
            w_u,
            b_u,
            vocab_strings: blueprint.vocab_strings,
            facts: blueprint.facts,
            parameter_count: blueprint.parameter_count,
            config: blueprint.config,
        })
    }
}

/// What a checkpoint's header and config.json say before any weight is read: the
/// configuration, where the tensors outside the layers are, and how the layers are named.
/// The whole load and the layer-by-layer stream both start from it.
pub(crate) struct Blueprint {
    pub config: ModelConfig,
    /// [vocab, d_model].
    pub embedding: String,
    /// [context, d_model], for learned positions.
    pub positions: Option<String>,
    /// [vocab, d_model] (nn.Linear's out x in); None when tied to the embedding.
    pub unembedding: Option<String>,
    /// An unembedding bias the family may have (zeros when the file lacks it).
    pub unembedding_bias: Option<String>,
    pub final_norm: String,
    pub layer_names: LayerNames,
    pub vocab_strings: Option<Vec<String>>,
    pub facts: Vec<(String, String)>,
    pub parameter_count: u64,
}

/// How a family names and lays out one layer's tensors, beyond what `ModelConfig` says.
pub(crate) enum LayerNames {
    GptChar,
    /// `prefix`: `transformer.` or none; `linear_layout`: nanoGPT's out x in weights.
    Gpt2 {
        prefix: String,
        linear_layout: bool,
    },
    Neox,
    Llama,
}

impl Blueprint {
    fn read(store: &TensorStore, files: &ModelFiles) -> Result<Blueprint> {
        let config_json = match &files.config_json {
            Some(text) => {
                Some(serde_json::from_str::<serde_json::Value>(text).map_err(|e| Error::BadConfig(e.to_string()))?)
            }
            None => None,
        };
        let family = detect_family(store, config_json.as_ref())?;
        let reader = Reader { store, family };
        let mut blueprint = match family {
            Family::GptChar => gptchar::blueprint(&reader)?,
            Family::Gpt2 => gpt2::blueprint(&reader, config_json.as_ref())?,
            Family::Neox => neox::blueprint(&reader, config_json.as_ref())?,
            Family::Llama => llama::blueprint(&reader, config_json.as_ref())?,
        };
        if let Some(config) = &config_json {
            blueprint.config.bos_token_id = bos_from_config(config, blueprint.config.vocab)?;
            blueprint.config.config_special_ids = special_ids_from_config(config, blueprint.config.vocab);
        }
        Ok(blueprint)
    }

    /// Layer `l` (its MLP only when `parts` asks for everything).
    fn layer(&self, reader: &mut Reader, l: usize, parts: LoadParts) -> Result<Layer> {
        match &self.layer_names {
            LayerNames::GptChar => gptchar::layer(reader, &self.config, l, parts),
            LayerNames::Gpt2 { prefix, linear_layout } => {
                gpt2::layer(reader, &self.config, prefix, *linear_layout, l, parts)
            }
            LayerNames::Neox => neox::layer(reader, &self.config, l, parts),
            LayerNames::Llama => llama::layer(reader, &self.config, l, parts),
        }
    }
}

fn detect_family(store: &TensorStore, config: Option<&serde_json::Value>) -> Result<Family> {
    if let Some(model_type) = config.and_then(|c| c.get("model_type")).and_then(|v| v.as_str()) {
        return match model_type {
            "gpt2" => Ok(Family::Gpt2),
            "gpt_neox" => Ok(Family::Neox),
            "llama" | "mistral" => Ok(Family::Llama),
            other => Err(Error::UnknownFamily(format!(
                "config.json says model_type \"{other}\"; headprint reads gptchar, gpt2, gpt_neox and llama"
            ))),
        };
    }
    let has = |name: &str| store.contains(name);
    let has_suffix = |suffix: &str| store.names().any(|n| n.ends_with(suffix));
    if has("token_embedding_table.weight") {
        Ok(Family::GptChar)
    } else if has_suffix("attn.c_attn.weight") {
        Ok(Family::Gpt2)
    } else if has_suffix("attention.query_key_value.weight") {
        Ok(Family::Neox)
    } else if has_suffix("self_attn.q_proj.weight") {
        Ok(Family::Llama)
    } else {
        let mut sample: Vec<&str> = store.names().collect();
        sample.sort();
        sample.truncate(3);
        Err(Error::UnknownFamily(format!("no known tensor names (first names: {})", sample.join(", "))))
    }
}

/// Reads tensors for one family, with the family's name in every error.
pub(crate) struct Reader<'a> {
    store: &'a TensorStore<'a>,
    family: Family,
}

impl Reader<'_> {
    pub fn has(&self, name: &str) -> bool {
        self.store.contains(name)
    }

    pub fn names(&self) -> Vec<String> {
        self.store.names().map(str::to_string).collect()
    }

    pub fn metadata(&self, key: &str) -> Option<String> {
        self.store.metadata(key).map(str::to_string)
    }

    pub fn shape(&self, name: &str) -> Result<Vec<usize>> {
        self.store
            .entry(name)
            .map(|e| e.shape.clone())
            .ok_or_else(|| Error::MissingTensor { family: self.family.name().into(), tensor: name.into() })
    }

    /// The shape of a tensor that must be a matrix; `expected` says what its axes are, for the
    /// message when the header gives it another number of dimensions (a 0-dimensional tensor).
    pub fn matrix_shape(&self, name: &str, expected: &str) -> Result<[usize; 2]> {
        match self.shape(name)?[..] {
            [rows, cols] => Ok([rows, cols]),
            ref other => {
                Err(Error::BadShape { tensor: name.into(), actual: other.to_vec(), expected: expected.into() })
            }
        }
    }

    pub fn tensor(&mut self, name: &str, shape: &[usize]) -> Result<Tensor> {
        let tensor = self.store.read(name, self.family.name())?;
        tensor.expect_shape(shape)?;
        Ok(tensor)
    }

    pub fn vector(&mut self, name: &str, len: usize) -> Result<DVector<f32>> {
        Ok(DVector::from_vec(self.tensor(name, &[len])?.data))
    }

    pub fn optional_vector(&mut self, name: &str, len: usize) -> Result<DVector<f32>> {
        if self.has(name) { self.vector(name, len) } else { Ok(DVector::zeros(len)) }
    }

    /// A matrix stored as `rows x cols`, returned as stored.
    pub fn matrix(&mut self, name: &str, rows: usize, cols: usize) -> Result<DMatrix<f32>> {
        self.tensor(name, &[rows, cols])?.to_matrix()
    }

    /// Rows `rows` of a matrix stored as `total_rows x cols`, read by byte range.
    pub fn matrix_rows(&self, name: &str, total_rows: usize, cols: usize, rows: Range<usize>) -> Result<DMatrix<f32>> {
        let shape = self.shape(name)?;
        if shape != [total_rows, cols] {
            return Err(Error::BadShape {
                tensor: name.into(),
                actual: shape,
                expected: format!("{:?}", [total_rows, cols]),
            });
        }
        self.store.read_rows(name, self.family.name(), rows)?.to_matrix()
    }

    /// Whether two `rows x cols` matrices hold the same values, compared a block of rows at a
    /// time so that neither is ever whole in memory.
    pub fn same_values(&self, a: &str, b: &str, rows: usize, cols: usize) -> Result<bool> {
        const BLOCK: usize = 1024;
        for start in (0..rows).step_by(BLOCK) {
            let block = start..(start + BLOCK).min(rows);
            if self.matrix_rows(a, rows, cols, block.clone())? != self.matrix_rows(b, rows, cols, block)? {
                return Ok(false);
            }
        }
        Ok(true)
    }

    /// An nn.Linear weight (stored out x in) as the row-vector map in x out. The stored
    /// row-major bytes are already that map in nalgebra's column-major order: no transposing
    /// copy (two of them, through `matrix`, would take most of a large layer's read).
    pub fn linear(&mut self, name: &str, d_in: usize, d_out: usize) -> Result<DMatrix<f32>> {
        Ok(DMatrix::from_vec(d_in, d_out, self.tensor(name, &[d_out, d_in])?.data))
    }

    pub fn norm(&mut self, prefix: &str, d_model: usize, kind: NormKind) -> Result<Norm> {
        let weight = self.vector(&format!("{prefix}.weight"), d_model)?;
        let bias = match kind {
            NormKind::LayerNorm => Some(self.optional_vector(&format!("{prefix}.bias"), d_model)?),
            NormKind::RmsNorm => None,
        };
        Ok(Norm { weight, bias })
    }

    /// Parameters stored in the files. `copies` names tensors that repeat another stored one
    /// (nanoGPT saves its tied `lm_head.weight` beside `wte`): a shared weight counts once, as
    /// PyTorch and Hugging Face's `num_parameters()` count it.
    pub fn parameter_count(&self, copies: &[&str]) -> u64 {
        self.store
            .names()
            .filter(|n| !is_buffer(n) && !copies.contains(n))
            .filter_map(|n| self.store.entry(n))
            .map(|e| e.shape.iter().product::<usize>() as u64)
            .sum()
    }
}

/// MLP weights, which every family names `…mlp…` (the character model `…ffwd…`): what a
/// forward pass reads beyond the circuits.
pub(crate) fn is_mlp(name: &str) -> bool {
    name.contains(".mlp.") || name.contains(".ffwd.")
}

/// Buffers that checkpoints converted from older code carry (causal masks, rotary tables): not
/// parameters, never read. Pythia's `attention.bias` is a BOOL mask and `masked_bias` 0-dimensional.
pub(crate) fn is_buffer(name: &str) -> bool {
    name.ends_with(".tril")
        || name.ends_with(".attn.bias")
        || name.ends_with(".attn.masked_bias")
        || name.ends_with(".attention.bias")
        || name.ends_with(".attention.masked_bias")
        || name.ends_with("rotary_emb.inv_freq")
}

/// config.json's `bos_token_id`: None when absent or null; an error when it is not a row of the
/// embedding (a config copied from a bigger model), since prepending it would fail every probe.
fn bos_from_config(config: &serde_json::Value, vocab: usize) -> Result<Option<usize>> {
    match config.get("bos_token_id") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(value) => match value.as_u64() {
            Some(id) if (id as usize) < vocab => Ok(Some(id as usize)),
            Some(id) => Err(Error::BadConfig(format!(
                "bos_token_id {id} is outside the vocabulary of {vocab} tokens (ids 0..{})",
                vocab - 1
            ))),
            None => Err(Error::BadConfig(format!("bos_token_id {value} is not a token id"))),
        },
    }
}

fn special_ids_from_config(config: &serde_json::Value, vocab: usize) -> Vec<usize> {
    let mut ids: Vec<usize> = ["bos_token_id", "eos_token_id", "pad_token_id"]
        .iter()
        .filter_map(|key| config.get(*key))
        .flat_map(|v| match v {
            serde_json::Value::Array(items) => items.iter().filter_map(|i| i.as_u64()).collect(),
            other => other.as_u64().into_iter().collect::<Vec<u64>>(),
        })
        .map(|id| id as usize)
        .filter(|&id| id < vocab)
        .collect();
    ids.sort_unstable();
    ids.dedup();
    ids
}

/// Integer field of config.json, with a clear error when missing.
pub(crate) fn config_usize(config: &serde_json::Value, keys: &[&str]) -> Result<usize> {
    let Some((key, value)) = keys.iter().find_map(|k| config.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v))) else {
        return Err(Error::BadConfig(format!("missing integer `{}`", keys[0])));
    };
    value
        .as_u64()
        .and_then(|v| usize::try_from(v).ok())
        .ok_or_else(|| Error::BadConfig(format!("`{key}` is {value}, not a whole number")))
}

pub(crate) fn config_f32(config: &serde_json::Value, key: &str, default: f32) -> f32 {
    config.get(key).and_then(|v| v.as_f64()).map(|v| v as f32).unwrap_or(default)
}

/// A config.json field the tensors also determine must agree with them: a config copied from
/// another model is refused rather than silently ignored. Absent or null fields are fine.
pub(crate) fn config_agrees(config: &serde_json::Value, keys: &[&str], from_tensors: usize, what: &str) -> Result<()> {
    let Some((key, value)) = keys.iter().find_map(|k| config.get(*k).filter(|v| !v.is_null()).map(|v| (*k, v))) else {
        return Ok(());
    };
    match value.as_u64() {
        Some(v) if v == from_tensors as u64 => Ok(()),
        _ => Err(Error::BadConfig(format!("`{key}` is {value} but the tensors hold {from_tensors} {what}"))),
    }
}

/// Checks the numbers of layers and heads make sense before reading anything large.
pub(crate) fn check_dimensions(config: &ModelConfig) -> Result<()> {
    // A character model has no config.json: its numbers all come from the tensors.
    let bad = |message: String| match config.family {
        Family::GptChar => Error::BadModel(message),
        _ => Error::BadConfig(message),
    };
    // Where each number came from, for the message: config.json fields, or the tensors.
    let (heads_key, kv_key, head_dim_key) = match config.family {
        Family::GptChar => ("heads in the tensor names", "heads in the tensor names", "query rows"),
        Family::Gpt2 => ("config.json `n_head`", "config.json `n_head`", "n_embd / n_head"),
        Family::Neox => {
            ("config.json `num_attention_heads`", "config.json `num_attention_heads`", "hidden_size / heads")
        }
        Family::Llama => {
            ("config.json `num_attention_heads`", "config.json `num_key_value_heads`", "config.json `head_dim`")
        }
    };
    for (what, source, value) in [
        ("layers", "layers in the tensor names", config.layers),
        ("attention heads", heads_key, config.heads),
        ("key/value heads", kv_key, config.kv_heads),
        ("head width", head_dim_key, config.d_head),
        ("vocabulary", "embedding rows", config.vocab),
        ("model width", "embedding columns", config.d_model),
    ] {
        if value == 0 {
            return Err(bad(format!("the {what} ({source}) is 0: a model needs at least 1")));
        }
    }
    if config.context == Some(0) {
        return Err(Error::BadModel(
            "the context (position embedding rows) is 0: a model needs at least 1 position".into(),
        ));
    }
    let query_width = config.heads.checked_mul(config.d_head);
    if query_width.is_none() {
        return Err(bad(format!("{} heads of width {} overflow", config.heads, config.d_head)));
    }
    // Llama may set head_dim freely; the other families split the model width among the heads.
    if config.family != Family::Llama && !config.d_model.is_multiple_of(config.heads) {
        return Err(bad(format!(
            "{} attention heads ({heads_key}) do not divide the model width {} evenly",
            config.heads, config.d_model
        )));
    }
    if config.family != Family::Llama && query_width != Some(config.d_model) {
        return Err(bad(format!(
            "{} attention heads of width {} do not make up the model width {}",
            config.heads, config.d_head, config.d_model
        )));
    }
    if !config.heads.is_multiple_of(config.kv_heads) {
        return Err(bad(format!(
            "{} attention heads cannot share {} key/value heads (it must divide them)",
            config.heads, config.kv_heads
        )));
    }
    Ok(())
}

/// The number of layers in names like `prefix.{l}.suffix`: one more than the largest index, with
/// every index below it present (a name claiming layer 10^12 must not size anything).
pub(crate) fn count_indexed(names: &[String], prefix: &str) -> Result<usize> {
    let indices: std::collections::BTreeSet<usize> =
        names.iter().filter_map(|n| n.strip_prefix(prefix)?.split('.').next()?.parse::<usize>().ok()).collect();
    let count = indices.last().map_or(0, |m| m + 1);
    if indices.len() != count {
        let gap = (0..count).find(|i| !indices.contains(i)).unwrap_or(0);
        return Err(Error::BadModel(format!(
            "tensor names number `{prefix}*` up to {} but none is numbered {gap}",
            count - 1
        )));
    }
    Ok(count)
}
