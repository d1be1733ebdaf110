//! What a decoder block may do beyond the plain pre-norm transformer, as data: the forward pass,
//! the circuits, the streaming plan, the memory estimate and the GPU read these, never a
//! family's name. Each family file fills them in from its config.json; a feature it cannot
//! express is refused there, by name.

use serde::{Deserialize, Serialize};

use super::Positions;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Activation {
    Relu,
    /// GPT-2's tanh approximation (`gelu_new`, `gelu_pytorch_tanh`).
    GeluTanh,
    /// Exact (erf) GELU, as GPT-NeoX uses.
    GeluErf,
    Silu,
}

impl Activation {
    /// config.json's `hidden_act` / `activation_function` / `hidden_activation` name; an unknown
    /// one is an error naming `key`.
    pub fn from_name(name: &str, key: &str) -> crate::Result<Activation> {
        match name {
            "relu" => Ok(Activation::Relu),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" | "gelu_tanh" => Ok(Activation::GeluTanh),
            "gelu" => Ok(Activation::GeluErf),
            "silu" | "swish" => Ok(Activation::Silu),
            other => Err(crate::Error::BadConfig(format!(
                "`{key}` \"{other}\" is not an activation headprint runs (relu, gelu, gelu_new, gelu_pytorch_tanh, silu)"
            ))),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Activation::Relu => "relu",
            Activation::GeluTanh => "gelu_tanh",
            Activation::GeluErf => "gelu",
            Activation::Silu => "silu",
        }
    }
}

/// The feed-forward block.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MlpKind {
    /// `act(x W_in + b_in) W_out + b_out`.
    Plain(Activation),
    /// `(act(x W_gate) * (x W_in)) W_out` (SwiGLU, GeGLU).
    Gated(Activation),
    /// A router picks `top_k` of `experts` gated MLPs per token and mixes their outputs by its
    /// softmax weights, renormalised over the chosen (Mixtral).
    Experts { experts: usize, top_k: usize, activation: Activation },
}

impl MlpKind {
    pub fn activation(self) -> Activation {
        match self {
            MlpKind::Plain(a) | MlpKind::Gated(a) | MlpKind::Experts { activation: a, .. } => a,
        }
    }

    /// Whether each (expert's) MLP has a gate projection beside its input one.
    pub fn gated(self) -> bool {
        !matches!(self, MlpKind::Plain(_))
    }

    /// The MLP weight matrices of one layer, each d_model x d_mlp.
    pub fn matrices(self) -> usize {
        match self {
            MlpKind::Plain(_) => 2,
            MlpKind::Gated(_) => 3,
            MlpKind::Experts { experts, .. } => 3 * experts,
        }
    }
}

/// Where a block's norms sit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum NormSites {
    /// Before attention and before the MLP (GPT-2, Llama, ...).
    #[default]
    Pre,
    /// Before and after each of attention and the MLP, the output normed before it joins the
    /// residual stream (Gemma 2 and 3).
    Sandwich,
    /// After each only: `x + N(attn(x))`, `x + N(mlp(x))` (OLMo-2).
    Post,
}

/// Norms on the queries and keys, before the rotary embedding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum QkNorm {
    #[default]
    None,
    /// Over each head's d_head values (Qwen3, Gemma 3, StableLM's per-head LayerNorm).
    PerHead,
    /// Over the whole projection, heads x d_head at once (OLMo-2).
    Whole,
}

/// One layer's attention where it differs from the model's.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct LayerAttention {
    /// A sliding window: each query sees at most this many keys, itself included (a key k is
    /// seen from query q when q - window < k <= q, as transformers masks it).
    pub window: Option<usize>,
    /// The layer's own positions where they differ from the model's: none (NoPE layers), or
    /// rotary with another base (Gemma 3's local layers).
    pub positions: Option<Positions>,
}

/// Everything a family's blocks do beyond the plain pre-norm transformer. The default is that
/// transformer: every field here says how a family differs.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct Features {
    pub norm_sites: NormSites,
    /// A parallel block whose attention and MLP read one norm (Phi, GPT-J): the layer holds
    /// that norm as both of its input norms.
    pub shared_norm: bool,
    /// RMSNorm scaling by `1 + w` (Gemma): the stored weight plus one is held as the weight.
    pub norm_plus_one: bool,
    pub qk_norm: QkNorm,
    /// The factor on the attention scores where it is not `1/sqrt(d_head)`: Gemma's
    /// `query_pre_attn_scalar^-0.5`, Granite's `attention_multiplier`, GPT-Neo's 1.
    pub attention_scale: Option<f32>,
    /// `cap tanh(score / cap)` on the scaled attention scores (Gemma 2).
    pub attention_softcap: Option<f32>,
    /// `cap tanh(logit / cap)` on the final logits (Gemma 2).
    pub final_softcap: Option<f32>,
    /// Learned position rows start this far into the table (OPT's offset of 2).
    pub position_offset: usize,
    /// Per layer, where any layer differs (a window, NoPE, another rotary base); empty when none.
    pub layers: Vec<LayerAttention>,
    /// The factor on the embedding as the residual stream receives it (Gemma's sqrt(d_model),
    /// Granite's `embedding_multiplier`). A tied unembedding is the stored, unscaled W_E.
    pub embedding_scale: Option<f32>,
    /// A norm on the embedding as the residual stream receives it (BLOOM's
    /// `word_embeddings_layernorm`).
    pub embedding_norm: bool,
    /// The factor on each block's attention and MLP outputs before they join the stream (Granite).
    pub residual_multiplier: Option<f32>,
    /// The final logits divided by this (Granite's `logits_scaling`).
    pub logits_divisor: Option<f32>,
    /// Blocks with attention and no MLP (TransformerLens's attention-only models).
    pub attention_only: bool,
}

impl Features {
    /// Layer `l`'s attention settings (the model's when no layer differs).
    pub fn layer(&self, l: usize) -> LayerAttention {
        self.layers.get(l).cloned().unwrap_or_default()
    }

    /// Whether the residual stream receives W_E exactly as stored (then a tied W_U is its
    /// transpose as the circuits see it).
    pub fn plain_embedding(&self) -> bool {
        self.embedding_scale.is_none() && !self.embedding_norm
    }
}
