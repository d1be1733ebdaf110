//! The SHA-256 that names local files in a share link: each file read in chunks, never whole.

use sha2::{Digest, Sha256};

use super::protocol::Progress;
use crate::weights::ByteSource;
use crate::{Error, Result};

/// Bytes hashed per read, so a large file never sits in memory whole.
const HASH_CHUNK: usize = 8 << 20;

/// A `Hash` request: the files' SHA-256, reporting the bytes read.
pub(super) fn hash(names: Vec<String>, files: Vec<Box<dyn ByteSource>>, report: &dyn Fn(Progress)) -> Result<String> {
    if names.len() != files.len() {
        return Err(Error::Worker(format!("{} file names for {} files", names.len(), files.len())));
    }
    let total: u64 = files.iter().map(|f| f.len()).sum();
    let named: Vec<(String, Box<dyn ByteSource>)> = names.into_iter().zip(files).collect();
    let hashing = move |done| report(Progress::new("Identifying the files (SHA-256)", done, total));
    sha256_of(&named, &hashing)
}

/// SHA-256 of each file (read in chunks), combined into one hex string for several files.
fn sha256_of(named: &[(String, Box<dyn ByteSource>)], report: &dyn Fn(u64)) -> Result<String> {
    let mut done = 0u64;
    let mut lines: Vec<(String, String)> = Vec::with_capacity(named.len());
    for (name, source) in named {
        let mut hasher = Sha256::new();
        let mut offset = 0u64;
        while offset < source.len() {
            let len = HASH_CHUNK.min((source.len() - offset) as usize);
            hasher.update(source.read_range(offset, len)?);
            offset += len as u64;
            done += len as u64;
            report(done);
        }
        lines.push((name.rsplit(['/', '\\']).next().unwrap_or(name).to_string(), hex(&hasher.finalize())));
    }
    if let [(_, only)] = lines.as_slice() {
        return Ok(only.clone());
    }
    lines.sort();
    let joined: String = lines.iter().map(|(name, sha)| format!("{name}:{sha}\n")).collect();
    Ok(hex(&Sha256::digest(joined.as_bytes())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
