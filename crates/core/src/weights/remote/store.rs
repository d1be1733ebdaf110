//! Where fetched bytes are kept, so that nothing is fetched twice: byte ranges of a large file
//! (`RangeStore`), and a model's small files, pins and file facts (`LinkCache`). The CLI keeps
//! them on disk (`DiskCache`), the page in the browser (`crates/web/src/stored/`, handed to the
//! worker's session by `Session::keep_links_in`); without a cache they are held in memory for
//! one run.

use std::collections::BTreeMap;
use std::ops::Range;
use std::sync::Mutex;

use crate::Result;

/// The byte ranges held of one remote file.
pub trait RangeStore: crate::parallel::Shareable {
    /// `len` bytes at `offset`, when all of them are held.
    fn get(&self, offset: u64, len: usize) -> Option<Vec<u8>>;
    /// Keeps `bytes`, which start at `offset`.
    fn put(&self, offset: u64, bytes: &[u8]) -> Result<()>;
    /// Whether all of `len` bytes at `offset` are held.
    fn holds(&self, offset: u64, len: u64) -> bool;
    /// The parts of `range` not held, in order. A store that cannot tell says all of it.
    fn missing(&self, range: Range<u64>) -> Vec<Range<u64>> {
        if self.holds(range.start, range.end - range.start) { Vec::new() } else { vec![range] }
    }
}

/// The parts of `range` that `held` (sorted, not overlapping) does not cover.
pub fn gaps(held: impl IntoIterator<Item = Range<u64>>, range: Range<u64>) -> Vec<Range<u64>> {
    let mut gaps = Vec::new();
    let mut at = range.start;
    for piece in held {
        if piece.end <= at {
            continue;
        }
        if piece.start >= range.end {
            break;
        }
        if piece.start > at {
            gaps.push(at..piece.start);
        }
        at = at.max(piece.end);
    }
    if at < range.end {
        gaps.push(at..range.end);
    }
    gaps
}

/// Ranges held in memory, in chunks of at most `CHUNK_BYTES`; beyond `budget` bytes, chunks
/// are dropped, lowest offsets first, except those just kept (a dropped range is fetched again
/// if it is read again).
pub struct MemoryRanges {
    budget: u64,
    held: Mutex<BTreeMap<u64, Vec<u8>>>,
}

/// The largest chunk: small enough that the budget is kept to within one chunk.
const CHUNK_BYTES: usize = 4 << 20;

impl MemoryRanges {
    pub fn new(budget: u64) -> Self {
        Self { budget, held: Mutex::new(BTreeMap::new()) }
    }

    /// Calls `each(chunk, from)` for the consecutive chunks covering `offset..offset + len`, where
    /// `from` is where in the chunk the range continues; false when a byte of it is not held.
    fn walk(&self, offset: u64, len: u64, mut each: impl FnMut(&[u8], usize, usize)) -> bool {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let (mut at, end) = (offset, offset.saturating_add(len));
        while at < end {
            let Some((&start, chunk)) = held.range(..=at).next_back() else { return false };
            let chunk_end = start + chunk.len() as u64;
            if chunk_end <= at {
                return false;
            }
            let (from, to) = ((at - start) as usize, (chunk_end.min(end) - start) as usize);
            each(chunk, from, to);
            at = start + to as u64;
        }
        true
    }
}

impl RangeStore for MemoryRanges {
    fn get(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        let mut bytes = Vec::with_capacity(len);
        self.walk(offset, len as u64, |chunk, from, to| bytes.extend_from_slice(&chunk[from..to])).then_some(bytes)
    }

    fn holds(&self, offset: u64, len: u64) -> bool {
        self.walk(offset, len, |_, _, _| {})
    }

    fn missing(&self, range: Range<u64>) -> Vec<Range<u64>> {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let from = held.range(..=range.start).next_back().map_or(range.start, |(start, _)| *start);
        gaps(held.range(from..range.end).map(|(start, chunk)| *start..*start + chunk.len() as u64), range)
    }

