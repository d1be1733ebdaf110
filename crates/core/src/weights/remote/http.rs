//! One GET at a time over whatever HTTP the host has (the CLI's client, the tab's XHR), with
//! what every caller needs around it: redirects followed by hand (the Hub's headers are on the
//! redirect itself), waits on `429`, retries of transient statuses (`408`, `5xx`), of dropped
//! connections and of servers that stop answering, and a readable error for every status a Hub
//! or a static host answers with.

use std::io::Read;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::{Error, Result};

/// An answer, redirects not followed. Header names are lowercase.
pub struct Response {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Box<dyn Read + Send>,
}

impl Response {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
}

/// The host's HTTP: one GET, never following redirects, sending `Range: bytes=START-END` (END
/// inclusive) when asked and `Authorization` only when given. An `Err` is a connection that
/// could not be made or broke before the status line.
///
/// A transport gives up on a server that stops answering: connecting, waiting for the status
/// line, and each read of the body are bounded (`Patience::read_timeout_seconds`). Such an
/// error, from `get` or from reading the body, has the kind `TimedOut` (or `WouldBlock`, as a
/// socket's read timeout gives it on Unix), which the client tells the user about as a stall.
pub trait Transport: Send + Sync {
    fn get(&self, url: &str, range: Option<(u64, u64)>, authorization: Option<&str>) -> std::io::Result<Response>;
    /// Waits before a retry (`429`'s `Retry-After`, a dropped connection's backoff).
    fn wait(&self, seconds: f64);
}

/// How patient the client is.
#[derive(Debug, Clone)]
pub struct Patience {
    /// Retries of a connection that failed or dropped mid-body, each after a longer wait.
    pub retries: u32,
    /// The first retry's wait; each later one doubles it.
    pub backoff_seconds: f64,
    /// The longest `Retry-After` waited for; a longer one is an error that says when to retry.
    pub longest_wait_seconds: f64,
    /// `429`s in a row waited out before giving up.
    pub rate_limit_waits: u32,
    /// How long a server may stay silent (connecting, before its status line, between two reads
    /// of a body) before the request is abandoned and asked again. The transport enforces it;
    /// the client names it in what it says.
    pub read_timeout_seconds: f64,
}

/// The read timeout unless `HEADPRINT_READ_TIMEOUT` says otherwise: `huggingface_hub` waits
/// 10 s (`HF_HUB_DOWNLOAD_TIMEOUT`); a classroom's Wi-Fi gets twice that.
pub const READ_TIMEOUT_SECONDS: f64 = 20.0;

impl Default for Patience {
    fn default() -> Self {
        Self {
            retries: 3,
            backoff_seconds: 0.5,
            longest_wait_seconds: 120.0,
            rate_limit_waits: 5,
            read_timeout_seconds: READ_TIMEOUT_SECONDS,
        }
    }
}

/// Whether an I/O error is a server that stopped answering (a read or connect timeout), rather
/// than a connection that broke.
pub fn is_stall(error: &std::io::Error) -> bool {
    matches!(error.kind(), std::io::ErrorKind::TimedOut | std::io::ErrorKind::WouldBlock)
}

/// Statuses that say "try again shortly": a request timeout, and the errors a server or a
/// gateway gives while it restarts or is overloaded (curl's `--retry` and `huggingface_hub`
/// retry the same ones).
const TRANSIENT: [u16; 5] = [408, 500, 502, 503, 504];

/// Redirects followed for one request (the Hub uses one: a relative `307` or a `302` to its CDN).
const MOST_REDIRECTS: usize = 5;

/// The network side shared by every file of a model (and by both models of a comparison).
pub struct Client {
    transport: Box<dyn Transport>,
    /// Requests to this origin (the Hub's) carry the token; its redirect targets never do.
    hub_origin: String,
    token: Option<String>,
    patience: Patience,
    /// Offline: every request is an error naming what is missing.
    offline: bool,
    fetched: AtomicU64,
    notes: Mutex<Vec<String>>,
    /// Told each note as it happens (the CLI prints it at once: a stall is never silent).
    on_note: Option<NoteHook>,
}

