//! `C += A B` in f64 with WebAssembly SIMD (`f64x2`): [`super::cpu::gemm`] in the tab. It exists
//! because no crate gives a fast one: matrixmultiply's wasm SIMD kernel is f32 only (its dgemm runs
//! the generic scalar kernel there), and the `gemm` crate's (faer's) f64x2 kernel is slower still.
//! This one is about twice as fast as either on every shape the analysis uses, in Chromium and in
//! node (docs/architecture.md#backends-where-the-large-products-run).
//!
//! The usual blocked GEMM (Goto / BLIS): B is packed `KC x NC` at a time into panels `NR`
//! columns wide, A `MC x KC` at a time into panels `MR` rows tall, both contiguous in the order
//! the micro-kernel reads them and zero-padded at ragged edges; the micro-kernel keeps an
//! `MR x NR` tile of C in registers (`MR / 2` f64x2 vectors per column) over the `KC` depth.
//! The tile is 4x4, the fastest of 4x4, 6x4, 8x4, 4x6, 4x8, 6x6 and 8x2 (larger ones spill
//! registers in V8). Plain multiply and add, no fused multiply-add: relaxed SIMD's
//! `f64x2.relaxed_madd` would make Safari reject the whole module.

use core::arch::wasm32::{f64x2_add, f64x2_mul, f64x2_splat, v128, v128_load, v128_store};

/// Rows of C per micro-tile (`MR / 2` vectors).
const MR: usize = 4;
/// Columns of C per micro-tile.
const NR: usize = 4;
/// Depth of a packed block: a `KC x NR` panel of B stays in L1 while A's panels stream past.
const KC: usize = 256;
/// Rows of A packed at a time (`MC x KC` f64, 128 KiB: L2). 64 and 128 run alike, 64 a little
/// ahead in Chromium.
const MC: usize = 64;
/// Columns of B packed at a time (`KC x NC` f64, 2 MiB).
const NC: usize = 1024;

/// A column-major matrix (as nalgebra's views are) by its pointer and column stride in
/// elements: element `(i, j)` at `ptr + i + j * cs`.
#[derive(Clone, Copy)]
pub struct ColumnMajor<P> {
    pub ptr: P,
    pub cs: usize,
}

/// `c += a b` for an `m x k` `a`, `k x n` `b` and `m x n` `c`.
///
/// # Safety
/// Every element `(i, j)` named by the shapes and strides must be valid to read (`a`, `b`) or to
/// read and write (`c`), and `c` must not overlap `a` or `b`.
pub unsafe fn gemm(
    m: usize,
    n: usize,
    k: usize,
    a: ColumnMajor<*const f64>,
    b: ColumnMajor<*const f64>,
    c: ColumnMajor<*mut f64>,
) {
    if m == 0 || n == 0 || k == 0 {
        return;
    }
    let mut packed_b = vec![0.0f64; KC * NC.min(n).next_multiple_of(NR)];
    let mut packed_a = vec![0.0f64; KC * MC.min(m).next_multiple_of(MR)];
    for jc in (0..n).step_by(NC) {
        let nc = NC.min(n - jc);
        for pc in (0..k).step_by(KC) {
            let kc = KC.min(k - pc);
            unsafe { pack_b(&mut packed_b, b, pc, kc, jc, nc) };
            for ic in (0..m).step_by(MC) {
                let mc = MC.min(m - ic);
                unsafe { pack_a(&mut packed_a, a, ic, mc, pc, kc) };
                for jr in (0..nc).step_by(NR) {
                    let nr = NR.min(nc - jr);
                    let b_panel = &packed_b[jr * kc..(jr + NR) * kc];
                    for ir in (0..mc).step_by(MR) {
                        let mr = MR.min(mc - ir);
                        let a_panel = &packed_a[ir * kc..(ir + MR) * kc];
                        let tile = micro_kernel(kc, a_panel, b_panel);
                        unsafe { add_tile(&tile, c, ic + ir, mr, jc + jr, nr) };
                    }
                }
            }
        }
    }
}

