// The forward pass's kernels (forward.rs), in f32 as the CPU's forward pass and the reference
// implementations compute. Every matrix is column-major, as nalgebra keeps it: entry (i, j) of
// an m-row matrix is at i + m * j. The rows of every sequence run together are stacked into one
// matrix of `rows` rows; `rows_of` says where each row's sequence starts.
//
// Each kernel reads its settings from `p` and names in a comment what it binds where.

struct Settings {
    m: u32,
    n: u32,
    k: u32,
    flags: u32,
    a: u32,
    b: u32,
    c: u32,
    d: u32,
    // Read by `attend` only: the layer's sliding window (0: none), the f32 bits of the scores'
    // soft cap (0: none), ALiBi (0: none, 1: the slope times the key's position added after
    // the scale, 2: before it); one more to keep the uniform 16-byte aligned.
    window: u32,
    cap: u32,
    alibi: u32,
    unused_f: u32,
}

@group(0) @binding(0) var<uniform> p: Settings;
@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> y: array<f32>;
@group(0) @binding(3) var<storage, read> w: array<f32>;
@group(0) @binding(4) var<storage, read_write> out: array<f32>;
@group(0) @binding(5) var<storage, read_write> out2: array<f32>;
@group(0) @binding(6) var<storage, read> rows_of: array<u32>;
@group(0) @binding(7) var<storage, read> slopes: array<f32>;

// A dispatch's groups beyond 65 535 go on in y (and z): a linear group index.
const SPAN: u32 = 65535u;

fn linear(group: vec3<u32>) -> u32 {
    return group.x + SPAN * (group.y + SPAN * group.z);
}

// ---- gemm: out = X Y (+ bias w) (+ out when accumulating) ----
// X: m x k at x[i + m * kk]; Y: k x n at y[kk + k * j], or stored transposed (n x k, at
// y[j + n * kk]) when flags & 4; w: the bias, column j's at w[p.a + j], added when flags & 1;
// out: m x n, added to when flags & 2. Before that, in the CPU's order, each entry is times the
// f32 whose bits are p.b (flags & 8: a residual multiplier), divided by p.c's (flags & 16: a
// logits divisor), and soft-capped by p.d's (flags & 32). A 64 x 64 tile of out per group,
// 4 x 4 entries per thread.

const TILE: u32 = 64u;
const DEPTH: u32 = 16u;
var<workgroup> tile_x: array<f32, 1024>;
var<workgroup> tile_y: array<f32, 1024>;

@compute @workgroup_size(16, 16)
fn gemm(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>) {
    let first_row = group.x * TILE;
    let first_column = group.y * TILE;
    let thread = local.y * 16u + local.x;
    let transposed = (p.flags & 4u) != 0u;
    var sum: array<f32, 16>;
    for (var depth = 0u; depth < p.k; depth += DEPTH) {
        for (var q = 0u; q < 4u; q++) {
            let e = thread + 256u * q;
            // X's tile: 64 rows (contiguous in memory) x 16 depths.
            let i = first_row + e % TILE;
            let kx = depth + e / TILE;
            var value = 0.0;
            if (i < p.m && kx < p.k) {
                value = x[i + p.m * kx];
            }
            tile_x[(e / TILE) * TILE + e % TILE] = value;
            // Y's tile: 16 depths x 64 columns, read along whichever is contiguous.
            var ky: u32;
            var j: u32;
            if (transposed) {
                j = first_column + e % TILE;
                ky = depth + e / TILE;
            } else {
                ky = depth + e % DEPTH;
                j = first_column + e / DEPTH;
            }
            var other = 0.0;
            if (j < p.n && ky < p.k) {
                if (transposed) {
                    other = y[j + p.n * ky];
                } else {
                    other = y[ky + p.k * j];
                }
            }
            tile_y[(ky - depth) * TILE + (j - first_column)] = other;
        }
        workgroupBarrier();
        for (var kk = 0u; kk < DEPTH; kk++) {
            var left: array<f32, 4>;
            var right: array<f32, 4>;
            for (var r = 0u; r < 4u; r++) {
                left[r] = tile_x[kk * TILE + local.x + 16u * r];
                right[r] = tile_y[kk * TILE + local.y + 16u * r];
            }
            for (var r = 0u; r < 4u; r++) {
                for (var c = 0u; c < 4u; c++) {
                    sum[r * 4u + c] += left[r] * right[c];
                }
            }
        }
        workgroupBarrier();
    }
    for (var r = 0u; r < 4u; r++) {
        for (var c = 0u; c < 4u; c++) {
            let i = first_row + local.x + 16u * r;
            let j = first_column + local.y + 16u * c;
            if (i < p.m && j < p.n) {
                var value = sum[r * 4u + c];
                if ((p.flags & 1u) != 0u) {
                    value += w[p.a + j];
                }
                if ((p.flags & 8u) != 0u) {
                    value *= bitcast<f32>(p.b);
                }
                if ((p.flags & 16u) != 0u) {
                    value /= bitcast<f32>(p.c);
                }
                if ((p.flags & 32u) != 0u) {
                    value = soft_cap(value, bitcast<f32>(p.d));
                }
                let at = i + p.m * j;
                if ((p.flags & 2u) != 0u) {
                    value += out[at];
                }
                out[at] = value;
            }
        }
    }
}

