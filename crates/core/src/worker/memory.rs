//! How much memory the tab's workers need, estimated from a model's header and config alone
//! before anything large is read: the lead's and a helper's peak, composition scores, how many
//! workers the pool runs, and the one-line refusals, with the numbers, of what will not fit.

use crate::Error;
use crate::analysis::composition::{grams_held_bytes, through_grams};
use crate::model::{ModelConfig, VOCAB_BLOCK};
use crate::probes::induction::DEFAULT_SEQUENCES;

use super::stages::INDUCTION_LEN;

/// What the analysis worker lets one load need at its peak: wasm32's memory ends at 4 GiB, and
/// a quarter of that is left for what the estimate does not count (the allocator's
/// fragmentation, the page's messages, the wasm code and stack).
pub const WORKER_BUDGET_BYTES: u64 = 3 << 30;
/// The worker before any model: code, stack, the allocator's first pages.
const BASE_BYTES: u64 = 64 << 20;

/// The fetched bytes a worker holds in memory of each file of a model by link, where its host
/// keeps them nowhere else: a window or two of the ranges it reads; what it drops is fetched
/// again. (The tab's workers keep what they fetch as `Blob`s for the run instead.)
pub const LINK_BYTES_PER_FILE: u64 = 48 << 20;

/// The analysis worker's peak while it loads, fingerprints and probes a model, estimated from
/// its header and config alone (nothing large is read to know it): what it holds throughout
/// plus the largest of what its stages hold one at a time, in f32 or f64 as the code keeps it.
/// Held: the Grams (f64: one d_model² matrix tied, three untied), their Cholesky factors (one
/// tied, two untied) and the tokenizer, at 8 times its JSON. Stages:
/// - the Gram stage: one segment's Grams (summed from zero, then added, or copied out to the
///   page when the pool shares the segments, the lead's too) and one block of vocabulary rows;
/// - a layer's fingerprints (the pool hands the lead layers too): see [`Sizes`]'s `attention`;
/// - the probe: one layer with its MLP (the forward pass) in f32, plus converting its largest
///   matrix: the decoded f32, the matrix and its transpose (12 bytes an element), and what the
///   induction probe's sequences hold (see `probe_bytes`).
pub fn estimated_peak_bytes(config: &ModelConfig, tied: bool, tokenizer_json: u64) -> u64 {
    let sizes = Sizes::of(config, tied);
    let probe = probe_bytes(config, DEFAULT_SEQUENCES);
    let stages = (2 * sizes.grams + sizes.gram_block).max(sizes.layer + probe).max(sizes.attention);
    BASE_BYTES + sizes.grams + sizes.factors + stages + 8 * tokenizer_json
}

/// A helper of the tab's pool: it holds the Grams and the tokenizer, computes Gram segments
/// (one segment's Grams, a block of rows, and the segment's entries copied out to the page),
/// reads one layer's attention at a time, and runs its share of the induction probe's
/// sequences (half of them at most: a pool with a helper has two workers or more).
pub fn estimated_helper_bytes(config: &ModelConfig, tied: bool, tokenizer_json: u64) -> u64 {
    let sizes = Sizes::of(config, tied);
    let probe = probe_bytes(config, DEFAULT_SEQUENCES.div_ceil(2));
    let stages = (2 * sizes.grams + sizes.gram_block).max(sizes.attention).max(sizes.layer + probe);
    BASE_BYTES + sizes.grams + sizes.factors + stages + 8 * tokenizer_json
}

/// What the forward pass holds of `sequences` induction sequences (BOS + 2 x 50 tokens) until
/// they are scored (f32 words): what each keeps (three cells of every head's pattern per
/// second-copy query, every head's standing at each counted position, about 12 words, a top token
/// per position), and, one sequence at a time, the largest of what passes through: a layer's
/// whole patterns, or its logits for a block of the vocabulary.
fn probe_bytes(config: &ModelConfig, sequences: usize) -> u64 {
    let (positions, n) = ((2 * INDUCTION_LEN + 1) as u64, INDUCTION_LEN as u64);
    let [layers, heads] = [config.layers, config.heads].map(|v| v as u64);
    let kept = layers * heads * (3 * n + 12 * n) + 2 * positions;
    let passing = (heads * positions * positions).max(positions * VOCAB_BLOCK as u64);
    4 * (sequences as u64 * kept + passing)
}

/// How many workers the pool uses for a model: up to `hardware` (at least 2), as many as fit
/// [`POOL_BUDGET_BYTES`] together (the lead and its helpers), and never fewer than the lead.
pub fn pool_workers(hardware: usize, lead_bytes: u64, helper_bytes: u64) -> usize {
    let room = POOL_BUDGET_BYTES.saturating_sub(lead_bytes);
    let helpers = room / helper_bytes.max(1);
    1 + (hardware.max(2) - 1).min(helpers as usize)
}

