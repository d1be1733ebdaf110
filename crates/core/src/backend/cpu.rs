//! The CPU backend: blocks widened to f64 and multiplied by faer's gemm on every core (native)
//! or, in the tab, by the f64x2 SIMD kernel in `wasm_gemm.rs`. Every product is f64 from the
//! f32 weights, so the sums over blocks are the exact products up to f64 rounding
//! (tests/gram_precision.rs).

use nalgebra::{DMatrix, DMatrixView, DMatrixViewMut};

/// Rows widened to f64 at a time (a few MB).
pub const BLOCK_ROWS: usize = 1024;

/// `c += a b` in f64: every large f64 product of the analysis goes through here, so that one
/// place decides how it runs.
pub fn gemm(c: DMatrixViewMut<f64>, a: DMatrixView<f64>, b: DMatrixView<f64>) {
    assert!(
        c.nrows() == a.nrows() && a.ncols() == b.nrows() && c.ncols() == b.ncols(),
        "gemm: {}x{} += {}x{} times {}x{}",
        c.nrows(),
        c.ncols(),
        a.nrows(),
        a.ncols(),
        b.nrows(),
        b.ncols()
    );
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    {
        // In the tab matrixmultiply's dgemm is scalar; this SIMD kernel is faster there.
        use super::wasm_gemm::ColumnMajor;
        let (m, n, k) = (c.nrows(), c.ncols(), a.ncols());
        let (a, b) =
            (ColumnMajor { ptr: a.as_ptr(), cs: a.strides().1 }, ColumnMajor { ptr: b.as_ptr(), cs: b.strides().1 });
        let mut c = c;
        let c = ColumnMajor { ptr: c.as_mut_ptr(), cs: c.strides().1 };
        // SAFETY: the shapes were checked to agree above; these views have unit row stride by
        // their type, so pointer and column stride name exactly their elements; `c` is borrowed
        // mutably, so it cannot overlap `a` or `b`.
        unsafe { super::wasm_gemm::gemm(m, n, k, a, b, c) };
    }
    // faer's packed AVX2/AVX-512 kernels on every core (rayon): matrixmultiply, which
    // nalgebra's `gemm` calls, stops at 4 threads and is slower per core.
    #[cfg(not(target_arch = "wasm32"))]
    faer::linalg::matmul::matmul(faer_mut(c), faer::Accum::Add, faer_ref(a), faer_ref(b), 1.0, faer::Par::rayon(0));
    #[cfg(all(target_arch = "wasm32", not(target_feature = "simd128")))]
    // nalgebra's `gemm` goes through matrixmultiply; its `tr_mul` would be a loop of dot
    // products, far slower at vocabulary size.
    { c }.gemm(1.0, &a, &b, 1.0);
}

/// The same elements as a faer view.
#[cfg(not(target_arch = "wasm32"))]
fn faer_ref(m: DMatrixView<'_, f64>) -> faer::MatRef<'_, f64> {
    let (rows, cols) = (m.strides().0 as isize, m.strides().1 as isize);
    // SAFETY: pointer, shape and strides are the nalgebra view's own, so the faer view names
    // exactly its elements, borrowed for as long as the view is.
    unsafe { faer::MatRef::from_raw_parts(m.as_ptr(), m.nrows(), m.ncols(), rows, cols) }
}

/// The same elements as a mutable faer view.
#[cfg(not(target_arch = "wasm32"))]
fn faer_mut(mut m: DMatrixViewMut<'_, f64>) -> faer::MatMut<'_, f64> {
    let (rows, cols) = (m.strides().0 as isize, m.strides().1 as isize);
    // SAFETY: as in `faer_ref`; the view is borrowed mutably, so nothing else names its elements.
    unsafe { faer::MatMut::from_raw_parts_mut(m.as_mut_ptr(), m.nrows(), m.ncols(), rows, cols) }
}

/// `a b` in f64, through [`gemm`].
pub fn product(a: DMatrixView<f64>, b: DMatrixView<f64>) -> DMatrix<f64> {
    let mut c = DMatrix::zeros(a.nrows(), b.ncols());
    gemm(c.as_view_mut(), a, b);
    c
}

/// `a^T b` for the small per-head products (d_head x d_head over d_model). Natively on this
/// thread, reading `a^T` as a view: the heads are already spread over the cores, and splitting a
/// product this small costs more than it saves.
pub fn inner(a: DMatrixView<f64>, b: DMatrixView<f64>) -> DMatrix<f64> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        assert_eq!(a.nrows(), b.nrows(), "inner: {}x{} against {}x{}", a.nrows(), a.ncols(), b.nrows(), b.ncols());
        let mut c = DMatrix::zeros(a.ncols(), b.ncols());
        let (target, a, b) = (faer_mut(c.as_view_mut()), faer_ref(a).transpose(), faer_ref(b));
        faer::linalg::matmul::matmul(target, faer::Accum::Replace, a, b, 1.0, faer::Par::Seq);
        c
    }
    // The tab's kernel reads column-major operands only.
    #[cfg(target_arch = "wasm32")]
    product(a.transpose().as_view(), b)
}

