//! A loopback imitation of the Hugging Face Hub and its CDN, for tests that cannot reach the real
//! one. Two origins, as the real Hub has:
//!
//! - the hub: `/{org}/{name}/resolve/{revision}/{path}` answers a large file (`*.safetensors`)
//!   with a `302` to the CDN (a signed URL that expires) carrying `X-Repo-Commit`,
//!   `X-Linked-Size` and `X-Linked-Etag`, and a small file with a relative `307` to
//!   `/api/resolve-cache/…`; the API's `/api/models/{org}/{name}/revision/{revision}` with the
//!   commit (`sha`) and the files (`siblings`, with `?blobs=true` each LFS file's sha256);
//!   `401` + `X-Error-Code: GatedRepo` for a gated repository without the token, `404` +
//!   `RepoNotFound` / `RevisionNotFound` / `EntryNotFound`, `429` + `Retry-After`.
//!   It echoes `Origin` in `Access-Control-Allow-Origin` and exposes the Hub's headers.
//! - the CDN: signed files and a plain web folder (`/web/…`), `Access-Control-Allow-Origin: *`,
//!   `206` + `Content-Range` for one range, `416` + `bytes */N` past the end.
//!
//! Faults switch on real servers' misbehaviour: ignoring `Range`, dropping the connection after
//! some bytes, expiring signed URLs, changing a file's ETag, shrinking a file, transient statuses
//! (`503` and the like) on every Nth byte request, a body that stalls halfway, a request never
//! answered. Every request is logged and every body byte counted.
#![allow(dead_code)]

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;

/// The token a gated repository accepts.
pub const GOOD_TOKEN: &str = "hf_imitation_token";

/// Which origin answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    Hub,
    Cdn,
}

/// One request as the server saw it.
#[derive(Debug, Clone)]
pub struct Logged {
    pub origin: Origin,
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub authorization: Option<String>,
    pub status: u16,
    /// Body bytes written.
    pub sent: u64,
    /// The order the request arrived in: answers finish in any order.
    pub received: u64,
}

#[derive(Default)]
pub struct Faults {
    /// Answer `200` with the whole file whatever `Range` asks.
    pub ignore_range: bool,
    /// The next this many file answers drop the connection after `drop_after` body bytes.
    pub drops: u32,
    pub drop_after: u64,
    /// A signed URL serves this many requests, then answers `403` (expired). 0: forever.
    pub url_uses: u32,
    /// The next this many hub requests answer `429` with `Retry-After: 1`.
    pub rate_limits: u32,
    /// After this many CDN requests, every ETag changes (the file was replaced). 0: never.
    pub change_etag_after: u32,
    /// After this many CDN requests, web files are served cut to half their size. 0: never.
    pub shrink_after: u32,
    /// Web files are served with no `ETag` (as `python -m http.server` serves them).
    pub no_etag: bool,
    /// Every this many-th request that asks for a byte range (on either origin) is answered
    /// `transient_status` instead, with `Retry-After: transient_retry_after` when that is set.
    /// 0: never.
    pub transient_every: u32,
    pub transient_status: u16,
    pub transient_retry_after: Option<u32>,
    /// The next this many ranged file answers send half their body, then nothing more until the
    /// client gives up and closes the connection (a stalled CDN).
    pub stalls: u32,
    /// The next this many requests get no answer at all, not even a status line, until the
    /// client gives up (a server that accepted the connection and hangs).
    pub silences: u32,
}

#[derive(Default)]
struct Repo {
    gated: bool,
    /// Revision (branch or tag) to commit.
    refs: HashMap<String, String>,
    /// Commit to files.
    commits: HashMap<String, HashMap<String, Arc<Vec<u8>>>>,
}

#[derive(Default)]
struct State {
    repos: Mutex<HashMap<String, Repo>>,
    web: Mutex<HashMap<String, Arc<Vec<u8>>>>,
    faults: Mutex<Faults>,
    /// Uses of each signed URL so far.
    uses: Mutex<HashMap<String, u32>>,
    cdn_requests: AtomicU64,
    /// Requests that asked for a byte range so far (for `transient_every`).
    ranged_requests: AtomicU64,
    signed: AtomicU64,
    sent: AtomicU64,
    /// Requests read so far, which numbers each in the log.
    received: AtomicU64,
    /// Connections accepted and not yet logged.
    serving: AtomicU64,
    log: Mutex<Vec<Logged>>,
    stop: AtomicBool,
}