// `cap tanh(v / cap)`. tanh is 1 in f32 long before 15: the clamp keeps an exp-based tanh finite.
fn soft_cap(v: f32, cap: f32) -> f32 {
    return tanh(clamp(v / cap, -15.0, 15.0)) * cap;
}

// ---- norm: out = (x - mean) / scale * y + w per part of a row, out2[row] = scale ----
// x: rows (m) x p.b parts (at least 1) of width n each, a part normed on its own (a per-head
// query or key norm); y: the norm's weight and w its bias (flags & 2), as wide as a row;
// LayerNorm subtracts the mean (flags & 1), RMSNorm does not; scale = sqrt(variance (or mean
// square) + eps), eps the f32 whose bits are p.a. The result replaces out, or (flags & 4) is
// times the f32 whose bits are p.c and added to out (a branch's output norm as it joins the
// residual stream). out2 is written unless flags & 8. One group per (row, part).

const REDUCE: u32 = 256u;
var<workgroup> partial: array<f32, 256>;

// The sum (or, `largest`, the maximum) of every thread's `value` in a group of `threads`, for
// all of them.
fn group_reduce(local: u32, value: f32, threads: u32, largest: bool) -> f32 {
    partial[local] = value;
    workgroupBarrier();
    for (var half = threads / 2u; half > 0u; half /= 2u) {
        if (local < half) {
            if (largest) {
                partial[local] = max(partial[local], partial[local + half]);
            } else {
                partial[local] += partial[local + half];
            }
        }
        workgroupBarrier();
    }
    let total = partial[0];
    workgroupBarrier();
    return total;
}

@compute @workgroup_size(256)
fn norm(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) local: u32) {
    let index = linear(group);
    let row = index % p.m;
    let first = (index / p.m) * p.n;
    if (index >= p.m * max(p.b, 1u)) {
        return;
    }
    let width = f32(p.n);
    var mean = 0.0;
    if ((p.flags & 1u) != 0u) {
        var part = 0.0;
        for (var j = local; j < p.n; j += REDUCE) {
            part += x[row + p.m * (first + j)];
        }
        mean = group_reduce(local, part, REDUCE, false) / width;
    }
    var squares = 0.0;
    for (var j = local; j < p.n; j += REDUCE) {
        let centred = x[row + p.m * (first + j)] - mean;
        squares += centred * centred;
    }
    let scale = sqrt(group_reduce(local, squares, REDUCE, false) / width + bitcast<f32>(p.a));
    for (var j = local; j < p.n; j += REDUCE) {
        let at = row + p.m * (first + j);
        var value = (x[at] - mean) / scale * y[first + j];
        if ((p.flags & 2u) != 0u) {
            value += w[first + j];
        }
        if ((p.flags & 4u) != 0u) {
            value = out[at] + value * bitcast<f32>(p.c);
        }
        out[at] = value;
    }
    if (local == 0u && (p.flags & 8u) == 0u) {
        out2[row] = scale;
    }
}

// ---- rotary: the rotary embedding on the first 2 * half dimensions of each head of out ----
// out: rows (m) x heads (n) * d_head (k); dimension i is paired with i + half (rotate-half),
// or 2i with 2i + 1 when flags & 1 (GPT-J's interleaved pairs); x: from p.c on, cos then sin
// of each position's angles, position t's at x[p.c + t * half + i] and
// x[p.c + p.b + t * half + i]; rows_of: each row's (start, position). One thread per
// (row, head, i < half).

