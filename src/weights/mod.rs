//! Reading weights: byte sources, safetensors headers, and a store that finds a named
//! tensor across shards and hands it over as f32.

mod safetensors_file;
mod source;
mod store;

pub use safetensors_file::{MAX_HEADER_BYTES, SafetensorsFile, TensorEntry};
#[cfg(not(target_arch = "wasm32"))]
pub use source::FileSource;
pub use source::{ByteSource, MemorySource};
pub use store::{ModelFiles, TensorStore};

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
            [rows, cols] => Ok(nalgebra::DMatrix::from_row_slice(*rows, *cols, &self.data)),
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
