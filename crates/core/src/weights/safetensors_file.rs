//! The header of one safetensors file, parsed with the `safetensors` crate but read through a
//! `ByteSource`, so only the header is in memory until a tensor is asked for.

use std::collections::HashMap;
use std::ops::Range;

use safetensors::{Dtype, SafeTensorError};
use serde::Deserialize;

use super::{ByteSource, Tensor};
use crate::{Error, Result};

/// The safetensors reference implementation refuses headers over 100 MB; so do we, before
/// allocating anything for them.
pub const MAX_HEADER_BYTES: u64 = 100_000_000;

/// Where one tensor lives in its file.
#[derive(Debug, Clone, PartialEq)]
pub struct TensorEntry {
    pub dtype: Dtype,
    pub shape: Vec<usize>,
    /// Absolute byte range in the file.
    pub start: u64,
    pub end: u64,
}

pub struct SafetensorsFile<'a> {
    source: &'a dyn ByteSource,
    tensors: HashMap<String, TensorEntry>,
    metadata: HashMap<String, String>,
}

impl<'a> SafetensorsFile<'a> {
    pub fn open(source: &'a dyn ByteSource) -> Result<Self> {
        let file = source.name().to_string();
        let file_len = source.len();
        let not_safetensors = |reason: &str| Error::NotSafetensors { file: file.clone(), reason: reason.into() };
        if file_len < 8 {
            return Err(not_safetensors("shorter than the 8-byte header length"));
        }
        let length_bytes = source.read_range(0, 8)?;
        let header_len = u64::from_le_bytes(length_bytes.try_into().expect("8 bytes"));
        if header_len > MAX_HEADER_BYTES {
            // A 10 GB claim is far more likely a foreign file than a real header.
            return Err(Error::HeaderTooLarge { file, claimed: header_len, limit: MAX_HEADER_BYTES });
        }
        if 8 + header_len > file_len {
            return Err(Error::HeaderPastEnd { file, claimed: header_len, actual: file_len });
        }
        let header = source.read_range(8, header_len as usize)?;
        if header.first() != Some(&b'{') {
            return Err(not_safetensors("the header is not a JSON object"));
        }
        let header_text = std::str::from_utf8(&header).map_err(|_| not_safetensors("the header is not UTF-8"))?;
        let table = HeaderTable::parse(header_text).map_err(|e| describe_header_error(&file, &e))?;
        let data_start = 8 + header_len;
        // A claimed length near u64::MAX must not wrap past the check (then every offset below
        // it is in the file, so the sums below cannot overflow).
        let Some(expected_len) = data_start.checked_add(table.data_len) else {
            return Err(Error::BadOffsets { file, reason: "a tensor's size overflows".into() });
        };
        if expected_len > file_len {
            return Err(Error::Truncated { file, expected: expected_len, actual: file_len });
        }
        let tensors = table
            .tensors
            .into_iter()
            .map(|(name, t)| {
                let entry = TensorEntry {
                    dtype: t.dtype,
                    shape: t.shape,
                    start: data_start + t.data_offsets.0,
                    end: data_start + t.data_offsets.1,
                };
                (name, entry)
            })
            .collect();
        Ok(Self { source, tensors, metadata: table.metadata })
    }

    pub fn name(&self) -> &str {
        self.source.name()
    }

    pub fn metadata(&self) -> &HashMap<String, String> {
        &self.metadata
    }

    pub fn source(&self) -> &'a dyn ByteSource {
        self.source
    }

    pub fn entries(&self) -> &HashMap<String, TensorEntry> {
        &self.tensors
    }

    /// Reads one tensor and converts it to f32 (f16 and bf16 are widened exactly).
    pub fn read(&self, name: &str) -> Result<Option<Tensor>> {
        let Some(entry) = self.tensors.get(name) else { return Ok(None) };
        let bytes = self.source.read_range(entry.start, (entry.end - entry.start) as usize)?;
        let data = self.decode(name, entry.dtype, &bytes, 0)?;
        Ok(Some(Tensor { name: name.into(), shape: entry.shape.clone(), data }))
    }

    /// Reads rows `rows` of a 2-D tensor, and only their bytes: a block of rows of a row-major
    /// matrix is one contiguous byte range, so a vocabulary-sized embedding can be read a block
    /// at a time. The same conversion and checks as `read`; a non-finite value's index is
    /// counted from the start of the whole tensor, its count only over the rows read.
    pub fn read_rows(&self, name: &str, rows: Range<usize>) -> Result<Option<Tensor>> {
        let Some(entry) = self.tensors.get(name) else { return Ok(None) };
        let &[total_rows, cols] = entry.shape.as_slice() else {
            return Err(Error::BadShape {
                tensor: name.into(),
                actual: entry.shape.clone(),
                expected: "a matrix (rows are read by byte range)".into(),
            });
        };
        if rows.start > rows.end || rows.end > total_rows {
            return Err(Error::RowsOutOfRange {
                tensor: name.into(),
                start: rows.start,
                end: rows.end,
                rows: total_rows,
            });
        }
        // Opening checked every byte range against its shape and dtype, so rows are equal slices.
        let row_bytes = (entry.end - entry.start).checked_div(total_rows as u64).unwrap_or(0);
        let start = entry.start + rows.start as u64 * row_bytes;
        let len = (rows.end - rows.start) as u64 * row_bytes;
        let bytes = self.source.read_range(start, len as usize)?;
        let data = self.decode(name, entry.dtype, &bytes, rows.start * cols)?;
        Ok(Some(Tensor { name: name.into(), shape: vec![rows.end - rows.start, cols], data }))
    }

    /// Little-endian bytes of `dtype` as f32, refusing non-finite values (`index_base`: the
    /// index in the whole tensor of the first value given).
    fn decode(&self, name: &str, dtype: Dtype, bytes: &[u8], index_base: usize) -> Result<Vec<f32>> {
        let data: Vec<f32> = match dtype {
            Dtype::F32 => bytes.chunks_exact(4).map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]])).collect(),
            Dtype::F16 => bytes.chunks_exact(2).map(|b| half::f16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            Dtype::BF16 => bytes.chunks_exact(2).map(|b| half::bf16::from_le_bytes([b[0], b[1]]).to_f32()).collect(),
            other => {
                return Err(Error::UnknownDtype {
                    file: self.name().into(),
                    tensor: name.into(),
                    dtype: format!("{other:?}"),
                });
            }
        };
        if let Some(first_index) = data.iter().position(|v| !v.is_finite()) {
            let count = data.iter().filter(|v| !v.is_finite()).count();
            return Err(Error::NonFinite { tensor: name.into(), count, first_index: index_base + first_index });
        }
        Ok(data)
    }
}

