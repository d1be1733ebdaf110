//! The GPU backend: `A^T B` and `A^T A` of row blocks and `A X` of f64 matrices by the WGSL
//! kernels in products.wgsl, through wgpu: natively on Vulkan, Metal or DX12, in the browser on
//! WebGPU (wgpu's `webgpu` feature; the same kernels, compiled by the browser). Results are two
//! f32 parts (see products.wgsl for why), added in f64 on the way back.
//!
//! Where the time goes decides the shape of this file. The kernel itself is a small part of a
//! product that allocates its buffers, reads its result back and widens it (examples/gpu_kernels.rs
//! times both; docs/benchmarks.md#gpu). So:
//! - the Grams' blocks are summed on the device ([`Accumulator`]) and read back once;
//! - a left operand used again (a Gram's factor, for every layer) stays on the device, uploaded
//!   once ([`Gpu::multiply_kept`]);
//! - a layer's products stay on the device ([`DeviceMatrix`]) and only the small products of
//!   their column blocks, which the heads' spectra read, come back, all in one read
//!   ([`Gpu::column_products`]): the large products would be as many bytes again as went over;
//! - input, output and read-back buffers are kept and reused, not made per product;
//! - a block's product runs while the caller reads the next block from the file: only the
//!   block before is waited for.
//!
//! Reading a result back is awaited: natively the device is waited for first, so the future is
//! ready at once; in the browser it resolves from the event loop.
//!
//! Nothing here panics on a GPU failure: errors inside a product (validation, out of memory)
//! are caught by error scopes, device loss and anything else by wgpu's callbacks, and returned
//! as the product's error, which the caller answers by falling back to the CPU.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::task::{Poll, Waker};

use nalgebra::DMatrix;

mod forward;
mod narrow;

pub use forward::Pieces;

use super::{ColumnRun, ColumnValues, Columns, Fold};
use crate::parallel::each_chunk;

const KERNELS: &str = concat!(include_str!("products_layout.wgsl"), include_str!("products.wgsl"));
/// The same products in native f64, where the adapter offers it.
const KERNELS_F64: &str = concat!(include_str!("products_layout.wgsl"), include_str!("products_f64.wgsl"));

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
/// Output tile of one workgroup (TILE in products.wgsl).
const TILE: usize = 64;
/// Columns one workgroup of the `fold` kernel folds (its workgroup size).
const FOLD_COLUMNS: usize = 64;
/// Columns of X per dispatch in [`Gpu::multiply`]: 4096 x 2048 outputs of a 4096-deep product
/// is ~34 GFLOP, a fraction of a second on a laptop GPU, well inside a watchdog's patience.
const WIDE_COLUMNS: usize = 2048;

/// Entries of a left matrix split into its two f32 parts at a time on the way up
/// ([`Gpu::upload_left`]).
const LEFT_PIECE: usize = 1 << 22;
/// Left operands of [`Gpu::multiply`] kept on the device: a layer multiplies with the
/// embedding's factor, the unembedding's and the cross Gram.
const RESIDENT: usize = 3;

pub struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    gemm: wgpu::ComputePipeline,
    syrk: wgpu::ComputePipeline,
    /// A norm's fold of a kept matrix's columns, in place (`fold` in products_layout.wgsl).
    fold: wgpu::ComputePipeline,
    adapter: String,
    arithmetic: Arithmetic,
    /// The device's limit on one storage binding (and on one buffer), in bytes.
    max_binding: u64,
    /// The first error wgpu reported outside a call's return value (validation, out of memory,
    /// device lost), taken by the next product.
    failure: Arc<Mutex<Option<String>>>,
    /// Buffers kept between products, by role, each as large as the largest use so far.
    scratch: Mutex<HashMap<Role, wgpu::Buffer>>,
    /// Left operands of [`Gpu::multiply`] on the device, most recently used last.
    resident: Mutex<Vec<Resident>>,
    /// Bytes written to the device and read back from it since it opened.
    to_device: AtomicU64,
    from_device: AtomicU64,
    /// The forward pass's kernels, compiled when first used.
    forward: OnceLock<forward::ForwardKernels>,
    /// Widens weights that crossed in 16 bits ([`Gpu::write_values`]).
    widen: narrow::Widen,
}

/// What a buffer kept between products ([`Gpu::scratch`]) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Role {
    A,
    ARest,
    B,
    BRest,
    CHigh,
    CLow,
    Shape,
    Zero,
    /// A norm's weight, for the fold.
    Norm,
    ReadBack,
    /// A block of the forward pass's logits.
    Logits,
    /// Each row's highest logit of a block, and its column.
    Highest,
    /// The pattern cells a forward pass keeps, gathered.
    Gathered,
    /// Weights in 16 bits, on their way to being widened.
    Packed,
}

impl Role {
    /// The buffer's label (wgpu's messages name it) and, in errors, what would not fit.
    fn label(self) -> &'static str {
        match self {
            Role::A => "a",
            Role::ARest => "a rest",
            Role::B => "b",
            Role::BRest => "b rest",
            Role::CHigh => "c high",
            Role::CLow => "c low",
            Role::Shape => "shape",
            Role::Zero => "zero",
            Role::Norm => "norm",
            Role::ReadBack => "read back",
            Role::Logits => "logits",
            Role::Highest => "highest logits",
            Role::Gathered => "gathered cells",
            Role::Packed => "packed weights",
        }
    }
}

/// A product's input side, uploaded into its own kept buffers.
#[derive(Debug, Clone, Copy)]
enum Side {
    A,
    B,
}

impl Side {
    /// The roles of the side's values and of their f32 rests.
    fn roles(self) -> (Role, Role) {
        match self {
            Side::A => (Role::A, Role::ARest),
            Side::B => (Role::B, Role::BRest),
        }
    }
}

/// A sum of `A^T B` (or `A^T A`) over blocks of rows, held on the device as two f32 parts per
/// entry (products.wgsl), read back once by [`Gpu::read`].
pub struct Accumulator {
    high: wgpu::Buffer,
    low: wgpu::Buffer,
    m: usize,
    n: usize,
    /// Whether the blocks were Grams (`A^T A`: only the upper tiles are summed, the rest is
    /// mirrored on reading), once the first block says.
    symmetric: Option<bool>,
}

/// An f64 matrix on the device as its two f32 parts, and the matrix it was uploaded from (alive
/// and unchanged for as long as this points to it: an `Arc`'s value is immutable while shared,
/// and a `Weak` keeps its allocation from being reused).
struct Resident {
    source: Weak<DMatrix<f64>>,
    value: wgpu::Buffer,
    rest: wgpu::Buffer,
}

impl Gpu {
    /// Opens the best adapter: natively a discrete GPU before an integrated one, then any other
    /// hardware; in the browser the one WebGPU offers (high-performance preference). A software
    /// or fallback adapter (lavapipe, SwiftShader, WARP) is taken only when `allow_software`.
    /// Its products run in native f64 where the adapter offers it, else as f32 pairs.
    pub async fn open(allow_software: bool) -> Result<Gpu, String> {
        Self::open_preferring(allow_software, Arithmetic::F64).await
    }

    /// [`Gpu::open`], with native f64 only where `preferred` asks for it (tests and benchmarks
    /// compare the two kernels on one adapter).
    pub async fn open_preferring(allow_software: bool, preferred: Arithmetic) -> Result<Gpu, String> {
        // SAFETY: the project's own kernels, with every runtime check on.
        unsafe { Self::open_kernels(allow_software, None, preferred, wgpu::ShaderRuntimeChecks::checked()) }.await
    }

