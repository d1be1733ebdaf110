//! The fingerprint of one circuit `M = A B` from three small matrices
//! (docs/methods.md#3-the-fingerprint-of-a-circuit): `B A` (whose eigenvalues are M's non-zero
//! ones), `A^T A` and `B B^T`. Nothing here is ever larger than d_head x d_head, and every
//! decomposition is bounded (nalgebra's run under an iteration cap, faer's return an error on
//! non-convergence or, for its eigendecomposition, are checked by their residuals: none loops).

use faer::Mat;
use faer::c64;
use nalgebra::DMatrix;
use serde::Serialize;

/// A circuit given by its factors' small products.
#[derive(Clone)]
pub struct Factored {
    /// `B A` (r x r): same non-zero eigenvalues as `A B`.
    pub small: DMatrix<f64>,
    /// `A^T A` (r x r).
    pub gram_left: DMatrix<f64>,
    /// `B B^T` (r x r).
    pub gram_right: DMatrix<f64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Eigenvalue {
    pub re: f64,
    pub im: f64,
}

impl Eigenvalue {
    pub fn abs(self) -> f64 {
        self.re.hypot(self.im)
    }
}

/// One circuit's fingerprint. A circuit that cannot be read (zero, non-finite, or an
/// eigensolver that did not converge) is still a `Fingerprint`: no eigenvalues, NaN numbers
/// and the reason in `error`, so one bad head never hides the others.
#[derive(Debug, Clone, PartialEq)]
pub struct Fingerprint {
    /// Sorted by |λ| descending; r = d_head of them (none when `error` is set).
    pub eigenvalues: Vec<Eigenvalue>,
    pub copying_score: f64,
    pub imaginary_fraction: f64,
    /// κ of the unit-norm eigenvector matrix; None when numerically defective (reported as +inf).
    pub eigenvector_condition: Option<f64>,
    pub departure_from_normality: f64,
    pub scale: f64,
    /// Why this circuit has no fingerprint; None when it has one.
    pub error: Option<String>,
}

impl Fingerprint {
    /// The fingerprint of a circuit that could not be read.
    pub fn failed(reason: String) -> Fingerprint {
        Fingerprint {
            eigenvalues: Vec::new(),
            copying_score: f64::NAN,
            imaginary_fraction: f64::NAN,
            eigenvector_condition: None,
            departure_from_normality: f64::NAN,
            scale: f64::NAN,
            error: Some(reason),
        }
    }

    /// Whether the circuit was too ill-conditioned to have a finite κ (false for a failed one).
    pub fn defective(&self) -> bool {
        self.error.is_none() && self.eigenvector_condition.is_none()
    }

