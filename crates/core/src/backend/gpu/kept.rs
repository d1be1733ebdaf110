//! Matrices kept on the device ([`DeviceMatrix`]): a layer's products `A X` left where they were
//! computed, X itself (folded on the device where a norm is folded into it), and the small
//! products of their column blocks, which the heads' spectra read and which alone come back,
//! all in one read. The large products would be as many bytes again as went over.

use std::ops::Range;
use std::sync::Arc;

use nalgebra::DMatrix;

use super::Gpu;
use super::buffers::{Operand, Role};
use super::failure::Scopes;
use super::products::{Batch, Shape};
use super::split::Crossing;
use crate::backend::{ColumnRun, Columns, Fold};
use crate::{Error, Result};

/// Columns of X per dispatch in [`Gpu::multiply`]: 4096 x 2048 outputs of a 4096-deep product
/// is ~34 GFLOP, a fraction of a second on a laptop GPU, well inside a watchdog's patience.
const WIDE_COLUMNS: usize = 2048;

/// An f64 matrix kept on the device as two f32 parts per entry (a product's result, or uploaded
/// by [`Gpu::keep`]), in chunks of whole column blocks, each chunk within one binding.
pub struct DeviceMatrix {
    rows: usize,
    cols: usize,
    chunks: Vec<Chunk>,
}

impl DeviceMatrix {
    pub fn shape(&self) -> (usize, usize) {
        (self.rows, self.cols)
    }

    /// The chunk holding columns `column..column + width`, and where they start in it.
    fn locate(&self, column: usize, width: usize) -> Result<(usize, usize)> {
        let found = self.chunks.iter().position(|c| (c.first..c.first + c.columns).contains(&column));
        match found {
            Some(at) if column + width <= self.chunks[at].first + self.chunks[at].columns => {
                Ok((at, column - self.chunks[at].first))
            }
            _ => Err(Error::Gpu(format!(
                "columns {column}..{} of a kept {} x {} matrix",
                column + width,
                self.rows,
                self.cols
            ))),
        }
    }
}

/// Columns `first..first + columns` of a [`DeviceMatrix`], column-major: the f32 values (or a
/// result's high parts) and what they left (its low parts; None where every value is an f32, as
/// raw weights are).
struct Chunk {
    first: usize,
    columns: usize,
    high: wgpu::Buffer,
    low: Option<wgpu::Buffer>,
}

/// Products of one [`ColumnRun`] whose blocks lie in the same two chunks: one dispatch.
struct Dispatch {
    run: usize,
    left: usize,
    right: usize,
    /// Its first product's place among all the products asked for.
    first: usize,
    batch: Batch,
}

impl Gpu {
    /// `A X` of f64 matrices (A m x k, X k x n), each entry held as two f32 parts (products.wgsl
    /// says how, and why this keeps about 2^-36 of every term): [`Gpu::multiply_kept`], read
    /// back whole.
    pub async fn multiply(&self, a: &Arc<DMatrix<f64>>, x: &DMatrix<f64>) -> Result<DMatrix<f64>> {
        let (kept, _) = self.multiply_kept(a, &Columns::from(x), 1, false, None).await?;
        self.read_kept(&kept).await
    }

    /// A matrix kept on the device, read back in f64.
    pub async fn read_kept(&self, kept: &DeviceMatrix) -> Result<DMatrix<f64>> {
        let mut c = DMatrix::zeros(kept.rows, kept.cols);
        let m = kept.rows;
        if m > 0 {
            for chunk in &kept.chunks {
                let columns = &mut c.as_mut_slice()[chunk.first * m..(chunk.first + chunk.columns) * m];
                match &chunk.low {
                    Some(low) => self.read_into(columns, (&chunk.high, low)).await?,
                    None => {
                        let size = 4 * columns.len() as u64;
                        self.read_back(&[(&chunk.high, 0..size)], |values| {
                            for (entry, &value) in columns.iter_mut().zip(values) {
                                *entry = value as f64;
                            }
                        })
                        .await?
                    }
                }
            }
        }
        Ok(c)
    }

