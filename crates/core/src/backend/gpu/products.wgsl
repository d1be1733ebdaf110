// C = A^T B for a block of rows: A is K x M, B is K x N, both column-major as nalgebra holds
// them (A[k, i] at a[i * K + k]); C is M x N, column-major, returned as two f32 parts whose
// sum (taken in f64 by the caller) is the product to about 2^-36 of the summed terms' sizes.
// `syrk` is the same product with B = A, computing only the tiles on or above the diagonal
// (the caller mirrors them).
//
// Wide inputs (`settings.a_wide` for A, `settings.b_wide` for B): f64 matrices held as two f32
// parts each, `a` the value rounded to f32 and `a_rest` what that rounding left (likewise `b`,
// `b_rest`). The rest is folded into the low part of the split below; its own rounding there is
// 2^-24 of a term already 2^-12 of the value, so a wide product keeps the same 2^-36 as an f32
// one. A product kept on the device is read in again as its own two parts (the heads' small
// products of a layer's products), renormalised when written (`store_column`), so its rest too
// is within 2^-24 of its value. An input without rests (f32 values, such as weights used as
// stored) binds a placeholder there, never read.
//
// Why two parts. The Grams feed eigenproblems whose conditioning amplifies their error by up
// to ~1e4 (κ of the demo model's token-space QK), so a plain f32 product (2^-24) is not close
// enough to the CPU's f64. Each input is split into a 12-bit high part and the rest, which
// makes hi * hi exact in f32; the sum of those exact products is kept error-free (Knuth's
// TwoSum) and the small cross terms hi * lo + lo * hi + lo * lo, ~2^-12 of the product, are
// summed with the sums' rounding errors into the second part.
//
// Accumulating (`settings.accumulate` = 1): the result is added to what C holds, the high parts
// summed error-free and the low parts with the error, so a run of blocks sums on the device and
// is read back once (a double-f32 sum keeps ~2^-44 of the total, far below each block's 2^-36).
//
// Each workgroup owns a 64 x 64 tile of C, each of its 16 x 16 invocations 4 x 4 entries
// (strided by 16, so neighbouring invocations read neighbouring workgroup memory). K is walked
// 16 rows at a time through workgroup memory (4 tiles of 4 KiB: the default 16 KiB limit).

// STEP x TILE each, [kk * TILE + ii].
var<workgroup> a_high: array<f32, 1024>;
var<workgroup> a_low: array<f32, 1024>;
var<workgroup> b_high: array<f32, 1024>;
var<workgroup> b_low: array<f32, 1024>;

/// The value with the low 12 of its 23 stored mantissa bits cleared: 12 significant bits, so
/// the product of two such values is exact in f32.
fn high_part(v: f32) -> f32 {
    return bitcast<f32>(bitcast<u32>(v) & 0xFFFFF000u);
}

/// One multiply-add of the split product for the four rows an invocation holds in column s:
/// `high + ah * bh` summed error-free (TwoSum) into `high`, its rounding error and the small
/// cross terms into `part`. Shader compilers may simplify float algebra (Mesa's NIR rewrites
/// (h + p) - h to p, making the error zero); an integer xor with `zero` hides t and bp from them.
fn multiply_add(high: ptr<function, vec4<f32>>, part: ptr<function, vec4<f32>>, ah: vec4<f32>, al: vec4<f32>,
                bh: f32, bl: f32, zero: vec4<u32>) {
    let h = *high;
    let p = ah * bh;
    let t = bitcast<vec4<f32>>(bitcast<vec4<u32>>(h + p) ^ zero);
    let bp = bitcast<vec4<f32>>(bitcast<vec4<u32>>(t - h) ^ zero);
    let e = (h - (t - bp)) + (p - bp);
    *high = t;
    *part += e + (ah * bl + al * bh + al * bl);
}

/// `low += part` with Kahan compensation, so the steps' small sums do not lose bits as K grows.
fn add_compensated(low: ptr<function, vec4<f32>>, compensation: ptr<function, vec4<f32>>, part: vec4<f32>,
                   zero: vec4<u32>) {
    let y = part - *compensation;
    let t = bitcast<vec4<f32>>(bitcast<vec4<u32>>(*low + y) ^ zero);
    *compensation = (t - *low) - y;
    *low = t;
}

