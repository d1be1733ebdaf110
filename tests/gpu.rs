//! The GPU backend against the CPU: its kernels on odd shapes against float64 loops, the Gram
//! matrices (1e-5 relative) and every fingerprint quantity (1e-4) on every fixture and on the
//! demo model, and the fallback to the CPU when the GPU fails.
//!
//! These run on whatever adapter `--backend gpu` would take; on a machine without a GPU that
//! is Mesa's lavapipe (`apt-get install mesa-vulkan-drivers`, as scripts/setup.sh does). With
//! no adapter at all they fail, saying so: a GPU test never passes without a GPU.
#![cfg(all(feature = "gpu", not(target_arch = "wasm32")))]

use crate::common;

use common::{assert_same_spectrum, fixture};
use headprint::Error;
use headprint::analysis::circuits::Grams;
use headprint::analysis::{Mode, fingerprint_stream_with};
use headprint::backend::gpu::Arithmetic;
use headprint::backend::{Backend, BackendChoice, Blocks, ColumnRun, Columns, Factor, Fold, block_on, moved_between};
use headprint::model::{ModelStream, Norm, NormKind};
use headprint::weights::{MemorySource, ModelFiles};
use std::sync::Arc;

use nalgebra::{DMatrix, DVector};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// Relative tolerance of the GPU's Gram matrices (per entry, see `assert_gram_close`). The
/// split-product kernels give ~1e-11, and 1e-9 would catch a kernel that fell back to plain f32
/// sums (~1e-7).
const GRAM_TOLERANCE: f64 = 1e-9;
/// Relative tolerance of every fingerprint quantity computed through the GPU's Grams.
const FINGERPRINT_TOLERANCE: f64 = 1e-4;

fn gpu() -> Backend {
    match Backend::select(BackendChoice::Gpu) {
        Ok(backend) => backend,
        Err(e) => panic!(
            "no GPU adapter for the GPU tests ({e}). Install a Vulkan driver; without a GPU, \
             Mesa's lavapipe: apt-get install -y mesa-vulkan-drivers (scripts/setup.sh does)"
        ),
    }
}

/// `Σ A^T B` over the blocks (`A^T A` where B is None), summed on `backend` and read back.
fn summed(backend: &mut Backend, blocks: &[(&DMatrix<f32>, Option<&DMatrix<f32>>)]) -> headprint::Result<DMatrix<f64>> {
    let (a, b) = blocks[0];
    let mut sum = block_on(backend.sum(a.ncols(), b.unwrap_or(a).ncols()))?;
    for &(a, b) in blocks {
        match b {
            Some(b) => block_on(backend.add_product(a, b, &mut sum))?,
            None => block_on(backend.add_gram(a, &mut sum))?,
        }
    }
    block_on(backend.read(sum))
}

fn random(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> DMatrix<f32> {
    DMatrix::from_fn(rows, cols, |_, _| rng.random_range(-1.0f32..1.0))
}

/// `A^T B` by plain float64 loops.
fn product_f64(a: &DMatrix<f32>, b: &DMatrix<f32>) -> DMatrix<f64> {
    DMatrix::from_fn(a.ncols(), b.ncols(), |i, j| (0..a.nrows()).map(|k| a[(k, i)] as f64 * b[(k, j)] as f64).sum())
}

/// Every entry within `tolerance` of the reference, relative to the scale Cauchy-Schwarz gives
/// that entry: `|g_ij - w_ij| <= tolerance * sqrt(Σ a_ki² · Σ b_kj²)`. An entry that cancels to
/// near zero is held to the size of the terms it sums, not to its own (tiny) size.
fn assert_product_close(
    got: &DMatrix<f64>,
    want: &DMatrix<f64>,
    a: &DMatrix<f32>,
    b: &DMatrix<f32>,
    tolerance: f64,
    what: &str,
) {
    assert_product_close_f64(got, want, &a.map(f64::from), &b.map(f64::from), tolerance, what);
}

/// [`assert_product_close`] for f64 operands (`got` ≈ `A^T B`).
fn assert_product_close_f64(
    got: &DMatrix<f64>,
    want: &DMatrix<f64>,
    a: &DMatrix<f64>,
    b: &DMatrix<f64>,
    tolerance: f64,
    what: &str,
) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let norms = |m: &DMatrix<f64>| -> Vec<f64> {
        m.column_iter().map(|c| c.iter().map(|&v| v * v).sum::<f64>().sqrt()).collect()
    };
    let (na, nb) = (norms(a), norms(b));
    let mut worst: f64 = 0.0;
    for j in 0..got.ncols() {
        for i in 0..got.nrows() {
            let scale = na[i] * nb[j];
            let error = (got[(i, j)] - want[(i, j)]).abs();
            worst = worst.max(error / scale);
            assert!(
                error <= tolerance * scale,
                "{what}: entry ({i}, {j}) is {}, expected {} (scale {scale})",
                got[(i, j)],
                want[(i, j)]
            );
        }
    }
    eprintln!("{what}: worst relative error {worst:e}");
}

/// The kernels' products against float64 loops, relative to each entry's Cauchy-Schwarz scale:
/// far below f32's 6e-8, which plain f32 sums cannot reach.
const KERNEL_TOLERANCE: f64 = 1e-9;
/// The same for f64 arithmetic (the CPU, a GPU's native f64), which keeps far more than the
/// f32 pairs' 2^-36: the results come back as two f32 parts, 2^-48 of each entry.
const F64_TOLERANCE: f64 = 1e-12;

/// A GPU computing with `arithmetic` where the adapter offers it (else with f32 pairs).
fn gpu_with(arithmetic: Arithmetic) -> Backend {
    block_on(Backend::gpu_preferring(arithmetic)).unwrap_or_else(|e| panic!("no GPU adapter for the GPU tests ({e})"))
}

/// The backends whose products must agree: the CPU, and the GPU with each kernel it offers.
fn every_backend() -> Vec<Backend> {
    let f64_gpu = gpu_with(Arithmetic::F64);
    let pairs_gpu = gpu_with(Arithmetic::F32Pairs);
    assert_eq!(pairs_gpu.info().arithmetic.as_deref(), Some("f32 pairs"));
    vec![Backend::cpu(), f64_gpu, pairs_gpu]
}

/// The tolerance a backend's products are held to.
fn kernel_tolerance(backend: &Backend) -> f64 {
    match backend.info().arithmetic.as_deref() {
        Some("f32 pairs") => KERNEL_TOLERANCE,
        _ => F64_TOLERANCE,
    }
}

/// "cpu", "gpu f64" or "gpu f32 pairs", for messages.
fn named(backend: &Backend) -> String {
    let info = backend.info();
    [Some(info.name), info.arithmetic].into_iter().flatten().collect::<Vec<_>>().join(" ")
}

// The product tests below run one body on every backend: the CPU and the GPU's kernels must
// give the same sums, each to its tolerance, and refuse the same mistakes.

#[test]
fn products_match_float64_loops_on_odd_shapes_on_every_backend() {
    for mut backend in every_backend() {
        products_match_float64_loops_on_odd_shapes(&mut backend);
    }
}

fn products_match_float64_loops_on_odd_shapes(backend: &mut Backend) {
    let (tolerance, name) = (kernel_tolerance(backend), named(backend));
    let mut rng = ChaCha8Rng::seed_from_u64(9);
    // Rows, m, n: single rows, fewer rows than one 16-row step, shapes that are no multiple of
    // the 64-wide tile, one column, a tile and one more.
    for (rows, m, n) in
        [(1, 1, 1), (1, 70, 3), (7, 65, 65), (17, 64, 129), (100, 1, 200), (333, 130, 67), (1000, 96, 96)]
    {
        let (a, b) = (random(rows, m, &mut rng), random(rows, n, &mut rng));
        let product = summed(backend, &[(&a, Some(&b))]).expect("product");
        assert_product_close(
            &product,
            &product_f64(&a, &b),
            &a,
            &b,
            tolerance,
            &format!("{name}: A^T B, {rows}x{m} by {rows}x{n}"),
        );

        let gram = summed(backend, &[(&a, None)]).expect("gram");
        assert_product_close(&gram, &product_f64(&a, &a), &a, &a, tolerance, &format!("{name}: A^T A, {rows}x{m}"));
        assert_eq!(gram, gram.transpose(), "A^T A is exactly symmetric");
    }
}

#[test]
fn blocks_sum_on_every_backend() {
    for mut backend in every_backend() {
        blocks_sum(&mut backend);
    }
}