    /// `A X` of f64 matrices (A m x k, X k x n), left on the device for
    /// [`Gpu::column_products`]; its columns are used in blocks of `block`, which no chunk splits.
    /// X is first folded as `fold` says (on the device: see [`Gpu::put_columns`]). With `keep_x`,
    /// X stays on the device too, as [`Gpu::keep`] would leave it (uploaded once for both). A
    /// stays on the device for the next product with it (the analysis multiplies every layer by
    /// the same few); X's columns go a chunk at a time, as many as the binding limit and
    /// [`WIDE_COLUMNS`] allow.
    pub async fn multiply_kept(
        &self,
        a: &Arc<DMatrix<f64>>,
        x: &Columns<'_>,
        block: usize,
        keep_x: bool,
        fold: Option<Fold<'_>>,
    ) -> Result<(DeviceMatrix, Option<DeviceMatrix>)> {
        let (m, k) = a.shape();
        let (rows, n) = x.shape();
        if rows != k {
            return Err(Error::Gpu(format!("{m} x {k} times {rows} x {n}")));
        }
        let mut kept = DeviceMatrix { rows: m, cols: n, chunks: Vec::new() };
        let mut kept_x = DeviceMatrix { rows: k, cols: n, chunks: Vec::new() };
        let columns = self.chunk_columns(k.max(m), block);
        // An empty product leaves its chunks as made: zero.
        let left = match m * k * n > 0 {
            true => Some(self.left_on_device(a).await?),
            false => None,
        };
        for start in (0..n).step_by(columns) {
            let width = columns.min(n - start);
            let scope = Scopes::push(&self.device);
            let chunk = self.chunk(start, width, m, wgpu::BufferUsages::empty(), true);
            let x_columns = start..start + width;
            let b = match (keep_x, &left) {
                (true, _) => {
                    let crossing = Crossing::of(x, x_columns, fold);
                    self.chunk(start, width, k, wgpu::BufferUsages::COPY_DST, crossing.has_rests()).and_then(
                        |x_chunk| {
                            self.put_columns(crossing, k, &x_chunk.high, x_chunk.low.as_ref())?;
                            let operand =
                                Operand { value: x_chunk.high.clone(), rest: x_chunk.low.clone(), len: k * width };
                            kept_x.chunks.push(x_chunk);
                            Ok(Some(operand))
                        },
                    )
                }
                (false, Some(_)) => {
                    let crossing = Crossing::of(x, x_columns, fold);
                    let len = k * width;
                    self.fits(Role::B.label(), 4 * len as u64).and_then(|()| {
                        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST;
                        let value = self.scratch(Role::B, 4 * len as u64, usage);
                        let rest = crossing.has_rests().then(|| self.scratch(Role::BRest, 4 * len as u64, usage));
                        self.put_columns(crossing, k, &value, rest.as_ref())?;
                        Ok(Some(Operand { value, rest, len }))
                    })
                }
                (false, None) => Ok(None),
            };
            if let (Some(left), Ok(Some(b)), Ok(chunk)) = (&left, &b, &chunk) {
                self.submit_left_product(left, (m, k), b, 0, chunk);
            }
            scope.pop(self).await?;
            b?;
            kept.chunks.push(chunk?);
        }
        Ok((kept, keep_x.then_some(kept_x)))
    }

