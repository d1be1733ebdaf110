//! The product kernels (products_layout.wgsl with products.wgsl, or with products_f64.wgsl where
//! the adapter offers native f64): `gemm` for `A^T B`, `syrk` for `A^T A` (the upper tiles
//! only), and `fold`, a norm folded into a kept matrix's columns in place. Each dispatch is
//! described by a [`Shape`] and written to the device as a [`ProductSettings`].

use bytemuck::{Pod, Zeroable};

use super::buffers::{Operand, Role, first_f32s};
use super::split::Crossing;
use super::{Arithmetic, Gpu, compute_pipeline};
use crate::model::NormKind;
use crate::{Error, Result};

const KERNELS: &str = concat!(include_str!("products_layout.wgsl"), include_str!("products.wgsl"));
/// The same products in native f64, where the adapter offers it.
const KERNELS_F64: &str = concat!(include_str!("products_layout.wgsl"), include_str!("products_f64.wgsl"));

/// The kernels' source for `arithmetic`.
pub(super) fn source(arithmetic: Arithmetic) -> &'static str {
    match arithmetic {
        Arithmetic::F64 => KERNELS_F64,
        Arithmetic::F32Pairs => KERNELS,
    }
}

/// Output tile of one workgroup (TILE in products_layout.wgsl).
const TILE: usize = 64;
/// Columns one workgroup of the `fold` kernel folds (its workgroup size).
const FOLD_COLUMNS: usize = 64;

/// products_layout.wgsl's bindings.
mod binding {
    /// A's f32 values; for `fold`, the norm's weight.
    pub const A: u32 = 0;
    pub const B: u32 = 1;
    /// The result's two f32 parts; for `fold`, the matrix folded in place.
    pub const C_HIGH: u32 = 2;
    pub const C_LOW: u32 = 3;
    /// The [`ProductSettings`](super::ProductSettings).
    pub const SETTINGS: u32 = 4;
    /// A buffer holding 0 that the shader compiler cannot see through.
    pub const OPAQUE_ZERO: u32 = 5;
    /// What rounding A's (or B's) f64 values to f32 left.
    pub const A_REST: u32 = 6;
    pub const B_REST: u32 = 7;
}

/// One dispatch's settings, as products_layout.wgsl's `ProductSettings` reads them, field by
/// field. `gemm` and `syrk` read the product's fields; `fold` reads `k`, `n` and its own two.
/// A flag is 0 or 1 (WGSL has no boolean a uniform can hold).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, Pod, Zeroable)]
struct ProductSettings {
    k: u32,
    m: u32,
    n: u32,
    a_wide: u32,
    b_wide: u32,
    a_transposed: u32,
    accumulate: u32,
    a_first: u32,
    a_skip: u32,
    a_group: u32,
    b_first: u32,
    b_skip: u32,
    b_group: u32,
    c_first: u32,
    fold_centres: u32,
    fold_centre_first: u32,
}

// A uniform's size is a multiple of 16 bytes.
const _: () = assert!(size_of::<ProductSettings>().is_multiple_of(16));

/// The compiled product kernels.
pub(super) struct ProductKernels {
    gemm: wgpu::ComputePipeline,
    syrk: wgpu::ComputePipeline,
    /// A norm's fold of a kept matrix's columns, in place.
    fold: wgpu::ComputePipeline,
}

impl ProductKernels {
    /// Compiled inside the caller's error scope.
    ///
    /// # Safety
    /// With checks other than `ShaderRuntimeChecks::checked()`, `kernels` must never index
    /// outside their bindings nor loop without end: nothing then stops them.
    pub(super) unsafe fn compile(
        device: &wgpu::Device,
        kernels: &str,
        checks: wgpu::ShaderRuntimeChecks,
    ) -> ProductKernels {
        let descriptor = wgpu::ShaderModuleDescriptor {
            label: Some("products.wgsl"),
            source: wgpu::ShaderSource::Wgsl(kernels.into()),
        };
        // SAFETY: the caller's contract is this function's.
        let module = unsafe { device.create_shader_module_trusted(descriptor, checks) };
        let pipeline = |entry: &str| compute_pipeline(device, &module, entry);
        ProductKernels { gemm: pipeline("gemm"), syrk: pipeline("syrk"), fold: pipeline("fold") }
    }
}

/// One dispatch's shape: `A^T B` with A `rows` x m (stored m x `rows` when `a_transposed`),
/// B `rows` x n; `accumulate` adds to the output; `batch` says where each of its products reads
/// and writes. (Whether an input carries rests is its [`Operand`]'s.)
#[derive(Clone, Copy)]
pub(super) struct Shape {
    pub(super) rows: usize,
    pub(super) m: usize,
    pub(super) n: usize,
    pub(super) a_transposed: bool,
    pub(super) accumulate: bool,
    pub(super) batch: Batch,
}

/// `count` products in one dispatch (products_layout.wgsl's `ProductSettings` says how each
/// finds its columns: product z reads A's columns from `a_first + ((z + a_skip) / a_group) * m`,
/// B's likewise, and writes at `c_first + z * m * n`).
#[derive(Clone, Copy)]
pub(super) struct Batch {
    pub(super) a_first: usize,
    pub(super) a_skip: usize,
    pub(super) a_group: usize,
    pub(super) b_first: usize,
    pub(super) b_skip: usize,
    pub(super) b_group: usize,
    pub(super) c_first: usize,
    pub(super) count: usize,
}

