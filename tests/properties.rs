//! Properties of the spectral fingerprint that cannot hold by accident
//! (docs/methods.md#3-the-fingerprint-of-a-circuit).

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
        // The naive κ of the small matrix B A itself is not invariant: that is why κ is taken on
        // the circuit itself (docs/methods.md#3-the-fingerprint-of-a-circuit).
    }
}

/// A left factor with a repeated column (rank r - 1), exactly or to within 1e-8 (singular values
/// 1e-8 of the largest count as zero), is restricted to its range: the same fingerprint as the
/// circuit written with r - 1 columns, plus one zero eigenvalue. Full-rank left factors take a
/// Cholesky restriction and these an eigendecomposition; both must describe the same circuit.
#[test]
fn a_rank_deficient_left_factor_is_restricted_to_its_range() {
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    for trial in 0..40 {
        let (n, k) = (24, 3 + trial % 5);
        let nudge = if trial % 2 == 0 { 0.0 } else { 1e-8 };
        let (a, b) = (random(n, k, &mut rng), random(k, n, &mut rng));
        let (extra, noise) = (random(1, n, &mut rng), random(n, 1, &mut rng));
        // M = [a | a_0] [b; extra] = a (b + e_0 extra), up to the nudge.
        let a_wide =
            DMatrix::from_fn(n, k + 1, |i, j| if j == k { a[(i, 0)] + nudge * noise[(i, 0)] } else { a[(i, j)] });
        let b_tall = DMatrix::from_fn(k + 1, n, |i, j| if i == k { extra[(0, j)] } else { b[(i, j)] });
        let mut b_folded = b.clone();
        b_folded.row_mut(0).zip_apply(&extra.row(0), |x, e| *x += e);
        // Tolerances: rounding, or the nudge's share of the circuit where there is one.
        let tolerance = 1e-8_f64.max(100.0 * nudge);

        let full = factored(&a, &b_folded).fingerprint().unwrap();
        let deficient = factored(&a_wide, &b_tall).fingerprint().unwrap();
        assert_eq!(deficient.eigenvalues.len(), k + 1);
        let last = deficient.eigenvalues[k];
        assert!(last.abs() == 0.0, "trial {trial}: the dropped direction's eigenvalue is {last:?}");
        for (x, y) in full.eigenvalues.iter().zip(&deficient.eigenvalues) {
            let close = (x.re - y.re).abs() < tolerance && (x.im.abs() - y.im.abs()).abs() < tolerance;
            assert!(close, "trial {trial}: {x:?} vs {y:?}");
        }
        assert!((full.copying_score - deficient.copying_score).abs() < tolerance);
        assert!((full.departure_from_normality - deficient.departure_from_normality).abs() < tolerance);
        let (k1, k2) = (full.eigenvector_condition.unwrap(), deficient.eigenvector_condition.unwrap());
        assert!((k1 - k2).abs() < 100.0 * tolerance * k1, "trial {trial}: κ {k1} vs {k2}");
    }
}