/// Blocks of different heights summed on the backend (with segments closed between them, as the
/// Grams close theirs) are the product of all their rows: each block adds to what the sum holds.
fn blocks_sum(backend: &mut Backend) {
    let (tolerance, name) = (kernel_tolerance(backend), named(backend));
    let mut rng = ChaCha8Rng::seed_from_u64(10);
    let heights = [50, 1, 130, 17];
    let a: Vec<_> = heights.iter().map(|&rows| random(rows, 20, &mut rng)).collect();
    let b: Vec<_> = heights.iter().map(|&rows| random(rows, 70, &mut rng)).collect();
    let stacked = |blocks: &[DMatrix<f32>]| {
        let rows: Vec<_> =
            blocks.iter().flat_map(|m| m.row_iter().map(|r| r.into_owned()).collect::<Vec<_>>()).collect();
        DMatrix::from_rows(&rows)
    };
    let (all_a, all_b) = (stacked(&a), stacked(&b));
    let mut product = block_on(backend.sum(20, 70)).unwrap();
    let mut gram = block_on(backend.sum(20, 20)).unwrap();
    for (a, b) in a.iter().zip(&b) {
        block_on(backend.add_product(a, b, &mut product)).unwrap();
        block_on(backend.add_gram(a, &mut gram)).unwrap();
        product.end_segment();
        gram.end_segment();
    }
    let (product, gram) = (block_on(backend.read(product)).unwrap(), block_on(backend.read(gram)).unwrap());
    let what = format!("{name}: A^T B over four blocks");
    assert_product_close(&product, &product_f64(&all_a, &all_b), &all_a, &all_b, tolerance, &what);
    let what = format!("{name}: A^T A over four blocks");
    assert_product_close(&gram, &product_f64(&all_a, &all_a), &all_a, &all_a, tolerance, &what);
    assert_eq!(gram, gram.transpose(), "A^T A is exactly symmetric");

    // An untied model's three Grams from each block at once: the same sums, each block sent once.
    let (mut a_gram, mut b_gram) = (block_on(backend.sum(20, 20)).unwrap(), block_on(backend.sum(70, 70)).unwrap());
    let mut b_a = block_on(backend.sum(70, 20)).unwrap();
    let before = backend.bytes_moved();
    for (a, b) in a.iter().zip(&b) {
        block_on(backend.add_both(a, b, &mut a_gram, &mut b_a, &mut b_gram)).unwrap();
    }
    if let (Some((to_before, _)), Some((to_after, _))) = (before, backend.bytes_moved()) {
        // Each block once, and a 64-byte shape for each of the three products.
        let blocks = 4 * (all_a.len() + all_b.len()) as u64;
        assert_eq!(to_after - to_before, blocks + 4 * 3 * 64, "{name}: each block goes over once");
    }
    let read = |sum| block_on(backend.read(sum)).unwrap();
    let (a_gram, b_a, b_gram) = (read(a_gram), read(b_a), read(b_gram));
    let what = format!("{name}: the three Grams of four block pairs");
    assert_product_close(&a_gram, &product_f64(&all_a, &all_a), &all_a, &all_a, tolerance, &what);
    assert_product_close(&b_a, &product_f64(&all_b, &all_a), &all_b, &all_a, tolerance, &what);
    assert_product_close(&b_gram, &product_f64(&all_b, &all_b), &all_b, &all_b, tolerance, &what);
    assert!(a_gram == a_gram.transpose() && b_gram == b_gram.transpose(), "{what}: exactly symmetric");

    let mut wrong = block_on(backend.sum(3, 3)).unwrap();
    assert!(
        matches!(block_on(backend.add_product(&a[0], &b[0], &mut wrong)), Err(Error::Internal(_))),
        "a mis-shaped sum is an error"
    );
    let (mut x, mut y) = (block_on(backend.sum(20, 20)).unwrap(), block_on(backend.sum(70, 70)).unwrap());
    assert!(
        matches!(block_on(backend.add_both(&a[0], &b[0], &mut x, &mut wrong, &mut y)), Err(Error::Internal(_))),
        "a mis-shaped sum of three is an error"
    );
    let mut mixed = block_on(backend.sum(20, 20)).unwrap();
    block_on(backend.add_gram(&a[0], &mut mixed)).unwrap();
    assert!(block_on(backend.add_product(&a[0], &a[0], &mut mixed)).is_err(), "Grams and products in one sum");
}

/// A long block of same-signed terms, the hard case for f32 sums: 30000 rows sharing a common
/// direction (as trained embeddings do), in one dispatch. The split products and error-free
/// sums keep each entry within KERNEL_TOLERANCE of the float64 sum (a plain f32 sum is not).
#[test]
fn long_blocks_keep_their_precision_on_every_backend() {
    for mut backend in every_backend() {
        if backend.is_gpu() {
            assert!(backend.block_rows(40) >= 30_000, "the whole block goes in one dispatch");
        }
        long_blocks_keep_their_precision(&mut backend);
    }
}

fn long_blocks_keep_their_precision(backend: &mut Backend) {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let common = random(1, 40, &mut rng);
    let mut a = random(30_000, 40, &mut rng);
    for mut row in a.row_iter_mut() {
        row += &common;
    }
    let gram = summed(backend, &[(&a, None)]).unwrap();
    let what = format!("{}: A^T A of 30000 rows", named(backend));
    assert_product_close(&gram, &product_f64(&a, &a), &a, &a, kernel_tolerance(backend), &what);
}

/// `A X` of f64 matrices, as each layer's products through the Grams run: every entry of A and
/// X carries bits beyond f32 (uniform f64s), so a kernel that dropped each value's rest would
/// be off by ~1e-8 of the terms; the two-part inputs keep each kernel's tolerance. The shapes include
/// odd ones, an upper-triangular A, and more columns than one dispatch takes.
#[test]
fn wide_products_keep_what_f64_holds() {
    for backend in every_backend() {
        wide_products_on(backend);
    }
}

fn wide_products_on(mut backend: Backend) {
    let (tolerance, name) = (kernel_tolerance(&backend), named(&backend));
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    let mut random_f64 = |rows: usize, cols: usize| DMatrix::from_fn(rows, cols, |_, _| rng.random_range(-1.0..1.0));
    for (m, k, n, form) in [
        (1, 1, 1, Factor::General),
        (70, 130, 75, Factor::General),
        (65, 17, 3, Factor::General),
        (96, 96, 40, Factor::UpperTriangular),
        (64, 64, 2100, Factor::General),
    ] {
        let mut a = random_f64(m, k);
        if form == Factor::UpperTriangular {
            a.fill_lower_triangle(0.0, 1);
        }
        let x = random_f64(k, n);
        let a = Arc::new(a);
        let got = block_on(backend.multiply(&a, form, &x)).expect("product");
        let want = DMatrix::from_fn(m, n, |i, j| (0..k).map(|l| a[(i, l)] * x[(l, j)]).sum::<f64>());
        let what = format!("{name}: A X, {m}x{k} by {k}x{n} ({form:?})");
        assert_product_close_f64(&got, &want, &a.transpose(), &x, tolerance, &what);
    }
    if backend.is_gpu() {
        let wrong = Arc::new(DMatrix::zeros(3, 4));
        assert!(matches!(block_on(backend.multiply(&wrong, Factor::General, &wrong)), Err(Error::Gpu(_))));
    }
}

/// Products of column blocks of kept matrices (each layer's heads' small products) against
/// float64 loops: blocks read one by one and shared by a group (grouped-query heads), from a
/// matrix kept as it is and wider than one chunk on the device (2048 columns), from a product
/// left where it was computed and from the X kept beside it; a block's product with itself is exactly symmetric, and
/// a block past the matrix's end is refused.
#[test]
fn column_products_match_float64_loops_on_every_backend() {
    for backend in every_backend() {
        column_products_on(backend);
    }
}

