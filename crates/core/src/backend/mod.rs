//! Where the large dense products run: the CPU (f64, faer natively, a SIMD kernel in the tab) or
//! a GPU (WGSL kernels through wgpu: Vulkan, Metal or DX12 natively, WebGPU in the browser). The
//! analysis asks a [`Backend`] to add `A^T B` and `A^T A` of blocks of rows into a [`Sum`] (the
//! Grams), for `A X` of f64 matrices (each layer's products through the Grams) kept where they
//! were computed ([`Kept`]), and for the small products of those matrices' column blocks (each
//! head's); it never learns which backend did the work, nor where the sums and products are kept.
//!
//! The products are `async` because a browser hands a GPU's results back only through its event
//! loop. The CPU's futures are ready at once, and so are native wgpu's (it waits for the device
//! inside); [`block_on`] runs them where nothing can await (the CLI, native tests). Only the
//! tab's analysis worker awaits, and only the GPU there ever waits.
//!
//! A GPU that fails (no adapter, device lost, out of memory, a limit) is replaced by the CPU:
//! [`Backend::with_fallback`] reruns the whole computation there and keeps a one-line note.

use std::borrow::Cow;
use std::ops::Range;
use std::sync::Arc;

use nalgebra::DMatrix;
use serde::{Deserialize, Serialize};

pub mod cpu;
#[cfg(feature = "gpu")]
pub mod gpu;
// Without the GPU backend, a GPU that cannot be made: the backend's code is the same either way.
#[cfg(not(feature = "gpu"))]
#[path = "no_gpu.rs"]
pub mod gpu;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm_gemm;

use crate::forward::{self, ForwardOutput, Keep};
use crate::model::{Norm, NormKind, Weights};
use crate::{Error, Result};

/// Which backend the user asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum BackendChoice {
    /// A hardware GPU when there is one, else the CPU.
    #[default]
    Auto,
    /// A GPU, a software one (lavapipe, SwiftShader) included; an error when there is none.
    Gpu,
    Cpu,
}

impl BackendChoice {
    pub fn parse(text: &str) -> Result<BackendChoice> {
        match text {
            "auto" => Ok(BackendChoice::Auto),
            "gpu" => Ok(BackendChoice::Gpu),
            "cpu" => Ok(BackendChoice::Cpu),
            other => Err(Error::Invalid(format!("unknown backend `{other}`: write auto, gpu or cpu"))),
        }
    }
}

/// What computed the results, as the JSON output records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BackendInfo {
    /// "cpu" or "gpu".
    pub name: String,
    /// The GPU adapter's name and driver API, e.g. "llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan)" or,
    /// in the browser, "google swiftshader (WebGPU)".
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub adapter: Option<String>,
    /// Why the GPU was not used although one was asked for or tried, in one line.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub note: Option<String>,
    /// How a GPU computed: "f64" (native) or "f32 pairs" (each f64 as two f32 parts) for the
    /// fingerprint's products, "f32" for a forward pass.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub arithmetic: Option<String>,
    /// Bytes written to the GPU in the work reported (a GPU's only: the CPU moves nothing).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bytes_to_device: Option<u64>,
    /// Bytes read back from the GPU in the work reported.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub bytes_from_device: Option<u64>,
    /// The same, stage by stage.
    #[serde(skip_serializing_if = "Vec::is_empty", default)]
    pub stages: Vec<StageBytes>,
}

/// Bytes moved between the host and a GPU in one stage of the work.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StageBytes {
    pub stage: String,
    pub bytes_to_device: u64,
    pub bytes_from_device: u64,
}

/// Bytes `(to the device, from the device)`: a GPU's counters at one moment, or what moved
/// between two.
pub type BytesMoved = (u64, u64);

/// What a GPU moved between two readings of its counters; None unless both come from a GPU
/// (a GPU that failed in between was replaced by the CPU, whose work moves nothing).
pub fn moved_between(start: Option<BytesMoved>, end: Option<BytesMoved>) -> Option<BytesMoved> {
    let ((to_start, from_start), (to_end, from_end)) = (start?, end?);
    Some((to_end.checked_sub(to_start)?, from_end.checked_sub(from_start)?))
}

impl Default for BackendInfo {
    fn default() -> Self {
        BackendInfo {
            name: "cpu".into(),
            adapter: None,
            note: None,
            arithmetic: None,
            bytes_to_device: None,
            bytes_from_device: None,
            stages: Vec::new(),
        }
    }
}

impl BackendInfo {
    /// "N MB to the GPU, M MB back", when a GPU did the work.
    pub fn bytes_moved_text(&self) -> Option<String> {
        let (to, from) = (self.bytes_to_device?, self.bytes_from_device?);
        Some(format!("{:.1} MB to the GPU, {:.1} MB back", to as f64 / 1e6, from as f64 / 1e6))
    }

