// Weights widened to f32 on the device (narrow.rs): a bf16 or f16 file's values cross to the GPU
// in their own two bytes, two to a u32 (the first in the low half), and are widened here into
// the f32 buffer the products read. Both widenings are exact.
//
// `packed` is bound at exactly its pairs and `values` at exactly its entries: their lengths are
// the bindings' own.

// The numbers are narrow.rs's `binding` constants.
@group(0) @binding(0) var<storage, read> packed: array<u32>;
@group(0) @binding(1) var<storage, read_write> values: array<f32>;

// A dispatch's groups beyond 65 535 go on in y.
const SPAN: u32 = 65535u;
const GROUP: u32 = 64u;

// bf16 is the upper half of an f32.
fn from_bf16(half: u32) -> f32 {
    return bitcast<f32>(half << 16u);
}

// f16 by its fields, not `unpack2x16float`, which may flush subnormals to zero. A subnormal is
// its mantissa times 2^-24: a normal f32, so `ldexp` is exact. Non-finite values never get here
// (the weights' reader refuses them).
fn from_f16(half: u32) -> f32 {
    let sign = (half & 0x8000u) << 16u;
    let exponent = (half >> 10u) & 0x1fu;
    let mantissa = half & 0x3ffu;
    if (exponent == 0u) {
        return bitcast<f32>(sign | bitcast<u32>(ldexp(f32(mantissa), -24)));
    }
    return bitcast<f32>(sign | ((exponent + 112u) << 23u) | (mantissa << 13u));
}

fn pair(group: vec3<u32>, local: vec3<u32>) -> u32 {
    return (group.x + SPAN * group.y) * GROUP + local.x;
}

fn from_16_bits(half: u32, is_f16: bool) -> f32 {
    if (is_f16) {
        return from_f16(half);
    }
    return from_bf16(half);
}

// Pair `i`: its first value from the low half, its second (if the values have one) from the high.
fn widen(i: u32, is_f16: bool) {
    if (i >= arrayLength(&packed)) {
        return;
    }
    let word = packed[i];
    values[2u * i] = from_16_bits(word & 0xffffu, is_f16);
    if (2u * i + 1u < arrayLength(&values)) {
        values[2u * i + 1u] = from_16_bits(word >> 16u, is_f16);
    }
}

@compute @workgroup_size(64)
fn widen_bf16(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>) {
    widen(pair(group, local), false);
}

@compute @workgroup_size(64)
fn widen_f16(@builtin(workgroup_id) group: vec3<u32>, @builtin(local_invocation_id) local: vec3<u32>) {
    widen(pair(group, local), true);
}