fn column_products_on(mut backend: Backend) {
    let (tolerance, name) = (kernel_tolerance(&backend), named(&backend));
    let mut rng = ChaCha8Rng::seed_from_u64(15);
    let mut random_f64 = |rows: usize, cols: usize| DMatrix::from_fn(rows, cols, |_, _| rng.random_range(-1.0..1.0));
    let (rows, width) = (45, 7);
    let wide = random_f64(rows, 300 * width);
    let (a, x) = (Arc::new(random_f64(rows, 33)), random_f64(33, 10 * width));
    let product = DMatrix::from_fn(rows, x.ncols(), |i, j| (0..33).map(|l| a[(i, l)] * x[(l, j)]).sum::<f64>());
    let kept_wide = block_on(backend.keep(wide.clone(), width, None)).expect("kept");
    let (kept_product, kept_x) =
        block_on(backend.multiply_keeping_both(&a, Factor::General, x.clone(), width, None)).expect("product");
    let product_alone = block_on(backend.multiply_kept(&a, Factor::General, x.clone(), width, None)).expect("product");
    let blocks = |first, group| Blocks { first, group };
    let run =
        |left, left_blocks, right, right_blocks, count| ColumnRun { left, left_blocks, right, right_blocks, count };
    // (run, the left and right matrices as f64 values)
    let cases = [
        // The right blocks cross from the first chunk into the second; the left are shared by 3.
        (run(&kept_wide, blocks(280, 3), &kept_wide, blocks(285, 1), 15), &wide, &wide),
        (run(&kept_wide, blocks(290, 1), &kept_wide, blocks(290, 1), 4), &wide, &wide),
        (run(&kept_product, blocks(0, 2), &kept_wide, blocks(1, 1), 10), &product, &wide),
        (run(&kept_product, blocks(0, 1), &kept_product, blocks(0, 1), 10), &product, &product),
        (run(&kept_x, blocks(0, 1), &kept_x, blocks(2, 2), 10), &x, &x),
        (run(&product_alone, blocks(3, 1), &kept_product, blocks(3, 1), 7), &product, &product),
    ];
    let runs: Vec<_> = cases.iter().map(|(run, _, _)| ColumnRun { ..*run }).collect();
    let got = block_on(backend.column_products(width, &runs)).expect("column products");
    assert_eq!(got.len(), 56, "{name}");
    let mut got = got.iter();
    for (r, (run, left, right)) in cases.iter().enumerate() {
        for p in 0..run.count {
            let l = left.columns(run.left_blocks.block(p) * width, width).into_owned();
            let r_block = right.columns(run.right_blocks.block(p) * width, width).into_owned();
            let want =
                DMatrix::from_fn(width, width, |i, j| (0..l.nrows()).map(|k| l[(k, i)] * r_block[(k, j)]).sum::<f64>());
            let got = got.next().unwrap();
            assert_product_close_f64(got, &want, &l, &r_block, tolerance, &format!("{name}: run {r}, product {p}"));
            if run.left_blocks == run.right_blocks && std::ptr::eq(run.left, run.right) {
                assert_eq!(got, &got.transpose(), "{name}: run {r}, product {p} is not symmetric");
            }
        }
    }
    // Values that are f32 already (weights used as stored) cross without their zero rests
    // (values that need all of f32's bits: 16-bit ones would cross in two bytes).
    let exact = DMatrix::from_fn(rows, 4 * width, |i, j| (((i * 31 + j * 17) % 23) as f32 / 23.0 - 0.5) as f64);
    let before = backend.bytes_moved();
    let kept_exact = block_on(backend.keep(exact.clone(), width, None)).unwrap();
    if let (Some((to_before, _)), Some((to_after, _))) = (before, backend.bytes_moved()) {
        assert_eq!(to_after - to_before, 4 * exact.len() as u64, "{name}: f32 values alone go over");
    }
    let exact_runs = [run(&kept_exact, blocks(0, 1), &kept_wide, blocks(3, 1), 4)];
    let got = block_on(backend.column_products(width, &exact_runs)).unwrap();
    for (p, got) in got.iter().enumerate() {
        let (l, r) = (exact.columns(p * width, width).into_owned(), wide.columns((3 + p) * width, width).into_owned());
        let want = DMatrix::from_fn(width, width, |i, j| (0..rows).map(|k| l[(k, i)] * r[(k, j)]).sum::<f64>());
        assert_product_close_f64(got, &want, &l, &r, tolerance, &format!("{name}: f32 values, product {p}"));
    }
    let past_the_end = [run(&kept_product, blocks(9, 1), &kept_product, blocks(0, 1), 2)];
    assert!(matches!(block_on(backend.column_products(width, &past_the_end)), Err(Error::Internal(_))), "{name}");
    if backend.is_gpu() {
        let on_the_cpu = block_on(Backend::cpu().keep(product.clone(), width, None)).unwrap();
        let mixed = [run(&on_the_cpu, blocks(0, 1), &kept_product, blocks(0, 1), 1)];
        assert!(matches!(block_on(backend.column_products(width, &mixed)), Err(Error::Internal(_))), "{name}");
    }
}

/// Relative tolerance of a GPU's norm fold (per entry, relative to the largest term of its
/// column, see `fold_matches_the_hosts_on`): f32 pairs keep ~2^-46 of it, native f64 more.
const FOLD_TOLERANCE: f64 = 1e-12;

/// The norm's fold that a backend applies to X itself (on a GPU on the device, from X's f32
/// values as stored) against the host's f64 fold: LayerNorm and RMSNorm, scaling then centring
/// and the transposed order, X kept as folded, as a product's input, and kept beside its
/// product; wider than one chunk on the device (2048 columns). Folded values cross as their
/// f32 values, without rests.
#[test]
fn the_device_fold_matches_the_hosts_on_every_backend() {
    for backend in every_backend() {
        fold_matches_the_hosts_on(backend);
    }
}

fn fold_matches_the_hosts_on(mut backend: Backend) {
    let name = named(&backend);
    let mut rng = ChaCha8Rng::seed_from_u64(16);
    for (rows, columns, width) in [(45, 30, 5), (768, 2112, 64)] {
        // Columns with a mean far from zero, as the centring must remove it; f32 values as stored.
        let x = DMatrix::from_fn(rows, columns, |_, j| (rng.random_range(-1.0f32..1.0) + (j % 5) as f32) as f64);
        let norm = Norm { weight: DVector::from_fn(rows, |_, _| rng.random_range(0.1f32..2.0)), bias: None };
        let a = Arc::new(DMatrix::from_fn(33, rows, |_, _| rng.random_range(-1.0..1.0)));
        let b = Arc::new(DMatrix::from_fn(21, rows, |_, _| rng.random_range(-1.0..1.0)));
        let raw_bytes = {
            let before = backend.bytes_moved();
            block_on(backend.keep(x.clone(), width, None)).unwrap();
            moved_between(before, backend.bytes_moved()).map(|(to, _)| to)
        };
        for kind in [NormKind::LayerNorm, NormKind::RmsNorm] {
            for transposed in [false, true] {
                let fold = Fold { norm: &norm, kind, transposed };
                let what = format!("{name}: {rows} x {columns}, {kind:?}, transposed {transposed}");
                let mut want = x.clone();
                fold.apply(&mut want);
                let before = backend.bytes_moved();
                let kept = block_on(backend.keep(x.clone(), width, Some(fold))).expect("kept");
                if let (Some(raw), Some((folded, _))) = (raw_bytes, moved_between(before, backend.bytes_moved())) {
                    // X's values, and per chunk the norm's weight and the fold's shape (64 bytes).
                    let extra = folded.checked_sub(raw).unwrap_or_else(|| panic!("{what}: {folded} < {raw} bytes"));
                    assert!(extra > 0 && extra % (4 * rows as u64 + 64) == 0, "{what}: {folded} bytes, {raw} unfolded");
                    assert!(rows < 100 || extra <= raw / 50, "{what}: {folded} bytes to the device, {raw} unfolded");
                }
                let got = block_on(backend.read_kept(&kept)).expect("read back");
                assert_fold_close(&got, &want, &x, &norm, &what);
                let (product, kept_x) =
                    block_on(backend.multiply_keeping_both(&a, Factor::General, x.clone(), width, Some(fold)))
                        .expect("product");
                let got = block_on(backend.read_kept(&kept_x)).expect("read back");
                assert_fold_close(&got, &want, &x, &norm, &format!("{what}, kept beside its product"));
                let tolerance = kernel_tolerance(&backend);
                let want_product = &*a * &want;
                let got = block_on(backend.read_kept(&product)).expect("read back");
                assert_product_close_f64(&got, &want_product, &a.transpose(), &want, tolerance, &what);
                let alone = block_on(backend.multiply_kept(&a, Factor::General, x.clone(), width, Some(fold)))
                    .expect("product");
                let got = block_on(backend.read_kept(&alone)).expect("read back");
                assert_product_close_f64(&got, &want_product, &a.transpose(), &want, tolerance, &what);
                // Some of X's columns by another matrix, from the same upload: in the wide case
                // across the boundary of two of X's chunks on a GPU (2048 columns a chunk).
                let some = if columns > 2048 { 1984..2112 } else { 10..25 };
                let (product, of_some) = block_on(backend.multiply_kept_twice(
                    (&a, Factor::General),
                    &b,
                    x.clone(),
                    some.clone(),
                    width,
                    Some(fold),
                ))
                .expect("two products");
                let got = block_on(backend.read_kept(&product)).expect("read back");
                assert_product_close_f64(&got, &want_product, &a.transpose(), &want, tolerance, &what);
                let want_some = want.columns(some.start, some.len()).into_owned();
                let got = block_on(backend.read_kept(&of_some)).expect("read back");
                let what = format!("{what}, columns {some:?} by another matrix");
                assert_product_close_f64(&got, &(&*b * &want_some), &b.transpose(), &want_some, tolerance, &what);
            }
        }
    }
}

