//! Running the model (docs/methods.md#5-probes-running-the-model): the attention pattern of every
//! head and the final logits, for all four families, in f32 like the reference implementations.

use std::ops::Range;

use nalgebra::{DMatrix, DVector};

use crate::model::{
    Activation, Experts, Layer, LoadParts, Mlp, MlpKind, ModelConfig, Norm, NormKind, Positions, QkNorm, Weights,
};
use crate::{Error, Result};

pub struct ForwardOutput {
    /// `patterns[layer][head]` is query x key, causal, rows summing to 1 (empty when the run
    /// keeps only some of their cells, [`Patterns::Cells`]).
    pub patterns: Vec<Vec<DMatrix<f32>>>,
    /// `pattern_cells[layer][head][i]`: the attention weight at the run's i-th (query, key) cell,
    /// when it keeps only those ([`Patterns::Cells`]); else empty.
    pub pattern_cells: Vec<Vec<Vec<f32>>>,
    /// position x vocab (0 x 0 when the run keeps only the top tokens or no logits, [`Logits`]).
    pub logits: DMatrix<f32>,
    /// Each position's top token, when the run keeps only those ([`Logits::TopToken`]): the
    /// highest logit, the last of equal ones (as `Iterator::max_by` picks); else empty.
    pub top_tokens: Vec<usize>,
    /// `head_outputs[layer][head]`: what each head writes to the residual stream (`z W_O` for
    /// that head, no bias; TransformerLens's `cache.stack_head_results`), position x d_model, or
    /// that times the projection asked for. Empty unless asked for (see [`HeadOutputs`]).
    pub head_outputs: Vec<Vec<DMatrix<f32>>>,
    /// `head_ranks[layer][head][i]`: where the run's i-th (position, direction) pair ranks its
    /// direction among all, by the head's contribution there ([`HeadOutputs::Ranked`]); else empty.
    pub head_ranks: Vec<Vec<Vec<usize>>>,
    /// Each head's standings until the final norm's scales are known (then `head_ranks`).
    standings: Vec<Vec<Vec<(usize, Standing)>>>,
    /// The final norm's divisor at each position: `sqrt(var + eps)` (LayerNorm) or
    /// `sqrt(mean square + eps)` (RMSNorm), TransformerLens's `ln_final.hook_scale`.
    pub final_scale: Vec<f32>,
}

/// Which per-head outputs a forward pass keeps: none by default (they cost a
/// position x d_model matrix per head), all of them, or each projected onto a few directions
/// (position x k per head, e.g. the unembedding columns of a handful of tokens).
#[derive(Clone, Copy)]
pub enum HeadOutputs<'a> {
    None,
    Full,
    Projected(&'a DMatrix<f32>),
    /// Only, for each (position t, direction j) pair, the rank of direction j among all the
    /// directions by the head's contribution at t (its output along each, divided by the final
    /// norm's scale at t): 1 + how many others are at least as high. (Copy fidelity's ranks,
    /// without keeping position x directions per head until the pass ends.)
    Ranked {
        directions: &'a DMatrix<f32>,
        pairs: &'a [(usize, usize)],
    },
}

/// What decides a pair's rank before the final norm's scale `s` is known: the chosen
/// direction's value `p`, how many others are already at least as high (`x >= p` gives
/// `x / s >= p / s` for any `s > 0`), and the others so close below that dividing by `s` could
/// round them up to it.
#[derive(Clone, Debug)]
pub(crate) struct Standing {
    value: f32,
    above: usize,
    close: Vec<f32>,
}

impl Standing {
    fn of(row: impl Iterator<Item = f32>, chosen: usize, value: f32) -> Standing {
        // Below this, x / s < p / s for every s a norm gives: apart by more than the rounding
        // of two divisions (2^-22 of p) and the smallest normal f32 scaled by s.
        let margin = value.abs() * (1.0 / (1u32 << 20) as f32) + 1e-30;
        let mut standing = Standing { value, above: 0, close: Vec::new() };
        for (j, x) in row.enumerate() {
            if j == chosen {
                continue;
            }
            if x >= value {
                standing.above += 1;
            } else if x >= value - margin {
                standing.close.push(x);
            }
        }
        standing
    }

    /// The rank once the scale is known, as `x / scale >= value / scale` counts it.
    fn rank(&self, scale: f32) -> usize {
        let value = self.value / scale;
        1 + self.above + self.close.iter().filter(|&&x| x / scale >= value).count()
    }
}

