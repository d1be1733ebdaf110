//! How forward.wgsl's kernels are launched: each kernel's settings as a `#[repr(C)]` struct,
//! mirrored field by field by the WGSL struct of the same name and written to the device as it
//! is; the bindings by name; and a [`Dispatch`] of one kernel.
//!
//! A flag is a u32, 0 or 1 (WGSL has no boolean a uniform can hold). A struct's size is a
//! multiple of 16 bytes, as a uniform's must be; the padding is `_pad` here and `pad0`, `pad1`
//! ... in WGSL (a uniform's arrays have 16-byte strides, so they cannot mirror the array).

use bytemuck::{Pod, Zeroable};

/// forward.wgsl's bindings. Each kernel's comment there says what it binds where.
pub(super) mod binding {
    /// The kernel's settings (its `…Settings` struct).
    pub const SETTINGS: u32 = 0;
    pub const X: u32 = 1;
    pub const Y: u32 = 2;
    pub const W: u32 = 3;
    pub const OUT: u32 = 4;
    pub const OUT2: u32 = 5;
    pub const ROWS_OF: u32 = 6;
    pub const SLOPES: u32 = 7;
}

/// `activate`'s nonlinearities (forward.wgsl's constants of the same names).
pub(super) mod activation {
    pub const RELU: u32 = 0;
    pub const GELU_TANH: u32 = 1;
    pub const GELU_ERF: u32 = 2;
    pub const SILU: u32 = 3;
}

/// Where `attend` adds ALiBi's slope times the key's position (forward.wgsl's constants).
pub(super) mod alibi {
    pub const NONE: u32 = 0;
    /// After the scale, as BLOOM adds it.
    pub const AFTER_SCALE: u32 = 1;
    /// Before the scale, as Falcon does.
    pub const BEFORE_SCALE: u32 = 2;
}

/// `gemm`: `out (=|+=) x y (+ bias)`, x `m` x `k`, y `k` x `n`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, Pod, Zeroable)]
pub(super) struct GemmSettings {
    pub m: u32,
    pub n: u32,
    pub k: u32,
    /// Adds the bias, column j's at `bias_first + j`.
    pub add_bias: u32,
    /// Adds to what `out` holds instead of replacing it.
    pub accumulate: u32,
    /// y is stored transposed (n x k).
    pub y_transposed: u32,
    pub bias_first: u32,
    /// Multiplies each entry by `multiplier` (a residual multiplier).
    pub multiply: u32,
    pub multiplier: f32,
    /// Divides each entry by `divisor` (a logits divisor).
    pub divide: u32,
    pub divisor: f32,
    /// Soft-caps each entry by `cap`.
    pub soft_cap: u32,
    pub cap: f32,
    pub _pad: [u32; 3],
}

/// `norm`: each of a row's `parts` parts of `width` normed on its own.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, Pod, Zeroable)]
pub(super) struct NormSettings {
    pub rows: u32,
    pub width: u32,
    pub parts: u32,
    /// Subtracts the mean (LayerNorm; RMSNorm does not).
    pub centre: u32,
    pub add_bias: u32,
    /// Times `multiplier`, added to `out` (a branch's output norm as it joins the residual
    /// stream) instead of replacing it.
    pub join: u32,
    /// Writes each row's scale (only a whole row's).
    pub write_scales: u32,
    pub eps: f32,
    pub multiplier: f32,
    pub _pad: [u32; 3],
}

/// `rotary`: the rotary embedding on the first `2 * half` dimensions of each head.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, Pod, Zeroable)]
pub(super) struct RotarySettings {
    pub rows: u32,
    pub heads: u32,
    pub d_head: u32,
    /// GPT-J's interleaved pairs (2i, 2i + 1) instead of (i, i + half).
    pub interleaved: u32,
    pub half: u32,
    /// Where the table's sines start after its cosines.
    pub sines_at: u32,
    /// Where this embedding's table starts among the tables.
    pub table_first: u32,
    pub _pad: [u32; 1],
}

/// `attend`: each head's causal softmax attention at rows `first_row..first_row + row_count`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, Pod, Zeroable)]
pub(super) struct AttendSettings {
    pub rows: u32,
    pub heads: u32,
    pub d_head: u32,
    pub first_row: u32,
    pub row_count: u32,
    /// Query heads per key/value head.
    pub group: u32,
    pub scale: f32,
    /// The dispatch's patterns' offset among every sequence's.
    pub patterns_first: u32,
    /// A query t sees keys `t - window < key <= t` (0: every key up to t).
    pub window: u32,
    /// Scores become `cap tanh(score / cap)`.
    pub soft_cap: u32,
    pub cap: f32,
    /// One of [`alibi`]'s.
    pub alibi: u32,
}

/// `activate`: the MLP's nonlinearity on `count` entries, in place.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, Pod, Zeroable)]
pub(super) struct ActivateSettings {
    pub count: u32,
    /// `out * act(gate)` instead of `act(out)`.
    pub gated: u32,
    /// One of [`activation`]'s.
    pub activation: u32,
    pub _pad: [u32; 1],
}

/// `weigh`: `out (=|+=) x` times a weight per row.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, Pod, Zeroable)]
pub(super) struct WeighSettings {
    pub rows: u32,
    pub width: u32,
    /// Row i's weight is y's entry `weights_first + i` (an expert's weight of each token);
    /// else every row's is `weight`.
    pub per_row: u32,
    /// Replaces `out` instead of adding to it.
    pub replace: u32,
    pub weights_first: u32,
    pub weight: f32,
    pub _pad: [u32; 2],
}

/// `gather`: `count` cells picked out of the patterns.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, Pod, Zeroable)]
pub(super) struct GatherSettings {
    pub count: u32,
    pub _pad: [u32; 3],
}

/// `highest`: each row's highest entry and its column.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, Pod, Zeroable)]
pub(super) struct HighestSettings {
    pub rows: u32,
    pub columns: u32,
    pub _pad: [u32; 2],
}

// A uniform's size is a multiple of 16 bytes.
const _: () = {
    assert!(size_of::<GemmSettings>().is_multiple_of(16));
    assert!(size_of::<NormSettings>().is_multiple_of(16));
    assert!(size_of::<RotarySettings>().is_multiple_of(16));
    assert!(size_of::<AttendSettings>().is_multiple_of(16));
    assert!(size_of::<ActivateSettings>().is_multiple_of(16));
    assert!(size_of::<WeighSettings>().is_multiple_of(16));
    assert!(size_of::<GatherSettings>().is_multiple_of(16));
    assert!(size_of::<HighestSettings>().is_multiple_of(16));
};

/// A dispatch of `pipeline` over `groups`: its settings' bytes (bound at
/// [`binding::SETTINGS`]) and its buffers, each at its binding.
pub(super) struct Dispatch<'a> {
    pub pipeline: &'a wgpu::ComputePipeline,
    pub settings: Vec<u8>,
    pub buffers: Vec<(u32, &'a wgpu::Buffer)>,
    pub groups: (u32, u32, u32),
}

impl<'a> Dispatch<'a> {
    pub fn new(
        pipeline: &'a wgpu::ComputePipeline,
        settings: &impl Pod,
        buffers: Vec<(u32, &'a wgpu::Buffer)>,
        groups: (u32, u32, u32),
    ) -> Dispatch<'a> {
        Dispatch { pipeline, settings: bytemuck::bytes_of(settings).to_vec(), buffers, groups }
    }
}