/// One tensor as the header lists it.
#[derive(Deserialize)]
struct HeaderTensor {
    dtype: Dtype,
    shape: Vec<usize>,
    data_offsets: (u64, u64),
}

/// The header's table, checked as the safetensors crate checks it (`Metadata::validate`: byte
/// ranges in order from 0 with no gaps or overlaps, each as long as its shape and dtype say),
/// but with offsets in u64. The crate keeps them as usize, which is 32 bits in the tab: it
/// refuses every file over 4 GiB there, such as each of Llama-3-8B's 5 GB shards.
struct HeaderTable {
    tensors: Vec<(String, HeaderTensor)>,
    metadata: HashMap<String, String>,
    /// Bytes of tensor data after the header.
    data_len: u64,
}

impl HeaderTable {
    /// The error is a message in the safetensors crate's words, for [`describe_header_error`].
    fn parse(text: &str) -> std::result::Result<HeaderTable, String> {
        let mut entries: HashMap<String, serde_json::Value> = serde_json::from_str(text).map_err(|e| e.to_string())?;
        // The crate takes a missing or null `__metadata__` alike.
        let metadata = match entries.remove("__metadata__") {
            Some(serde_json::Value::Null) | None => HashMap::new(),
            Some(value) => serde_json::from_value(value).map_err(|e| e.to_string())?,
        };
        let mut tensors = entries
            .into_iter()
            .map(|(name, value)| Ok((name, serde_json::from_value::<HeaderTensor>(value).map_err(|e| e.to_string())?)))
            .collect::<std::result::Result<Vec<_>, String>>()?;
        tensors.sort_by_key(|(_, t)| t.data_offsets);
        let mut end = 0u64;
        for (name, t) in &tensors {
            let (start, stop) = t.data_offsets;
            if start != end || stop < start {
                return Err(SafeTensorError::InvalidOffset(name.clone()).to_string());
            }
            end = stop;
            let overflow = || SafeTensorError::ValidationOverflow.to_string();
            let elements = t.shape.iter().try_fold(1u64, |n, &d| n.checked_mul(d as u64)).ok_or_else(overflow)?;
            let bits = elements.checked_mul(t.dtype.bitsize() as u64).ok_or_else(overflow)?;
            if bits % 8 != 0 {
                return Err(SafeTensorError::MisalignedSlice.to_string());
            }
            if stop - start != bits / 8 {
                return Err(SafeTensorError::TensorInvalidInfo.to_string());
            }
        }
        Ok(HeaderTable { tensors, metadata, data_len: end })
    }
}

/// A table problem in the safetensors crate's words (its error messages), as ours.
fn describe_header_error(file: &str, message: &str) -> Error {
    let bad = |reason: String| Error::BadOffsets { file: file.into(), reason };
    if message.contains("unknown variant") {
        return Error::NotSafetensors { file: file.into(), reason: format!("unknown dtype in header: {message}") };
    }
    for (error, reason) in [
        (SafeTensorError::TensorInvalidInfo.to_string(), "a tensor's byte range does not match its shape and dtype"),
        (SafeTensorError::ValidationOverflow.to_string(), "a tensor's size overflows"),
    ] {
        if message.contains(&error) {
            return bad(reason.into());
        }
    }
    if message.contains("offset") {
        return bad(format!("tensor byte ranges overlap or leave gaps ({message})"));
    }
    Error::NotSafetensors { file: file.into(), reason: format!("the header is not a safetensors table ({message})") }
}