    /// Adds a stage's bytes moved (`(to the device, from it)`) to the stages and the totals.
    pub fn add_stage(&mut self, stage: &str, (to, from): BytesMoved) {
        self.stages.push(StageBytes { stage: stage.into(), bytes_to_device: to, bytes_from_device: from });
        self.bytes_to_device = Some(self.bytes_to_device.unwrap_or(0) + to);
        self.bytes_from_device = Some(self.bytes_from_device.unwrap_or(0) + from);
    }

    /// "WebGPU — <adapter>" (the browser's), "GPU · <adapter> (<API>)" (native) or "CPU", as a
    /// person reads it.
    pub fn label(&self) -> String {
        match &self.adapter {
            Some(adapter) => match adapter.strip_suffix(" (WebGPU)") {
                Some(name) => format!("WebGPU — {name}"),
                None => format!("GPU · {adapter}"),
            },
            None => "CPU".into(),
        }
    }
}

/// How a GPU's products are computed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arithmetic {
    /// Native f64 (products_f64.wgsl), where the adapter offers SHADER_F64 (natively only:
    /// WebGPU has no f64).
    F64,
    /// Each f64 as two f32 parts, with error-free sums (products.wgsl): on every adapter.
    F32Pairs,
}

impl Arithmetic {
    pub fn name(self) -> &'static str {
        match self {
            Arithmetic::F64 => "f64",
            Arithmetic::F32Pairs => "f32 pairs",
        }
    }
}

/// What the left matrix of [`Backend::multiply`] is known to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Factor {
    General,
    /// Zero below the diagonal: the CPU skips those zeros (a GPU multiplies them anyway).
    UpperTriangular,
}

/// A norm folded into X before a product with it (TransformerLens's `fold_ln`): X's rows scaled
/// by the norm's weight and, for LayerNorm, each column centred over its rows; `transposed`
/// centres first, then scales (the fold as a weight writing into the folded unembedding meets
/// it). The CPU folds X on the host in f64 ([`fold_reading`](crate::model::fold::fold_reading)).
/// A GPU takes X as stored (f32 values, whose rests are zero) and folds it on the device, so the
/// folded values' f32 rests, as many bytes again, never cross.
#[derive(Debug, Clone, Copy)]
pub struct Fold<'a> {
    pub norm: &'a Norm,
    pub kind: NormKind,
    pub transposed: bool,
}

impl Fold<'_> {
    /// The fold applied to `x` on the host, in f64.
    pub fn apply(&self, x: &mut DMatrix<f64>) {
        use crate::model::fold::{fold_reading, fold_reading_transposed};
        match self.transposed {
            false => fold_reading(self.norm, self.kind, x),
            true => fold_reading_transposed(self.norm, self.kind, x),
        }
    }
}

/// X folded on the host when a fold is asked for (the CPU's way).
fn folded(x: Columns<'_>, fold: Option<Fold<'_>>) -> DMatrix<f64> {
    let mut x = x.into_values();
    if let Some(fold) = fold {
        fold.apply(&mut x);
    }
    x
}

/// The X of a product with a kept result ([`Backend::multiply_kept`] and its kin): f64 values,
/// or f32 weights as the layer holds them, read in place. A GPU sends a weight's columns a chunk
/// at a time from where they are, so a layer's weights are never copied whole on the host (in
/// f64, Llama-3-8B's are 335 MB); the CPU widens them to f64 to multiply.
#[derive(Clone)]
pub enum Columns<'a> {
    Values(Cow<'a, DMatrix<f64>>),
    /// f32 matrices of one height, side by side (a layer's `[W_Q | W_K | W_V]`).
    SideBySide(Vec<&'a DMatrix<f32>>),
    /// An f32 matrix's transpose (W_O's rows as columns).
    Transposed(&'a DMatrix<f32>),
}

impl From<DMatrix<f64>> for Columns<'_> {
    fn from(values: DMatrix<f64>) -> Self {
        Columns::Values(Cow::Owned(values))
    }
}

impl<'a> From<&'a DMatrix<f64>> for Columns<'a> {
    fn from(values: &'a DMatrix<f64>) -> Self {
        Columns::Values(Cow::Borrowed(values))
    }
}

/// Some columns of a [`Columns`], column-major, as they are held.
// Only a GPU reads X a chunk at a time.
#[cfg_attr(not(feature = "gpu"), allow(dead_code))]
pub(crate) enum ColumnValues<'b> {
    F64(&'b [f64]),
    F32(Vec<f32>),
}

