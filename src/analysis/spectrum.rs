//! The fingerprint of one circuit `M = A B` from three small matrices (spec section 2):
//! `B A` (whose eigenvalues are M's non-zero ones), `A^T A` and `B B^T`. Nothing here is ever
//! larger than d_head x d_head, and every decomposition is bounded (faer returns an error on
//! non-convergence instead of looping).

use faer::Mat;
use faer::c64;
use nalgebra::DMatrix;
use serde::Serialize;

/// A circuit given by its factors' small products.
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

#[derive(Debug, Clone, PartialEq)]
pub struct Fingerprint {
    /// Sorted by |λ| descending; r = d_head of them.
    pub eigenvalues: Vec<Eigenvalue>,
    pub copying_score: f64,
    pub imaginary_fraction: f64,
    /// κ of the unit-norm eigenvector matrix; None when numerically defective (reported as +inf).
    pub eigenvector_condition: Option<f64>,
    pub departure_from_normality: f64,
    pub scale: f64,
}

/// Singular values below this fraction of the largest count as zero (rank detection).
const RANK_TOLERANCE: f64 = 1e-10;
/// Eigenvector matrices with σ_min/σ_max below this are reported as defective.
const DEFECTIVE_TOLERANCE: f64 = 1e-13;

impl Factored {
    pub fn fingerprint(&self) -> Result<Fingerprint, String> {
        let r = self.small.nrows();
        for (what, m) in [("B A", &self.small), ("A^T A", &self.gram_left), ("B B^T", &self.gram_right)] {
            if m.iter().any(|v| !v.is_finite()) {
                return Err(format!("{what} has non-finite entries"));
            }
        }
        let frobenius_squared = self.gram_left.component_mul(&self.gram_right.transpose()).sum();
        if frobenius_squared <= 0.0 || self.small.norm() == 0.0 {
            return Err("the circuit is zero: no eigenvalues to read".into());
        }

        // Restrict M to its range in an orthonormal basis: A^T A = U Σ U^T, R = Σ^½ U^T,
        // restricted = R (B A) R^+. Its eigenvalues are M's non-zero ones, its eigenvectors
        // M's own (in that basis), so κ does not depend on how W_V/W_O split the circuit.
        let gram = to_faer(&self.gram_left);
        let sym = gram
            .self_adjoint_eigen(faer::Side::Lower)
            .map_err(|_| "A^T A: eigendecomposition did not converge".to_string())?;
        let values: Vec<f64> = sym.S().column_vector().iter().copied().collect();
        let largest = values.iter().cloned().fold(0.0, f64::max);
        let kept: Vec<usize> = (0..r).filter(|&i| values[i] > largest * RANK_TOLERANCE).collect();
        if kept.is_empty() {
            return Err("the circuit is zero: its left factor has rank 0".into());
        }
        let k = kept.len();
        let u = sym.U();
        let root = DMatrix::from_fn(k, r, |i, j| values[kept[i]].sqrt() * u[(j, kept[i])]);
        let root_pinv = DMatrix::from_fn(r, k, |i, j| u[(i, kept[j])] / values[kept[j]].sqrt());
        let restricted = &root * &self.small * &root_pinv;

        let eigen = to_faer(&restricted).eigen().map_err(|_| "eigendecomposition did not converge".to_string())?;
        let mut eigenvalues: Vec<Eigenvalue> =
            eigen.S().column_vector().iter().map(|z: &c64| Eigenvalue { re: z.re, im: z.im }).collect();
        // Directions A sends to zero are zero eigenvalues of B A.
        eigenvalues.resize(r, Eigenvalue { re: 0.0, im: 0.0 });
        eigenvalues.sort_by(|a, b| b.abs().total_cmp(&a.abs()));

        let scale: f64 = eigenvalues.iter().map(|l| l.abs()).sum();
        if scale == 0.0 || !scale.is_finite() {
            return Err("all eigenvalues are zero".into());
        }
        let eigenvalue_energy: f64 = eigenvalues.iter().map(|l| l.abs().powi(2)).sum();
        Ok(Fingerprint {
            copying_score: eigenvalues.iter().map(|l| l.re).sum::<f64>() / scale,
            imaginary_fraction: eigenvalues.iter().map(|l| l.im.abs()).sum::<f64>() / scale,
            eigenvector_condition: eigenvector_condition(eigen.U())?,
            departure_from_normality: (frobenius_squared - eigenvalue_energy).max(0.0).sqrt()
                / frobenius_squared.sqrt(),
            scale,
            eigenvalues,
        })
    }
}

fn to_faer(m: &DMatrix<f64>) -> Mat<f64> {
    Mat::from_fn(m.nrows(), m.ncols(), |i, j| m[(i, j)])
}

fn eigenvector_condition(vectors: faer::MatRef<'_, c64>) -> Result<Option<f64>, String> {
    let n = vectors.ncols();
    let mut unit = Mat::<c64>::zeros(vectors.nrows(), n);
    for j in 0..n {
        let norm = (0..vectors.nrows()).map(|i| vectors[(i, j)].norm_sqr()).sum::<f64>().sqrt();
        if !(norm.is_finite() && norm > 0.0) {
            return Ok(None);
        }
        for i in 0..vectors.nrows() {
            unit[(i, j)] = vectors[(i, j)] / norm;
        }
    }
    let singular = unit.singular_values().map_err(|_| "eigenvector SVD did not converge".to_string())?;
    let (largest, smallest) = (singular[0], singular[singular.len() - 1]);
    if !(smallest.is_finite() && largest.is_finite()) || smallest <= largest * DEFECTIVE_TOLERANCE {
        return Ok(None);
    }
    Ok(Some(largest / smallest))
}