/// A layer's weights handed to a product where the layer holds them (f32 matrices side by side,
/// and a transpose), which a GPU reads a chunk at a time, give the bits, and move the bytes, of
/// the same values handed over as f64: folded and raw, kept, multiplied, and some columns
/// multiplied from the same upload, with the parts' edges inside a chunk and the product's
/// columns across two chunks (2048 columns a chunk on a GPU).
#[test]
fn weights_handed_over_in_place_give_the_bits_of_their_f64_values_on_every_backend() {
    let mut rng = ChaCha8Rng::seed_from_u64(26);
    let rows = 320;
    let mut matrix = |columns| DMatrix::from_fn(rows, columns, |_, _| rng.random_range(-1.0f32..1.0));
    let parts = [matrix(1000), matrix(700), matrix(412)];
    let w_o = matrix(2112).transpose();
    let norm = Norm { weight: DVector::from_fn(rows, |_, _| rng.random_range(0.1f32..2.0)), bias: None };
    let a = Arc::new(DMatrix::from_fn(40, rows, |_, _| rng.random_range(-1.0..1.0)));
    let b = Arc::new(DMatrix::from_fn(24, rows, |_, _| rng.random_range(-1.0..1.0)));
    let widened = |m: &DMatrix<f32>| m.map(f64::from);
    let mut side_by_side = DMatrix::zeros(rows, 2112);
    let mut at = 0;
    for part in &parts {
        side_by_side.columns_mut(at, part.ncols()).copy_from(&widened(part));
        at += part.ncols();
    }
    let transposed = widened(&w_o.transpose());
    let some = 1984..2112;
    for mut backend in every_backend() {
        let name = named(&backend);
        // The first product with A and B uploads them, and they stay on the device.
        block_on(backend.multiply_kept_twice((&a, Factor::General), &b, &side_by_side, some.clone(), 64, None))
            .expect("the first products");
        for fold in [None, Some(Fold { norm: &norm, kind: NormKind::LayerNorm, transposed: true })] {
            let in_place = [Columns::SideBySide(parts.iter().collect()), Columns::Transposed(&w_o)];
            for (weights, values) in in_place.into_iter().zip([&side_by_side, &transposed]) {
                let what = format!("{name}, {} columns, fold {}", weights.shape().1, fold.is_some());
                let mut run = |x: Columns<'_>| {
                    let before = backend.bytes_moved();
                    let kept = block_on(backend.keep(x.clone(), 64, fold)).expect("kept");
                    let (product, of_some) =
                        block_on(backend.multiply_kept_twice((&a, Factor::General), &b, x, some.clone(), 64, fold))
                            .expect("two products");
                    let read = |m| block_on(backend.read_kept(m)).expect("read back");
                    let got = [read(&kept), read(&product), read(&of_some)];
                    (got, moved_between(before, backend.bytes_moved()))
                };
                let (want, want_moved) = run(Columns::from(values));
                let (got, moved) = run(weights);
                for (got, want) in got.iter().zip(&want) {
                    assert!(
                        got.shape() == want.shape()
                            && got.iter().zip(want.iter()).all(|(g, w)| g.to_bits() == w.to_bits()),
                        "{what}: not the f64 values' bits"
                    );
                }
                assert_eq!(moved, want_moved, "{what}: bytes moved");
            }
        }
    }
}

/// Each folded entry within [`FOLD_TOLERANCE`] of the host's, relative to the largest term its
/// column's fold sums (`max |γ_i| · max |x_i|`).
fn assert_fold_close(got: &DMatrix<f64>, want: &DMatrix<f64>, x: &DMatrix<f64>, norm: &Norm, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let largest_weight = norm.weight.iter().fold(0.0f64, |m, &w| m.max((w as f64).abs()));
    let mut worst: f64 = 0.0;
    for j in 0..got.ncols() {
        let scale = largest_weight * x.column(j).amax();
        for i in 0..got.nrows() {
            let error = (got[(i, j)] - want[(i, j)]).abs() / scale;
            worst = worst.max(error);
            assert!(
                error <= FOLD_TOLERANCE,
                "{what}: ({i}, {j}) is {}, the host's {} ({error:e})",
                got[(i, j)],
                want[(i, j)]
            );
        }
    }
    eprintln!("{what}: worst relative error {worst:e}");
}

/// `value` read as an f16's bits, by its fields (f16 has 5 exponent bits of bias 15 and 10
/// mantissa bits; exponent 0 is zero or subnormal, m 2^-24): a reference apart from the code's.
fn f16_value(bits: u16) -> f64 {
    let sign = if bits & 0x8000 != 0 { -1.0 } else { 1.0 };
    let (exponent, mantissa) = (((bits >> 10) & 0x1f) as i32, (bits & 0x3ff) as f64);
    match exponent {
        0 => sign * mantissa * 2f64.powi(-24),
        _ => sign * (1.0 + mantissa / 1024.0) * 2f64.powi(exponent - 15),
    }
}

/// Weights whose values all fit 16 bits (a bf16 or f16 file's) cross in two bytes each and are
/// widened on the device to exactly the f32 values the host holds: every finite bf16 and f16
/// value, subnormals and negative zero included, and a matrix large enough that the widening's
/// groups go on in y (over 65,535 groups of 64 pairs).
#[test]
fn sixteen_bit_weights_cross_in_two_bytes_and_widen_exactly() {
    let mut gpu = gpu();
    let bf16: Vec<f64> =
        (0..=u16::MAX).map(|b| f32::from_bits((b as u32) << 16)).filter(|v| v.is_finite()).map(f64::from).collect();
    let f16: Vec<f64> = (0..=u16::MAX).filter(|b| (b >> 10) & 0x1f != 0x1f).map(f16_value).collect();
    let mut rng = ChaCha8Rng::seed_from_u64(26);
    let large: Vec<f64> = (0..4096 * 2100).map(|_| bf16[rng.random_range(0..bf16.len())]).collect();
    for (name, values, rows) in [("bf16", bf16, 256), ("f16", f16, 256), ("bf16, 8.6 M values", large, 4096)] {
        // Whole columns, the last filled from the start again.
        let columns = values.len().div_ceil(rows);
        let x = DMatrix::from_fn(rows, columns, |i, j| values[(i + rows * j) % values.len()]);
        let before = gpu.bytes_moved();
        let kept = block_on(gpu.keep(x.clone(), 1, None)).expect("kept");
        let (to, _) = moved_between(before, gpu.bytes_moved()).expect("a GPU counts its bytes");
        assert_eq!(to, 2 * x.len() as u64, "{name}: two bytes a value to the device");
        let back = block_on(gpu.read_kept(&kept)).expect("read back");
        for (i, (got, want)) in back.iter().zip(x.iter()).enumerate() {
            assert_eq!(got.to_bits(), want.to_bits(), "{name}: value {i} came back as {got:e}, not {want:e}");
        }
    }
}

