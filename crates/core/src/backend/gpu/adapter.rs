//! Opening a GPU: the adapter chosen (natively the best of all, in the browser the one WebGPU
//! offers), its name as the output records it, the device with the adapter's own binding
//! limits, and every kernel family's pipelines compiled.

use std::sync::Mutex;
use std::sync::OnceLock;
use std::sync::atomic::AtomicU64;

use super::failure::{self, one_line};
use super::products::{self, ProductKernels};
use super::{Arithmetic, Gpu, narrow};
use crate::{Error, Result};

impl Gpu {
    /// Opens the best adapter: natively a discrete GPU before an integrated one, then any other
    /// hardware; in the browser the one WebGPU offers (high-performance preference). A software
    /// or fallback adapter (lavapipe, SwiftShader, WARP) is taken only when `allow_software`.
    /// Its products run in native f64 where the adapter offers it, else as f32 pairs.
    pub async fn open(allow_software: bool) -> Result<Gpu> {
        Self::open_preferring(allow_software, Arithmetic::F64).await
    }

    /// [`Gpu::open`], with native f64 only where `preferred` asks for it (tests and benchmarks
    /// compare the two kernels on one adapter).
    pub async fn open_preferring(allow_software: bool, preferred: Arithmetic) -> Result<Gpu> {
        // SAFETY: the project's own kernels, with every runtime check on.
        unsafe { Self::open_kernels(allow_software, None, preferred, wgpu::ShaderRuntimeChecks::checked()) }.await
    }

    /// # Safety
    /// As [`Gpu::open_with`]'s, for `kernels` given.
    pub(super) async unsafe fn open_kernels(
        allow_software: bool,
        kernels: Option<&str>,
        preferred: Arithmetic,
        checks: wgpu::ShaderRuntimeChecks,
    ) -> Result<Gpu> {
        let instance = wgpu::Instance::new(wgpu::InstanceDescriptor::new_without_display_handle_from_env());
        let best = best_adapter(&instance).await?;
        let info = best.get_info();
        let name = adapter_name(&info).await;
        if info.device_type == wgpu::DeviceType::Cpu && !allow_software {
            return Err(Error::Gpu(format!(
                "only a software GPU adapter ({name}), which auto skips: choose the GPU backend to use it"
            )));
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
        let kernels = kernels.unwrap_or(products::source(arithmetic));
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
            .map_err(|e| Error::Gpu(format!("{name}: cannot open the device: {e}")))?;
        let failure = failure::watch(&device);

        // The browser compiles the kernels asynchronously: a failure shows in this scope.
        let invalid = device.push_error_scope(wgpu::ErrorFilter::Validation);
        // SAFETY: checks other than `checked()` come only through `open_with`'s own contract.
        let products = unsafe { ProductKernels::compile(&device, kernels, checks) };
        let widen = narrow::Widen::compile(&device);
        if let Some(error) = invalid.pop().await {
            return Err(Error::Gpu(format!("{name}: the kernels do not compile: {}", one_line(&error.to_string()))));
        }
        let gpu = Gpu {
            adapter: name,
            arithmetic,
            max_binding: limits.max_storage_buffer_binding_size.min(limits.max_buffer_size),
            device,
            queue,
            products,
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
}

/// Natively: the best of all adapters, discrete GPUs first, software ones last.
#[cfg(not(target_arch = "wasm32"))]
async fn best_adapter(instance: &wgpu::Instance) -> Result<wgpu::Adapter> {
    let adapters = instance.enumerate_adapters(wgpu::Backends::all()).await;
    let rank = |adapter: &wgpu::Adapter| match adapter.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Other => 3,
        wgpu::DeviceType::Cpu => 4,
    };
    adapters.into_iter().min_by_key(rank).ok_or_else(|| {
        Error::Gpu("no GPU adapter found (on Linux without a GPU, install mesa-vulkan-drivers for lavapipe)".into())
    })
}

/// In the browser: the adapter WebGPU offers (it offers one at a time).
#[cfg(target_arch = "wasm32")]
async fn best_adapter(instance: &wgpu::Instance) -> Result<wgpu::Adapter> {
    let options =
        wgpu::RequestAdapterOptions { power_preference: wgpu::PowerPreference::HighPerformance, ..Default::default() };
    // wgpu's message lists every native API it was built without; the reader needs less.
    instance.request_adapter(&options).await.map_err(|_| {
        Error::Gpu(match BROWSER_GPU.get().is_some_and(|gpu| !(gpu.has_webgpu)()) {
            true => "this browser offers no WebGPU here".to_string(),
            false => "WebGPU offers no adapter here: it may be switched off, or the GPU blocked".to_string(),
        })
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