    /// [`Gpu::open`] with other kernels (the same entry points and bindings) and runtime checks:
    /// for examples/gpu_kernels.rs, which times variants of products.wgsl against each other.
    ///
    /// # Safety
    /// With checks other than `ShaderRuntimeChecks::checked()`, `kernels` must never index
    /// outside their bindings nor loop without end: nothing then stops them.
    #[doc(hidden)]
    pub async unsafe fn open_with(
        allow_software: bool,
        kernels: &str,
        checks: wgpu::ShaderRuntimeChecks,
    ) -> Result<Gpu, String> {
        // SAFETY: the caller's contract is this function's.
        unsafe { Self::open_kernels(allow_software, Some(kernels), Arithmetic::F32Pairs, checks) }.await
    }

    /// # Safety
    /// As [`Gpu::open_with`]'s, for `kernels` given.
    async unsafe fn open_kernels(
        allow_software: bool,
        kernels: Option<&str>,
        preferred: Arithmetic,
        checks: wgpu::ShaderRuntimeChecks,
    ) -> Result<Gpu, String> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let best = best_adapter(&instance).await?;
        let info = best.get_info();
        let name = adapter_name(&info).await;
        if info.device_type == wgpu::DeviceType::Cpu && !allow_software {
            return Err(format!(
                "only a software GPU adapter ({name}), which auto skips: choose the GPU backend to use it"
            ));
        }
        let adapter_limits = best.limits();
        // The adapter's own binding limits (often far above WebGPU's 128 MiB default), so a
        // block can be large; everything else stays at the defaults.
        let limits = wgpu::Limits {
            max_storage_buffer_binding_size: adapter_limits.max_storage_buffer_binding_size,
            max_buffer_size: adapter_limits.max_buffer_size,
            ..wgpu::Limits::default()
        };
        let arithmetic = match kernels.is_none() && best.features().contains(wgpu::Features::SHADER_F64) {
            true => preferred,
            false => Arithmetic::F32Pairs,
        };
        let kernels = kernels.unwrap_or(match arithmetic {
            Arithmetic::F64 => KERNELS_F64,
            Arithmetic::F32Pairs => KERNELS,
        });
        let (device, queue) = best
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("headprint"),
                required_features: match arithmetic {
                    Arithmetic::F64 => wgpu::Features::SHADER_F64,
                    Arithmetic::F32Pairs => wgpu::Features::empty(),
                },
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| format!("{name}: cannot open the device: {e}"))?;
        let failure = Arc::new(Mutex::new(None));
        let record = failure.clone();
        device.on_uncaptured_error(Arc::new(move |error: wgpu::Error| remember(&record, error.to_string())));
        let record = failure.clone();
        device.set_device_lost_callback(move |_, message| remember(&record, format!("device lost: {message}")));

        // The browser compiles the kernels asynchronously: a failure shows in this scope.
        let invalid = device.push_error_scope(wgpu::ErrorFilter::Validation);
        let descriptor = wgpu::ShaderModuleDescriptor {
            label: Some("products.wgsl"),
            source: wgpu::ShaderSource::Wgsl(kernels.into()),
        };
        // SAFETY: checks other than `checked()` come only through `open_with`'s own contract.
        let module = unsafe { device.create_shader_module_trusted(descriptor, checks) };
        let pipeline = |entry: &str| compute_pipeline(&device, &module, entry);
        let (gemm, syrk, fold) = (pipeline("gemm"), pipeline("syrk"), pipeline("fold"));
        let widen = narrow::Widen::compile(&device);
        if let Some(error) = invalid.pop().await {
            return Err(format!("{name}: the kernels do not compile: {}", one_line(&error.to_string())));
        }
        let gpu = Gpu {
            adapter: name,
            arithmetic,
            max_binding: limits.max_storage_buffer_binding_size.min(limits.max_buffer_size),
            device,
            queue,
            gemm,
            syrk,
            fold,
            failure,
            scratch: Mutex::default(),
            resident: Mutex::default(),
            to_device: AtomicU64::new(0),
            from_device: AtomicU64::new(0),
            forward: OnceLock::new(),
            widen,
        };
        gpu.check()?;
        Ok(gpu)
    }

    /// The adapter's name and driver API.
    pub fn adapter(&self) -> &str {
        &self.adapter
    }

    pub fn arithmetic(&self) -> Arithmetic {
        self.arithmetic
    }

    /// Bytes written to the device and read back from it since it opened: `(to, from)`.
    pub fn bytes_moved(&self) -> (u64, u64) {
        (self.to_device.load(Ordering::Relaxed), self.from_device.load(Ordering::Relaxed))
    }

    /// Writes `data` into `buffer` through the queue, counting the bytes that cross to the device.
    fn write<T: bytemuck::Pod>(&self, buffer: &wgpu::Buffer, data: &[T]) {
        self.write_at(buffer, 0, data);
    }

    /// [`Gpu::write`] from byte `offset` of the buffer (a multiple of 4).
    fn write_at<T: bytemuck::Pod>(&self, buffer: &wgpu::Buffer, offset: u64, data: &[T]) {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        self.to_device.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.queue.write_buffer(buffer, offset, bytes);
    }

    /// Rows of an `n`-column block that fit one storage binding. The Grams ask for at most one
    /// segment's 4096 rows at a time (`analysis::circuits::SEGMENT_ROWS`), which also bounds a
    /// dispatch's time on a slow adapter and, in the browser, the rows held in wasm memory
    /// (4096 f32 rows, with their 16-bit copy on the way up, take less than the CPU block the
    /// worker's memory estimate counts).
    pub fn block_rows(&self, n: usize) -> usize {
        let per_row = 4 * n.max(1) as u64;
        ((self.max_binding / per_row) as usize).max(1)
    }

    /// An m x n sum at zero on the device.
    pub async fn accumulator(&self, m: usize, n: usize) -> Result<Accumulator, String> {
        self.fits("the sum", 4 * (m * n) as u64)?;
        let scope = Scopes::push(&self.device);
        let output = |label| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                // wgpu zeroes a buffer before its first use.
                size: (4 * m * n).max(4) as u64,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            })
        };
        let sum = Accumulator { high: output("sum high"), low: output("sum low"), m, n, symmetric: None };
        scope.pop(self).await?;
        Ok(sum)
    }

    /// `sum += A^T B` (A rows x m, B rows x n), or `A^T A` when `b` is None. The product is
    /// submitted, not waited for: the caller reads the next block meanwhile. Only the block
    /// before is waited for first, so no more than one block is ever queued.
    pub async fn accumulate(
        &self,
        sum: &mut Accumulator,
        a: &DMatrix<f32>,
        b: Option<&DMatrix<f32>>,
    ) -> Result<(), String> {
        let (rows, m) = a.shape();
        let n = b.map_or(m, |b| b.ncols());
        if b.is_some_and(|b| b.nrows() != rows) || (m, n) != (sum.m, sum.n) {
            return Err(format!(
                "a {rows} x {m} block times {:?} into a {} x {} sum",
                b.map(|b| b.shape()),
                sum.m,
                sum.n
            ));
        }
        if *sum.symmetric.get_or_insert(b.is_none()) != b.is_none() {
            return Err("a sum of Grams and of products at once".into());
        }
        if rows == 0 || m == 0 {
            return Ok(());
        }
        self.idle().await?;
        let scope = Scopes::push(&self.device);
        let uploaded = self
            .upload(Side::A, a.as_slice(), None)
            .and_then(|a_operand| Ok((a_operand, b.map(|b| self.upload(Side::B, b.as_slice(), None)).transpose()?)));
        if let Ok((a, b)) = &uploaded {
            let shape = Shape { rows, m, n, a_transposed: false, accumulate: true, batch: Batch::ONE };
            let encoder = self.encode(shape, a, b.as_ref().unwrap_or(a), (&sum.high, &sum.low), b.is_none());
            self.queue.submit([encoder.finish()]);
        }
        scope.pop(self).await?;
        uploaded.map(drop)
    }

    /// `a_gram += A^T A`, `product += B^T A` and `b_gram += B^T B` for blocks A (rows x m) and
    /// B (rows x n) of the same rows: an untied model's three Grams from one block of embedding
    /// and unembedding rows, each block uploaded once for the three. Submitted, not waited for,
    /// as [`Gpu::accumulate`].
    pub async fn accumulate_both(
        &self,
        a: &DMatrix<f32>,
        b: &DMatrix<f32>,
        (a_gram, product, b_gram): (&mut Accumulator, &mut Accumulator, &mut Accumulator),
    ) -> Result<(), String> {
        let (rows, m) = a.shape();
        let n = b.ncols();
        let shapes = [(a_gram.m, a_gram.n), (product.m, product.n), (b_gram.m, b_gram.n)];
        if b.nrows() != rows || shapes != [(m, m), (n, m), (n, n)] {
            return Err(format!("blocks of {:?} and {:?} into sums of {shapes:?}", a.shape(), b.shape()));
        }
        for (sum, gram) in [(&mut *a_gram, true), (&mut *product, false), (&mut *b_gram, true)] {
            if *sum.symmetric.get_or_insert(gram) != gram {
                return Err("a sum of Grams and of products at once".into());
            }
        }
        if rows == 0 || m == 0 || n == 0 {
            return Ok(());
        }
        self.idle().await?;
        let scope = Scopes::push(&self.device);
        let uploaded = self
            .upload(Side::A, a.as_slice(), None)
            .and_then(|a_operand| Ok((a_operand, self.upload(Side::B, b.as_slice(), None)?)));
        if let Ok((a, b)) = &uploaded {
            for (sum, left, right, gram) in [(&*a_gram, a, a, true), (&*product, b, a, false), (&*b_gram, b, b, true)] {
                let shape =
                    Shape { rows, m: sum.m, n: sum.n, a_transposed: false, accumulate: true, batch: Batch::ONE };
                let encoder = self.encode(shape, left, right, (&sum.high, &sum.low), gram);
                self.queue.submit([encoder.finish()]);
            }
        }
        scope.pop(self).await?;
        uploaded.map(drop)
    }

    /// The sum, in f64. A Gram comes back as its upper triangle alone (each column's entries
    /// down to the diagonal, contiguous in column-major order) and is mirrored here: the kernel
    /// sums only the upper tiles, and the lower triangle would be as many bytes again.
    pub async fn read(&self, sum: &Accumulator) -> Result<DMatrix<f64>, String> {
        let mut c = DMatrix::zeros(sum.m, sum.n);
        if sum.m * sum.n == 0 {
            return Ok(c);
        }
        if sum.symmetric != Some(true) {
            self.read_into(c.as_mut_slice(), (&sum.high, &sum.low)).await?;
            return Ok(c);
        }
        let n = sum.n;
        let column = |j: usize| 4 * (j * n) as u64..4 * (j * n + j + 1) as u64;
        let parts: Vec<_> =
            [&sum.high, &sum.low].into_iter().flat_map(|part| (0..n).map(move |j| (part, column(j)))).collect();
        self.read_back(&parts, |values| {
            let (high, low) = values.split_at(values.len() / 2);
            let mut at = 0;
            for j in 0..n {
                for i in 0..=j {
                    c[(i, j)] = high[at] as f64 + low[at] as f64;
                    at += 1;
                }
            }
        })
        .await?;
        c.fill_lower_triangle_with_upper_triangle();
        Ok(c)
    }

    /// `A X` of f64 matrices (A m x k, X k x n), each entry held as two f32 parts (products.wgsl
    /// says how, and why this keeps about 2^-36 of every term): [`Gpu::multiply_kept`], read
    /// back whole.
    pub async fn multiply(&self, a: &Arc<DMatrix<f64>>, x: &DMatrix<f64>) -> Result<DMatrix<f64>, String> {
        let (kept, _) = self.multiply_kept(a, &Columns::from(x), 1, false, None).await?;
        self.read_kept(&kept).await
    }

    /// A matrix kept on the device, read back in f64.
    pub async fn read_kept(&self, kept: &DeviceMatrix) -> Result<DMatrix<f64>, String> {
        let mut c = DMatrix::zeros(kept.rows, kept.cols);
        let m = kept.rows;
        if m > 0 {
            for chunk in &kept.chunks {
                let columns = &mut c.as_mut_slice()[chunk.first * m..(chunk.first + chunk.columns) * m];
                match &chunk.low {
                    Some(low) => self.read_into(columns, (&chunk.high, low)).await?,
                    None => {
                        let size = 4 * columns.len() as u64;
                        self.read_back(&[(&chunk.high, 0..size)], |values| {
                            for (entry, &value) in columns.iter_mut().zip(values) {
                                *entry = value as f64;
                            }
                        })
                        .await?
                    }
                }
            }
        }
        Ok(c)
    }

    /// `A X` of f64 matrices (A m x k, X k x n), left on the device for
    /// [`Gpu::column_products`]; its columns are used in blocks of `block`, which no chunk splits.
    /// X is first folded as `fold` says (on the device: see [`Gpu::put_columns`]). With `keep_x`,
    /// X stays on the device too, as [`Gpu::keep`] would leave it (uploaded once for both). A
    /// stays on the device for the next product with it (the analysis multiplies every layer by
    /// the same few); X's columns go a chunk at a time, as many as the binding limit and
    /// [`WIDE_COLUMNS`] allow.
    pub async fn multiply_kept(
        &self,
        a: &Arc<DMatrix<f64>>,
        x: &Columns<'_>,
        block: usize,
        keep_x: bool,
        fold: Option<Fold<'_>>,
    ) -> Result<(DeviceMatrix, Option<DeviceMatrix>), String> {
        let (m, k) = a.shape();
        let (rows, n) = x.shape();
        if rows != k {
            return Err(format!("{m} x {k} times {rows} x {n}"));
        }
        let mut kept = DeviceMatrix { rows: m, cols: n, chunks: Vec::new() };
        let mut kept_x = DeviceMatrix { rows: k, cols: n, chunks: Vec::new() };
        let columns = self.chunk_columns(k.max(m), block);
        // An empty product leaves its chunks as made: zero.
        let left = match m * k * n > 0 {
            true => Some(self.left_on_device(a).await?),
            false => None,
        };
        for start in (0..n).step_by(columns) {
            let width = columns.min(n - start);
            let scope = Scopes::push(&self.device);
            let chunk = self.chunk(start, width, m, wgpu::BufferUsages::empty(), true);
            let x_columns = start..start + width;
            let b = match (keep_x, &left) {
                (true, _) => {
                    let crossing = Crossing::of(x, x_columns, fold);
                    self.chunk(start, width, k, wgpu::BufferUsages::COPY_DST, crossing.has_rests()).and_then(
                        |x_chunk| {
                            self.put_columns(crossing, k, &x_chunk.high, x_chunk.low.as_ref())?;
                            let operand =
                                Operand { value: x_chunk.high.clone(), rest: x_chunk.low.clone(), len: k * width };
                            kept_x.chunks.push(x_chunk);
                            Ok(Some(operand))
                        },
                    )
                }
                (false, Some(_)) => {
                    let crossing = Crossing::of(x, x_columns, fold);
                    let len = k * width;
                    self.fits(Role::B.label(), 4 * len as u64).and_then(|()| {
                        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
                        let value = self.scratch(Role::B, 4 * len as u64, usage);
                        let rest = crossing.has_rests().then(|| self.scratch(Role::BRest, 4 * len as u64, usage));
                        self.put_columns(crossing, k, &value, rest.as_ref())?;
                        Ok(Some(Operand { value, rest, len }))
                    })
                }
                (false, None) => Ok(None),
            };
            if let (Some(left), Ok(Some(b)), Ok(chunk)) = (&left, &b, &chunk) {
                self.submit_left_product(left, (m, k), b, 0, chunk);
            }
            scope.pop(self).await?;
            b?;
            kept.chunks.push(chunk?);
        }
        Ok((kept, keep_x.then_some(kept_x)))
    }

    /// `A X_c` of columns `columns` of a matrix kept on the device (A m x k, X k rows), left on
    /// the device: one dispatch per chunk of X the columns lie in, each reading its columns in
    /// place, so X never crosses again. The result's chunks are those of X's, so a block no
    /// chunk of X splits, starting at a block's edge, is whole in one of them too.
    pub async fn multiply_columns(
        &self,
        a: &Arc<DMatrix<f64>>,
        x: &DeviceMatrix,
        columns: Range<usize>,
    ) -> Result<DeviceMatrix, String> {
        let (m, k) = a.shape();
        if x.rows != k || columns.start > columns.end || columns.end > x.cols {
            return Err(format!("{m} x {k} times columns {columns:?} of {} x {}", x.rows, x.cols));
        }
        let mut kept = DeviceMatrix { rows: m, cols: columns.len(), chunks: Vec::new() };
        let left = match m * k * columns.len() > 0 {
            true => Some(self.left_on_device(a).await?),
            false => None,
        };
        let mut column = columns.start;
        while column < columns.end {
            let (at, offset) = x.locate(column, 1)?;
            let source = &x.chunks[at];
            let width = (source.columns - offset).min(columns.end - column);
            let scope = Scopes::push(&self.device);
            let chunk = self.chunk(column - columns.start, width, m, wgpu::BufferUsages::empty(), true);
            if let (Some(left), Ok(chunk)) = (&left, &chunk) {
                let b = Operand { value: source.high.clone(), rest: source.low.clone(), len: k * source.columns };
                self.submit_left_product(left, (m, k), &b, offset, chunk);
            }
            scope.pop(self).await?;
            kept.chunks.push(chunk?);
            column += width;
        }
        Ok(kept)
    }

    /// Submits `A X` into `into`, for A (m x k, its two parts kept on the device as `left`) and
    /// `into.columns` columns of `b` from its column `b_first`.
    fn submit_left_product(
        &self,
        (a_value, a_rest): &(wgpu::Buffer, wgpu::Buffer),
        (m, k): (usize, usize),
        b: &Operand,
        b_first: usize,
        into: &Chunk,
    ) {
        let a = Operand { value: a_value.clone(), rest: Some(a_rest.clone()), len: m * k };
        let batch = Batch { b_first, ..Batch::ONE };
        let shape = Shape { rows: k, m, n: into.columns, a_transposed: true, accumulate: false, batch };
        let low = into.low.as_ref().unwrap_or(&into.high);
        let encoder = self.encode(shape, &a, b, (&into.high, low), false);
        self.queue.submit([encoder.finish()]);
    }

    /// X (f64), first folded as `fold` says, on the device as two f32 parts, as
    /// [`Gpu::multiply_kept`] leaves a product: for [`Gpu::column_products`] with blocks of
    /// `block` columns.
    pub async fn keep(&self, x: &Columns<'_>, block: usize, fold: Option<Fold<'_>>) -> Result<DeviceMatrix, String> {
        let (rows, n) = x.shape();
        let mut kept = DeviceMatrix { rows, cols: n, chunks: Vec::new() };
        let columns = self.chunk_columns(rows, block);
        for start in (0..n).step_by(columns) {
            let width = columns.min(n - start);
            let scope = Scopes::push(&self.device);
            let crossing = Crossing::of(x, start..start + width, fold);
            let chunk = self.chunk(start, width, rows, wgpu::BufferUsages::COPY_DST, crossing.has_rests());
            let put = match &chunk {
                Ok(chunk) => self.put_columns(crossing, rows, &chunk.high, chunk.low.as_ref()),
                Err(_) => Ok(()),
            };
            scope.pop(self).await?;
            put?;
            kept.chunks.push(chunk?);
        }
        Ok(kept)
    }

    /// Columns of X (`rows` each) written into `high` and `low` as the products read them: the
    /// f32 values and their rests as split on the host or, to be folded, the f32 values as
    /// stored and the norm's weight, folded in place by the `fold` kernel (which writes the
    /// rests). So a folded X costs the bytes of the raw one. `low` is there whenever
    /// [`Crossing::has_rests`] says so.
    fn put_columns(
        &self,
        crossing: Crossing,
        rows: usize,
        high: &wgpu::Buffer,
        low: Option<&wgpu::Buffer>,
    ) -> Result<(), String> {
        match crossing {
            Crossing::Split(value, rest) => {
                self.write_values(high, &value);
                if let (Some(low), Some(rest)) = (low, &rest) {
                    self.write(low, rest);
                }
            }
            Crossing::ToFold(value, fold) => {
                // The caller made room for rests, as `Crossing::has_rests` says a folded X has.
                let Some(low) = low else { return Err("a folded matrix without room for its low parts".into()) };
                self.write_values(high, &value);
                let weight = fold.norm.weight.as_slice();
                let norm = self.scratch(
                    Role::Norm,
                    4 * weight.len() as u64,
                    wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                );
                self.write(&norm, weight);
                let columns = value.len() / rows.max(1);
                let centre = fold.kind == crate::model::NormKind::LayerNorm;
                // products_layout.wgsl's Shape: k, n and the fold's kind (`fold_kind`).
                let mut uniform = [0u32; 16];
                (uniform[0], uniform[2]) = (rows as u32, columns as u32);
                uniform[13] = centre as u32 | (fold.transposed as u32) << 1;
                let shape = self.scratch(Role::Shape, 64, wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST);
                self.write(&shape, &uniform);
                let zero = self.scratch(Role::Zero, 4, wgpu::BufferUsages::STORAGE);
                let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &self.fold.get_bind_group_layout(0),
                    entries: &[
                        wgpu::BindGroupEntry { binding: 0, resource: binding(&norm, rows) },
                        wgpu::BindGroupEntry { binding: 2, resource: binding(high, value.len()) },
                        wgpu::BindGroupEntry { binding: 3, resource: binding(low, value.len()) },
                        wgpu::BindGroupEntry { binding: 4, resource: shape.as_entire_binding() },
                        wgpu::BindGroupEntry { binding: 5, resource: zero.as_entire_binding() },
                    ],
                });
                let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
                {
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                    pass.set_pipeline(&self.fold);
                    pass.set_bind_group(0, &bind_group, &[]);
                    pass.dispatch_workgroups(columns.div_ceil(FOLD_COLUMNS) as u32, 1, 1);
                }
                // Submitted now: the product's dispatch rewrites the shape uniform after it.
                self.queue.submit([encoder.finish()]);
            }
        }
        Ok(())
    }

    /// Columns per chunk of a matrix kept on the device: whole blocks of `block` columns, as many
    /// as one binding holds at `rows` entries a column (at least one block) and [`WIDE_COLUMNS`]
    /// allow.
    fn chunk_columns(&self, rows: usize, block: usize) -> usize {
        let block = block.max(1);
        let fit = ((self.max_binding / (4 * rows.max(1) as u64)) as usize).clamp(1, WIDE_COLUMNS.max(block));
        (fit / block).max(1) * block
    }

    /// A chunk of `columns` columns from `first`, `rows` high, at zero (wgpu zeroes a new buffer),
    /// with low parts or (`with_low` false: values that are f32 already) without.
    fn chunk(
        &self,
        first: usize,
        columns: usize,
        rows: usize,
        usage: wgpu::BufferUsages,
        with_low: bool,
    ) -> Result<Chunk, String> {
        let bytes = 4 * (rows * columns) as u64;
        self.fits("a kept matrix's chunk", bytes)?;
        let buffer = |label| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes.max(4),
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | usage,
                mapped_at_creation: false,
            })
        };
        Ok(Chunk { first, columns, high: buffer("kept high"), low: with_low.then(|| buffer("kept low")) })
    }

    /// `L^T R` of `width`-column blocks of matrices kept on the device, for every product of every
    /// run in order (see [`ColumnRun`]); a block's product with itself is exactly symmetric. A
    /// run's products whose blocks share chunks are one dispatch; all write into one buffer,
    /// read back once (as many as fit one binding at a time): only these small matrices cross.
    pub async fn column_products(
        &self,
        width: usize,
        runs: &[ColumnRun<'_, DeviceMatrix>],
    ) -> Result<Vec<DMatrix<f64>>, String> {
        let size = width * width;
        let total: usize = runs.iter().map(|r| r.count).sum();
        if size == 0 {
            return Ok(vec![DMatrix::zeros(width, width); total]);
        }
        self.fits("a block product", 4 * size as u64)?;
        let per_read = ((self.max_binding / (4 * size as u64)) as usize).max(1);
        let mut dispatches: Vec<Dispatch> = Vec::new();
        let mut symmetric = Vec::with_capacity(total);
        for (r, run) in runs.iter().enumerate() {
            if run.left.rows != run.right.rows {
                return Err(format!("blocks of {} rows against blocks of {}", run.left.rows, run.right.rows));
            }
            let same = std::ptr::eq(run.left, run.right) && run.left_blocks == run.right_blocks;
            for p in 0..run.count {
                let (left, left_column) = run.left.locate(run.left_blocks.block(p) * width, width)?;
                let (right, right_column) = run.right.locate(run.right_blocks.block(p) * width, width)?;
                let index = symmetric.len();
                symmetric.push(same);
                match dispatches.last_mut() {
                    Some(d)
                        if d.run == r
                            && (d.left, d.right) == (left, right)
                            && d.first / per_read == index / per_read =>
                    {
                        d.batch.count += 1;
                    }
                    _ => dispatches.push(Dispatch {
                        run: r,
                        left,
                        right,
                        first: index,
                        batch: Batch {
                            a_first: left_column,
                            a_skip: p % run.left_blocks.group.max(1),
                            a_group: run.left_blocks.group.max(1),
                            b_first: right_column,
                            b_skip: p % run.right_blocks.group.max(1),
                            b_group: run.right_blocks.group.max(1),
                            c_first: 0,
                            count: 1,
                        },
                    }),
                }
            }
        }
        let mut values = vec![0f64; total * size];
        for (read, start) in (0..total).step_by(per_read).enumerate() {
            let count = per_read.min(total - start);
            let bytes = (4 * count * size) as u64;
            let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
            let output = (self.scratch(Role::CHigh, bytes, usage), self.scratch(Role::CLow, bytes, usage));
            let scope = Scopes::push(&self.device);
            for d in dispatches.iter().filter(|d| d.first / per_read == read) {
                let run = &runs[d.run];
                let (left, right) = (&run.left.chunks[d.left], &run.right.chunks[d.right]);
                let operand = |c: &Chunk, rows: usize| Operand {
                    value: c.high.clone(),
                    rest: c.low.clone(),
                    len: rows * c.columns,
                };
                let (a, b) = (operand(left, run.left.rows), operand(right, run.right.rows));
                let batch = Batch { c_first: (d.first - start) * size, ..d.batch };
                let shape =
                    Shape { rows: run.left.rows, m: width, n: width, a_transposed: false, accumulate: false, batch };
                let encoder = self.encode(shape, &a, &b, (&output.0, &output.1), false);
                self.queue.submit([encoder.finish()]);
            }
            scope.pop(self).await?;
            self.read_into(&mut values[start * size..(start + count) * size], (&output.0, &output.1)).await?;
        }
        Ok(values
            .chunks(size)
            .zip(symmetric)
            .map(|(entries, symmetric)| {
                let mut c = DMatrix::from_column_slice(width, width, entries);
                if symmetric {
                    c.fill_lower_triangle_with_upper_triangle();
                }
                c
            })
            .collect())
    }

    /// A's two parts on the device: kept from an earlier product with the same `Arc`, or
    /// uploaded now and kept.
    async fn left_on_device(&self, a: &Arc<DMatrix<f64>>) -> Result<(wgpu::Buffer, wgpu::Buffer), String> {
        if let Some(buffers) = self.kept(a) {
            return Ok(buffers);
        }
        // Uploading A can fail (out of memory) like any product: inside an error scope, and
        // kept for later products only once it worked.
        let scope = Scopes::push(&self.device);
        let uploaded = self.upload_left(a);
        scope.pop(self).await?;
        let uploaded = uploaded?;
        let buffers = (uploaded.value.clone(), uploaded.rest.clone());
        self.keep_left(uploaded);
        Ok(buffers)
    }

    /// A's two parts kept on the device from an earlier product with the same `Arc`, now the
    /// most recently used.
    fn kept(&self, a: &Arc<DMatrix<f64>>) -> Option<(wgpu::Buffer, wgpu::Buffer)> {
        let mut resident = self.resident.lock().unwrap_or_else(|e| e.into_inner());
        resident.retain(|r| r.source.strong_count() > 0);
        let source = Arc::downgrade(a);
        let at = resident.iter().position(|r| Weak::ptr_eq(&r.source, &source))?;
        let kept = resident.remove(at);
        let buffers = (kept.value.clone(), kept.rest.clone());
        resident.push(kept);
        Some(buffers)
    }

    /// A's two parts uploaded to the device (no lock held: the split runs on rayon), split a
    /// piece of [`LEFT_PIECE`] entries at a time: both parts of the whole of A would be as
    /// large again as A on the host.
    fn upload_left(&self, a: &Arc<DMatrix<f64>>) -> Result<Resident, String> {
        let bytes = 4 * a.len() as u64;
        self.fits("the left matrix", bytes)?;
        let buffer = |label| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        };
        let (value, rest) = (buffer("resident value"), buffer("resident rest"));
        for (p, piece) in a.as_slice().chunks(LEFT_PIECE).enumerate() {
            let (piece_value, piece_rest) = split(piece);
            let offset = 4 * (p * LEFT_PIECE) as u64;
            self.write_at(&value, offset, &piece_value);
            self.write_at(&rest, offset, &piece_rest);
        }
        Ok(Resident { source: Arc::downgrade(a), value, rest })
    }

    /// Keeps an uploaded left matrix, dropping the least recently used of more than [`RESIDENT`].
    fn keep_left(&self, uploaded: Resident) {
        let mut resident = self.resident.lock().unwrap_or_else(|e| e.into_inner());
        if resident.len() >= RESIDENT {
            resident.remove(0);
        }
        resident.push(uploaded);
    }

    /// An error when `bytes` exceed one binding.
    fn fits(&self, what: &str, bytes: u64) -> Result<(), String> {
        match bytes > self.max_binding {
            true => {
                Err(format!("{what} needs {bytes} bytes, over the adapter's {}-byte binding limit", self.max_binding))
            }
            false => Ok(()),
        }
    }

    /// The kept buffer for `role`, at least `bytes` long (made anew when it is not).
    fn scratch(&self, role: Role, bytes: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
        let bytes = bytes.max(4);
        let mut scratch = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(buffer) = scratch.get(&role).filter(|b| b.size() >= bytes) {
            return buffer.clone();
        }
        let buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(role.label()),
            size: bytes,
            usage,
            mapped_at_creation: false,
        });
        scratch.insert(role, buffer.clone());
        buffer
    }

    /// f32 values (and their rests, for an f64 input) into the kept input buffers of `side`.
    /// The queue orders the write after every product already submitted, so a buffer still in
    /// use is safe to refill.
    fn upload(&self, side: Side, value: &[f32], rest: Option<&[f32]>) -> Result<Operand, String> {
        let bytes = 4 * value.len() as u64;
        let (value_role, rest_role) = side.roles();
        self.fits(value_role.label(), bytes)?;
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let value_buffer = self.scratch(value_role, bytes, usage);
        self.write_values(&value_buffer, value);
        let rest_buffer = match rest {
            Some(rest) => {
                let buffer = self.scratch(rest_role, bytes, usage);
                self.write(&buffer, rest);
                Some(buffer)
            }
            None => None,
        };
        Ok(Operand { value: value_buffer, rest: rest_buffer, len: value.len() })
    }

    /// A command encoder holding one dispatch of the product `shape` describes, from `a` and
    /// `b` (ignored by a Gram) into `output`'s two parts.
    fn encode(
        &self,
        shape: Shape,
        a: &Operand,
        b: &Operand,
        output: (&wgpu::Buffer, &wgpu::Buffer),
        gram: bool,
    ) -> wgpu::CommandEncoder {
        let batch = shape.batch;
        let uniform = [
            shape.rows,
            shape.m,
            shape.n,
            // Which inputs carry rests: 1 A, 2 B.
            a.rest.is_some() as usize | (b.rest.is_some() as usize) << 1,
            shape.a_transposed as usize,
            shape.accumulate as usize,
            batch.a_first,
            batch.a_skip,
            batch.a_group,
            batch.b_first,
            batch.b_skip,
            batch.b_group,
            batch.c_first,
            0,
            0,
            0,
        ]
        .map(|v| v as u32);
        let shape_buffer = self.scratch(Role::Shape, 64, wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST);
        self.write(&shape_buffer, &uniform);
        let zero = self.scratch(Role::Zero, 4, wgpu::BufferUsages::STORAGE);
        let pipeline = if gram { &self.syrk } else { &self.gemm };
        let output_len = batch.c_first + batch.count * shape.m * shape.n;
        // An input without rests binds its values again in their place (never read).
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: binding(&a.value, a.len) },
                wgpu::BindGroupEntry { binding: 1, resource: binding(&b.value, b.len) },
                wgpu::BindGroupEntry { binding: 2, resource: binding(output.0, output_len) },
                wgpu::BindGroupEntry { binding: 3, resource: binding(output.1, output_len) },
                wgpu::BindGroupEntry { binding: 4, resource: shape_buffer.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 5, resource: zero.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 6, resource: binding(a.rest.as_ref().unwrap_or(&a.value), a.len) },
                wgpu::BindGroupEntry { binding: 7, resource: binding(b.rest.as_ref().unwrap_or(&b.value), b.len) },
            ],
        });
        let tiles = |count: usize| count.div_ceil(TILE) as u32;
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(tiles(shape.m), tiles(shape.n), batch.count as u32);
        }
        encoder
    }

    /// Reads the two f32 parts back into `c` (their sums in f64, in the parts' column-major
    /// order).
    async fn read_into(&self, c: &mut [f64], (high, low): (&wgpu::Buffer, &wgpu::Buffer)) -> Result<(), String> {
        let size = (4 * c.len()) as u64;
        self.read_back(&[(high, 0..size), (low, 0..size)], |values| {
            let (high, low) = values.split_at(c.len());
            each_chunk(c, SMALLEST_CHUNK, |start, chunk| {
                let parts = high[start..].iter().zip(&low[start..]);
                for (entry, (&h, &l)) in chunk.iter_mut().zip(parts) {
                    *entry = h as f64 + l as f64;
                }
            });
        })
        .await
    }

    /// Copies the byte range of each of `parts`, one after another, into the kept read-back
    /// buffer, waits for them, and hands their f32 values to `take`.
    async fn read_back<R>(
        &self,
        parts: &[(&wgpu::Buffer, Range<u64>)],
        take: impl FnOnce(&[f32]) -> R,
    ) -> Result<R, String> {
        let size: u64 = parts.iter().map(|(_, bytes)| bytes.end - bytes.start).sum();
        let scope = Scopes::push(&self.device);
        let read_buffer =
            self.scratch(Role::ReadBack, size, wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST);
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        let mut at = 0;
        for (buffer, bytes) in parts {
            encoder.copy_buffer_to_buffer(buffer, bytes.start, &read_buffer, at, bytes.end - bytes.start);
            at += bytes.end - bytes.start;
        }
        self.queue.submit([encoder.finish()]);
        self.from_device.fetch_add(size, Ordering::Relaxed);
        scope.pop(self).await?;

        let (signal, future) = signal();
        read_buffer.slice(..size).map_async(wgpu::MapMode::Read, signal);
        let mapped = async {
            // Natively this waits for the device (and runs the callback); the browser's device
            // needs no polling and the callback comes from its event loop.
            self.wait()?;
            let mapping = future.await;
            self.check()?;
            mapping.map_err(|e| format!("reading the result back: {e}"))?;
            read_buffer.get_mapped_range(..size).map_err(|e| format!("reading the result back: {e}"))
        }
        .await;
        let view = match mapped {
            Ok(view) => view,
            Err(e) => {
                // The kept buffer may be left mapped or pending: a later read gets a new one.
                self.scratch.lock().unwrap_or_else(|e| e.into_inner()).remove(&Role::ReadBack);
                return Err(e);
            }
        };
        let taken = take(bytemuck::cast_slice(&view));
        drop(view);
        read_buffer.unmap();
        Ok(taken)
    }

    /// Waits for every product submitted so far: natively by blocking, in the browser through
    /// the event loop.
    async fn idle(&self) -> Result<(), String> {
        let (signal, future) = signal();
        self.queue.on_submitted_work_done(move || signal(()));
        self.wait()?;
        future.await;
        self.check()
    }

    /// Natively, blocks until the device is idle (running wgpu's callbacks); in the browser
    /// nothing (callbacks come from the event loop).
    fn wait(&self) -> Result<(), String> {
        self.device.poll(wgpu::PollType::wait_indefinitely()).map(drop).map_err(|e| format!("waiting for the GPU: {e}"))
    }

    /// Seconds each of `repeats` dispatches of the kernel alone took (inputs uploaded once,
    /// nothing read back), on `rows` x m and `rows` x n inputs of small integers (`syrk`: the
    /// first one alone), `wide` with rest parts: for examples/gpu_kernels.rs. Natively only, where
    /// waiting for the device blocks.
    #[doc(hidden)]
    #[cfg(not(target_arch = "wasm32"))]
    pub fn time_kernel(
        &self,
        (rows, m, n): (usize, usize, usize),
        syrk: bool,
        wide: bool,
        repeats: usize,
    ) -> Result<Vec<f64>, String> {
        let values = |count: usize| (0..count).map(|i| (i % 7) as f32 - 3.0).collect::<Vec<_>>();
        let (a_value, b_value) = (values(rows * m), values(rows * n));
        let rests = |len: usize| wide.then(|| vec![0f32; len]);
        let a = self.upload(Side::A, &a_value, rests(a_value.len()).as_deref())?;
        let b = self.upload(Side::B, &b_value, rests(b_value.len()).as_deref())?;
        let sum = pollster::block_on(self.accumulator(m, n))?;
        let shape = Shape { rows, m, n, a_transposed: false, accumulate: false, batch: Batch::ONE };
        let mut seconds = Vec::new();
        for _ in 0..repeats {
            let start = std::time::Instant::now();
            self.queue.submit([self.encode(shape, &a, &b, (&sum.high, &sum.low), syrk).finish()]);
            self.wait()?;
            seconds.push(start.elapsed().as_secs_f64());
        }
        self.check()?;
        Ok(seconds)
    }

    /// The first failure wgpu reported since the last check, as an error.
    fn check(&self) -> Result<(), String> {
        match self.failure.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(reason) => Err(format!("{}: {reason}", self.adapter)),
            None => Ok(()),
        }
    }
}