pub struct Imitation {
    pub hub: String,
    pub cdn: String,
    state: Arc<State>,
    ports: [u16; 2],
}

impl Imitation {
    pub fn start() -> Imitation {
        Self::start_on(0, 0)
    }

    /// Fixed ports (0: any free one).
    pub fn start_on(hub_port: u16, cdn_port: u16) -> Imitation {
        let state = Arc::new(State::default());
        let hub = TcpListener::bind(("127.0.0.1", hub_port)).expect("bind the hub");
        let cdn = TcpListener::bind(("127.0.0.1", cdn_port)).expect("bind the CDN");
        let ports = [hub.local_addr().unwrap().port(), cdn.local_addr().unwrap().port()];
        let (hub_url, cdn_url) = (format!("http://127.0.0.1:{}", ports[0]), format!("http://127.0.0.1:{}", ports[1]));
        for (listener, origin) in [(hub, Origin::Hub), (cdn, Origin::Cdn)] {
            let state = state.clone();
            let cdn_url = cdn_url.clone();
            thread::spawn(move || {
                for stream in listener.incoming() {
                    if state.stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    let (state, cdn_url) = (state.clone(), cdn_url.clone());
                    state.serving.fetch_add(1, Ordering::SeqCst);
                    thread::spawn(move || {
                        serve(stream, origin, &state, &cdn_url);
                        state.serving.fetch_sub(1, Ordering::SeqCst);
                    });
                }
            });
        }
        Imitation { hub: hub_url, cdn: cdn_url, state, ports }
    }

    /// Adds `files` to `repo` as a commit reached by `revision` (a branch); returns the commit.
    pub fn add_commit(&self, repo: &str, revision: &str, files: Vec<(String, Vec<u8>)>) -> String {
        let mut hasher_input = format!("{repo}@{revision}:");
        for (name, bytes) in &files {
            hasher_input.push_str(&format!("{name}={};", bytes.len()));
        }
        let commit = hex_digest(hasher_input.as_bytes())[..40].to_string();
        let mut repos = self.state.repos.lock().unwrap();
        let entry = repos.entry(repo.to_string()).or_default();
        entry.refs.insert(revision.to_string(), commit.clone());
        entry.commits.insert(commit.clone(), files.into_iter().map(|(n, b)| (n, Arc::new(b))).collect());
        commit
    }

    /// Adds every file of a local folder (except the test's expected.json) as a commit.
    pub fn add_folder(&self, repo: &str, revision: &str, folder: &Path) -> String {
        self.add_commit(repo, revision, folder_files(folder))
    }

    pub fn gate(&self, repo: &str) {
        self.state.repos.lock().unwrap().entry(repo.to_string()).or_default().gated = true;
    }

    /// Serves a folder's files on the CDN origin under `/web/{name}/` (replacing any served
    /// there before); returns its URL.
    pub fn add_web_folder(&self, name: &str, folder: &Path) -> String {
        let mut web = self.state.web.lock().unwrap();
        for (file, bytes) in folder_files(folder) {
            web.insert(format!("/web/{name}/{file}"), Arc::new(bytes));
        }
        format!("{}/web/{name}/", self.cdn)
    }

    pub fn faults(&self) -> std::sync::MutexGuard<'_, Faults> {
        self.state.faults.lock().unwrap()
    }

    /// Every request so far, in the order they arrived.
    pub fn log(&self) -> Vec<Logged> {
        self.settle();
        let mut log = self.state.log.lock().unwrap().clone();
        log.sort_by_key(|entry| entry.received);
        log
    }

    pub fn clear_log(&self) {
        self.settle();
        self.state.log.lock().unwrap().clear();
    }

    /// Body bytes sent by both origins since the start.
    pub fn bytes_sent(&self) -> u64 {
        self.settle();
        self.state.sent.load(Ordering::Relaxed)
    }

    /// Waits for the answers still being written or logged: a client may have read an answer
    /// and gone on before the thread that wrote it has counted and logged it.
    fn settle(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while self.state.serving.load(Ordering::SeqCst) > 0 && std::time::Instant::now() < deadline {
            thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

impl Drop for Imitation {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::Relaxed);
        for port in self.ports {
            let _ = TcpStream::connect(("127.0.0.1", port));
        }
    }
}

