//! The forward pass on the GPU: the same steps as [`crate::forward::run_batch`], in f32 kernels
//! (forward.wgsl). Every sequence of a batch is stacked into one matrix of rows, so each layer's
//! products are one dispatch for all of them; the residual stream stays on the device from the
//! embedding to the final norm. What crosses back is what each run keeps ([`Keep`]): each
//! head's whole pattern or only the cells asked for (gathered on the device), the logits or
//! only each row's highest (found on the device, block by block), the final norm's scales, and
//! the heads' mixed values where per-head outputs are asked for (their small products with W_O
//! are the CPU's, as in [`crate::forward::head_output`]).
//!
//! The host still gathers the embedding rows and reads each layer's weights (from the files,
//! for a streamed model); each layer's weights are uploaded once, in the narrowest format
//! that holds them exactly (narrow.rs), and used as f32.

use nalgebra::DMatrix;

mod launch;

use launch::{
    ActivateSettings, AttendSettings, Dispatch, GatherSettings, GemmSettings, HighestSettings, NormSettings,
    RotarySettings, WeighSettings, activation, alibi, binding,
};

use super::buffers::Role;
use super::failure::{Scopes, one_line};
use super::{Gpu, compute_pipeline};
use crate::forward::{self, ForwardOutput, HeadOutputs, Keep, Logits, Patterns};
use crate::model::{
    Activation, Experts, Layer, LoadParts, Mlp, MlpKind, ModelConfig, Norm, NormKind, NormSites, Positions, QkNorm,
    Weights,
};
use crate::{Error, Result};

const KERNELS: &str = include_str!("forward.wgsl");

/// The widest head the attention kernel holds a query of (its workgroup array).
const WIDEST_HEAD: usize = 256;
/// Groups a dispatch dimension takes (WebGPU's guaranteed minimum).
const SPAN: usize = 65535;
/// How much of the work a forward pass does at once.
#[doc(hidden)]
#[derive(Debug, Clone, Copy)]
pub struct Pieces {
    /// The most bytes of attention patterns computed and read back at once: sequences are
    /// taken together up to this (or the adapter's binding limit, if lower).
    pub pattern_bytes: u64,
    /// Vocabulary rows of the unembedding uploaded at once (fewer where the binding limit says).
    pub vocab_rows: usize,
    /// The most rows (tokens of all the sequences together) run through the layers at once
    /// (fewer where the binding limit says: each working matrix is one binding).
    pub batch_rows: usize,
}

impl Default for Pieces {
    fn default() -> Self {
        Pieces { pattern_bytes: 256 << 20, vocab_rows: 8192, batch_rows: usize::MAX }
    }
}

/// The forward pass's compiled kernels, made on the first forward pass.
pub(super) struct ForwardKernels {
    gemm: wgpu::ComputePipeline,
    norm: wgpu::ComputePipeline,
    rotary: wgpu::ComputePipeline,
    attend: wgpu::ComputePipeline,
    activate: wgpu::ComputePipeline,
    weigh: wgpu::ComputePipeline,
    gather: wgpu::ComputePipeline,
    highest: wgpu::ComputePipeline,
}

/// A sequence to run, and what to keep of it.
type Run<'a> = (&'a [usize], Keep<'a>);

/// Where each sequence of the batch sits: its rows in the stacked matrix, and its patterns'
/// offset (in f32 values) among its group's.
struct Placed {
    first_row: usize,
    len: usize,
    pattern_at: usize,
}

/// Sequences whose patterns are computed and read back together.
struct PatternGroup {
    runs: std::ops::Range<usize>,
    first_value: usize,
    values: usize,
}

/// One layer's weights on the device (a norm the block does not have is None).
struct LayerOnDevice {
    ln1: Option<NormOnDevice>,
    ln2: Option<NormOnDevice>,
    q_norm: Option<NormOnDevice>,
    k_norm: Option<NormOnDevice>,
    attention_out_norm: Option<NormOnDevice>,
    mlp_out_norm: Option<NormOnDevice>,
    w_q: wgpu::Buffer,
    b_q: wgpu::Buffer,
    w_k: wgpu::Buffer,
    b_k: wgpu::Buffer,
    w_v: wgpu::Buffer,
    b_v: wgpu::Buffer,
    w_o: wgpu::Buffer,
    b_o: wgpu::Buffer,
    /// None for a mixture of experts (each expert is uploaded when a token chooses it) and an
    /// attention-only block.
    mlp: Option<MlpOnDevice>,
}

/// An MLP's (or one expert's) weights on the device.
struct MlpOnDevice {
    w_in: wgpu::Buffer,
    b_in: wgpu::Buffer,
    w_gate: Option<wgpu::Buffer>,
    w_out: wgpu::Buffer,
    b_out: wgpu::Buffer,
}

struct NormOnDevice {
    weight: wgpu::Buffer,
    bias: Option<wgpu::Buffer>,
}

/// The batch's working matrices on the device, each rows x its width.
struct Activations {
    residual: wgpu::Buffer,
    normed: wgpu::Buffer,
    scales: wgpu::Buffer,
    queries: wgpu::Buffer,
    keys: wgpu::Buffer,
    values: wgpu::Buffer,
    mixed: wgpu::Buffer,
    hidden: wgpu::Buffer,
    gate: Option<wgpu::Buffer>,
    /// A branch's output before its output norm (sandwich and post-norms).
    branch: Option<wgpu::Buffer>,
    /// A mixture of experts' router logits (rows x experts), one expert's output and the
    /// experts' weighted sum (rows x d_model each).
    experts: Option<[wgpu::Buffer; 3]>,
    patterns: wgpu::Buffer,
    rows_of: wgpu::Buffer,
    /// The rotary angle tables of every rotary embedding a layer uses, one after another, and
    /// where each starts.
    rotary: Option<(wgpu::Buffer, Vec<(Positions, usize)>)>,
    /// ALiBi's slope of each head.
    slopes: Option<wgpu::Buffer>,
    /// Bound where a kernel's binding goes unused this time (a norm without bias).
    unused: wgpu::Buffer,
}