/// The kernel `entry` of `module`, its bindings' layout taken from the kernel itself.
fn compute_pipeline(device: &wgpu::Device, module: &wgpu::ShaderModule, entry: &str) -> wgpu::ComputePipeline {
    device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
        label: Some(entry),
        layout: None,
        module,
        entry_point: Some(entry),
        compilation_options: Default::default(),
        cache: None,
    })
}

/// The first `len` f32 values of `buffer` as a binding.
fn binding(buffer: &wgpu::Buffer, len: usize) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer,
        offset: 0,
        size: std::num::NonZeroU64::new(4 * len.max(1) as u64),
    })
}

/// One dispatch's shape: `A^T B` with A `rows` x m (stored m x `rows` when `a_transposed`),
/// B `rows` x n; `accumulate` adds to the output; `batch` says where each of its products reads
/// and writes. (Whether an input carries rests is its [`Operand`]'s.)
#[derive(Clone, Copy)]
struct Shape {
    rows: usize,
    m: usize,
    n: usize,
    a_transposed: bool,
    accumulate: bool,
    batch: Batch,
}

/// `count` products in one dispatch (products_layout.wgsl's `Shape` says how each finds its
/// columns: product z reads A's columns from `a_first + ((z + a_skip) / a_group) * m`, B's
/// likewise, and writes at `c_first + z * m * n`).
#[derive(Clone, Copy)]
struct Batch {
    a_first: usize,
    a_skip: usize,
    a_group: usize,
    b_first: usize,
    b_skip: usize,
    b_group: usize,
    c_first: usize,
    count: usize,
}