/// What a host does with a note as it happens.
type NoteHook = Box<dyn Fn(&str) + Send + Sync>;

/// A followed request: the final answer, the URL that gave it, and the first (Hub) answer's
/// headers when it was a redirect.
pub struct Followed {
    pub response: Response,
    pub url: String,
    pub first_headers: Vec<(String, String)>,
}

impl Followed {
    /// A header of the first answer, else of the final one (`X-Repo-Commit` and `X-Linked-*`
    /// are on the Hub's redirect, not on its CDN's answer).
    pub fn hub_header(&self, name: &str) -> Option<&str> {
        self.first_headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .or_else(|| self.response.header(name))
    }
}

impl Client {
    pub fn new(transport: Box<dyn Transport>, hub_endpoint: &str, token: Option<String>, patience: Patience) -> Self {
        Self {
            transport,
            hub_origin: origin_of(hub_endpoint).to_string(),
            token: token.filter(|t| !t.is_empty()),
            patience,
            offline: false,
            fetched: AtomicU64::new(0),
            notes: Mutex::new(Vec::new()),
            on_note: None,
        }
    }

    /// A client that tells `on_note` each note as it happens, besides keeping it for `notes`.
    pub fn on_note(mut self, on_note: impl Fn(&str) + Send + Sync + 'static) -> Self {
        self.on_note = Some(Box::new(on_note));
        self
    }

    /// A client that never touches the network.
    pub fn offline(mut self) -> Self {
        self.offline = true;
        self
    }

    pub fn is_offline(&self) -> bool {
        self.offline
    }

    pub fn patience(&self) -> &Patience {
        &self.patience
    }

    /// Body bytes received so far, over every request.
    pub fn bytes_fetched(&self) -> u64 {
        self.fetched.load(Ordering::Relaxed)
    }

    /// Counts body bytes as they are read.
    pub(super) fn count(&self, bytes: u64) {
        self.fetched.fetch_add(bytes, Ordering::Relaxed);
    }

    /// Says `note` once, however often it happens.
    pub(super) fn note_once(&self, note: &str) {
        {
            let mut notes = self.notes.lock().unwrap_or_else(|e| e.into_inner());
            if notes.iter().any(|n| n == note) {
                return;
            }
            notes.push(note.to_string());
        }
        if let Some(on_note) = &self.on_note {
            on_note(note);
        }
    }