@compute @workgroup_size(64)
fn rotary(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let half = p.a;
    let e = id.x + 64u * groups.x * id.y;
    if (e >= p.m * p.n * half) {
        return;
    }
    let row = e % p.m;
    let i = (e / p.m) % half;
    let head = e / (p.m * half);
    let position = rows_of[2u * row + 1u];
    let cos_t = x[p.c + position * half + i];
    let sin_t = x[p.c + p.b + position * half + i];
    var first = row + p.m * (head * p.k + i);
    var second = row + p.m * (head * p.k + i + half);
    if ((p.flags & 1u) != 0u) {
        first = row + p.m * (head * p.k + 2u * i);
        second = first + p.m;
    }
    let x1 = out[first];
    let x2 = out[second];
    out[first] = x1 * cos_t - x2 * sin_t;
    out[second] = x2 * cos_t + x1 * sin_t;
}

// ---- attend: one head's causal softmax attention at one row ----
// x: queries, rows (m) x heads * d_head; y: keys and w: values, rows x kv_heads * d_head;
// rows_of: each row's (start, position); p.n heads, p.k d_head, p.a query heads per key/value
// head, p.b the f32 bits of the score scale; p.c the first row this dispatch covers and p.flags
// how many rows it covers; p.d its patterns' offset; p.window: a query t sees keys t - window <
// k <= t (0: every key up to t); p.cap: scores become cap tanh(score / cap) (0: as they are);
// p.alibi: head h's slope, slopes[h], times the key's position added to the scores (1: after
// the scale, as BLOOM adds it; 2: before, as Falcon does). out: the patterns, each sequence's
// heads' len x len patterns one after another (column-major, rows = queries) from the offset
// `pattern_at` gives; out2: each head's mixed values z, rows x heads * d_head. One group per
// (row, head): dispatched with group = (row - p.c) within x/z, head in y.

const KEYS: u32 = 64u;
var<workgroup> query: array<f32, 256>;

@compute @workgroup_size(64)
fn attend(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let row = p.c + group.x + SPAN * group.z;
    let head = group.y;
    if (row >= p.c + p.flags || head >= p.n) {
        return;
    }
    let d_head = p.k;
    let start = rows_of[2u * row];
    let t = rows_of[2u * row + 1u];
    let len = rows_of[2u * p.m + 2u * start];
    let pattern = rows_of[2u * p.m + 2u * start + 1u] - p.d + head * len * len;
    let kv = head / p.a;
    let scale = bitcast<f32>(p.b);
    for (var j = local; j < d_head; j += KEYS) {
        query[j] = x[row + p.m * (head * d_head + j)];
    }
    workgroupBarrier();

    var first = 0u;
    if (p.window > 0u && t + 1u > p.window) {
        first = t + 1u - p.window;
    }
    let cap = bitcast<f32>(p.cap);
    var largest = -3.4e38;
    for (var key = first + local; key <= t; key += KEYS) {
        let key_row = start + key;
        var dot = 0.0;
        for (var j = 0u; j < d_head; j++) {
            dot += query[j] * y[key_row + p.m * (kv * d_head + j)];
        }
        var score = dot * scale;
        if (p.alibi == 1u) {
            score = dot * scale + slopes[head] * f32(key);
        }
        if (p.alibi == 2u) {
            score = (dot + slopes[head] * f32(key)) * scale;
        }
        if (p.cap != 0u) {
            score = tanh(score / cap) * cap;
        }
        out[pattern + key * len + t] = score;
        largest = max(largest, score);
    }
    let top = group_reduce(local, largest, KEYS, true);

    var part = 0.0;
    for (var key = first + local; key <= t; key += KEYS) {
        let weight = exp(out[pattern + key * len + t] - top);
        out[pattern + key * len + t] = weight;
        part += weight;
    }
    let total = group_reduce(local, part, KEYS, false);
    for (var key = local; key < len; key += KEYS) {
        var weight = 0.0;
        if (key >= first && key <= t) {
            weight = out[pattern + key * len + t] / total;
        }
        out[pattern + key * len + t] = weight;
    }
    storageBarrier();
    workgroupBarrier();

    for (var j = local; j < d_head; j += KEYS) {
        var mixed = 0.0;
        for (var key = first; key <= t; key++) {
            mixed += out[pattern + key * len + t] * w[start + key + p.m * (kv * d_head + j)];
        }
        out2[row + p.m * (head * d_head + j)] = mixed;
    }
}

// ---- activate: the MLP's nonlinearity on out (p.m entries), in place ----
// p.a: 0 ReLU, 1 GELU (tanh), 2 GELU (erf), 3 SiLU; gated (flags & 1): out * act(x), x the gate.