impl Batch {
    /// One product, of the whole bindings.
    const ONE: Batch =
        Batch { a_first: 0, a_skip: 0, a_group: 1, b_first: 0, b_skip: 0, b_group: 1, c_first: 0, count: 1 };
}

/// An f64 matrix kept on the device as two f32 parts per entry (a product's result, or uploaded
/// by [`Gpu::keep`]), in chunks of whole column blocks, each chunk within one binding.
pub struct DeviceMatrix {
    rows: usize,
    cols: usize,
    chunks: Vec<Chunk>,
}

impl DeviceMatrix {
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// The chunk holding columns `column..column + width`, and where they start in it.
    fn locate(&self, column: usize, width: usize) -> Result<(usize, usize), String> {
        let found = self.chunks.iter().position(|c| (c.first..c.first + c.columns).contains(&column));
        match found {
            Some(at) if column + width <= self.chunks[at].first + self.chunks[at].columns => {
                Ok((at, column - self.chunks[at].first))
            }
            _ => Err(format!("columns {column}..{} of a kept {} x {} matrix", column + width, self.rows, self.cols)),
        }
    }
}

/// Columns `first..first + columns` of a [`DeviceMatrix`], column-major: the f32 values (or a
/// result's high parts) and what they left (its low parts; None where every value is an f32, as
/// raw weights are).
struct Chunk {
    first: usize,
    columns: usize,
    high: wgpu::Buffer,
    low: Option<wgpu::Buffer>,
}