impl Gpu {
    /// The forward pass over `runs`: the checks, outputs and progress steps of
    /// [`forward::run_batch`], the arithmetic in f32 on this GPU. A failure of the GPU is an
    /// [`Error::Gpu`] (the caller may rerun on the CPU); the model's own errors are its own.
    pub async fn forward(
        &self,
        model: &(impl Weights + ?Sized),
        runs: &[(&[usize], Keep<'_>)],
        each_layer: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<ForwardOutput>> {
        self.forward_in(Pieces::default(), model, runs, each_layer).await
    }

    /// [`Gpu::forward`] in pieces of the size given: tests make them small, to check that
    /// batches of runs, groups of sequences and blocks of the vocabulary join up.
    #[doc(hidden)]
    pub async fn forward_in(
        &self,
        pieces: Pieces,
        model: &(impl Weights + ?Sized),
        runs: &[(&[usize], Keep<'_>)],
        each_layer: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<ForwardOutput>> {
        forward::check_runs(model, runs)?;
        let config = model.config();
        if config.d_head > WIDEST_HEAD {
            return Err(Error::Gpu(format!(
                "heads of {} dimensions, over the {WIDEST_HEAD} the GPU's attention kernel holds",
                config.d_head
            )));
        }
        // Runs whose rows together would make a working matrix wider than one binding go through
        // the layers in batches, each reading and uploading the weights again: slower than one
        // pass, but still on the GPU. (A single run over the limit fails to fit, and the caller
        // reruns it on the CPU.)
        let widest = config.d_model.max(config.heads * config.d_head).max(config.d_mlp).max(1);
        let fit = ((self.max_binding / (4 * widest as u64)) as usize).min(pieces.batch_rows).max(1);
        let mut batches: Vec<&[Run]> = Vec::new();
        let (mut first, mut rows) = (0, 0);
        for (i, (tokens, _)) in runs.iter().enumerate() {
            if i > first && rows + tokens.len() > fit {
                batches.push(&runs[first..i]);
                (first, rows) = (i, 0);
            }
            rows += tokens.len();
        }
        batches.push(&runs[first..]);
        let mut outputs = Vec::with_capacity(runs.len());
        let count = batches.len();
        for (b, batch) in batches.into_iter().enumerate() {
            let progress = &mut |done, total| each_layer(b * total + done, count * total);
            outputs.extend(self.forward_batch(pieces, model, batch, progress).await?);
        }
        Ok(outputs)
    }

    /// [`Gpu::forward_in`] of runs whose rows all go through the layers together.
    async fn forward_batch(
        &self,
        pieces: Pieces,
        model: &(impl Weights + ?Sized),
        runs: &[(&[usize], Keep<'_>)],
        each_layer: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<ForwardOutput>> {
        let config = model.config();
        let kernels = self.forward_kernels().await?;
        let (placed, groups) = self.place(config, runs, pieces.pattern_bytes)?;
        let rows = placed.last().map_or(0, |p| p.first_row + p.len);
        let mut outputs: Vec<ForwardOutput> = runs.iter().map(|_| ForwardOutput::empty(config.layers)).collect();
        let mut residual = DMatrix::<f32>::zeros(rows, config.d_model);
        for ((tokens, _), at) in runs.iter().zip(&placed) {
            residual.rows_mut(at.first_row, at.len).copy_from(&forward::first_residual(model, tokens)?);
        }
        let device = self.activations(config, &placed, &groups, &residual)?;
        drop(residual);
        let keeps_heads = runs.iter().any(|(_, keep)| !matches!(keep.head_outputs, HeadOutputs::None));
        for l in 0..config.layers {
            let layer = model.layer(l, LoadParts::Everything)?;
            let weights = self.upload_layer(config, &layer)?;
            let layer_weights = (&weights, layer.experts.as_ref());
            self.run_layer(kernels, config, l, rows, &device, layer_weights, (&groups, &placed, runs), &mut outputs)
                .await?;
            if keeps_heads {
                let mixed = self.read_matrix(&device.mixed, rows, config.heads * config.d_head).await?;
                keep_head_outputs(config, &layer, runs, &placed, &mixed, &mut outputs);
            }
            each_layer(l + 1, config.layers + 1);
        }
        self.unembed(kernels, model, rows, &device, (&placed, runs), pieces.vocab_rows, &mut outputs).await?;
        each_layer(config.layers + 1, config.layers + 1);
        Ok(outputs)
    }

    /// The kernels, compiled on the first call.
    async fn forward_kernels(&self) -> Result<&ForwardKernels> {
        if let Some(kernels) = self.forward.get() {
            return Ok(kernels);
        }
        let invalid = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let module = self.device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("forward.wgsl"),
            source: wgpu::ShaderSource::Wgsl(KERNELS.into()),
        });
        let pipeline = |entry: &str| compute_pipeline(&self.device, &module, entry);
        let kernels = ForwardKernels {
            gemm: pipeline("gemm"),
            norm: pipeline("norm"),
            rotary: pipeline("rotary"),
            attend: pipeline("attend"),
            activate: pipeline("activate"),
            weigh: pipeline("weigh"),
            gather: pipeline("gather"),
            highest: pipeline("highest"),
        };
        if let Some(error) = invalid.pop().await {
            return Err(self.error(format!("the forward kernels do not compile: {}", one_line(&error.to_string()))));
        }
        Ok(self.forward.get_or_init(|| kernels))
    }

    /// Each run's rows in the stacked matrix, and the runs grouped so that a group's patterns
    /// fit one binding.
    fn place(
        &self,
        config: &ModelConfig,
        runs: &[(&[usize], Keep<'_>)],
        pattern_bytes: u64,
    ) -> Result<(Vec<Placed>, Vec<PatternGroup>)> {
        let limit = (pattern_bytes.min(self.max_binding) / 4) as usize;
        let (mut placed, mut groups) = (Vec::with_capacity(runs.len()), Vec::new());
        let (mut first_row, mut group_start, mut group_first_value, mut value) = (0, 0, 0, 0);
        for (i, (tokens, _)) in runs.iter().enumerate() {
            let len = tokens.len();
            let values = config.heads * len * len;
            if values > limit {
                return Err(Error::Gpu(format!(
                    "{len} tokens' attention patterns take {} MB, over the {} MB one binding holds",
                    4 * values / 1_000_000,
                    4 * limit / 1_000_000
                )));
            }
            if value + values - group_first_value > limit {
                groups.push(PatternGroup {
                    runs: group_start..i,
                    first_value: group_first_value,
                    values: value - group_first_value,
                });
                (group_start, group_first_value) = (i, value);
            }
            placed.push(Placed { first_row, len, pattern_at: value });
            first_row += len;
            value += values;
        }
        if group_start < runs.len() {
            groups.push(PatternGroup {
                runs: group_start..runs.len(),
                first_value: group_first_value,
                values: value - group_first_value,
            });
        }
        Ok((placed, groups))
    }

    /// The working matrices for `rows` rows, the residual stream set to `residual`.
    fn activations(
        &self,
        config: &ModelConfig,
        placed: &[Placed],
        groups: &[PatternGroup],
        residual: &DMatrix<f32>,
    ) -> Result<Activations> {
        let rows = residual.nrows();
        let storage = |label: &str, values: usize| -> Result<wgpu::Buffer> {
            self.fits(label, 4 * values as u64)?;
            Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: 4 * values.max(1) as u64,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            }))
        };
        let (width, kv_width) = (config.heads * config.d_head, config.kv_heads * config.d_head);
        let gated = config.mlp.gated();
        let mut device = Activations {
            residual: storage("residual", rows * config.d_model)?,
            normed: storage("normed", rows * config.d_model)?,
            scales: storage("norm scales", rows)?,
            queries: storage("queries", rows * width)?,
            keys: storage("keys", rows * kv_width)?,
            values: storage("values", rows * kv_width)?,
            mixed: storage("mixed values", rows * width)?,
            hidden: storage("mlp hidden", rows * config.d_mlp)?,
            gate: if gated { Some(storage("mlp gate", rows * config.d_mlp)?) } else { None },
            branch: match config.features.norm_sites {
                NormSites::Sandwich | NormSites::Post => Some(storage("branch output", rows * config.d_model)?),
                NormSites::Pre => None,
            },
            experts: match config.mlp {
                MlpKind::Experts { experts, .. } => Some([
                    storage("router logits", rows * experts)?,
                    storage("expert output", rows * config.d_model)?,
                    storage("experts' output", rows * config.d_model)?,
                ]),
                MlpKind::Plain(_) | MlpKind::Gated(_) => None,
            },
            patterns: storage("patterns", groups.iter().map(|g| g.values).max().unwrap_or(1))?,
            rows_of: storage("rows", 4 * rows)?,
            rotary: None,
            slopes: None,
            unused: storage("unused", 4)?,
        };
        let layer_positions: Vec<Positions> = (0..config.layers).map(|l| config.layer_positions(l)).collect();
        let longest = placed.iter().map(|p| p.len).max().unwrap_or(1);
        let (mut tables, mut starts) = (Vec::new(), Vec::new());
        for &positions in &layer_positions {
            if matches!(positions, Positions::Rotary { .. }) && !starts.iter().any(|(p, _)| *p == positions) {
                starts.push((positions, tables.len()));
                tables.extend(rotary_table(&positions, longest));
            }
        }
        if !starts.is_empty() {
            let buffer = storage("rotary angles", tables.len())?;
            self.write(&buffer, &tables);
            device.rotary = Some((buffer, starts));
        }
        if let Some(&Positions::Alibi { before_scale }) =
            layer_positions.iter().find(|p| matches!(p, Positions::Alibi { .. }))
        {
            let slopes = forward::alibi_slopes(config.heads, before_scale);
            let buffer = storage("alibi slopes", slopes.len())?;
            self.write(&buffer, &slopes);
            device.slopes = Some(buffer);
        }
        self.write(&device.residual, residual.as_slice());
        self.write(&device.rows_of, &rows_table(placed, rows));
        Ok(device)
    }

    /// A layer's weights, uploaded as f32 in nalgebra's column-major order.
    fn upload_layer(&self, config: &ModelConfig, layer: &Layer) -> Result<LayerOnDevice> {
        let mlp = match (&layer.mlp, &layer.experts) {
            (Some(mlp), _) => Some(self.upload_mlp(mlp)?),
            (None, Some(_)) => None,
            (None, None) if config.features.attention_only => None,
            (None, None) => return Err(Error::MissingMlp),
        };
        let upload = |label: &str, values: &[f32]| self.upload_values(label, values);
        let norm = |norm: &Option<Norm>| norm.as_ref().map(|norm| self.upload_norm(norm)).transpose();
        let attention = &layer.attention;
        Ok(LayerOnDevice {
            ln1: norm(&layer.ln1)?,
            ln2: norm(&layer.ln2)?,
            q_norm: norm(&attention.q_norm)?,
            k_norm: norm(&attention.k_norm)?,
            attention_out_norm: norm(&layer.attention_out_norm)?,
            mlp_out_norm: norm(&layer.mlp_out_norm)?,
            w_q: upload("w_q", attention.w_q.as_slice())?,
            b_q: upload("b_q", attention.b_q.as_slice())?,
            w_k: upload("w_k", attention.w_k.as_slice())?,
            b_k: upload("b_k", attention.b_k.as_slice())?,
            w_v: upload("w_v", attention.w_v.as_slice())?,
            b_v: upload("b_v", attention.b_v.as_slice())?,
            w_o: upload("w_o", attention.w_o.as_slice())?,
            b_o: upload("b_o", attention.b_o.as_slice())?,
            mlp,
        })
    }

    fn upload_mlp(&self, mlp: &Mlp) -> Result<MlpOnDevice> {
        let upload = |label: &str, values: &[f32]| self.upload_values(label, values);
        Ok(MlpOnDevice {
            w_in: upload("w_in", mlp.w_in.as_slice())?,
            b_in: upload("b_in", mlp.b_in.as_slice())?,
            w_gate: mlp.w_gate.as_ref().map(|w| upload("w_gate", w.as_slice())).transpose()?,
            w_out: upload("w_out", mlp.w_out.as_slice())?,
            b_out: upload("b_out", mlp.b_out.as_slice())?,
        })
    }

    /// One layer on every sequence: attention (its patterns read back group by group into
    /// `outputs`), then the MLP, the residual stream updated on the device.
    #[allow(clippy::too_many_arguments)]
    async fn run_layer(
        &self,
        kernels: &ForwardKernels,
        config: &ModelConfig,
        l: usize,
        rows: usize,
        device: &Activations,
        (weights, experts): (&LayerOnDevice, Option<&Experts>),
        (groups, placed, runs): (&[PatternGroup], &[Placed], &[Run<'_>]),
        outputs: &mut [ForwardOutput],
    ) -> Result<()> {
        let (d_model, d_head) = (config.d_model, config.d_head);
        let (width, kv_width) = (config.heads * d_head, config.kv_heads * d_head);
        // A block without an input norm (post-norms) reads the stream as it is.
        let mut before = Vec::new();
        let attention_input = match &weights.ln1 {
            Some(ln1) => {
                before.push(self.norm(
                    kernels,
                    config,
                    rows,
                    ln1,
                    (&device.residual, &device.normed),
                    NormTo::Rows,
                    device,
                ));
                &device.normed
            }
            None => &device.residual,
        };
        for (w, b, out, n, heads, qk_norm) in [
            (&weights.w_q, &weights.b_q, &device.queries, width, config.heads, &weights.q_norm),
            (&weights.w_k, &weights.b_k, &device.keys, kv_width, config.kv_heads, &weights.k_norm),
            (&weights.w_v, &weights.b_v, &device.values, kv_width, config.kv_heads, &None),
        ] {
            let product = |to| gemm(kernels, (rows, n, d_model), attention_input, w, Some(b), to, Product::Set);
            match qk_norm {
                // The projection goes through `mixed` (free until the attention writes it) to be
                // normed into its place: per head, or over the whole projection.
                Some(qk_norm) => {
                    let parts = match config.features.qk_norm {
                        QkNorm::PerHead => NormTo::Parts { parts: heads, width: d_head },
                        QkNorm::Whole | QkNorm::None => NormTo::Parts { parts: 1, width: n },
                    };
                    before.push(product(&device.mixed));
                    before.push(self.norm(kernels, config, rows, qk_norm, (&device.mixed, out), parts, device));
                }
                None => before.push(product(out)),
            }
        }
        let positions = config.layer_positions(l);
        if let Positions::Rotary { dims, interleaved, .. } = positions {
            let (table, starts) = device.rotary.as_ref().ok_or_else(|| Error::Gpu("no rotary table".into()))?;
            let start = starts
                .iter()
                .find(|(p, _)| *p == positions)
                .map(|&(_, start)| start)
                .ok_or_else(|| Error::Gpu(format!("no rotary table for layer {l}")))?;
            let longest = placed.iter().map(|p| p.len).max().unwrap_or(1);
            let half = dims / 2;
            for (out, heads) in [(&device.queries, config.heads), (&device.keys, config.kv_heads)] {
                let settings = RotarySettings {
                    rows: rows as u32,
                    heads: heads as u32,
                    d_head: d_head as u32,
                    interleaved: interleaved as u32,
                    half: half as u32,
                    sines_at: (longest * half) as u32,
                    table_first: start as u32,
                    _pad: [0],
                };
                before.push(Dispatch::new(
                    &kernels.rotary,
                    &settings,
                    vec![(binding::X, table), (binding::OUT, out), (binding::ROWS_OF, &device.rows_of)],
                    threads(rows * heads * half),
                ));
            }
        }
        self.submit(before).await?;

        let scale = config.attention_scale();
        // A layer's sliding window (0: none).
        let window = config.layer_window(l).unwrap_or(0);
        let window = u32::try_from(window).map_err(|_| Error::Gpu(format!("a window of {window}")))?;
        let cap = config.features.attention_softcap;
        let alibi = match positions {
            Positions::Alibi { before_scale: false } => alibi::AFTER_SCALE,
            Positions::Alibi { before_scale: true } => alibi::BEFORE_SCALE,
            Positions::Learned | Positions::Rotary { .. } | Positions::Nope => alibi::NONE,
        };
        for group in groups {
            let first_row = placed[group.runs.start].first_row;
            let last = &placed[group.runs.end - 1];
            let count = last.first_row + last.len - first_row;
            let settings = AttendSettings {
                rows: rows as u32,
                heads: config.heads as u32,
                d_head: d_head as u32,
                first_row: first_row as u32,
                row_count: count as u32,
                group: (config.heads / config.kv_heads) as u32,
                scale,
                patterns_first: group.first_value as u32,
                window,
                soft_cap: cap.is_some() as u32,
                cap: cap.unwrap_or(0.0),
                alibi,
            };
            let buffers = vec![
                (binding::X, &device.queries),
                (binding::Y, &device.keys),
                (binding::W, &device.values),
                (binding::OUT, &device.patterns),
                (binding::OUT2, &device.mixed),
                (binding::ROWS_OF, &device.rows_of),
                (binding::SLOPES, device.slopes.as_ref().unwrap_or(&device.unused)),
            ];
            let groups = (count.min(SPAN) as u32, config.heads as u32, count.div_ceil(SPAN) as u32);
            let attend = Dispatch::new(&kernels.attend, &settings, buffers, groups);
            self.read_patterns(
                kernels,
                device,
                group,
                attend,
                &placed[group.runs.clone()],
                &runs[group.runs.clone()],
                config.heads,
                &mut outputs[group.runs.clone()],
            )
            .await?;
        }

        let mut after = Vec::new();
        // The MLP's input norm, or the stream as it is where the block has none. GPT-NeoX's MLP
        // reads the residual stream the attention read; the others', the stream after the
        // attention's output is added.
        let mut ln2 = weights
            .ln2
            .as_ref()
            .map(|ln2| self.norm(kernels, config, rows, ln2, (&device.residual, &device.normed), NormTo::Rows, device));
        let mlp_input = if ln2.is_some() { &device.normed } else { &device.residual };
        if config.parallel_residual {
            if ln2.is_none() {
                return Err(Error::Gpu("a parallel block without an MLP norm".into()));
            }
            after.extend(ln2.take());
        }
        let attention_out = (&device.mixed, &weights.w_o, &weights.b_o, width);
        after.extend(self.join_branch(kernels, config, rows, device, attention_out, &weights.attention_out_norm)?);
        after.extend(ln2.take());
        match (&weights.mlp, experts) {
            (Some(mlp), _) => {
                after.extend(hidden(kernels, config, rows, device, mlp_input, mlp));
                let mlp_out = (&device.hidden, &mlp.w_out, &mlp.b_out, config.d_mlp);
                after.extend(self.join_branch(kernels, config, rows, device, mlp_out, &weights.mlp_out_norm)?);
                self.submit(after).await
            }
            (None, Some(experts)) => {
                self.submit(after).await?;
                self.mixture(kernels, config, rows, device, mlp_input, experts, &weights.mlp_out_norm).await
            }
            // An attention-only block (`upload_layer` checked that the model has them).
            (None, None) => self.submit(after).await,
        }
    }

    /// A mixture of experts on `input` (`rows` x d_model), joined to the residual stream as
    /// an MLP's output is: the router's logits read back and each token's experts chosen and
    /// weighted as [`forward::route`] does; then each expert some token chose, uploaded in turn
    /// and run on every row, its output added times each row's weight for it (zero where the
    /// row did not choose it), in the experts' order as the CPU adds them.
    #[allow(clippy::too_many_arguments)]
    async fn mixture(
        &self,
        kernels: &ForwardKernels,
        config: &ModelConfig,
        rows: usize,
        device: &Activations,
        input: &wgpu::Buffer,
        experts: &Experts,
        out_norm: &Option<NormOnDevice>,
    ) -> Result<()> {
        let (MlpKind::Experts { experts: count, top_k, .. }, Some([logits, expert_out, sum])) =
            (config.mlp, &device.experts)
        else {
            return Err(Error::Gpu("experts on a model without them".into()));
        };
        let d_model = config.d_model;
        let router = self.upload_values("router", experts.router.as_slice())?;
        self.submit(vec![gemm(kernels, (rows, count, d_model), input, &router, None, logits, Product::Set)]).await?;
        let chosen = forward::route(&self.read_matrix(logits, rows, count).await?, top_k);
        let mut weights = DMatrix::<f32>::zeros(rows, count);
        for (t, chosen) in chosen.iter().enumerate() {
            for &(e, weight) in chosen {
                weights[(t, e)] = weight;
            }
        }
        let weights_on_device = self.upload_buffer("expert weights", weights.as_slice())?;
        let mut first = true;
        for (e, expert) in experts.experts.iter().enumerate() {
            if !chosen.iter().any(|c| c.iter().any(|&(x, _)| x == e)) {
                continue;
            }
            let mlp = self.upload_mlp(expert)?;
            let mut dispatches = hidden(kernels, config, rows, device, input, &mlp);
            let shape = (rows, d_model, config.d_mlp);
            dispatches.push(gemm(
                kernels,
                shape,
                &device.hidden,
                &mlp.w_out,
                Some(&mlp.b_out),
                expert_out,
                Product::Set,
            ));
            // The first expert's weighted output replaces the sum; the others add to it.
            let settings = WeighSettings {
                rows: rows as u32,
                width: d_model as u32,
                per_row: 1,
                replace: first as u32,
                weights_first: (e * rows) as u32,
                ..WeighSettings::default()
            };
            dispatches.push(Dispatch::new(
                &kernels.weigh,
                &settings,
                vec![(binding::X, expert_out), (binding::Y, &weights_on_device), (binding::OUT, sum)],
                threads(rows * d_model),
            ));
            self.submit(dispatches).await?;
            first = false;
        }
        let multiplier = config.features.residual_multiplier.unwrap_or(1.0);
        let join = match out_norm {
            Some(norm) => {
                self.norm(kernels, config, rows, norm, (sum, &device.residual), NormTo::Join(multiplier), device)
            }
            None => Dispatch::new(
                &kernels.weigh,
                &WeighSettings {
                    rows: rows as u32,
                    width: d_model as u32,
                    weight: multiplier,
                    ..WeighSettings::default()
                },
                vec![(binding::X, sum), (binding::Y, &device.unused), (binding::OUT, &device.residual)],
                threads(rows * d_model),
            ),
        };
        self.submit(vec![join]).await
    }

    /// A branch's output `x W + b` (x `rows` x `k`) joined to the residual stream: through the
    /// branch's output norm where the block has one, times the residual multiplier where the
    /// family has one, as [`crate::forward`]'s `branch_output` does.
    #[allow(clippy::too_many_arguments)]
    fn join_branch<'a>(
        &self,
        kernels: &'a ForwardKernels,
        config: &ModelConfig,
        rows: usize,
        device: &'a Activations,
        (x, w, b, k): (&'a wgpu::Buffer, &'a wgpu::Buffer, &'a wgpu::Buffer, usize),
        out_norm: &'a Option<NormOnDevice>,
    ) -> Result<Vec<Dispatch<'a>>> {
        let multiplier = config.features.residual_multiplier;
        let shape = (rows, config.d_model, k);
        Ok(match (out_norm, &device.branch) {
            (None, _) => {
                let settings = GemmSettings {
                    multiply: multiplier.is_some() as u32,
                    multiplier: multiplier.unwrap_or(0.0),
                    ..gemm_settings(shape, Product::Add)
                };
                vec![gemm_with(kernels, settings, x, w, Some(b), &device.residual)]
            }
            (Some(norm), Some(branch)) => vec![
                gemm(kernels, shape, x, w, Some(b), branch, Product::Set),
                self.norm(
                    kernels,
                    config,
                    rows,
                    norm,
                    (branch, &device.residual),
                    NormTo::Join(multiplier.unwrap_or(1.0)),
                    device,
                ),
            ],
            (Some(_), None) => return Err(Error::Gpu("an output norm on a pre-norm block".into())),
        })
    }

    /// The final norm, then the logits a block of the vocabulary at a time (W_U read and
    /// uploaded once per block for every sequence, the unembedding bias added on the device):
    /// each block read back where a sequence keeps its logits, and only each row's highest
    /// entry where it keeps its top tokens.
    #[allow(clippy::too_many_arguments)]
    async fn unembed(
        &self,
        kernels: &ForwardKernels,
        model: &(impl Weights + ?Sized),
        rows: usize,
        device: &Activations,
        (placed, runs): (&[Placed], &[Run<'_>]),
        vocab_rows: usize,
        outputs: &mut [ForwardOutput],
    ) -> Result<()> {
        let config = model.config();
        let ln_final = self.upload_norm(model.ln_final())?;
        let into_normed = (&device.residual, &device.normed);
        self.submit(vec![self.norm(kernels, config, rows, &ln_final, into_normed, NormTo::Rows, device)]).await?;
        let scales = self.read_matrix(&device.scales, rows, 1).await?;
        let vocab = config.vocab;
        let keeps = |kind: Logits| runs.iter().any(|(_, keep)| keep.logits == kind);
        let (whole, top) = (keeps(Logits::Whole), keeps(Logits::TopToken));
        for ((output, at), (_, keep)) in outputs.iter_mut().zip(placed).zip(runs) {
            output.finish(scales.as_slice()[at.first_row..at.first_row + at.len].to_vec());
            if keep.logits == Logits::Whole {
                output.logits = DMatrix::zeros(at.len, vocab);
            }
        }
        if !whole && !top {
            return Ok(());
        }
        let mut best: Vec<Vec<Option<(f32, usize)>>> = placed.iter().map(|at| vec![None; at.len]).collect();
        let per_row = 4 * rows.max(config.d_model) as u64;
        let block = vocab_rows.min((self.max_binding / per_row) as usize).max(1);
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
        let logits = self.scratch(Role::Logits, 4 * (rows * block) as u64, usage);
        let highest = self.scratch(Role::Highest, 8 * rows as u64, usage);
        let bias =
            model.unembedding_bias().map(|b| self.upload_values("unembedding bias", b.as_slice())).transpose()?;
        for start in (0..vocab).step_by(block) {
            let end = (start + block).min(vocab);
            let unembedding = model.unembedding_rows(start..end)?;
            let uploaded = self.upload_values("unembedding rows", unembedding.as_slice())?;
            let width = end - start;
            // The logits as the family gives them: divided by its divisor, then soft-capped.
            let (divisor, cap) = (config.features.logits_divisor, config.features.final_softcap);
            let settings = GemmSettings {
                y_transposed: 1,
                bias_first: start as u32,
                divide: divisor.is_some() as u32,
                divisor: divisor.unwrap_or(0.0),
                soft_cap: cap.is_some() as u32,
                cap: cap.unwrap_or(0.0),
                ..gemm_settings((rows, width, config.d_model), Product::Set)
            };
            let mut dispatches = vec![gemm_with(kernels, settings, &device.normed, &uploaded, bias.as_ref(), &logits)];
            if top {
                dispatches.push(Dispatch::new(
                    &kernels.highest,
                    &HighestSettings { rows: rows as u32, columns: width as u32, _pad: [0; 2] },
                    vec![(binding::X, &logits), (binding::OUT, &highest)],
                    (rows.min(SPAN) as u32, rows.div_ceil(SPAN) as u32, 1),
                ));
            }
            self.submit(dispatches).await?;
            if whole {
                self.read_back(&[(&logits, 0..4 * (rows * width) as u64)], |values| {
                    for ((output, at), (_, keep)) in outputs.iter_mut().zip(placed).zip(runs) {
                        if keep.logits != Logits::Whole {
                            continue;
                        }
                        for (column, v) in (start..end).enumerate() {
                            let from = at.first_row + rows * column;
                            output.logits.column_mut(v).copy_from_slice(&values[from..from + at.len]);
                        }
                    }
                })
                .await?;
            }
            if top {
                self.read_back(&[(&highest, 0..8 * rows as u64)], |values| {
                    for (best, at) in best.iter_mut().zip(placed) {
                        for (t, best) in best.iter_mut().enumerate() {
                            let row = at.first_row + t;
                            forward::offer(best, values[2 * row], start + values[2 * row + 1] as usize);
                        }
                    }
                })
                .await?;
            }
        }
        for ((output, best), (_, keep)) in outputs.iter_mut().zip(best).zip(runs) {
            if keep.logits == Logits::TopToken {
                output.top_tokens = best.into_iter().map(|b| b.map_or(0, |(_, token)| token)).collect();
            }
        }
        Ok(())
    }

    /// Runs a group's attention and reads back what its sequences keep of the patterns: the
    /// group's whole patterns where one keeps them whole, else only the cells asked for,
    /// gathered on the device.
    #[allow(clippy::too_many_arguments)]
    async fn read_patterns(
        &self,
        kernels: &ForwardKernels,
        device: &Activations,
        group: &PatternGroup,
        attend: Dispatch<'_>,
        placed: &[Placed],
        runs: &[(&[usize], Keep<'_>)],
        heads: usize,
        outputs: &mut [ForwardOutput],
    ) -> Result<()> {
        // Where head h's cell (query, key) of a sequence lies among the group's patterns.
        let at_cell = |at: &Placed, h: usize, (query, key): (usize, usize)| {
            at.pattern_at - group.first_value + h * at.len * at.len + key * at.len + query
        };
        if runs.iter().any(|(_, keep)| matches!(keep.patterns, Patterns::Whole)) {
            self.submit(vec![attend]).await?;
            let layer = self
                .read_back(&[(&device.patterns, 0..4 * group.values as u64)], |patterns| {
                    placed
                        .iter()
                        .map(|at| {
                            let square = at.len * at.len;
                            (0..heads)
                                .map(|h| {
                                    let start = at_cell(at, h, (0, 0));
                                    DMatrix::from_column_slice(at.len, at.len, &patterns[start..start + square])
                                })
                                .collect::<Vec<_>>()
                        })
                        .collect::<Vec<_>>()
                })
                .await?;
            for ((output, (_, keep)), patterns) in outputs.iter_mut().zip(runs).zip(layer) {
                output.keep_patterns(keep.patterns, patterns);
            }
            return Ok(());
        }
        let mut indices = Vec::new();
        for (at, (_, keep)) in placed.iter().zip(runs) {
            if let Patterns::Cells(cells) = keep.patterns {
                for h in 0..heads {
                    indices.extend(cells.iter().map(|&cell| at_cell(at, h, cell) as u32));
                }
            }
        }
        let index_buffer = self.upload_buffer("pattern cells", &indices)?;
        let gathered = self.scratch(
            Role::Gathered,
            4 * indices.len() as u64,
            wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
        );
        let gather = Dispatch::new(
            &kernels.gather,
            &GatherSettings { count: indices.len() as u32, _pad: [0; 3] },
            vec![(binding::X, &device.patterns), (binding::OUT, &gathered), (binding::ROWS_OF, &index_buffer)],
            threads(indices.len()),
        );
        self.submit(vec![attend, gather]).await?;
        self.read_back(&[(&gathered, 0..4 * indices.len() as u64)], |values| {
            let mut values = values.iter().copied();
            for (output, (_, keep)) in outputs.iter_mut().zip(runs) {
                if let Patterns::Cells(cells) = keep.patterns {
                    output
                        .pattern_cells
                        .push((0..heads).map(|_| values.by_ref().take(cells.len()).collect()).collect());
                }
            }
        })
        .await
    }

    fn upload_norm(&self, norm: &Norm) -> Result<NormOnDevice> {
        Ok(NormOnDevice {
            weight: self.upload_values("norm weight", norm.weight.as_slice())?,
            bias: norm.bias.as_ref().map(|b| self.upload_values("norm bias", b.as_slice())).transpose()?,
        })
    }

    /// `values` in a new storage buffer.
    fn upload_buffer<T: bytemuck::Pod>(&self, label: &str, values: &[T]) -> Result<wgpu::Buffer> {
        let buffer = self.storage_buffer(label, std::mem::size_of_val(values) as u64)?;
        self.write(&buffer, values);
        Ok(buffer)
    }

    /// Weights in a new storage buffer, crossing as [`Gpu::write_values`] sends them.
    fn upload_values(&self, label: &str, values: &[f32]) -> Result<wgpu::Buffer> {
        let buffer = self.storage_buffer(label, std::mem::size_of_val(values) as u64)?;
        self.write_values(&buffer, values);
        Ok(buffer)
    }

    /// A new storage buffer of `bytes`, within one binding.
    fn storage_buffer(&self, label: &str, bytes: u64) -> Result<wgpu::Buffer> {
        self.fits(label, bytes)?;
        Ok(self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: bytes.max(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        }))
    }

    /// `norm` of `input`'s `rows` rows into `output`, as `to` says.
    #[allow(clippy::too_many_arguments)]
    fn norm<'a>(
        &self,
        kernels: &'a ForwardKernels,
        config: &ModelConfig,
        rows: usize,
        norm: &'a NormOnDevice,
        (input, output): (&'a wgpu::Buffer, &'a wgpu::Buffer),
        to: NormTo,
        device: &'a Activations,
    ) -> Dispatch<'a> {
        let (parts, width, join) = match to {
            NormTo::Rows => (1, config.d_model, None),
            NormTo::Parts { parts, width } => (parts, width, None),
            NormTo::Join(multiplier) => (1, config.d_model, Some(multiplier)),
        };
        let settings = NormSettings {
            rows: rows as u32,
            width: width as u32,
            parts: parts as u32,
            centre: matches!(config.norm, NormKind::LayerNorm) as u32,
            add_bias: norm.bias.is_some() as u32,
            join: join.is_some() as u32,
            write_scales: (to == NormTo::Rows) as u32,
            eps: config.norm_eps,
            multiplier: join.unwrap_or(0.0),
            _pad: [0; 3],
        };
        let groups = rows * parts;
        let buffers = vec![
            (binding::X, input),
            (binding::Y, &norm.weight),
            (binding::W, norm.bias.as_ref().unwrap_or(&device.unused)),
            (binding::OUT, output),
            // Written only for whole rows.
            (binding::OUT2, &device.scales),
        ];
        Dispatch::new(&kernels.norm, &settings, buffers, (groups.min(SPAN) as u32, groups.div_ceil(SPAN) as u32, 1))
    }

    /// Encodes and submits `dispatches` in order, and waits for them (a failure shows here).
    async fn submit(&self, dispatches: Vec<Dispatch<'_>>) -> Result<()> {
        let scope = Scopes::push(&self.device);
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        let mut bind_groups = Vec::with_capacity(dispatches.len());
        for dispatch in &dispatches {
            let settings = self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("settings"),
                size: dispatch.settings.len() as u64,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            });
            self.write(&settings, &dispatch.settings);
            let mut entries =
                vec![wgpu::BindGroupEntry { binding: binding::SETTINGS, resource: settings.as_entire_binding() }];
            entries.extend(
                dispatch
                    .buffers
                    .iter()
                    .map(|&(binding, buffer)| wgpu::BindGroupEntry { binding, resource: buffer.as_entire_binding() }),
            );
            bind_groups.push(self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                label: None,
                layout: &dispatch.pipeline.get_bind_group_layout(0),
                entries: &entries,
            }));
        }
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            for (dispatch, bind_group) in dispatches.iter().zip(&bind_groups) {
                let (x, y, z) = dispatch.groups;
                if x == 0 || y == 0 || z == 0 {
                    continue;
                }
                pass.set_pipeline(dispatch.pipeline);
                pass.set_bind_group(0, bind_group, &[]);
                pass.dispatch_workgroups(x, y, z);
            }
        }
        self.queue.submit([encoder.finish()]);
        scope.pop(self).await?;
        self.check()
    }

    /// A `rows` x `columns` matrix read back from `buffer`.
    async fn read_matrix(&self, buffer: &wgpu::Buffer, rows: usize, columns: usize) -> Result<DMatrix<f32>> {
        self.read_back(&[(buffer, 0..4 * (rows * columns) as u64)], |values| {
            DMatrix::from_column_slice(rows, columns, values)
        })
        .await
    }
}

/// What a norm dispatch makes of its input's rows.
#[derive(Clone, Copy, PartialEq)]
enum NormTo {
    /// Each whole row normed into the output, its scale into `scales`.
    Rows,
    /// Each row's `parts` parts of `width` normed on their own (query and key norms).
    Parts { parts: usize, width: usize },
    /// Each whole row normed, times this and added to the output (a branch's output norm as
    /// it joins the residual stream).
    Join(f32),
}

/// Whether a product replaces its output or adds to it.
#[derive(Clone, Copy, PartialEq)]
enum Product {
    Set,
    Add,
}

/// `out (=|+=) x y (+ bias)` for x `m` x `k`, y `k` x `n`.
fn gemm<'a>(
    kernels: &'a ForwardKernels,
    shape: (usize, usize, usize),
    x: &'a wgpu::Buffer,
    y: &'a wgpu::Buffer,
    bias: Option<&'a wgpu::Buffer>,
    out: &'a wgpu::Buffer,
    product: Product,
) -> Dispatch<'a> {
    gemm_with(kernels, gemm_settings(shape, product), x, y, bias, out)
}

/// The settings of `out (=|+=) x y` for x `m` x `k`, y `k` x `n`, each entry as it is.
fn gemm_settings((m, n, k): (usize, usize, usize), product: Product) -> GemmSettings {
    GemmSettings {
        m: m as u32,
        n: n as u32,
        k: k as u32,
        accumulate: (product == Product::Add) as u32,
        ..GemmSettings::default()
    }
}

/// [`gemm`] as `settings` say, the bias added where there is one.
fn gemm_with<'a>(
    kernels: &'a ForwardKernels,
    settings: GemmSettings,
    x: &'a wgpu::Buffer,
    y: &'a wgpu::Buffer,
    bias: Option<&'a wgpu::Buffer>,
    out: &'a wgpu::Buffer,
) -> Dispatch<'a> {
    let settings = GemmSettings { add_bias: bias.is_some() as u32, ..settings };
    // A product without bias binds its y again where the bias would be: it is never read.
    let buffers = vec![(binding::X, x), (binding::Y, y), (binding::W, bias.unwrap_or(y)), (binding::OUT, out)];
    let groups = (settings.m.div_ceil(64), settings.n.div_ceil(64), 1);
    Dispatch::new(&kernels.gemm, &settings, buffers, groups)
}