fn folder_files(folder: &Path) -> Vec<(String, Vec<u8>)> {
    let mut files: Vec<(String, Vec<u8>)> = std::fs::read_dir(folder)
        .expect("a fixture folder")
        .filter_map(|e| e.ok())
        .filter(|e| e.path().is_file() && e.file_name() != "expected.json")
        .map(|e| (e.file_name().to_string_lossy().into_owned(), std::fs::read(e.path()).unwrap()))
        .collect();
    files.sort();
    files
}

fn hex_digest(bytes: &[u8]) -> String {
    use sha2::{Digest, Sha256};
    Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
}

struct Request {
    method: String,
    path: String,
    headers: HashMap<String, String>,
}

fn read_request(stream: &TcpStream) -> Option<Request> {
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let (method, path) = (parts.next()?.to_string(), parts.next()?.to_string());
    let mut headers = HashMap::new();
    loop {
        let mut header = String::new();
        if reader.read_line(&mut header).ok()? == 0 || header == "\r\n" || header == "\n" {
            break;
        }
        if let Some((name, value)) = header.split_once(':') {
            headers.insert(name.trim().to_ascii_lowercase(), value.trim().to_string());
        }
    }
    Some(Request { method, path, headers })
}

/// An answer to write: status, headers, and a body (a slice of a shared file).
struct Answer {
    status: u16,
    headers: Vec<(String, String)>,
    body: Arc<Vec<u8>>,
    range: (usize, usize),
    /// Drop the connection after this many body bytes.
    drop_after: Option<u64>,
    /// After this many body bytes, send nothing more until the client leaves.
    stall_after: Option<u64>,
}

impl Answer {
    fn empty(status: u16) -> Answer {
        let body = Arc::new(Vec::new());
        Answer { status, headers: Vec::new(), body, range: (0, 0), drop_after: None, stall_after: None }
    }
    fn text(status: u16, text: &str) -> Answer {
        let body = Arc::new(text.as_bytes().to_vec());
        Answer { status, headers: Vec::new(), range: (0, body.len()), body, drop_after: None, stall_after: None }
    }
    fn header(mut self, name: &str, value: impl Into<String>) -> Answer {
        self.headers.push((name.into(), value.into()));
        self
    }
}

fn serve(stream: TcpStream, origin: Origin, state: &State, cdn: &str) {
    let Some(request) = read_request(&stream) else { return };
    let received = state.received.fetch_add(1, Ordering::SeqCst);
    let log = |status: u16, sent: u64| {
        state.log.lock().unwrap().push(Logged {
            origin,
            method: request.method.clone(),
            path: request.path.clone(),
            range: request.headers.get("range").cloned(),
            authorization: request.headers.get("authorization").cloned(),
            status,
            sent,
            received,
        })
    };
    let silent = {
        let mut faults = state.faults.lock().unwrap();
        let silent = faults.silences > 0;
        faults.silences = faults.silences.saturating_sub(1);
        silent
    };
    if silent {
        wait_for_the_client_to_leave(&stream);
        return log(0, 0);
    }
    let transient = {
        let faults = state.faults.lock().unwrap();
        let every = u64::from(faults.transient_every);
        let ranged = request.headers.contains_key("range") && request.method == "GET";
        let nth =
            ranged && every > 0 && (state.ranged_requests.fetch_add(1, Ordering::SeqCst) + 1).is_multiple_of(every);
        nth.then(|| (faults.transient_status, faults.transient_retry_after))
    };
    let mut answer = match (origin, request.method.as_str()) {
        _ if transient.is_some() => {
            let (status, retry_after) = transient.unwrap_or_default();
            let answer = Answer::text(status, "the imitation's transient fault");
            match retry_after {
                Some(seconds) => answer.header("Retry-After", seconds.to_string()),
                None => answer,
            }
        }
        (_, "OPTIONS") => Answer::empty(204)
            .header("Access-Control-Allow-Methods", "GET, HEAD")
            .header("Access-Control-Allow-Headers", "Range, Authorization"),
        (Origin::Hub, _) => hub(&request, state, cdn),
        (Origin::Cdn, _) => cdn_answer(&request, state),
    };
    match origin {
        Origin::Hub => {
            let allowed = request.headers.get("origin").cloned().unwrap_or_else(|| "*".into());
            answer = answer.header("Access-Control-Allow-Origin", allowed).header(
                "Access-Control-Expose-Headers",
                "X-Repo-Commit, X-Error-Code, X-Error-Message, ETag, Link, Accept-Ranges, Content-Range, X-Linked-Size, X-Linked-ETag, X-Xet-Hash",
            );
        }
        Origin::Cdn => {
            answer = answer
                .header("Access-Control-Allow-Origin", "*")
                .header("Access-Control-Expose-Headers", "Accept-Ranges, Content-Range, ETag");
        }
    }
    let sent = write_answer(&stream, &answer, request.method == "HEAD");
    state.sent.fetch_add(sent, Ordering::Relaxed);
    log(answer.status, sent);
}