/// Products of one [`ColumnRun`] whose blocks lie in the same two chunks: one dispatch.
struct Dispatch {
    run: usize,
    left: usize,
    right: usize,
    /// Its first product's place among all the products asked for.
    first: usize,
    batch: Batch,
}

/// One input on the device: its f32 values (`len` of them), and for an f64 input what rounding
/// to f32 left of each.
struct Operand {
    value: wgpu::Buffer,
    rest: Option<wgpu::Buffer>,
    len: usize,
}

/// The validation and out-of-memory error scopes around one step, so that what goes wrong in
/// it is its error.
/// (Pushed out-of-memory first; `invalid` is declared first so that dropping pops in order.)
struct Scopes {
    invalid: wgpu::ErrorScopeGuard,
    out_of_memory: wgpu::ErrorScopeGuard,
}

impl Scopes {
    fn push(device: &wgpu::Device) -> Scopes {
        let out_of_memory = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let invalid = device.push_error_scope(wgpu::ErrorFilter::Validation);
        Scopes { out_of_memory, invalid }
    }

    async fn pop(self, gpu: &Gpu) -> Result<(), String> {
        let invalid = self.invalid.pop().await;
        let out_of_memory = self.out_of_memory.pop().await;
        match invalid.or(out_of_memory) {
            Some(error) => Err(format!("{}: {}", gpu.adapter, one_line(&error.to_string()))),
            None => Ok(()),
        }
    }
}

