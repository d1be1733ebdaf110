//! The GPU backend: `A^T B` and `A^T A` of row blocks by the WGSL kernels in products.wgsl,
//! through wgpu: natively on Vulkan, Metal or DX12, in the browser on WebGPU (wgpu's `webgpu`
//! feature; the same kernels, compiled by the browser). Each product is one dispatch over a
//! whole block (as many rows as a storage binding holds, and at most the 4096 rows of one
//! of the Grams' segments, see `analysis::circuits::SEGMENT_ROWS`); its result comes back as two f32
//! parts (see products.wgsl for why), added in f64, and the caller sums the blocks in f64.
//!
//! Reading a result back is awaited: natively the device is waited for first, so the future is
//! ready at once; in the browser it resolves from the event loop.
//!
//! Nothing here panics on a GPU failure: errors inside a product (validation, out of memory)
//! are caught by error scopes, device loss and anything else by wgpu's callbacks, and returned
//! as the product's error, which the caller answers by falling back to the CPU.

use std::sync::{Arc, Mutex};
use std::task::{Poll, Waker};

use nalgebra::DMatrix;
use wgpu::util::DeviceExt;

const KERNELS: &str = include_str!("products.wgsl");
/// Output tile of one workgroup (TILE in products.wgsl).
const TILE: usize = 64;
/// Columns of X per dispatch in [`Gpu::multiply`]: 4096 x 2048 outputs of a 4096-deep product
/// is ~34 GFLOP, a fraction of a second on a laptop GPU, well inside a watchdog's patience.
const WIDE_COLUMNS: usize = 2048;
pub struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    gemm: wgpu::ComputePipeline,
    syrk: wgpu::ComputePipeline,
    adapter: String,
    /// The device's limit on one storage binding (and on one buffer), in bytes.
    max_binding: u64,
    /// The first error wgpu reported outside a call's return value (validation, out of memory,
    /// device lost), taken by the next product.
    failure: Arc<Mutex<Option<String>>>,
}

