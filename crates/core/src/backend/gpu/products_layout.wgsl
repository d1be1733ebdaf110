// What both product kernels share (products.wgsl, the f32-pair arithmetic every adapter runs,
// and products_f64.wgsl, native f64 where the adapter offers it): the settings uniform, the
// bindings, the tile sizes and the two entry points. The host prepends this file to either
// kernel, which defines `product_tile` and `fold_column`, so one bind group layout and one
// dispatch serve both.

// One dispatch's settings, field by field as products.rs's `ProductSettings` writes them. `gemm`
// and `syrk` read the product's; `fold` reads k, n and its own two.
struct ProductSettings {
    k: u32,
    m: u32,
    n: u32,
    // 1 where the input carries rests (its f64 values' second f32 parts, in `a_rest`, `b_rest`).
    a_wide: u32,
    b_wide: u32,
    // 1: A is stored as its transpose, column-major M x K (A[k, i] at a[k * M + i]), as an
    // nalgebra matrix F is when the product wanted is F B.
    a_transposed: u32,
    accumulate: u32,
    // A batch of products, one per workgroup layer z (`gemm` with A not transposed): product z
    // reads A's M columns from column a_first + ((z + a_skip) / a_group) * M of `a`, B's N
    // columns from b_first + ((z + b_skip) / b_group) * N of `b`, and writes its M x N result at
    // c_first + z * M * N. So the heads of a layer, several sharing one key/value head (a_group
    // of them), are one dispatch. A single product has every offset 0 and both groups 1.
    a_first: u32,
    a_skip: u32,
    a_group: u32,
    b_first: u32,
    b_skip: u32,
    b_group: u32,
    c_first: u32,
    // The `fold` kernel's norm: 1 centres each column (LayerNorm); `fold_centre_first` 1
    // centres before scaling (the transposed fold) instead of after.
    fold_centres: u32,
    fold_centre_first: u32,
}

/// Where product `z` of a batch reads its A and B (element offsets) and writes its C.
struct Batch {
    a: u32,
    b: u32,
    c: u32,
}

fn batch_offsets(z: u32) -> Batch {
    let a_column = settings.a_first + ((z + settings.a_skip) / settings.a_group) * settings.m;
    let b_column = settings.b_first + ((z + settings.b_skip) / settings.b_group) * settings.n;
    return Batch(a_column * settings.k, b_column * settings.k, settings.c_first + z * settings.m * settings.n);
}

// The numbers are products.rs's `binding` constants.
@group(0) @binding(0) var<storage, read> a: array<f32>;
@group(0) @binding(1) var<storage, read> b: array<f32>;
@group(0) @binding(2) var<storage, read_write> c_high: array<f32>;
@group(0) @binding(3) var<storage, read_write> c_low: array<f32>;
@group(0) @binding(4) var<uniform> settings: ProductSettings;
// Holds 0, which the shader compiler cannot know (a writable buffer is never folded in).
@group(0) @binding(5) var<storage, read_write> opaque_zero: array<u32>;
@group(0) @binding(6) var<storage, read> a_rest: array<f32>;
@group(0) @binding(7) var<storage, read> b_rest: array<f32>;

const TILE: u32 = 64u;
const STEP: u32 = 16u;
const THREADS: u32 = 256u;

@compute @workgroup_size(16, 16)
fn gemm(@builtin(workgroup_id) tile: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>,
        @builtin(local_invocation_index) index: u32) {
    product_tile(tile, local.xy, index);
}

@compute @workgroup_size(16, 16)
fn syrk(@builtin(workgroup_id) tile: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>,
        @builtin(local_invocation_index) index: u32) {
    // Tiles below the diagonal are the mirror of those above it.
    if (tile.x > tile.y) {
        return;
    }
    product_tile(vec3<u32>(tile.xy, 0u), local.xy, index);
}

// A norm folded into a matrix kept on the device, in place (TransformerLens's `fold_ln`, as
// circuits.rs's `fold_reading` computes it on the host in f64): column j of C, K values as
// stored (f32, in `c_high`), becomes the f64 values
//   w_i * gamma_i - mean_i(w * gamma)       (LayerNorm; RMSNorm: w_i * gamma_i)
//   (w_i - mean_i(w)) * gamma_i             (`settings.fold_centre_first`: the transposed fold)
// as two f32 parts (`c_high`, `c_low`), for the products to read as a wide input. `a` holds the
// norm's weight gamma (K values). So only the weights as stored cross to the device, not the
// folded values' rests. One invocation a column: N columns.
@compute @workgroup_size(64)
fn fold(@builtin(global_invocation_id) id: vec3<u32>) {
    if (id.x < settings.n) {
        fold_column(id.x);
    }
}