    /// What the network did that a user should know although nothing failed.
    pub fn notes(&self) -> Vec<String> {
        self.notes.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    pub(super) fn wait(&self, seconds: f64) {
        self.transport.wait(seconds);
    }

    /// The wait before retry `attempt` (1-based) of a dropped connection.
    pub(super) fn backoff(&self, attempt: u32) -> f64 {
        self.patience.backoff_seconds * f64::from(1u32 << attempt.saturating_sub(1).min(10))
    }

    fn is_hub(&self, url: &str) -> bool {
        origin_of(url) == self.hub_origin
    }

    /// GET `url`, following redirects, waiting out `429`s and retrying connections that could
    /// not be made, servers that did not answer in time and transient statuses (`408`, `500`,
    /// `502`, `503`, `504`), after `Retry-After` when the answer has one, else with backoff.
    /// `what` names the request in errors (a file, a repository). Statuses other than 2xx come
    /// back as errors, except those `keep` lists, which the caller handles.
    pub fn get(&self, url: &str, range: Option<(u64, u64)>, what: &str, keep: &[u16]) -> Result<Followed> {
        if self.offline {
            return Err(Error::Offline { what: what.into() });
        }
        let mut url = url.to_string();
        let mut first_headers = Vec::new();
        let mut redirects = 0;
        let mut rate_limited = 0;
        // Tries that failed, of every kind but `429` (which has its own count).
        let mut failures = 0;
        loop {
            let authorization = match (&self.token, self.is_hub(&url)) {
                (Some(token), true) => Some(format!("Bearer {token}")),
                _ => None,
            };
            let response = match self.transport.get(&url, range, authorization.as_deref()) {
                Ok(response) => response,
                Err(error) => {
                    failures += 1;
                    let stalled = is_stall(&error);
                    if failures > self.patience.retries {
                        let reason = match stalled {
                            true => {
                                format!("the server did not answer within {}; tried {failures} times", self.timeout())
                            }
                            false => format!("{error}; tried {failures} times"),
                        };
                        return Err(Error::Network { what: what.into(), reason });
                    }
                    if stalled {
                        self.note_once(&format!("the server did not answer within {}; asked again", self.timeout()));
                    }
                    self.wait(self.backoff(failures));
                    continue;
                }
            };
            match response.status {
                301 | 302 | 303 | 307 | 308 => {
                    redirects += 1;
                    let Some(location) = response.header("location") else {
                        return Err(Error::Network {
                            what: what.into(),
                            reason: "a redirect without a Location".into(),
                        });
                    };
                    if redirects > MOST_REDIRECTS {
                        return Err(Error::Network { what: what.into(), reason: "too many redirects".into() });
                    }
                    let next = join(&url, location);
                    if first_headers.is_empty() {
                        first_headers = response.headers;
                    }
                    url = next;
                }
                429 => {
                    rate_limited += 1;
                    let seconds = retry_after(&response).unwrap_or(self.patience.backoff_seconds);
                    if rate_limited > self.patience.rate_limit_waits || seconds > self.patience.longest_wait_seconds {
                        return Err(Error::Network {
                            what: what.into(),
                            reason: format!("rate limited by the server (429); it asks to wait {seconds:.0} s"),
                        });
                    }
                    self.note_once("the server limited the request rate (429); waited as it asked");
                    self.wait(seconds);
                }
                status if TRANSIENT.contains(&status) && !keep.contains(&status) => {
                    failures += 1;
                    let named = format!("{status} ({})", transient_name(status));
                    let asked = retry_after(&response);
                    if failures > self.patience.retries {
                        return Err(Error::Network {
                            what: what.into(),
                            reason: format!("the server answered {named}; tried {failures} times"),
                        });
                    }
                    if let Some(seconds) = asked.filter(|&s| s > self.patience.longest_wait_seconds) {
                        return Err(Error::Network {
                            what: what.into(),
                            reason: format!("the server answered {named} and asks to wait {seconds:.0} s"),
                        });
                    }
                    self.note_once(&format!("the server answered {named}; asked again"));
                    // The same address again: a CDN's signed address stays valid, and one that
                    // expired meanwhile is resolved again by its caller.
                    self.wait(asked.unwrap_or_else(|| self.backoff(failures)));
                }
                status if (200..300).contains(&status) || keep.contains(&status) => {
                    return Ok(Followed { response, url, first_headers });
                }
                _ => return Err(self.status_error(&response, &url, what)),
            }
        }
    }

    /// The read timeout, as the user's messages say it ("20 s").
    pub(super) fn timeout(&self) -> String {
        format!("{} s", self.patience.read_timeout_seconds)
    }

    /// The error a failed status means, in words.
    fn status_error(&self, response: &Response, url: &str, what: &str) -> Error {
        let code = response.header("x-error-code").unwrap_or_default();
        match response.status {
            401 | 403 if self.is_hub(url) => {
                if code == "RepoNotFound" {
                    return Error::NotFound { what: what.into(), detail: " (or private: HF_TOKEN)".into() };
                }
                Error::Refused { repo: what.into(), status: response.status }
            }
            404 => not_found(response, what),
            416 => Error::Network {
                what: what.into(),
                reason: format!(
                    "the server says the range is past the end of the file ({})",
                    response.header("content-range").unwrap_or("no size given")
                ),
            },
            status => Error::Network { what: what.into(), reason: format!("the server answered {status}") },
        }
    }
}

/// The error for a `404`, with what the Hub's `X-Error-Code` says was missing.
pub(super) fn not_found(response: &Response, what: &str) -> Error {
    let detail = match response.header("x-error-code").unwrap_or_default() {
        "RepoNotFound" => " (no such repository, or it is private)",
        "RevisionNotFound" => " (no such branch, tag or commit)",
        "EntryNotFound" => " (no such file at this revision)",
        _ => "",
    };
    Error::NotFound { what: what.into(), detail: detail.into() }
}

/// A transient status in words.
fn transient_name(status: u16) -> &'static str {
    match status {
        408 => "request timeout",
        500 => "internal server error",
        502 => "bad gateway",
        503 => "service unavailable",
        504 => "gateway timeout",
        _ => "a transient error",
    }
}