    fn put(&self, offset: u64, bytes: &[u8]) -> Result<()> {
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let end = offset + bytes.len() as u64;
        // Chunks never overlap: those that do are dropped (fetched again if read again).
        let overlapping: Vec<u64> = held
            .range(..end)
            .filter(|(start, chunk)| **start + chunk.len() as u64 > offset)
            .map(|(start, _)| *start)
            .collect();
        for start in overlapping {
            held.remove(&start);
        }
        let mut rest = bytes;
        let mut at = offset;
        // Bytes of one request arrive in order: they extend the chunk before while it has room.
        if let Some((_, chunk)) = held.range_mut(..at).next_back().filter(|(s, c)| **s + c.len() as u64 == at) {
            let room = CHUNK_BYTES.saturating_sub(chunk.len()).min(rest.len());
            chunk.extend_from_slice(&rest[..room]);
            (rest, at) = (&rest[room..], at + room as u64);
        }
        for piece in rest.chunks(CHUNK_BYTES) {
            held.insert(at, piece.to_vec());
            at += piece.len() as u64;
        }
        // Over budget, the lowest chunks go, except those just kept.
        let mut total: u64 = held.values().map(|c| c.len() as u64).sum();
        while total > self.budget {
            let Some((&start, _)) = held.iter().find(|(s, c)| **s + c.len() as u64 <= offset || **s >= end) else {
                break;
            };
            total -= held.remove(&start).map_or(0, |c| c.len() as u64);
        }
        Ok(())
    }
}

/// Names one file of one version of a model, for a cache: `scope` is the version
/// (`hf/ORG--NAME/COMMIT`, or `web/HASH/ETAG-HASH`), `path` the file's path in it.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileKey {
    pub scope: String,
    pub path: String,
}

/// What was learnt of a large file when it was first opened: enough to open it again offline,
/// and to notice that it changed.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileFacts {
    pub size: u64,
    /// The Hub's `X-Linked-Etag` (the file's hash), or the web server's `ETag`.
    pub etag: Option<String>,
}

/// A model's small files, the commits its revisions resolved to, and its large files' ranges.
pub trait LinkCache: crate::parallel::Shareable {
    /// The commit `revision` of `repo` resolved to when last online.
    fn commit_of(&self, repo: &str, revision: &str) -> Option<String>;
    fn keep_commit(&self, repo: &str, revision: &str, commit: &str);
    /// A web folder's latest facts of `path` (web files have no commit to key them by).
    fn latest(&self, folder: &str, path: &str) -> Option<FileFacts>;
    fn keep_latest(&self, folder: &str, path: &str, facts: &FileFacts);
    fn whole_file(&self, key: &FileKey) -> Option<Vec<u8>>;
    fn keep_whole_file(&self, key: &FileKey, bytes: &[u8]);
    fn facts(&self, key: &FileKey) -> Option<FileFacts>;
    fn keep_facts(&self, key: &FileKey, facts: &FileFacts);
    /// The ranges held of a large file.
    fn ranges(&self, key: &FileKey) -> Box<dyn RangeStore>;
    /// Whether the server said, when last asked, that this file does not exist.
    fn known_absent(&self, key: &FileKey) -> bool;
    fn keep_absent(&self, key: &FileKey);
}

/// A cache of one run: nothing outlives the process; large files' ranges in memory.
pub struct NoCache {
    pub budget: u64,
}

impl LinkCache for NoCache {
    fn commit_of(&self, _: &str, _: &str) -> Option<String> {
        None
    }
    fn keep_commit(&self, _: &str, _: &str, _: &str) {}
    fn latest(&self, _: &str, _: &str) -> Option<FileFacts> {
        None
    }
    fn keep_latest(&self, _: &str, _: &str, _: &FileFacts) {}
    fn whole_file(&self, _: &FileKey) -> Option<Vec<u8>> {
        None
    }
    fn keep_whole_file(&self, _: &FileKey, _: &[u8]) {}
    fn facts(&self, _: &FileKey) -> Option<FileFacts> {
        None
    }
    fn keep_facts(&self, _: &FileKey, _: &FileFacts) {}
    fn ranges(&self, _: &FileKey) -> Box<dyn RangeStore> {
        Box::new(MemoryRanges::new(self.budget))
    }
    fn known_absent(&self, _: &FileKey) -> bool {
        false
    }
    fn keep_absent(&self, _: &FileKey) {}
}