/// Holds a connection open, sending nothing, until the client closes it (or a minute passes,
/// so that a client that never gives up cannot keep a thread forever).
fn wait_for_the_client_to_leave(mut stream: &TcpStream) {
    use std::io::Read;
    let _ = stream.flush();
    let _ = stream.set_read_timeout(Some(std::time::Duration::from_millis(20)));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let mut buffer = [0u8; 1024];
    while std::time::Instant::now() < deadline {
        match stream.read(&mut buffer) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
    }
}

fn write_answer(mut stream: &TcpStream, answer: &Answer, head: bool) -> u64 {
    let body = &answer.body[answer.range.0..answer.range.1];
    let mut text = format!("HTTP/1.1 {} {}\r\n", answer.status, reason(answer.status));
    for (name, value) in &answer.headers {
        text.push_str(&format!("{name}: {value}\r\n"));
    }
    text.push_str(&format!("Content-Length: {}\r\nConnection: close\r\n\r\n", body.len()));
    if stream.write_all(text.as_bytes()).is_err() || head {
        return 0;
    }
    let limit = answer.drop_after.or(answer.stall_after).map_or(body.len(), |n| (n as usize).min(body.len()));
    let mut sent = 0u64;
    for chunk in body[..limit].chunks(64 << 10) {
        if stream.write_all(chunk).is_err() {
            break;
        }
        sent += chunk.len() as u64;
    }
    if answer.stall_after.is_some() {
        wait_for_the_client_to_leave(stream);
    }
    let _ = stream.flush();
    let _ = stream.shutdown(Shutdown::Both);
    sent
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        204 => "No Content",
        206 => "Partial Content",
        302 => "Found",
        307 => "Temporary Redirect",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        408 => "Request Timeout",
        416 => "Range Not Satisfiable",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Other",
    }
}

fn error(status: u16, code: &str) -> Answer {
    Answer::text(status, code).header("X-Error-Code", code)
}

/// The ETag of a file's bytes as the Hub names it (the LFS hash); the CDN's differs in form.
fn linked_etag(bytes: &[u8], state: &State) -> String {
    let changed = state.faults.lock().unwrap().change_etag_after;
    let suffix =
        if changed > 0 && state.cdn_requests.load(Ordering::Relaxed) >= u64::from(changed) { "-v2" } else { "" };
    format!("\"{}{suffix}\"", &hex_digest(bytes)[..32])
}