/// Why a body stopped before its end: it broke, or the server stopped sending (a stall).
pub(super) struct Cut {
    pub reason: String,
    pub stalled: bool,
}

impl Cut {
    pub(super) fn of(error: &std::io::Error, client: &Client) -> Cut {
        match is_stall(error) {
            true => Cut { reason: format!("no byte for {}", client.timeout()), stalled: true },
            false => Cut { reason: error.to_string(), stalled: false },
        }
    }

    pub(super) fn ended(reason: String) -> Cut {
        Cut { reason, stalled: false }
    }
}

/// A whole body of at most `limit` bytes, counted as it is read; Err says why it stopped.
pub(super) fn read_all(response: &mut Response, client: &Client, limit: u64) -> std::result::Result<Vec<u8>, Cut> {
    let mut bytes = Vec::new();
    let mut buffer = vec![0u8; 64 << 10];
    loop {
        match response.body.read(&mut buffer) {
            Ok(0) => return Ok(bytes),
            Ok(n) => {
                client.count(n as u64);
                bytes.extend_from_slice(&buffer[..n]);
                if bytes.len() as u64 > limit {
                    return Err(Cut::ended(format!("more than {limit} bytes")));
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Cut::of(&e, client)),
        }
    }
}

/// Seconds from `Retry-After` (seconds only; the Hub sends no dates).
fn retry_after(response: &Response) -> Option<f64> {
    response.header("retry-after")?.trim().parse::<f64>().ok().filter(|s| s.is_finite() && *s >= 0.0)
}

/// `scheme://host[:port]` of an absolute URL.
pub(super) fn origin_of(url: &str) -> &str {
    let after_scheme = url.find("://").map_or(0, |i| i + 3);
    match url[after_scheme..].find('/') {
        Some(i) => &url[..after_scheme + i],
        None => url,
    }
}

/// A `Location` read against the URL that sent it: absolute, origin-relative (`/api/…`), or
/// relative to the sender's folder.
pub(super) fn join(base: &str, location: &str) -> String {
    if location.starts_with("http://") || location.starts_with("https://") {
        location.to_string()
    } else if let Some(rest) = location.strip_prefix("//") {
        let scheme = base.split("://").next().unwrap_or("https");
        format!("{scheme}://{rest}")
    } else if location.starts_with('/') {
        format!("{}{location}", origin_of(base))
    } else {
        let path_end = base.find(['?', '#']).unwrap_or(base.len());
        let folder_end = base[..path_end].rfind('/').map_or(path_end, |i| i + 1);
        format!("{}{location}", &base[..folder_end])
    }
}

/// `Content-Range: bytes START-END/TOTAL` as (start, total); TOTAL `*` gives None.
pub(super) fn content_range(response: &Response) -> Option<(u64, Option<u64>)> {
    let value = response.header("content-range")?.strip_prefix("bytes ")?;
    let (span, total) = value.split_once('/')?;
    let total = total.trim().parse().ok();
    let start = if span == "*" { 0 } else { span.split_once('-')?.0.trim().parse().ok()? };
    Some((start, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_read_against_the_sender() {
        let base = "https://hub.example/org/name/resolve/main/config.json";
        assert_eq!(join(base, "https://cdn.example/x?sig=1"), "https://cdn.example/x?sig=1");
        assert_eq!(
            join(base, "/api/resolve-cache/models/org/name/abc/config.json"),
            "https://hub.example/api/resolve-cache/models/org/name/abc/config.json"
        );
        assert_eq!(join(base, "other.json"), "https://hub.example/org/name/resolve/main/other.json");
        assert_eq!(join(base, "//cdn.example/y"), "https://cdn.example/y");
        assert_eq!(origin_of("http://127.0.0.1:8080/a/b"), "http://127.0.0.1:8080");
    }
}