/// A Llama model in bf16 with Llama-3-8B's proportions (untied; 32 layers; a vocabulary 32
/// times the width; 32 query heads sharing 8 key/value heads, so a Gram is as large against the
/// heads' matrices), random: its fingerprint on a GPU sends at most 1.1 times the file's
/// embedding and attention bytes to the device, and reads back at most 1.1 times the small
/// matrices the heads' spectra read (each head's two token-space circuits as three d_head x
/// d_head f64 matrices each): the bounds set for Llama-3-8B itself.
#[test]
fn a_bf16_model_in_llama_3_8bs_proportions_moves_at_most_1_1x_its_bytes() {
    let (d, heads, kv_heads, layers, vocab, hidden) = (128usize, 32usize, 8usize, 32usize, 4096usize, 448usize);
    let d_head = d / heads;
    let mut tensors = vec![
        ("model.embed_tokens.weight".to_string(), "BF16", vec![vocab, d]),
        ("lm_head.weight".into(), "BF16", vec![vocab, d]),
        ("model.norm.weight".into(), "BF16", vec![d]),
    ];
    for l in 0..layers {
        for (part, shape) in [
            ("input_layernorm.weight", vec![d]),
            ("post_attention_layernorm.weight", vec![d]),
            ("self_attn.q_proj.weight", vec![heads * d_head, d]),
            ("self_attn.k_proj.weight", vec![kv_heads * d_head, d]),
            ("self_attn.v_proj.weight", vec![kv_heads * d_head, d]),
            ("self_attn.o_proj.weight", vec![d, heads * d_head]),
            ("mlp.gate_proj.weight", vec![hidden, d]),
            ("mlp.up_proj.weight", vec![hidden, d]),
            ("mlp.down_proj.weight", vec![d, hidden]),
        ] {
            tensors.push((format!("model.layers.{l}.{part}"), "BF16", shape));
        }
    }
    let embedding_and_attention: usize = tensors
        .iter()
        .filter(|(name, _, _)| !name.contains("mlp.") && !name.ends_with("norm.weight"))
        .map(|(_, _, shape)| 2 * shape.iter().product::<usize>())
        .sum();
    let file = crate::hub_imitation::safetensors_bytes(tensors, |name, bytes| {
        let mut state = 0x2545_f491_4f6c_dd1du64 ^ name.len() as u64;
        for pair in bytes.chunks_exact_mut(2) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let value = match name.ends_with("norm.weight") {
                true => 1.0 + ((state >> 40) as f32 / (1u64 << 24) as f32) * 0.1,
                false => ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.1,
            };
            pair.copy_from_slice(&((value.to_bits() >> 16) as u16).to_le_bytes());
        }
    });
    let config = serde_json::json!({
        "model_type": "llama", "hidden_size": d, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": kv_heads, "intermediate_size": hidden, "vocab_size": vocab,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "tie_word_embeddings": false, "torch_dtype": "bfloat16"
    });
    let files = ModelFiles::from_named(vec![
        ("config.json".into(), Box::new(MemorySource::new("config.json", config.to_string().into_bytes()))),
        ("model.safetensors".into(), Box::new(MemorySource::new("model.safetensors", file))),
    ])
    .unwrap();
    let stream = ModelStream::open(&files).unwrap();
    let fingerprint = fingerprint_stream_with(&stream, Mode::Folded, &mut gpu()).unwrap();
    let backend = &fingerprint.backend;
    assert_eq!(backend.name, "gpu", "{backend:?}");
    let (to, from) = (backend.bytes_to_device.unwrap(), backend.bytes_from_device.unwrap());
    let heads_matrices = (layers * heads * 6 * d_head * d_head * 8) as u64;
    eprintln!(
        "to the device {to} bytes ({:.3}x the file's {embedding_and_attention}), back {from} ({:.3}x the heads' \
         {heads_matrices}); stages {:?}",
        to as f64 / embedding_and_attention as f64,
        from as f64 / heads_matrices as f64,
        backend.stages
    );
    assert!(10 * to <= 11 * embedding_and_attention as u64, "{to} bytes to the device");
    assert!(10 * from <= 11 * heads_matrices, "{from} bytes back");
}

/// In folded mode a GPU uploads each layer's weights as stored and folds them on the device, so
/// the heads' products move about the bytes of raw mode, not the folded values' rests besides
/// (LayerNorm with an untied unembedding, and RMSNorm with grouped-query heads).
#[test]
fn folded_mode_uploads_what_raw_mode_uploads() {
    for fixture_name in ["pythia", "llama"] {
        let files = ModelFiles::from_path(&fixture(fixture_name)).unwrap();
        let stream = ModelStream::open(&files).unwrap();
        let heads = |mode| {
            let fingerprint = fingerprint_stream_with(&stream, mode, &mut gpu()).unwrap();
            let stage = fingerprint.backend.stages.iter().find(|s| s.stage == "heads").expect("a heads stage").clone();
            (stage.bytes_to_device, stage.bytes_from_device)
        };
        let ((folded_to, folded_from), (raw_to, raw_from)) = (heads(Mode::Folded), heads(Mode::Raw));
        eprintln!("{fixture_name}: heads' bytes to the device {folded_to} folded, {raw_to} raw");
        assert!(10 * folded_to <= 11 * raw_to, "{fixture_name}: {folded_to} bytes up folded, {raw_to} raw");
        assert_eq!(folded_from, raw_from, "{fixture_name}: the same bytes back");
    }
}

/// A left matrix stays on the device between products with the same `Arc`; a different `Arc`
/// (even one made from it, or more of them than the device keeps) is multiplied as it is.
#[test]
fn a_kept_left_matrix_is_never_taken_for_another() {
    let mut gpu = gpu();
    let mut rng = ChaCha8Rng::seed_from_u64(14);
    let mut random_f64 = |rows: usize, cols: usize| DMatrix::from_fn(rows, cols, |_, _| rng.random_range(-1.0..1.0));
    let x = random_f64(40, 9);
    let lefts: Vec<Arc<DMatrix<f64>>> = (0..5).map(|_| Arc::new(random_f64(33, 40))).collect();
    let check = |gpu: &mut Backend, a: &Arc<DMatrix<f64>>, what: &str| {
        let got = block_on(gpu.multiply(a, Factor::General, &x)).unwrap();
        assert_product_close_f64(&got, &(&**a * &x), &a.transpose(), &x, KERNEL_TOLERANCE, what);
    };
    // Twice over five matrices: the device keeps three, so the second round re-uploads some.
    for round in 0..2 {
        for (i, a) in lefts.iter().enumerate() {
            check(&mut gpu, a, &format!("round {round}, matrix {i}"));
        }
    }
    // A copy changed through `make_mut` is a new matrix, not the kept one.
    let mut changed = lefts[0].clone();
    Arc::make_mut(&mut changed)[(0, 0)] += 1.0;
    check(&mut gpu, &changed, "a changed copy");
    check(&mut gpu, &lefts[0], "the original again");
}

/// Every fixture model with its references (`hostile/` is gptchar's weights twice over, with
/// vocabularies that test the page, not the numbers), then the demo model.
fn fixtures() -> Vec<std::path::PathBuf> {
    let mut names: Vec<_> = std::fs::read_dir(fixture(""))
        .expect("tests/fixtures")
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("expected.json").exists())
        .collect();
    names.sort();
    names.push(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("public/models/nietzsche-char.safetensors"));
    names
}

/// Gram entries relative to the Cauchy-Schwarz scale `sqrt(G_ii' H_jj')` of the matching
/// diagonals (the norms of the summed columns).
fn assert_gram_close(got: &DMatrix<f64>, want: &DMatrix<f64>, left: &DMatrix<f64>, right: &DMatrix<f64>, what: &str) {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let mut worst: f64 = 0.0;
    for j in 0..got.ncols() {
        for i in 0..got.nrows() {
            let scale = (left[(i, i)] * right[(j, j)]).sqrt();
            let error = (got[(i, j)] - want[(i, j)]).abs();
            worst = worst.max(error / scale);
            assert!(
                error <= GRAM_TOLERANCE * scale,
                "{what}: entry ({i}, {j}) is {}, the CPU's {} (scale {scale}, relative error {:e})",
                got[(i, j)],
                want[(i, j)],
                error / scale
            );
        }
    }
    eprintln!("{what}: worst relative error {worst:e}");
}

#[test]
fn gpu_grams_match_the_cpu_on_every_fixture_and_the_demo() {
    let mut gpu = gpu();
    for path in fixtures() {
        let what = path.file_name().unwrap().to_string_lossy().to_string();
        let files = ModelFiles::from_path(&path).unwrap();
        let stream = ModelStream::open(&files).unwrap();
        let cpu = Grams::stream(&stream).unwrap();
        let got = Grams::stream_with(&stream, &mut gpu).unwrap();
        assert!(gpu.is_gpu() && gpu.info().note.is_none(), "{what}: the GPU fell back: {:?}", gpu.info().note);
        assert_eq!(got.tied, cpu.tied);
        assert_gram_close(&got.embed, &cpu.embed, &cpu.embed, &cpu.embed, &format!("{what}: W_E^T W_E"));
        if !cpu.tied {
            assert_gram_close(&got.cross, &cpu.cross, &cpu.unembed, &cpu.embed, &format!("{what}: W_U W_E"));
            assert_gram_close(&got.unembed, &cpu.unembed, &cpu.unembed, &cpu.unembed, &format!("{what}: W_U W_U^T"));
        }
    }
}

/// |got − want| <= tolerance · max(|want|, floor); returns the relative difference.
fn assert_near(got: Option<f64>, want: Option<f64>, floor: f64, what: &str) -> f64 {
    match (got, want) {
        (Some(g), Some(w)) => {
            let allowed = FINGERPRINT_TOLERANCE * w.abs().max(floor);
            let relative = if allowed > 0.0 { (g - w).abs() / allowed * FINGERPRINT_TOLERANCE } else { 0.0 };
            assert!((g - w).abs() <= allowed, "{what}: GPU {g}, CPU {w} (allowed ±{allowed:e})");
            relative
        }
        (g, w) => {
            assert_eq!(g, w, "{what}: GPU and CPU disagree on whether it is a number");
            0.0
        }
    }
}

#[test]
fn gpu_fingerprints_match_the_cpu_on_every_fixture_and_the_demo() {
    for arithmetic in [Arithmetic::F64, Arithmetic::F32Pairs] {
        fingerprints_match_the_cpu(&mut gpu_with(arithmetic));
    }
}