/// `c = a b` on this thread: for products that are many and small, each thread its own.
pub fn product_here(c: DMatrixViewMut<f64>, a: DMatrixView<f64>, b: DMatrixView<f64>) {
    assert!(a.ncols() == b.nrows() && c.nrows() == a.nrows() && c.ncols() == b.ncols(), "product_here: shapes");
    #[cfg(not(target_arch = "wasm32"))]
    faer::linalg::matmul::matmul(faer_mut(c), faer::Accum::Replace, faer_ref(a), faer_ref(b), 1.0, faer::Par::Seq);
    // In the tab every worker is one thread already.
    #[cfg(target_arch = "wasm32")]
    {
        let mut c = c;
        c.fill(0.0);
        gemm(c, a, b);
    }
}

/// `c += a^T b` on every core, reading `a^T` as a view natively: for products whose inner
/// dimension is long and whose result is small (composition's Gram inner products).
pub fn add_inner(c: DMatrixViewMut<f64>, a: DMatrixView<f64>, b: DMatrixView<f64>) {
    assert!(a.nrows() == b.nrows() && c.nrows() == a.ncols() && c.ncols() == b.ncols(), "add_inner: shapes");
    #[cfg(not(target_arch = "wasm32"))]
    {
        let (a, b) = (faer_ref(a).transpose(), faer_ref(b));
        faer::linalg::matmul::matmul(faer_mut(c), faer::Accum::Add, a, b, 1.0, faer::Par::rayon(0));
    }
    // The tab's kernel reads column-major operands only: `a^T` copied (a slice of the rows).
    #[cfg(target_arch = "wasm32")]
    gemm(c, a.transpose().as_view(), b);
}

/// `a^T a`, exactly symmetric (its lower triangle mirrored): natively only the lower triangle is
/// computed, which is faster even for a head's 768 x 64 factor (`examples/products_bench.rs` times
/// both).
pub fn gram(a: DMatrixView<f64>) -> DMatrix<f64> {
    #[cfg(not(target_arch = "wasm32"))]
    {
        use faer::linalg::matmul::triangular::{BlockStructure, matmul};
        let mut c = DMatrix::zeros(a.ncols(), a.ncols());
        let (lower, full) = (BlockStructure::TriangularLower, BlockStructure::Rectangular);
        let (target, a) = (faer_mut(c.as_view_mut()), faer_ref(a));
        matmul(target, lower, faer::Accum::Replace, a.transpose(), full, a, full, 1.0, faer::Par::Seq);
        mirror_lower(&mut c);
        c
    }
    #[cfg(target_arch = "wasm32")]
    {
        let mut c = inner(a, a);
        mirror_lower(&mut c);
        c
    }
}

/// Rows of `U X` per product in [`upper_product`].
const TRIANGLE_PANEL: usize = 128;