/// Sorted, merged ranges: what a range store holds, or what an analysis will read.
pub(crate) fn merge_ranges(mut ranges: Vec<Range<u64>>, gap: u64) -> Vec<Range<u64>> {
    ranges.retain(|r| r.start < r.end);
    ranges.sort_by_key(|r| r.start);
    let mut merged: Vec<Range<u64>> = Vec::with_capacity(ranges.len());
    for range in ranges {
        match merged.last_mut() {
            Some(last) if range.start <= last.end.saturating_add(gap) => last.end = last.end.max(range.end),
            _ => merged.push(range),
        }
    }
    merged
}

/// A short, file-name-safe hash of a URL or an ETag.
pub(crate) fn short_hash(text: &str) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(text.as_bytes()).iter().take(12).map(|b| format!("{b:02x}")).collect()
}

#[cfg(not(target_arch = "wasm32"))]
pub use disk::DiskCache;

#[cfg(not(target_arch = "wasm32"))]
mod disk {
    use std::fs;
    use std::io::Write;
    use std::ops::Range;
    use std::os::unix::fs::FileExt;
    use std::path::{Path, PathBuf};
    use std::sync::Mutex;

    use super::{FileFacts, FileKey, LinkCache, MemoryRanges, RangeStore, gaps, merge_ranges, short_hash};
    use crate::Result;

    /// headprint's own cache folder: `ranges` of large files in sparse files beside the list of
    /// what they hold, small files whole, and the Hub's `refs` as the Hugging Face cache keeps
    /// them. Writes go to a temporary name first, so a stopped run leaves nothing half-written.
    pub struct DiskCache {
        root: PathBuf,
    }

    impl DiskCache {
        pub fn new(root: PathBuf) -> Self {
            Self { root }
        }

        /// `$HEADPRINT_CACHE`, else `$XDG_CACHE_HOME/headprint`, else `~/.cache/headprint`.
        pub fn default_root() -> Option<PathBuf> {
            let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
            var("HEADPRINT_CACHE")
                .or_else(|| var("XDG_CACHE_HOME").map(|d| d.join("headprint")))
                .or_else(|| var("HOME").map(|h| h.join(".cache/headprint")))
        }

        pub fn root(&self) -> &Path {
            &self.root
        }

        fn file(&self, key: &FileKey, suffix: &str) -> PathBuf {
            self.root.join(&key.scope).join(format!("{}{suffix}", key.path))
        }

        fn repo_dir(&self, repo: &str) -> PathBuf {
            self.root.join("hf").join(repo.replace('/', "--"))
        }

        fn folder_dir(&self, folder: &str) -> PathBuf {
            self.root.join("web").join(short_hash(folder))
        }
    }

    /// Writes `bytes` to `path` through a temporary file; a cache that cannot be written is no
    /// error (the run goes on from the network), so failures are dropped.
    fn write_atomically(path: &Path, bytes: &[u8]) {
        let write = || -> std::io::Result<()> {
            if let Some(dir) = path.parent() {
                fs::create_dir_all(dir)?;
            }
            let temporary = path.with_extension(format!("tmp{}", std::process::id()));
            fs::File::create(&temporary)?.write_all(bytes)?;
            fs::rename(&temporary, path)
        };
        let _ = write();
    }

    fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
        serde_json::from_slice(&fs::read(path).ok()?).ok()
    }

    impl LinkCache for DiskCache {
        fn commit_of(&self, repo: &str, revision: &str) -> Option<String> {
            let text = fs::read_to_string(self.repo_dir(repo).join("refs").join(revision)).ok()?;
            Some(text.trim().to_string()).filter(|c| crate::weights::ModelLink::is_commit(c))
        }
        fn keep_commit(&self, repo: &str, revision: &str, commit: &str) {
            write_atomically(&self.repo_dir(repo).join("refs").join(revision), commit.as_bytes());
        }
        fn latest(&self, folder: &str, path: &str) -> Option<FileFacts> {
            read_json(&self.folder_dir(folder).join("latest").join(format!("{path}.json")))
        }
        fn keep_latest(&self, folder: &str, path: &str, facts: &FileFacts) {
            let target = self.folder_dir(folder).join("latest").join(format!("{path}.json"));
            write_atomically(&target, &serde_json::to_vec(facts).unwrap_or_default());
        }
        fn whole_file(&self, key: &FileKey) -> Option<Vec<u8>> {
            fs::read(self.file(key, "")).ok()
        }
        fn keep_whole_file(&self, key: &FileKey, bytes: &[u8]) {
            write_atomically(&self.file(key, ""), bytes);
        }
        fn facts(&self, key: &FileKey) -> Option<FileFacts> {
            read_json(&self.file(key, ".facts.json"))
        }
        fn keep_facts(&self, key: &FileKey, facts: &FileFacts) {
            write_atomically(&self.file(key, ".facts.json"), &serde_json::to_vec(facts).unwrap_or_default());
        }
        fn ranges(&self, key: &FileKey) -> Box<dyn RangeStore> {
            Box::new(DiskRanges::open(self.file(key, ".ranges"), self.file(key, ".part")))
        }
        fn known_absent(&self, key: &FileKey) -> bool {
            self.file(key, ".absent").exists()
        }
        fn keep_absent(&self, key: &FileKey) {
            write_atomically(&self.file(key, ".absent"), b"");
        }
    }

    /// One large file's held ranges: the bytes at their own offsets in a sparse file, and the
    /// list of what it holds, written after the bytes.
    struct DiskRanges {
        list: PathBuf,
        data: PathBuf,
        held: Mutex<Vec<Range<u64>>>,
        /// Where bytes go when the cache folder cannot be written: the run goes on from memory.
        spill: MemoryRanges,
    }

    /// The most a file's ranges take in memory when its cache folder cannot be written.
    const SPILL_BUDGET: u64 = 512 << 20;

    impl DiskRanges {
        fn open(list: PathBuf, data: PathBuf) -> Self {
            let held = fs::read_to_string(&list)
                .ok()
                .map(|text| {
                    text.lines()
                        .filter_map(|line| {
                            let (a, b) = line.split_once(' ')?;
                            Some(a.parse().ok()?..b.parse().ok()?)
                        })
                        .collect()
                })
                .unwrap_or_default();
            // Ranges whose bytes are gone (a deleted data file) are not held.
            let held = if data.exists() { merge_ranges(held, 0) } else { Vec::new() };
            Self { list, data, held: Mutex::new(held), spill: MemoryRanges::new(SPILL_BUDGET) }
        }
    }

    impl DiskRanges {
        fn on_disk(&self, offset: u64, len: u64) -> bool {
            let end = offset.saturating_add(len);
            self.held.lock().unwrap_or_else(|e| e.into_inner()).iter().any(|r| r.start <= offset && end <= r.end)
        }
    }

    impl RangeStore for DiskRanges {
        fn holds(&self, offset: u64, len: u64) -> bool {
            self.on_disk(offset, len) || self.spill.holds(offset, len)
        }

        fn missing(&self, range: Range<u64>) -> Vec<Range<u64>> {
            let on_disk = gaps(self.held.lock().unwrap_or_else(|e| e.into_inner()).clone(), range);
            on_disk.into_iter().flat_map(|gap| self.spill.missing(gap)).collect()
        }

        fn get(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
            if !self.on_disk(offset, len as u64) {
                return self.spill.get(offset, len);
            }
            let mut bytes = vec![0u8; len];
            fs::File::open(&self.data).ok()?.read_exact_at(&mut bytes, offset).ok()?;
            Some(bytes)
        }

        fn put(&self, offset: u64, bytes: &[u8]) -> Result<()> {
            let write = || -> std::io::Result<()> {
                if let Some(dir) = self.data.parent() {
                    fs::create_dir_all(dir)?;
                }
                let file = fs::OpenOptions::new().create(true).truncate(false).write(true).open(&self.data)?;
                file.write_all_at(bytes, offset)
            };
            if write().is_err() {
                return self.spill.put(offset, bytes);
            }
            let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
            let mut ranges = std::mem::take(&mut *held);
            ranges.push(offset..offset + bytes.len() as u64);
            *held = merge_ranges(ranges, 0);
            let list: String = held.iter().map(|r| format!("{} {}\n", r.start, r.end)).collect();
            write_atomically(&self.list, list.as_bytes());
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_merge_across_small_gaps_only() {
        let merged = merge_ranges(vec![10..20, 0..5, 22..30, 100..120, 5..5], 2);
        assert_eq!(merged, vec![0..5, 10..30, 100..120]);
        assert_eq!(merge_ranges(vec![0..5, 6..8], 0), vec![0..5, 6..8]);
    }

    #[test]
    fn memory_ranges_never_serve_a_byte_they_do_not_hold() {
        let store = MemoryRanges::new(1 << 20);
        store.put(10, &[1; 10]).unwrap();
        store.put(20, &[2; 5]).unwrap();
        assert_eq!(store.get(12, 12), Some([vec![1; 8], vec![2; 4]].concat()), "across chunks");
        // An overlapping put replaces what it overlaps; what it does not cover is not held.
        store.put(15, &[3; 4]).unwrap();
        assert_eq!(store.get(15, 4), Some(vec![3; 4]));
        assert!(!store.holds(10, 5) && !store.holds(19, 2));
        assert!(store.holds(15, 4) && !store.holds(0, 1));
    }

    #[test]
    fn what_a_store_lacks_is_named_in_order() {
        assert_eq!(gaps(vec![10..20, 30..40], 0..50), vec![0..10, 20..30, 40..50]);
        assert_eq!(gaps(vec![10..20, 30..40], 12..35), vec![20..30]);
        assert_eq!(gaps(std::iter::once(0..100), 10..20), Vec::<Range<u64>>::new());
        let store = MemoryRanges::new(1 << 20);
        store.put(10, &[1; 10]).unwrap();
        store.put(30, &[1; 10]).unwrap();
        assert_eq!(store.missing(15..45), vec![20..30, 40..45]);
        assert_eq!(store.missing(30..40), Vec::<Range<u64>>::new());
    }

    #[test]
    fn memory_ranges_serve_what_they_hold_within_their_budget() {
        let store = MemoryRanges::new(10);
        store.put(0, &[1, 2, 3, 4]).unwrap();
        store.put(4, &[5, 6]).unwrap();
        assert_eq!(store.get(2, 4), Some(vec![3, 4, 5, 6]));
        assert_eq!(store.get(5, 2), None);
        store.put(100, &[9; 8]).unwrap();
        assert_eq!(store.get(0, 1), None, "over budget, the other chunks go");
        assert!(store.holds(100, 8) && !store.holds(100, 9));
        // Chunks stay small, so the budget holds within one chunk however much arrives in order.
        let big = MemoryRanges::new(2 * CHUNK_BYTES as u64);
        let piece = vec![7u8; 1 << 20];
        for i in 0..12u64 {
            big.put(i << 20, &piece).unwrap();
        }
        let total: usize = big.held.lock().unwrap().values().map(Vec::len).sum();
        assert!(total <= 3 * CHUNK_BYTES, "{total} bytes held");
        assert!(big.holds(11 << 20, 1 << 20) && !big.holds(0, 1));
        assert_eq!(store.get(100, 8), Some(vec![9; 8]));
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn disk_ranges_outlive_the_store_that_wrote_them() {
        let root = std::env::temp_dir().join(format!("headprint-store-test-{}", std::process::id()));
        let cache = DiskCache::new(root.clone());
        let key = FileKey { scope: "hf/org--name/abc".into(), path: "model.safetensors".into() };
        cache.ranges(&key).put(1000, &[7; 100]).unwrap();
        cache.ranges(&key).put(1100, &[8; 10]).unwrap();
        let again = cache.ranges(&key);
        assert_eq!(again.get(1095, 10), Some([vec![7; 5], vec![8; 5]].concat()));
        assert_eq!(again.get(990, 20), None);
        cache.keep_commit("org/name", "main", "607a30d783dfa663caf39e06633721c8d4cfcd7e");
        assert_eq!(cache.commit_of("org/name", "main").as_deref(), Some("607a30d783dfa663caf39e06633721c8d4cfcd7e"));
        std::fs::remove_dir_all(root).unwrap();
    }

    #[cfg(not(target_arch = "wasm32"))]
    #[test]
    fn a_cache_folder_that_cannot_be_written_keeps_the_ranges_in_memory() {
        // A file where the folder should be: nothing can be created under it.
        let blocker = std::env::temp_dir().join(format!("headprint-store-blocked-{}", std::process::id()));
        std::fs::write(&blocker, b"not a folder").unwrap();
        let cache = DiskCache::new(blocker.join("cache"));
        let key = FileKey { scope: "hf/org--name/abc".into(), path: "model.safetensors".into() };
        let ranges = cache.ranges(&key);
        ranges.put(10, &[1, 2, 3]).unwrap();
        assert_eq!(ranges.get(11, 2), Some(vec![2, 3]));
        assert!(ranges.holds(10, 3));
        std::fs::remove_file(blocker).unwrap();
    }
}