fn fingerprints_match_the_cpu(gpu: &mut Backend) {
    let (mut checked, mut worst) = (0, 0.0f64);
    for path in fixtures() {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let files = ModelFiles::from_path(&path).unwrap();
        let stream = ModelStream::open(&files).unwrap();
        for mode in [Mode::Folded, Mode::Raw] {
            let cpu =
                serde_json::to_value(fingerprint_stream_with(&stream, mode, &mut Backend::cpu()).unwrap()).unwrap();
            let got = fingerprint_stream_with(&stream, mode, gpu).unwrap();
            assert_eq!(got.backend.name, "gpu", "{name}: {:?}", got.backend);
            let got = serde_json::to_value(got).unwrap();
            assert_eq!(got["model"], cpu["model"]);
            for (g, c) in got["heads"].as_array().unwrap().iter().zip(cpu["heads"].as_array().unwrap()) {
                for circuit in ["qk", "qk_token", "ov", "ov_residual"] {
                    let what = format!("{name} {} L{}H{} {circuit}", mode.name(), c["layer"], c["head"]);
                    let (g, c) = (&g[circuit], &c[circuit]);
                    assert_eq!(g["error"], c["error"], "{what}: error");
                    assert_eq!(g["defective"], c["defective"], "{what}: defective");
                    let pairs = |v: &serde_json::Value| -> Vec<[f64; 2]> {
                        v.as_array().unwrap().iter().map(|p| [p[0].as_f64().unwrap(), p[1].as_f64().unwrap()]).collect()
                    };
                    assert_same_spectrum(&pairs(&g["eigenvalues"]), &pairs(&c["eigenvalues"]), &what);
                    for (metric, floor) in [
                        ("copying_score", 1.0),
                        ("imaginary_fraction", 1.0),
                        ("eigenvector_condition", 1.0),
                        ("departure_from_normality", 1.0),
                        ("scale", 0.0),
                    ] {
                        let relative =
                            assert_near(g[metric].as_f64(), c[metric].as_f64(), floor, &format!("{what} {metric}"));
                        worst = worst.max(relative);
                    }
                    checked += 1;
                }
            }
        }
    }
    eprintln!("{}: {checked} circuits compared; worst relative difference of a quantity {worst:e}", named(gpu));
    assert!(checked > 100, "only {checked} circuits compared");
}

/// Absolute tolerance of the GPU's forward pass on attention weights (each in [0, 1]). f32 sums
/// in another order differ by ~1e-7 of the terms in a layer, and the differences grow through
/// the layers, most in a trained model's sharp patterns; a wrong mask, position or norm differs
/// by far more.
const PATTERN_TOLERANCE: f32 = 5e-5;
/// Tolerance on logits, per-head outputs and norm scales, relative to each matrix's largest
/// entry: they carry every layer's differences on the way.
const OUTPUT_TOLERANCE: f32 = 1e-4;

/// The largest |a - b| over two matrices, relative to `floor` or b's largest entry.
fn forward_difference(got: &DMatrix<f32>, want: &DMatrix<f32>, floor: f32, what: &str) -> f32 {
    assert_eq!(got.shape(), want.shape(), "{what}: shape");
    let scale = want.amax().max(floor);
    (got - want).amax() / scale
}

/// The forward pass on the GPU against the CPU's on every fixture (all four families: learned
/// and rotary positions, partial rotary, grouped-query attention, parallel residuals, every
/// activation), the family fixtures of what else the GPU computes (query/key norms, sandwich
/// and post-norms, soft-capped logits, residual and logit multipliers, interleaved and
/// per-layer rotary, NoPE layers, ALiBi, experts) and the demo: three sequences of different lengths
/// together, keeping full, projected and no per-head outputs, and the first again keeping only
/// some cells of each pattern and each position's top token; once whole and once in small
/// pieces (a group of patterns and a block of the vocabulary at a time), so the pieces must
/// join up.
#[test]
fn the_forward_pass_on_the_gpu_matches_the_cpu_on_every_fixture_and_the_demo() {
    use headprint::backend::gpu::{Gpu, Pieces};
    use headprint::forward::{self, HeadOutputs, Keep, Logits, Patterns};
    let gpu = pollster::block_on(Gpu::open(true)).expect("a GPU adapter (lavapipe without one)");
    let mut rng = ChaCha8Rng::seed_from_u64(26);
    let (mut compared, mut worst, mut worst_output, mut near_ties, mut positions) = (0, 0.0f32, 0.0f32, 0, 0);
    let families = [
        "qwen3",
        "stablelm",
        "olmo2",
        "gemma2",
        "gemma3",
        "granite",
        "gptj",
        "smollm3",
        "bloom",
        "falcon-rw",
        "mixtral",
    ]
    .map(|name| fixture(&format!("families/{name}")));
    for path in fixtures().into_iter().chain(families) {
        let name = path.file_name().unwrap().to_string_lossy().to_string();
        let files = ModelFiles::from_path(&path).unwrap();
        let stream = ModelStream::open(&files).unwrap();
        let config = stream.config.clone();
        let longest = config.context.unwrap_or(96).min(96);
        let tokens: Vec<Vec<usize>> = [longest, 1, longest / 2 + 3]
            .iter()
            .map(|&len| (0..len).map(|_| rng.random_range(0..config.vocab)).collect())
            .collect();
        let directions = DMatrix::from_fn(config.d_model, 3, |i, j| ((i * 7 + j * 3) % 11) as f32 / 11.0 - 0.5);
        let keeps = [HeadOutputs::Full, HeadOutputs::None, HeadOutputs::Projected(&directions)];
        let mut runs: Vec<(&[usize], Keep)> = tokens.iter().map(|t| t.as_slice()).zip(keeps.map(Keep::from)).collect();
        // Cells on the diagonal, below it and above it (masked: zero).
        let cells: Vec<(usize, usize)> =
            (0..longest).flat_map(|q| [(q, q), (q, q / 2), (q, (q + 1).min(longest - 1))]).collect();
        let some = Keep { patterns: Patterns::Cells(&cells), logits: Logits::TopToken, ..keeps[2].into() };
        runs.push((&tokens[0], some));
        let mut cpu_steps = Vec::new();
        let want = forward::run_batch(&stream, &runs, &mut |done, total| cpu_steps.push((done, total))).unwrap();
        let mut fixture_worst = 0.0f32;
        // Small: the longest run's patterns at a time, 7 vocabulary rows, and the runs through
        // the layers in three batches (the longest and the one-token run, the third, the first
        // again).
        let small = Pieces {
            pattern_bytes: (4 * config.heads * longest * longest) as u64,
            vocab_rows: 7,
            batch_rows: longest + 1,
        };
        for pieces in [Pieces::default(), small] {
            let mut steps = Vec::new();
            let got = pollster::block_on(
                gpu.forward_in(pieces, &stream, &runs, &mut |done, total| steps.push((done, total))),
            )
            .unwrap_or_else(|e| panic!("{name}: {e}"));
            if pieces.batch_rows == usize::MAX {
                assert_eq!(steps, cpu_steps, "{name}: progress");
            } else {
                // Each batch's steps in turn, counted over all three.
                let total = 3 * cpu_steps.last().expect("the CPU's progress").1;
                assert!(steps.windows(2).all(|w| w[0].0 < w[1].0), "{name}: progress goes forward: {steps:?}");
                assert_eq!(steps.last(), Some(&(total, total)), "{name}: progress ends complete: {steps:?}");
            }
            let (got_some, want_some, whole) = (&got[3], &want[3], &want[0]);
            let what = format!("{name} ({pieces:?}) cells and top tokens");
            assert!(got_some.patterns.is_empty() && got_some.logits.is_empty(), "{what}: kept whole");
            assert_eq!(got_some.pattern_cells.len(), config.layers, "{what}");
            for (l, (g, w)) in
                got_some.pattern_cells.iter().flatten().zip(want_some.pattern_cells.iter().flatten()).enumerate()
            {
                let difference = g.iter().zip(w).map(|(a, b)| (a - b).abs()).fold(0.0f32, f32::max);
                assert!(
                    g.len() == cells.len() && difference <= PATTERN_TOLERANCE,
                    "{what}: cells of head {l}: {difference:e}"
                );
            }
            // The CPU's top tokens, each the last of the highest of its whole logits; the GPU's
            // the same, except where the two highest are closer than the GPU's rounding.
            assert_eq!(got_some.top_tokens.len(), longest, "{what}");
            for (t, (&g, &w)) in got_some.top_tokens.iter().zip(&want_some.top_tokens).enumerate() {
                positions += 1;
                let row = whole.logits.row(t);
                assert_eq!(
                    w,
                    (0..row.len()).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap(),
                    "{what}: CPU top at {t}"
                );
                let runner_up = (0..row.len()).filter(|&v| v != w).map(|v| row[v]).fold(f32::MIN, f32::max);
                if row[w] - runner_up > OUTPUT_TOLERANCE * whole.logits.amax().max(1e-3) {
                    assert_eq!(g, w, "{what}: top token at {t}");
                } else {
                    near_ties += 1;
                }
            }
            for (s, (got, want)) in got.iter().zip(&want).take(3).enumerate() {
                let what = format!("{name} ({pieces:?}) sequence {s}");
                assert_eq!(got.patterns.len(), config.layers, "{what}");
                for (l, (got_layer, want_layer)) in got.patterns.iter().zip(&want.patterns).enumerate() {
                    for (h, (g, w)) in got_layer.iter().zip(want_layer).enumerate() {
                        let difference = forward_difference(g, w, 1.0, &format!("{what} L{l}H{h} pattern"));
                        assert!(difference <= PATTERN_TOLERANCE, "{what} L{l}H{h} pattern: {difference:e}");
                        fixture_worst = fixture_worst.max(difference);
                        compared += 1;
                    }
                }
                let difference = forward_difference(&got.logits, &want.logits, 1e-3, &format!("{what} logits"));
                worst_output = worst_output.max(difference);
                assert!(difference <= OUTPUT_TOLERANCE, "{what} logits: {difference:e}");
                let scales = |v: &[f32]| DMatrix::from_column_slice(v.len(), 1, v);
                let difference = forward_difference(&scales(&got.final_scale), &scales(&want.final_scale), 1e-3, &what);
                assert!(difference <= OUTPUT_TOLERANCE, "{what} final scales: {difference:e}");
                assert_eq!(got.head_outputs.len(), want.head_outputs.len(), "{what}: head outputs kept");
                for (l, (g, w)) in got.head_outputs.iter().flatten().zip(want.head_outputs.iter().flatten()).enumerate()
                {
                    let difference = forward_difference(g, w, 1e-3, &format!("{what} head output {l}"));
                    worst_output = worst_output.max(difference);
                    assert!(difference <= OUTPUT_TOLERANCE, "{what} head output {l}: {difference:e}");
                }
            }
        }
        eprintln!("{name}: worst pattern difference {fixture_worst:e}");
        worst = worst.max(fixture_worst);
    }
    eprintln!(
        "{}: {compared} patterns compared; worst difference {worst:e}, of logits and head outputs {worst_output:e}; \
         {near_ties} top tokens within rounding of the next not compared",
        gpu.adapter()
    );
    assert!(compared > 200, "only {compared} patterns compared");
    assert!(100 * near_ties <= positions, "{near_ties} of {positions} top tokens too close to compare");
}

