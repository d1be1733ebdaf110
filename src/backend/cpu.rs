//! The CPU backend: blocks widened to f64 and multiplied by matrixmultiply's blocked gemm
//! (threaded on native). Every product is f64 from the f32 weights, so the sums over blocks
//! are the exact products up to f64 rounding (tests/gram_precision.rs).

use nalgebra::DMatrix;

/// Rows widened to f64 at a time (a few MB).
pub const BLOCK_ROWS: usize = 1024;

/// `acc += A^T B`.
pub fn add_product(a: &DMatrix<f32>, b: &DMatrix<f32>, acc: &mut DMatrix<f64>) {
    // `gemm` goes through matrixmultiply; nalgebra's `tr_mul` would be a loop of dot
    // products, 20x slower at vocabulary size.
    acc.gemm(1.0, &a.map(f64::from).transpose(), &b.map(f64::from), 1.0);
}

/// `acc += A^T A`.
pub fn add_gram(a: &DMatrix<f32>, acc: &mut DMatrix<f64>) {
    let a = a.map(f64::from);
    acc.gemm(1.0, &a.transpose(), &a, 1.0);
}