/// `U X` for an upper-triangular U (d x d): a panel of rows at a time, each from its diagonal
/// block on (the zeros left of it skipped), half the work of a full product. (Natively faer's
/// own triangular product is slower for a layer's queries, keys and values, at GPT-2's width and
/// at 2048; `examples/products_bench.rs` times both.)
pub fn upper_product(upper: &DMatrix<f64>, x: &DMatrix<f64>) -> DMatrix<f64> {
    let d = upper.nrows();
    let mut y = DMatrix::zeros(d, x.ncols());
    for start in (0..d).step_by(TRIANGLE_PANEL) {
        let rows = TRIANGLE_PANEL.min(d - start);
        gemm(y.rows_mut(start, rows), upper.view((start, start), (rows, d - start)), x.rows(start, d - start));
    }
    y
}

/// `acc += A^T B`.
pub fn add_product(a: &DMatrix<f32>, b: &DMatrix<f32>, acc: &mut DMatrix<f64>) {
    gemm(acc.as_view_mut(), widened(a).transpose().as_view(), widened(b).as_view());
}

/// Columns of `A^T A` computed per product in [`add_gram_lower`] (in the tab).
#[cfg(target_arch = "wasm32")]
const SYRK_PANEL: usize = 128;

/// `acc += A^T A`, exactly symmetric: [`add_gram_lower`], then the lower triangle mirrored.
pub fn add_gram(a: &DMatrix<f32>, acc: &mut DMatrix<f64>) {
    add_gram_lower(a, acc);
    mirror_lower(acc);
}

/// `acc += A^T A` in the lower triangle only, as a SYRK (58% of the full product's work at
/// GPT-2's width); the upper triangle is left as it was, so a sum over many blocks mirrors once
/// at its end ([`mirror_lower`]). Natively faer's triangular product reads A^T as a view of A;
/// in the tab a panel of columns at a time, each from the diagonal down, goes through [`gemm`].
pub fn add_gram_lower(a: &DMatrix<f32>, acc: &mut DMatrix<f64>) {
    let a = widened(a);
    #[cfg(not(target_arch = "wasm32"))]
    {
        use faer::linalg::matmul::triangular::{BlockStructure, matmul};
        let view = faer_ref(a.as_view());
        let (lower, full) = (BlockStructure::TriangularLower, BlockStructure::Rectangular);
        let target = faer_mut(acc.as_view_mut());
        matmul(target, lower, faer::Accum::Add, view.transpose(), full, view, full, 1.0, faer::Par::rayon(0));
    }
    #[cfg(target_arch = "wasm32")]
    {
        let a_t = a.transpose();
        let n = a.ncols();
        for start in (0..n).step_by(SYRK_PANEL) {
            let width = SYRK_PANEL.min(n - start);
            let below = n - start;
            gemm(acc.view_mut((start, start), (below, width)), a_t.rows(start, below), a.columns(start, width));
        }
    }
}

/// `a` in f64, widened on every core natively (a block of vocabulary rows is megabytes, and
/// widening it on one thread left the other idle between products).
fn widened(a: &DMatrix<f32>) -> DMatrix<f64> {
    let source = a.as_slice();
    let mut wide = vec![0.0; source.len()];
    crate::parallel::each_chunk(&mut wide, 1 << 16, |start, chunk| {
        for (w, &v) in chunk.iter_mut().zip(&source[start..]) {
            *w = f64::from(v);
        }
    });
    DMatrix::from_vec(a.nrows(), a.ncols(), wide)
}

/// Edge of the square blocks [`mirror_lower`] copies in (a plain loop reads a whole row's stride
/// per element).
const MIRROR_BLOCK: usize = 32;

/// Copies the lower triangle onto the upper one.
pub fn mirror_lower(acc: &mut DMatrix<f64>) {
    let n = acc.nrows();
    for j0 in (0..n).step_by(MIRROR_BLOCK) {
        for i0 in (0..=j0).step_by(MIRROR_BLOCK) {
            for j in j0..(j0 + MIRROR_BLOCK).min(n) {
                for i in i0..(i0 + MIRROR_BLOCK).min(j) {
                    acc[(i, j)] = acc[(j, i)];
                }
            }
        }
    }
}