/// What a forward pass keeps of one run. A probe that reads a few cells of each pattern and each
/// position's top token asks for only those: more of its sequences then fit one pass (a streamed
/// model is read once a pass) and a GPU sends back those cells instead of every pattern.
#[derive(Clone, Copy)]
pub struct Keep<'a> {
    pub head_outputs: HeadOutputs<'a>,
    pub patterns: Patterns<'a>,
    pub logits: Logits,
}

/// What a run keeps of each head's attention pattern.
#[derive(Clone, Copy)]
pub enum Patterns<'a> {
    Whole,
    /// Only these (query, key) cells of each head's pattern, in this order.
    Cells(&'a [(usize, usize)]),
}

/// What a run keeps of the logits.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Logits {
    Whole,
    /// Only each position's top token.
    TopToken,
    /// None: the pass stops at the final norm (W_U is not read for it).
    None,
}

impl<'a> From<HeadOutputs<'a>> for Keep<'a> {
    /// Whole patterns and logits, and the head outputs asked for.
    fn from(head_outputs: HeadOutputs<'a>) -> Self {
        Keep { head_outputs, patterns: Patterns::Whole, logits: Logits::Whole }
    }
}

/// The most one forward pass may hold in what it keeps (every head's attention pattern, per-head
/// outputs when asked, and the logits), over all the sequences it runs together: well inside a
/// browser worker's 4 GB of wasm memory beside the model. A rotary model has no context limit, so a long prompt on a model with many heads would
/// otherwise ask for gigabytes (16 385 tokens on 16 × 8 heads: 137 GB of patterns).
pub const KEPT_BYTES_LIMIT: u64 = 1 << 30;

/// Bytes a forward pass over `len` tokens keeps: f32 patterns per head (len × len, or the cells
/// asked for, beside one layer's whole patterns, which the pass computes before it takes the
/// cells), when asked per-head outputs (len × their width per head), and the logits (len ×
/// vocabulary, or a top token per position). Saturates instead of overflowing.
pub fn kept_bytes(model: &(impl Weights + ?Sized), len: usize, keep: Keep) -> u64 {
    let (held, passing) = held_and_passing(model, len, keep);
    held.saturating_add(passing)
}

/// [`kept_bytes`] in two parts: what stays until the pass ends, and what passes through one
/// run at a time (a layer's whole patterns, for a run that keeps only some cells).
fn held_and_passing(model: &(impl Weights + ?Sized), len: usize, keep: Keep) -> (u64, u64) {
    let config = model.config();
    let heads = (config.layers as u64).saturating_mul(config.heads as u64);
    let len = len as u64;
    let per_head_output = match keep.head_outputs {
        HeadOutputs::None => 0,
        HeadOutputs::Full => config.d_model as u64,
        HeadOutputs::Projected(directions) => directions.ncols() as u64,
        // A standing per pair (about 12 words, with room for a close value), spread over the
        // positions.
        HeadOutputs::Ranked { pairs, .. } => (12 * pairs.len() as u64).div_ceil(len.max(1)),
    };
    let (pattern, one_layer) = match keep.patterns {
        Patterns::Whole => (len.saturating_mul(len), 0),
        Patterns::Cells(cells) => (cells.len() as u64, (config.heads as u64).saturating_mul(len).saturating_mul(len)),
    };
    let logits = match keep.logits {
        Logits::Whole => len.saturating_mul(config.vocab as u64),
        Logits::TopToken => len.saturating_mul(2),
        Logits::None => 0,
    };
    let held = heads.saturating_mul(pattern.saturating_add(len.saturating_mul(per_head_output))).saturating_add(logits);
    (held.saturating_mul(4), one_layer.saturating_mul(4))
}

/// Bytes runs keep together: what each holds, and the largest of what passes through them one
/// at a time.
fn together_bytes(model: &(impl Weights + ?Sized), runs: &[(&[usize], Keep)]) -> u64 {
    let (held, passing) = runs.iter().fold((0u64, 0u64), |(held, passing), (tokens, keep)| {
        let (h, p) = held_and_passing(model, tokens.len(), *keep);
        (held.saturating_add(h), passing.max(p))
    });
    held.saturating_add(passing)
}

/// Consecutive ranges of `runs` whose outputs fit [`KEPT_BYTES_LIMIT`] together (a run that
/// fits alone gets a range of its own at worst). A caller runs each range with [`run_batch`]
/// and reduces its outputs before the next, so a probe of many sequences or a suite of many
/// prompts stays within the budget; a streamed model is read once per range.
pub fn batches(model: &(impl Weights + ?Sized), runs: &[(&[usize], Keep)]) -> Vec<Range<usize>> {
    batches_within(model, runs, KEPT_BYTES_LIMIT)
}