impl Gpu {
    /// Opens the best adapter: natively a discrete GPU before an integrated one, then any other
    /// hardware; in the browser the one WebGPU offers (high-performance preference). A software
    /// or fallback adapter (lavapipe, SwiftShader, WARP) is taken only when `allow_software`.
    pub async fn open(allow_software: bool) -> Result<Gpu, String> {
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
        let (device, queue) = best
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("headprint"),
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
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("products.wgsl"),
            source: wgpu::ShaderSource::Wgsl(KERNELS.into()),
        });
        let pipeline = |entry: &str| {
            device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
                label: Some(entry),
                layout: None,
                module: &module,
                entry_point: Some(entry),
                compilation_options: Default::default(),
                cache: None,
            })
        };
        let (gemm, syrk) = (pipeline("gemm"), pipeline("syrk"));
        if let Some(error) = invalid.pop().await {
            return Err(format!("{name}: the kernels do not compile: {}", one_line(&error.to_string())));
        }
        let gpu = Gpu {
            adapter: name,
            max_binding: limits.max_storage_buffer_binding_size.min(limits.max_buffer_size),
            device,
            queue,
            gemm,
            syrk,
            failure,
        };
        gpu.check()?;
        Ok(gpu)
    }

    /// The adapter's name and driver API.
    pub fn adapter(&self) -> &str {
        &self.adapter
    }

    /// Rows of an `n`-column block that fit one storage binding. The Grams ask for at most one
    /// segment's 4096 rows at a time (`analysis::circuits::SEGMENT_ROWS`), which also bounds a
    /// dispatch's time on a slow adapter and, in the browser, the rows held in wasm memory
    /// (4096 f32 rows take less than the CPU block the worker's memory estimate counts).
    pub fn block_rows(&self, n: usize) -> usize {
        let per_row = 4 * n.max(1) as u64;
        ((self.max_binding / per_row) as usize).max(1)
    }

    /// `A^T B` (A rows x m, B rows x n), or `A^T A` when `b` is None, in f32 on the GPU and
    /// returned as f64.
    pub async fn product(&self, a: &DMatrix<f32>, b: Option<&DMatrix<f32>>) -> Result<DMatrix<f64>, String> {
        let (rows, m) = a.shape();
        if let Some(b) = b
            && b.nrows() != rows
        {
            return Err(format!("blocks of {rows} and {} rows", b.nrows()));
        }
        let a_operand = Operand { value: a.as_slice(), rest: None, transposed: false };
        let b_operand = b.map(|b| Operand { value: b.as_slice(), rest: None, transposed: false });
        let n = b.map_or(m, |b| b.ncols());
        let mut c = self.dispatch(rows, m, n, a_operand, b_operand).await?;
        if b.is_none() {
            // The kernel wrote the tiles on and above the diagonal; the rest mirrors them.
            c.fill_lower_triangle_with_upper_triangle();
        }
        Ok(c)
    }

    /// `A X` of f64 matrices (A m x k, X k x n), each entry held as two f32 parts (products.wgsl
    /// says how, and why this keeps about 2^-36 of every term). X's columns go a range at a
    /// time, as many as the binding limit and [`WIDE_COLUMNS`] allow; A must fit one binding.
    pub async fn multiply(&self, a: &DMatrix<f64>, x: &DMatrix<f64>) -> Result<DMatrix<f64>, String> {
        let (m, k) = a.shape();
        if x.nrows() != k {
            return Err(format!("{m} x {k} times {} x {}", x.nrows(), x.ncols()));
        }
        let (a_value, a_rest) = split(a.as_slice());
        let a_operand = Operand { value: &a_value, rest: Some(&a_rest), transposed: true };
        let per_column = 4 * k.max(m).max(1) as u64;
        let columns = ((self.max_binding / per_column) as usize).clamp(1, WIDE_COLUMNS);
        let mut c = DMatrix::zeros(m, x.ncols());
        for start in (0..x.ncols()).step_by(columns) {
            let width = columns.min(x.ncols() - start);
            let (x_value, x_rest) = split(&x.as_slice()[start * k..(start + width) * k]);
            let x_operand = Operand { value: &x_value, rest: Some(&x_rest), transposed: false };
            let part = self.dispatch(k, m, width, a_operand, Some(x_operand)).await?;
            c.columns_mut(start, width).copy_from(&part);
        }
        Ok(c)
    }

    /// `A^T B` (A `rows` x m, B `rows` x n; `A^T A` when `b` is None, only its upper tiles
    /// written) by one dispatch, returned as f64.
    async fn dispatch(
        &self,
        rows: usize,
        m: usize,
        n: usize,
        a: Operand<'_>,
        b: Option<Operand<'_>>,
    ) -> Result<DMatrix<f64>, String> {
        if rows == 0 || m == 0 || n == 0 {
            return Ok(DMatrix::zeros(m, n));
        }
        for (what, bytes) in [("a block", 4 * (rows * m.max(n)) as u64), ("the result", 4 * (m * n) as u64)] {
            if bytes > self.max_binding {
                return Err(format!(
                    "{what} needs {bytes} bytes, over the adapter's {}-byte binding limit",
                    self.max_binding
                ));
            }
        }
        let tiles = |count: usize| count.div_ceil(TILE) as u32;
        let max_tiles = self.device.limits().max_compute_workgroups_per_dimension;
        if tiles(m) > max_tiles || tiles(n) > max_tiles {
            return Err(format!("{m} x {n} needs more than {max_tiles} workgroups per dimension"));
        }

        // Everything from the first buffer to the submission is inside these scopes, so a
        // validation error or an allocation the device refuses is this product's error.
        let out_of_memory = self.device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
        let invalid = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let storage = |label: &str, data: &[f32]| {
            self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytemuck::cast_slice(data),
                usage: wgpu::BufferUsages::STORAGE,
            })
        };
        // A product of f32 inputs binds a one-entry placeholder for the rests, never read.
        let placeholder = [0f32];
        let a_buffer = storage("a", a.value);
        let a_rest = storage("a rest", a.rest.unwrap_or(&placeholder));
        let b_buffers = b.map(|b| (storage("b", b.value), storage("b rest", b.rest.unwrap_or(&placeholder))));
        let size = (4 * m * n) as u64;
        let output = |label: &str| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            })
        };
        let (high, low) = (output("c high"), output("c low"));
        let read_buffer = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("read back"),
            size: 2 * size,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        let wide = a.rest.is_some() as u32;
        let shape = [rows as u32, m as u32, n as u32, wide, a.transposed as u32, 0, 0, 0];
        let shape_buffer = self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("shape"),
            contents: bytemuck::cast_slice(&shape),
            usage: wgpu::BufferUsages::UNIFORM,
        });
        let zero = self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some("zero"),
            contents: bytemuck::cast_slice(&[0u32]),
            usage: wgpu::BufferUsages::STORAGE,
        });
        let pipeline = if b.is_some() { &self.gemm } else { &self.syrk };
        let (b_buffer, b_rest) = match &b_buffers {
            Some((value, rest)) => (value, rest),
            None => (&a_buffer, &a_rest),
        };
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: a_buffer.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 1, resource: b_buffer.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 2, resource: high.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: low.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: shape_buffer.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 5, resource: zero.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 6, resource: a_rest.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 7, resource: b_rest.as_entire_binding() },
            ],
        });
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(tiles(m), tiles(n), 1);
        }
        encoder.copy_buffer_to_buffer(&high, 0, &read_buffer, 0, size);
        encoder.copy_buffer_to_buffer(&low, 0, &read_buffer, size, size);
        self.queue.submit([encoder.finish()]);

        if let Some(error) = invalid.pop().await {
            return Err(format!("{}: {}", self.adapter, one_line(&error.to_string())));
        }
        if let Some(error) = out_of_memory.pop().await {
            return Err(format!("{}: {}", self.adapter, one_line(&error.to_string())));
        }

        let mapped = Arc::new(Mutex::new(Mapping::default()));
        let done = mapped.clone();
        read_buffer.map_async(wgpu::MapMode::Read, .., move |result| {
            let mut slot = done.lock().unwrap_or_else(|e| e.into_inner());
            slot.result = Some(result);
            if let Some(waker) = slot.waker.take() {
                waker.wake();
            }
        });
        // Natively this waits for the device (and runs the callback); the browser's device
        // needs no polling and the callback comes from its event loop.
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| format!("waiting for the GPU: {e}"))?;
        let mapping = std::future::poll_fn(|context| {
            let mut slot = mapped.lock().unwrap_or_else(|e| e.into_inner());
            match slot.result.take() {
                Some(result) => Poll::Ready(result),
                None => {
                    slot.waker = Some(context.waker().clone());
                    Poll::Pending
                }
            }
        })
        .await;
        self.check()?;
        mapping.map_err(|e| format!("reading the result back: {e}"))?;
        let view = read_buffer.get_mapped_range(..).map_err(|e| format!("reading the result back: {e}"))?;
        let values: &[f32] = bytemuck::cast_slice(&view);
        let (high, low) = values.split_at(m * n);
        let c = DMatrix::from_fn(m, n, |i, j| high[j * m + i] as f64 + low[j * m + i] as f64);
        drop(view);
        read_buffer.unmap();
        Ok(c)
    }

    /// The first failure wgpu reported since the last check, as an error.
    fn check(&self) -> Result<(), String> {
        match self.failure.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(reason) => Err(format!("{}: {reason}", self.adapter)),
            None => Ok(()),
        }
    }
}