    /// κ as a number: +∞ when defective (it ranks as the largest), NaN when the circuit failed.
    pub fn kappa(&self) -> f64 {
        match (&self.error, self.eigenvector_condition) {
            (Some(_), _) => f64::NAN,
            (None, Some(k)) => k,
            (None, None) => f64::INFINITY,
        }
    }
}

/// Eigenvalues of `A^T A` below this fraction of the largest count as zero (rank detection: A's
/// singular values below 1e-5 of its largest).
const RANK_TOLERANCE: f64 = 1e-10;
/// Eigenvector matrices with σ_min/σ_max below this are reported as defective (κ = +∞).
///
/// Why 1e-5. The eigensolver is backward stable: it returns the eigenvectors of `X + E` with
/// ‖E‖ ≈ p(r)·u·‖X‖ (u = 2.2e-16), and forming the restricted matrix X = R (B A) R⁺ adds a
/// relative error of about u·κ(R)·r. With d_head up to 256 and left factors conditioned up to
/// κ(R) ~ 1e4, we budget ε = 1e-10 for the relative error of the matrix we decompose. A Jordan
/// block of size k perturbed by ε splits into eigenvalues ε^(1/k) apart, and its unit
/// eigenvectors form a scaled Vandermonde matrix with σ_min/σ_max ≈ ε^((k-1)/k) ≤ √ε (k = 2
/// is the worst case). So a ratio below √ε = 1e-5 is what an exactly defective circuit can
/// produce: κ above 1e5 does not measure the circuit, and it is flagged. Measured in
/// tests/properties.rs (size-2 and size-3 blocks through a random similarity, 10 trials each):
/// exact blocks give ratios 5e-9 to 5e-7 (already ~√(1e-13) from rounding alone), blocks
/// perturbed by 1e-12 give at most 1.1e-6, all flagged; a diagonalisable X with κ = 1e4 is
/// finite and matches its analytic κ to 1e-6.
const DEFECTIVE_TOLERANCE: f64 = 1e-5;

impl Factored {
    pub fn fingerprint(&self) -> Result<Fingerprint, String> {
        let r = self.small.nrows();
        for (what, m) in [("B A", &self.small), ("A^T A", &self.gram_left), ("B B^T", &self.gram_right)] {
            if m.iter().any(|v| !v.is_finite()) {
                return Err(format!("{what} has non-finite entries"));
            }
        }
        let frobenius_squared = self.gram_left.component_mul(&self.gram_right.transpose()).sum();
        // Only ‖M‖_F tells a zero circuit: `B A` can be zero while `M = A B` is not (nilpotent).
        if frobenius_squared <= 0.0 {
            return Err("the circuit is zero: no eigenvalues to read".into());
        }

        // Restrict M to its range in an orthonormal basis: restricted = R (B A) R^+ for any R of
        // full row rank with R^T R = A^T A. Its eigenvalues are M's non-zero ones, its
        // eigenvectors M's own (in that basis), so κ does not depend on how W_V/W_O split the
        // circuit.
        let (root, root_pinv) = restriction(&self.gram_left)?;
        let restricted = &root * &self.small * &root_pinv;

        let eigen = Eigen::of(&restricted)?;
        let mut eigenvalues: Vec<Eigenvalue> =
            eigen.values.iter().map(|z: &c64| Eigenvalue { re: z.re, im: z.im }).collect();
        // Directions A sends to zero are zero eigenvalues of B A.
        eigenvalues.resize(r, Eigenvalue { re: 0.0, im: 0.0 });
        eigenvalues.sort_by(|a, b| b.abs().total_cmp(&a.abs()));

        let scale: f64 = eigenvalues.iter().map(|l| l.abs()).sum();
        if !scale.is_finite() {
            return Err("the eigenvalues are not finite".into());
        }
        // A nilpotent circuit (all eigenvalues zero, M ≠ 0) has no copying score or imaginary
        // fraction: computed in f64 its eigenvalues are rounding, ~√u·‖M‖ each, and their ratios
        // would be noise printed as numbers.
        if scale <= NILPOTENT_TOLERANCE * r as f64 * frobenius_squared.sqrt() {
            return Err(format!(
                "all eigenvalues are zero to rounding (Σ|λ| = {scale:.1e} for ‖M‖_F = {:.1e}): the circuit is nilpotent, \
                 so its copying score and imaginary fraction are undefined",
                frobenius_squared.sqrt()
            ));
        }
        let eigenvalue_energy: f64 = eigenvalues.iter().map(|l| l.abs().powi(2)).sum();
        Ok(Fingerprint {
            copying_score: eigenvalues.iter().map(|l| l.re).sum::<f64>() / scale,
            imaginary_fraction: eigenvalues.iter().map(|l| l.im.abs()).sum::<f64>() / scale,
            eigenvector_condition: eigenvector_condition(&eigen.matrix, &eigen.values, eigen.vectors.as_ref())?,
            departure_from_normality: (frobenius_squared - eigenvalue_energy).max(0.0).sqrt()
                / frobenius_squared.sqrt(),
            scale,
            eigenvalues,
            error: None,
        })
    }
}

/// `R` and `R^+` with `R^T R = A^T A` (docs/methods.md#3-the-fingerprint-of-a-circuit, κ), R of
/// full row rank and spanning the directions of A's range: those whose eigenvalue of `A^T A` is
/// above `RANK_TOLERANCE` of the largest.
///
/// Cholesky (`R = L^T`, upper triangular) when A has full rank beyond doubt: every eigenvalue of
/// `A^T A` lies in `[1 / ‖R^-1‖_F², ‖R‖_F²]`, so when `1 / ‖R^-1‖_F² > RANK_TOLERANCE ‖R‖_F²` no
/// direction is dropped. With `R^-1` that takes a fraction of the time of the symmetric
/// eigendecomposition at d_head 64 (`examples/spectra_bench.rs` times both), which decides every
/// other case (rank-deficient, or too close to tell: the bounds can be loose by up to r²) by the
/// eigenvalues themselves. Any two such square R differ by an orthogonal factor, which changes
/// neither the eigenvalues nor κ.
fn restriction(gram_left: &DMatrix<f64>) -> Result<(DMatrix<f64>, DMatrix<f64>), String> {
    let r = gram_left.nrows();
    if let Some(cholesky) = gram_left.clone().cholesky() {
        let lower = cholesky.unpack();
        if let Some(lower_inverse) = lower.solve_lower_triangular(&DMatrix::identity(r, r)) {
            let (norm, inverse_norm) = (lower.norm_squared(), lower_inverse.norm_squared());
            if inverse_norm.is_finite() && 1.0 / inverse_norm > RANK_TOLERANCE * norm {
                return Ok((lower.transpose(), lower_inverse.transpose()));
            }
        }
    }
    // A^T A = U Σ U^T, R = Σ^½ U^T over the kept eigenvalues.
    // nalgebra's symmetric QR, not faer's: faster at d_head sizes, natively and more so in wasm.
    let sym = nalgebra::SymmetricEigen::try_new(gram_left.clone(), f64::EPSILON, SCHUR_SWEEPS * r.max(1))
        .ok_or_else(|| "A^T A: eigendecomposition did not converge".to_string())?;
    let values = sym.eigenvalues.as_slice();
    let largest = values.iter().cloned().fold(0.0, f64::max);
    let kept: Vec<usize> = (0..r).filter(|&i| values[i] > largest * RANK_TOLERANCE).collect();
    if kept.is_empty() {
        return Err("the circuit is zero: its left factor has rank 0".into());
    }
    let k = kept.len();
    let u = &sym.eigenvectors;
    let root = DMatrix::from_fn(k, r, |i, j| values[kept[i]].sqrt() * u[(j, kept[i])]);
    let root_pinv = DMatrix::from_fn(r, k, |i, j| u[(i, kept[j])] / values[kept[j]].sqrt());
    Ok((root, root_pinv))
}

/// The eigenvalues and eigenvectors (of any length) of a real matrix X, the vectors in the basis
/// of `matrix`: X itself, or its real Schur form T = Qᵀ X Q. An orthogonal change of basis keeps
/// every quantity read from them (κ of the unit eigenvectors, eigenspace residuals).
struct Eigen {
    values: Vec<c64>,
    vectors: Mat<c64>,
    matrix: DMatrix<f64>,
}

impl Eigen {
    /// Below `BLOCKED_FROM` rows, through nalgebra's real Schur form and back substitution on it
    /// (as LAPACK's `trevc`); from there on, faer's blocked eigendecomposition. Each is the
    /// other's fallback when it does not converge.
    fn of(x: &DMatrix<f64>) -> Result<Eigen, String> {
        let n = x.nrows();
        let schur = || {
            let (_, t) = nalgebra::linalg::Schur::try_new(x.clone(), f64::EPSILON, SCHUR_SWEEPS * n.max(1))?.unpack();
            let (values, vectors) = schur_eigenvectors(&t);
            Some(Eigen { values, vectors, matrix: t })
        };
        let blocked = || blocked_eigen(x).map(|(values, vectors)| Eigen { values, vectors, matrix: x.clone() });
        if n < BLOCKED_FROM { schur().map_or_else(blocked, Ok) } else { blocked().or_else(|e| schur().ok_or(e)) }
    }
}

/// From this many rows on, faer's route is the faster for the whole fingerprint natively.
/// nalgebra's unblocked Schur iteration (with back substitution) wins at d_head 64, faer's
/// eigendecomposition at d_head 256 (`examples/spectra_bench.rs` times both alone). But κ's SVD
/// is cheaper on the triangular eigenvector matrix that back substitution gives than on faer's
/// dense one, so the whole fingerprint only breaks even between 160 and 192 (on one thread, in
/// builds with this constant at 0 and at usize::MAX; the solver timings are in
/// docs/architecture.md#dependencies-and-why-each-is-there). In wasm faer's has no SIMD and never
/// wins, even for the Schur form alone, so the tab keeps nalgebra's.
pub const BLOCKED_FROM: usize = if cfg!(target_arch = "wasm32") { usize::MAX } else { 192 };

/// An eigenpair is accepted from faer when `‖X v − λ v‖ ≤ this × ‖X‖_F ‖v‖`. A backward
/// stable solver leaves about d_head·u (6e-14 at 256); the 1e-10 is the error budget of
/// `DEFECTIVE_TOLERANCE`. faer's QR iteration does not report non-convergence (it leaves the
/// eigenvalues it did not reach at zero), so this is how a failure shows.
const RESIDUAL_TOLERANCE: f64 = 1e-10;

/// The eigenvalues and right eigenvectors (not normalised) of `x` through faer's Hessenberg
/// reduction, multishift QR and back substitution, on this thread: the per-head work is already
/// spread over the cores, so faer's own parallelism would only contend with it. A conjugate pair
/// of eigenvalues comes as two adjacent columns `v`, `v̄`. Every pair is checked against
/// [`RESIDUAL_TOLERANCE`].
fn blocked_eigen(x: &DMatrix<f64>) -> Result<(Vec<c64>, Mat<c64>), String> {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::evd;
    let n = x.nrows();
    let (mut real, mut imaginary) = (faer::diag::Diag::<f64>::zeros(n), faer::diag::Diag::<f64>::zeros(n));
    let mut packed = Mat::<f64>::zeros(n, n);
    let matrix = to_faer(x);
    let scratch = evd::evd_scratch::<f64>(
        n,
        evd::ComputeEigenvectors::No,
        evd::ComputeEigenvectors::Yes,
        faer::Par::Seq,
        Default::default(),
    );
    evd::evd_real(
        matrix.as_ref(),
        real.as_mut(),
        imaginary.as_mut(),
        None,
        Some(packed.as_mut()),
        faer::Par::Seq,
        MemStack::new(&mut MemBuffer::new(scratch)),
        Default::default(),
    )
    .map_err(|_| "eigendecomposition did not converge".to_string())?;
    // LAPACK's packing: a pair's columns hold the real and imaginary parts of the first vector,
    // p + iq for λ = a + ib, so X p = a p − b q and X q = b p + a q.
    let mut product = Mat::<f64>::zeros(n, n);
    faer::linalg::matmul::matmul(
        product.as_mut(),
        faer::Accum::Replace,
        matrix.as_ref(),
        packed.as_ref(),
        1.0,
        faer::Par::Seq,
    );
    let bound = RESIDUAL_TOLERANCE * x.norm();
    let residual = |column: usize, expected: &dyn Fn(usize) -> f64| -> f64 {
        (0..n).map(|i| (product[(i, column)] - expected(i)).powi(2)).sum::<f64>()
    };
    let length = |column: usize| (0..n).map(|i| packed[(i, column)].powi(2)).sum::<f64>();
    let mut values = Vec::with_capacity(n);
    let mut vectors = Mat::<c64>::zeros(n, n);
    let mut j = 0;
    while j < n {
        let (re, im) = (real[j], imaginary[j]);
        let (squared, length) = if im == 0.0 {
            (residual(j, &|i| re * packed[(i, j)]), length(j))
        } else if j + 1 < n {
            let (p, q) = (|i| packed[(i, j)], |i| packed[(i, j + 1)]);
            let real = residual(j, &|i| re * p(i) - im * q(i));
            (real + residual(j + 1, &|i| im * p(i) + re * q(i)), length(j) + length(j + 1))
        } else {
            return Err("eigendecomposition: a complex eigenvalue without its conjugate".into());
        };
        // False for a NaN residual too.
        let accepted = squared.sqrt() <= bound * length.sqrt();
        if !accepted {
            return Err(format!(
                "eigendecomposition did not converge (an eigenvector's residual is {:.1e} of ‖X‖)",
                squared.sqrt() / length.sqrt() / x.norm()
            ));
        }
        if im == 0.0 {
            values.push(c64::new(re, 0.0));
            for i in 0..n {
                vectors[(i, j)] = c64::new(packed[(i, j)], 0.0);
            }
            j += 1;
        } else {
            values.extend([c64::new(re, im), c64::new(re, -im)]);
            for i in 0..n {
                vectors[(i, j)] = c64::new(packed[(i, j)], packed[(i, j + 1)]);
                vectors[(i, j + 1)] = c64::new(packed[(i, j)], -packed[(i, j + 1)]);
            }
            j += 2;
        }
    }
    Ok((values, vectors))
}

/// Iterations per row allowed to nalgebra's Schur, symmetric QR and SVD iterations (the Schur
/// form then falls back to faer's solver; the others report that they did not converge).
const SCHUR_SWEEPS: usize = 100;

/// The eigenvalues of a real Schur form `t` (quasi-upper-triangular: 1 x 1 and 2 x 2 diagonal
/// blocks) in diagonal order, and a unit eigenvector for each, by back substitution.
fn schur_eigenvectors(t: &DMatrix<f64>) -> (Vec<c64>, Mat<c64>) {
    let n = t.nrows();
    let zero = c64::new(0.0, 0.0);
    // Where each row's diagonal block starts, and its size.
    let mut block = vec![(0usize, 1usize); n];
    let mut values = Vec::with_capacity(n);
    let mut i = 0;
    while i < n {
        if i + 1 < n && t[(i + 1, i)] != 0.0 {
            let (a, b, c, d) = (t[(i, i)], t[(i, i + 1)], t[(i + 1, i)], t[(i + 1, i + 1)]);
            let (mean, half) = (0.5 * (a + d), 0.5 * (a - d));
            let discriminant = half * half + b * c;
            let root = discriminant.abs().sqrt();
            if discriminant >= 0.0 {
                values.extend([c64::new(mean + root, 0.0), c64::new(mean - root, 0.0)]);
            } else {
                values.extend([c64::new(mean, root), c64::new(mean, -root)]);
            }
            block[i] = (i, 2);
            block[i + 1] = (i, 2);
            i += 2;
        } else {
            values.push(c64::new(t[(i, i)], 0.0));
            block[i] = (i, 1);
            i += 1;
        }
    }
    let largest = t.amax();
    let mut vectors = Mat::<c64>::zeros(n, n);
    let mut x = vec![zero; n];
    for (k, &lambda) in values.iter().enumerate() {
        x.fill(zero);
        // A pivot this small is replaced (as trevc does): a repeated eigenvalue makes
        // `T - λI` singular above its own block.
        let smallest = (f64::EPSILON * lambda.norm()).max(f64::EPSILON * largest).max(f64::MIN_POSITIVE);
        let (start, size) = block[k];
        if size == 1 {
            x[start] = c64::new(1.0, 0.0);
        } else {
            // A null vector of the 2 x 2 block minus λ, from its larger row.
            let (a, b) = (c64::new(t[(start, start)], 0.0) - lambda, c64::new(t[(start, start + 1)], 0.0));
            let (c, d) = (c64::new(t[(start + 1, start)], 0.0), c64::new(t[(start + 1, start + 1)], 0.0) - lambda);
            if a.norm() + b.norm() >= c.norm() + d.norm() {
                (x[start], x[start + 1]) = (b, -a);
            } else {
                (x[start], x[start + 1]) = (d, -c);
            }
        }
        let end = start + size;
        let residual = |x: &[c64], row: usize| -> c64 { (row + 1..end).fold(zero, |sum, m| sum + x[m] * t[(row, m)]) };
        let mut row = start;
        while row > 0 {
            let (top, rows) = block[row - 1];
            if rows == 1 {
                let mut pivot = c64::new(t[(top, top)], 0.0) - lambda;
                if pivot.re.abs() + pivot.im.abs() < smallest {
                    pivot = c64::new(smallest, 0.0);
                }
                x[top] = -residual(&x, top) / pivot;
            } else {
                // The 2 x 2 block's rows: (B - λI) [x_top, x_top+1] = -[r_top, r_top+1].
                // (x_top and x_top+1 are still zero, so the residuals sum the rows right of them.)
                let (r_top, r_next) = (residual(&x, top), residual(&x, top + 1));
                let (a, b) = (c64::new(t[(top, top)], 0.0) - lambda, c64::new(t[(top, top + 1)], 0.0));
                let (c, d) = (c64::new(t[(top + 1, top)], 0.0), c64::new(t[(top + 1, top + 1)], 0.0) - lambda);
                let mut determinant = a * d - b * c;
                if determinant.re.abs() + determinant.im.abs() < smallest * smallest.max(largest) {
                    determinant = c64::new(smallest * smallest.max(largest), 0.0);
                }
                x[top] = (-r_top * d + r_next * b) / determinant;
                x[top + 1] = (-r_next * a + r_top * c) / determinant;
            }
            // Keep the growing vector representable; only its direction matters. (|re| + |im|:
            // a hypot per entry per row would be a sizeable share of the whole fingerprint.)
            let newest = (top..row).map(|i| x[i].re.abs() + x[i].im.abs()).fold(0.0, f64::max);
            if newest > 1e150 {
                x.iter_mut().for_each(|v| *v *= 1e-150);
            }
            row = top;
        }
        let norm = x.iter().map(|v| v.norm_sqr()).sum::<f64>().sqrt();
        for (i, v) in x.iter().enumerate() {
            vectors[(i, k)] = *v / norm;
        }
    }
    (values, vectors)
}

fn to_faer(m: &DMatrix<f64>) -> Mat<f64> {
    Mat::from_fn(m.nrows(), m.ncols(), |i, j| m[(i, j)])
}

/// Eigenvalues closer than this (relative to the largest |λ|) are one repeated eigenvalue.
const CLUSTER_TOLERANCE: f64 = 1e-8;
/// A repeated eigenvalue whose computed eigenvectors span a subspace W with
/// ‖X W − λ W‖_F ≤ this × ‖X‖_F is semisimple (a true eigenspace, not a Jordan block). The same
/// 1e-10 error budget as `DEFECTIVE_TOLERANCE`: only a cluster that is λ·I within rounding gets
/// an orthonormal basis; a Jordan block with a coupling above the budget keeps the solver's
/// eigenvectors, whose κ then grows with the coupling until it is flagged.
const SEMISIMPLE_TOLERANCE: f64 = 1e-10;
/// Mean |λ| below this fraction of ‖M‖_F is zero to rounding (see `fingerprint`).
const NILPOTENT_TOLERANCE: f64 = 1e-7;

/// κ of the unit eigenvectors of `x`; None when `x` is numerically defective.
///
/// A repeated eigenvalue has no unique eigenvectors: for `X = I + (rounding)` the solver returns
/// the eigenvectors of the rounding, which can be far from orthogonal. So when a cluster of equal
/// eigenvalues spans an invariant subspace on which X is λ times the identity, its vectors are
/// replaced by an orthonormal basis of that eigenspace (the identity then has κ = 1).
fn eigenvector_condition(
    x: &DMatrix<f64>,
    values: &[c64],
    vectors: faer::MatRef<'_, c64>,
) -> Result<Option<f64>, String> {
    let (r, n) = (vectors.nrows(), vectors.ncols());
    let mut unit = Mat::<c64>::zeros(r, n);
    for j in 0..n {
        let norm = (0..r).map(|i| vectors[(i, j)].norm_sqr()).sum::<f64>().sqrt();
        if !(norm.is_finite() && norm > 0.0) {
            return Ok(None);
        }
        for i in 0..r {
            unit[(i, j)] = vectors[(i, j)] / norm;
        }
    }

    let largest = (0..n).map(|i| values[i].norm()).fold(0.0, f64::max);
    let x_complex = Mat::<c64>::from_fn(r, r, |i, j| c64::new(x[(i, j)], 0.0));
    let x_norm = x.norm();
    let mut assigned = vec![false; n];
    for first in 0..n {
        if assigned[first] {
            continue;
        }
        // The eigenvalues within the tolerance of this one, grown transitively.
        let mut cluster = vec![first];
        assigned[first] = true;
        let mut k = 0;
        while k < cluster.len() {
            let centre = values[cluster[k]];
            for j in 0..n {
                if !assigned[j] && (values[j] - centre).norm() <= CLUSTER_TOLERANCE * largest {
                    assigned[j] = true;
                    cluster.push(j);
                }
            }
            k += 1;
        }
        if cluster.len() < 2 {
            continue;
        }
        let members = Mat::<c64>::from_fn(r, cluster.len(), |i, j| unit[(i, cluster[j])]);
        let svd = members.thin_svd().map_err(|_| "eigenvector SVD did not converge".to_string())?;
        let singular = svd.S().column_vector();
        if singular[cluster.len() - 1].re <= singular[0].re * DEFECTIVE_TOLERANCE {
            // The cluster's eigenvectors do not span as many directions as it has eigenvalues.
            return Ok(None);
        }
        let basis = svd.U();
        let mean = cluster.iter().map(|&j| values[j]).fold(c64::new(0.0, 0.0), |a, b| a + b) / cluster.len() as f64;
        let residual = &x_complex * basis - basis * faer::Scale(mean);
        if residual.norm_l2() <= SEMISIMPLE_TOLERANCE * x_norm {
            for (slot, &j) in cluster.iter().enumerate() {
                for i in 0..r {
                    unit[(i, j)] = basis[(i, slot)];
                }
            }
        }
    }

    let singular: Vec<f64> = match as_real(unit.as_ref()) {
        Some(real) => real_singular_values(real),
        None => singular_values_here(unit.as_ref()),
    }
    .map_err(|_| "eigenvector SVD did not converge".to_string())?;
    let largest = singular.iter().copied().fold(f64::NAN, f64::max);
    let smallest = singular.iter().copied().fold(f64::NAN, f64::min);
    if !(smallest.is_finite() && largest.is_finite()) || smallest <= largest * DEFECTIVE_TOLERANCE {
        return Ok(None);
    }
    Ok(Some(largest / smallest))
}

/// The singular values of a real matrix: natively faer's on this thread (faster than
/// nalgebra's from 64 x 64 up; `examples/spectra_bench.rs` times both), in the tab nalgebra's
/// (faer has no wasm SIMD there).
fn real_singular_values(real: DMatrix<f64>) -> Result<Vec<f64>, ()> {
    #[cfg(not(target_arch = "wasm32"))]
    return singular_values_here(to_faer(&real).as_ref());
    #[cfg(target_arch = "wasm32")]
    {
        let sweeps = SCHUR_SWEEPS * real.ncols().max(1);
        nalgebra::SVD::try_new(real, false, false, f64::EPSILON, sweeps)
            .map(|svd| svd.singular_values.iter().copied().collect())
            .ok_or(())
    }
}

/// faer's singular values of `m` on this thread: its `singular_values` takes the global
/// parallelism, which would split a matrix this small over every core from inside the threads
/// that already share the heads (which makes the CLI slower, not faster).
fn singular_values_here<T: faer::traits::ComplexField>(m: faer::MatRef<'_, T>) -> Result<Vec<T::Real>, ()> {
    use faer::dyn_stack::{MemBuffer, MemStack};
    use faer::linalg::svd::{ComputeSvdVectors, svd, svd_scratch};
    let (rows, cols) = m.shape();
    let mut values = faer::diag::Diag::<T>::zeros(rows.min(cols));
    let scratch =
        svd_scratch::<T>(rows, cols, ComputeSvdVectors::No, ComputeSvdVectors::No, faer::Par::Seq, Default::default());
    svd(
        m,
        values.as_mut(),
        None,
        None,
        faer::Par::Seq,
        MemStack::new(&mut MemBuffer::new(scratch)),
        Default::default(),
    )
    .map_err(|_| ())?;
    Ok(values.column_vector().iter().map(faer::traits::math_utils::real).collect())
}

/// `V U` for a unitary `U` that makes it real, when there is one this simple: each real column
/// as is, and each conjugate pair of columns `[v, v̄]` as `[√2 Re v, √2 Im v]` (that is
/// `[v, v̄] [[1, -i], [1, i]] / √2`). The singular values are `V`'s, from a real SVD, several
/// times cheaper than a complex one in the tab. None unless every column is real or half of an exact conjugate pair beside it:
/// back substitution on the real Schur form and faer's eigendecomposition (`blocked_eigen`) give
/// that; an orthonormalised cluster need not.
fn as_real(vectors: faer::MatRef<'_, c64>) -> Option<DMatrix<f64>> {
    let (r, n) = (vectors.nrows(), vectors.ncols());
    let mut real = DMatrix::<f64>::zeros(r, n);
    let mut j = 0;
    while j < n {
        if (0..r).all(|i| vectors[(i, j)].im == 0.0) {
            for i in 0..r {
                real[(i, j)] = vectors[(i, j)].re;
            }
            j += 1;
        } else if j + 1 < n && (0..r).all(|i| vectors[(i, j + 1)] == vectors[(i, j)].conj()) {
            for i in 0..r {
                real[(i, j)] = std::f64::consts::SQRT_2 * vectors[(i, j)].re;
                real[(i, j + 1)] = std::f64::consts::SQRT_2 * vectors[(i, j)].im;
            }
            j += 2;
        } else {
            return None;
        }
    }
    Some(real)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The two routes `Eigen::of` chooses between, on the same matrices (real and complex
    /// eigenvalues, non-normal): the same eigenvalues and the same κ.
    #[test]
    fn the_schur_and_blocked_routes_agree() {
        let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(17);
        for n in [3, 40, 200] {
            let x = DMatrix::from_fn(n, n, |_, _| rng.random_range(-1.0..1.0));
            let (_, t) = nalgebra::linalg::Schur::new(x.clone()).unpack();
            let (schur_values, schur_vectors) = schur_eigenvectors(&t);
            let (blocked_values, blocked_vectors) = blocked_eigen(&x).expect("a random matrix converges");
            assert!(schur_values.iter().any(|v| v.im != 0.0), "n {n}: no complex pair tested");
            let largest = schur_values.iter().map(|v| v.norm()).fold(0.0, f64::max);
            for v in &blocked_values {
                let nearest = schur_values.iter().map(|w| (v - w).norm()).fold(f64::INFINITY, f64::min);
                assert!(nearest < 1e-10 * largest, "n {n}: {v} is {nearest:e} from every Schur eigenvalue");
            }
            let schur_kappa = eigenvector_condition(&t, &schur_values, schur_vectors.as_ref()).unwrap().unwrap();
            let blocked_kappa = eigenvector_condition(&x, &blocked_values, blocked_vectors.as_ref()).unwrap().unwrap();
            assert!(
                (schur_kappa - blocked_kappa).abs() < 1e-8 * schur_kappa,
                "n {n}: κ {schur_kappa} against {blocked_kappa}"
            );
        }
    }
}