/// [`batches`] for a budget of `limit` bytes.
pub fn batches_within(model: &(impl Weights + ?Sized), runs: &[(&[usize], Keep)], limit: u64) -> Vec<Range<usize>> {
    let mut ranges = Vec::new();
    let mut start = 0;
    for i in 0..runs.len() {
        if i > start && together_bytes(model, &runs[start..=i]) > limit {
            ranges.push(start..i);
            start = i;
        }
    }
    if start < runs.len() {
        ranges.push(start..runs.len());
    }
    ranges
}

/// Refuses a run whose kept outputs would pass [`KEPT_BYTES_LIMIT`], before allocating them.
fn check_kept(model: &(impl Weights + ?Sized), len: usize, keep: Keep) -> Result<()> {
    let bytes = kept_bytes(model, len, keep);
    if bytes <= KEPT_BYTES_LIMIT {
        return Ok(());
    }
    let longest = (1..=len).rev().find(|&n| kept_bytes(model, n, keep) <= KEPT_BYTES_LIMIT).unwrap_or(0);
    Err(Error::BadTokens(format!(
        "{len} tokens on {} layers × {} heads would keep {:.1} GB of attention patterns{} and logits, over the {:.1} GB a run may use: use at most {longest} tokens",
        model.config().layers,
        model.config().heads,
        bytes as f64 / 1e9,
        if matches!(keep.head_outputs, HeadOutputs::None) { "" } else { ", head outputs" },
        KEPT_BYTES_LIMIT as f64 / 1e9,
    )))
}

/// Checks a token sequence against the model before running it.
pub fn check_tokens(model: &(impl Weights + ?Sized), tokens: &[usize]) -> Result<()> {
    let config = model.config();
    if tokens.is_empty() {
        return Err(Error::BadTokens("no tokens to run".into()));
    }
    if let Some(&id) = tokens.iter().find(|&&t| t >= config.vocab) {
        return Err(Error::TokenOutOfRange { id, vocab: config.vocab });
    }
    if let Some(context) = config.context
        && tokens.len() > context
    {
        return Err(Error::TooLong { len: tokens.len(), context });
    }
    Ok(())
}

pub fn run(model: &(impl Weights + ?Sized), tokens: &[usize]) -> Result<ForwardOutput> {
    run_with(model, tokens, HeadOutputs::None.into())
}

/// The forward pass, keeping what `keep` asks for.
pub fn run_with(model: &(impl Weights + ?Sized), tokens: &[usize], keep: Keep) -> Result<ForwardOutput> {
    let outputs = run_batch(model, &[(tokens, keep)], &mut |_, _| {})?;
    outputs.into_iter().next().ok_or_else(|| Error::Internal("the forward pass gave no output".into()))
}