/// The MLP's hidden activations of `input` into `hidden`: `act(x W_in + b_in)`, or gated,
/// `act(x W_gate) * (x W_in + b_in)`.
fn hidden<'a>(
    kernels: &'a ForwardKernels,
    config: &ModelConfig,
    rows: usize,
    device: &'a Activations,
    input: &'a wgpu::Buffer,
    mlp: &'a MlpOnDevice,
) -> Vec<Dispatch<'a>> {
    let (d_model, d_mlp) = (config.d_model, config.d_mlp);
    let mut dispatches =
        vec![gemm(kernels, (rows, d_mlp, d_model), input, &mlp.w_in, Some(&mlp.b_in), &device.hidden, Product::Set)];
    let gated = match (&mlp.w_gate, &device.gate) {
        (Some(w_gate), Some(gate)) => {
            dispatches.push(gemm(kernels, (rows, d_mlp, d_model), input, w_gate, None, gate, Product::Set));
            Some(gate)
        }
        _ => None,
    };
    let settings = ActivateSettings {
        count: (rows * d_mlp) as u32,
        gated: gated.is_some() as u32,
        activation: activation_code(config.mlp.activation()),
        _pad: [0],
    };
    dispatches.push(Dispatch::new(
        &kernels.activate,
        &settings,
        vec![(binding::X, gated.unwrap_or(&device.unused)), (binding::OUT, &device.hidden)],
        threads(rows * d_mlp),
    ));
    dispatches
}

