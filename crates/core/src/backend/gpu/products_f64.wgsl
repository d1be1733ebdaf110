// The products of products.wgsl in native f64, for adapters that offer it (SHADER_F64: Vulkan on
// datacentre and most desktop GPUs; never WebGPU). The bindings, the settings and the entry points
// are products_layout.wgsl's, which the host prepends to either kernel: C = A^T B for a block of rows,
// A K x M (or stored transposed, `settings.a_transposed`), B K x N, C M x N, all column-major;
// `syrk` computes only the tiles on or above the diagonal.
//
// Each input entry is taken in f64: its f32 value, plus for wide inputs (`settings.a_wide` for
// A, `settings.b_wide` for B) the f32 rest that together with it holds the f64 to about 2^-48.
// Products and sums are plain f64, which keeps about 2^-52 of the summed terms, beyond what the
// split f32 kernel keeps (2^-36).
// C is still written as two f32 parts, the f64 sum rounded to f32 and what that rounding left
// (together the sum to about 2^-48), so the host reads both kernels alike and a run of blocks
// accumulates on the device (`settings.accumulate` = 1: added to what C holds, in f64).
//
// Each workgroup owns a 64 x 64 tile of C, each of its 16 x 16 invocations 4 x 4 entries
// (strided by 16); K is walked 16 rows at a time through workgroup memory (two f64 tiles of
// 8 KiB: the default 16 KiB limit).

// STEP x TILE each, [kk * TILE + ii].
var<workgroup> a_tile: array<f64, 1024>;
var<workgroup> b_tile: array<f64, 1024>;

/// Column j of the invocation's block, rows i + 16 r (the vector's lanes r = 0..3), written or,
/// accumulating, added to what C holds.
fn store_column(c: u32, i: u32, j: u32, sum: vec4<f64>) {
    if (j >= settings.n) {
        return;
    }
    for (var r = 0u; r < 4u; r++) {
        if (i + 16u * r < settings.m) {
            let at = c + j * settings.m + i + 16u * r;
            var total = sum[r];
            if (settings.accumulate != 0u) {
                total += f64(c_high[at]) + f64(c_low[at]);
            }
            let high = f32(total);
            c_high[at] = high;
            c_low[at] = f32(total - f64(high));
        }
    }
}

fn product_tile(tile: vec3<u32>, local: vec2<u32>, index: u32) {
    let i0 = tile.x * TILE;
    let j0 = tile.y * TILE;
    let offsets = batch_offsets(tile.z);
    // Used, so the binding belongs to the kernel's layout (its value is never needed).
    _ = opaque_zero[0];
    var sum0 = vec4<f64>();
    var sum1 = vec4<f64>();
    var sum2 = vec4<f64>();
    var sum3 = vec4<f64>();
    for (var k0 = 0u; k0 < settings.k; k0 += STEP) {
        // Each invocation loads 4 entries of each tile; consecutive invocations read
        // consecutive k of one column (contiguous in memory).
        for (var r = 0u; r < 4u; r++) {
            let e = index + r * THREADS;
            let kk = e % STEP;
            let ii = e / STEP;
            // A stored transposed is read along its rows instead: consecutive i of one k.
            var ka = kk;
            var ia = ii;
            var at = offsets.a + (i0 + ii) * settings.k + k0 + kk;
            if (settings.a_transposed != 0u) {
                ka = e / TILE;
                ia = e % TILE;
                at = (k0 + ka) * settings.m + i0 + ia;
            }
            var va = f64(0.0);
            var vb = f64(0.0);
            if (k0 + ka < settings.k && i0 + ia < settings.m) {
                va = f64(a[at]);
                if (settings.a_wide != 0u) {
                    va += f64(a_rest[at]);
                }
            }
            if (k0 + kk < settings.k && j0 + ii < settings.n) {
                let bt = offsets.b + (j0 + ii) * settings.k + k0 + kk;
                vb = f64(b[bt]);
                if (settings.b_wide != 0u) {
                    vb += f64(b_rest[bt]);
                }
            }
            a_tile[ka * TILE + ia] = va;
            b_tile[kk * TILE + ii] = vb;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < STEP; kk++) {
            let at = kk * TILE + local.x;
            let av = vec4<f64>(a_tile[at], a_tile[at + 16u], a_tile[at + 32u], a_tile[at + 48u]);
            let bt = kk * TILE + local.y;
            sum0 += av * b_tile[bt];
            sum1 += av * b_tile[bt + 16u];
            sum2 += av * b_tile[bt + 32u];
            sum3 += av * b_tile[bt + 48u];
        }
        workgroupBarrier();
    }
    let i = i0 + local.x;
    store_column(offsets.c, i, j0 + local.y, sum0);
    store_column(offsets.c, i, j0 + local.y + 16u, sum1);
    store_column(offsets.c, i, j0 + local.y + 32u, sum2);
    store_column(offsets.c, i, j0 + local.y + 48u, sum3);
}

// The fold (products_layout.wgsl's `fold`) in f64, as the host computes it; written as two f32
// parts like the products.
fn fold_column(j: u32) {
    // Used, so the binding belongs to the kernel's layout (its value is never needed).
    _ = opaque_zero[0];
    let base = j * settings.k;
    let transposed = settings.fold_centre_first != 0u;
    var mean = f64(0.0);
    if (settings.fold_centres != 0u) {
        var sum = f64(0.0);
        for (var i = 0u; i < settings.k; i++) {
            var term = f64(c_high[base + i]);
            if (!transposed) {
                term *= f64(a[i]);
            }
            sum += term;
        }
        mean = sum / f64(settings.k);
    }
    for (var i = 0u; i < settings.k; i++) {
        let w = f64(c_high[base + i]);
        let gamma = f64(a[i]);
        var v = w * gamma - mean;
        if (transposed) {
            v = (w - mean) * gamma;
        }
        let high = f32(v);
        c_high[base + i] = high;
        c_low[base + i] = f32(v - f64(high));
    }
}