/// Several forward passes at once, layer by layer: each layer's weights are taken once (read
/// from the files when the model is streamed) and run on every sequence before the next layer,
/// so a streamed model is read once however many sequences there are. Each sequence's numbers
/// are exactly those of running it alone. `each_layer(done, layers + 1)` follows the progress:
/// a step per layer, and the last once the unembedding is done (W_U read, for a streamed model,
/// where a run keeps logits or top tokens). What each run keeps is its [`Keep`].
pub fn run_batch(
    model: &(impl Weights + ?Sized),
    runs: &[(&[usize], Keep)],
    each_layer: &mut dyn FnMut(usize, usize),
) -> Result<Vec<ForwardOutput>> {
    check_runs(model, runs)?;
    let config = model.config();
    let mut residuals = Vec::with_capacity(runs.len());
    for (tokens, _) in runs {
        residuals.push(first_residual(model, tokens)?);
    }
    let mut outputs: Vec<ForwardOutput> = runs.iter().map(|_| ForwardOutput::empty(config.layers)).collect();
    for l in 0..config.layers {
        let layer = model.layer(l, LoadParts::Everything)?;
        let has_mlp = layer.mlp.is_some() || layer.experts.is_some();
        if !has_mlp && !config.features.attention_only {
            return Err(Error::MissingMlp);
        }
        for ((residual, output), (_, keep)) in residuals.iter_mut().zip(&mut outputs).zip(runs) {
            let normed = normalise_or_not(residual, layer.ln1.as_ref(), config);
            let (attention_out, layer_patterns, layer_head_outputs) =
                attend(config, l, &layer, &normed, keep.head_outputs);
            output.keep_patterns(keep.patterns, layer_patterns);
            output.keep_head_outputs(layer_head_outputs);
            let attention_out = branch_output(config, layer.attention_out_norm.as_ref(), attention_out);
            // None for an attention-only block.
            let mlp_out = |residual: &DMatrix<f32>| -> Option<DMatrix<f32>> {
                let normed = normalise_or_not(residual, layer.ln2.as_ref(), config);
                let out = match (&layer.experts, &layer.mlp) {
                    (Some(experts), _) => mixture(config, experts, &normed),
                    (None, Some(mlp)) => feed_forward(mlp, config.mlp.activation(), &normed),
                    (None, None) => return None,
                };
                Some(branch_output(config, layer.mlp_out_norm.as_ref(), out))
            };
            if config.parallel_residual {
                match mlp_out(residual) {
                    Some(mlp_out) => *residual += attention_out + mlp_out,
                    None => *residual += attention_out,
                }
            } else {
                *residual += attention_out;
                if let Some(mlp_out) = mlp_out(residual) {
                    *residual += mlp_out;
                }
            }
        }
        each_layer(l + 1, config.layers + 1);
    }
    // One pass over the unembedding for every sequence that keeps its logits, and one for every
    // sequence that keeps only its top tokens.
    let normed: Vec<DMatrix<f32>> =
        residuals.iter().map(|r| normalise(r, model.ln_final(), config.norm, config.norm_eps)).collect();
    let wants = |kind: Logits| -> Vec<usize> { (0..runs.len()).filter(|&r| runs[r].1.logits == kind).collect() };
    let (whole, top) = (wants(Logits::Whole), wants(Logits::TopToken));
    // A streamed model's `unembed` reads all of W_U even for no sequence.
    let logits = match whole.is_empty() {
        true => Vec::new(),
        false => model.unembed(&whole.iter().map(|&r| normed[r].clone()).collect::<Vec<_>>())?,
    };
    for (&r, mut logits) in whole.iter().zip(logits) {
        if let Some(b_u) = model.unembedding_bias() {
            add_row_bias(&mut logits, b_u);
        }
        finish_logits(config, &mut logits);
        outputs[r].logits = logits;
    }
    let tops = top_tokens(model, &top.iter().map(|&r| &normed[r]).collect::<Vec<_>>())?;
    for (&r, tokens) in top.iter().zip(tops) {
        outputs[r].top_tokens = tokens;
    }
    for (output, residual) in outputs.iter_mut().zip(&residuals) {
        output.finish(norm_scales(residual, config.norm, config.norm_eps));
    }
    each_layer(config.layers + 1, config.layers + 1);
    Ok(outputs)
}

impl ForwardOutput {
    /// Nothing yet, for a model of `layers` layers.
    pub(crate) fn empty(layers: usize) -> ForwardOutput {
        ForwardOutput {
            patterns: Vec::with_capacity(layers),
            pattern_cells: Vec::new(),
            logits: DMatrix::zeros(0, 0),
            top_tokens: Vec::new(),
            head_outputs: Vec::new(),
            head_ranks: Vec::new(),
            standings: Vec::new(),
            final_scale: Vec::new(),
        }
    }

    /// Keeps a layer's head outputs (one per head, as [`head_output`] made them), if any.
    pub(crate) fn keep_head_outputs(&mut self, layer: Vec<HeadKept>) {
        let (mut outputs, mut standings) = (Vec::new(), Vec::new());
        for kept in layer {
            match kept {
                HeadKept::Output(output) => outputs.push(output),
                HeadKept::Standings(pairs) => standings.push(pairs),
            }
        }
        if !outputs.is_empty() {
            self.head_outputs.push(outputs);
        }
        if !standings.is_empty() {
            self.standings.push(standings);
        }
    }

    /// Sets the final norm's scales, and with them each head's ranks.
    pub(crate) fn finish(&mut self, final_scale: Vec<f32>) {
        let standings = std::mem::take(&mut self.standings);
        self.head_ranks = standings
            .iter()
            .map(|heads| {
                heads
                    .iter()
                    .map(|pairs| pairs.iter().map(|(t, standing)| standing.rank(final_scale[*t])).collect())
                    .collect()
            })
            .collect();
        self.final_scale = final_scale;
    }

    /// Keeps a layer's patterns (one per head) as `patterns` asks: whole, or only some cells.
    pub(crate) fn keep_patterns(&mut self, patterns: Patterns, layer: Vec<DMatrix<f32>>) {
        match patterns {
            Patterns::Whole => self.patterns.push(layer),
            Patterns::Cells(cells) => self.pattern_cells.push(
                layer.iter().map(|pattern| cells.iter().map(|&(query, key)| pattern[(query, key)]).collect()).collect(),
            ),
        }
    }
}

