//! f64 values on their way to the device: each as two f32 parts (its value rounded to f32, and
//! what that left), which the products read as one wide input (products.wgsl says why), and
//! the columns of a product's X as they cross: split on the host, or sent as stored to be folded
//! on the device.

use std::ops::Range;

use nalgebra::DMatrix;

use crate::backend::{ColumnValues, Columns, Fold};
use crate::parallel::each_chunk;

/// f64 values as two f32 parts: each rounded to f32, and what that left (exact to 2^-48).
pub(super) fn split(values: &[f64]) -> (Vec<f32>, Vec<f32>) {
    let (mut value, mut rest) = (vec![0f32; values.len()], vec![0f32; values.len()]);
    let size = SMALLEST_CHUNK;
    let mut pieces: Vec<_> = value.chunks_mut(size).zip(rest.chunks_mut(size)).enumerate().collect();
    each_chunk(&mut pieces, 1, |_, pieces| {
        for (i, (value, rest)) in pieces {
            for ((value, rest), &v) in value.iter_mut().zip(rest.iter_mut()).zip(&values[*i * size..]) {
                *value = v as f32;
                *rest = (v - *value as f64) as f32;
            }
        }
    });
    (value, rest)
}

/// Columns of X on their way to the device.
pub(super) enum Crossing<'a> {
    /// f32 values and, unless they are all f32 already, their rests.
    Split(Vec<f32>, Option<Vec<f32>>),
    /// f32 values (X as stored), to be folded on the device.
    ToFold(Vec<f32>, Fold<'a>),
}

impl<'a> Crossing<'a> {
    /// Columns `columns` of X, folded as `fold` says: on the device when their values are f32
    /// (weights as stored), else on the host before they are split.
    pub(super) fn of(x: &Columns<'_>, columns: Range<usize>, fold: Option<Fold<'a>>) -> Crossing<'a> {
        let rows = x.shape().0;
        let columns = match x.columns(columns) {
            ColumnValues::F32(values) => {
                return match fold {
                    None => Crossing::Split(values, None),
                    Some(fold) => Crossing::ToFold(values, fold),
                };
            }
            ColumnValues::F64(values) => values,
        };
        let (value, rest) = split_wide(columns);
        match (fold, rest) {
            (None, rest) => Crossing::Split(value, rest),
            (Some(fold), None) => Crossing::ToFold(value, fold),
            (Some(fold), Some(_)) => {
                let mut x = DMatrix::from_column_slice(rows, columns.len() / rows.max(1), columns);
                fold.apply(&mut x);
                let (value, rest) = split_wide(x.as_slice());
                Crossing::Split(value, rest)
            }
        }
    }

    /// Whether the values on the device will have rests (a folded X always does).
    pub(super) fn has_rests(&self) -> bool {
        matches!(self, Crossing::ToFold(..) | Crossing::Split(_, Some(_)))
    }
}

/// [`split`], without the rests when they are all zero (values that are f32 already, such as
/// weights used as stored): they need not cross.
fn split_wide(values: &[f64]) -> (Vec<f32>, Option<Vec<f32>>) {
    let (value, rest) = split(values);
    let exact = rest.iter().all(|&r| r == 0.0);
    (value, (!exact).then_some(rest))
}

/// Entries per task in the conversions around a GPU product: memory-bound loops over hundreds
/// of MB, which on one thread take longer than the product itself natively (a task costs µs).
pub(super) const SMALLEST_CHUNK: usize = 1 << 16;