/// `v`, which the compiler cannot see through (see multiply_add).
fn hidden(v: f32, zero: u32) -> f32 {
    return bitcast<f32>(bitcast<u32>(v) ^ zero);
}

/// Column s of the invocation's block, rows local.x + 16 r (the vector's lanes r = 0..3),
/// written or, accumulating, added to what C holds.
fn store_column(c: u32, i: u32, j: u32, high: vec4<f32>, low: vec4<f32>, compensation: vec4<f32>, zero: u32) {
    if (j >= settings.n) {
        return;
    }
    for (var r = 0u; r < 4u; r++) {
        if (i + 16u * r < settings.m) {
            let at = c + j * settings.m + i + 16u * r;
            var h = high[r];
            var l = low[r] - compensation[r];
            if (settings.accumulate != 0u) {
                // TwoSum of the high parts; the low parts and its error into the low sum, then
                // renormalised (FastTwoSum) so the high part stays the nearest f32 to the total.
                let old = c_high[at];
                let s = hidden(old + h, zero);
                let b = hidden(s - old, zero);
                let low_sum = c_low[at] + l + ((old - (s - b)) + (h - b));
                h = hidden(s + low_sum, zero);
                l = low_sum - hidden(h - s, zero);
            } else {
                // Renormalised (TwoSum: exact whichever part is larger), so that a product kept
                // on the device and read in again carries a rest within 2^-24 of its value.
                let s = hidden(h + l, zero);
                let b = hidden(s - h, zero);
                l = (h - (s - b)) + (l - b);
                h = s;
            }
            c_high[at] = h;
            c_low[at] = l;
        }
    }
}

fn product_tile(tile: vec3<u32>, local: vec2<u32>, index: u32) {
    let i0 = tile.x * TILE;
    let j0 = tile.y * TILE;
    let offsets = batch_offsets(tile.z);
    let zero = vec4<u32>(opaque_zero[0]);
    // The invocation's 4 x 4 block as four columns of four rows, in named vectors rather than
    // an indexed array, so every compiler keeps them in registers.
    var high0 = vec4<f32>();
    var high1 = vec4<f32>();
    var high2 = vec4<f32>();
    var high3 = vec4<f32>();
    var low0 = vec4<f32>();
    var low1 = vec4<f32>();
    var low2 = vec4<f32>();
    var low3 = vec4<f32>();
    var comp0 = vec4<f32>();
    var comp1 = vec4<f32>();
    var comp2 = vec4<f32>();
    var comp3 = vec4<f32>();
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
            var va = 0.0;
            var vb = 0.0;
            var ra = 0.0;
            var rb = 0.0;
            if (k0 + ka < settings.k && i0 + ia < settings.m) {
                va = a[at];
                if (settings.a_wide != 0u) {
                    ra = a_rest[at];
                }
            }
            if (k0 + kk < settings.k && j0 + ii < settings.n) {
                vb = b[offsets.b + (j0 + ii) * settings.k + k0 + kk];
                if (settings.b_wide != 0u) {
                    rb = b_rest[offsets.b + (j0 + ii) * settings.k + k0 + kk];
                }
            }
            let ha = high_part(va);
            let hb = high_part(vb);
            a_high[ka * TILE + ia] = ha;
            a_low[ka * TILE + ia] = (va - ha) + ra;
            b_high[kk * TILE + ii] = hb;
            b_low[kk * TILE + ii] = (vb - hb) + rb;
        }
        workgroupBarrier();
        // The step's small terms: cross products and the TwoSum errors, in plain f32.
        var part0 = vec4<f32>();
        var part1 = vec4<f32>();
        var part2 = vec4<f32>();
        var part3 = vec4<f32>();
        for (var kk = 0u; kk < STEP; kk++) {
            let at = kk * TILE + local.x;
            let ah = vec4<f32>(a_high[at], a_high[at + 16u], a_high[at + 32u], a_high[at + 48u]);
            let al = vec4<f32>(a_low[at], a_low[at + 16u], a_low[at + 32u], a_low[at + 48u]);
            let bt = kk * TILE + local.y;
            let bh = vec4<f32>(b_high[bt], b_high[bt + 16u], b_high[bt + 32u], b_high[bt + 48u]);
            let bl = vec4<f32>(b_low[bt], b_low[bt + 16u], b_low[bt + 32u], b_low[bt + 48u]);
            multiply_add(&high0, &part0, ah, al, bh.x, bl.x, zero);
            multiply_add(&high1, &part1, ah, al, bh.y, bl.y, zero);
            multiply_add(&high2, &part2, ah, al, bh.z, bl.z, zero);
            multiply_add(&high3, &part3, ah, al, bh.w, bl.w, zero);
        }
        add_compensated(&low0, &comp0, part0, zero);
        add_compensated(&low1, &comp1, part1, zero);
        add_compensated(&low2, &comp2, part2, zero);
        add_compensated(&low3, &comp3, part3, zero);
        workgroupBarrier();
    }
    let i = i0 + local.x;
    store_column(offsets.c, i, j0 + local.y, high0, low0, comp0, zero.x);
    store_column(offsets.c, i, j0 + local.y + 16u, high1, low1, comp1, zero.x);
    store_column(offsets.c, i, j0 + local.y + 32u, high2, low2, comp2, zero.x);
    store_column(offsets.c, i, j0 + local.y + 48u, high3, low3, comp3, zero.x);
}