fn hub(request: &Request, state: &State, cdn: &str) -> Answer {
    {
        let mut faults = state.faults.lock().unwrap();
        if faults.rate_limits > 0 {
            faults.rate_limits -= 1;
            return error(429, "RateLimited").header("Retry-After", "1");
        }
    }
    let path = request.path.split('?').next().unwrap_or_default();
    if let Some(rest) = path.strip_prefix("/api/resolve-cache/models/") {
        // {org}/{name}/{commit}/{file}
        let parts: Vec<&str> = rest.splitn(4, '/').collect();
        let [org, name, commit, file] = parts[..] else { return error(404, "EntryNotFound") };
        let repos = state.repos.lock().unwrap();
        let Some(bytes) = repos.get(&format!("{org}/{name}")).and_then(|r| r.commits.get(commit)?.get(file)) else {
            return error(404, "EntryNotFound");
        };
        let etag = linked_etag(bytes, state);
        return ranged(request, bytes.clone(), &etag, state).header("X-Repo-Commit", commit);
    }
    if let Some(rest) = path.strip_prefix("/api/models/") {
        // {org}/{name}/revision/{revision}: the commit as the Hub's API names it.
        let parts: Vec<&str> = rest.splitn(4, '/').collect();
        let [org, name, "revision", revision] = parts[..] else { return error(404, "RepoNotFound") };
        let repos = state.repos.lock().unwrap();
        let Some(repo) = repos.get(&format!("{org}/{name}")) else { return error(404, "RepoNotFound") };
        let commit = match repo.refs.get(revision) {
            Some(commit) => commit.clone(),
            None if repo.commits.contains_key(revision) => revision.to_string(),
            None => return error(404, "RevisionNotFound"),
        };
        // With `?blobs=true`, as the Hub's model-info API answers it: each file by name with its
        // size, and an LFS file's content hash (sha256 of its bytes) under `lfs`.
        let blobs = request.path.split_once('?').is_some_and(|(_, query)| query.split('&').any(|q| q == "blobs=true"));
        let mut files: Vec<(&String, &Arc<Vec<u8>>)> = repo.commits[&commit].iter().collect();
        files.sort();
        let siblings: Vec<serde_json::Value> = files
            .into_iter()
            .map(|(file, bytes)| match (blobs, file.ends_with(".safetensors")) {
                (true, true) => serde_json::json!({"rfilename": file, "size": bytes.len(),
                    "lfs": {"sha256": hex_digest(bytes), "size": bytes.len(), "pointerSize": 134}}),
                (true, false) => serde_json::json!({"rfilename": file, "size": bytes.len()}),
                (false, _) => serde_json::json!({"rfilename": file}),
            })
            .collect();
        let body = serde_json::json!({"id": format!("{org}/{name}"), "sha": commit, "siblings": siblings}).to_string();
        return Answer::text(200, &body).header("Content-Type", "application/json");
    }
    let parts: Vec<&str> = path.trim_start_matches('/').splitn(5, '/').collect();
    let [org, name, "resolve", revision, file] = parts[..] else { return error(404, "RepoNotFound") };
    let repo_name = format!("{org}/{name}");
    let repos = state.repos.lock().unwrap();
    let Some(repo) = repos.get(&repo_name) else { return error(404, "RepoNotFound") };
    if repo.gated && request.headers.get("authorization").map(String::as_str) != Some(&format!("Bearer {GOOD_TOKEN}")) {
        return error(401, "GatedRepo")
            .header("X-Error-Message", "Access to this model is restricted: you must be authenticated.");
    }
    let commit = match repo.refs.get(revision) {
        Some(commit) => commit.clone(),
        None if repo.commits.contains_key(revision) => revision.to_string(),
        None => return error(404, "RevisionNotFound"),
    };
    let Some(bytes) = repo.commits[&commit].get(file) else {
        return error(404, "EntryNotFound").header("X-Repo-Commit", commit);
    };
    let etag = linked_etag(bytes, state);
    if file.ends_with(".safetensors") {
        let signature = state.signed.fetch_add(1, Ordering::Relaxed);
        Answer::empty(302)
            .header("Location", format!("{cdn}/files/{repo_name}/{commit}/{file}?signature={signature}"))
            .header("X-Repo-Commit", commit)
            .header("X-Linked-Size", bytes.len().to_string())
            .header("X-Linked-Etag", etag.clone())
            .header("ETag", etag)
    } else {
        Answer::empty(307)
            .header("Location", format!("/api/resolve-cache/models/{repo_name}/{commit}/{file}"))
            .header("X-Repo-Commit", commit)
            .header("ETag", etag)
    }
}

fn cdn_answer(request: &Request, state: &State) -> Answer {
    let served = state.cdn_requests.fetch_add(1, Ordering::Relaxed) + 1;
    let (path, query) = request.path.split_once('?').unwrap_or((&request.path, ""));
    if let Some(rest) = path.strip_prefix("/files/") {
        let uses = state.faults.lock().unwrap().url_uses;
        let mut all_uses = state.uses.lock().unwrap();
        let count = all_uses.entry(request.path.clone()).or_default();
        *count += 1;
        if uses > 0 && *count > uses {
            return Answer::text(403, "Request has expired");
        }
        drop(all_uses);
        let parts: Vec<&str> = rest.splitn(4, '/').collect();
        let [org, name, commit, file] = parts[..] else { return Answer::text(404, "NoSuchKey") };
        if !query.starts_with("signature=") {
            return Answer::text(403, "AccessDenied");
        }
        let repos = state.repos.lock().unwrap();
        let Some(bytes) = repos.get(&format!("{org}/{name}")).and_then(|r| r.commits.get(commit)?.get(file)) else {
            return Answer::text(404, "NoSuchKey");
        };
        let etag = format!("\"cdn-{}\"", &linked_etag(bytes, state)[1..17]);
        return ranged(request, bytes.clone(), &etag, state);
    }
    let web = state.web.lock().unwrap();
    let Some(bytes) = web.get(path) else { return Answer::text(404, "Not Found") };
    let shrink = state.faults.lock().unwrap().shrink_after;
    let bytes = if shrink > 0 && served > u64::from(shrink) {
        Arc::new(bytes[..bytes.len() / 2].to_vec())
    } else {
        bytes.clone()
    };
    let etag = linked_etag(&web[path], state);
    let answer = ranged(request, bytes, &etag, state);
    if state.faults.lock().unwrap().no_etag {
        return Answer { headers: answer.headers.into_iter().filter(|(name, _)| name != "ETag").collect(), ..answer };
    }
    answer
}

