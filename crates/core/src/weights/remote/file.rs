//! A large file read by HTTP byte ranges: a `ByteSource` like a file on disk, that fetches what
//! is read and is not yet held, merged with the neighbouring bytes the analysis will read.

use std::io::Read;
use std::ops::Range;
use std::sync::{Arc, Mutex};

use super::FileFacts;
use super::http::{Client, Cut, Followed, Response, content_range};
use super::store::{RangeStore, merge_ranges};
use crate::weights::ByteSource;
use crate::{Error, Result};

/// The most one request asks for: a larger planned span is fetched in windows of this size, each
/// when it is first read.
pub const LONGEST_REQUEST: u64 = 32 << 20;
/// Wanted tensors this close together are fetched as one request, the gap with them: small
/// buffers between them (a 0-dimensional mask, a rotary table), never an MLP weight.
pub const MERGE_GAP: u64 = 4 << 10;
/// A read this small fetches only itself, not the window around it: a norm, a bias or a final
/// norm read when a model is opened would otherwise bring a whole window with it, once per
/// worker of the page's pool.
pub const SMALL_READ: u64 = 64 << 10;
/// Body bytes copied to the store at a time.
const CHUNK: usize = 1 << 20;

const IGNORED_RANGES: &str =
    "the server does not serve byte ranges: it sent whole files, of which headprint read what it needed";

/// How a file is reached: its address (the Hub's `/resolve/<commit>/`, or a web file), what
/// was pinned when it was opened, and the answer that redirect gave last (the CDN's signed URL).
pub struct RemoteFile {
    name: String,
    address: String,
    size: u64,
    /// The Hub's `X-Linked-Etag` (or the web server's `ETag`) when the file was opened.
    pinned_etag: Option<String>,
    client: Arc<Client>,
    store: Box<dyn RangeStore>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Where the address last redirected; reused until it expires.
    location: Option<String>,
    /// The ETag of the bytes themselves (the CDN's), from the first answer that carried one.
    content_etag: Option<String>,
    /// What the analysis will read, merged.
    plan: Vec<Range<u64>>,
}

/// One fetch's outcome that the caller may retry.
enum Attempt {
    Done,
    /// The connection dropped, or stalled, after the bytes before `at` were kept.
    Dropped {
        at: u64,
        cut: Cut,
    },
    /// The signed URL expired: resolve the address again.
    Expired,
}

impl RemoteFile {
    /// The file named `name` at `address`, as `facts` pinned it, kept in `store`.
    pub fn new(
        name: String,
        address: String,
        facts: FileFacts,
        client: Arc<Client>,
        store: Box<dyn RangeStore>,
    ) -> Self {
        let FileFacts { size, etag: pinned_etag } = facts;
        Self { name, address, size, pinned_etag, client, store, state: Mutex::new(State::default()) }
    }

    /// Keeps what the request that found the file brought (its first bytes: the header length),
    /// resuming it where it broke or stalled.
    pub(super) fn keep_first_answer(&self, followed: Followed) -> Result<()> {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if followed.url != self.address {
            state.location = Some(followed.url.clone());
        }
        let mut response = followed.response;
        let end = self.size.min(super::FIRST_BYTES);
        let kept = match response.status {
            206 if content_range(&response).is_some_and(|(first, _)| first == 0) => {
                self.check_content_etag(&mut state, &response)?;
                self.keep_body(&mut response, 0, end, self.store.as_ref())?
            }
            200 => {
                self.client.note_once(IGNORED_RANGES);
                self.check_content_etag(&mut state, &response)?;
                self.keep_body(&mut response, 0, end, self.store.as_ref())?
            }
            // Nothing kept: the bytes are fetched when read.
            _ => Attempt::Done,
        };
        drop(response);
        match kept {
            Attempt::Dropped { at, cut } => self.resume(&mut state, at, end, self.store.as_ref(), Some(cut)),
            _ => Ok(()),
        }
    }

    /// Fetches `start..end` into the store, resuming a connection that dropped or stalled from
    /// the first byte not received, and resolving an expired URL again.
    fn fetch(&self, state: &mut State, start: u64, end: u64, into: &dyn RangeStore) -> Result<()> {
        self.resume(state, start, end, into, None)
    }

