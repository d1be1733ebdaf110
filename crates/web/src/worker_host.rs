//! The worker's browser glue: takes messages `{id, json, files}`, hands the request to the
//! `Session`, posts back `{id, kind: "progress" | "reply", json, memory, payload?}` (large
//! matrices, the pool's Grams, patterns and OV matrices, travel as a `Float64Array` beside the
//! JSON, moved, both ways). Files are read by
//! byte range with `FileReaderSync` (workers only), one tensor at a time, never whole.
//!
//! Requests are answered one at a time, in the order they came: a load whose Grams are on the
//! GPU waits for WebGPU through the event loop, and messages that arrive meanwhile queue up
//! behind it instead of running beside it.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::task::{Poll, Waker};

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

use crate::js::{field, js_message, read_blob};
use crate::stored::worker::StoredLinks;

use headprint::weights::remote::{Response, Transport};
use headprint::weights::{ByteSource, MemorySource};
use headprint::worker::memory::LINK_BYTES_PER_FILE;
use headprint::worker::protocol::{Progress, Request};
use headprint::worker::session::{Reporter, Session};
use headprint::{Error, Result};

/// Progress is posted at most this often (ms), plus the first and last step of each stage.
const PROGRESS_INTERVAL_MS: f64 = 50.0;
/// Files up to this size are read in one go (one read instead of one per tensor); larger ones
/// tensor by tensor, so a 500 MB model never sits in memory twice.
const WHOLE_READ_BYTES: f64 = 32.0 * 1024.0 * 1024.0;

/// A browser `Blob` (a `File`, or the fetched demo model) read by byte range.
struct BlobSource {
    name: String,
    blob: web_sys::Blob,
}

impl ByteSource for BlobSource {
    fn name(&self) -> &str {
        &self.name
    }
    fn len(&self) -> u64 {
        self.blob.size() as u64
    }
    fn read_range(&self, offset: u64, len: usize) -> Result<Vec<u8>> {
        let bytes = read_blob(&self.blob, offset, offset + len as u64).map_err(|e| Error::Unreadable {
            file: self.name.clone(),
            reason: format!("cannot read the file ({})", js_message(&e)),
        })?;
        if bytes.len() != len {
            return Err(Error::Unreadable {
                file: self.name.clone(),
                reason: "the file changed or is shorter than its header says".into(),
            });
        }
        Ok(bytes)
    }
}

thread_local! {
    /// Body bytes this worker fetched by link, posted with every message (the page adds up the
    /// pool's).
    static FETCHED: Cell<f64> = const { Cell::new(0.0) };
    /// Requests this worker abandoned because the server stopped answering.
    static STALLS: Cell<f64> = const { Cell::new(0.0) };
}

/// The worker's HTTP for models by link: synchronous XHR, which workers may use, beside
/// `FileReaderSync`. The browser follows redirects itself and sends no token.
///
/// A synchronous XHR delivers its body all at once, and its `timeout` bounds the whole request,
/// not the wait for each byte. So a range is fetched in pieces of at most `PIECE` bytes, each
/// given the read timeout plus the time its bytes take at `SLOWEST_RATE`: a stalled piece is
/// abandoned within that bound, and the core asks for the rest again, by range, from the first
/// byte not received, as the command line does.
struct XhrTransport;

/// The most one XHR asks for.
const PIECE: u64 = 4 << 20;
/// The slowest transfer taken for a live connection (bytes per second): a classroom of 30
/// sharing 60 Mbit/s gets this each.
const SLOWEST_RATE: f64 = 256e3;
/// What a small file (fetched whole, its size unknown) is given time for beside the timeout.
const SMALL_FILE_ALLOWANCE: f64 = 16.0 * 1024.0 * 1024.0;

/// One XHR's answer: status, headers, body and the URL that gave it after redirects.
struct Answered {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    url: String,
}

