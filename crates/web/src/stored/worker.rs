//! The worker's half: a `LinkCache` over the catalog the page sent with an open by link. What is
//! in the catalog is read synchronously (small records as strings, bytes as `Blob`s through
//! `FileReaderSync`); what the worker learns or fetches is posted to the page, which keeps it.

use std::cell::RefCell;
use std::collections::HashMap;

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use super::{KEEP, RANGES, RECORDS, commit_key, file_key, latest_key, parse_range_key, range_key};
use crate::worker_host::field;
use headprint::weights::remote::{FileFacts, FileKey, LinkCache, MemoryRanges, RangeStore};

/// The longest run of fetched bytes posted as one record: one request's window.
const RECORD_BYTES: usize = headprint::weights::remote::LONGEST_REQUEST as usize;

/// What the page keeps of one model, as it was when the open began.
pub struct StoredLinks {
    prefix: String,
    records: HashMap<String, JsValue>,
    /// Each large file's stored runs of bytes (`scope/path` -> (offset, bytes)).
    ranges: RefCell<HashMap<String, Vec<(u64, web_sys::Blob)>>>,
    /// What each large file holds in memory besides (see `LINK_BYTES_PER_FILE`).
    memory_budget: u64,
}

impl StoredLinks {
    /// The catalog in a message's `stored` field (`{prefix, records: [[key, value]], ranges:
    /// [[key, blob]]}`); None when the page sent none (it has no store, e.g. a private window
    /// without IndexedDB).
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
        Some(StoredLinks { prefix, records, ranges: RefCell::new(ranges), memory_budget })
    }

    fn text(&self, key: &str) -> Option<String> {
        self.records.get(key).and_then(JsValue::as_string)
    }

    fn facts_at(&self, key: &str) -> Option<FileFacts> {
        self.text(key).and_then(|json| serde_json::from_str(&json).ok())
    }
}

/// Posts one record for the page to keep: text, or bytes (moved, not copied, to the page).
fn keep(store: &str, key: &str, value: Kept) {
    let message = js_sys::Object::new();
    let set = |name: &str, value: &JsValue| {
        let _ = js_sys::Reflect::set(&message, &JsValue::from_str(name), value);
    };
    set("kind", &JsValue::from_str(KEEP));
    set("store", &JsValue::from_str(store));
    set("key", &JsValue::from_str(key));
    let scope: web_sys::DedicatedWorkerGlobalScope = js_sys::global().unchecked_into();
    match value {
        Kept::Text(text) => {
            set("value", &JsValue::from_str(&text));
            let _ = scope.post_message(&message);
        }
        Kept::Bytes(bytes) => {
            let array = js_sys::Uint8Array::from(bytes);
            set("value", &array);
            let _ = scope.post_message_with_transfer(&message, &js_sys::Array::of1(&array.buffer()));
        }
    }
}

enum Kept<'a> {
    Text(String),
    Bytes(&'a [u8]),
}

/// A whole `Blob`'s bytes, or a part of it; None when it cannot be read (the page removed it
/// meanwhile, or the browser dropped it): the bytes are then fetched again.
fn read_blob(blob: &web_sys::Blob, from: u64, to: u64) -> Option<Vec<u8>> {
    let slice = blob.slice_with_f64_and_f64(from as f64, to as f64).ok()?;
    let buffer = web_sys::FileReaderSync::new().ok()?.read_as_array_buffer(&slice).ok()?;
    let bytes = js_sys::Uint8Array::new(&buffer).to_vec();
    (bytes.len() as u64 == to - from).then_some(bytes)
}