/// A file answered as a static host does: one range or all of it.
fn ranged(request: &Request, bytes: Arc<Vec<u8>>, etag: &str, state: &State) -> Answer {
    let len = bytes.len();
    let mut faults = state.faults.lock().unwrap();
    let range = request.headers.get("range").filter(|_| !faults.ignore_range).and_then(|r| parse_range(r, len));
    // Connections drop only under ranged answers: the weights, which are what takes long.
    let drop_after = (faults.drops > 0 && matches!(range, Some(Ok(_)))).then(|| {
        faults.drops -= 1;
        faults.drop_after
    });
    let stall_after = match range {
        Some(Ok((first, last))) if faults.stalls > 0 => {
            faults.stalls -= 1;
            Some((last + 1 - first) as u64 / 2)
        }
        _ => None,
    };
    drop(faults);
    let answer = match range {
        None => Answer { status: 200, headers: Vec::new(), body: bytes, range: (0, len), drop_after, stall_after },
        Some(Err(())) => return Answer::text(416, "").header("Content-Range", format!("bytes */{len}")),
        Some(Ok((first, last))) => {
            let range = (first, last + 1);
            Answer { status: 206, headers: Vec::new(), body: bytes, range, drop_after, stall_after }
                .header("Content-Range", format!("bytes {first}-{last}/{len}"))
        }
    };
    answer.header("ETag", etag).header("Accept-Ranges", "bytes")
}

/// `bytes=a-b` or `bytes=a-`: the inclusive span, or Err past the end. Multi-range is not served.
fn parse_range(header: &str, len: usize) -> Option<Result<(usize, usize), ()>> {
    let spec = header.strip_prefix("bytes=")?;
    if spec.contains(',') {
        return None;
    }
    let (first, last) = spec.split_once('-')?;
    let first: usize = first.trim().parse().ok()?;
    if first >= len {
        return Some(Err(()));
    }
    let last = if last.trim().is_empty() { len - 1 } else { last.trim().parse::<usize>().ok()?.min(len - 1) };
    Some(Ok((first, last)))
}

// Real-shaped models, written here: random weights in the Hub's own layouts.