// The fold (products_layout.wgsl's `fold`) in f32 pairs: each f64 value as (high, low). A
// product of two f32 values is a pair summed from the exact products of their 12-bit halves (as
// above: WGSL does not promise an FMA for Dekker's product), sums are TwoSums, so a folded value
// comes within about 2^-46 of its column's scale of the f64 fold (K times that for the mean's
// sum at worst). Every sum goes through `hidden`, for the same reason as in `multiply_add`.

/// `x + y` as the rounded sum and its exact error (TwoSum).
fn two_sum(x: f32, y: f32, zero: u32) -> vec2<f32> {
    let s = hidden(x + y, zero);
    let b = hidden(s - x, zero);
    return vec2<f32>(s, (x - (s - b)) + (y - b));
}

/// `x * y` as a pair: the four products of their 12-bit halves are exact in f32; their sum is
/// kept to about 2^-47.
fn two_product(x: f32, y: f32, zero: u32) -> vec2<f32> {
    let xh = high_part(x);
    let yh = high_part(y);
    let xl = x - xh;
    let yl = y - yh;
    let first = two_sum(xh * yh, xh * yl, zero);
    let second = two_sum(first.x, xl * yh, zero);
    return two_sum(second.x, (first.y + second.y) + xl * yl, zero);
}

/// The sum of two pairs, renormalised (within about 2^-47 of the larger).
fn add_pairs(x: vec2<f32>, y: vec2<f32>, zero: u32) -> vec2<f32> {
    let s = two_sum(x.x, y.x, zero);
    return two_sum(s.x, s.y + (x.y + y.y), zero);
}

/// A pair divided by `n`: the rounded quotient, then what it left (exact: the quotient times
/// `n` is within a few units of the high part) divided again.
fn divide_pair(x: vec2<f32>, n: f32, zero: u32) -> vec2<f32> {
    let q = hidden(x.x / n, zero);
    let back = two_product(q, n, zero);
    let left = hidden(x.x - back.x, zero) - back.y + x.y;
    return two_sum(q, left / n, zero);
}

fn fold_column(j: u32) {
    let zero = opaque_zero[0];
    let base = j * settings.k;
    let transposed = settings.fold_centre_first != 0u;
    var mean = vec2<f32>();
    if (settings.fold_centres != 0u) {
        var sum = vec2<f32>();
        for (var i = 0u; i < settings.k; i++) {
            var term = vec2<f32>(c_high[base + i], 0.0);
            if (!transposed) {
                term = two_product(term.x, a[i], zero);
            }
            sum = add_pairs(sum, term, zero);
        }
        mean = divide_pair(sum, f32(settings.k), zero);
    }
    for (var i = 0u; i < settings.k; i++) {
        let w = c_high[base + i];
        var v: vec2<f32>;
        if (transposed) {
            let centred = add_pairs(vec2<f32>(w, 0.0), -mean, zero);
            let scaled = two_product(centred.x, a[i], zero);
            v = two_sum(scaled.x, scaled.y + centred.y * a[i], zero);
        } else {
            v = add_pairs(two_product(w, a[i], zero), -mean, zero);
        }
        c_high[base + i] = v.x;
        c_low[base + i] = v.y;
    }
}
