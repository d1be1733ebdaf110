//! The tab's f64 GEMM (`backend::cpu::gemm`, which in wasm with SIMD is src/backend/wasm_gemm.rs)
//! against a plain triple loop, in wasm in headless Chromium:
//! `CHROMEDRIVER=/usr/bin/chromedriver cargo test --target wasm32-unknown-unknown --no-default-features --test wasm_gemm`
//!
//! Two checks per case. With small integer entries every product and partial sum is an exact
//! f64 integer, so any order of summation gives the same bits: the result must equal the loop's
//! exactly, which a wrong index, a lost edge or a double-counted block breaks. With random reals,
//! both sums are bounded by the classic a-priori bound `|fl(s) - s| <= gamma_(k+1) sum |terms|`
//! (gamma_n = n u / (1 - n u), u = 2^-53); the two can differ by at most twice that, element by
//! element. At these sizes it is about 1e-13 relative to `sum |terms|`.
#![cfg(target_arch = "wasm32")]

use headprint::backend::cpu::{add_gram, gemm, product};
use nalgebra::{DMatrix, DMatrixView, DMatrixViewMut};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

// Without simd128 `gemm` would be matrixmultiply's, and this file would not test the kernel.
#[cfg(not(target_feature = "simd128"))]
compile_error!("tests/wasm_gemm.rs tests the wasm SIMD kernel: build with +simd128 (.cargo/config.toml)");

/// xorshift64*: reproducible values without a dependency.
struct Values(u64);

impl Values {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// Uniform in [-1, 1).
    fn real(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }
    /// An integer in -8..=8.
    fn small_integer(&mut self) -> f64 {
        (self.next() % 17) as f64 - 8.0
    }
    fn matrix(&mut self, rows: usize, columns: usize, integers: bool) -> DMatrix<f64> {
        DMatrix::from_fn(rows, columns, |_, _| if integers { self.small_integer() } else { self.real() })
    }
}

/// `c0 + a b` by the definition, and `|c0| + |a| |b|` (the sum of the terms' magnitudes).
fn reference(c0: &DMatrix<f64>, a: &DMatrixView<f64>, b: &DMatrixView<f64>) -> (DMatrix<f64>, DMatrix<f64>) {
    let mut sum = c0.clone();
    let mut magnitude = c0.abs();
    for i in 0..a.nrows() {
        for j in 0..b.ncols() {
            for p in 0..a.ncols() {
                sum[(i, j)] += a[(i, p)] * b[(p, j)];
                magnitude[(i, j)] += (a[(i, p)] * b[(p, j)]).abs();
            }
        }
    }
    (sum, magnitude)
}

/// Runs `gemm(c, a, b)` and checks it against [`reference`] as the module comment says.
fn check(what: &str, c: DMatrixViewMut<f64>, a: DMatrixView<f64>, b: DMatrixView<f64>, integers: bool) {
    let c0 = c.clone_owned();
    let (expected, magnitude) = reference(&c0, &a, &b);
    let k = a.ncols() as f64;
    let u = f64::EPSILON / 2.0;
    let gamma = (k + 1.0) * u / (1.0 - (k + 1.0) * u);
    let mut c = c;
    gemm(c.as_view_mut(), a, b);
    for i in 0..c.nrows() {
        for j in 0..c.ncols() {
            let (got, want) = (c[(i, j)], expected[(i, j)]);
            if integers {
                assert_eq!(got, want, "{what}: ({i}, {j}) with integer entries");
            } else {
                let bound = 2.0 * gamma * magnitude[(i, j)];
                assert!(
                    (got - want).abs() <= bound,
                    "{what}: ({i}, {j}) is {got}, the loop gives {want}, bound {bound:e}"
                );
            }
        }
    }
}

#[wasm_bindgen_test]
fn gemm_matches_the_definition_on_ragged_shapes() {
    let mut values = Values(0x5eed_0001);
    // (m, n, k): single rows and columns, k = 1, sizes off the 4x4 tile, and past the packed
    // blocks' edges (KC = 256 deep, MC = 64 rows, NC = 1024 columns).
    let shapes = [
        (1, 1, 1),
        (1, 9, 5),
        (9, 1, 5),
        (7, 5, 1),
        (3, 2, 7),
        (4, 4, 4),
        (17, 13, 11),
        (131, 6, 300),
        (5, 1030, 257),
        (130, 67, 513),
    ];
    for integers in [true, false] {
        for &(m, n, k) in &shapes {
            let a = values.matrix(m, k, integers);
            let b = values.matrix(k, n, integers);
            let mut c = values.matrix(m, n, integers);
            check(&format!("{m}x{k} times {k}x{n}"), c.as_view_mut(), a.as_view(), b.as_view(), integers);
        }
    }
}

#[wasm_bindgen_test]
fn gemm_reads_and_writes_sub_views() {
    let mut values = Values(0x5eed_0002);
    for integers in [true, false] {
        let (m, n, k) = (37, 29, 270);
        // `a` rows of a larger matrix, as `add_gram` takes them from the transpose: column
        // stride 44 != its 37 rows. (`gemm`'s views have unit row stride by their type.)
        let big_a = values.matrix(44, k, integers);
        let a = big_a.rows(3, m);
        // `b` a block inside a larger matrix: column stride 300 != its 270 rows.
        let big_b = values.matrix(300, 40, integers);
        let b = big_b.view((13, 5), (k, n));
        // `c` a block inside a larger matrix, whose other elements must stay as they were.
        let mut big_c = values.matrix(50, 45, integers);
        let before = big_c.clone();
        check("transposed a, sub-view b and c", big_c.view_mut((6, 11), (m, n)), a, b, integers);
        for i in 0..big_c.nrows() {
            for j in 0..big_c.ncols() {
                if !((6..6 + m).contains(&i) && (11..11 + n).contains(&j)) {
                    assert_eq!(big_c[(i, j)], before[(i, j)], "({i}, {j}) is outside c but changed");
                }
            }
        }
        // The SYRK panel's shape as `add_gram` asks: rows of a transpose times columns.
        let stored = values.matrix(k, 12, integers);
        let transposed = stored.transpose();
        let mut acc = values.matrix(12, 12, integers);
        check("a Gram panel", acc.view_mut((4, 4), (8, 3)), transposed.rows(4, 8), stored.columns(4, 3), integers);
    }
}

#[wasm_bindgen_test]
fn gemm_with_nothing_to_add_leaves_c_alone() {
    let mut values = Values(0x5eed_0003);
    let mut c = values.matrix(6, 5, false);
    let before = c.clone();
    gemm(c.as_view_mut(), DMatrix::<f64>::zeros(6, 0).as_view(), DMatrix::<f64>::zeros(0, 5).as_view());
    assert_eq!(c, before);
    assert_eq!(product(DMatrix::<f64>::zeros(0, 3).as_view(), values.matrix(3, 4, false).as_view()).shape(), (0, 4));
}

#[wasm_bindgen_test]
fn add_gram_is_the_exact_symmetric_gram_of_integer_rows() {
    // 300 columns: three of add_gram's 128-column SYRK panels, the last ragged.
    let mut values = Values(0x5eed_0004);
    let a = DMatrix::<f32>::from_fn(70, 300, |_, _| values.small_integer() as f32);
    let mut acc = DMatrix::<f64>::zeros(300, 300);
    add_gram(&a, &mut acc);
    let wide = a.map(f64::from);
    let (expected, _) = reference(&DMatrix::zeros(300, 300), &wide.transpose().as_view(), &wide.as_view());
    assert_eq!(acc, expected);
}