impl Columns<'_> {
    /// (rows, columns).
    pub fn shape(&self) -> (usize, usize) {
        match self {
            Columns::Values(x) => x.shape(),
            Columns::SideBySide(parts) => {
                (parts.first().map_or(0, |p| p.nrows()), parts.iter().map(|p| p.ncols()).sum())
            }
            Columns::Transposed(w) => (w.ncols(), w.nrows()),
        }
    }

    /// Columns `columns`: f64 values in place, or the f32 weights' copied out.
    // Only a GPU reads X a chunk at a time.
    #[cfg_attr(not(feature = "gpu"), allow(dead_code))]
    pub(crate) fn columns(&self, columns: Range<usize>) -> ColumnValues<'_> {
        let rows = self.shape().0;
        match self {
            Columns::Values(x) => ColumnValues::F64(&x.as_slice()[columns.start * rows..columns.end * rows]),
            Columns::SideBySide(parts) => {
                let mut out = Vec::with_capacity(rows * columns.len());
                let mut first = 0;
                for part in parts {
                    let within = columns.start.max(first)..columns.end.min(first + part.ncols());
                    if !within.is_empty() {
                        out.extend_from_slice(
                            &part.as_slice()[(within.start - first) * rows..(within.end - first) * rows],
                        );
                    }
                    first += part.ncols();
                }
                ColumnValues::F32(out)
            }
            Columns::Transposed(w) => {
                let mut out = Vec::with_capacity(rows * columns.len());
                for j in columns {
                    out.extend(w.row(j).iter());
                }
                ColumnValues::F32(out)
            }
        }
    }

    /// Every entry in f64, as the CPU multiplies them (widened straight from the weights).
    pub fn into_values(self) -> DMatrix<f64> {
        match self {
            Columns::Values(x) => x.into_owned(),
            Columns::SideBySide(parts) => {
                let rows = parts.first().map_or(0, |p| p.nrows());
                let mut joined = DMatrix::zeros(rows, parts.iter().map(|p| p.ncols()).sum());
                let mut at = 0;
                for part in parts {
                    for (to, &from) in joined.columns_mut(at, part.ncols()).iter_mut().zip(part.iter()) {
                        *to = from as f64;
                    }
                    at += part.ncols();
                }
                joined
            }
            Columns::Transposed(w) => DMatrix::from_fn(w.ncols(), w.nrows(), |i, j| w[(j, i)] as f64),
        }
    }
}

/// A matrix left where its backend holds it ([`Backend::multiply_kept`], [`Backend::keep`]), for
/// [`Backend::column_products`]: on a GPU it stays on the device, and only the small products of
/// its column blocks come back.
pub struct Kept {
    kind: KeptKind,
}

enum KeptKind {
    Cpu(DMatrix<f64>),
    Gpu(gpu::DeviceMatrix),
}

impl Kept {
    /// (rows, columns).
    pub fn shape(&self) -> (usize, usize) {
        match &self.kind {
            KeptKind::Cpu(m) => m.shape(),
            KeptKind::Gpu(m) => m.shape(),
        }
    }
}

/// Which column block of a matrix the p-th product of a [`ColumnRun`] reads: block
/// `first + p / group` (blocks as wide as [`Backend::column_products`] says). `group` 1 walks
/// the blocks one by one; a layer's key/value heads, each shared by `group` query heads, are
/// read with their `group`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocks {
    pub first: usize,
    pub group: usize,
}

impl Blocks {
    pub fn block(&self, p: usize) -> usize {
        self.first + p / self.group.max(1)
    }
}

/// `count` products `L_p^T R_p` of column blocks: `L_p` the block of `left` that `left_blocks`
/// gives for p, `R_p` likewise.
pub struct ColumnRun<'a, M> {
    pub left: &'a M,
    pub left_blocks: Blocks,
    pub right: &'a M,
    pub right_blocks: Blocks,
    pub count: usize,
}

/// A sum of products over blocks of rows, in segments (the Grams' [`SEGMENT_ROWS`](crate::analysis::circuits::SEGMENT_ROWS)),
/// kept where the backend computes it; [`Backend::read`] gives it in f64.
pub struct Sum {
    m: usize,
    n: usize,
    kind: SumKind,
}

enum SumKind {
    /// The closed segments' total (None: zero) and the open segment's sum from zero, in f64:
    /// the total is the same bits however the tab's pool split the segments among its workers.
    /// The open segment is 0 x 0 until a product is added to it, so a sum of one segment (each
    /// pool worker's) holds one matrix, not two. A Gram's segment (`gram`: Some(true)) is
    /// summed in its lower triangle only and mirrored when it closes; the first product added
    /// decides, and a sum of both kinds is an error.
    Cpu { total: Option<DMatrix<f64>>, segment: DMatrix<f64>, gram: Option<bool> },
    /// On the device, read back once: segments do not matter there (a GPU's bits are its own).
    Gpu(gpu::Accumulator),
}

