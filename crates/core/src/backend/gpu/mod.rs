//! The GPU backend: `A^T B` and `A^T A` of row blocks and `A X` of f64 matrices by the WGSL
//! kernels in products.wgsl, through wgpu: natively on Vulkan, Metal or DX12, in the browser on
//! WebGPU (wgpu's `webgpu` feature; the same kernels, compiled by the browser). Results are two
//! f32 parts (see products.wgsl for why), added in f64 on the way back.
//!
//! Where the time goes decides the shape of this folder. The kernel itself is a small part of a
//! product that allocates its buffers, reads its result back and widens it (examples/gpu_kernels.rs
//! times both; docs/benchmarks.md#gpu). So:
//! - the Grams' blocks are summed on the device ([`Accumulator`], sums.rs) and read back once;
//! - a left operand used again (a Gram's factor, for every layer) stays on the device, uploaded
//!   once (the operand cache in buffers.rs);
//! - a layer's products stay on the device ([`DeviceMatrix`], kept.rs) and only the small
//!   products of their column blocks, which the heads' spectra read, come back, all in one read
//!   ([`Gpu::column_products`]): the large products would be as many bytes again as went over;
//! - input, output and read-back buffers are kept and reused, not made per product (buffers.rs);
//! - a block's product runs while the caller reads the next block from the file: only the
//!   block before is waited for.
//!
//! One concern a file: opening (adapter.rs), failures (failure.rs), buffers (buffers.rs), f64
//! values as two f32 parts (split.rs), reading back (readback.rs), and each kernel family with
//! its WGSL beside it: the products (products.rs), weights widened on the device (narrow.rs) and
//! the forward pass (forward.rs). Each kernel's settings are a `#[repr(C)]` struct written to
//! the device as it is and mirrored field by field by the WGSL struct of the same name; each
//! family's bindings are named in its `binding` module.
//!
//! Nothing here panics on a GPU failure: every error is an [`Error::Gpu`](crate::Error::Gpu),
//! which the caller answers by falling back to the CPU.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

mod adapter;
mod bench;
mod buffers;
mod failure;
mod forward;
mod kept;
mod narrow;
mod products;
mod readback;
mod split;
mod sums;

#[cfg(target_arch = "wasm32")]
pub use adapter::{AdapterDescription, BrowserGpu, set_browser_gpu};
pub use forward::Pieces;
pub use kept::DeviceMatrix;
pub use sums::Accumulator;

pub use super::Arithmetic;

pub struct Gpu {
    device: wgpu::Device,
    queue: wgpu::Queue,
    products: products::ProductKernels,
    /// Widens weights that crossed in 16 bits ([`Gpu::write_values`]).
    widen: narrow::Widen,
    /// The forward pass's kernels, compiled when first used.
    forward: OnceLock<forward::ForwardKernels>,
    adapter: String,
    arithmetic: Arithmetic,
    /// The device's limit on one storage binding (and on one buffer), in bytes.
    max_binding: u64,
    failure: failure::Failure,
    /// Buffers kept between products, by role, each as large as the largest use so far.
    scratch: Mutex<HashMap<buffers::Role, wgpu::Buffer>>,
    /// Left operands of [`Gpu::multiply`] on the device, most recently used last.
    resident: Mutex<Vec<buffers::Resident>>,
    /// Bytes written to the device and read back from it since it opened.
    to_device: AtomicU64,
    from_device: AtomicU64,
}

impl Gpu {
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

    /// Rows of an `n`-column block that fit one storage binding. The Grams ask for at most one
    /// segment's 4096 rows at a time (`analysis::circuits::SEGMENT_ROWS`), which also bounds a
    /// dispatch's time on a slow adapter and, in the browser, the rows held in wasm memory
    /// (4096 f32 rows, with their 16-bit copy on the way up, take less than the CPU block the
    /// worker's memory estimate counts).
    pub fn block_rows(&self, n: usize) -> usize {
        let per_row = 4 * n.max(1) as u64;
        ((self.max_binding / per_row) as usize).max(1)
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