/// f64 values as two f32 parts: each rounded to f32, and what that left (exact to 2^-48).
fn split(values: &[f64]) -> (Vec<f32>, Vec<f32>) {
    let (mut value, mut rest) = (vec![0f32; values.len()], vec![0f32; values.len()]);
    let size = SMALLEST_CHUNK;
    let mut pieces: Vec<_> = value.chunks_mut(size).zip(rest.chunks_mut(size)).enumerate().collect();
    each_chunk(&mut pieces, 1, |_, pieces| {
        for (i, (value, rest)) in pieces {
            for ((value, rest), &v) in value.iter_mut().zip(rest.iter_mut()).zip(&values[*i * size..]) {
                *value = v as f32;
                *rest = (v - *value as f64) as f32;
            }
        }
    });
    (value, rest)
}

/// Columns of X on their way to the device.
enum Crossing<'a> {
    /// f32 values and, unless they are all f32 already, their rests.
    Split(Vec<f32>, Option<Vec<f32>>),
    /// f32 values (X as stored), to be folded on the device.
    ToFold(Vec<f32>, Fold<'a>),
}

impl<'a> Crossing<'a> {
    /// Columns `columns` of X, folded as `fold` says: on the device when their values are f32
    /// (weights as stored), else on the host before they are split.
    fn of(x: &Columns<'_>, columns: Range<usize>, fold: Option<Fold<'a>>) -> Crossing<'a> {
        let rows = x.shape().0;
        let columns = match x.columns(columns) {
            ColumnValues::F32(values) => {
                return match fold {
                    None => Crossing::Split(values, None),
                    Some(fold) => Crossing::ToFold(values, fold),
                };
            }
            ColumnValues::F64(values) => values,
        };
        let (value, rest) = split_wide(columns);
        match (fold, rest) {
            (None, rest) => Crossing::Split(value, rest),
            (Some(fold), None) => Crossing::ToFold(value, fold),
            (Some(fold), Some(_)) => {
                let mut x = DMatrix::from_column_slice(rows, columns.len() / rows.max(1), columns);
                fold.apply(&mut x);
                let (value, rest) = split_wide(x.as_slice());
                Crossing::Split(value, rest)
            }
        }
    }

    /// Whether the values on the device will have rests (a folded X always does).
    fn has_rests(&self) -> bool {
        matches!(self, Crossing::ToFold(..) | Crossing::Split(_, Some(_)))
    }
}