    /// `fetch`, from `at`, where an earlier answer for these bytes may already have been `cut`.
    fn resume(
        &self,
        state: &mut State,
        mut at: u64,
        end: u64,
        into: &dyn RangeStore,
        mut cut: Option<Cut>,
    ) -> Result<()> {
        let (mut drops, mut stalls, mut expiries) = (0, 0, 0);
        loop {
            if let Some(cut) = cut.take() {
                match cut.stalled {
                    true => stalls += 1,
                    false => drops += 1,
                }
                if drops + stalls > self.client.patience().retries {
                    let how = match (drops, stalls) {
                        (_, 0) => format!("dropped {drops} times"),
                        (0, _) => format!("stalled {stalls} times"),
                        _ => format!("dropped {drops} times and stalled {stalls} times"),
                    };
                    return Err(Error::Network {
                        what: self.name.clone(),
                        reason: format!("the connection {how} ({})", cut.reason),
                    });
                }
                if cut.stalled {
                    // Progress stopped for the timeout: the user is told why.
                    self.client.note_once(&format!(
                        "the connection stalled ({}) reading {}; resumed at byte {at}",
                        cut.reason, self.name
                    ));
                }
                self.client.wait(self.client.backoff(drops + stalls));
            }
            if at >= end {
                return Ok(());
            }
            match self.attempt(state, at, end, into)? {
                Attempt::Done => return Ok(()),
                Attempt::Dropped { at: kept_to, cut: why } => (at, cut) = (kept_to, Some(why)),
                Attempt::Expired => {
                    expiries += 1;
                    state.location = None;
                    if expiries > 2 {
                        return Err(Error::Network {
                            what: self.name.clone(),
                            reason: "the server's signed address keeps expiring".into(),
                        });
                    }
                }
            }
        }
    }

    fn attempt(&self, state: &mut State, start: u64, end: u64, into: &dyn RangeStore) -> Result<Attempt> {
        let range = Some((start, end - 1));
        let followed = match &state.location {
            // A redirect target (the CDN) answers the range itself; an expired one refuses.
            Some(location) => match self.client.get(location, range, &self.name, &[400, 401, 403, 410, 416]) {
                Ok(f) if matches!(f.response.status, 400 | 401 | 403 | 410) => return Ok(Attempt::Expired),
                other => other?,
            },
            None => {
                let followed = self.client.get(&self.address, range, &self.name, &[416])?;
                self.check_pin(version_of(&followed).as_deref(), "its version")?;
                if followed.url != self.address {
                    state.location = Some(followed.url.clone());
                }
                followed
            }
        };
        let mut response = followed.response;
        match response.status {
            206 => {
                let (first, total) = content_range(&response).unwrap_or((start, None));
                if let Some(total) = total.filter(|&t| t != self.size) {
                    return Err(self.changed(format!("{} bytes, not {}", total, self.size)));
                }
                if first != start {
                    return Err(Error::Network {
                        what: self.name.clone(),
                        reason: format!("asked for bytes from {start}, the server sent them from {first}"),
                    });
                }
                self.check_content_etag(state, &response)?;
                self.keep_body(&mut response, start, end, into)
            }
            200 => {
                // The server (or a CDN before it) ignored `Range`: read up to what is needed
                // from the whole file, then drop the connection.
                self.client.note_once(IGNORED_RANGES);
                if let Some(length) = response.header("content-length").and_then(|l| l.parse::<u64>().ok())
                    && length != self.size
                {
                    return Err(self.changed(format!("{length} bytes, not {}", self.size)));
                }
                self.check_content_etag(state, &response)?;
                // Every later read would stream the file from its start again: what the
                // analysis will read is kept from this stream, before and after the bytes asked.
                if let Err(cut) = self.keep_planned(&mut response, 0, start, &state.plan, into) {
                    return Ok(Attempt::Dropped { at: start, cut });
                }
                let kept = self.keep_body(&mut response, start, end, into)?;
                if matches!(kept, Attempt::Done) {
                    // Up to the last planned byte, then the connection is dropped.
                    let last = state.plan.last().map_or(end, |span| span.end.max(end));
                    // What the stream did not bring is fetched when read.
                    let _ = self.keep_planned(&mut response, end, last, &state.plan, into);
                }
                Ok(kept)
            }
            416 => Err(self.changed(format!(
                "the server says it has {}",
                content_range(&response)
                    .and_then(|(_, total)| total)
                    .map_or("fewer bytes".to_string(), |t| format!("{t} bytes, not {}", self.size))
            ))),
            status => Err(Error::Network { what: self.name.clone(), reason: format!("the server answered {status}") }),
        }
    }