/// Packs rows `i0..i0 + mc`, columns `p0..p0 + kc` of `a` into `MR`-row panels: panel `r`,
/// depth `p` holds rows `r * MR ..` contiguously; rows past `mc` are zero.
unsafe fn pack_a(dst: &mut [f64], a: ColumnMajor<*const f64>, i0: usize, mc: usize, p0: usize, kc: usize) {
    for (r, panel) in dst.chunks_exact_mut(MR * kc).take(mc.div_ceil(MR)).enumerate() {
        let rows = MR.min(mc - r * MR);
        for (p, column) in panel.chunks_exact_mut(MR).enumerate() {
            for (ii, value) in column.iter_mut().enumerate() {
                *value = if ii < rows { unsafe { *a.ptr.add(i0 + r * MR + ii + (p0 + p) * a.cs) } } else { 0.0 };
            }
        }
    }
}

/// Packs rows `p0..p0 + kc`, columns `j0..j0 + nc` of `b` into `NR`-column panels: panel `s`,
/// depth `p` holds columns `s * NR ..` contiguously; columns past `nc` are zero.
unsafe fn pack_b(dst: &mut [f64], b: ColumnMajor<*const f64>, p0: usize, kc: usize, j0: usize, nc: usize) {
    for (s, panel) in dst.chunks_exact_mut(NR * kc).take(nc.div_ceil(NR)).enumerate() {
        let columns = NR.min(nc - s * NR);
        for (p, row) in panel.chunks_exact_mut(NR).enumerate() {
            for (jj, value) in row.iter_mut().enumerate() {
                *value = if jj < columns { unsafe { *b.ptr.add(p0 + p + (j0 + s * NR + jj) * b.cs) } } else { 0.0 };
            }
        }
    }
}

/// The `MR x NR` tile `A_panel B_panel` over depth `kc`, column by column (`MR / 2` vectors each).
#[inline(always)]
fn micro_kernel(kc: usize, a_panel: &[f64], b_panel: &[f64]) -> [[v128; MR / 2]; NR] {
    let mut acc = [[f64x2_splat(0.0); MR / 2]; NR];
    let a_panel = &a_panel[..kc * MR];
    let b_panel = &b_panel[..kc * NR];
    for (a, b) in a_panel.chunks_exact(MR).zip(b_panel.chunks_exact(NR)) {
        // SAFETY: `a` has MR elements, read two at a time (v128_load needs no alignment).
        let av: [v128; MR / 2] = core::array::from_fn(|v| unsafe { v128_load(a.as_ptr().add(2 * v).cast()) });
        for (j, column) in acc.iter_mut().enumerate() {
            let bj = f64x2_splat(b[j]);
            for (sum, av) in column.iter_mut().zip(av) {
                *sum = f64x2_add(*sum, f64x2_mul(av, bj));
            }
        }
    }
    acc
}

/// Adds the top-left `mr x nr` of `tile` into `c` at `(i0, j0)`.
unsafe fn add_tile(tile: &[[v128; MR / 2]; NR], c: ColumnMajor<*mut f64>, i0: usize, mr: usize, j0: usize, nr: usize) {
    for (j, column) in tile.iter().enumerate().take(nr) {
        // SAFETY (all below): the caller's contract covers every (i0 + i, j0 + j) in the tile.
        let base = unsafe { c.ptr.add(i0 + (j0 + j) * c.cs) };
        if mr == MR {
            for (v, sum) in column.iter().enumerate() {
                let at = unsafe { base.add(2 * v) };
                unsafe { v128_store(at.cast(), f64x2_add(v128_load(at.cast()), *sum)) };
            }
        } else {
            let mut values = [0.0f64; MR];
            for (v, sum) in column.iter().enumerate() {
                unsafe { v128_store(values.as_mut_ptr().add(2 * v).cast(), *sum) };
            }
            for (i, value) in values.iter().enumerate().take(mr) {
                unsafe { *base.add(i) += value };
            }
        }
    }
}