/// Where the rank tolerance cuts: a left factor whose smallest singular value is 5e-6 of its
/// largest (eigenvalue of A^T A 2.5e-11, below 1e-10) loses that direction, one at 1.5e-5 (2.25e-10,
/// where the Cholesky bound cannot vouch for it and the eigendecomposition decides) keeps it. The
/// kept spectrum is checked against the eigenvalues of the whole n x n circuit.
#[test]
fn the_rank_tolerance_decides_which_directions_count() {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    let (n, r) = (24, 5);
    for (smallest, kept) in [(5e-6, false), (1.5e-5, true)] {
        for trial in 0..10 {
            // A = Q diag(1, .., 1, smallest) W^T, Q orthonormal, W orthogonal.
            let q = orthonormal(n, r, &mut rng);
            let w = orthonormal(r, r, &mut rng);
            let sigma = DMatrix::from_fn(r, r, |i, j| match (i == j, i + 1 == r) {
                (false, _) => 0.0,
                (true, false) => 1.0,
                (true, true) => smallest,
            });
            let a = &q * sigma * w.transpose();
            let b = random(r, n, &mut rng);
            let fp = factored(&a, &b).fingerprint().unwrap();
            let last = fp.eigenvalues[r - 1];
            if !kept {
                assert_eq!(last.abs(), 0.0, "σ ratio {smallest}, trial {trial}: the direction should be dropped");
                continue;
            }
            assert!(last.abs() > 0.0, "σ ratio {smallest}, trial {trial}: the direction should be kept");
            let mut reference: Vec<(f64, f64)> = (&a * &b).complex_eigenvalues().iter().map(|z| (z.re, z.im)).collect();
            reference.sort_by(|x, y| y.0.hypot(y.1).total_cmp(&x.0.hypot(x.1)));
            for (l, (re, im)) in fp.eigenvalues.iter().zip(&reference) {
                let close = (l.re - re).abs() < 1e-6 * fp.scale && (l.im.abs() - im.abs()).abs() < 1e-6 * fp.scale;
                assert!(close, "σ ratio {smallest}, trial {trial}: {l:?} vs the whole circuit's ({re}, {im})");
            }
        }
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
    assert!(fp.defective() && fp.error.is_none());
}

/// A random orthonormal n x r matrix (QR of a random one).
fn orthonormal(n: usize, r: usize, rng: &mut ChaCha8Rng) -> DMatrix<f64> {
    random(n, r, rng).qr().q()
}

/// The circuit `U X U^T` of rank r in a 24-dimensional space, split into factors through a
/// random gauge (A = U G, B = G⁻¹ X U^T): κ must be that of X's eigenvectors.
fn embedded(x: &DMatrix<f64>, rng: &mut ChaCha8Rng) -> Factored {
    let r = x.nrows();
    let u = orthonormal(24, r, rng);
    let g = random(r, r, rng) + DMatrix::identity(r, r) * 2.0;
    let g_inv = g.clone().try_inverse().unwrap();
    factored(&(&u * &g), &(g_inv * x * u.transpose()))
}

/// `S D S⁻¹` for a random well-conditioned S: a similarity that skews the eigenvectors.
fn through_similarity(d: &DMatrix<f64>, rng: &mut ChaCha8Rng) -> DMatrix<f64> {
    let r = d.nrows();
    let s = random(r, r, rng) + DMatrix::identity(r, r) * 2.0;
    &s * d * s.clone().try_inverse().unwrap()
}

#[test]
fn perturbed_jordan_blocks_are_defective() {
    // A size-k Jordan block perturbed by ε has eigenvector angles ~ε^(1/k): σ_min/σ_max of the
    // unit eigenvectors ~ε^((k-1)/k), below the 1e-5 threshold for every ε up to 1e-10.
    let mut rng = ChaCha8Rng::seed_from_u64(5);
    let mut finite = Vec::new();
    for size in [2, 3] {
        for noise in [0.0, 1e-15, 1e-12, 1e-10] {
            for trial in 0..10 {
                // The block beside three simple eigenvalues, as inside a real head.
                let r = size + 3;
                let mut block = DMatrix::<f64>::zeros(r, r);
                for i in 0..size {
                    block[(i, i)] = 1.5;
                    if i + 1 < size {
                        block[(i, i + 1)] = 1.0;
                    }
                }
                for (i, value) in [-0.7, 0.3, 2.2].into_iter().enumerate() {
                    block[(size + i, size + i)] = value;
                }
                let mut x = through_similarity(&block, &mut rng);
                let perturbation = random(r, r, &mut rng);
                x += &perturbation * (noise * x.norm() / perturbation.norm());
                let fp = embedded(&x, &mut rng).fingerprint().unwrap();
                if let Some(kappa) = fp.eigenvector_condition {
                    finite.push(format!("size {size}, noise {noise:e}, trial {trial}: κ = {kappa:e}"));
                }
            }
        }
    }
    assert!(finite.is_empty(), "reported finite: {finite:#?}");
}

#[test]
fn repeated_but_semisimple_eigenvalues_have_finite_condition() {
    let mut rng = ChaCha8Rng::seed_from_u64(6);
    // The identity OV circuit: every eigenvalue is 1, and any basis is an eigenbasis.
    let w_v = random(16, 4, &mut rng);
    let w_o = w_v.clone().pseudo_inverse(1e-12).unwrap();
    let fp = factored(&w_v, &w_o).fingerprint().unwrap();
    assert!(!fp.defective());
    let kappa = fp.eigenvector_condition.unwrap();
    assert!((kappa - 1.0).abs() < 1e-12, "identity κ {kappa}");
    // diag(2, 2, 1) through an orthogonal gauge: a normal matrix with a repeated eigenvalue.
    for trial in 0..10 {
        let q = orthonormal(3, 3, &mut rng);
        let x = &q * DMatrix::from_diagonal(&nalgebra::dvector![2.0, 2.0, 1.0]) * q.transpose();
        let fp = embedded(&x, &mut rng).fingerprint().unwrap();
        let kappa = fp.eigenvector_condition.expect("not defective");
        assert!((kappa - 1.0).abs() < 1e-9, "trial {trial}: diag(2,2,1) κ {kappa}");
    }
    // A symmetric matrix with a repeated eigenvalue, r = 6: eigenvalues 3, 3, 3, -1, 0.5, 0.5.
    for trial in 0..10 {
        let q = orthonormal(6, 6, &mut rng);
        let d = DMatrix::from_diagonal(&nalgebra::dvector![3.0, 3.0, 3.0, -1.0, 0.5, 0.5]);
        let fp = embedded(&(&q * d * q.transpose()), &mut rng).fingerprint().unwrap();
        let kappa = fp.eigenvector_condition.expect("not defective");
        assert!((kappa - 1.0).abs() < 1e-9, "trial {trial}: symmetric κ {kappa}");
    }
}

#[test]
fn an_ill_conditioned_diagonalisable_circuit_has_its_analytic_condition() {
    // X = [[1, b], [0, 1 + g]] has unit eigenvectors e1 and (b, g)/√(b² + g²). With c = cos θ =
    // b/√(b² + g²) between them, V^H V = [[1, c], [c, 1]] has eigenvalues 1 ± c, so
    // κ = √((1 + c) / (1 − c)). b = 1, g = 2e-3 gives κ ≈ 1000, far from defective.
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    for (b, g) in [(1.0f64, 2e-3f64), (1.0, 2e-4), (0.5, 0.1)] {
        let x = DMatrix::from_row_slice(2, 2, &[1.0, b, 0.0, 1.0 + g]);
        let c: f64 = b / (b * b + g * g).sqrt();
        let analytic = ((1.0 + c) / (1.0 - c)).sqrt();
        let fp = embedded(&x, &mut rng).fingerprint().unwrap();
        let kappa = fp.eigenvector_condition.expect("finite");
        assert!((kappa - analytic).abs() < 1e-6 * analytic, "b {b}, g {g}: κ {kappa} vs analytic {analytic}");
    }
}

/// A 2x2 Jordan block `[[1, δ], [0, 1]]` (through a random similarity, beside simple
/// eigenvalues): within the rounding budget (δ ≤ 1e-12) it is the identity on that eigenspace
/// and gets κ = 1; a larger coupling is never orthonormalised away: κ grows with δ and a strong
/// coupling is flagged as defective. (δ = 1e-8 is exactly defective too: whether rounding leaves
/// its κ finite, ~1e4, or flags it depends on how the solver's backward error splits the double
/// eigenvalue; faer's `eigen` left it finite, the Schur back substitution flags it. Either way
/// it must not come out near 1.)
#[test]
fn a_jordan_coupling_is_not_orthonormalised_away() {
    let mut rng = ChaCha8Rng::seed_from_u64(11);
    let kappa_of = |delta: f64, rng: &mut ChaCha8Rng| {
        let mut x = DMatrix::<f64>::zeros(5, 5);
        x[(0, 0)] = 1.0;
        x[(1, 1)] = 1.0;
        x[(0, 1)] = delta;
        for (i, value) in [(2, 3.0), (3, -2.0), (4, 0.5)] {
            x[(i, i)] = value;
        }
        let q = orthonormal(5, 5, rng);
        let circuit = factored(&q, &(&x * q.transpose()));
        circuit.fingerprint().unwrap().eigenvector_condition
    };
    let tiny = kappa_of(1e-12, &mut rng).expect("within rounding of a semisimple eigenvalue");
    assert!((tiny - 1.0).abs() < 1e-6, "δ = 1e-12: κ = {tiny}");
    let small = kappa_of(1e-8, &mut rng);
    assert!(small.is_none_or(|k| k > 1e2), "δ = 1e-8 must not be orthonormalised away: κ = {small:?}");
    for delta in [1e-2, 1.0] {
        assert_eq!(kappa_of(delta, &mut rng), None, "δ = {delta}: an exactly defective block");
    }
}

/// `B A = 0` while `M = A B ≠ 0`: a nilpotent circuit (as a head that moves one token's
/// direction to another's) is neither "zero" nor a set of noise ratios.
#[test]
fn a_nilpotent_circuit_is_named_as_such() {
    let mut rng = ChaCha8Rng::seed_from_u64(12);
    let q = orthonormal(16, 4, &mut rng);
    // A maps onto directions 0..2 of the residual, B reads directions 2..4: B A = 0.
    let (a, b) = (q.columns(0, 2).into_owned(), q.columns(2, 2).transpose());
    let error = factored(&a, &b).fingerprint().unwrap_err();
    assert!(error.contains("nilpotent") && !error.contains("the circuit is zero"), "{error}");
    // Nearly nilpotent (B A at rounding level): the same, not noise printed as scores.
    let b_noisy = &b + &q.columns(0, 2).transpose() * 1e-17;
    let error = factored(&a, &b_noisy).fingerprint().unwrap_err();
    assert!(error.contains("nilpotent"), "{error}");
}

/// `X` of size `r`: `special` beside a normal block of distinct eigenvalues (reals and
/// conjugate pairs, all with real part ≥ 4, far from the special block's), turned by a random
/// orthogonal similarity. Its eigenvectors are the special block's beside orthonormal ones, so
/// κ and defectiveness are the special block's at any size. Returns X and its eigenvalues.
fn beside_a_normal_block(special: &DMatrix<f64>, r: usize, rng: &mut ChaCha8Rng) -> (DMatrix<f64>, Vec<(f64, f64)>) {
    let k = special.nrows();
    let mut x = DMatrix::<f64>::zeros(r, r);
    x.view_mut((0, 0), (k, k)).copy_from(special);
    let mut values = Vec::new();
    let mut i = k;
    while i < r {
        let (re, im) = (4.0 + 0.013 * i as f64, 0.3 + 0.007 * i as f64);
        if i + 1 < r {
            x[(i, i)] = re;
            x[(i + 1, i + 1)] = re;
            x[(i, i + 1)] = -im;
            x[(i + 1, i)] = im;
            values.extend([(re, im), (re, -im)]);
            i += 2;
        } else {
            x[(i, i)] = re;
            values.push((re, 0.0));
            i += 1;
        }
    }
    let q = orthonormal(r, r, rng);
    (&q * x * q.transpose(), values)
}

/// `X` as a rank-r circuit in a space 8 wider, split through a well-conditioned random gauge.
fn embedded_wide(x: &DMatrix<f64>, rng: &mut ChaCha8Rng) -> Factored {
    let r = x.nrows();
    let u = orthonormal(r + 8, r, rng);
    let g = DMatrix::identity(r, r) * 2.0 + random(r, r, rng) / (r as f64).sqrt();
    let g_inv = g.clone().try_inverse().unwrap();
    factored(&(&u * &g), &(g_inv * x * u.transpose()))
}

/// Small circuits take nalgebra's Schur route and large ones (d_head 256 natively) faer's
/// blocked eigendecomposition: both must give the eigenvalues, the analytic κ of an
/// ill-conditioned pair of real eigenvalues and of complex ones, an infinite κ for a perturbed
/// Jordan block and κ = 1 for a repeated eigenvalue (real, and a complex pair) of a normal matrix.
#[test]
fn small_and_large_circuits_keep_the_same_properties() {
    // r = 256 must take faer's route (a compile error when the threshold moves past it).
    const { assert!(256 >= headprint::analysis::spectrum::BLOCKED_FROM) };
    let mut rng = ChaCha8Rng::seed_from_u64(13);
    for r in [24, 256] {
        // [[1, 1], [0, 1 + g]]: κ = √((1 + c) / (1 − c)), c = 1/√(1 + g²) (see above).
        let g = 2e-3f64;
        let pair = DMatrix::from_row_slice(2, 2, &[1.0, 1.0, 0.0, 1.0 + g]);
        let (x, mut values) = beside_a_normal_block(&pair, r, &mut rng);
        values.extend([(1.0, 0.0), (1.0 + g, 0.0)]);
        let fp = embedded_wide(&x, &mut rng).fingerprint().unwrap();
        let c = 1.0 / (1.0 + g * g).sqrt();
        let analytic = ((1.0 + c) / (1.0 - c)).sqrt();
        let kappa = fp.eigenvector_condition.expect("finite");
        assert!((kappa - analytic).abs() < 1e-6 * analytic, "r {r}: κ {kappa} vs analytic {analytic}");
        assert_eq!(fp.eigenvalues.len(), r);
        let mut unmatched = values;
        for l in &fp.eigenvalues {
            let nearest = (0..unmatched.len())
                .min_by(|&i, &j| {
                    let d = |(re, im): (f64, f64)| (re - l.re).hypot(im - l.im);
                    d(unmatched[i]).total_cmp(&d(unmatched[j]))
                })
                .unwrap();
            let (re, im) = unmatched.swap_remove(nearest);
            assert!((re - l.re).hypot(im - l.im) < 1e-9, "r {r}: {l:?} against {re} {im}i");
        }

        // [[1, b], [-c, 1]]: eigenvalues 1 ± i√(bc), unit eigenvectors (√b, ±i√c)/√(b + c), whose
        // Gram matrix [[1, (b - c)/(b + c)], [.., 1]] gives κ = √(b/c).
        let (b, c) = (100.0f64, 0.01f64);
        let rotation = DMatrix::from_row_slice(2, 2, &[1.0, b, -c, 1.0]);
        let (x, _) = beside_a_normal_block(&rotation, r, &mut rng);
        let fp = embedded_wide(&x, &mut rng).fingerprint().unwrap();
        let kappa = fp.eigenvector_condition.expect("finite");
        assert!((kappa - (b / c).sqrt()).abs() < 1e-6 * (b / c).sqrt(), "r {r}: complex pair's κ {kappa}, not 100");

        // A Jordan block perturbed within rounding: defective.
        let mut jordan = DMatrix::from_row_slice(2, 2, &[1.5, 1.0, 0.0, 1.5]);
        jordan[(1, 0)] = 1e-14;
        let (x, _) = beside_a_normal_block(&jordan, r, &mut rng);
        let fp = embedded_wide(&x, &mut rng).fingerprint().unwrap();
        assert_eq!(fp.eigenvector_condition, None, "r {r}: a Jordan block must be defective");

        // 2 I on three directions beside the normal block: normal, so κ = 1.
        let (x, _) = beside_a_normal_block(&(DMatrix::identity(3, 3) * 2.0), r, &mut rng);
        let fp = embedded_wide(&x, &mut rng).fingerprint().unwrap();
        let kappa = fp.eigenvector_condition.expect("semisimple");
        assert!((kappa - 1.0).abs() < 1e-9, "r {r}: repeated eigenvalue of a normal matrix: κ {kappa}");
        assert!(fp.departure_from_normality < 1e-6, "r {r}: departure {}", fp.departure_from_normality);

        // The same rotation-scaling twice: a repeated complex pair of a normal matrix, κ = 1 (its
        // eigenspaces are orthonormalised only if each vector is paired with its own eigenvalue).
        let twice = DMatrix::from_row_slice(
            4,
            4,
            &[
                1.0, -2.0, 0.0, 0.0, //
                2.0, 1.0, 0.0, 0.0, //
                0.0, 0.0, 1.0, -2.0, //
                0.0, 0.0, 2.0, 1.0,
            ],
        );
        let (x, _) = beside_a_normal_block(&twice, r, &mut rng);
        let fp = embedded_wide(&x, &mut rng).fingerprint().unwrap();
        let kappa = fp.eigenvector_condition.expect("semisimple");
        assert!((kappa - 1.0).abs() < 1e-9, "r {r}: repeated complex pair of a normal matrix: κ {kappa}");
    }
}