    /// `A X_c` of columns `columns` of a matrix kept on the device (A m x k, X k rows), left on
    /// the device: one dispatch per chunk of X the columns lie in, each reading its columns in
    /// place, so X never crosses again. The result's chunks are those of X's, so a block no
    /// chunk of X splits, starting at a block's edge, is whole in one of them too.
    pub async fn multiply_columns(
        &self,
        a: &Arc<DMatrix<f64>>,
        x: &DeviceMatrix,
        columns: Range<usize>,
    ) -> Result<DeviceMatrix> {
        let (m, k) = a.shape();
        if x.rows != k || columns.start > columns.end || columns.end > x.cols {
            return Err(Error::Gpu(format!("{m} x {k} times columns {columns:?} of {} x {}", x.rows, x.cols)));
        }
        let mut kept = DeviceMatrix { rows: m, cols: columns.len(), chunks: Vec::new() };
        let left = match m * k * columns.len() > 0 {
            true => Some(self.left_on_device(a).await?),
            false => None,
        };
        let mut column = columns.start;
        while column < columns.end {
            let (at, offset) = x.locate(column, 1)?;
            let source = &x.chunks[at];
            let width = (source.columns - offset).min(columns.end - column);
            let scope = Scopes::push(&self.device);
            let chunk = self.chunk(column - columns.start, width, m, wgpu::BufferUsages::empty(), true);
            if let (Some(left), Ok(chunk)) = (&left, &chunk) {
                let b = Operand { value: source.high.clone(), rest: source.low.clone(), len: k * source.columns };
                self.submit_left_product(left, (m, k), &b, offset, chunk);
            }
            scope.pop(self).await?;
            kept.chunks.push(chunk?);
            column += width;
        }
        Ok(kept)
    }

    /// Submits `A X` into `into`, for A (m x k, its two parts kept on the device as `left`) and
    /// `into.columns` columns of `b` from its column `b_first`.
    fn submit_left_product(
        &self,
        (a_value, a_rest): &(wgpu::Buffer, wgpu::Buffer),
        (m, k): (usize, usize),
        b: &Operand,
        b_first: usize,
        into: &Chunk,
    ) {
        let a = Operand { value: a_value.clone(), rest: Some(a_rest.clone()), len: m * k };
        let batch = Batch { b_first, ..Batch::ONE };
        let shape = Shape { rows: k, m, n: into.columns, a_transposed: true, accumulate: false, batch };
        let low = into.low.as_ref().unwrap_or(&into.high);
        let encoder = self.encode(shape, &a, b, (&into.high, low), false);
        self.queue.submit([encoder.finish()]);
    }

    /// X (f64), first folded as `fold` says, on the device as two f32 parts, as
    /// [`Gpu::multiply_kept`] leaves a product: for [`Gpu::column_products`] with blocks of
    /// `block` columns.
    pub async fn keep(&self, x: &Columns<'_>, block: usize, fold: Option<Fold<'_>>) -> Result<DeviceMatrix> {
        let (rows, n) = x.shape();
        let mut kept = DeviceMatrix { rows, cols: n, chunks: Vec::new() };
        let columns = self.chunk_columns(rows, block);
        for start in (0..n).step_by(columns) {
            let width = columns.min(n - start);
            let scope = Scopes::push(&self.device);
            let crossing = Crossing::of(x, start..start + width, fold);
            let chunk = self.chunk(start, width, rows, wgpu::BufferUsages::COPY_DST, crossing.has_rests());
            let put = match &chunk {
                Ok(chunk) => self.put_columns(crossing, rows, &chunk.high, chunk.low.as_ref()),
                Err(_) => Ok(()),
            };
            scope.pop(self).await?;
            put?;
            kept.chunks.push(chunk?);
        }
        Ok(kept)
    }

    /// Columns per chunk of a matrix kept on the device: whole blocks of `block` columns, as many
    /// as one binding holds at `rows` entries a column (at least one block) and [`WIDE_COLUMNS`]
    /// allow.
    fn chunk_columns(&self, rows: usize, block: usize) -> usize {
        let block = block.max(1);
        let fit = ((self.max_binding / (4 * rows.max(1) as u64)) as usize).clamp(1, WIDE_COLUMNS.max(block));
        (fit / block).max(1) * block
    }

