//! Where bytes come from. Everything above this reads through `ByteSource`, so the browser
//! can read one tensor at a time from a `File` by byte range without copying the whole file.

use crate::{Error, Result};

/// Random access to the bytes of one file. Natively read from several threads at once (the
/// Grams' segments).
pub trait ByteSource: crate::parallel::Shareable {
    /// A name for error messages (the file name).
    fn name(&self) -> &str;
    /// Total size in bytes.
    fn len(&self) -> u64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Reads `len` bytes starting at `offset`; callers have already checked the range.
    fn read_range(&self, offset: u64, len: usize) -> Result<Vec<u8>>;
    /// Says which byte ranges are about to be read, so a source that fetches can ask for them
    /// together; sources that have every byte at hand ignore it.
    fn will_read(&self, _ranges: Vec<std::ops::Range<u64>>) {}
}

/// Bytes already in memory (tests, fetched demo model).
pub struct MemorySource {
    name: String,
    bytes: Vec<u8>,
}

impl MemorySource {
    pub fn new(name: impl Into<String>, bytes: Vec<u8>) -> Self {
        Self { name: name.into(), bytes }
    }
}

impl ByteSource for MemorySource {
    fn name(&self) -> &str {
        &self.name
    }
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_range(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let unreadable = |reason: &str| Error::Unreadable { file: self.name.clone(), reason: reason.into() };
        let start = usize::try_from(offset).map_err(|_| unreadable("offset too large"))?;
        self.bytes
            .get(start..start.saturating_add(len))
            .map(<[u8]>::to_vec)
            .ok_or_else(|| unreadable("read past the end"))
    }
}

/// A file on disk, read with positioned reads (no mmap, no whole-file copy).
#[cfg(not(target_arch = "wasm32"))]
pub struct FileSource {
    name: String,
    file: std::fs::File,
    len: u64,
}

#[cfg(not(target_arch = "wasm32"))]
impl FileSource {
    pub fn open(path: &std::path::Path) -> Result<Self> {
        let name = path.display().to_string();
        let file = std::fs::File::open(path).map_err(|e| Error::File { path: name.clone(), reason: e.to_string() })?;
        let len = file.metadata().map_err(|e| Error::File { path: name.clone(), reason: e.to_string() })?.len();
        Ok(Self { name, file, len })
    }
}

#[cfg(not(target_arch = "wasm32"))]
impl ByteSource for FileSource {
    fn name(&self) -> &str {
        &self.name
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn read_range(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        use std::os::unix::fs::FileExt;
        let mut buffer = vec![0u8; len];
        self.file
            .read_exact_at(&mut buffer, offset)
            .map_err(|e| Error::File { path: self.name.clone(), reason: e.to_string() })?;
        Ok(buffer)
    }
}