impl LinkCache for StoredLinks {
    fn commit_of(&self, _repo: &str, revision: &str) -> Option<String> {
        self.text(&commit_key(&self.prefix, revision))
    }
    fn keep_commit(&self, _repo: &str, revision: &str, commit: &str) {
        keep(RECORDS, &commit_key(&self.prefix, revision), Kept::Text(commit.into()));
    }
    fn latest(&self, _folder: &str, path: &str) -> Option<FileFacts> {
        self.facts_at(&latest_key(&self.prefix, path))
    }
    fn keep_latest(&self, _folder: &str, path: &str, facts: &FileFacts) {
        if let Ok(json) = serde_json::to_string(facts) {
            keep(RECORDS, &latest_key(&self.prefix, path), Kept::Text(json));
        }
    }
    fn whole_file(&self, key: &FileKey) -> Option<Vec<u8>> {
        let blob = self.records.get(&file_key(key, "whole"))?.dyn_ref::<web_sys::Blob>()?;
        read_blob(blob, 0, blob.size() as u64)
    }
    fn keep_whole_file(&self, key: &FileKey, bytes: &[u8]) {
        keep(RECORDS, &file_key(key, "whole"), Kept::Bytes(bytes));
    }
    fn facts(&self, key: &FileKey) -> Option<FileFacts> {
        self.facts_at(&file_key(key, "facts"))
    }
    fn keep_facts(&self, key: &FileKey, facts: &FileFacts) {
        if let Ok(json) = serde_json::to_string(facts) {
            keep(RECORDS, &file_key(key, "facts"), Kept::Text(json));
        }
    }
    fn ranges(&self, key: &FileKey) -> Box<dyn RangeStore> {
        let file = format!("{}/{}", key.scope, key.path);
        let pieces = self.ranges.borrow_mut().remove(&file).unwrap_or_default();
        Box::new(StoredRanges {
            file: key.clone(),
            pieces,
            memory: MemoryRanges::new(self.memory_budget),
            unposted: RefCell::new(None),
        })
    }
    fn known_absent(&self, key: &FileKey) -> bool {
        self.records.contains_key(&file_key(key, "absent"))
    }
    fn keep_absent(&self, key: &FileKey) {
        keep(RECORDS, &file_key(key, "absent"), Kept::Text(String::new()));
    }
}

/// One large file's ranges: those the page stored, read from their `Blob`s, and those fetched
/// in this run, held in memory and posted to the page in runs of up to `RECORD_BYTES`.
struct StoredRanges {
    file: FileKey,
    /// (offset, bytes), sorted by offset; runs may overlap (two workers fetched the same window).
    pieces: Vec<(u64, web_sys::Blob)>,
    memory: MemoryRanges,
    /// Fetched bytes not yet posted: one request's body arrives in pieces, posted as one record.
    unposted: RefCell<Option<(u64, Vec<u8>)>>,
}

impl StoredRanges {
    /// Calls `each(piece, from, to)` for stored pieces covering `offset..offset + len` in
    /// order; false when a byte of it is not stored.
    fn walk(&self, offset: u64, len: u64, mut each: impl FnMut(&web_sys::Blob, u64, u64) -> bool) -> bool {
        let (mut at, end) = (offset, offset + len);
        while at < end {
            // Of the pieces holding `at`, the one that reaches furthest.
            let Some((start, blob)) = self
                .pieces
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

    fn post_unposted(&self) {
        if let Some((offset, bytes)) = self.unposted.borrow_mut().take() {
            keep(RANGES, &range_key(&self.file, offset), Kept::Bytes(&bytes));
        }
    }
}

impl RangeStore for StoredRanges {
    fn get(&self, offset: u64, len: usize) -> Option<Vec<u8>> {
        self.post_unposted();
        if let Some(bytes) = self.memory.get(offset, len) {
            return Some(bytes);
        }
        let mut bytes = Vec::with_capacity(len);
        let read = self.walk(offset, len as u64, |blob, from, to| match read_blob(blob, from, to) {
            Some(part) => {
                bytes.extend_from_slice(&part);
                true
            }
            None => false,
        });
        read.then_some(bytes)
    }

    fn put(&self, offset: u64, bytes: &[u8]) -> headprint::Result<()> {
        self.memory.put(offset, bytes)?;
        let mut unposted = self.unposted.borrow_mut();
        let follows = unposted
            .as_ref()
            .is_some_and(|(start, run)| start + run.len() as u64 == offset && run.len() + bytes.len() <= RECORD_BYTES);
        if !follows {
            drop(unposted);
            self.post_unposted();
            unposted = self.unposted.borrow_mut();
            *unposted = Some((offset, Vec::with_capacity(bytes.len())));
        }
        if let Some((_, run)) = unposted.as_mut() {
            run.extend_from_slice(bytes);
        }
        Ok(())
    }

    fn holds(&self, offset: u64, len: u64) -> bool {
        self.post_unposted();
        self.memory.holds(offset, len) || self.walk(offset, len, |_, _, _| true)
    }
}

impl Drop for StoredRanges {
    fn drop(&mut self) {
        self.post_unposted();
    }
}