/// Attention-only blocks (TransformerLens's attn-only models): the GPT-2 fixture without its
/// MLPs, on the GPU as on the CPU.
#[test]
fn attention_only_blocks_run_on_the_gpu_as_on_the_cpu() {
    use headprint::backend::gpu::Gpu;
    use headprint::forward::{self, HeadOutputs};
    use headprint::model::LoadParts;
    let gpu = pollster::block_on(Gpu::open(true)).expect("a GPU adapter (lavapipe without one)");
    let with_mlps = common::load("gpt2", LoadParts::Everything);
    let mut model = with_mlps.clone();
    model.config.features.attention_only = true;
    for layer in &mut model.layers {
        layer.mlp = None;
    }
    let tokens: Vec<usize> = (0..11).map(|i| (i * 5 + 2) % model.config.vocab).collect();
    let want = forward::run(&model, &tokens).unwrap();
    assert!((&forward::run(&with_mlps, &tokens).unwrap().logits - &want.logits).amax() > 1e-3, "the MLPs count");
    let runs = [(&tokens[..], HeadOutputs::None.into())];
    let got = pollster::block_on(gpu.forward(&model, &runs, &mut |_, _| {})).unwrap().remove(0);
    assert!(forward_difference(&got.logits, &want.logits, 1e-3, "logits") <= OUTPUT_TOLERANCE, "logits");
    for (l, (g, w)) in got.patterns.iter().flatten().zip(want.patterns.iter().flatten()).enumerate() {
        assert!(forward_difference(g, w, 1.0, "pattern") <= PATTERN_TOLERANCE, "pattern {l}");
    }
}

/// Two tokens with exactly equal logits (the tied GPT-2 fixture with one embedding row copied
/// into another: their logits are the same sums of the same numbers): the top token is the later
/// of the two, as `Iterator::max_by` picks it, on the CPU and on the GPU, within a block of the
/// vocabulary and across blocks (7 rows at a time).
#[test]
fn the_top_token_is_the_last_of_equal_logits_on_every_backend() {
    use headprint::backend::gpu::{Gpu, Pieces};
    use headprint::forward::{self, HeadOutputs, Keep, Logits};
    use headprint::model::LoadParts;
    let gpu = pollster::block_on(Gpu::open(true)).expect("a GPU adapter (lavapipe without one)");
    let mut model = common::load("gpt2", LoadParts::Everything);
    assert!(model.w_u.is_none(), "the fixture is tied");
    let vocab = model.config.vocab;
    let tokens: Vec<usize> = (0..9).map(|i| (i * 3 + 1) % (vocab - 1)).collect();
    let keep = Keep { logits: Logits::TopToken, ..HeadOutputs::None.into() };
    let top = |model: &headprint::model::Model| forward::run_batch(model, &[(&tokens, keep)], &mut |_, _| {}).unwrap();
    let first = top(&model)[0].top_tokens[0];
    // A later token than the top one (one not in the prompt), its embedding row made the top's.
    let later = if first < vocab - 1 { vocab - 1 } else { 0 };
    assert!(!tokens.contains(&later));
    let row = model.w_e.row(first).into_owned();
    model.w_e.row_mut(later).copy_from(&row);
    let want = first.max(later);
    assert_eq!(top(&model)[0].top_tokens[0], want, "the CPU takes the last of equal logits");
    for pieces in [Pieces::default(), Pieces { vocab_rows: 7, ..Pieces::default() }] {
        let got = pollster::block_on(gpu.forward_in(pieces, &model, &[(&tokens, keep)], &mut |_, _| {})).unwrap();
        assert_eq!(got[0].top_tokens[0], want, "the GPU ({pieces:?}) takes the last of equal logits");
    }
    assert_ne!(first / 7, later / 7, "the two are in different blocks of 7");
}

#[test]
fn a_failing_gpu_falls_back_to_the_cpu_with_a_note() {
    let mut backend = gpu();
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let a = random(30, 8, &mut rng);
    let mut tries = 0;
    // The first run fails the way a lost device does; the rerun happens on the CPU.
    let result = block_on(backend.with_fallback(async |backend| {
        tries += 1;
        if backend.is_gpu() {
            return Err(Error::Gpu("device lost (simulated)".into()));
        }
        let mut gram = backend.sum(8, 8).await?;
        backend.add_gram(&a, &mut gram).await?;
        backend.read(gram).await
    }))
    .expect("the CPU result");
    assert_eq!(tries, 2);
    assert!(!backend.is_gpu());
    let info = backend.info();
    assert_eq!(info.name, "cpu");
    assert!(info.note.as_deref().unwrap().contains("device lost (simulated)"), "{info:?}");
    assert_eq!(result, summed(&mut Backend::cpu(), &[(&a, None)]).unwrap());
    // Errors that are not the GPU's pass through untouched and do not switch backends.
    let mut gpu = gpu();
    let error =
        block_on(gpu.with_fallback(async |_| -> headprint::Result<()> { Err(Error::Invalid("bad input".into())) }));
    assert_eq!(error, Err(Error::Invalid("bad input".into())));
    assert!(gpu.is_gpu());
}

/// The tab's path natively: a worker `Load` asking for the GPU computes its Grams there (the
/// reply says so), and its fingerprints are the CPU's within the tolerance; a second load keeps
/// the opened device; asking for the CPU afterwards gives the CPU.
#[test]
fn the_worker_session_computes_on_the_backend_a_load_asks_for() {
    use headprint::weights::{ByteSource, MemorySource};
    use headprint::worker::protocol::{Reply, Request};
    use headprint::worker::session::Session;

    let bytes = std::fs::read(fixture("gptchar").join("model.safetensors")).unwrap();
    let mut session = Session::new(|| 0.0);
    let mut load = |model: u64, backend: BackendChoice| {
        let files: Vec<Box<dyn ByteSource>> = vec![Box::new(MemorySource::new("gptchar.safetensors", bytes.clone()))];
        let request = Request::Load {
            model,
            names: vec!["gptchar.safetensors".into()],
            analyse: true,
            prepend_bos: false,
            backend,
            link: None,
        };
        match session.handle(request, files, std::rc::Rc::new(|_| {})) {
            Ok(Reply::Analysed(analysis)) => analysis.folded,
            other => panic!("the load: {:?}", other.map(|_| "another reply")),
        }
    };
    let on_gpu = load(1, BackendChoice::Gpu);
    assert_eq!(on_gpu.backend.name, "gpu", "{:?}", on_gpu.backend);
    assert_eq!(load(2, BackendChoice::Gpu).backend, on_gpu.backend, "the same device again");
    let on_cpu = load(3, BackendChoice::Cpu);
    assert_eq!(on_cpu.backend.name, "cpu");
    assert_eq!(on_cpu.backend.note, None);
    for (gh, ch) in on_gpu.heads.iter().zip(&on_cpu.heads) {
        for (what, g, c) in [("ov", &gh.ov, &ch.ov), ("qk_token", &gh.qk_token, &ch.qk_token)] {
            let what = format!("L{}H{} {what}", ch.layer, ch.head);
            assert_near(Some(g.copying_score), Some(c.copying_score), 1.0, &what);
            assert_near(g.eigenvector_condition, c.eigenvector_condition, 1.0, &what);
        }
    }
}

