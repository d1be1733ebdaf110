//! The CPU's product shapes timed the ways they could be computed natively, to choose between them
//! (`crates/core/src/backend/cpu.rs`): a layer's `F [W_Q | W_K | W_V]` with the Gram's
//! upper-triangular factor F (a full product, faer's triangular product, or panels of 128 rows from
//! the diagonal on, as `upper_product`), and a head's small `A^T A` (a full `A^T A`, or the lower
//! triangle only, as `gram`). Run: `cargo run --release --example products_bench [d_model]`.

use faer::linalg::matmul::matmul;
use faer::linalg::matmul::triangular::{BlockStructure, matmul as triangular};
use faer::{Accum, Mat, Par};
use std::time::Instant;

/// Mean milliseconds of `reps` calls of `work`, after one call to warm up.
fn time(reps: usize, mut work: impl FnMut()) -> f64 {
    work();
    let start = Instant::now();
    for _ in 0..reps {
        work();
    }
    start.elapsed().as_secs_f64() * 1e3 / reps as f64
}

fn main() {
    let d: usize = std::env::args().nth(1).map_or(768, |s| s.parse().expect("d_model, a number"));
    let d_head = 64;
    let full = BlockStructure::Rectangular;
    let upper = Mat::<f64>::from_fn(d, d, |i, j| if i <= j { ((i * 7 + j) % 11) as f64 - 5.0 } else { 0.0 });
    let x = Mat::<f64>::from_fn(d, 3 * d, |i, j| ((i * 3 + j) % 17) as f64 - 8.0);
    let mut y = Mat::<f64>::zeros(d, 3 * d);
    let a = Mat::<f64>::from_fn(d, d_head, |i, j| ((i * 5 + j * 3) % 13) as f64 - 6.0);
    let mut small = Mat::<f64>::zeros(d_head, d_head);
    for round in 0..3 {
        let whole = time(10, || matmul(y.as_mut(), Accum::Replace, upper.as_ref(), x.as_ref(), 1.0, Par::rayon(0)));
        let faer_triangular = time(10, || {
            let (u, x) = (upper.as_ref(), x.as_ref());
            triangular(
                y.as_mut(),
                full,
                Accum::Replace,
                u,
                BlockStructure::TriangularUpper,
                x,
                full,
                1.0,
                Par::rayon(0),
            )
        });
        let panels = time(10, || {
            for start in (0..d).step_by(128) {
                let rows = 128.min(d - start);
                let u = upper.as_ref().submatrix(start, start, rows, d - start);
                matmul(
                    y.as_mut().subrows_mut(start, rows),
                    Accum::Replace,
                    u,
                    x.as_ref().subrows(start, d - start),
                    1.0,
                    Par::rayon(0),
                );
            }
        });
        println!(
            "round {round}, width {d}: F [W_Q | W_K | W_V] full {whole:.2} ms, faer's triangular {faer_triangular:.2} ms, 128-row panels {panels:.2} ms"
        );
        let small_full = time(200, || matmul(small.as_mut(), Accum::Replace, a.transpose(), a.as_ref(), 1.0, Par::Seq));
        let small_lower = time(200, || {
            let lower = BlockStructure::TriangularLower;
            triangular(small.as_mut(), lower, Accum::Replace, a.transpose(), full, a.as_ref(), full, 1.0, Par::Seq)
        });
        println!(
            "round {round}, width {d}: a head's A^T A full {small_full:.3} ms, lower triangle {small_lower:.3} ms"
        );
    }
}