/// [`split`], without the rests when they are all zero (values that are f32 already, such as
/// weights used as stored): they need not cross.
fn split_wide(values: &[f64]) -> (Vec<f32>, Option<Vec<f32>>) {
    let (value, rest) = split(values);
    let exact = rest.iter().all(|&r| r == 0.0);
    (value, (!exact).then_some(rest))
}

/// Entries per task in the conversions around a GPU product: memory-bound loops over hundreds
/// of MB, which on one thread take longer than the product itself natively (a task costs µs).
const SMALLEST_CHUNK: usize = 1 << 16;

/// A callback's value handed to the task awaiting it: the callback (to give wgpu) and the
/// future (to await).
fn signal<T: Send + 'static>() -> (impl FnOnce(T) + Send + 'static, impl Future<Output = T>) {
    let slot = Arc::new(Mutex::new(Slot { value: None, waker: None }));
    let sender = slot.clone();
    let send = move |value| {
        let mut slot = sender.lock().unwrap_or_else(|e| e.into_inner());
        slot.value = Some(value);
        if let Some(waker) = slot.waker.take() {
            waker.wake();
        }
    };
    let receive = std::future::poll_fn(move |context| {
        let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
        match slot.value.take() {
            Some(value) => Poll::Ready(value),
            None => {
                slot.waker = Some(context.waker().clone());
                Poll::Pending
            }
        }
    });
    (send, receive)
}

