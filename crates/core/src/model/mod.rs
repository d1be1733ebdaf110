//! One shared description of a transformer, in TransformerLens's row-vector convention
//! (`q = x W_Q`), and one file per model family mapping its tensor names onto it.

mod families;
mod features;
pub mod fold;
mod opened;
mod stream;

pub use features::{Activation, Features, LayerAttention, MlpKind, NormSites, QkNorm};
pub use opened::{CopySource, OpenedModel};
pub use stream::{ModelStream, VOCAB_BLOCK, Weights};

use std::ops::Range;

use nalgebra::{DMatrix, DVector};
use serde::{Deserialize, Serialize};

use crate::weights::{ModelFiles, Tensor, TensorStore};
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum NormKind {
    LayerNorm,
    RmsNorm,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub enum Positions {
    /// A learned table added to the token embedding.
    Learned,
    /// Rotary embedding on the first `dims` dimensions of each query/key head: dimension i
    /// paired with i + dims/2 (Hugging Face's rotate-half), or with its neighbour when
    /// `interleaved` (GPT-J's rotate-every-two).
    Rotary { dims: usize, base: f32, scaling: RopeScaling, interleaved: bool },
    /// A linear bias on the attention scores, a slope per head times the key's position (BLOOM,
    /// Falcon-RW): added after the score's scale, or before it with the slopes rounded to bf16
    /// (`before_scale`, as Falcon computes it).
    Alibi { before_scale: bool },
    /// No positional signal (SmolLM3's NoPE layers).
    Nope,
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
        let Positions::Rotary { dims, base, scaling, .. } = *self else { return Vec::new() };
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
    /// The family file that read the model (`gpt2`, `qwen3`, ...).
    pub family: String,
    pub layers: usize,
    pub heads: usize,
    /// Key/value heads (< heads for grouped-query attention).
    pub kv_heads: usize,
    pub d_model: usize,
    pub d_head: usize,
    /// Each (expert's) MLP width.
    pub d_mlp: usize,
    pub vocab: usize,
    /// Longest sequence the model takes, where it has a limit (learned positions).
    pub context: Option<usize>,
    pub norm: NormKind,
    pub norm_eps: f32,
    pub positions: Positions,
    pub mlp: MlpKind,
    /// Attention and MLP both read the same residual (GPT-NeoX, Phi, GPT-J).
    pub parallel_residual: bool,
    /// Everything else the blocks do beyond the plain pre-norm transformer.
    #[serde(default)]
    pub features: Features,
    /// config.json's `bos_token_id`, checked to be a row of the embedding.
    #[serde(default)]
    pub bos_token_id: Option<usize>,
    /// The ids config.json names `bos_token_id`, `eos_token_id` or `pad_token_id` that are inside
    /// the vocabulary: never drawn as random probe tokens, even without a tokenizer.
    #[serde(default)]
    pub config_special_ids: Vec<usize>,
    /// A character model (no config.json, one token per character): it has no BOS.
    #[serde(default)]
    pub characters: bool,
}

impl ModelConfig {
    /// The key/value head a query head reads (grouped-query attention).
    pub fn kv_head_of(&self, head: usize) -> usize {
        head / (self.heads / self.kv_heads)
    }

    /// The positions layer `l` uses: its own where it has them (NoPE, another rotary base),
    /// else the model's.
    pub fn layer_positions(&self, l: usize) -> Positions {
        self.features.layers.get(l).and_then(|a| a.positions).unwrap_or(self.positions)
    }

    /// Layer `l`'s sliding window, if it has one.
    pub fn layer_window(&self, l: usize) -> Option<usize> {
        self.features.layers.get(l).and_then(|a| a.window)
    }

    /// The factor on the attention scores.
    pub fn attention_scale(&self) -> f32 {
        self.features.attention_scale.unwrap_or_else(|| 1.0 / (self.d_head as f32).sqrt())
    }
}

#[derive(Debug, Clone, PartialEq)]
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
    /// The query norm ([`QkNorm`]), as wide as the queries (a per-head norm shared by the heads
    /// is repeated for each).
    pub q_norm: Option<Norm>,
    /// The key norm, as wide as the keys.
    pub k_norm: Option<Norm>,
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

/// A mixture of experts: the router (d_model x experts) and each expert's gated MLP.
#[derive(Debug, Clone)]
pub struct Experts {
    pub router: DMatrix<f32>,
    pub experts: Vec<Mlp>,
}

#[derive(Debug, Clone)]
pub struct Layer {
    /// The attention's input norm; None where attention reads the stream as it is (OLMo-2).
    pub ln1: Option<Norm>,
    pub attention: Attention,
    /// The MLP's input norm; None where the MLP reads the stream as it is (OLMo-2). A parallel
    /// block with one shared norm holds a copy of ln1 here.
    pub ln2: Option<Norm>,
    /// The norm on the attention output before it joins the stream (sandwich and post-norms).
    pub attention_out_norm: Option<Norm>,
    /// The norm on the MLP output before it joins the stream (sandwich and post-norms).
    pub mlp_out_norm: Option<Norm>,
    /// Not loaded when only circuits are wanted (saves most of a large model's memory).
    pub mlp: Option<Mlp>,
    /// A mixture of experts in place of `mlp` ([`MlpKind::Experts`]); loaded as `mlp` is.
    pub experts: Option<Experts>,
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
    /// vocab x d_model, as stored (what the residual stream receives is [`Weights::embedding_rows`]).
    pub w_e: DMatrix<f32>,
    /// context x d_model, for learned positions (past the family's offset).
    pub w_pos: Option<DMatrix<f32>>,
    /// The norm on the embedding ([`Features::embedding_norm`]).
    pub embedding_norm: Option<Norm>,
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
        let mut reader = Reader { store: &store, family: blueprint.config.family.clone() };
        let (vocab, d_model) = (blueprint.config.vocab, blueprint.config.d_model);
        let w_e = reader.matrix(&blueprint.embedding, vocab, d_model)?;
        let w_pos = match &blueprint.positions {
            Some(name) => {
                let (context, offset) =
                    (blueprint.config.context.unwrap_or(0), blueprint.config.features.position_offset);
                Some(reader.matrix_rows(name, context + offset, d_model, offset..offset + context)?)
            }
            None => None,
        };
        let embedding_norm = blueprint.embedding_norm(&mut reader)?;
        let layers = (0..blueprint.config.layers)
            .map(|l| blueprint.layer(&mut reader, l, parts))
            .collect::<Result<Vec<Layer>>>()?;
        let ln_final = blueprint.final_norm(&mut reader)?;
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
            embedding_norm,
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

/// How one family reads layer `l` (its MLP only when `parts` asks for everything): the
/// tensor-name map, with whatever the family's blueprint learned about its layout.
pub(crate) trait LayerMap: Send + Sync {
    fn layer(&self, reader: &mut Reader, config: &ModelConfig, l: usize, parts: LoadParts) -> Result<Layer>;
}

/// What a checkpoint's header and config.json say before any weight is read: the
/// configuration, where the tensors outside the layers are, and how the layers are named.
/// The whole load and the layer-by-layer stream both start from it.
pub(crate) struct Blueprint {
    pub config: ModelConfig,
    /// [vocab, d_model].
    pub embedding: String,
    /// [context + offset, d_model], for learned positions.
    pub positions: Option<String>,
    /// The prefix of the embedding's norm ([`Features::embedding_norm`]).
    pub embedding_norm: Option<String>,
    /// [vocab, d_model] (nn.Linear's out x in); None when tied to the embedding.
    pub unembedding: Option<String>,
    /// An unembedding bias the family may have (zeros when the file lacks it).
    pub unembedding_bias: Option<String>,
    /// The final norm's prefix; None for a norm without weights (OLMo's).
    pub final_norm: Option<String>,
    pub layers: Box<dyn LayerMap>,
    pub vocab_strings: Option<Vec<String>>,
    pub facts: Vec<(String, String)>,
    pub parameter_count: u64,
}

impl Blueprint {
    /// A blueprint with the usual defaults: no learned positions, no embedding norm, no
    /// unembedding bias, no vocabulary strings or facts.
    pub fn new(
        config: ModelConfig,
        embedding: &str,
        unembedding: Option<String>,
        final_norm: &str,
        layers: impl LayerMap + 'static,
        reader: &Reader,
    ) -> Blueprint {
        Blueprint {
            config,
            embedding: embedding.into(),
            positions: None,
            embedding_norm: None,
            unembedding,
            unembedding_bias: None,
            final_norm: Some(final_norm.into()),
            layers: Box::new(layers),
            vocab_strings: None,
            facts: Vec::new(),
            parameter_count: reader.parameter_count(&[]),
        }
    }

    fn read(store: &TensorStore, files: &ModelFiles) -> Result<Blueprint> {
        let config_json = match &files.config_json {
            Some(text) => {
                Some(serde_json::from_str::<serde_json::Value>(text).map_err(|e| Error::BadConfig(e.to_string()))?)
            }
            None => None,
        };
        let family = families::detect(store, config_json.as_ref())?;
        let reader = Reader { store, family: family.name.into() };
        let mut blueprint = (family.blueprint)(&reader, config_json.as_ref())?;
        if let Some(config) = &config_json {
            blueprint.config.bos_token_id = bos_from_config(config, blueprint.config.vocab)?;
            blueprint.config.config_special_ids = special_ids_from_config(config, blueprint.config.vocab);
        }
        Ok(blueprint)
    }

    /// Layer `l` (its MLP only when `parts` asks for everything).
    fn layer(&self, reader: &mut Reader, l: usize, parts: LoadParts) -> Result<Layer> {
        self.layers.layer(reader, &self.config, l, parts)
    }

    fn final_norm(&self, reader: &mut Reader) -> Result<Norm> {
        match &self.final_norm {
            Some(prefix) => reader.model_norm(prefix, &self.config),
            None => Ok(Norm { weight: DVector::from_element(self.config.d_model, 1.0), bias: None }),
        }
    }

    fn embedding_norm(&self, reader: &mut Reader) -> Result<Option<Norm>> {
        match &self.embedding_norm {
            Some(prefix) => Ok(Some(reader.model_norm(prefix, &self.config)?)),
            None => Ok(None),
        }
    }
}

/// Reads tensors for one family, with the family's name in every error.
pub(crate) struct Reader<'a> {
    store: &'a TensorStore<'a>,
    family: String,
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
            .ok_or_else(|| Error::MissingTensor { family: self.family.clone(), tensor: name.into() })
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
        let tensor = self.store.read(name, &self.family)?;
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
        self.store.read_rows(name, &self.family, rows)?.to_matrix()
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

    /// A norm of the model's kind as the model applies it: Gemma's `1 + w` held as the weight
    /// (added in f32, as the reference adds it before multiplying).
    pub fn model_norm(&mut self, prefix: &str, config: &ModelConfig) -> Result<Norm> {
        self.norm_of_width(prefix, config.d_model, config)
    }

    /// [`Reader::model_norm`] for a norm `width` wide (query and key norms).
    pub fn norm_of_width(&mut self, prefix: &str, width: usize, config: &ModelConfig) -> Result<Norm> {
        let mut norm = self.norm(prefix, width, config.norm)?;
        if config.features.norm_plus_one {
            norm.weight.add_scalar_mut(1.0);
        }
        Ok(norm)
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

/// MLP (and expert) weights, by the name parts each family file declares: what a forward pass
/// reads beyond the circuits, never fetched for a fingerprint.
pub(crate) fn is_mlp(name: &str) -> bool {
    families::is_mlp(name)
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

/// Where a configuration's numbers came from, for the messages of [`check_dimensions`].
pub(crate) struct Sources {
    pub heads: &'static str,
    pub kv_heads: &'static str,
    pub head_dim: &'static str,
    /// Whether the head width may differ from d_model / heads (an explicit `head_dim`).
    pub free_head_dim: bool,
    /// Whether the numbers come from config.json (a bad one is a config error) or the tensors.
    pub from_config: bool,
}

impl Sources {
    /// The usual Hugging Face keys: `num_attention_heads`, `num_key_value_heads`, `head_dim`.
    pub const HF: Sources = Sources {
        heads: "config.json `num_attention_heads`",
        kv_heads: "config.json `num_key_value_heads`",
        head_dim: "config.json `head_dim`",
        free_head_dim: true,
        from_config: true,
    };
    /// The usual keys, with the head width d_model / heads.
    pub const HF_SPLIT: Sources = Sources {
        heads: "config.json `num_attention_heads`",
        kv_heads: "config.json `num_key_value_heads`",
        head_dim: "hidden_size / heads",
        free_head_dim: false,
        from_config: true,
    };
}

/// Checks the numbers of layers and heads make sense before reading anything large.
pub(crate) fn check_dimensions(config: &ModelConfig, sources: &Sources) -> Result<()> {
    let bad = |message: String| match sources.from_config {
        true => Error::BadConfig(message),
        false => Error::BadModel(message),
    };
    let (heads_key, kv_key, head_dim_key) = (sources.heads, sources.kv_heads, sources.head_dim);
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
    if !sources.free_head_dim && !config.d_model.is_multiple_of(config.heads) {
        return Err(bad(format!(
            "{} attention heads ({heads_key}) do not divide the model width {} evenly",
            config.heads, config.d_model
        )));
    }
    if !sources.free_head_dim && query_width != Some(config.d_model) {
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
    if let Positions::Rotary { dims, .. } = config.positions
        && (dims > config.d_head || !dims.is_multiple_of(2))
    {
        return Err(bad(format!(
            "the rotary part of each head ({dims} dimensions) must be even and at most the head width {}",
            config.d_head
        )));
    }
    for (l, layer) in config.features.layers.iter().enumerate() {
        if layer.window == Some(0) {
            return Err(bad(format!("layer {l}'s sliding window is 0: a query must see at least itself")));
        }
    }
    if let MlpKind::Experts { experts, top_k, .. } = config.mlp
        && (top_k == 0 || top_k > experts)
    {
        return Err(bad(format!("{top_k} experts per token out of {experts}: it must be between 1 and {experts}")));
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