impl Sum {
    /// Closes the open segment (on the CPU, adds its sum to the total and starts the next one
    /// from zero).
    pub fn end_segment(&mut self) {
        if let SumKind::Cpu { total, segment, gram } = &mut self.kind {
            if segment.is_empty() {
                return;
            }
            let mut closed = std::mem::replace(segment, DMatrix::zeros(0, 0));
            if *gram == Some(true) {
                cpu::mirror_lower(&mut closed);
            }
            match total {
                // Zero plus the segment is the segment, bit for bit (it never holds -0.0: it
                // is summed from +0.0).
                None => *total = Some(closed),
                Some(total) => *total += closed,
            }
        }
    }

    /// The open segment on the CPU, made at zero if it is not yet.
    fn open_segment(m: usize, n: usize, segment: &mut DMatrix<f64>) -> &mut DMatrix<f64> {
        if segment.is_empty() {
            *segment = DMatrix::zeros(m, n);
        }
        segment
    }
}

enum Kind {
    Cpu,
    Gpu(Box<gpu::Gpu>),
}

/// The backend the products run on.
pub struct Backend {
    kind: Kind,
    note: Option<String>,
}

impl Backend {
    pub fn cpu() -> Backend {
        Backend { kind: Kind::Cpu, note: None }
    }

    /// The backend for `choice` (see [`Backend::open`]), where nothing awaits: natively.
    pub fn select(choice: BackendChoice) -> Result<Backend> {
        block_on(Self::open(choice))
    }

    /// The backend for `choice`. `Auto` takes a hardware GPU if there is one and otherwise the
    /// CPU, with a note saying why; `Gpu` takes any adapter (software ones too) and is an error
    /// only when there is none at all.
    pub async fn open(choice: BackendChoice) -> Result<Backend> {
        match choice {
            BackendChoice::Cpu => Ok(Backend::cpu()),
            BackendChoice::Auto => Ok(match Self::open_gpu(false).await {
                Ok(backend) => backend,
                Err(reason) => Backend { kind: Kind::Cpu, note: Some(reason) },
            }),
            BackendChoice::Gpu => {
                Self::open_gpu(true).await.map_err(|reason| Error::Invalid(format!("--backend gpu: {reason}")))
            }
        }
    }

    /// [`Backend::open`] that never fails: a `Gpu` choice without a GPU gives the CPU with the
    /// reason as its note (the tab shows it; the CLI refuses instead).
    pub async fn open_or_cpu(choice: BackendChoice) -> Backend {
        match choice {
            BackendChoice::Gpu => match Self::open_gpu(true).await {
                Ok(backend) => backend,
                Err(reason) => {
                    Backend { kind: Kind::Cpu, note: Some(format!("no usable GPU ({reason}); computed on the CPU")) }
                }
            },
            other => Self::open(other).await.unwrap_or_else(|_| Backend::cpu()),
        }
    }

    /// A GPU on any adapter (software ones too), computing with `arithmetic` where the adapter
    /// offers it: for the tests and benchmarks that compare the GPU's two kernels.
    pub async fn gpu_preferring(arithmetic: Arithmetic) -> Result<Backend> {
        let gpu = gpu::Gpu::open_preferring(true, arithmetic)
            .await
            .map_err(|error| Error::Invalid(format!("--backend gpu: {}", gpu_reason(error))))?;
        Ok(Backend { kind: Kind::Gpu(Box::new(gpu)), note: None })
    }

    /// A GPU, or why there is none.
    async fn open_gpu(allow_software: bool) -> std::result::Result<Backend, String> {
        let gpu = gpu::Gpu::open(allow_software).await.map_err(gpu_reason)?;
        Ok(Backend { kind: Kind::Gpu(Box::new(gpu)), note: None })
    }

    /// A GPU's byte counters since it opened; None on the CPU.
    pub fn bytes_moved(&self) -> Option<BytesMoved> {
        match &self.kind {
            Kind::Cpu => None,
            Kind::Gpu(gpu) => Some(gpu.bytes_moved()),
        }
    }

    /// [`Backend::info`] for work that ran a model's forward pass, which a GPU computes in f32.
    pub fn forward_info(&self) -> BackendInfo {
        let info = self.info();
        let arithmetic = info.arithmetic.as_ref().map(|_| "f32".to_string());
        BackendInfo { arithmetic, ..info }
    }