fn erf(v: f32) -> f32 {
    // erfc by Chebyshev fitting (Numerical Recipes' erfcc, fractional error below 1.2e-7).
    let z = abs(v);
    let t = 1.0 / (1.0 + 0.5 * z);
    let tail = t * exp(-z * z - 1.26551223 + t * (1.00002368 + t * (0.37409196 + t * (0.09678418
        + t * (-0.18628806 + t * (0.27886807 + t * (-1.13520398 + t * (1.48851587
        + t * (-0.82215223 + t * 0.17087277)))))))));
    if (v >= 0.0) {
        return 1.0 - tail;
    }
    return tail - 1.0;
}

fn act(kind: u32, v: f32) -> f32 {
    switch kind {
        case 0u: {
            return max(v, 0.0);
        }
        case 1u: {
            // tanh saturates to 1 in f32 long before 15; clamping keeps exp-based tanh finite.
            let inner = clamp(sqrt(2.0 / 3.14159265358979) * (v + 0.044715 * v * v * v), -15.0, 15.0);
            return 0.5 * v * (1.0 + tanh(inner));
        }
        case 2u: {
            return 0.5 * v * (1.0 + erf(v / 1.41421356237));
        }
        default: {
            return v / (1.0 + exp(-v));
        }
    }
}

@compute @workgroup_size(64)
fn activate(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let e = id.x + 64u * groups.x * id.y;
    if (e >= p.m) {
        return;
    }
    if ((p.flags & 1u) != 0u) {
        out[e] = out[e] * act(p.a, x[e]);
    } else {
        out[e] = act(p.a, out[e]);
    }
}

// ---- weigh: out (=|+=) x times a weight per row ----
// x and out: rows (m) x n; row i's weight is y[p.a + i] (flags & 1: an expert's weight of each
// token), else the f32 whose bits are p.b; out is replaced (flags & 2) or added to.

@compute @workgroup_size(64)
fn weigh(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let e = id.x + 64u * groups.x * id.y;
    if (e >= p.m * p.n) {
        return;
    }
    var weight = bitcast<f32>(p.b);
    if ((p.flags & 1u) != 0u) {
        weight = y[p.a + e % p.m];
    }
    var value = x[e] * weight;
    if ((p.flags & 2u) == 0u) {
        value += out[e];
    }
    out[e] = value;
}

// ---- gather: out[i] = x[rows_of[i]] for the p.m cells asked for ----

@compute @workgroup_size(64)
fn gather(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let e = id.x + 64u * groups.x * id.y;
    if (e < p.m) {
        out[e] = x[rows_of[e]];
    }
}

// ---- highest: each row's highest entry of x (p.m rows x p.n columns) and its column ----
// out[2 * row] the entry, out[2 * row + 1] its column (exact in f32 below 2^24); in the order of
// Rust's f32::total_cmp, the last of equal entries. One group per row.

var<workgroup> top_key: array<i32, 256>;
var<workgroup> top_column: array<u32, 256>;

// f32::total_cmp's order as an i32's.
fn order_key(v: f32) -> i32 {
    let bits = bitcast<i32>(v);
    return bits ^ i32(u32(bits >> 31u) >> 1u);
}

@compute @workgroup_size(256)
fn highest(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) local: u32) {
    let row = linear(group);
    if (row >= p.m) {
        return;
    }
    // A thread's own columns, in increasing order: a later equal one replaces the best.
    var key = 0;
    var column = local;
    if (local < p.n) {
        key = order_key(x[row + p.m * local]);
    }
    for (var c = local + REDUCE; c < p.n; c += REDUCE) {
        let k = order_key(x[row + p.m * c]);
        if (k >= key) {
            key = k;
            column = c;
        }
    }
    top_key[local] = key;
    top_column[local] = column;
    workgroupBarrier();
    // Slot i holds the best of threads i, i + half, ...: valid when i < n.
    for (var half = REDUCE / 2u; half > 0u; half /= 2u) {
        if (local < half && local + half < p.n) {
            let other = top_key[local + half];
            if (other > top_key[local] || (other == top_key[local] && top_column[local + half] > top_column[local])) {
                top_key[local] = other;
                top_column[local] = top_column[local + half];
            }
        }
        workgroupBarrier();
    }
    if (local == 0u) {
        out[2u * row] = x[row + p.m * top_column[0]];
        out[2u * row + 1u] = f32(top_column[0]);
    }
}
