//! Models by link kept in the browser, for repeat visits and offline use. The page keeps what
//! the workers fetched in IndexedDB (`indexed_db.rs`); each open by link hands the workers a
//! catalog of what is kept for that model, which they read synchronously (`worker.rs`).
//!
//! Why this split: a worker reads a model with synchronous calls (`FileReaderSync`, synchronous
//! XHR) inside the core's synchronous `ByteSource`, while every browser store is asynchronous,
//! and the pool's workers read at once. A `Blob` from IndexedDB can be read synchronously in a
//! worker, and the page, which never blocks, can write. The Cache API, the other obvious home,
//! refuses `206` answers.
//!
//! Both halves name records the same way, below. Every key of one model starts with its link's
//! `store_prefix` (`hf/ORG--NAME/`, `web/HASH/`), so a model is listed and removed by prefix.

pub mod indexed_db;
pub mod worker;

use headprint::weights::remote::FileKey;

/// The message kind a worker posts for each thing the page should keep.
pub const KEEP: &str = "keep";

/// The object store of byte ranges (a `Blob` each) and that of everything else.
pub const RANGES: &str = "ranges";
pub const RECORDS: &str = "records";

/// A large file's ranges: one record per run of bytes fetched, keyed by where it starts and
/// ends (zero-padded, so the keys sort by offset; with the end, a short run fetched at the same
/// offset as a long one never replaces it).
pub fn range_key(file: &FileKey, offset: u64, end: u64) -> String {
    format!("{}/{}#{offset:016}-{end:016}", file.scope, file.path)
}

/// The file and offset of a range's key.
pub fn parse_range_key(key: &str) -> Option<(&str, u64)> {
    let (file, run) = key.rsplit_once('#')?;
    let (offset, _end) = run.split_once('-')?;
    Some((file, offset.parse().ok()?))
}

/// A record about one file: `whole` (a small file's bytes), `facts` or `absent`.
pub fn file_key(file: &FileKey, what: &str) -> String {
    format!("{}/{}#{what}", file.scope, file.path)
}

/// The commit a Hub revision resolved to.
pub fn commit_key(prefix: &str, revision: &str) -> String {
    format!("{prefix}refs/{revision}")
}

/// A web folder's latest facts of a large file (a web file has no commit to key it by).
pub fn latest_key(prefix: &str, path: &str) -> String {
    format!("{prefix}latest-facts/{path}")
}

/// The record naming a stored model in the "Stored models" list (its pinned link).
pub fn name_key(prefix: &str) -> String {
    format!("{prefix}name")
}