/// Each position's top token (the highest logit with the unembedding bias, the last of equal
/// ones) for each of several sequences' final-normed residuals: W_U read a block of tokens at a
/// time, once for all of them, and no sequence's logits held whole.
fn top_tokens(model: &(impl Weights + ?Sized), normed: &[&DMatrix<f32>]) -> Result<Vec<Vec<usize>>> {
    if normed.is_empty() {
        return Ok(Vec::new());
    }
    let vocab = model.config().vocab;
    let mut best: Vec<Vec<Option<(f32, usize)>>> = normed.iter().map(|n| vec![None; n.nrows()]).collect();
    for start in (0..vocab).step_by(crate::model::VOCAB_BLOCK) {
        let block = model.unembedding_rows(start..(start + crate::model::VOCAB_BLOCK).min(vocab))?.transpose();
        for (normed, best) in normed.iter().zip(&mut best) {
            let mut logits = *normed * &block;
            if let Some(b_u) = model.unembedding_bias() {
                add_row_bias(&mut logits, &b_u.rows(start, block.ncols()).into_owned());
            }
            finish_logits(model.config(), &mut logits);
            for (t, best) in best.iter_mut().enumerate() {
                for (c, &value) in logits.row(t).iter().enumerate() {
                    offer(best, value, start + c);
                }
            }
        }
    }
    Ok(best.into_iter().map(|rows| rows.into_iter().map(|b| b.map_or(0, |(_, token)| token)).collect()).collect())
}

/// Keeps `(value, token)` as the best so far if it is at least as high (in `f32::total_cmp`'s
/// order): tokens come in increasing order, so the last of equal logits wins, as
/// `Iterator::max_by` picks it.
pub(crate) fn offer(best: &mut Option<(f32, usize)>, value: f32, token: usize) {
    if best.is_none_or(|(high, _)| value.total_cmp(&high).is_ge()) {
        *best = Some((value, token));
    }
}

/// Refuses runs a forward pass must not take (see [`run_batch`]): a bad token, or outputs over
/// [`KEPT_BYTES_LIMIT`] alone or together. Every backend checks the same before computing.
pub(crate) fn check_runs(model: &(impl Weights + ?Sized), runs: &[(&[usize], Keep)]) -> Result<()> {
    for (tokens, keep) in runs {
        check_tokens(model, tokens)?;
        if let HeadOutputs::Ranked { directions, pairs } = keep.head_outputs
            && let Some(&(t, j)) = pairs.iter().find(|&&(t, j)| t >= tokens.len() || j >= directions.ncols())
        {
            return Err(Error::Internal(format!(
                "a ranked pair ({t}, {j}) outside a run of {} tokens and {} directions",
                tokens.len(),
                directions.ncols()
            )));
        }
        if let Patterns::Cells(cells) = keep.patterns
            && let Some(&(query, key)) =
                cells.iter().find(|&&(query, key)| query >= tokens.len() || key >= tokens.len())
        {
            return Err(Error::Internal(format!(
                "a pattern cell ({query}, {key}) outside a run of {} tokens",
                tokens.len()
            )));
        }
        check_kept(model, tokens.len(), *keep)?;
    }
    let together = together_bytes(model, runs);
    if runs.len() > 1 && together > KEPT_BYTES_LIMIT {
        return Err(Error::Internal(format!(
            "{} runs would keep {:.1} GB together, over the {:.1} GB a pass may use: split them with `forward::batches`",
            runs.len(),
            together as f64 / 1e9,
            KEPT_BYTES_LIMIT as f64 / 1e9
        )));
    }
    Ok(())
}

/// The residual stream before the first layer: the tokens' embedding rows, plus the learned
/// position rows where the model has them.
pub(crate) fn first_residual(model: &(impl Weights + ?Sized), tokens: &[usize]) -> Result<DMatrix<f32>> {
    let mut residual = model.embedding_of(tokens)?;
    if let Some(w_pos) = model.positions(tokens.len())? {
        residual += w_pos;
    }
    Ok(residual)
}

/// What a run keeps of one head's output.
pub(crate) enum HeadKept {
    Output(DMatrix<f32>),
    /// For each pair, its position and its standing there.
    Standings(Vec<(usize, Standing)>),
}

