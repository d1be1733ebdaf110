// The forward pass's kernels (forward.rs), in f32 as the CPU's forward pass and the reference
// implementations compute. Every matrix is column-major, as nalgebra keeps it: entry (i, j) of
// an m-row matrix is at i + m * j. The rows of every sequence run together are stacked into one
// matrix of `rows` rows; `rows_of` says where each row's sequence starts.
//
// Each kernel reads its settings from its own uniform at binding 0, a struct that forward.rs's
// launch.rs mirrors field by field (a flag is 0 or 1; padding keeps each struct a multiple of 16
// bytes), and names in a comment what it binds where. The binding numbers are launch.rs's
// `binding` constants.

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
// y[j + n * kk]) when `y_transposed`; w: the bias, column j's at w[bias_first + j], added when
// `add_bias`; out: m x n, added to when `accumulate`. Before that, in the CPU's order, each
// entry is times `multiplier` (when `multiply`: a residual multiplier), divided by `divisor`
// (when `divide`: a logits divisor), and soft-capped by `cap` (when `soft_cap`). A 64 x 64 tile
// of out per group, 4 x 4 entries per thread.

struct GemmSettings {
    m: u32,
    n: u32,
    k: u32,
    add_bias: u32,
    accumulate: u32,
    y_transposed: u32,
    bias_first: u32,
    multiply: u32,
    multiplier: f32,
    divide: u32,
    divisor: f32,
    soft_cap: u32,
    cap: f32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> gemm_settings: GemmSettings;

const TILE: u32 = 64u;
const DEPTH: u32 = 16u;
var<workgroup> tile_x: array<f32, 1024>;
var<workgroup> tile_y: array<f32, 1024>;

@compute @workgroup_size(16, 16)
fn gemm(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>) {
    let s = gemm_settings;
    let first_row = group.x * TILE;
    let first_column = group.y * TILE;
    let thread = local.y * 16u + local.x;
    let transposed = s.y_transposed != 0u;
    var sum: array<f32, 16>;
    for (var depth = 0u; depth < s.k; depth += DEPTH) {
        for (var q = 0u; q < 4u; q++) {
            let e = thread + 256u * q;
            // X's tile: 64 rows (contiguous in memory) x 16 depths.
            let i = first_row + e % TILE;
            let kx = depth + e / TILE;
            var value = 0.0;
            if (i < s.m && kx < s.k) {
                value = x[i + s.m * kx];
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
            if (j < s.n && ky < s.k) {
                if (transposed) {
                    other = y[j + s.n * ky];
                } else {
                    other = y[ky + s.k * j];
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
            if (i < s.m && j < s.n) {
                var value = sum[r * 4u + c];
                if (s.add_bias != 0u) {
                    value += w[s.bias_first + j];
                }
                if (s.multiply != 0u) {
                    value *= s.multiplier;
                }
                if (s.divide != 0u) {
                    value /= s.divisor;
                }
                if (s.soft_cap != 0u) {
                    value = soft_cap(value, s.cap);
                }
                let at = i + s.m * j;
                if (s.accumulate != 0u) {
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
// x: rows x parts (at least 1) of `width` each, a part normed on its own (a per-head query or
// key norm); y: the norm's weight and w its bias (`add_bias`), as wide as a row; LayerNorm
// subtracts the mean (`centre`), RMSNorm does not; scale = sqrt(variance (or mean square) +
// eps). The result replaces out, or (`join`) is times `multiplier` and added to out (a branch's
// output norm as it joins the residual stream). out2 is written when `write_scales`. One group
// per (row, part).

struct NormSettings {
    rows: u32,
    width: u32,
    parts: u32,
    centre: u32,
    add_bias: u32,
    join: u32,
    write_scales: u32,
    eps: f32,
    multiplier: f32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> norm_settings: NormSettings;

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
    let s = norm_settings;
    let index = linear(group);
    let row = index % s.rows;
    let first = (index / s.rows) * s.width;
    if (index >= s.rows * max(s.parts, 1u)) {
        return;
    }
    let width = f32(s.width);
    var mean = 0.0;
    if (s.centre != 0u) {
        var part = 0.0;
        for (var j = local; j < s.width; j += REDUCE) {
            part += x[row + s.rows * (first + j)];
        }
        mean = group_reduce(local, part, REDUCE, false) / width;
    }
    var squares = 0.0;
    for (var j = local; j < s.width; j += REDUCE) {
        let centred = x[row + s.rows * (first + j)] - mean;
        squares += centred * centred;
    }
    let scale = sqrt(group_reduce(local, squares, REDUCE, false) / width + s.eps);
    for (var j = local; j < s.width; j += REDUCE) {
        let at = row + s.rows * (first + j);
        var value = (x[at] - mean) / scale * y[first + j];
        if (s.add_bias != 0u) {
            value += w[first + j];
        }
        if (s.join != 0u) {
            value = out[at] + value * s.multiplier;
        }
        out[at] = value;
    }
    if (local == 0u && s.write_scales != 0u) {
        out2[row] = scale;
    }
}

// ---- rotary: the rotary embedding on the first 2 * half dimensions of each head of out ----
// out: rows x heads * d_head; dimension i is paired with i + half (rotate-half), or 2i with
// 2i + 1 when `interleaved` (GPT-J's pairs); x: from `table_first` on, cos then sin of each
// position's angles, position t's at x[table_first + t * half + i] and
// x[table_first + sines_at + t * half + i]; rows_of: each row's (start, position). One thread
// per (row, head, i < half).

struct RotarySettings {
    rows: u32,
    heads: u32,
    d_head: u32,
    interleaved: u32,
    half: u32,
    sines_at: u32,
    table_first: u32,
    pad0: u32,
}

@group(0) @binding(0) var<uniform> rotary_settings: RotarySettings;

@compute @workgroup_size(64)
fn rotary(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let s = rotary_settings;
    let half = s.half;
    let e = id.x + 64u * groups.x * id.y;
    if (e >= s.rows * s.heads * half) {
        return;
    }
    let row = e % s.rows;
    let i = (e / s.rows) % half;
    let head = e / (s.rows * half);
    let position = rows_of[2u * row + 1u];
    let cos_t = x[s.table_first + position * half + i];
    let sin_t = x[s.table_first + s.sines_at + position * half + i];
    var first = row + s.rows * (head * s.d_head + i);
    var second = row + s.rows * (head * s.d_head + i + half);
    if (s.interleaved != 0u) {
        first = row + s.rows * (head * s.d_head + 2u * i);
        second = first + s.rows;
    }
    let x1 = out[first];
    let x2 = out[second];
    out[first] = x1 * cos_t - x2 * sin_t;
    out[second] = x2 * cos_t + x1 * sin_t;
}

// ---- attend: one head's causal softmax attention at one row ----
// x: queries, rows x heads * d_head; y: keys and w: values, rows x kv_heads * d_head; rows_of:
// each row's (start, position); `group` query heads per key/value head; `scale` the score
// scale; rows first_row..first_row + row_count are this dispatch's, `patterns_first` its
// patterns' offset; `window`: a query t sees keys t - window < k <= t (0: every key up to t);
// `soft_cap`: scores become cap tanh(score / cap); `alibi`: head h's slope, slopes[h], times the
// key's position added to the scores (ALIBI_AFTER_SCALE, as BLOOM adds it, or
// ALIBI_BEFORE_SCALE, as Falcon does). out: the patterns, each sequence's heads' len x len
// patterns one after another (column-major, rows = queries) from the offset `pattern_at` gives;
// out2: each head's mixed values z, rows x heads * d_head. One group per (row, head):
// dispatched with group = (row - first_row) within x/z, head in y.

struct AttendSettings {
    rows: u32,
    heads: u32,
    d_head: u32,
    first_row: u32,
    row_count: u32,
    group: u32,
    scale: f32,
    patterns_first: u32,
    window: u32,
    soft_cap: u32,
    cap: f32,
    alibi: u32,
}

@group(0) @binding(0) var<uniform> attend_settings: AttendSettings;

const ALIBI_NONE: u32 = 0u;
const ALIBI_AFTER_SCALE: u32 = 1u;
const ALIBI_BEFORE_SCALE: u32 = 2u;

const KEYS: u32 = 64u;
var<workgroup> query: array<f32, 256>;

@compute @workgroup_size(64)
fn attend(
    @builtin(workgroup_id) group: vec3<u32>,
    @builtin(local_invocation_index) local: u32,
) {
    let s = attend_settings;
    let row = s.first_row + group.x + SPAN * group.z;
    let head = group.y;
    if (row >= s.first_row + s.row_count || head >= s.heads) {
        return;
    }
    let d_head = s.d_head;
    let start = rows_of[2u * row];
    let t = rows_of[2u * row + 1u];
    let len = rows_of[2u * s.rows + 2u * start];
    let pattern = rows_of[2u * s.rows + 2u * start + 1u] - s.patterns_first + head * len * len;
    let kv = head / s.group;
    let scale = s.scale;
    for (var j = local; j < d_head; j += KEYS) {
        query[j] = x[row + s.rows * (head * d_head + j)];
    }
    workgroupBarrier();

    var first = 0u;
    if (s.window > 0u && t + 1u > s.window) {
        first = t + 1u - s.window;
    }
    let cap = s.cap;
    var largest = -3.4e38;
    for (var key = first + local; key <= t; key += KEYS) {
        let key_row = start + key;
        var dot = 0.0;
        for (var j = 0u; j < d_head; j++) {
            dot += query[j] * y[key_row + s.rows * (kv * d_head + j)];
        }
        var score = dot * scale;
        if (s.alibi == ALIBI_AFTER_SCALE) {
            score = dot * scale + slopes[head] * f32(key);
        }
        if (s.alibi == ALIBI_BEFORE_SCALE) {
            score = (dot + slopes[head] * f32(key)) * scale;
        }
        if (s.soft_cap != 0u) {
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
            mixed += out[pattern + key * len + t] * w[start + key + s.rows * (kv * d_head + j)];
        }
        out2[row + s.rows * (head * d_head + j)] = mixed;
    }
}

// ---- activate: the MLP's nonlinearity on out (`count` entries), in place ----
// `activation`: one of the constants below; `gated`: out * act(x), x the gate.

struct ActivateSettings {
    count: u32,
    gated: u32,
    activation: u32,
    pad0: u32,
}

@group(0) @binding(0) var<uniform> activate_settings: ActivateSettings;

const RELU: u32 = 0u;
const GELU_TANH: u32 = 1u;
const GELU_ERF: u32 = 2u;
const SILU: u32 = 3u;

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
        case RELU: {
            return max(v, 0.0);
        }
        case GELU_TANH: {
            // tanh saturates to 1 in f32 long before 15; clamping keeps exp-based tanh finite.
            let inner = clamp(sqrt(2.0 / 3.14159265358979) * (v + 0.044715 * v * v * v), -15.0, 15.0);
            return 0.5 * v * (1.0 + tanh(inner));
        }
        case GELU_ERF: {
            return 0.5 * v * (1.0 + erf(v / 1.41421356237));
        }
        // SILU
        default: {
            return v / (1.0 + exp(-v));
        }
    }
}

@compute @workgroup_size(64)
fn activate(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let s = activate_settings;
    let e = id.x + 64u * groups.x * id.y;
    if (e >= s.count) {
        return;
    }
    if (s.gated != 0u) {
        out[e] = out[e] * act(s.activation, x[e]);
    } else {
        out[e] = act(s.activation, out[e]);
    }
}

// ---- weigh: out (=|+=) x times a weight per row ----
// x and out: rows x width; row i's weight is y[weights_first + i] (`per_row`: an expert's
// weight of each token), else `weight`; out is replaced (`replace`) or added to.

struct WeighSettings {
    rows: u32,
    width: u32,
    per_row: u32,
    replace: u32,
    weights_first: u32,
    weight: f32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> weigh_settings: WeighSettings;

@compute @workgroup_size(64)
fn weigh(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let s = weigh_settings;
    let e = id.x + 64u * groups.x * id.y;
    if (e >= s.rows * s.width) {
        return;
    }
    var weight = s.weight;
    if (s.per_row != 0u) {
        weight = y[s.weights_first + e % s.rows];
    }
    var value = x[e] * weight;
    if (s.replace == 0u) {
        value += out[e];
    }
    out[e] = value;
}

// ---- gather: out[i] = x[rows_of[i]] for the `count` cells asked for ----

struct GatherSettings {
    count: u32,
    pad0: u32,
    pad1: u32,
    pad2: u32,
}

@group(0) @binding(0) var<uniform> gather_settings: GatherSettings;

@compute @workgroup_size(64)
fn gather(@builtin(global_invocation_id) id: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let s = gather_settings;
    let e = id.x + 64u * groups.x * id.y;
    if (e < s.count) {
        out[e] = x[rows_of[e]];
    }
}

// ---- highest: each row's highest entry of x (rows x columns) and its column ----
// out[2 * row] the entry, out[2 * row + 1] its column (exact in f32 below 2^24); in the order of
// Rust's f32::total_cmp, the last of equal entries. One group per row.

struct HighestSettings {
    rows: u32,
    columns: u32,
    pad0: u32,
    pad1: u32,
}

@group(0) @binding(0) var<uniform> highest_settings: HighestSettings;

var<workgroup> top_key: array<i32, 256>;
var<workgroup> top_column: array<u32, 256>;

// f32::total_cmp's order as an i32's.
fn order_key(v: f32) -> i32 {
    let bits = bitcast<i32>(v);
    return bits ^ i32(u32(bits >> 31u) >> 1u);
}

@compute @workgroup_size(256)
fn highest(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_index) local: u32) {
    let s = highest_settings;
    let row = linear(group);
    if (row >= s.rows) {
        return;
    }
    // A thread's own columns, in increasing order: a later equal one replaces the best.
    var key = 0;
    var column = local;
    if (local < s.columns) {
        key = order_key(x[row + s.rows * local]);
    }
    for (var c = local + REDUCE; c < s.columns; c += REDUCE) {
        let k = order_key(x[row + s.rows * c]);
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
        if (local < half && local + half < s.columns) {
            let other = top_key[local + half];
            if (other > top_key[local] || (other == top_key[local] && top_column[local + half] > top_column[local])) {
                top_key[local] = other;
                top_column[local] = top_column[local + half];
            }
        }
        workgroupBarrier();
    }
    if (local == 0u) {
        out[2u * row] = x[row + s.rows * top_column[0]];
        out[2u * row + 1u] = f32(top_column[0]);
    }
}