    pub fn info(&self) -> BackendInfo {
        let note = self.note.clone();
        match &self.kind {
            Kind::Cpu => BackendInfo { note, ..BackendInfo::default() },
            Kind::Gpu(gpu) => BackendInfo {
                name: "gpu".into(),
                adapter: Some(gpu.adapter().into()),
                note,
                arithmetic: Some(gpu.arithmetic().name().into()),
                ..BackendInfo::default()
            },
        }
    }

    pub fn is_gpu(&self) -> bool {
        !matches!(self.kind, Kind::Cpu)
    }

    /// How many rows of an `n`-column matrix to hand over per product: the CPU widens a block
    /// to f64 at a time (a few MB); a GPU takes as many as one storage binding holds, so each
    /// read-back of the n x n result is worth many rows.
    pub fn block_rows(&self, n: usize) -> usize {
        match &self.kind {
            Kind::Cpu => cpu::BLOCK_ROWS,
            Kind::Gpu(gpu) => gpu.block_rows(n),
        }
        .max(1)
    }

    /// An m x n sum at zero, on this backend.
    pub async fn sum(&self, m: usize, n: usize) -> Result<Sum> {
        let kind = match &self.kind {
            Kind::Cpu => SumKind::Cpu { total: None, segment: DMatrix::zeros(0, 0), gram: None },
            Kind::Gpu(gpu) => SumKind::Gpu(gpu.accumulator(m, n).await?),
        };
        Ok(Sum { m, n, kind })
    }

    /// `sum += A^T B` for blocks of the same rows: A is rows x m, B rows x n.
    pub async fn add_product(&mut self, a: &DMatrix<f32>, b: &DMatrix<f32>, sum: &mut Sum) -> Result<()> {
        check_shape(sum, a, b)?;
        match (&self.kind, &mut sum.kind) {
            (Kind::Cpu, SumKind::Cpu { segment, gram, .. }) => {
                one_kind(gram, false)?;
                cpu::add_product(a, b, Sum::open_segment(sum.m, sum.n, segment));
                Ok(())
            }
            (Kind::Gpu(gpu), SumKind::Gpu(sum)) => gpu.accumulate(sum, a, Some(b)).await,
            _ => Err(another_backends_sum()),
        }
    }

    /// `sum += A^T A` for a block of rows A (rows x n); the sum is exactly symmetric as read.
    pub async fn add_gram(&mut self, a: &DMatrix<f32>, sum: &mut Sum) -> Result<()> {
        check_shape(sum, a, a)?;
        match (&self.kind, &mut sum.kind) {
            (Kind::Cpu, SumKind::Cpu { segment, gram, .. }) => {
                one_kind(gram, true)?;
                cpu::add_gram_lower(a, Sum::open_segment(sum.m, sum.n, segment));
                Ok(())
            }
            (Kind::Gpu(gpu), SumKind::Gpu(sum)) => gpu.accumulate(sum, a, None).await,
            _ => Err(another_backends_sum()),
        }
    }

    /// `a_gram += A^T A`, `product += B^T A` and `b_gram += B^T B` for blocks of the same rows (A
    /// rows x m, B rows x n): an untied model's three Grams from one block of embedding and
    /// unembedding rows. The same sums as the three products added one by one; a GPU uploads
    /// each block once for all three.
    pub async fn add_both(
        &mut self,
        a: &DMatrix<f32>,
        b: &DMatrix<f32>,
        a_gram: &mut Sum,
        product: &mut Sum,
        b_gram: &mut Sum,
    ) -> Result<()> {
        if let Kind::Gpu(gpu) = &self.kind {
            check_shape(a_gram, a, a)?;
            check_shape(product, b, a)?;
            check_shape(b_gram, b, b)?;
            return match (&mut a_gram.kind, &mut product.kind, &mut b_gram.kind) {
                (SumKind::Gpu(a_gram), SumKind::Gpu(product), SumKind::Gpu(b_gram)) => {
                    gpu.accumulate_both(a, b, (a_gram, product, b_gram)).await
                }
                _ => Err(another_backends_sum()),
            };
        }
        self.add_gram(a, a_gram).await?;
        self.add_product(b, a, product).await?;
        self.add_gram(b, b_gram).await
    }

    /// The sum, its open segment closed, in f64.
    pub async fn read(&self, mut sum: Sum) -> Result<DMatrix<f64>> {
        sum.end_segment();
        match (&self.kind, sum.kind) {
            (Kind::Cpu, SumKind::Cpu { total, .. }) => Ok(total.unwrap_or_else(|| DMatrix::zeros(sum.m, sum.n))),
            (Kind::Gpu(gpu), SumKind::Gpu(sum)) => gpu.read(&sum).await,
            _ => Err(another_backends_sum()),
        }
    }