    /// Copies the body into the store from `start` until `end`; stops early on a dropped connection.
    fn keep_body(&self, response: &mut Response, start: u64, end: u64, into: &dyn RangeStore) -> Result<Attempt> {
        let mut at = start;
        let mut buffer = vec![0u8; CHUNK];
        while at < end {
            let want = usize::try_from((end - at).min(CHUNK as u64)).unwrap_or(CHUNK);
            let read = match response.body.read(&mut buffer[..want]) {
                Ok(0) => return Ok(Attempt::Dropped { at, cut: Cut::ended(format!("the body ended at byte {at}")) }),
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Ok(Attempt::Dropped { at, cut: Cut::of(&e, &self.client) }),
            };
            self.client.count(read as u64);
            into.put(at, &buffer[..read])?;
            at += read as u64;
        }
        Ok(Attempt::Done)
    }

    /// Reads the body from `at` to `until`, keeping the planned bytes and dropping the rest;
    /// Err where the stream ended or stalled first (what was not kept is fetched when read).
    fn keep_planned(
        &self,
        response: &mut Response,
        mut at: u64,
        until: u64,
        plan: &[Range<u64>],
        into: &dyn RangeStore,
    ) -> std::result::Result<(), Cut> {
        for span in plan {
            if span.end <= at {
                continue;
            }
            if span.start >= until {
                break;
            }
            let (start, stop) = (span.start.max(at), span.end.min(until));
            skip(&mut response.body, start - at, &self.client)?;
            match self.keep_body(response, start, stop, into) {
                Ok(Attempt::Done) => {}
                Ok(Attempt::Dropped { cut, .. }) => return Err(cut),
                Ok(Attempt::Expired) | Err(_) => return Err(Cut::ended("the stream could not be kept".into())),
            }
            at = stop;
        }
        if at < until {
            skip(&mut response.body, until - at, &self.client)?;
        }
        Ok(())
    }

    fn check_pin(&self, etag: Option<&str>, what: &str) -> Result<()> {
        match (&self.pinned_etag, etag) {
            (Some(pinned), Some(now)) if pinned != now => Err(self.changed(format!("{what} was {pinned}, now {now}"))),
            _ => Ok(()),
        }
    }

    fn check_content_etag(&self, state: &mut State, response: &Response) -> Result<()> {
        let Some(now) = response.header("etag") else { return Ok(()) };
        match &state.content_etag {
            Some(first) if first != now => Err(self.changed(format!("its ETag was {first}, now {now}"))),
            Some(_) => Ok(()),
            None => {
                state.content_etag = Some(now.to_string());
                Ok(())
            }
        }
    }

    fn changed(&self, detail: String) -> Error {
        Error::Changed { file: self.name.clone(), detail }
    }
}

/// A file's size and version, from the answer to its first request: the Hub's `X-Linked-Size`
/// and `X-Linked-Etag` (on its redirect), else `Content-Range`'s total and the `ETag`.
pub(super) fn facts_of(followed: &Followed, name: &str) -> Result<FileFacts> {
    let response = &followed.response;
    let size = followed
        .hub_header("x-linked-size")
        .and_then(|s| s.trim().parse().ok())
        .or_else(|| content_range(response).and_then(|(_, total)| total))
        .or_else(|| (response.status == 200).then(|| response.header("content-length")?.parse().ok()).flatten());
    let Some(size) = size else {
        return Err(Error::Network {
            what: name.into(),
            reason: "the server did not say the file's size (no Content-Range: if the server sets CORS headers, it must expose Content-Range)".into(),
        });
    };
    Ok(FileFacts { size, etag: version_of(followed) })
}