/// One input of a dispatch: f32 values, column-major (`rows` x its columns, or, `transposed`,
/// its columns x `rows`), and for an f64 input what rounding to f32 left of each value.
#[derive(Clone, Copy)]
struct Operand<'a> {
    value: &'a [f32],
    rest: Option<&'a [f32]>,
    transposed: bool,
}

/// f64 values as two f32 parts: each rounded to f32, and what that left (exact to 2^-48).
fn split(values: &[f64]) -> (Vec<f32>, Vec<f32>) {
    let value: Vec<f32> = values.iter().map(|&v| v as f32).collect();
    let rest = values.iter().zip(&value).map(|(&v, &high)| (v - high as f64) as f32).collect();
    (value, rest)
}

/// A read-back's outcome, and the task waiting for it.
#[derive(Default)]
struct Mapping {
    result: Option<Result<(), wgpu::BufferAsyncError>>,
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
    instance.request_adapter(&options).await.map_err(|_| match web::has_webgpu() {
        false => "this browser offers no WebGPU here".to_string(),
        true => "WebGPU offers no adapter here: it may be switched off, or the GPU blocked".to_string(),
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
        "" => web::adapter_description().await.unwrap_or_else(|| "unnamed adapter".into()),
        name => name.to_string(),
    };
    format!("{name} (WebGPU)")
}

/// The few browser calls wgpu does not make for us, on the worker's or window's `navigator.gpu`.
#[cfg(target_arch = "wasm32")]
mod web {
    use wasm_bindgen::{JsCast, JsValue};

    fn get(object: &JsValue, key: &str) -> JsValue {
        js_sys::Reflect::get(object, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
    }

    fn gpu() -> JsValue {
        get(&get(&js_sys::global(), "navigator"), "gpu")
    }

    pub fn has_webgpu() -> bool {
        !gpu().is_undefined()
    }

    /// "vendor architecture [description]" of the adapter `requestAdapter` gives (the one wgpu
    /// was given with the same options), or None.
    pub async fn adapter_description() -> Option<String> {
        let gpu = gpu();
        let request = get(&gpu, "requestAdapter").dyn_into::<js_sys::Function>().ok()?;
        let options = js_sys::Object::new();
        js_sys::Reflect::set(&options, &"powerPreference".into(), &"high-performance".into()).ok()?;
        let promise = request.call1(&gpu, &options).ok()?.dyn_into::<js_sys::Promise>().ok()?;
        let adapter = wasm_bindgen_futures::JsFuture::from(promise).await.ok()?;
        let info = get(&adapter, "info");
        let parts: Vec<String> = ["vendor", "architecture", "description"]
            .iter()
            .filter_map(|key| get(&info, key).as_string())
            .map(|part| part.trim().to_string())
            .filter(|part| !part.is_empty())
            .collect();
        (!parts.is_empty()).then(|| parts.join(" "))
    }
}