/// A callback's value, and the task waiting for it.
struct Slot<T> {
    value: Option<T>,
    waker: Option<Waker>,
}

fn remember(slot: &Mutex<Option<String>>, reason: String) {
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    // Keep the first: later errors usually follow from it.
    if slot.is_none() {
        *slot = Some(one_line(&reason));
    }
}

/// wgpu's multi-line error reports as one line, as the CLI and the page show them.
fn one_line(text: &str) -> String {
    text.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" ")
}

/// Natively: the best of all adapters, discrete GPUs first, software ones last.
#[cfg(not(target_arch = "wasm32"))]
async fn best_adapter(instance: &wgpu::Instance) -> Result<wgpu::Adapter, String> {
    let adapters = instance.enumerate_adapters(wgpu::Backends::all()).await;
    let rank = |adapter: &wgpu::Adapter| match adapter.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    };
    adapters
        .into_iter()
        .min_by_key(rank)
        .ok_or_else(|| "no GPU adapter found (on Linux without a GPU, install mesa-vulkan-drivers for lavapipe)".into())
}

/// In the browser: the adapter WebGPU offers (it offers one at a time).
#[cfg(target_arch = "wasm32")]
async fn best_adapter(instance: &wgpu::Instance) -> Result<wgpu::Adapter, String> {
    let options =
        wgpu::RequestAdapterOptions { power_preference: wgpu::PowerPreference::HighPerformance, ..Default::default() };
    // wgpu's message lists every native API it was built without; the reader needs less.
    instance.request_adapter(&options).await.map_err(|_| {
        match BROWSER_GPU.get().is_some_and(|gpu| !(gpu.has_webgpu)()) {
            true => "this browser offers no WebGPU here".to_string(),
            false => "WebGPU offers no adapter here: it may be switched off, or the GPU blocked".to_string(),
        }
    })
}

/// The adapter's name and driver API, e.g. "llvmpipe (LLVM 15.0.6, 256 bits) (Vulkan)".
#[cfg(not(target_arch = "wasm32"))]
async fn adapter_name(info: &wgpu::AdapterInfo) -> String {
    format!("{} ({:?})", info.name, info.backend)
}

/// The adapter as the browser describes it, e.g. "google swiftshader (WebGPU)": wgpu keeps only
/// the description, which browsers often leave empty, so the vendor and architecture are read
/// from the browser's own adapter info.
#[cfg(target_arch = "wasm32")]
async fn adapter_name(info: &wgpu::AdapterInfo) -> String {
    let name = match info.name.trim() {
        "" => match BROWSER_GPU.get() {
            Some(gpu) => (gpu.describe_adapter)().await,
            None => None,
        }
        .unwrap_or_else(|| "unnamed adapter".into()),
        name => name.to_string(),
    };
    format!("{name} (WebGPU)")
}

/// What the browser knows of its GPU and wgpu does not pass on. The core knows no browser: the
/// page's crate supplies these when it starts ([`set_browser_gpu`]).
#[cfg(target_arch = "wasm32")]
#[derive(Clone, Copy)]
pub struct BrowserGpu {
    /// Whether the browser offers WebGPU at all, which tells "no WebGPU" from "no adapter".
    pub has_webgpu: fn() -> bool,
    /// "vendor architecture [description]" of the adapter the browser gives for high
    /// performance (the one wgpu was given), or None.
    pub describe_adapter: fn() -> AdapterDescription,
}

/// The browser's words for its adapter, when it answers.
#[cfg(target_arch = "wasm32")]
pub type AdapterDescription = std::pin::Pin<Box<dyn Future<Output = Option<String>>>>;

#[cfg(target_arch = "wasm32")]
static BROWSER_GPU: std::sync::OnceLock<BrowserGpu> = std::sync::OnceLock::new();

/// Called once by the page and by each worker before a GPU backend opens.
#[cfg(target_arch = "wasm32")]
pub fn set_browser_gpu(gpu: BrowserGpu) {
    // A second call brings the same functions.
    let _ = BROWSER_GPU.set(gpu);
}