/// One synchronous GET of `url`, asking for `range`, abandoned after `timeout_ms`.
fn xhr_get(url: &str, range: Option<(u64, u64)>, timeout_ms: f64) -> std::io::Result<Answered> {
    use std::io::{Error, ErrorKind};
    let failed = |e: JsValue| Error::other(js_message(&e));
    let xhr = web_sys::XmlHttpRequest::new().map_err(failed)?;
    xhr.open_with_async("GET", url, false).map_err(failed)?;
    xhr.set_response_type(web_sys::XmlHttpRequestResponseType::Arraybuffer);
    // A worker's synchronous XHR may have a timeout (a window's may not).
    xhr.set_timeout(timeout_ms.ceil() as u32);
    if let Some((first, last)) = range {
        // One range and no other header: a request the browser sends without a preflight.
        xhr.set_request_header("Range", &format!("bytes={first}-{last}")).map_err(failed)?;
    }
    let unreachable = "the server could not be reached, or it does not allow pages on other sites to read its files (no CORS headers)";
    if let Err(e) = xhr.send() {
        let name = js_sys::Reflect::get(&e, &JsValue::from_str("name")).ok().and_then(|n| n.as_string());
        if name.as_deref() == Some("TimeoutError") {
            let seconds = timeout_ms / 1000.0;
            stalled(&format!("no answer within {seconds:.0} s from {}", host_of(url)));
            return Err(Error::new(ErrorKind::TimedOut, format!("no answer within {seconds:.0} s")));
        }
        return Err(Error::other(unreachable));
    }
    let status = xhr.status().map_err(failed)?;
    if status == 0 {
        return Err(Error::other(unreachable));
    }
    let headers = xhr
        .get_all_response_headers()
        .map_err(failed)?
        .lines()
        .filter_map(|line| line.split_once(':'))
        .map(|(name, value)| (name.trim().to_ascii_lowercase(), value.trim().to_string()))
        .collect();
    let body = js_sys::Uint8Array::new(&xhr.response().map_err(failed)?).to_vec();
    FETCHED.with(|f| f.set(f.get() + body.len() as f64));
    let answered_url = xhr.response_url();
    Ok(Answered { status, headers, body, url: if answered_url.is_empty() { url.to_string() } else { answered_url } })
}

/// The time a request for `bytes` (None: a small file, whole) is given, in milliseconds.
fn timeout_ms(bytes: Option<u64>) -> f64 {
    let bytes = bytes.map_or(SMALL_FILE_ALLOWANCE, |b| b as f64);
    (headprint::weights::remote::READ_TIMEOUT_SECONDS + bytes / SLOWEST_RATE) * 1000.0
}

fn host_of(url: &str) -> &str {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    rest.split('/').next().unwrap_or(rest)
}

/// Tells the page at once that the connection stalled: the worker is about to ask again, and
/// the user has just watched progress stop.
fn stalled(note: &str) {
    STALLS.with(|s| s.set(s.get() + 1.0));
    post(-1.0, "stalled", note);
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
}

/// The rest of a range after its first piece, fetched a piece at a time as it is read, from
/// the address the first piece came from (the CDN's, past the Hub's redirect). A piece that
/// stalls, breaks or answers otherwise ends the body with an error there; the core resumes.
struct Pieces {
    url: String,
    /// The next byte to ask for, and the last byte of the range (inclusive).
    next: u64,
    last: u64,
    /// The first piece's ETag: every piece must come from the same version of the file.
    etag: Option<String>,
    current: std::io::Cursor<Vec<u8>>,
}

impl std::io::Read for Pieces {
    fn read(&mut self, buffer: &mut [u8]) -> std::io::Result<usize> {
        loop {
            let read = self.current.read(buffer)?;
            if read > 0 || buffer.is_empty() || self.next > self.last {
                return Ok(read);
            }
            let end = (self.next + PIECE - 1).min(self.last);
            let answer = xhr_get(&self.url, Some((self.next, end)), timeout_ms(Some(end + 1 - self.next)))?;
            let first = header(&answer.headers, "content-range")
                .and_then(|r| r.strip_prefix("bytes "))
                .and_then(|r| r.split_once('-'))
                .and_then(|(first, _)| first.trim().parse::<u64>().ok());
            let same_version = self.etag.is_none() || header(&answer.headers, "etag") == self.etag.as_deref();
            if answer.status != 206 || first != Some(self.next) || !same_version {
                // Not a piece of this range (an expired address, another version): the core
                // asks again from here, through the Hub, and sees for itself what changed.
                return Err(std::io::Error::other(format!("the server answered {} for a piece", answer.status)));
            }
            if answer.body.len() as u64 != end + 1 - self.next {
                return Err(std::io::Error::other("a piece came back short"));
            }
            self.next = end + 1;
            self.current = std::io::Cursor::new(answer.body);
        }
    }
}

