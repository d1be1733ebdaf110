//! Reading weights: byte sources, safetensors headers, and a store that finds a named
//! tensor across shards and hands it over as f32.

pub mod remote;
mod safetensors_file;
mod source;
mod store;

pub use remote::ModelLink;
pub use safetensors_file::{MAX_HEADER_BYTES, SafetensorsFile, TensorEntry};
#[cfg(not(target_arch = "wasm32"))]
pub use source::FileSource;
pub use source::{ByteSource, MemorySource};
pub use store::{ModelFiles, TensorStore};

/// Edge of the square blocks [`column_major`] copies: a block's rows and columns both stay in
/// cache (nalgebra's `from_row_slice` walks one of them with a stride of a whole row).
const TRANSPOSE_BLOCK: usize = 32;

/// A row-major `rows x cols` array as a (column-major) nalgebra matrix, copied block by block.
fn column_major(rows: usize, cols: usize, data: &[f32]) -> nalgebra::DMatrix<f32> {
    let mut out = vec![0f32; rows * cols];
    for r0 in (0..rows).step_by(TRANSPOSE_BLOCK) {
        let r1 = (r0 + TRANSPOSE_BLOCK).min(rows);
        for c0 in (0..cols).step_by(TRANSPOSE_BLOCK) {
            for c in c0..(c0 + TRANSPOSE_BLOCK).min(cols) {
                for r in r0..r1 {
                    out[c * rows + r] = data[r * cols + c];
                }
            }
        }
    }
    nalgebra::DMatrix::from_vec(rows, cols, out)
}

/// A tensor converted to f32, row-major as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

impl Tensor {
    /// The tensor as a nalgebra matrix with the stored (row-major) layout: rows x cols.
    pub fn to_matrix(&self) -> crate::Result<nalgebra::DMatrix<f32>> {
        match self.shape.as_slice() {
            [rows, cols] => Ok(column_major(*rows, *cols, &self.data)),
            other => Err(crate::Error::BadShape {
                tensor: self.name.clone(),
                actual: other.to_vec(),
                expected: "a matrix".into(),
            }),
        }
    }

    /// Checks the shape against what the model description expects.
    pub fn expect_shape(&self, expected: &[usize]) -> crate::Result<()> {
        if self.shape == expected {
            Ok(())
        } else {
            Err(crate::Error::BadShape {
                tensor: self.name.clone(),
                actual: self.shape.clone(),
                expected: format!("{expected:?}"),
            })
        }
    }
}