/// What head `head` writes to the residual stream from its mixed values `z` (position x
/// d_head), as `keep` asks: `z W_O` for that head's rows of W_O, that times the directions, or
/// from that the standings of the pairs asked for.
pub(crate) fn head_output(z: &DMatrix<f32>, w_o: &DMatrix<f32>, head: usize, keep: HeadOutputs) -> Option<HeadKept> {
    let rows = w_o.rows(head * z.ncols(), z.ncols());
    match keep {
        HeadOutputs::None => None,
        HeadOutputs::Full => Some(HeadKept::Output(z * rows)),
        HeadOutputs::Projected(directions) => Some(HeadKept::Output(z * (rows * directions))),
        HeadOutputs::Ranked { directions, pairs } => {
            let projected = z * (rows * directions);
            Some(HeadKept::Standings(
                pairs
                    .iter()
                    .map(|&(t, j)| (t, Standing::of(projected.row(t).iter().copied(), j, projected[(t, j)])))
                    .collect(),
            ))
        }
    }
}

/// Per layer: the attention block's output, every head's pattern, and the head outputs kept.
type Attended = (DMatrix<f32>, Vec<DMatrix<f32>>, Vec<HeadKept>);

fn attend(config: &ModelConfig, l: usize, layer: &Layer, normed: &DMatrix<f32>, keep: HeadOutputs) -> Attended {
    let weights = &layer.attention;
    let (seq, d_head) = (normed.nrows(), config.d_head);
    let project = |w: &DMatrix<f32>, b: &DVector<f32>| {
        let mut out = normed * w;
        add_row_bias(&mut out, b);
        out
    };
    let mut queries = project(&weights.w_q, &weights.b_q);
    let mut keys = project(&weights.w_k, &weights.b_k);
    let values = project(&weights.w_v, &weights.b_v);
    let norm_width = match config.features.qk_norm {
        QkNorm::PerHead => d_head,
        QkNorm::Whole | QkNorm::None => usize::MAX,
    };
    if let Some(norm) = &weights.q_norm {
        queries = normalise_in_parts(&queries, norm, norm_width, config.norm, config.norm_eps);
    }
    if let Some(norm) = &weights.k_norm {
        keys = normalise_in_parts(&keys, norm, norm_width, config.norm, config.norm_eps);
    }
    let positions = config.layer_positions(l);
    if let Positions::Rotary { dims, interleaved, .. } = positions {
        let frequencies = positions.inverse_frequencies();
        rotate(&mut queries, d_head, dims, &frequencies, interleaved);
        rotate(&mut keys, d_head, dims, &frequencies, interleaved);
    }
    let scale = config.attention_scale();
    let slopes = match positions {
        Positions::Alibi { before_scale } => alibi_slopes(config.heads, before_scale),
        _ => Vec::new(),
    };
    let window = config.layer_window(l);
    // A key k is seen from query t when k <= t and, in a sliding window w, t - w < k.
    let first_key = |t: usize| window.map_or(0, |w| (t + 1).saturating_sub(w));
    let mut mixed = DMatrix::zeros(seq, config.heads * d_head);
    let mut patterns = Vec::with_capacity(config.heads);
    let mut head_outputs = Vec::new();
    for head in 0..config.heads {
        let kv = config.kv_head_of(head) * d_head;
        let q = queries.columns(head * d_head, d_head);
        let k = keys.columns(kv, d_head);
        let mut pattern = match (positions, slopes.get(head)) {
            // ALiBi: the slope times the key's position, added to the scores before (Falcon)
            // or after (BLOOM) their scale.
            (Positions::Alibi { before_scale: true }, Some(&slope)) => {
                let mut scores = q * k.transpose();
                scores.column_iter_mut().enumerate().for_each(|(key, mut c)| c.add_scalar_mut(slope * key as f32));
                scores * scale
            }
            (Positions::Alibi { before_scale: false }, Some(&slope)) => {
                let mut scores = q * k.transpose() * scale;
                scores.column_iter_mut().enumerate().for_each(|(key, mut c)| c.add_scalar_mut(slope * key as f32));
                scores
            }
            _ => q * k.transpose() * scale,
        };
        if let Some(cap) = config.features.attention_softcap {
            pattern.apply(|s| *s = (*s / cap).tanh() * cap);
        }
        for (t, mut row) in pattern.row_iter_mut().enumerate() {
            let seen = first_key(t)..t + 1;
            let max = row.columns(seen.start, seen.len()).max();
            let mut total = 0.0;
            for key in 0..seq {
                let weight = if seen.contains(&key) { (row[key] - max).exp() } else { 0.0 };
                row[key] = weight;
                total += weight;
            }
            row /= total;
        }
        let z = &pattern * values.columns(kv, d_head);
        head_outputs.extend(head_output(&z, &weights.w_o, head, keep));
        mixed.columns_mut(head * d_head, d_head).copy_from(&z);
        patterns.push(pattern);
    }
    let mut out = mixed * &weights.w_o;
    add_row_bias(&mut out, &weights.b_o);
    (out, patterns, head_outputs)
}