impl Batch {
    /// One product, of the whole bindings.
    pub(super) const ONE: Batch =
        Batch { a_first: 0, a_skip: 0, a_group: 1, b_first: 0, b_skip: 0, b_group: 1, c_first: 0, count: 1 };
}

impl Gpu {
    /// A command encoder holding one dispatch of the product `shape` describes, from `a` and
    /// `b` (ignored by a Gram) into `output`'s two parts.
    pub(super) fn encode(
        &self,
        shape: Shape,
        a: &Operand,
        b: &Operand,
        output: (&wgpu::Buffer, &wgpu::Buffer),
        gram: bool,
    ) -> wgpu::CommandEncoder {
        let batch = shape.batch;
        let settings = ProductSettings {
            k: shape.rows as u32,
            m: shape.m as u32,
            n: shape.n as u32,
            a_wide: a.rest.is_some() as u32,
            b_wide: b.rest.is_some() as u32,
            a_transposed: shape.a_transposed as u32,
            accumulate: shape.accumulate as u32,
            a_first: batch.a_first as u32,
            a_skip: batch.a_skip as u32,
            a_group: batch.a_group as u32,
            b_first: batch.b_first as u32,
            b_skip: batch.b_skip as u32,
            b_group: batch.b_group as u32,
            c_first: batch.c_first as u32,
            fold_centres: 0,
            fold_centre_first: 0,
        };
        let settings = self.settings(settings);
        let zero = self.scratch(Role::Zero, 4, wgpu::BufferUsages::STORAGE);
        let pipeline = if gram { &self.products.syrk } else { &self.products.gemm };
        let output_len = batch.c_first + batch.count * shape.m * shape.n;
        // An input without rests binds its values again in their place (never read).
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                entry(binding::A, first_f32s(&a.value, a.len)),
                entry(binding::B, first_f32s(&b.value, b.len)),
                entry(binding::C_HIGH, first_f32s(output.0, output_len)),
                entry(binding::C_LOW, first_f32s(output.1, output_len)),
                entry(binding::SETTINGS, settings.as_entire_binding()),
                entry(binding::OPAQUE_ZERO, zero.as_entire_binding()),
                entry(binding::A_REST, first_f32s(a.rest.as_ref().unwrap_or(&a.value), a.len)),
                entry(binding::B_REST, first_f32s(b.rest.as_ref().unwrap_or(&b.value), b.len)),
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

    /// The kept settings buffer, holding `settings` once the queue writes it (before the next
    /// submission).
    fn settings(&self, settings: ProductSettings) -> wgpu::Buffer {
        let usage = wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST;
        let buffer = self.scratch(Role::Settings, size_of::<ProductSettings>() as u64, usage);
        self.write(&buffer, &[settings]);
        buffer
    }

    /// Columns of X (`rows` each) written into `high` and `low` as the products read them: the
    /// f32 values and their rests as split on the host or, to be folded, the f32 values as
    /// stored and the norm's weight, folded in place by the `fold` kernel (which writes the
    /// rests). So a folded X costs the bytes of the raw one. `low` is there whenever
    /// [`Crossing::has_rests`] says so.
    pub(super) fn put_columns(
        &self,
        crossing: Crossing,
        rows: usize,
        high: &wgpu::Buffer,
        low: Option<&wgpu::Buffer>,
    ) -> Result<()> {
        match crossing {
            Crossing::Split(value, rest) => {
                self.write_values(high, &value);
                if let (Some(low), Some(rest)) = (low, &rest) {
                    self.write(low, rest);
                }
            }
            Crossing::ToFold(value, fold) => {
                // The caller made room for rests, as `Crossing::has_rests` says a folded X has.
                let Some(low) = low else {
                    return Err(Error::Gpu("a folded matrix without room for its low parts".into()));
                };
                self.write_values(high, &value);
                let weight = fold.norm.weight.as_slice();
                let norm = self.scratch(
                    Role::Norm,
                    4 * weight.len() as u64,
                    wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST,
                );
                self.write(&norm, weight);
                let columns = value.len() / rows.max(1);
                let settings = self.settings(ProductSettings {
                    k: rows as u32,
                    n: columns as u32,
                    fold_centres: (fold.kind == NormKind::LayerNorm) as u32,
                    fold_centre_first: fold.transposed as u32,
                    ..ProductSettings::default()
                });
                let zero = self.scratch(Role::Zero, 4, wgpu::BufferUsages::STORAGE);
                let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
                    label: None,
                    layout: &self.products.fold.get_bind_group_layout(0),
                    entries: &[
                        entry(binding::A, first_f32s(&norm, rows)),
                        entry(binding::C_HIGH, first_f32s(high, value.len())),
                        entry(binding::C_LOW, first_f32s(low, value.len())),
                        entry(binding::SETTINGS, settings.as_entire_binding()),
                        entry(binding::OPAQUE_ZERO, zero.as_entire_binding()),
                    ],
                });
                let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
                {
                    let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
                    pass.set_pipeline(&self.products.fold);
                    pass.set_bind_group(0, &bind_group, &[]);
                    pass.dispatch_workgroups(columns.div_ceil(FOLD_COLUMNS) as u32, 1, 1);
                }
                // Submitted now: the product's dispatch rewrites the settings after it.
                self.queue.submit([encoder.finish()]);
            }
        }
        Ok(())
    }
}

fn entry(binding: u32, resource: wgpu::BindingResource<'_>) -> wgpu::BindGroupEntry<'_> {
    wgpu::BindGroupEntry { binding, resource }
}