/// Groups of 64 threads for `count` threads, spread over y beyond [`SPAN`] groups.
fn threads(count: usize) -> (u32, u32, u32) {
    let groups = count.div_ceil(64);
    (groups.min(SPAN) as u32, groups.div_ceil(SPAN) as u32, 1)
}

fn activation_code(kind: Activation) -> u32 {
    match kind {
        Activation::Relu => activation::RELU,
        Activation::GeluTanh => activation::GELU_TANH,
        Activation::GeluErf => activation::GELU_ERF,
        Activation::Silu => activation::SILU,
    }
}

/// forward.wgsl's `rows_of`: each row's (first row of its sequence, position), then at each
/// sequence's first row its (length, patterns' offset).
fn rows_table(placed: &[Placed], rows: usize) -> Vec<u32> {
    let mut table = vec![0u32; 4 * rows];
    for at in placed {
        for t in 0..at.len {
            table[2 * (at.first_row + t)] = at.first_row as u32;
            table[2 * (at.first_row + t) + 1] = t as u32;
        }
        table[2 * rows + 2 * at.first_row] = at.len as u32;
        table[2 * rows + 2 * at.first_row + 1] = at.pattern_at as u32;
    }
    table
}

/// The cosines, then the sines, of each position's rotary angles up to `longest`, computed as
/// the CPU's forward pass computes them (the GPU's own sin and cos are less exact far from 0).
fn rotary_table(positions: &Positions, longest: usize) -> Vec<f32> {
    let frequencies = positions.inverse_frequencies();
    let half = frequencies.len();
    let mut table = vec![0f32; 2 * longest * half];
    for t in 0..longest {
        for (i, &frequency) in frequencies.iter().enumerate() {
            let (sin, cos) = (t as f32 * frequency).sin_cos();
            table[t * half + i] = cos;
            table[longest * half + t * half + i] = sin;
        }
    }
    table
}

/// Each run's per-head outputs of this layer, from the mixed values read back.
fn keep_head_outputs(
    config: &ModelConfig,
    layer: &Layer,
    runs: &[(&[usize], Keep<'_>)],
    placed: &[Placed],
    mixed: &DMatrix<f32>,
    outputs: &mut [ForwardOutput],
) {
    let d_head = config.d_head;
    for (((_, keep), at), output) in runs.iter().zip(placed).zip(outputs.iter_mut()) {
        if matches!(keep.head_outputs, HeadOutputs::None) {
            continue;
        }
        let heads = (0..config.heads)
            .filter_map(|h| {
                let z = mixed.view((at.first_row, h * d_head), (at.len, d_head)).into_owned();
                forward::head_output(&z, &layer.attention.w_o, h, keep.head_outputs)
            })
            .collect();
        output.keep_head_outputs(heads);
    }
}