/// What names a file's version: the Hub's `X-Linked-Etag` (on its redirect), else the `ETag`,
/// else the `Last-Modified` date; None when the server gives none of them.
pub(super) fn version_of(followed: &Followed) -> Option<String> {
    followed
        .hub_header("x-linked-etag")
        .or_else(|| followed.hub_header("etag"))
        .map(str::to_string)
        .or_else(|| followed.hub_header("last-modified").map(|date| format!("modified {date}")))
}

/// Reads and drops `count` bytes of a body (a server that ignored `Range`).
fn skip(body: &mut Box<dyn Read + Send>, count: u64, client: &Client) -> std::result::Result<(), Cut> {
    let copied = std::io::copy(&mut body.take(count), &mut std::io::sink());
    let copied = copied.map_err(|e| Cut::of(&e, client))?;
    client.count(copied);
    if copied < count { Err(Cut::ended(format!("the body ended at byte {copied}"))) } else { Ok(()) }
}

impl ByteSource for RemoteFile {
    fn name(&self) -> &str {
        &self.name
    }

    fn len(&self) -> u64 {
        self.size
    }

    fn read_range(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        if len == 0 {
            return Ok(Vec::new());
        }
        if let Some(bytes) = self.store.get(offset, len) {
            return Ok(bytes);
        }
        let end = offset
            .checked_add(len as u64)
            .filter(|&end| end <= self.size)
            .ok_or_else(|| Error::Unreadable { file: self.name.clone(), reason: "read past the end".into() })?;
        // One fetch at a time per file: the Grams' threads read neighbouring rows, which the
        // first one's request usually brings.
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bytes) = self.store.get(offset, len) {
            return Ok(bytes);
        }
        if self.client.is_offline() {
            return Err(Error::Offline { what: format!("bytes {offset}..{end} of {}", self.name) });
        }
        // A read inside a planned span fetches the span's windows it touches: fixed windows, so
        // that neighbouring reads in any order never ask for a byte twice. Of each window only
        // what the store lacks is asked for: a plan that grew (the probe's, after the
        // fingerprint's) lays its windows across bytes an earlier plan's windows brought. A
        // small read fetches itself alone.
        let span = state.plan.iter().find(|r| r.start <= offset && offset < r.end).cloned();
        match span.filter(|_| len as u64 >= SMALL_READ) {
            Some(span) => {
                let first = (offset - span.start) / LONGEST_REQUEST;
                let last = (end.min(span.end) - 1 - span.start) / LONGEST_REQUEST;
                for window in first..=last {
                    let start = span.start + window * LONGEST_REQUEST;
                    let stop = (start + LONGEST_REQUEST).min(span.end);
                    // Held runs shorter than a merge gap are asked for again with their
                    // neighbours rather than split a request in two.
                    for gap in merge_ranges(self.store.missing(start..stop), MERGE_GAP) {
                        self.fetch(&mut state, gap.start, gap.end, self.store.as_ref())?;
                    }
                }
                if end > span.end {
                    self.fetch(&mut state, span.end, end, self.store.as_ref())?;
                }
            }
            None => self.fetch(&mut state, offset, end, self.store.as_ref())?,
        }
        if let Some(bytes) = self.store.get(offset, len) {
            return Ok(bytes);
        }
        // The store could not keep them (a budget smaller than what was fetched with them):
        // these bytes alone, held for this read, with no plan to fetch beside them.
        let scratch = super::MemoryRanges::new(u64::MAX);
        let plan = std::mem::take(&mut state.plan);
        let fetched = self.fetch(&mut state, offset, end, &scratch);
        state.plan = plan;
        fetched?;
        scratch.get(offset, len).ok_or_else(|| Error::Unreadable {
            file: self.name.clone(),
            reason: "the fetched bytes were not kept".into(),
        })
    }

    fn will_read(&self, ranges: Vec<Range<u64>>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let mut plan = std::mem::take(&mut state.plan);
        plan.extend(ranges);
        state.plan = merge_ranges(plan, MERGE_GAP);
    }
}
