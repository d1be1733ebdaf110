//! Properties of the spectral fingerprint that cannot hold by accident (spec section 2).

use headprint::analysis::Factored;
use nalgebra::DMatrix;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

fn random(rows: usize, cols: usize, rng: &mut ChaCha8Rng) -> DMatrix<f64> {
    DMatrix::from_fn(rows, cols, |_, _| rng.random_range(-1.0..1.0))
}

/// The circuit M = A B in factored form.
fn factored(a: &DMatrix<f64>, b: &DMatrix<f64>) -> Factored {
    Factored { small: b * a, gram_left: a.tr_mul(a), gram_right: b * b.transpose() }
}

#[test]
fn eigenvalues_sum_to_the_trace_and_come_in_conjugate_pairs() {
    let mut rng = ChaCha8Rng::seed_from_u64(1);
    for trial in 0..50 {
        let (n, r) = (12 + trial % 5, 3 + trial % 6);
        let (a, b) = (random(n, r, &mut rng), random(r, n, &mut rng));
        let fp = factored(&a, &b).fingerprint().unwrap();
        let trace = (&b * &a).trace();
        let (re, im): (f64, f64) = fp.eigenvalues.iter().fold((0.0, 0.0), |(x, y), l| (x + l.re, y + l.im));
        assert!((re - trace).abs() < 1e-9 * trace.abs().max(1.0), "trial {trial}: Σλ {re} vs trace {trace}");
        assert!(im.abs() < 1e-9, "trial {trial}: imaginary parts do not cancel: {im}");
        for l in fp.eigenvalues.iter().filter(|l| l.im.abs() > 1e-9) {
            let partner = fp.eigenvalues.iter().any(|m| (m.re - l.re).abs() < 1e-9 && (m.im + l.im).abs() < 1e-9);
            assert!(partner, "trial {trial}: {l:?} has no conjugate");
        }
        assert!(fp.copying_score.abs() <= 1.0 + 1e-12 && (0.0..=1.0 + 1e-12).contains(&fp.imaginary_fraction));
        assert!((0.0..=1.0).contains(&fp.departure_from_normality));
        assert_eq!(fp.eigenvalues.len(), r);
    }
}

#[test]
fn an_identity_circuit_copies_perfectly() {
    let mut rng = ChaCha8Rng::seed_from_u64(2);
    let w_v = random(16, 4, &mut rng);
    // W_O = W_V^+ makes W_V W_O the projection onto W_V's range: eigenvalues 1.
    let w_o = w_v.clone().pseudo_inverse(1e-12).unwrap();
    let fp = factored(&w_v, &w_o).fingerprint().unwrap();
    assert!((fp.copying_score - 1.0).abs() < 1e-10, "copying score {}", fp.copying_score);
    assert!(fp.imaginary_fraction < 1e-10);
    assert!((fp.scale - 4.0).abs() < 1e-9);
    assert!(fp.departure_from_normality < 1e-6, "a projection is normal on its range");
}

#[test]
fn a_symmetric_qk_is_normal() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let w_q = random(20, 5, &mut rng);
    // W_K = W_Q: M = W_Q W_Q^T is symmetric.
    let fp = factored(&w_q, &w_q.transpose()).fingerprint().unwrap();
    assert!(fp.departure_from_normality < 1e-6, "departure {}", fp.departure_from_normality);
    let kappa = fp.eigenvector_condition.unwrap();
    assert!((kappa - 1.0).abs() < 1e-8, "κ {kappa}");
    assert!((fp.copying_score - 1.0).abs() < 1e-12, "positive semidefinite");
}

#[test]
fn fingerprint_is_gauge_invariant() {
    let mut rng = ChaCha8Rng::seed_from_u64(4);
    for trial in 0..20 {
        let (w_v, w_o) = (random(24, 6, &mut rng), random(6, 24, &mut rng));
        let g = random(6, 6, &mut rng) + DMatrix::identity(6, 6) * 2.0;
        let g_inv = g.clone().try_inverse().unwrap();
        let before = factored(&w_v, &w_o).fingerprint().unwrap();
        let after = factored(&(&w_v * &g), &(&g_inv * &w_o)).fingerprint().unwrap();
        for (x, y) in before.eigenvalues.iter().zip(&after.eigenvalues) {
            assert!(
                (x.re - y.re).abs() < 1e-8 && (x.im.abs() - y.im.abs()).abs() < 1e-8,
                "trial {trial}: {x:?} vs {y:?}"
            );
        }
        assert!((before.copying_score - after.copying_score).abs() < 1e-9);
        assert!((before.departure_from_normality - after.departure_from_normality).abs() < 1e-8);
        let (k1, k2) = (before.eigenvector_condition.unwrap(), after.eigenvector_condition.unwrap());
        assert!((k1 - k2).abs() < 1e-6 * k1, "trial {trial}: κ {k1} vs {k2}");
        // The naive κ of the small matrix B A itself is not invariant: that is why the spec asks for this.
    }
}

#[test]
fn zero_and_nan_circuits_are_errors_not_hangs() {
    let zero =
        Factored { small: DMatrix::zeros(8, 8), gram_left: DMatrix::zeros(8, 8), gram_right: DMatrix::zeros(8, 8) };
    assert!(zero.fingerprint().unwrap_err().contains("zero"));
    let mut nan = factored(&DMatrix::identity(8, 8), &DMatrix::identity(8, 8));
    nan.small[(2, 3)] = f64::NAN;
    assert!(nan.fingerprint().unwrap_err().contains("non-finite"));
}

#[test]
fn a_defective_circuit_reports_infinite_condition() {
    // A Jordan block: one eigenvalue, one eigenvector.
    let mut jordan = DMatrix::<f64>::identity(4, 4);
    for i in 0..3 {
        jordan[(i, i + 1)] = 1.0;
    }
    let fp = factored(&DMatrix::identity(4, 4), &jordan).fingerprint().unwrap();
    assert_eq!(fp.eigenvector_condition, None);
}