    /// `A X` of f64 matrices: the layers' products through the Grams and their factors. The CPU
    /// computes it in f64; a GPU holds each entry as two f32 parts and keeps about 2^-36 of
    /// every term (products.wgsl), and keeps A on the device for the next product with the same
    /// `Arc` (a Gram's factor multiplies every layer).
    pub async fn multiply(&mut self, a: &Arc<DMatrix<f64>>, form: Factor, x: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        match &self.kind {
            Kind::Cpu => Ok(cpu_product(a, form, x)),
            Kind::Gpu(gpu) => gpu.multiply(a, x).await,
        }
    }

    /// `A X` of f64 matrices, as [`Backend::multiply`], X first folded as `fold` says, left where
    /// the backend computed it (on a GPU, on the device) for [`Backend::column_products`] with
    /// blocks of `block` columns.
    pub async fn multiply_kept(
        &mut self,
        a: &Arc<DMatrix<f64>>,
        form: Factor,
        x: impl Into<Columns<'_>>,
        block: usize,
        fold: Option<Fold<'_>>,
    ) -> Result<Kept> {
        let x = x.into();
        match &self.kind {
            Kind::Cpu => Ok(Kept { kind: KeptKind::Cpu(cpu_product(a, form, &folded(x, fold))) }),
            Kind::Gpu(gpu) => {
                let (product, _) = gpu.multiply_kept(a, &x, block, false, fold).await?;
                Ok(Kept { kind: KeptKind::Gpu(product) })
            }
        }
    }

    /// [`Backend::multiply_kept`], and the folded X kept beside `A X` as [`Backend::keep`] would
    /// keep it (a GPU uploads X once for both).
    pub async fn multiply_keeping_both(
        &mut self,
        a: &Arc<DMatrix<f64>>,
        form: Factor,
        x: impl Into<Columns<'_>>,
        block: usize,
        fold: Option<Fold<'_>>,
    ) -> Result<(Kept, Kept)> {
        let x = x.into();
        match &self.kind {
            Kind::Cpu => {
                let x = folded(x, fold);
                let product = cpu_product(a, form, &x);
                Ok((Kept { kind: KeptKind::Cpu(product) }, Kept { kind: KeptKind::Cpu(x) }))
            }
            Kind::Gpu(gpu) => {
                let (product, x) = gpu.multiply_kept(a, &x, block, true, fold).await?;
                let x = x.ok_or_else(|| Error::Internal("a product that was to keep X did not".into()))?;
                Ok((Kept { kind: KeptKind::Gpu(product) }, Kept { kind: KeptKind::Gpu(x) }))
            }
        }
    }

    /// [`Backend::multiply_kept`] of X by A, and of X's columns `columns` by B (dense): X
    /// folded once for both, and on a GPU uploaded once and dropped after (an untied model's
    /// `F_E [W_Q | W_K | W_V]` and `C W_V`, whose W_V would otherwise cross twice).
    pub async fn multiply_kept_twice(
        &mut self,
        (a, form): (&Arc<DMatrix<f64>>, Factor),
        b: &Arc<DMatrix<f64>>,
        x: impl Into<Columns<'_>>,
        columns: Range<usize>,
        block: usize,
        fold: Option<Fold<'_>>,
    ) -> Result<(Kept, Kept)> {
        let x = x.into();
        let n = x.shape().1;
        if columns.start > columns.end || columns.end > n {
            return Err(Error::Internal(format!("columns {columns:?} of a matrix of {n}")));
        }
        match &self.kind {
            Kind::Cpu => {
                let x = folded(x, fold);
                let product = cpu_product(a, form, &x);
                let of_columns = cpu::product(b.as_view(), x.columns(columns.start, columns.len()));
                Ok((Kept { kind: KeptKind::Cpu(product) }, Kept { kind: KeptKind::Cpu(of_columns) }))
            }
            Kind::Gpu(gpu) => {
                let (product, kept_x) = gpu.multiply_kept(a, &x, block, true, fold).await?;
                drop(x);
                let kept_x = kept_x.ok_or_else(|| Error::Internal("a product that was to keep X did not".into()))?;
                let of_columns = gpu.multiply_columns(b, &kept_x, columns).await?;
                Ok((Kept { kind: KeptKind::Gpu(product) }, Kept { kind: KeptKind::Gpu(of_columns) }))
            }
        }
    }

