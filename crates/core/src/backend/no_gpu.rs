//! The GPU backend of a build without the `gpu` feature: a GPU that cannot be opened. Its types
//! have no values (empty enums), so every method but [`Gpu::open`] is unreachable, and the
//! backend's code matches on a GPU the same way in every build.

use std::ops::Range;
use std::sync::Arc;

use nalgebra::DMatrix;

pub use super::Arithmetic;
use super::{ColumnRun, Columns, Fold};
use crate::forward::{ForwardOutput, Keep};
use crate::model::Weights;
use crate::{Error, Result};

pub enum Gpu {}

pub enum Accumulator {}

pub enum DeviceMatrix {}

impl DeviceMatrix {
    pub fn shape(&self) -> (usize, usize) {
        match *self {}
    }
}

impl Gpu {
    pub async fn open(_allow_software: bool) -> Result<Gpu> {
        Err(Error::Gpu("this build has no GPU backend (built without the `gpu` feature)".into()))
    }

    pub async fn open_preferring(allow_software: bool, _preferred: Arithmetic) -> Result<Gpu> {
        Self::open(allow_software).await
    }

    pub fn adapter(&self) -> &str {
        match *self {}
    }

    pub fn arithmetic(&self) -> Arithmetic {
        match *self {}
    }

    pub fn bytes_moved(&self) -> (u64, u64) {
        match *self {}
    }

    pub fn block_rows(&self, _n: usize) -> usize {
        match *self {}
    }

    pub async fn accumulator(&self, _m: usize, _n: usize) -> Result<Accumulator> {
        match *self {}
    }

    pub async fn accumulate(&self, _sum: &mut Accumulator, _a: &DMatrix<f32>, _b: Option<&DMatrix<f32>>) -> Result<()> {
        match *self {}
    }

    pub async fn accumulate_both(
        &self,
        _a: &DMatrix<f32>,
        _b: &DMatrix<f32>,
        _sums: (&mut Accumulator, &mut Accumulator, &mut Accumulator),
    ) -> Result<()> {
        match *self {}
    }

    pub async fn read(&self, _sum: &Accumulator) -> Result<DMatrix<f64>> {
        match *self {}
    }

    pub async fn multiply(&self, _a: &Arc<DMatrix<f64>>, _x: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        match *self {}
    }

    pub async fn read_kept(&self, _kept: &DeviceMatrix) -> Result<DMatrix<f64>> {
        match *self {}
    }

    pub async fn multiply_kept(
        &self,
        _a: &Arc<DMatrix<f64>>,
        _x: &Columns<'_>,
        _block: usize,
        _keep_x: bool,
        _fold: Option<Fold<'_>>,
    ) -> Result<(DeviceMatrix, Option<DeviceMatrix>)> {
        match *self {}
    }

    pub async fn multiply_columns(
        &self,
        _a: &Arc<DMatrix<f64>>,
        _x: &DeviceMatrix,
        _columns: Range<usize>,
    ) -> Result<DeviceMatrix> {
        match *self {}
    }

    pub async fn keep(&self, _x: &Columns<'_>, _block: usize, _fold: Option<Fold<'_>>) -> Result<DeviceMatrix> {
        match *self {}
    }

    pub async fn column_products(
        &self,
        _width: usize,
        _runs: &[ColumnRun<'_, DeviceMatrix>],
    ) -> Result<Vec<DMatrix<f64>>> {
        match *self {}
    }

    pub async fn forward(
        &self,
        _model: &(impl Weights + ?Sized),
        _runs: &[(&[usize], Keep<'_>)],
        _each_layer: &mut dyn FnMut(usize, usize),
    ) -> Result<Vec<ForwardOutput>> {
        match *self {}
    }
}