/// ALiBi's slopes for `heads` heads, as transformers computes them (f32 powers of
/// 2^(-8 / n) for the nearest power of two n below, and every other power of the next one's
/// base for the rest), rounded to bf16 where Falcon rounds them.
pub(crate) fn alibi_slopes(heads: usize, bf16: bool) -> Vec<f32> {
    let nearest = 1usize << heads.max(1).ilog2();
    let base = |n: usize| 2f64.powf(-(2f64.powf(-((n as f64).log2() - 3.0)))) as f32;
    let mut slopes: Vec<f32> = (1..=nearest).map(|p| base(nearest).powi(p as i32)).collect();
    let extra = (heads - nearest).min(nearest);
    slopes.extend((0..extra).map(|i| base(2 * nearest).powi((2 * i + 1) as i32)));
    if bf16 {
        slopes.iter_mut().for_each(|s| *s = half::bf16::from_f32(*s).to_f32());
    }
    slopes
}

/// The rotary embedding on the first `dims` dimensions of each head: dimension i paired with
/// i + dims/2 (Hugging Face's rotate-half) or, `interleaved`, 2i with 2i + 1 (GPT-J's).
fn rotate(projected: &mut DMatrix<f32>, d_head: usize, dims: usize, inverse_frequencies: &[f32], interleaved: bool) {
    let half = dims / 2;
    let heads = projected.ncols() / d_head;
    for t in 0..projected.nrows() {
        for (i, &inverse_frequency) in inverse_frequencies.iter().enumerate() {
            let angle = t as f32 * inverse_frequency;
            let (sin, cos) = angle.sin_cos();
            for head in 0..heads {
                let (a, b) = match interleaved {
                    false => (head * d_head + i, head * d_head + i + half),
                    true => (head * d_head + 2 * i, head * d_head + 2 * i + 1),
                };
                let (x1, x2) = (projected[(t, a)], projected[(t, b)]);
                projected[(t, a)] = x1 * cos - x2 * sin;
                projected[(t, b)] = x2 * cos + x1 * sin;
            }
        }
    }
}

/// The stream normed by `norm`, or as it is where the block has no norm there (OLMo-2).
fn normalise_or_not<'a>(
    residual: &'a DMatrix<f32>,
    norm: Option<&Norm>,
    config: &ModelConfig,
) -> std::borrow::Cow<'a, DMatrix<f32>> {
    match norm {
        Some(norm) => std::borrow::Cow::Owned(normalise(residual, norm, config.norm, config.norm_eps)),
        None => std::borrow::Cow::Borrowed(residual),
    }
}

/// A block's output as it joins the stream: through its output norm (sandwich and post-norms)
/// and times the residual multiplier (Granite), where the family has them.
fn branch_output(config: &ModelConfig, norm: Option<&Norm>, out: DMatrix<f32>) -> DMatrix<f32> {
    let mut out = match norm {
        Some(norm) => normalise(&out, norm, config.norm, config.norm_eps),
        None => out,
    };
    if let Some(multiplier) = config.features.residual_multiplier {
        out *= multiplier;
    }
    out
}

/// The logits as the family gives them: divided by its logit divisor, then soft-capped.
fn finish_logits(config: &ModelConfig, logits: &mut DMatrix<f32>) {
    if let Some(divisor) = config.features.logits_divisor {
        *logits /= divisor;
    }
    if let Some(cap) = config.features.final_softcap {
        logits.apply(|x| *x = (*x / cap).tanh() * cap);
    }
}

/// A mixture of experts: per token, the router's softmax over the experts, the `top_k`
/// highest kept and renormalised to sum to one, and the chosen experts' outputs summed with
/// those weights, expert by expert in order (as transformers adds them).
fn mixture(config: &ModelConfig, experts: &Experts, normed: &DMatrix<f32>) -> DMatrix<f32> {
    let MlpKind::Experts { top_k, activation, .. } = config.mlp else {
        return DMatrix::zeros(normed.nrows(), config.d_model);
    };
    let chosen = route(&(normed * &experts.router), top_k);
    let mut out = DMatrix::zeros(normed.nrows(), config.d_model);
    for (e, expert) in experts.experts.iter().enumerate() {
        let rows: Vec<(usize, f32)> = chosen
            .iter()
            .enumerate()
            .filter_map(|(t, c)| c.iter().find(|(x, _)| *x == e).map(|&(_, w)| (t, w)))
            .collect();
        if rows.is_empty() {
            continue;
        }
        let input = DMatrix::from_fn(rows.len(), config.d_model, |i, j| normed[(rows[i].0, j)]);
        let result = feed_forward(expert, activation, &input);
        for (i, &(t, weight)) in rows.iter().enumerate() {
            for j in 0..config.d_model {
                out[(t, j)] += result[(i, j)] * weight;
            }
        }
    }
    out
}

