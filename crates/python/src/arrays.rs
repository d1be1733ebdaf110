//! Tensors that Python holds (numpy arrays, torch tensors seen through `.numpy()`), read as one
//! safetensors file without copying them into it: the header is written here, and each read
//! of the data copies only the bytes asked for, straight from the arrays' own memory, as a
//! read from a file on disk would.

use headprint::weights::ByteSource;
use headprint::{Error, Result};
use numpy::{PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// One tensor: its name, safetensors dtype and shape, and the numpy array that holds its
/// bytes (bfloat16 comes as 16-bit integers, which numpy has, under the dtype "BF16").
pub struct HeldTensor {
    pub name: String,
    pub dtype: String,
    pub shape: Vec<usize>,
    pub bytes: Bytes,
}

/// A numpy array's memory: where it starts and how long it is, and the array, held so that
/// the memory stays where it is.
pub struct Bytes {
    start: usize,
    len: usize,
    _array: Py<PyUntypedArray>,
}

impl Bytes {
    /// The bytes of `array`, which must be C-contiguous.
    pub fn of(array: &Bound<'_, PyUntypedArray>, name: &str) -> Result<Bytes> {
        if !array.is_c_contiguous() {
            return Err(Error::Invalid(format!("{name}: the array is not C-contiguous")));
        }
        let len = array.len() * array.dtype().itemsize();
        // SAFETY: the array object is alive (borrowed here, then held); reading its `data`
        // field only copies the pointer.
        let start = unsafe { (*array.as_array_ptr()).fields.data } as usize;
        Ok(Bytes { start, len, _array: array.clone().unbind() })
    }

    fn len_bytes(&self) -> usize {
        self.len
    }

    fn slice(&self) -> &[u8] {
        if self.len == 0 {
            return &[];
        }
        // SAFETY: a C-contiguous array's `len` bytes from `data` are its elements; the array is
        // held by this struct, so they stay allocated and in place (numpy refuses to resize an
        // array that is referenced), and nothing writes them while a computation reads them.
        unsafe { std::slice::from_raw_parts(self.start as *const u8, self.len) }
    }
}

/// The tensors as a safetensors file: `header` first, then each tensor's bytes in turn.
pub struct HeldTensors {
    name: String,
    header: Vec<u8>,
    /// Each tensor's start in the file and its buffer.
    pieces: Vec<(u64, Bytes)>,
    len: u64,
}

fn dtype_bytes(dtype: &str) -> Option<usize> {
    match dtype {
        "F64" | "I64" => Some(8),
        "F32" | "I32" => Some(4),
        "F16" | "BF16" | "I16" => Some(2),
        "U8" | "I8" | "BOOL" => Some(1),
        _ => None,
    }
}

impl HeldTensors {
    pub fn new(name: &str, tensors: Vec<HeldTensor>) -> Result<HeldTensors> {
        let mut entries = serde_json::Map::new();
        let mut offset = 0usize;
        let mut buffers = Vec::with_capacity(tensors.len());
        for tensor in tensors {
            let width = dtype_bytes(&tensor.dtype).ok_or_else(|| {
                Error::Invalid(format!("{}: dtype {} is not one headprint reads", tensor.name, tensor.dtype))
            })?;
            let expected = tensor.shape.iter().product::<usize>() * width;
            if tensor.bytes.len_bytes() != expected {
                return Err(Error::Invalid(format!(
                    "{}: {} bytes, not the {expected} of a {} tensor of shape {:?}",
                    tensor.name,
                    tensor.bytes.len_bytes(),
                    tensor.dtype,
                    tensor.shape
                )));
            }
            entries.insert(
                tensor.name.clone(),
                serde_json::json!({"dtype": tensor.dtype, "shape": tensor.shape, "data_offsets": [offset, offset + expected]}),
            );
            buffers.push((offset, tensor.bytes));
            offset += expected;
        }
        let json = serde_json::Value::Object(entries).to_string();
        let mut header = (json.len() as u64).to_le_bytes().to_vec();
        header.extend_from_slice(json.as_bytes());
        let start = header.len() as u64;
        let pieces = buffers.into_iter().map(|(offset, bytes)| (start + offset as u64, bytes)).collect();
        Ok(HeldTensors { name: name.into(), header, pieces, len: start + offset as u64 })
    }
}

impl ByteSource for HeldTensors {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.len
    }

    fn read_range(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let end = offset + len as u64;
        if end > self.len {
            return Err(Error::Unreadable { file: self.name.clone(), reason: "read past the end".into() });
        }
        let mut out = Vec::with_capacity(len);
        let header_end = self.header.len() as u64;
        if offset < header_end {
            out.extend_from_slice(&self.header[offset as usize..end.min(header_end) as usize]);
        }
        // The pieces are in order of their starts; copy the overlap of each with the range.
        let first = self.pieces.partition_point(|(start, bytes)| start + bytes.len_bytes() as u64 <= offset);
        for (start, bytes) in &self.pieces[first..] {
            if *start >= end {
                break;
            }
            let from = offset.max(*start) - start;
            let to = end.min(start + bytes.len_bytes() as u64) - start;
            out.extend_from_slice(&bytes.slice()[from as usize..to as usize]);
        }
        Ok(out)
    }
}
