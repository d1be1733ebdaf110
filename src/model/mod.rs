//! One shared description of a transformer, in TransformerLens's row-vector convention
//! (`q = x W_Q`), and one file per model family mapping its tensor names onto it.

mod gpt2;
mod gptchar;
mod llama;
mod neox;

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
    Rotary { dims: usize, base: f32 },
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
        let config_json = match &files.config_json {
            Some(text) => {
                Some(serde_json::from_str::<serde_json::Value>(text).map_err(|e| Error::BadConfig(e.to_string()))?)
            }
            None => None,
        };
        let family = detect_family(&store, config_json.as_ref())?;
        let mut reader = Reader { store: &store, family };
        let model = match family {
            Family::GptChar => gptchar::load(&mut reader, parts)?,
            Family::Gpt2 => gpt2::load(&mut reader, config_json.as_ref(), parts)?,
            Family::Neox => neox::load(&mut reader, config_json.as_ref(), parts)?,
            Family::Llama => llama::load(&mut reader, config_json.as_ref(), parts)?,
        };
        Ok(model)
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

    /// An nn.Linear weight (stored out x in) as the row-vector map in x out.
    pub fn linear(&mut self, name: &str, d_in: usize, d_out: usize) -> Result<DMatrix<f32>> {
        Ok(self.matrix(name, d_out, d_in)?.transpose())
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
        // Buffers that some files carry (causal masks, rotary tables) are not parameters.
        let buffer = |n: &str| {
            n.ends_with(".tril") || n.ends_with(".attn.bias") || n.ends_with("masked_bias") || n.ends_with("inv_freq")
        };
        self.store
            .names()
            .filter(|n| !buffer(n) && !copies.contains(n))
            .filter_map(|n| self.store.entry(n))
            .map(|e| e.shape.iter().product::<usize>() as u64)
            .sum()
    }
}

/// Integer field of config.json, with a clear error when missing.
pub(crate) fn config_usize(config: &serde_json::Value, keys: &[&str]) -> Result<usize> {
    keys.iter()
        .find_map(|k| config.get(*k).and_then(|v| v.as_u64()))
        .map(|v| v as usize)
        .ok_or_else(|| Error::BadConfig(format!("missing integer `{}`", keys[0])))
}

pub(crate) fn config_f32(config: &serde_json::Value, key: &str, default: f32) -> f32 {
    config.get(key).and_then(|v| v.as_f64()).map(|v| v as f32).unwrap_or(default)
}

/// Checks the numbers of layers and heads make sense before reading anything large.
pub(crate) fn check_dimensions(config: &ModelConfig) -> Result<()> {
    if config.layers == 0 || config.heads == 0 || config.d_head == 0 || config.vocab == 0 {
        return Err(Error::BadConfig(format!("degenerate dimensions: {config:?}")));
    }
    if config.heads * config.d_head != config.d_model && config.family != Family::Llama {
        return Err(Error::BadConfig(format!(
            "{} heads x d_head {} != d_model {}",
            config.heads, config.d_head, config.d_model
        )));
    }
    if config.kv_heads == 0 || !config.heads.is_multiple_of(config.kv_heads) {
        return Err(Error::BadConfig(format!(
            "{} heads cannot share {} key/value heads",
            config.heads, config.kv_heads
        )));
    }
    Ok(())
}

/// Splits a layer count from names like `prefix.{l}.suffix`.
pub(crate) fn count_indexed(names: &[String], prefix: &str) -> usize {
    names
        .iter()
        .filter_map(|n| n.strip_prefix(prefix)?.split('.').next()?.parse::<usize>().ok())
        .max()
        .map_or(0, |m| m + 1)
}
