//! The GPU backend: `A^T B` and `A^T A` of row blocks by the WGSL kernels in products.wgsl,
//! through wgpu's native APIs (Vulkan, Metal, DX12). Each product is one dispatch over a whole
//! block (as many rows as a storage binding holds); its result comes back as two f32 parts
//! (see products.wgsl for why), added in f64, and the caller sums the blocks in f64.
//!
//! Nothing here panics on a GPU failure: wgpu's uncaptured errors and device loss are caught
//! and returned as the product's error, which the caller answers by falling back to the CPU.

use std::sync::{Arc, Mutex};

use nalgebra::DMatrix;
use wgpu::util::DeviceExt;

const KERNELS: &str = include_str!("products.wgsl");
/// Output tile of one workgroup (TILE in products.wgsl).
const TILE: usize = 64;
/// Most rows per block even when a binding could hold more: keeps one dispatch (and the
/// time the GPU is busy without a break) to seconds on a slow adapter.
const MAX_BLOCK_ROWS: usize = 32768;

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
    /// Opens the best adapter: a discrete GPU before an integrated one, then any other
    /// hardware; a software adapter (lavapipe, SwiftShader, WARP) only when `allow_software`.
    pub fn open(allow_software: bool) -> Result<Gpu, String> {
        pollster::block_on(Self::open_async(allow_software))
    }

    async fn open_async(allow_software: bool) -> Result<Gpu, String> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let adapters = instance.enumerate_adapters(wgpu::Backends::all()).await;
        if adapters.is_empty() {
            return Err(
                "no GPU adapter found (on Linux without a GPU, install mesa-vulkan-drivers for lavapipe)".into()
            );
        }
        let rank = |adapter: &wgpu::Adapter| match adapter.get_info().device_type {
            wgpu::DeviceType::DiscreteGpu => 0,
            wgpu::DeviceType::IntegratedGpu => 1,
            wgpu::DeviceType::VirtualGpu => 2,
            wgpu::DeviceType::Other => 3,
            wgpu::DeviceType::Cpu => 4,
        };
        let best = adapters.into_iter().min_by_key(rank).expect("not empty");
        let info = best.get_info();
        if info.device_type == wgpu::DeviceType::Cpu && !allow_software {
            return Err(format!("only a software GPU adapter ({}); --backend gpu would use it", info.name));
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
            .map_err(|e| format!("{}: cannot open the device: {e}", info.name))?;
        let failure = Arc::new(Mutex::new(None));
        let record = failure.clone();
        device.on_uncaptured_error(Arc::new(move |error: wgpu::Error| remember(&record, error.to_string())));
        let record = failure.clone();
        device.set_device_lost_callback(move |_, message| remember(&record, format!("device lost: {message}")));

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
        let gpu = Gpu {
            adapter: format!("{} ({:?})", info.name, info.backend),
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

    /// Rows of an `n`-column block that fit one storage binding.
    pub fn block_rows(&self, n: usize) -> usize {
        let per_row = 4 * n.max(1) as u64;
        ((self.max_binding / per_row) as usize).clamp(1, MAX_BLOCK_ROWS)
    }

    /// `A^T B` (A rows x m, B rows x n), or `A^T A` when `b` is None, in f32 on the GPU and
    /// returned as f64.
    pub fn product(&self, a: &DMatrix<f32>, b: Option<&DMatrix<f32>>) -> Result<DMatrix<f64>, String> {
        let (rows, m) = a.shape();
        let n = b.map_or(m, |b| b.ncols());
        if let Some(b) = b
            && b.nrows() != rows
        {
            return Err(format!("blocks of {rows} and {} rows", b.nrows()));
        }
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

        let storage = |label: &str, data: &[f32]| {
            self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytemuck::cast_slice(data),
                usage: wgpu::BufferUsages::STORAGE,
            })
        };
        let a_buffer = storage("a", a.as_slice());
        let b_buffer = b.map(|b| storage("b", b.as_slice()));
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
        let shape = [rows as u32, m as u32, n as u32, 0];
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
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: 0, resource: a_buffer.as_entire_binding() },
                wgpu::BindGroupEntry {
                    binding: 1,
                    resource: b_buffer.as_ref().unwrap_or(&a_buffer).as_entire_binding(),
                },
                wgpu::BindGroupEntry { binding: 2, resource: high.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 3, resource: low.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 4, resource: shape_buffer.as_entire_binding() },
                wgpu::BindGroupEntry { binding: 5, resource: zero.as_entire_binding() },
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

        let mapped = Arc::new(Mutex::new(None));
        let done = mapped.clone();
        read_buffer.map_async(wgpu::MapMode::Read, .., move |result| {
            *done.lock().unwrap_or_else(|e| e.into_inner()) = Some(result);
        });
        self.device.poll(wgpu::PollType::wait_indefinitely()).map_err(|e| format!("waiting for the GPU: {e}"))?;
        self.check()?;
        match mapped.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(Ok(())) => {}
            Some(Err(e)) => return Err(format!("reading the result back: {e}")),
            None => return Err("the result was never mapped".into()),
        }
        let view = read_buffer.get_mapped_range(..).map_err(|e| format!("reading the result back: {e}"))?;
        let values: &[f32] = bytemuck::cast_slice(&view);
        let (high, low) = values.split_at(m * n);
        let mut c = DMatrix::from_fn(m, n, |i, j| high[j * m + i] as f64 + low[j * m + i] as f64);
        drop(view);
        read_buffer.unmap();
        if b.is_none() {
            // The kernel wrote the tiles on and above the diagonal; the rest mirrors them.
            c.fill_lower_triangle_with_upper_triangle();
        }
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

fn remember(slot: &Mutex<Option<String>>, reason: String) {
    let mut slot = slot.lock().unwrap_or_else(|e| e.into_inner());
    // Keep the first: later errors usually follow from it. One line, as the CLI prints it.
    if slot.is_none() {
        *slot = Some(reason.lines().map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join(" "));
    }
}
