//! The cost of one circuit's fingerprint (the per-head eigen work), at d_head 64 to 256, with
//! the decompositions it is made of timed alone beside it. One thread; random factors of
//! GPT-2's width (768). Run: `cargo run --release --example spectra_bench`.

use headprint::analysis::Factored;
use nalgebra::DMatrix;
use rand::{Rng, SeedableRng};
use std::time::Instant;

fn main() {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(1);
    for (r, count) in [(64, 200), (80, 100), (96, 100), (128, 40), (256, 10)] {
        let d = 768;
        let circuits: Vec<Factored> = (0..count)
            .map(|_| {
                let a = DMatrix::from_fn(d, r, |_, _| rng.random::<f64>() - 0.5);
                let b = DMatrix::from_fn(r, d, |_, _| rng.random::<f64>() - 0.5);
                Factored { small: &b * &a, gram_left: a.transpose() * &a, gram_right: &b * b.transpose() }
            })
            .collect();
        let time = |what: &str, each: &dyn Fn(&Factored)| {
            // One pass to warm the caches and the allocator, then the timed one.
            circuits.iter().take(count / 10).for_each(each);
            let start = Instant::now();
            circuits.iter().for_each(each);
            println!("d_head {r}: {what}: {:.3} ms", start.elapsed().as_secs_f64() * 1e3 / count as f64);
        };
        time("whole fingerprint", &|c| {
            std::hint::black_box(c.fingerprint().expect("a random circuit has a fingerprint"));
        });
        time("  Cholesky of A^T A and the inverse of its factor (the full-rank restriction)", &|c| {
            let lower = c.gram_left.clone().cholesky().expect("a random A has full rank").unpack();
            std::hint::black_box(lower.solve_lower_triangular(&DMatrix::identity(r, r)));
        });
        time("  symmetric eigendecomposition of A^T A (the rank-deficient fallback)", &|c| {
            std::hint::black_box(nalgebra::SymmetricEigen::new(c.gram_left.clone()));
        });
        time("  nalgebra's real Schur form with Q (the route below d_head 192)", &|c| {
            std::hint::black_box(nalgebra::Schur::new(c.small.clone()));
        });
        time("  eigenvalues alone (no Q)", &|c| {
            std::hint::black_box(c.small.complex_eigenvalues());
        });
        time("  faer's eigendecomposition with vectors, one thread (the route from d_head 192 natively)", &|c| {
            use faer::linalg::evd;
            let m = faer::Mat::from_fn(r, r, |i, j| c.small[(i, j)]);
            let (mut re, mut im) = (faer::diag::Diag::<f64>::zeros(r), faer::diag::Diag::<f64>::zeros(r));
            let mut u = faer::Mat::<f64>::zeros(r, r);
            let par = faer::Par::Seq;
            let scratch = evd::evd_scratch::<f64>(
                r,
                evd::ComputeEigenvectors::No,
                evd::ComputeEigenvectors::Yes,
                par,
                Default::default(),
            );
            let mut buffer = faer::dyn_stack::MemBuffer::new(scratch);
            evd::evd_real(
                m.as_ref(),
                re.as_mut(),
                im.as_mut(),
                None,
                Some(u.as_mut()),
                par,
                faer::dyn_stack::MemStack::new(&mut buffer),
                Default::default(),
            )
            .unwrap();
            std::hint::black_box(u);
        });
        time("  singular values, nalgebra (κ's SVD in the tab)", &|c| {
            std::hint::black_box(nalgebra::SVD::new(c.small.clone(), false, false));
        });
        time("  singular values, faer (κ's SVD natively)", &|c| {
            use faer::dyn_stack::{MemBuffer, MemStack};
            use faer::linalg::svd::{ComputeSvdVectors, svd, svd_scratch};
            let m = faer::Mat::from_fn(r, r, |i, j| c.small[(i, j)]);
            let mut values = faer::diag::Diag::<f64>::zeros(r);
            let (no, par) = (ComputeSvdVectors::No, faer::Par::Seq);
            let mut buffer = MemBuffer::new(svd_scratch::<f64>(r, r, no, no, par, Default::default()));
            svd(m.as_ref(), values.as_mut(), None, None, par, MemStack::new(&mut buffer), Default::default()).unwrap();
            std::hint::black_box(values);
        });
    }
}