/// Each token's experts and their weights from the router's logits (token x expert): the
/// softmax, the `top_k` highest kept (the lower expert first among equals) and renormalised to
/// sum to one.
pub(crate) fn route(router: &DMatrix<f32>, top_k: usize) -> Vec<Vec<(usize, f32)>> {
    let mut chosen: Vec<Vec<(usize, f32)>> = Vec::with_capacity(router.nrows());
    for row in router.row_iter() {
        let max = row.max();
        let weights: Vec<f32> = row.iter().map(|x| (x - max).exp()).collect();
        let total: f32 = weights.iter().sum();
        let mut ranked: Vec<(usize, f32)> = weights.iter().map(|w| w / total).enumerate().collect();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.truncate(top_k);
        let sum: f32 = ranked.iter().map(|(_, w)| w).sum();
        chosen.push(ranked.into_iter().map(|(e, w)| (e, w / sum)).collect());
    }
    chosen
}

fn feed_forward(mlp: &Mlp, activation: Activation, normed: &DMatrix<f32>) -> DMatrix<f32> {
    let mut hidden = normed * &mlp.w_in;
    add_row_bias(&mut hidden, &mlp.b_in);
    match &mlp.w_gate {
        Some(w_gate) => {
            let gate = (normed * w_gate).map(|g| activate(activation, g));
            hidden.component_mul_assign(&gate);
        }
        None => hidden.apply(|h| *h = activate(activation, *h)),
    }
    let mut out = hidden * &mlp.w_out;
    add_row_bias(&mut out, &mlp.b_out);
    out
}

fn activate(activation: Activation, x: f32) -> f32 {
    match activation {
        Activation::Relu => x.max(0.0),
        Activation::GeluTanh => {
            0.5 * x * (1.0 + ((2.0 / std::f32::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
        }
        Activation::GeluErf => 0.5 * x * (1.0 + libm::erff(x / std::f32::consts::SQRT_2)),
        Activation::Silu => x / (1.0 + (-x).exp()),
    }
}

/// Each row's norm divisor (what `normalise` divides by).
fn norm_scales(x: &DMatrix<f32>, kind: NormKind, eps: f32) -> Vec<f32> {
    let d = x.ncols() as f32;
    x.row_iter()
        .map(|row| match kind {
            NormKind::LayerNorm => {
                let mean = row.sum() / d;
                (row.add_scalar(-mean).norm_squared() / d + eps).sqrt()
            }
            NormKind::RmsNorm => (row.norm_squared() / d + eps).sqrt(),
        })
        .collect()
}

/// Each row's `width`-wide parts normed on their own (a per-head query or key norm), `norm`'s
/// weight and bias as wide as the row; `width` at least the row's: the whole row.
fn normalise_in_parts(x: &DMatrix<f32>, norm: &Norm, width: usize, kind: NormKind, eps: f32) -> DMatrix<f32> {
    let width = width.min(x.ncols()).max(1);
    let mut out = DMatrix::zeros(x.nrows(), x.ncols());
    for start in (0..x.ncols()).step_by(width) {
        let part = Norm {
            weight: norm.weight.rows(start, width).into_owned(),
            bias: norm.bias.as_ref().map(|b| b.rows(start, width).into_owned()),
        };
        out.columns_mut(start, width).copy_from(&normalise(&x.columns(start, width).into_owned(), &part, kind, eps));
    }
    out
}

pub(crate) fn normalise(x: &DMatrix<f32>, norm: &Norm, kind: NormKind, eps: f32) -> DMatrix<f32> {
    let mut out = x.clone();
    let d = x.ncols() as f32;
    for mut row in out.row_iter_mut() {
        match kind {
            NormKind::LayerNorm => {
                let mean = row.sum() / d;
                row.add_scalar_mut(-mean);
                let variance = row.norm_squared() / d;
                row /= (variance + eps).sqrt();
            }
            NormKind::RmsNorm => {
                let mean_square = row.norm_squared() / d;
                row /= (mean_square + eps).sqrt();
            }
        }
        for (j, value) in row.iter_mut().enumerate() {
            *value = *value * norm.weight[j] + norm.bias.as_ref().map_or(0.0, |b| b[j]);
        }
    }
    out
}

pub(crate) fn add_row_bias(m: &mut DMatrix<f32>, bias: &DVector<f32>) {
    for mut row in m.row_iter_mut() {
        row += bias.transpose();
    }
}
