//! The Grams' sums on the device: blocks of `A^T B` (or `A^T A`) added into an [`Accumulator`]
//! as the caller reads the next block from the file, read back once.

use nalgebra::DMatrix;

use super::Gpu;
use super::buffers::Side;
use super::failure::Scopes;
use super::products::{Batch, Shape};
use crate::{Error, Result};

/// A sum of `A^T B` (or `A^T A`) over blocks of rows, held on the device as two f32 parts per
/// entry (products.wgsl), read back once by [`Gpu::read`].
pub struct Accumulator {
    pub(super) high: wgpu::Buffer,
    pub(super) low: wgpu::Buffer,
    m: usize,
    n: usize,
    /// Whether the blocks were Grams (`A^T A`: only the upper tiles are summed, the rest is
    /// mirrored on reading), once the first block says.
    symmetric: Option<bool>,
}

impl Gpu {
    /// An m x n sum at zero on the device.
    pub async fn accumulator(&self, m: usize, n: usize) -> Result<Accumulator> {
        self.fits("the sum", 4 * (m * n) as u64)?;
        let scope = Scopes::push(&self.device);
        let output = |label| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some(label),
                // wgpu zeroes a buffer before its first use.
                size: (4 * m * n).max(4) as u64,
                usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_SRC,
                mapped_at_creation: false,
            })
        };
        let sum = Accumulator { high: output("sum high"), low: output("sum low"), m, n, symmetric: None };
        scope.pop(self).await?;
        Ok(sum)
    }

    /// `sum += A^T B` (A rows x m, B rows x n), or `A^T A` when `b` is None. The product is
    /// submitted, not waited for: the caller reads the next block meanwhile. Only the block
    /// before is waited for first, so no more than one block is ever queued.
    pub async fn accumulate(&self, sum: &mut Accumulator, a: &DMatrix<f32>, b: Option<&DMatrix<f32>>) -> Result<()> {
        let (rows, m) = a.shape();
        let n = b.map_or(m, |b| b.ncols());
        if b.is_some_and(|b| b.nrows() != rows) || (m, n) != (sum.m, sum.n) {
            return Err(Error::Gpu(format!(
                "a {rows} x {m} block times {:?} into a {} x {} sum",
                b.map(|b| b.shape()),
                sum.m,
                sum.n
            )));
        }
        if *sum.symmetric.get_or_insert(b.is_none()) != b.is_none() {
            return Err(Error::Gpu("a sum of Grams and of products at once".into()));
        }
        if rows == 0 || m == 0 {
            return Ok(());
        }
        self.idle().await?;
        let scope = Scopes::push(&self.device);
        let uploaded = self
            .upload(Side::A, a.as_slice(), None)
            .and_then(|a_operand| Ok((a_operand, b.map(|b| self.upload(Side::B, b.as_slice(), None)).transpose()?)));
        if let Ok((a, b)) = &uploaded {
            let shape = Shape { rows, m, n, a_transposed: false, accumulate: true, batch: Batch::ONE };
            let encoder = self.encode(shape, a, b.as_ref().unwrap_or(a), (&sum.high, &sum.low), b.is_none());
            self.queue.submit([encoder.finish()]);
        }
        scope.pop(self).await?;
        uploaded.map(drop)
    }

    /// `a_gram += A^T A`, `product += B^T A` and `b_gram += B^T B` for blocks A (rows x m) and
    /// B (rows x n) of the same rows: an untied model's three Grams from one block of embedding
    /// and unembedding rows, each block uploaded once for the three. Submitted, not waited for,
    /// as [`Gpu::accumulate`].
    pub async fn accumulate_both(
        &self,
        a: &DMatrix<f32>,
        b: &DMatrix<f32>,
        (a_gram, product, b_gram): (&mut Accumulator, &mut Accumulator, &mut Accumulator),
    ) -> Result<()> {
        let (rows, m) = a.shape();
        let n = b.ncols();
        let shapes = [(a_gram.m, a_gram.n), (product.m, product.n), (b_gram.m, b_gram.n)];
        if b.nrows() != rows || shapes != [(m, m), (n, m), (n, n)] {
            return Err(Error::Gpu(format!("blocks of {:?} and {:?} into sums of {shapes:?}", a.shape(), b.shape())));
        }
        for (sum, gram) in [(&mut *a_gram, true), (&mut *product, false), (&mut *b_gram, true)] {
            if *sum.symmetric.get_or_insert(gram) != gram {
                return Err(Error::Gpu("a sum of Grams and of products at once".into()));
            }
        }
        if rows == 0 || m == 0 || n == 0 {
            return Ok(());
        }
        self.idle().await?;
        let scope = Scopes::push(&self.device);
        let uploaded = self
            .upload(Side::A, a.as_slice(), None)
            .and_then(|a_operand| Ok((a_operand, self.upload(Side::B, b.as_slice(), None)?)));
        if let Ok((a, b)) = &uploaded {
            for (sum, left, right, gram) in [(&*a_gram, a, a, true), (&*product, b, a, false), (&*b_gram, b, b, true)] {
                let shape =
                    Shape { rows, m: sum.m, n: sum.n, a_transposed: false, accumulate: true, batch: Batch::ONE };
                let encoder = self.encode(shape, left, right, (&sum.high, &sum.low), gram);
                self.queue.submit([encoder.finish()]);
            }
        }
        scope.pop(self).await?;
        uploaded.map(drop)
    }

    /// The sum, in f64. A Gram comes back as its upper triangle alone (each column's entries
    /// down to the diagonal, contiguous in column-major order) and is mirrored here: the kernel
    /// sums only the upper tiles, and the lower triangle would be as many bytes again.
    pub async fn read(&self, sum: &Accumulator) -> Result<DMatrix<f64>> {
        let mut c = DMatrix::zeros(sum.m, sum.n);
        if sum.m * sum.n == 0 {
            return Ok(c);
        }
        if sum.symmetric != Some(true) {
            self.read_into(c.as_mut_slice(), (&sum.high, &sum.low)).await?;
            return Ok(c);
        }
        let n = sum.n;
        let column = |j: usize| 4 * (j * n) as u64..4 * (j * n + j + 1) as u64;
        let parts: Vec<_> =
            [&sum.high, &sum.low].into_iter().flat_map(|part| (0..n).map(move |j| (part, column(j)))).collect();
        self.read_back(&parts, |values| {
            let (high, low) = values.split_at(values.len() / 2);
            let mut at = 0;
            for j in 0..n {
                for i in 0..=j {
                    c[(i, j)] = high[at] as f64 + low[at] as f64;
                    at += 1;
                }
            }
        })
        .await?;
        c.fill_lower_triangle_with_upper_triangle();
        Ok(c)
    }
}