    /// A chunk of `columns` columns from `first`, `rows` high, at zero (wgpu zeroes a new buffer),
    /// with low parts or (`with_low` false: values that are f32 already) without.
    fn chunk(
        &self,
        first: usize,
        columns: usize,
        rows: usize,
        usage: wgpu::BufferUsages,
        with_low: bool,
    ) -> Result<Chunk> {
        let bytes = 4 * (rows * columns) as u64;
        self.fits("a kept matrix's chunk", bytes)?;
        let buffer = |label| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                size: bytes.max(4),
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC | usage,
                mapped_at_creation: false,
            })
        };
        Ok(Chunk { first, columns, high: buffer("kept high"), low: with_low.then(|| buffer("kept low")) })
    }

    /// `L^T R` of `width`-column blocks of matrices kept on the device, for every product of every
    /// run in order (see [`ColumnRun`]); a block's product with itself is exactly symmetric. A
    /// run's products whose blocks share chunks are one dispatch; all write into one buffer,
    /// read back once (as many as fit one binding at a time): only these small matrices cross.
    pub async fn column_products(
        &self,
        width: usize,
        runs: &[ColumnRun<'_, DeviceMatrix>],
    ) -> Result<Vec<DMatrix<f64>>> {
        let size = width * width;
        let total: usize = runs.iter().map(|r| r.count).sum();
        if size == 0 {
            return Ok(vec![DMatrix::zeros(width, width); total]);
        }
        self.fits("a block product", 4 * size as u64)?;
        let per_read = ((self.max_binding / (4 * size as u64)) as usize).max(1);
        let mut dispatches: Vec<Dispatch> = Vec::new();
        let mut symmetric = Vec::with_capacity(total);
        for (r, run) in runs.iter().enumerate() {
            if run.left.rows != run.right.rows {
                return Err(Error::Gpu(format!(
                    "blocks of {} rows against blocks of {}",
                    run.left.rows, run.right.rows
                )));
            }
            let same = std::ptr::eq(run.left, run.right) && run.left_blocks == run.right_blocks;
            for p in 0..run.count {
                let (left, left_column) = run.left.locate(run.left_blocks.block(p) * width, width)?;
                let (right, right_column) = run.right.locate(run.right_blocks.block(p) * width, width)?;
                let index = symmetric.len();
                symmetric.push(same);
                match dispatches.last_mut() {
                    Some(d)
                        if d.run == r
                            && (d.left, d.right) == (left, right)
                            && d.first / per_read == index / per_read =>
                    {
                        d.batch.count += 1;
                    }
                    _ => dispatches.push(Dispatch {
                        run: r,
                        left,
                        right,
                        first: index,
                        batch: Batch {
                            a_first: left_column,
                            a_skip: p % run.left_blocks.group.max(1),
                            a_group: run.left_blocks.group.max(1),
                            b_first: right_column,
                            b_skip: p % run.right_blocks.group.max(1),
                            b_group: run.right_blocks.group.max(1),
                            c_first: 0,
                            count: 1,
                        },
                    }),
                }
            }
        }
        let mut values = vec![0f64; total * size];
        for (read, start) in (0..total).step_by(per_read).enumerate() {
            let count = per_read.min(total - start);
            let bytes = (4 * count * size) as u64;
            let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC;
            let output = (self.scratch(Role::CHigh, bytes, usage), self.scratch(Role::CLow, bytes, usage));
            let scope = Scopes::push(&self.device);
            for d in dispatches.iter().filter(|d| d.first / per_read == read) {
                let run = &runs[d.run];
                let (left, right) = (&run.left.chunks[d.left], &run.right.chunks[d.right]);
                let operand = |c: &Chunk, rows: usize| Operand {
                    value: c.high.clone(),
                    rest: c.low.clone(),
                    len: rows * c.columns,
                };
                let (a, b) = (operand(left, run.left.rows), operand(right, run.right.rows));
                let batch = Batch { c_first: (d.first - start) * size, ..d.batch };
                let shape =
                    Shape { rows: run.left.rows, m: width, n: width, a_transposed: false, accumulate: false, batch };
                let encoder = self.encode(shape, &a, &b, (&output.0, &output.1), false);
                self.queue.submit([encoder.finish()]);
            }
            scope.pop(self).await?;
            self.read_into(&mut values[start * size..(start + count) * size], (&output.0, &output.1)).await?;
        }
        Ok(values
            .chunks(size)
            .zip(symmetric)
            .map(|(entries, symmetric)| {
                let mut c = DMatrix::from_column_slice(width, width, entries);
                if symmetric {
                    c.fill_lower_triangle_with_upper_triangle();
                }
                c
            })
            .collect())
    }
}