/// The tab's pool natively: a helper asked for a layer's heads with `backend: Gpu` runs the
/// layer's products on its own GPU device. Its heads are the CPU's within the tolerance, and not
/// the CPU's bits (so the GPU did compute them).
#[test]
fn a_pool_worker_runs_a_layers_products_on_its_own_gpu() {
    use headprint::weights::{ByteSource, MemorySource};
    use headprint::worker::protocol::{GramsData, Reply, Request, Role};
    use headprint::worker::session::Session;

    // Llama 3.2's shape in small: grouped-query heads and a tied embedding.
    let folder = fixture("llama32");
    let names = ["config.json", "model.safetensors"];
    let contents: Vec<Vec<u8>> = names.iter().map(|n| std::fs::read(folder.join(n)).unwrap()).collect();
    let files = || -> Vec<Box<dyn ByteSource>> {
        names
            .iter()
            .zip(&contents)
            .map(|(&n, b)| Box::new(MemorySource::new(n, b.clone())) as Box<dyn ByteSource>)
            .collect()
    };
    let stream_files = ModelFiles::from_path(&folder).unwrap();
    let grams = Grams::stream(&ModelStream::open(&stream_files).unwrap()).unwrap();
    let mut helper = Session::new(|| 0.0);
    let report = || std::rc::Rc::new(|_| {});
    let open = Request::Open { model: 1, names: names.map(String::from).to_vec(), role: Role::Helper, link: None };
    assert!(matches!(helper.handle(open, files(), report()), Ok(Reply::Opened { .. })));
    let set = Request::SetGrams { model: 1, grams: GramsData::of(&grams) };
    assert!(matches!(helper.handle(set, vec![], report()), Ok(Reply::Done)));
    let mut layer_on = |layer: usize, backend: BackendChoice| {
        let request = Request::FingerprintLayer { model: 1, mode: Mode::Folded, layer, backend };
        match helper.handle(request, vec![], report()) {
            Ok(Reply::Heads { heads, gpu_bytes }) => {
                // The GPU's layer says what its products moved; the CPU's moves nothing.
                match backend {
                    BackendChoice::Cpu => assert_eq!(gpu_bytes, None),
                    _ => assert!(gpu_bytes.is_some_and(|(to, from)| to > 0 && from > 0), "{gpu_bytes:?}"),
                }
                heads
            }
            other => panic!("layer {layer}: {:?}", other.map(|_| "another reply")),
        }
    };
    let mut differs = false;
    for layer in 0..2 {
        let (on_gpu, on_cpu) = (layer_on(layer, BackendChoice::Gpu), layer_on(layer, BackendChoice::Cpu));
        for (g, c) in on_gpu.iter().zip(&on_cpu) {
            let id = c.id();
            for ((what, g), (_, c)) in g.circuits().into_iter().zip(c.circuits()) {
                let what = format!("{id} {what}");
                assert_near(Some(g.copying_score), Some(c.copying_score), 1.0, &what);
                assert_near(g.eigenvector_condition, c.eigenvector_condition, 1.0, &what);
            }
            differs |= g.ov.copying_score != c.ov.copying_score || g.qk_token.scale != c.qk_token.scale;
        }
    }
    assert!(differs, "the GPU's token-space circuits are the CPU's bits: the GPU did not compute them");
}

mod cli {
    use std::process::Command;

    use super::fixture;

    /// Runs the CLI; `no_adapter` hides every adapter (WGPU_BACKEND names GL, which this build
    /// does not include), as on a machine with no GPU driver at all.
    fn headprint(args: &[&str], no_adapter: bool) -> (bool, String, String) {
        let mut command = Command::new(env!("CARGO_BIN_EXE_headprint"));
        if no_adapter {
            command.env("WGPU_BACKEND", "gl");
        }
        // As on a machine with no display server, where libwayland complains when Mesa loads it.
        command.env_remove("XDG_RUNTIME_DIR");
        let out = command.args(args).output().expect("runs");
        (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
    }

    fn fingerprint(backend: &str, no_adapter: bool) -> (serde_json::Value, String) {
        let path = fixture("pythia");
        let (ok, stdout, stderr) =
            headprint(&["fingerprint", path.to_str().unwrap(), "--json", "--backend", backend], no_adapter);
        assert!(ok, "--backend {backend} failed: {stderr}");
        (serde_json::from_str(&stdout).expect("JSON"), stderr)
    }

    #[test]
    fn the_json_records_the_backend_and_the_numbers_agree() {
        let (gpu, _) = fingerprint("gpu", false);
        assert_eq!(gpu["backend"]["name"], "gpu", "{}", gpu["backend"]);
        assert!(!gpu["backend"]["adapter"].as_str().expect("the adapter is named").is_empty());
        let (gpu_table, stderr) = fingerprint("gpu", false);
        assert!(gpu_table["heads"].is_array());
        assert!(stderr.is_empty(), "no driver chatter on stderr: {stderr}");
        let (cpu, stderr) = fingerprint("cpu", false);
        assert_eq!(cpu["backend"], serde_json::json!({"name": "cpu"}));
        assert!(!stderr.contains("note:"), "{stderr}");
        let (g, c) = (&gpu["heads"][5]["ov"], &cpu["heads"][5]["ov"]);
        for key in ["copying_score", "eigenvector_condition", "departure_from_normality"] {
            let (g, c) = (g[key].as_f64().unwrap(), c[key].as_f64().unwrap());
            assert!((g - c).abs() <= 1e-4 * c.abs().max(1.0), "{key}: GPU {g}, CPU {c}");
        }
    }

    /// The bytes that cross to and from the device, by stage: every Gram comes back once, as the
    /// two f32 parts of each entry of its upper triangle (the product of two, whole), and every
    /// embedding entry goes over at least once (as f32: the fixture's values need all 32 bits).
    #[test]
    fn the_json_counts_the_bytes_moved_to_and_from_the_gpu() {
        let (gpu, _) = fingerprint("gpu", false);
        let backend = &gpu["backend"];
        let model = &gpu["model"];
        let (d, vocab) = (model["d_model"].as_u64().unwrap(), model["vocab"].as_u64().unwrap());
        let stages = backend["stages"].as_array().expect("stages");
        let names: Vec<_> = stages.iter().map(|s| s["stage"].as_str().unwrap()).collect();
        assert_eq!(names, ["grams", "heads"]);
        for way in ["bytes_to_device", "bytes_from_device"] {
            let total: u64 = stages.iter().map(|s| s[way].as_u64().unwrap()).sum();
            assert_eq!(backend[way].as_u64(), Some(total), "{way}: the total is the stages' sum");
        }
        // The pythia fixture's embedding and unembedding are separate: three Grams.
        // The two Grams as their upper triangles, the product between them whole.
        assert_eq!(stages[0]["bytes_from_device"].as_u64(), Some((d * (d + 1) + d * d) * 8), "{backend}");
        assert!(stages[0]["bytes_to_device"].as_u64().unwrap() >= 2 * vocab * d * 4, "{backend}");
        assert!(
            stages[1]["bytes_from_device"].as_u64().unwrap() > 0 && stages[1]["bytes_to_device"].as_u64().unwrap() > 0
        );
    }

    #[test]
    fn without_an_adapter_auto_notes_the_cpu_and_forced_gpu_is_an_error() {
        let (auto, stderr) = fingerprint("auto", true);
        assert_eq!(auto["backend"]["name"], "cpu");
        let note = auto["backend"]["note"].as_str().expect("a note says why not the GPU");
        assert!(note.contains("no GPU adapter"), "{note}");
        assert_eq!(stderr.trim(), format!("note: {note}"), "one line on stderr");

        let path = fixture("pythia");
        let (ok, stdout, stderr) = headprint(&["fingerprint", path.to_str().unwrap(), "--backend", "gpu"], true);
        assert!(!ok && stdout.is_empty(), "forced GPU without an adapter must fail");
        assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("headprint: --backend gpu: no GPU adapter found"), "{stderr}");
    }
}