impl Transport for XhrTransport {
    fn get(&self, url: &str, range: Option<(u64, u64)>, _authorization: Option<&str>) -> std::io::Result<Response> {
        let asked = range.map(|(first, last)| (first, last.min(first.saturating_add(PIECE - 1))));
        let Answered { status, mut headers, body, url: answered_url } =
            xhr_get(url, asked, timeout_ms(asked.map(|(first, last)| last + 1 - first)))?;
        let (Some((first, last)), Some((_, piece_last))) = (range, asked) else {
            return Ok(Response { status, headers, body: Box::new(std::io::Cursor::new(body)) });
        };
        let total = header(&headers, "content-range").and_then(|r| r.rsplit_once('/')).map(|(_, t)| t.to_string());
        let whole_range = status == 206 && piece_last < last && body.len() as u64 == piece_last + 1 - first;
        if !whole_range {
            // All of it in one piece, or not a range answer at all (a `200` with the whole
            // file, an error): the core reads it as it came.
            return Ok(Response { status, headers, body: Box::new(std::io::Cursor::new(body)) });
        }
        // The answer stands for the whole range asked; its other pieces follow as it is read.
        for (name, value) in &mut headers {
            if name == "content-range" {
                *value = format!("bytes {first}-{last}/{}", total.as_deref().unwrap_or("*"));
            } else if name == "content-length" {
                *value = (last + 1 - first).to_string();
            }
        }
        let etag = header(&headers, "etag").map(str::to_string);
        let body = Pieces { url: answered_url, next: piece_last + 1, last, etag, current: std::io::Cursor::new(body) };
        Ok(Response { status, headers, body: Box::new(body) })
    }

    /// A worker cannot sleep without shared memory; the waits (a `Retry-After`, a retry's
    /// backoff) are short and rare, so it waits by the clock.
    fn wait(&self, seconds: f64) {
        let until = now() + seconds * 1000.0;
        while now() < until {}
    }
}

fn scope() -> web_sys::DedicatedWorkerGlobalScope {
    js_sys::global().unchecked_into()
}

fn now() -> f64 {
    scope().performance().map(|p| p.now()).unwrap_or(0.0)
}

/// Bytes of wasm memory (it only grows, so this is also the peak).
fn memory_bytes() -> f64 {
    wasm_bindgen::memory()
        .unchecked_into::<js_sys::WebAssembly::Memory>()
        .buffer()
        .unchecked_into::<js_sys::ArrayBuffer>()
        .byte_length() as f64
}

fn post(id: f64, kind: &str, json: &str) {
    post_with(id, kind, json, None);
}

/// Posts a message; a payload (Gram entries) travels as a `Float64Array` whose buffer is moved,
/// not copied, to the page.
fn post_with(id: f64, kind: &str, json: &str, payload: Option<Vec<f64>>) {
    let message = js_sys::Object::new();
    for (key, value) in [
        ("id", JsValue::from_f64(id)),
        ("kind", JsValue::from_str(kind)),
        ("json", JsValue::from_str(json)),
        ("memory", JsValue::from_f64(memory_bytes())),
        ("fetched", JsValue::from_f64(FETCHED.with(Cell::get))),
        ("stalls", JsValue::from_f64(STALLS.with(Cell::get))),
    ] {
        let _ = js_sys::Reflect::set(&message, &JsValue::from_str(key), &value);
    }
    match payload {
        Some(values) => {
            let array = js_sys::Float64Array::from(values.as_slice());
            drop(values);
            let _ = js_sys::Reflect::set(&message, &JsValue::from_str("payload"), &array);
            let transfer = js_sys::Array::of1(&array.buffer());
            let _ = scope().post_message_with_transfer(&message, &transfer);
        }
        None => {
            let _ = scope().post_message(&message);
        }
    }
}

/// Posts progress at most every `PROGRESS_INTERVAL_MS`; finished heads wait for the next post.
fn reporter(id: f64) -> Reporter {
    let last = Cell::new((f64::NEG_INFINITY, String::new()));
    let waiting_heads = RefCell::new(Vec::new());
    Rc::new(move |mut progress: Progress| {
        waiting_heads.borrow_mut().append(&mut progress.heads);
        let (time, stage) = last.take();
        let now = now();
        if stage != progress.stage || progress.done >= progress.total || now - time >= PROGRESS_INTERVAL_MS {
            progress.heads = waiting_heads.take();
            if let Ok(json) = serde_json::to_string(&progress) {
                post(id, "progress", &json);
            }
            last.set((now, progress.stage));
        } else {
            last.set((time, stage));
        }
    })
}