/// The 8-byte length and the JSON header of `tensors` (name, dtype, shape) laid out in name
/// order, as `safetensors.torch.save_file` writes them; with each tensor's span after the header
/// and the data's length.
pub fn safetensors_header(
    mut tensors: Vec<(String, &str, Vec<usize>)>,
) -> (Vec<u8>, Vec<(String, usize, usize)>, usize) {
    tensors.sort_by(|a, b| a.0.cmp(&b.0));
    let mut header = serde_json::Map::new();
    let mut offset = 0usize;
    let mut spans = Vec::new();
    for (name, dtype, shape) in &tensors {
        let bytes = shape.iter().product::<usize>() * if *dtype == "F32" { 4 } else { 2 };
        header.insert(
            name.clone(),
            serde_json::json!({"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + bytes]}),
        );
        spans.push((name.clone(), offset, offset + bytes));
        offset += bytes;
    }
    header.insert("__metadata__".into(), serde_json::json!({"format": "pt"}));
    let mut text = serde_json::to_string(&header).unwrap();
    while !(8 + text.len()).is_multiple_of(8) {
        text.push(' ');
    }
    let mut bytes = (text.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(text.as_bytes());
    (bytes, spans, offset)
}

/// A whole safetensors file, each tensor filled by `fill`; what it leaves is zero, which costs
/// no memory until written.
pub fn safetensors_bytes(tensors: Vec<(String, &str, Vec<usize>)>, fill: impl Fn(&str, &mut [u8])) -> Vec<u8> {
    let (header, spans, data) = safetensors_header(tensors);
    let mut file = vec![0u8; header.len() + data];
    file[..header.len()].copy_from_slice(&header);
    for (name, start, end) in spans {
        fill(&name, &mut file[header.len() + start..header.len() + end]);
    }
    file
}

/// Small pseudo-random f32s (±0.035), or ones for a norm's weight.
fn fill_f32(name: &str, bytes: &mut [u8]) {
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ name.len() as u64;
    for chunk in bytes.chunks_exact_mut(4) {
        let value = if name.contains("ln_") && name.ends_with(".weight") {
            1.0
        } else {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * 0.07
        };
        chunk.copy_from_slice(&value.to_le_bytes());
    }
}

/// GPT-2 Small as `openai-community/gpt2` stores it: f32, no prefix, the causal masks
/// (`h.N.attn.bias`) saved beside the weights.
fn gpt2_small_tensors() -> Vec<(String, &'static str, Vec<usize>)> {
    let (d, vocab, context) = (768, 50257, 1024);
    let mut tensors = vec![
        ("wte.weight".to_string(), "F32", vec![vocab, d]),
        ("wpe.weight".into(), "F32", vec![context, d]),
        ("ln_f.weight".into(), "F32", vec![d]),
        ("ln_f.bias".into(), "F32", vec![d]),
    ];
    for l in 0..12 {
        for (part, shape) in [
            ("ln_1.weight", vec![d]),
            ("ln_1.bias", vec![d]),
            ("attn.bias", vec![1, 1, context, context]),
            ("attn.c_attn.weight", vec![d, 3 * d]),
            ("attn.c_attn.bias", vec![3 * d]),
            ("attn.c_proj.weight", vec![d, d]),
            ("attn.c_proj.bias", vec![d]),
            ("ln_2.weight", vec![d]),
            ("ln_2.bias", vec![d]),
            ("mlp.c_fc.weight", vec![d, 4 * d]),
            ("mlp.c_fc.bias", vec![4 * d]),
            ("mlp.c_proj.weight", vec![4 * d, d]),
            ("mlp.c_proj.bias", vec![d]),
        ] {
            tensors.push((format!("h.{l}.{part}"), "F32", shape));
        }
    }
    tensors
}

/// GPT-2 Small's config.json and model.safetensors, random, as `openai-community/gpt2` lays
/// them out. Only what a fingerprint reads gets values; the masks and MLPs stay untouched zero
/// pages (no memory until read).
pub fn gpt2_small() -> Vec<(String, Vec<u8>)> {
    let file = safetensors_bytes(gpt2_small_tensors(), |name, bytes| {
        if !name.contains(".mlp.") && !name.ends_with("attn.bias") {
            fill_f32(name, bytes)
        }
    });
    let config = serde_json::json!({
        "model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12, "n_positions": 1024,
        "n_ctx": 1024, "vocab_size": 50257, "layer_norm_epsilon": 1e-5, "bos_token_id": 50256,
        "eos_token_id": 50256
    });
    vec![("config.json".into(), config.to_string().into_bytes()), ("model.safetensors".into(), file)]
}

/// Small pseudo-random f16s (magnitudes 2^-8 to 2^-3), or ones for a norm's weight; `seed`
/// makes each checkpoint's values its own.
fn fill_f16(name: &str, seed: u64, bytes: &mut [u8]) {
    let mut state = 0x9e37_79b9_7f4a_7c15u64 ^ name.len() as u64 ^ seed.wrapping_mul(0x2545_f491_4f6c_dd1d);
    let norm_weight = name.contains("layernorm") && name.ends_with(".weight");
    for chunk in bytes.chunks_exact_mut(2) {
        let bits: u16 = if norm_weight {
            0x3c00
        } else {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let sign = ((state >> 63) as u16) << 15;
            let exponent = 7 + ((state >> 40) % 5) as u16;
            sign | (exponent << 10) | ((state >> 20) as u16 & 0x3ff)
        };
        chunk.copy_from_slice(&bits.to_le_bytes());
    }
}

/// Pythia-160M's config.json and model.safetensors (GPT-NeoX, f16, untied, 12 layers of 12
/// heads, d_model 768, vocabulary 50304), random with `seed`: one training checkpoint. Only what
/// a fingerprint reads gets values; the MLPs stay untouched zero pages (no memory until read).
pub fn pythia_160m(seed: u64) -> Vec<(String, Vec<u8>)> {
    let (d, vocab, layers) = (768, 50304, 12);
    let mut tensors = vec![
        ("gpt_neox.embed_in.weight".to_string(), "F16", vec![vocab, d]),
        ("embed_out.weight".into(), "F16", vec![vocab, d]),
        ("gpt_neox.final_layer_norm.weight".into(), "F16", vec![d]),
        ("gpt_neox.final_layer_norm.bias".into(), "F16", vec![d]),
    ];
    for l in 0..layers {
        for (part, shape) in [
            ("input_layernorm.weight", vec![d]),
            ("input_layernorm.bias", vec![d]),
            ("post_attention_layernorm.weight", vec![d]),
            ("post_attention_layernorm.bias", vec![d]),
            ("attention.query_key_value.weight", vec![3 * d, d]),
            ("attention.query_key_value.bias", vec![3 * d]),
            ("attention.dense.weight", vec![d, d]),
            ("attention.dense.bias", vec![d]),
            ("mlp.dense_h_to_4h.weight", vec![4 * d, d]),
            ("mlp.dense_h_to_4h.bias", vec![4 * d]),
            ("mlp.dense_4h_to_h.weight", vec![d, 4 * d]),
            ("mlp.dense_4h_to_h.bias", vec![d]),
        ] {
            tensors.push((format!("gpt_neox.layers.{l}.{part}"), "F16", shape));
        }
    }
    let file = safetensors_bytes(tensors, |name, bytes| {
        if !name.contains(".mlp.") {
            fill_f16(name, seed, bytes)
        }
    });
    let config = serde_json::json!({
        "architectures": ["GPTNeoXForCausalLM"], "model_type": "gpt_neox", "bos_token_id": 0,
        "eos_token_id": 0, "hidden_act": "gelu", "hidden_size": d, "intermediate_size": 4 * d,
        "layer_norm_eps": 1e-5, "max_position_embeddings": 2048, "num_attention_heads": 12,
        "num_hidden_layers": layers, "rotary_emb_base": 10000, "rotary_pct": 0.25,
        "tie_word_embeddings": false, "torch_dtype": "float16", "use_parallel_residual": true,
        "vocab_size": vocab
    });
    vec![("config.json".into(), config.to_string().into_bytes()), ("model.safetensors".into(), file)]
}

/// A plain HTTP/1.1 client over a TCP socket, as a host's `Transport` for tests of the core
/// (the worker session) that run without the CLI's client. Each read waits at most
/// `read_timeout` (a stalled server gives `WouldBlock` or `TimedOut`, as the core expects).
pub struct TcpTransport {
    pub read_timeout: std::time::Duration,
}

impl Default for TcpTransport {
    fn default() -> Self {
        let seconds = headprint::weights::remote::READ_TIMEOUT_SECONDS;
        TcpTransport { read_timeout: std::time::Duration::from_secs_f64(seconds) }
    }
}

impl headprint::weights::remote::Transport for TcpTransport {
    fn get(
        &self,
        url: &str,
        range: Option<(u64, u64)>,
        authorization: Option<&str>,
    ) -> std::io::Result<headprint::weights::remote::Response> {
        let rest = url.strip_prefix("http://").ok_or_else(|| std::io::Error::other("only http:// here"))?;
        let (host, path) = rest.split_once('/').map_or((rest, "/".to_string()), |(h, p)| (h, format!("/{p}")));
        let mut stream = TcpStream::connect(host)?;
        stream.set_read_timeout(Some(self.read_timeout))?;
        let mut head = format!("GET {path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n");
        if let Some((first, last)) = range {
            head.push_str(&format!("Range: bytes={first}-{last}\r\n"));
        }
        if let Some(authorization) = authorization {
            head.push_str(&format!("Authorization: {authorization}\r\n"));
        }
        head.push_str("\r\n");
        stream.write_all(head.as_bytes())?;
        let mut reader = BufReader::new(stream);
        let mut status_line = String::new();
        reader.read_line(&mut status_line)?;
        let status = status_line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| std::io::Error::other("no status line"))?;
        let mut headers = Vec::new();
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 || line == "\r\n" {
                break;
            }
            if let Some((name, value)) = line.split_once(':') {
                headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
            }
        }
        Ok(headprint::weights::remote::Response { status, headers, body: Box::new(reader) })
    }

    fn wait(&self, seconds: f64) {
        thread::sleep(std::time::Duration::from_secs_f64(seconds));
    }
}