/// What every worker of the pool may need together (each also stays within its own
/// [`WORKER_BUDGET_BYTES`]): the pool does not multiply a large model's memory by the cores.
pub const POOL_BUDGET_BYTES: u64 = 4 << 30;

/// What the lead holds to compute composition scores, in bytes (f64 unless said), by the
/// method the backend gets ([`through_grams`]): one layer's attention as read, the scores'
/// copy that travels to the page (3 (layers·heads)²), and
/// - through the Grams: [`grams_held_bytes`] (a pass's packed Grams, a layer's factors, the
///   scores);
/// - as layer products: every layer's writer blocks (layers·heads·d_head x d_model, kept until
///   the last layer), its heads' weights and blocks (four d_model x d_head blocks a head), the
///   layer's readers side by side (d_model x 3·heads·d_head), one layer pair's product
///   (heads·d_head x 3·heads·d_head) and the scores.
pub fn estimated_composition_bytes(config: &ModelConfig, on_gpu: bool) -> u64 {
    let [layers, heads, d_model, d_head] =
        [config.layers, config.heads, config.d_model, config.d_head].map(|v| v as u64);
    let scores = 8 * 3 * (layers * heads).pow(2);
    let method = if through_grams(config, on_gpu) {
        grams_held_bytes(config)
    } else {
        let width = heads * d_head;
        let writers = 8 * layers * width * d_model;
        let blocks = 8 * 4 * width * d_model;
        let readers = 8 * d_model * 3 * width;
        let product = 8 * width * 3 * width;
        writers + blocks + readers + product + scores
    };
    BASE_BYTES + Sizes::of(config, true).attention + method + scores
}

/// What the method that `estimated_composition_bytes` counted keeps longest, as the refusal
/// names it.
fn composition_kept(config: &ModelConfig, on_gpu: bool) -> String {
    if through_grams(config, on_gpu) {
        let bytes = grams_held_bytes(config);
        format!("keep the writers' Gram matrices ({}, f64)", gigabytes(bytes))
    } else {
        let writers = 8 * (config.layers * config.heads * config.d_head * config.d_model) as u64;
        format!("keep every layer's writers ({}, f64)", gigabytes(writers))
    }
}

/// The one-line refusal of composition scores the worker cannot hold, with the numbers.
pub(super) fn composition_too_large(config: &ModelConfig, on_gpu: bool, need: u64, held: u64) -> Error {
    Error::TooLargeForTab(format!(
        "composition scores of this model ({} layers x {} heads, d_head {}, width {}) {} and need about {} in the tab's analysis worker beside the {} it holds, over its budget of {} (wasm32 memory ends at 4.29 GB): the command line's `headprint composition` computes them with no such limit",
        config.layers,
        config.heads,
        config.d_head,
        config.d_model,
        composition_kept(config, on_gpu),
        gigabytes(need),
        gigabytes(held),
        gigabytes(WORKER_BUDGET_BYTES),
    ))
}

/// The one-line refusal of a model the worker cannot hold, with the numbers.
pub(super) fn too_large(config: &ModelConfig, need: u64, held: u64) -> Error {
    let beside = match held {
        0 => String::new(),
        held => format!(" beside the {} the model shown holds", gigabytes(held)),
    };
    Error::TooLargeForTab(format!(
        "this model ({} layers x {} heads, width {}, vocabulary {}) needs about {} in the tab's analysis worker{beside}, over its budget of {} (wasm32 memory ends at 4.29 GB): the command line's `headprint fingerprint` reads it with no such limit",
        config.layers,
        config.heads,
        config.d_model,
        config.vocab,
        gigabytes(need),
        gigabytes(WORKER_BUDGET_BYTES),
    ))
}

/// The sizes the estimates add up, in bytes.
struct Sizes {
    grams: u64,
    /// The Grams' Cholesky factors (`LayerProducts` multiplies with them), made once.
    factors: u64,
    gram_block: u64,
    /// One layer with its MLP, read for the forward pass.
    layer: u64,
    /// One layer's fingerprints, at the most of three moments: its attention read (f32) while
    /// its largest matrix converts (12 bytes an element); the attention beside its heads' f64
    /// weights (W_O twice: as stored and as the unembedding sees it); the attention and those
    /// weights beside the layer products' largest stacked input and its product
    /// (`LayerProducts::new`, f64, stacked from the attention as stored).
    attention: u64,
}

