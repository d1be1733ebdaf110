//! The worker's half: a `LinkCache` over the catalog the page sent with an open by link. What is
//! in the catalog is read synchronously (small records as strings, bytes as `Blob`s through
//! `FileReaderSync`); what the worker learns or fetches is posted to the page, which keeps it.
//!
//! What a worker fetches it also keeps itself, as `Blob`s, for as long as it holds the model:
//! the browser holds a `Blob`'s bytes outside the wasm memory (and moves large ones to disk), so
//! no range is fetched twice in one run however the analysis reads, and the worker's memory holds
//! only the request under way. Posting a `Blob` to the page copies no bytes.

use std::cell::RefCell;
use std::collections::HashMap;

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use super::{KEEP, RANGES, RECORDS, commit_key, file_key, latest_key, parse_range_key, range_key};
use crate::js::{field, read_blob};
use headprint::weights::remote::{FileFacts, FileKey, LinkCache, MemoryRanges, RangeStore};

/// The longest run of fetched bytes posted as one record: one request's window.
const RECORD_BYTES: usize = headprint::weights::remote::LONGEST_REQUEST as usize;

/// What the page keeps of one model, as it was when the open began.
pub struct StoredLinks {
    prefix: String,
    records: HashMap<String, JsValue>,
    /// Each large file's stored runs of bytes (`scope/path` -> (offset, bytes)).
    ranges: RefCell<HashMap<String, Vec<(u64, web_sys::Blob)>>>,
    /// What each large file holds in memory when the browser refuses to make a `Blob` (such bytes
    /// are not posted to the page: read again, they are fetched again once dropped).
    memory_budget: u64,
    /// Whether the page keeps what is posted (it has a store).
    keeps: bool,
}

impl StoredLinks {
    /// The catalog in a message's `stored` field (`{prefix, keeps, records: [[key, value]],
    /// ranges: [[key, blob]]}`); None when the message has none (it opens no link).
    pub fn from_message(stored: &JsValue, memory_budget: u64) -> Option<StoredLinks> {
        let prefix = field(stored, "prefix").as_string()?;
        let pairs = |name: &str| -> Vec<(String, JsValue)> {
            js_sys::Array::from(&field(stored, name))
                .iter()
                .filter_map(|pair| {
                    let pair = js_sys::Array::from(&pair);
                    Some((pair.get(0).as_string()?, pair.get(1)))
                })
                .collect()
        };
        let records = pairs("records").into_iter().collect();
        let mut ranges: HashMap<String, Vec<(u64, web_sys::Blob)>> = HashMap::new();
        for (key, value) in pairs("ranges") {
            if let (Some((file, offset)), Ok(blob)) = (parse_range_key(&key), value.dyn_into::<web_sys::Blob>()) {
                ranges.entry(file.to_string()).or_default().push((offset, blob));
            }
        }
        for pieces in ranges.values_mut() {
            pieces.sort_by_key(|(offset, _)| *offset);
        }
        let keeps = field(stored, "keeps").as_bool().unwrap_or(false);
        Some(StoredLinks { prefix, records, ranges: RefCell::new(ranges), memory_budget, keeps })
    }

    fn text(&self, key: &str) -> Option<String> {
        self.records.get(key).and_then(JsValue::as_string)
    }

    fn facts_at(&self, key: &str) -> Option<FileFacts> {
        self.text(key).and_then(|json| serde_json::from_str(&json).ok())
    }
}

