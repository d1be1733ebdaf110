//! Buffers on the device: the pool of buffers kept between products, one per [`Role`], each
//! grown to the largest use so far; a product's inputs written into them ([`Operand`]); and
//! the operand cache, left matrices kept on the device for the next product with the same
//! `Arc` ([`Resident`]). Every byte written is counted here.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use nalgebra::DMatrix;

use super::Gpu;
use super::failure::Scopes;
use super::split::split;
use crate::{Error, Result};

/// Entries of a left matrix split into its two f32 parts at a time on the way up
/// ([`Gpu::upload_left`]).
const LEFT_PIECE: usize = 1 << 22;
/// Left operands of [`Gpu::multiply`] kept on the device: a layer multiplies with the
/// embedding's factor, the unembedding's and the cross Gram.
const RESIDENT: usize = 3;

/// What a buffer kept between products ([`Gpu::scratch`]) holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) enum Role {
    A,
    ARest,
    B,
    BRest,
    CHigh,
    CLow,
    /// A product's settings.
    Settings,
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
    pub(super) fn label(self) -> &'static str {
        match self {
            Role::A => "a",
            Role::ARest => "a rest",
            Role::B => "b",
            Role::BRest => "b rest",
            Role::CHigh => "c high",
            Role::CLow => "c low",
            Role::Settings => "settings",
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
pub(super) enum Side {
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

/// One input on the device: its f32 values (`len` of them), and for an f64 input what rounding
/// to f32 left of each.
pub(super) struct Operand {
    pub(super) value: wgpu::Buffer,
    pub(super) rest: Option<wgpu::Buffer>,
    pub(super) len: usize,
}

/// An f64 matrix on the device as its two f32 parts, and the matrix it was uploaded from (alive
/// and unchanged for as long as this points to it: an `Arc`'s value is immutable while shared,
/// and a `Weak` keeps its allocation from being reused).
pub(super) struct Resident {
    source: Weak<DMatrix<f64>>,
    value: wgpu::Buffer,
    rest: wgpu::Buffer,
}

/// The first `len` f32 values of `buffer` as a binding.
pub(super) fn first_f32s(buffer: &wgpu::Buffer, len: usize) -> wgpu::BindingResource<'_> {
    wgpu::BindingResource::Buffer(wgpu::BufferBinding {
        buffer,
        offset: 0,
        size: std::num::NonZeroU64::new(4 * len.max(1) as u64),
    })
}

impl Gpu {
    /// Writes `data` into `buffer` through the queue, counting the bytes that cross to the device.
    pub(super) fn write<T: bytemuck::Pod>(&self, buffer: &wgpu::Buffer, data: &[T]) {
        self.write_at(buffer, 0, data);
    }

    /// [`Gpu::write`] from byte `offset` of the buffer (a multiple of 4).
    fn write_at<T: bytemuck::Pod>(&self, buffer: &wgpu::Buffer, offset: u64, data: &[T]) {
        let bytes: &[u8] = bytemuck::cast_slice(data);
        self.to_device.fetch_add(bytes.len() as u64, Ordering::Relaxed);
        self.queue.write_buffer(buffer, offset, bytes);
    }

    /// An error when `bytes` exceed one binding.
    pub(super) fn fits(&self, what: &str, bytes: u64) -> Result<()> {
        match bytes > self.max_binding {
            true => Err(Error::Gpu(format!(
                "{what} needs {bytes} bytes, over the adapter's {}-byte binding limit",
                self.max_binding
            ))),
            false => Ok(()),
        }
    }

    /// The kept buffer for `role`, at least `bytes` long (made anew when it is not).
    pub(super) fn scratch(&self, role: Role, bytes: u64, usage: wgpu::BufferUsages) -> wgpu::Buffer {
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
    pub(super) fn upload(&self, side: Side, value: &[f32], rest: Option<&[f32]>) -> Result<Operand> {
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

    /// A's two parts on the device: kept from an earlier product with the same `Arc`, or
    /// uploaded now and kept.
    pub(super) async fn left_on_device(&self, a: &Arc<DMatrix<f64>>) -> Result<(wgpu::Buffer, wgpu::Buffer)> {
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
    fn upload_left(&self, a: &Arc<DMatrix<f64>>) -> Result<Resident> {
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
}