impl Sizes {
    fn of(config: &ModelConfig, tied: bool) -> Sizes {
        let ModelConfig { heads, kv_heads, d_model, d_head, d_mlp, .. } = *config;
        let [heads, kv_heads, d_model, d_head, d_mlp] = [heads, kv_heads, d_model, d_head, d_mlp].map(|v| v as u64);
        let grams = 8 * d_model * d_model * if tied { 1 } else { 3 };
        let factors = 8 * d_model * d_model * if tied { 1 } else { 2 };
        let gram_block = 1024 * d_model * (4 + 8 + 8) * if tied { 1 } else { 2 };
        let (d_q, d_kv) = (heads * d_head, kv_heads * d_head);
        let attention = d_model * (d_q + 2 * d_kv) + d_q * d_model;
        // Every (expert's) MLP matrix, and a mixture's router.
        let experts = match config.mlp {
            crate::model::MlpKind::Experts { experts, .. } => experts as u64,
            _ => 0,
        };
        let mlp = d_model * d_mlp * config.mlp.matrices() as u64 + d_model * experts;
        // Folded mode's copy of the attention weights where norms or a multiplier fold into
        // them (`circuits::circuit_attention`).
        let features = &config.features;
        let folds = features.qk_norm != crate::model::QkNorm::None
            || features.norm_sites != crate::model::NormSites::Pre
            || features.residual_multiplier.is_some();
        let folded_copy = if folds { 4 * attention } else { 0 };
        let largest_attention = (d_model * (d_q + 2 * d_kv)).max(d_q * d_model);
        let largest = (d_model * d_mlp).max(largest_attention);
        let head_weights = 8 * (attention + d_q * d_model);
        let stacked = 8 * d_model * (d_q + 2 * d_kv);
        Sizes {
            grams,
            factors,
            gram_block,
            layer: 4 * (attention + mlp) + 12 * largest,
            attention: folded_copy
                + (4 * attention + 12 * largest_attention)
                    .max(4 * attention + head_weights)
                    .max(4 * attention + head_weights + 2 * stacked),
        }
    }
}

fn gigabytes(bytes: u64) -> String {
    format!("{:.2} GB", bytes as f64 / 1e9)
}

#[cfg(test)]
mod tests {
    use super::Sizes;
    use crate::model::{Activation, MlpKind, ModelConfig, NormKind, NormSites, Positions, QkNorm};

    fn config(mlp: MlpKind) -> ModelConfig {
        ModelConfig {
            family: "test".into(),
            layers: 2,
            heads: 8,
            kv_heads: 2,
            d_model: 256,
            d_head: 32,
            d_mlp: 1024,
            vocab: 1000,
            context: None,
            norm: NormKind::RmsNorm,
            norm_eps: 1e-6,
            positions: Positions::Nope,
            mlp,
            parallel_residual: false,
            features: Default::default(),
            bos_token_id: None,
            config_special_ids: Vec::new(),
            characters: false,
        }
    }

    #[test]
    fn composition_counts_what_its_method_keeps() {
        // GPT-2 Small: 12 x 12 x 64 x 768 f64 writers are 57 MB; the whole stays small.
        let mut gpt2 = config(MlpKind::Plain(Activation::GeluTanh));
        (gpt2.layers, gpt2.heads, gpt2.kv_heads, gpt2.d_model, gpt2.d_head) = (12, 12, 12, 768, 64);
        let bytes = super::estimated_composition_bytes(&gpt2, true);
        assert!(bytes > 8 * 12 * 12 * 64 * 768 && bytes < 300 << 20, "{bytes}");
        // On the CPU through the Grams: the 132 writers' packed Grams, 312 MB, and a layer's.
        let bytes = super::estimated_composition_bytes(&gpt2, false);
        assert!(bytes > 8 * 144 * 768 * 769 / 2 && bytes < 600 << 20, "{bytes}");
    }

    #[test]
    fn a_layer_counts_every_experts_matrices_and_the_router() {
        let gated = Sizes::of(&config(MlpKind::Gated(Activation::Silu)), true);
        let experts = Sizes::of(&config(MlpKind::Experts { experts: 8, top_k: 2, activation: Activation::Silu }), true);
        // Seven more experts of three d_model x d_mlp matrices, and the router's d_model x 8, in f32.
        assert_eq!(experts.layer - gated.layer, 4 * (7 * 3 * 256 * 1024 + 256 * 8));
        assert_eq!(experts.attention, gated.attention);
    }

    #[test]
    fn norms_that_fold_into_the_attention_add_its_folded_copy() {
        let plain = config(MlpKind::Gated(Activation::Silu));
        let mut qk_norms = plain.clone();
        qk_norms.features.qk_norm = QkNorm::PerHead;
        let mut post_norms = plain.clone();
        post_norms.features.norm_sites = NormSites::Post;
        let attention = (256 * (8 * 32 + 2 * 2 * 32) + 8 * 32 * 256) as u64;
        for folded in [qk_norms, post_norms] {
            assert_eq!(Sizes::of(&folded, true).attention - Sizes::of(&plain, true).attention, 4 * attention);
        }
    }
}