/// What a worker posts for the page to keep.
enum Posted<'a> {
    Text(String),
    /// Moved, not copied, to the page.
    Bytes(&'a [u8]),
    /// A `Blob` travels by reference.
    Blob(&'a web_sys::Blob),
}

/// Posts one record for the page to keep.
fn post(store: &str, key: &str, value: Posted) {
    let message = js_sys::Object::new();
    let set = |name: &str, value: &JsValue| {
        let _ = js_sys::Reflect::set(&message, &JsValue::from_str(name), value);
    };
    set("kind", &JsValue::from_str(KEEP));
    set("store", &JsValue::from_str(store));
    set("key", &JsValue::from_str(key));
    let scope: web_sys::DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    match value {
        Posted::Text(text) => {
            set("value", &JsValue::from_str(&text));
            let _ = scope.post_message(&message);
        }
        Posted::Blob(blob) => {
            set("value", blob);
            let _ = scope.post_message(&message);
        }
        Posted::Bytes(bytes) => {
            let array = js_sys::Uint8Array::from(bytes);
            set("value", &array);
            let _ = scope.post_message_with_transfer(&message, &js_sys::Array::of1(&array.buffer()));
        }
    }
}

impl StoredLinks {
    fn keep(&self, store: &str, key: &str, value: Posted) {
        if self.keeps {
            post(store, key, value);
        }
    }
}

/// Bytes `from..to` of a kept `Blob`; None when they cannot all be read (the page removed it
/// meanwhile, or the browser dropped it): they are then fetched again.
fn read_kept(blob: &web_sys::Blob, from: u64, to: u64) -> Option<Vec<u8>> {
    read_blob(blob, from, to).ok().filter(|bytes| bytes.len() as u64 == to - from)
}

impl LinkCache for StoredLinks {
    fn commit_of(&self, _repo: &str, revision: &str) -> Option<String> {
        self.text(&commit_key(&self.prefix, revision))
    }
    fn keep_commit(&self, _repo: &str, revision: &str, commit: &str) {
        self.keep(RECORDS, &commit_key(&self.prefix, revision), Posted::Text(commit.into()));
    }
    fn latest(&self, _folder: &str, path: &str) -> Option<FileFacts> {
        self.facts_at(&latest_key(&self.prefix, path))
    }
    fn keep_latest(&self, _folder: &str, path: &str, facts: &FileFacts) {
        if let Ok(json) = serde_json::to_string(facts) {
            self.keep(RECORDS, &latest_key(&self.prefix, path), Posted::Text(json));
        }
    }
    fn whole_file(&self, key: &FileKey) -> Option<Vec<u8>> {
        let blob = self.records.get(&file_key(key, "whole"))?.dyn_ref::<web_sys::Blob>()?;
        read_kept(blob, 0, blob.size() as u64)
    }
    fn keep_whole_file(&self, key: &FileKey, bytes: &[u8]) {
        self.keep(RECORDS, &file_key(key, "whole"), Posted::Bytes(bytes));
    }
    fn facts(&self, key: &FileKey) -> Option<FileFacts> {
        self.facts_at(&file_key(key, "facts"))
    }
    fn keep_facts(&self, key: &FileKey, facts: &FileFacts) {
        if let Ok(json) = serde_json::to_string(facts) {
            self.keep(RECORDS, &file_key(key, "facts"), Posted::Text(json));
        }
    }
    fn ranges(&self, key: &FileKey) -> Box<dyn RangeStore> {
        let file = format!("{}/{}", key.scope, key.path);
        let pieces = self.ranges.borrow_mut().remove(&file).unwrap_or_default();
        Box::new(StoredRanges {
            file: key.clone(),
            pieces: RefCell::new(pieces),
            memory: MemoryRanges::new(self.memory_budget),
            fetching: RefCell::new(None),
            keeps: self.keeps,
        })
    }
    fn known_absent(&self, key: &FileKey) -> bool {
        self.records.contains_key(&file_key(key, "absent"))
    }
    fn keep_absent(&self, key: &FileKey) {
        self.keep(RECORDS, &file_key(key, "absent"), Posted::Text(String::new()));
    }
}

/// One large file's ranges: those the page stored and those fetched in this run, each run of
/// bytes a `Blob` read with `FileReaderSync`; runs are posted to the page as they complete.
struct StoredRanges {
    file: FileKey,
    /// (offset, bytes), sorted by offset; runs may overlap (two workers fetched the same window).
    pieces: RefCell<Vec<(u64, web_sys::Blob)>>,
    /// Where fetched bytes go when the browser refuses to make a `Blob` of them.
    memory: MemoryRanges,
    /// The run being fetched: one request's body arrives in pieces, kept as one `Blob`.
    fetching: RefCell<Option<(u64, Vec<u8>)>>,
    keeps: bool,
}

impl StoredRanges {
    /// Calls `each(piece, from, to)` for the pieces covering `offset..offset + len`, in order;
    /// false when a byte of it is not held, or `each` fails.
    fn walk(&self, offset: u64, len: u64, mut each: impl FnMut(&web_sys::Blob, u64, u64) -> bool) -> bool {
        let pieces = self.pieces.borrow();
        let (mut at, end) = (offset, offset + len);
        while at < end {
            // Of the pieces holding `at`, the one that reaches furthest.
            let Some((start, blob)) = pieces
                .iter()
                .take_while(|(start, _)| *start <= at)
                .filter(|(start, blob)| start + blob.size() as u64 > at)
                .max_by_key(|(start, blob)| start + blob.size() as u64)
            else {
                return false;
            };
            let to = (start + blob.size() as u64).min(end);
            if !each(blob, at - start, to - start) {
                return false;
            }
            at = to;
        }
        true
    }

    /// Ends the run being fetched: kept as a `Blob` (in memory where the browser makes none)
    /// and posted to the page.
    fn end_run(&self) {
        let Some((offset, bytes)) = self.fetching.borrow_mut().take() else { return };
        let array = js_sys::Uint8Array::from(bytes.as_slice());
        match web_sys::Blob::new_with_u8_array_sequence(&js_sys::Array::of1(&array)) {
            Ok(blob) => {
                if self.keeps {
                    let end = offset + bytes.len() as u64;
                    post(RANGES, &range_key(&self.file, offset, end), Posted::Blob(&blob));
                }
                let mut pieces = self.pieces.borrow_mut();
                let at = pieces.partition_point(|(start, _)| *start <= offset);
                pieces.insert(at, (offset, blob));
            }
            Err(_) => {
                let _ = self.memory.put(offset, &bytes);
            }
        }
    }
}

impl RangeStore for StoredRanges {
    fn get(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        self.end_run();
        if let Some(bytes) = self.memory.get(offset, len) {
            return Some(bytes);
        }
        let mut bytes = Vec::with_capacity(len);
        let read = self.walk(offset, len as u64, |blob, from, to| match read_kept(blob, from, to) {
            Some(part) => {
                bytes.extend_from_slice(&part);
                true
            }
            None => false,
        });
        read.then_some(bytes)
    }

    fn put(&self, offset: u64, bytes: &[u8]) -> headprint::Result<()> {
        let follows =
            self.fetching.borrow().as_ref().is_some_and(|(start, run)| {
                start + run.len() as u64 == offset && run.len() + bytes.len() <= RECORD_BYTES
            });
        if !follows {
            self.end_run();
            *self.fetching.borrow_mut() = Some((offset, Vec::with_capacity(bytes.len())));
        }
        if let Some((_, run)) = self.fetching.borrow_mut().as_mut() {
            run.extend_from_slice(bytes);
        }
        Ok(())
    }

    fn holds(&self, offset: u64, len: u64) -> bool {
        self.end_run();
        self.memory.holds(offset, len) || self.walk(offset, len, |_, _, _| true)
    }

    fn missing(&self, range: std::ops::Range<u64>) -> Vec<std::ops::Range<u64>> {
        self.end_run();
        let pieces = self.pieces.borrow();
        let held = pieces.iter().map(|(start, blob)| *start..start + blob.size() as u64);
        let in_blobs = headprint::weights::remote::gaps(held, range);
        in_blobs.into_iter().flat_map(|gap| self.memory.missing(gap)).collect()
    }
}

impl Drop for StoredRanges {
    fn drop(&mut self) {
        self.end_run();
    }
}