    /// `x`, first folded as `fold` says, kept on this backend (a GPU uploads it), for
    /// [`Backend::column_products`] with blocks of `block` columns.
    pub async fn keep(&mut self, x: impl Into<Columns<'_>>, block: usize, fold: Option<Fold<'_>>) -> Result<Kept> {
        let x = x.into();
        let kind = match &self.kind {
            Kind::Cpu => KeptKind::Cpu(folded(x, fold)),
            Kind::Gpu(gpu) => KeptKind::Gpu(gpu.keep(&x, block, fold).await?),
        };
        Ok(Kept { kind })
    }

    /// A kept matrix in f64, as the backend holds it (a GPU reads it back): what its column
    /// products read.
    pub async fn read_kept(&self, kept: &Kept) -> Result<DMatrix<f64>> {
        match (&self.kind, &kept.kind) {
            (Kind::Cpu, KeptKind::Cpu(x)) => Ok(x.clone()),
            (Kind::Gpu(gpu), KeptKind::Gpu(x)) => gpu.read_kept(x).await,
            _ => Err(another_backends_matrix()),
        }
    }

    /// The products `L_p^T R_p` of `width`-column blocks of kept matrices, every run's in order
    /// (f64: the CPU's in f64, natively each on its own thread; a GPU's as its other products,
    /// computed on the device and read back together). A block's product with itself (the same
    /// matrix and blocks on both sides) is exactly symmetric.
    pub async fn column_products(&mut self, width: usize, runs: &[ColumnRun<'_, Kept>]) -> Result<Vec<DMatrix<f64>>> {
        for run in runs {
            let (left, right) = (run.left.shape(), run.right.shape());
            let last = |blocks: &Blocks| (run.count > 0).then(|| (blocks.block(run.count - 1) + 1) * width);
            let fits = |blocks: &Blocks, columns: usize| last(blocks).is_none_or(|end| end <= columns);
            if left.0 != right.0 || !fits(&run.left_blocks, left.1) || !fits(&run.right_blocks, right.1) {
                return Err(Error::Internal(format!(
                    "{} products of {width}-column blocks of {left:?} and {right:?} matrices ({:?}, {:?})",
                    run.count, run.left_blocks, run.right_blocks
                )));
            }
        }
        match &self.kind {
            Kind::Cpu => {
                let mut pairs = Vec::new();
                for run in runs {
                    let (KeptKind::Cpu(left), KeptKind::Cpu(right)) = (&run.left.kind, &run.right.kind) else {
                        return Err(another_backends_matrix());
                    };
                    let same = std::ptr::eq(run.left, run.right) && run.left_blocks == run.right_blocks;
                    for p in 0..run.count {
                        pairs.push((
                            left,
                            run.left_blocks.block(p) * width,
                            right,
                            run.right_blocks.block(p) * width,
                            same,
                        ));
                    }
                }
                Ok(crate::parallel::map_each(&pairs, |&(left, l, right, r, same)| {
                    let a = left.columns(l, width);
                    match same {
                        true => cpu::gram(a),
                        false => cpu::inner(a, right.columns(r, width)),
                    }
                }))
            }
            Kind::Gpu(gpu) => {
                let mut on_device = Vec::with_capacity(runs.len());
                for run in runs {
                    let (KeptKind::Gpu(left), KeptKind::Gpu(right)) = (&run.left.kind, &run.right.kind) else {
                        return Err(another_backends_matrix());
                    };
                    on_device.push(ColumnRun {
                        left,
                        left_blocks: run.left_blocks,
                        right,
                        right_blocks: run.right_blocks,
                        count: run.count,
                    });
                }
                gpu.column_products(width, &on_device).await
            }
        }
    }

    /// The model's forward pass over `runs`, as [`forward::run_batch`] gives it (the same
    /// checks, outputs and progress steps): on the CPU that function itself, on a GPU the same
    /// steps in f32 kernels, the residual stream kept on the device from layer to layer. The
    /// probes ask for it and never learn which backend ran it.
    pub async fn forward(
        &mut self,
        model: &(impl Weights + ?Sized),
        runs: &[(&[usize], Keep<'_>)],
        each_layer: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<ForwardOutput>> {
        match &self.kind {
            Kind::Cpu => forward::run_batch(model, runs, each_layer),
            Kind::Gpu(gpu) => gpu.forward(model, runs, each_layer).await,
        }
    }

    /// Runs `work` on this backend; if the GPU fails on the way, it is dropped for the CPU, the
    /// reason kept as the note, and `work` runs again from the start (so no result mixes the
    /// two). Errors that are not the GPU's are returned as they are.
    pub async fn with_fallback<T>(&mut self, mut work: impl AsyncFnMut(&mut Backend) -> Result<T>) -> Result<T> {
        match work(self).await {
            Err(Error::Gpu(reason)) if self.is_gpu() => {
                self.kind = Kind::Cpu;
                self.note = Some(format!("the GPU failed ({reason}); computed on the CPU"));
                work(self).await
            }
            other => other,
        }
    }
}

/// An error unless `A^T B` of these blocks fits `sum`.
fn check_shape(sum: &Sum, a: &DMatrix<f32>, b: &DMatrix<f32>) -> Result<()> {
    match a.nrows() == b.nrows() && (a.ncols(), b.ncols()) == (sum.m, sum.n) {
        true => Ok(()),
        false => Err(Error::Internal(format!(
            "blocks of {:?} and {:?} added to a {} x {} sum",
            a.shape(),
            b.shape(),
            sum.m,
            sum.n
        ))),
    }
}

/// An error unless a CPU sum so far holds only Grams (`gram`) or only products; the first
/// product added decides (a GPU's sum checks the same).
fn one_kind(kind: &mut Option<bool>, gram: bool) -> Result<()> {
    match *kind.get_or_insert(gram) == gram {
        true => Ok(()),
        false => Err(Error::Internal("a sum of Grams and of products at once".into())),
    }
}

/// A sum made on one backend, given to another (after a fallback, sums are made anew).
fn another_backends_sum() -> Error {
    Error::Internal("a sum made on another backend".into())
}

/// `A X` on the CPU, skipping a triangular A's zeros.
fn cpu_product(a: &DMatrix<f64>, form: Factor, x: &DMatrix<f64>) -> DMatrix<f64> {
    match form {
        Factor::UpperTriangular => cpu::upper_product(a, x),
        Factor::General => cpu::product(a.as_view(), x.as_view()),
    }
}

/// Why a GPU did not open, in the words of the notes (without the error's "GPU: ").
fn gpu_reason(error: Error) -> String {
    match error {
        Error::Gpu(reason) => reason,
        other => other.to_string(),
    }
}

/// A kept matrix made on one backend, given to another (after a fallback, they are made anew).
fn another_backends_matrix() -> Error {
    Error::Internal("a kept matrix made on another backend".into())
}

/// Runs a backend's future to its end where nothing can await it: natively, by blocking (the
/// CPU's and native wgpu's futures are ready at once anyway). In the browser only the CPU's
/// futures can be run so; a GPU's there must be awaited, and one that is not ready is an error.
#[cfg(not(target_arch = "wasm32"))]
pub fn block_on<T>(future: impl Future<Output = Result<T>>) -> Result<T> {
    pollster::block_on(future)
}

/// Runs a backend's future to its end where nothing can await it: natively, by blocking (the
/// CPU's and native wgpu's futures are ready at once anyway). In the browser only the CPU's
/// futures can be run so; a GPU's there must be awaited, and one that is not ready is an error.
#[cfg(target_arch = "wasm32")]
pub fn block_on<T>(future: impl Future<Output = Result<T>>) -> Result<T> {
    let mut context = std::task::Context::from_waker(std::task::Waker::noop());
    match std::pin::pin!(future).poll(&mut context) {
        std::task::Poll::Ready(result) => result,
        std::task::Poll::Pending => {
            Err(Error::Gpu("a GPU's results are awaited in the browser; this path cannot wait for them".into()))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Gram's sum over blocks and two segments, from integer entries (every partial sum is
    /// exact): as read it is exactly `A^T A`, symmetric, though only its lower triangle was
    /// summed. A sum of Grams and of products is refused in either order.
    #[test]
    fn a_gram_sum_over_segments_is_the_exact_symmetric_gram() {
        let a = DMatrix::<f32>::from_fn(300, 40, |i, j| ((i * 7 + j * 13) % 17) as f32 - 8.0);
        let mut backend = Backend::cpu();
        let mut sum = block_on(backend.sum(40, 40)).unwrap();
        for (start, rows) in [(0, 100), (100, 50), (150, 150)] {
            block_on(backend.add_gram(&a.rows(start, rows).into_owned(), &mut sum)).unwrap();
            if start == 100 {
                sum.end_segment();
            }
        }
        let wide = a.map(f64::from);
        assert_eq!(block_on(backend.read(sum)).unwrap(), wide.transpose() * &wide);

        let mut products_first = block_on(backend.sum(40, 40)).unwrap();
        block_on(backend.add_product(&a, &a, &mut products_first)).unwrap();
        assert!(block_on(backend.add_gram(&a, &mut products_first)).is_err(), "a Gram after a product");
        let mut grams_first = block_on(backend.sum(40, 40)).unwrap();
        block_on(backend.add_gram(&a, &mut grams_first)).unwrap();
        assert!(block_on(backend.add_product(&a, &a, &mut grams_first)).is_err(), "a product after a Gram");
    }
}
