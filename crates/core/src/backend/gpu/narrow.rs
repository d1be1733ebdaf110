//! Weights cross to the device in the narrowest of bf16, f16 and f32 that holds every one of
//! their values exactly, and are widened to f32 there (narrow.wgsl). A bf16 or f16 file's
//! weights are f32 in memory, widened exactly from their two bytes, so they go over as the
//! file's own bytes: half of what f32 would take, for the same f32 values on the device.
//!
//! Which format is decided from the values, not from the file's dtype: the weights reach the
//! backend as f32 through every family's own layout (NeoX's fused QKV split into Q, K and V,
//! for one), and a value that survives the round trip through 16 bits loses nothing.

use std::sync::atomic::{AtomicBool, Ordering};

use super::buffers::{Role, first_f32s};
use super::split::SMALLEST_CHUNK;
use super::{Gpu, compute_pipeline};
use crate::parallel::each_chunk;

const KERNELS: &str = include_str!("narrow.wgsl");
/// narrow.wgsl's workgroup size and the groups a dispatch's x holds.
const GROUP: usize = 64;
const SPAN: usize = 65535;

/// narrow.wgsl's bindings.
mod binding {
    /// The 16-bit values, two to a u32.
    pub const PACKED: u32 = 0;
    /// The f32 values they widen into.
    pub const VALUES: u32 = 1;
}

/// The two widening kernels.
pub(super) struct Widen {
    bf16: wgpu::ComputePipeline,
    f16: wgpu::ComputePipeline,
}

impl Widen {
    /// Compiled inside the caller's error scope.
    pub(super) fn compile(device: &wgpu::Device) -> Widen {
        let module = device.create_shader_module(wgpu::ShaderModuleDescriptor {
            label: Some("narrow.wgsl"),
            source: wgpu::ShaderSource::Wgsl(KERNELS.into()),
        });
        Widen {
            bf16: compute_pipeline(device, &module, "widen_bf16"),
            f16: compute_pipeline(device, &module, "widen_f16"),
        }
    }
}

/// Values packed two to a u32, the first in the low half.
#[derive(Debug, PartialEq)]
enum Narrow {
    Bf16(Vec<u32>),
    F16(Vec<u32>),
    F32,
}

impl Narrow {
    fn of(values: &[f32]) -> Narrow {
        if let Some(words) = pack(values, bf16) {
            return Narrow::Bf16(words);
        }
        if let Some(words) = pack(values, f16) {
            return Narrow::F16(words);
        }
        Narrow::F32
    }
}

/// `v` as bf16, if that is exact.
fn bf16(v: f32) -> Option<u16> {
    let bits = v.to_bits();
    (bits & 0xffff == 0).then_some((bits >> 16) as u16)
}

/// `v` as f16, if that is exact.
fn f16(v: f32) -> Option<u16> {
    let half = half::f16::from_f32(v);
    (half.to_f32().to_bits() == v.to_bits()).then_some(half.to_bits())
}

/// Every value narrowed and packed, or None when one does not narrow exactly.
fn pack(values: &[f32], narrow: impl Fn(f32) -> Option<u16> + Sync + Send) -> Option<Vec<u32>> {
    // Most f32 weights fail on their first value: no allocation for them.
    if values.first().is_some_and(|&v| narrow(v).is_none()) {
        return None;
    }
    let mut words = vec![0u32; values.len().div_ceil(2)];
    let exact = AtomicBool::new(true);
    each_chunk(&mut words, SMALLEST_CHUNK, |start, chunk| {
        for (i, word) in chunk.iter_mut().enumerate() {
            if !exact.load(Ordering::Relaxed) {
                return;
            }
            let at = 2 * (start + i);
            let low = narrow(values[at]);
            let high = values.get(at + 1).map_or(Some(0), |&v| narrow(v));
            match (low, high) {
                (Some(low), Some(high)) => *word = low as u32 | (high as u32) << 16,
                _ => exact.store(false, Ordering::Relaxed),
            }
        }
    });
    exact.into_inner().then_some(words)
}

impl Gpu {
    /// f32 values into the start of `buffer` (a storage buffer with room for them), crossing
    /// in the narrowest exact format and widened on the device. The widening is submitted at
    /// once, so the queue orders it before every later write and product.
    pub(super) fn write_values(&self, buffer: &wgpu::Buffer, values: &[f32]) {
        if values.is_empty() {
            return;
        }
        let (words, pipeline) = match Narrow::of(values) {
            Narrow::F32 => return self.write(buffer, values),
            Narrow::Bf16(words) => (words, &self.widen.bf16),
            Narrow::F16(words) => (words, &self.widen.f16),
        };
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
        let packed = self.scratch(Role::Packed, 4 * words.len() as u64, usage);
        self.write(&packed, &words);
        let bind_group = self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &pipeline.get_bind_group_layout(0),
            entries: &[
                wgpu::BindGroupEntry { binding: binding::PACKED, resource: first_f32s(&packed, words.len()) },
                wgpu::BindGroupEntry { binding: binding::VALUES, resource: first_f32s(buffer, values.len()) },
            ],
        });
        let groups = words.len().div_ceil(GROUP);
        let mut encoder = self.device.create_command_encoder(&wgpu::CommandEncoderDescriptor { label: None });
        {
            let mut pass = encoder.begin_compute_pass(&wgpu::ComputePassDescriptor::default());
            pass.set_pipeline(pipeline);
            pass.set_bind_group(0, &bind_group, &[]);
            pass.dispatch_workgroups(groups.min(SPAN) as u32, groups.div_ceil(SPAN) as u32, 1);
        }
        self.queue.submit([encoder.finish()]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_narrow_only_where_every_one_is_exact() {
        // bf16's largest finite value and a subnormal among ordinary ones.
        let bf16_values = [1.0f32, -0.0, f32::from_bits(0x7f7f_0000), f32::from_bits(0x0001_0000), 0.15625];
        let Narrow::Bf16(words) = Narrow::of(&bf16_values) else { panic!("bf16 values not packed as bf16") };
        assert_eq!(words.len(), 3);
        assert_eq!(words, [0x3f80 | 0x8000 << 16, 0x7f7f | 0x0001 << 16, 0x3e20], "the odd value's pair padded with 0");
        // 2^-24 (f16's smallest subnormal) and 65504 (its largest) with a value bf16 cannot hold.
        let f16_values = [2f32.powi(-24), 65504.0, 1.0 + 2f32.powi(-10), -3.0];
        let Narrow::F16(words) = Narrow::of(&f16_values) else { panic!("f16 values not packed as f16") };
        assert_eq!(words, [0x0001 | 0x7bff << 16, 0x3c01 | 0xc200 << 16]);
        // One value that neither holds sends all of them as f32.
        assert_eq!(Narrow::of(&[1.0, 1.0 + 2f32.powi(-20)]), Narrow::F32);
        assert_eq!(Narrow::of(&[0.1f32]), Narrow::F32);
        assert_eq!(Narrow::of(&[]), Narrow::Bf16(Vec::new()));
    }
}