/// A message from the page, as it came.
struct Message {
    id: f64,
    json: String,
    blobs: Vec<web_sys::Blob>,
    /// Gram entries beside the JSON (a `Float64Array`), for the requests that carry them.
    payload: JsValue,
    /// What the page stored of a model opened by link (`stored::worker::StoredLinks`).
    stored: JsValue,
}

/// Messages not yet answered, and the answering task when it waits for one.
#[derive(Default)]
struct Inbox {
    waiting: VecDeque<Message>,
    waker: Option<Waker>,
}

/// The next message, when there is one.
async fn next(inbox: &RefCell<Inbox>) -> Message {
    std::future::poll_fn(|context| {
        let mut inbox = inbox.borrow_mut();
        match inbox.waiting.pop_front() {
            Some(message) => Poll::Ready(message),
            None => {
                inbox.waker = Some(context.waker().clone());
                Poll::Pending
            }
        }
    })
    .await
}

/// Answers one message: the request's reply (or its error) as JSON, and the reply's Gram
/// entries when it carries some.
async fn answer(
    session: &mut Session,
    Message { id, json, blobs, payload, stored }: Message,
) -> (String, Option<Vec<f64>>) {
    let mut entries = None;
    let result = match serde_json::from_str::<Request>(&json) {
        Ok(mut request) => {
            if let Ok(array) = payload.dyn_into::<js_sys::Float64Array>() {
                request.put_payload(array.to_vec());
            }
            if let Some(kept) = StoredLinks::from_message(&stored, LINK_BYTES_PER_FILE) {
                session.keep_links_in(Box::new(kept));
            }
            let names = match &request {
                Request::Load { names, .. } | Request::Open { names, .. } | Request::Hash { names } => names.clone(),
                _ => Vec::new(),
            };
            let files = blobs
                .into_iter()
                .enumerate()
                .map(|(i, blob)| {
                    let name = names.get(i).cloned().unwrap_or_else(|| format!("file {i}"));
                    let size = blob.size();
                    let source = BlobSource { name, blob };
                    if size <= WHOLE_READ_BYTES
                        && let Ok(bytes) = source.read_range(0, size as usize)
                    {
                        return Box::new(MemorySource::new(source.name, bytes)) as Box<dyn ByteSource>;
                    }
                    Box::new(source) as Box<dyn ByteSource>
                })
                .collect();
            let mut reply = session.answer(request, files, reporter(id)).await.map_err(|e| e.to_string());
            if let Ok(reply) = &mut reply {
                entries = reply.take_payload();
            }
            reply
        }
        Err(e) => Err(format!("the worker did not understand the request: {e}")),
    };
    let json = serde_json::to_string(&result)
        .unwrap_or_else(|e| format!("{{\"Err\":\"the worker could not encode its reply: {e}\"}}"));
    (json, entries)
}

/// Starts answering the page's messages (called by `worker.js` once the wasm is ready).
#[wasm_bindgen]
pub fn worker_main() {
    console_error_panic_hook::set_once();
    crate::webgpu::register();
    let inbox = Rc::new(RefCell::new(Inbox::default()));
    let arrived = inbox.clone();
    let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
        let data = event.data();
        let message = Message {
            id: field(&data, "id").as_f64().unwrap_or(-1.0),
            json: field(&data, "json").as_string().unwrap_or_default(),
            blobs: js_sys::Array::from(&field(&data, "files")).iter().filter_map(|b| b.dyn_into().ok()).collect(),
            payload: field(&data, "payload"),
            stored: field(&data, "stored"),
        };
        let mut inbox = arrived.borrow_mut();
        inbox.waiting.push_back(message);
        if let Some(waker) = inbox.waker.take() {
            waker.wake();
        }
    });
    scope().set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    on_message.forget();
    // The one task that owns the session: it answers each message in turn, to the end.
    wasm_bindgen_futures::spawn_local(async move {
        let mut session = Session::new(now).with_transport(|| Box::new(XhrTransport));
        loop {
            let message = next(&inbox).await;
            let id = message.id;
            let (json, entries) = answer(&mut session, message).await;
            post_with(id, "reply", &json, entries);
        }
    });
}
