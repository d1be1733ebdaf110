//! The page's side of the analysis workers, the transport under the pool: starts them, posts
//! requests and awaits their replies, routes progress and memory reports, and stops them all at
//! once. Above it, `pool.rs` splits a load's work across the workers and `client.rs` routes the
//! page's requests and reloads the shown model after a cancel or a crash.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use serde::{Deserialize, Serialize};

use crate::js::{field, js_message};
use crate::stored;
use headprint::worker::protocol::{LinkSource, Progress, Reply, Request};

/// Why a request to the workers failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Failure {
    /// The user cancelled it: the pool was stopped (and started afresh).
    Cancelled,
    /// A worker stopped or could not start; the text says why.
    WorkerStopped(String),
    /// The worker could not do it: the core's error, or a reply that could not be read.
    Failed(String),
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Cancelled => f.write_str("cancelled"),
            Failure::WorkerStopped(why) | Failure::Failed(why) => f.write_str(why),
        }
    }
}

impl From<String> for Failure {
    fn from(why: String) -> Self {
        Failure::Failed(why)
    }
}

impl From<headprint::Error> for Failure {
    fn from(error: headprint::Error) -> Self {
        Failure::Failed(error.to_string())
    }
}

impl Failure {
    /// The failure as a promise's rejection, so it crosses JavaScript whole.
    pub fn to_js(&self) -> JsValue {
        JsValue::from_str(&serde_json::to_string(self).unwrap_or_else(|_| self.to_string()))
    }

    /// A promise's rejection as a failure: one of ours, or the browser's own error.
    pub fn from_js(rejection: &JsValue) -> Failure {
        let text = js_message(rejection);
        serde_json::from_str(&text).unwrap_or(Failure::WorkerStopped(text))
    }
}

/// The worker script, next to the page (see `public/worker.js`).
const WORKER_URL: &str = "worker.js";

/// What the page wants to hear from the worker.
pub struct Hooks {
    pub on_progress: Box<dyn Fn(Progress)>,
    /// The workers' wasm memory (each only grows: the peaks so far).
    pub on_memory: Box<dyn Fn(Memory)>,
    /// A restarted worker could not load the shown model again, or stopped.
    pub on_trouble: Box<dyn Fn(String)>,
    /// The hashing worker's progress; `None` when it has ended (answered or cancelled).
    pub on_hashing: Box<dyn Fn(Option<Progress>)>,
    /// A worker gave up on a request to a server that stopped answering, and asks again: what
    /// it says (which host, after how long).
    pub on_stall: Box<dyn Fn(String)>,
}

/// What a model is read from: named files as the browser holds them (`File`s, or the fetched
/// demo model as a `Blob`), or a link that each worker fetches from itself.
#[derive(Clone, Default)]
pub struct ModelSource {
    pub files: Vec<(String, web_sys::Blob)>,
    pub link: Option<LinkSource>,
    /// What the page stored of the linked model, for the workers to read before the network
    /// (`stored::indexed_db::catalog`): read when the pool opens the model, before the lead
    /// does, so helpers fetch again the small files and headers the lead has just fetched.
    pub stored: Option<JsValue>,
}

impl ModelSource {
    pub fn files(files: Vec<(String, web_sys::Blob)>) -> Self {
        ModelSource { files, link: None, stored: None }
    }

    pub fn link(link: LinkSource) -> Self {
        ModelSource { files: Vec::new(), link: Some(link), stored: None }
    }

    pub fn names(&self) -> Vec<String> {
        self.files.iter().map(|(name, _)| name.clone()).collect()
    }
}

struct Running {
    worker: web_sys::Worker,
    /// Request id -> the promise its caller awaits.
    pending: HashMap<u64, Waiting>,
    /// The worker's wasm memory in bytes, as it last reported it (the peak: it only grows).
    memory: f64,
    /// The bytes it fetched by link, as it last reported them.
    fetched: f64,
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::Event)>,
}

struct Waiting {
    resolve: js_sys::Function,
    reject: js_sys::Function,
    /// Whether the page shows this request's progress (a restart's reload is silent, and the
    /// pool reports its parts itself).
    shows_progress: bool,
}

#[derive(Default)]
struct Client {
    /// The pool's workers; the first is the lead, which holds the models for every request.
    workers: Vec<Running>,
    next_id: u64,
    hooks: Option<Rc<Hooks>>,
    /// What fresh workers do after a crash stopped the pool (`client.rs` loads the shown model).
    reload: Option<fn()>,
    /// Worker failures since the last answer: a worker that cannot start is not restarted forever.
    failures: u32,
    /// Counts the pool's stops: work begun before a stop never reaches the fresh workers.
    generation: u64,
    /// The hashing worker's peak wasm memory (it stays shown after the worker ends).
    hashing_memory: f64,
    /// Bytes the pool's workers fetched by link since the page opened.
    fetched: f64,
}

/// The memory the page reports: each analysis worker's and the hashing worker's wasm memory.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Memory {
    pub workers: Vec<f64>,
    pub hashing: f64,
}

impl Memory {
    pub fn total(&self) -> f64 {
        self.workers.iter().sum::<f64>() + self.hashing
    }

    /// "Analysis workers' memory: 123 MB (2 workers: 100 MB, 3 MB; hashing worker 20 MB)."
    pub fn describe(&self) -> Option<String> {
        let mb = |bytes: f64| format!("{:.0} MB", bytes / 1e6);
        let workers: Vec<String> = self.workers.iter().filter(|b| **b > 0.0).map(|b| mb(*b)).collect();
        if workers.is_empty() && self.hashing == 0.0 {
            return None;
        }
        let hashing = match self.hashing {
            0.0 => String::new(),
            bytes => format!("; share-link hashing worker {}", mb(bytes)),
        };
        let count = match workers.len() {
            1 => "1 worker".to_string(),
            n => format!("{n} workers"),
        };
        Some(format!("Analysis workers' memory: {} ({count}: {}{hashing}).", mb(self.total()), workers.join(", ")))
    }
}

/// Failures in a row after which the page stops restarting the worker.
const MAX_FAILURES: u32 = 3;

/// The hashing worker while it runs: cancelling terminates it and fails its request.
struct Hashing {
    worker: web_sys::Worker,
    reject: js_sys::Function,
}

thread_local! {
    static CLIENT: RefCell<Client> = RefCell::default();
    static HASHING: RefCell<Option<Hashing>> = const { RefCell::new(None) };
}

pub fn set_hooks(hooks: Hooks) {
    CLIENT.with_borrow_mut(|c| c.hooks = Some(Rc::new(hooks)));
}

pub(super) fn hooks() -> Option<Rc<Hooks>> {
    CLIENT.with_borrow(|c| c.hooks.clone())
}

/// Shows progress the pool computed from its parts.
pub(super) fn report(progress: Progress) {
    if let Some(hooks) = hooks() {
        (hooks.on_progress)(progress);
    }
}

fn report_memory() {
    let memory = CLIENT
        .with_borrow(|c| Memory { workers: c.workers.iter().map(|r| r.memory).collect(), hashing: c.hashing_memory });
    if let Some(hooks) = hooks() {
        (hooks.on_memory)(memory);
    }
}

/// Sets what follows a crash that stopped the pool, once fresh workers may start.
pub(super) fn set_reload(reload: fn()) {
    CLIENT.with_borrow_mut(|c| c.reload = Some(reload));
}

/// How many workers the pool may run: one per logical core (`navigator.hardwareConcurrency`),
/// at least two. Each model's share may be fewer (see `worker::memory::pool_workers`).
pub fn pool_size() -> usize {
    // Read by name: web-sys's `Navigator` binding is not worth a feature for one number.
    let navigator = field(&js_sys::global(), "navigator");
    let cores = field(&navigator, "hardwareConcurrency").as_f64().unwrap_or(0.0);
    (cores as usize).max(2)
}

/// Bytes the pool has fetched by link since the page opened.
pub fn fetched() -> f64 {
    CLIENT.with_borrow(|c| c.fetched)
}

/// The pool's current generation: `send_to` refuses work of an older one (it was cancelled).
pub(super) fn generation() -> u64 {
    CLIENT.with_borrow(|c| c.generation)
}

fn on_message(index: usize, event: web_sys::MessageEvent) {
    let data = event.data();
    let id = field(&data, "id").as_f64().unwrap_or(-1.0) as u64;
    if let Some(memory) = field(&data, "memory").as_f64() {
        let fetched = field(&data, "fetched").as_f64().unwrap_or(0.0);
        CLIENT.with_borrow_mut(|c| {
            if let Some(running) = c.workers.get_mut(index) {
                running.memory = memory;
                // Counted as it grows: a restarted worker starts again from zero.
                c.fetched += (fetched - running.fetched).max(0.0);
                running.fetched = fetched;
            }
        });
        report_memory();
    }
    match field(&data, "kind").as_string().as_deref() {
        Some("progress") => {
            let shown = CLIENT.with_borrow(|c| {
                c.workers.get(index).and_then(|r| r.pending.get(&id)).is_some_and(|w| w.shows_progress)
            });
            let json = field(&data, "json").as_string().unwrap_or_default();
            if let (true, Ok(progress)) = (shown, serde_json::from_str::<Progress>(&json)) {
                report(progress);
            }
        }
        Some(stored::KEEP) => stored::indexed_db::keep(&data),
        Some("stalled") => {
            if let Some(hooks) = hooks() {
                (hooks.on_stall)(field(&data, "json").as_string().unwrap_or_default());
            }
        }
        Some("reply") => {
            let waiting = CLIENT.with_borrow_mut(|c| {
                c.failures = 0;
                c.workers.get_mut(index).and_then(|r| r.pending.remove(&id))
            });
            if let Some(waiting) = waiting {
                let _ = waiting.resolve.call1(&JsValue::NULL, &data);
            }
        }
        _ => {}
    }
}

/// A new worker on the page's compiled module (it instantiates it without compiling it again).
/// Handlers set right after this returns see every message: none is dispatched before.
fn new_worker() -> Result<web_sys::Worker, String> {
    let options = web_sys::WorkerOptions::new();
    options.set_type(web_sys::WorkerType::Module);
    let worker = web_sys::Worker::new_with_options(WORKER_URL, &options)
        .map_err(|e| format!("cannot start the analysis worker: {}", js_message(&e)))?;
    let start = js_sys::Object::new();
    let _ = js_sys::Reflect::set(&start, &"module".into(), &wasm_bindgen::module());
    worker.post_message(&start).map_err(|e| format!("cannot start the analysis worker: {}", js_message(&e)))?;
    Ok(worker)
}

/// Posts one request, with its files as `Blob`s (structured clone: their bytes are not copied)
/// and its payload, if any, as a `Float64Array` moved to the worker.
fn post_request(
    worker: &web_sys::Worker,
    id: u64,
    json: &str,
    files: &ModelSource,
    payload: Option<Vec<f64>>,
) -> Result<(), String> {
    let blobs: js_sys::Array = files.files.iter().map(|(_, blob)| JsValue::from(blob)).collect();
    let message = js_sys::Object::new();
    let _ = js_sys::Reflect::set(&message, &"id".into(), &JsValue::from_f64(id as f64));
    let _ = js_sys::Reflect::set(&message, &"json".into(), &JsValue::from_str(json));
    let _ = js_sys::Reflect::set(&message, &"files".into(), &blobs);
    if let Some(stored) = &files.stored {
        let _ = js_sys::Reflect::set(&message, &"stored".into(), stored);
    }
    match payload {
        Some(values) => {
            let array = js_sys::Float64Array::from(values.as_slice());
            let _ = js_sys::Reflect::set(&message, &"payload".into(), &array);
            worker.post_message_with_transfer(&message, &js_sys::Array::of1(&array.buffer()))
        }
        None => worker.post_message(&message),
    }
    .map_err(|e| js_message(&e))
}

fn spawn(index: usize) -> Result<Running, String> {
    let worker = new_worker()?;
    let on_message =
        Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| on_message(index, event));
    let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(|event: web_sys::Event| {
        let detail = event.dyn_ref::<web_sys::ErrorEvent>().map(|e| e.message()).unwrap_or_default();
        let failures = CLIENT.with_borrow_mut(|c| {
            c.failures += 1;
            c.failures
        });
        if failures < MAX_FAILURES {
            stop(Failure::WorkerStopped(format!("an analysis worker stopped ({detail}); the workers were restarted")));
            if let Some(reload) = CLIENT.with_borrow(|c| c.reload) {
                reload();
            }
        } else {
            stop(Failure::WorkerStopped(format!("the analysis worker cannot run in this browser ({detail})")));
        }
    });
    worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    Ok(Running {
        worker,
        pending: HashMap::new(),
        memory: 0.0,
        fetched: 0.0,
        _on_message: on_message,
        _on_error: on_error,
    })
}

/// Starts workers until the pool has `count` (the lead first).
fn ensure_workers(c: &mut Client, count: usize) -> Result<(), String> {
    while c.workers.len() < count {
        let running = spawn(c.workers.len())?;
        c.workers.push(running);
    }
    Ok(())
}

/// Starts the pool now, so its start overlaps other work (the demo model's download).
pub fn warm_up() {
    // On failure `send_to` tries again and reports it.
    CLIENT.with_borrow_mut(|c| ensure_workers(c, pool_size()).ok());
}

/// Sends one request to worker `index` of the pool (starting it if needed) and waits for its
/// answer; fails as [`Failure::Cancelled`] when the pool was stopped since `generation`.
pub(super) async fn send_to(
    index: usize,
    mut request: Request,
    files: &ModelSource,
    shows_progress: bool,
    generation: u64,
) -> Result<Reply, Failure> {
    let payload = request.take_payload();
    let json = serde_json::to_string(&request).map_err(|e| e.to_string())?;
    let promise = CLIENT.with_borrow_mut(|c| -> Result<js_sys::Promise, Failure> {
        if c.generation != generation {
            return Err(Failure::Cancelled);
        }
        ensure_workers(c, index + 1).map_err(Failure::WorkerStopped)?;
        c.next_id += 1;
        let id = c.next_id;
        let running = &mut c.workers[index];
        let mut handlers = None;
        let promise = js_sys::Promise::new(&mut |resolve, reject| handlers = Some((resolve, reject)));
        let (resolve, reject) = handlers.expect("the promise executor runs at once");
        running.pending.insert(id, Waiting { resolve, reject, shows_progress });
        post_request(&running.worker, id, &json, files, payload)?;
        Ok(promise)
    })?;
    let answer = JsFuture::from(promise).await.map_err(|e| Failure::from_js(&e))?;
    read_reply(&answer)
}

/// A worker's reply message: its JSON, and the payload beside it.
fn read_reply(data: &JsValue) -> Result<Reply, Failure> {
    let json = field(data, "json").as_string().ok_or_else(|| Failure::Failed("the worker sent no text".into()))?;
    let mut reply = serde_json::from_str::<Result<Reply, String>>(&json)
        .map_err(|e| format!("unreadable reply from the worker: {e}"))??;
    if let Ok(array) = field(data, "payload").dyn_into::<js_sys::Float64Array>() {
        reply.put_payload(array.to_vec()).map_err(|e| format!("unreadable reply from the worker: {e}"))?;
    }
    Ok(reply)
}

/// The files' SHA-256 (a share link's identity of local files), computed in a worker of its own
/// once the analysis is shown: the first heads never wait for a whole model to be read twice,
/// and the hashing takes no core from the analysis pool. The worker ends when it has answered.
pub async fn identify(files: &ModelSource) -> Result<String, Failure> {
    let request = Request::Hash { names: files.names() };
    let json = serde_json::to_string(&request).map_err(|e| e.to_string())?;
    let worker = new_worker().map_err(Failure::WorkerStopped)?;
    let mut handlers = None;
    let promise = js_sys::Promise::new(&mut |resolve, reject| handlers = Some((resolve, reject)));
    let (resolve, reject) = handlers.expect("the promise executor runs at once");
    let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
        let data = event.data();
        if let Some(memory) = field(&data, "memory").as_f64() {
            CLIENT.with_borrow_mut(|c| c.hashing_memory = c.hashing_memory.max(memory));
            report_memory();
        }
        match field(&data, "kind").as_string().as_deref() {
            Some(stored::KEEP) => stored::indexed_db::keep(&data),
            Some("reply") => {
                let _ = resolve.call1(&JsValue::NULL, &data);
            }
            Some("progress") => {
                let progress = field(&data, "json").as_string().and_then(|j| serde_json::from_str(&j).ok());
                if let (Some(hooks), Some(progress)) = (hooks(), progress) {
                    (hooks.on_hashing)(Some(progress));
                }
            }
            _ => {}
        }
    });
    let on_error_reject = reject.clone();
    let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(move |event: web_sys::Event| {
        let detail = event.dyn_ref::<web_sys::ErrorEvent>().map(|e| e.message()).unwrap_or_default();
        let failure = Failure::WorkerStopped(format!("the hashing worker stopped ({detail})"));
        let _ = on_error_reject.call1(&JsValue::NULL, &failure.to_js());
    });
    worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    // One hashing worker at a time: a newer load's hash replaces (cancels) an older one.
    cancel_hashing();
    HASHING.with_borrow_mut(|h| *h = Some(Hashing { worker: worker.clone(), reject }));
    let answer = match post_request(&worker, 1, &json, files, None) {
        Ok(()) => JsFuture::from(promise).await.map_err(|e| Failure::from_js(&e)),
        Err(e) => Err(Failure::Failed(e)),
    };
    worker.terminate();
    HASHING.with_borrow_mut(|h| {
        if h.as_ref().is_some_and(|h| h.worker == worker) {
            *h = None;
        }
    });
    if let Some(hooks) = hooks() {
        (hooks.on_hashing)(None);
    }
    drop((on_message, on_error));
    match read_reply(&answer?)? {
        Reply::Hashed { sha256 } => Ok(sha256),
        _ => Err(Failure::Failed("the hashing worker gave an unexpected answer".into())),
    }
}

/// Stops the hashing worker, if one runs; its request fails as [`Failure::Cancelled`].
pub fn cancel_hashing() {
    if let Some(Hashing { worker, reject }) = HASHING.with_borrow_mut(Option::take) {
        worker.terminate();
        let _ = reject.call1(&JsValue::NULL, &Failure::Cancelled.to_js());
    }
}

/// Stops every worker of the pool at once and fails every waiting request with `reason`; the
/// next request starts fresh workers.
pub(super) fn stop(reason: Failure) {
    let stopped = CLIENT.with_borrow_mut(|c| {
        c.generation += 1;
        std::mem::take(&mut c.workers)
    });
    for Running { worker, pending, _on_message, _on_error, .. } in stopped {
        worker.terminate();
        for waiting in pending.into_values() {
            let _ = waiting.reject.call1(&JsValue::NULL, &reason.to_js());
        }
        // `stop` may run inside a worker's own error handler: free its closures afterwards.
        wasm_bindgen_futures::spawn_local(async move { drop((_on_message, _on_error)) });
    }
    report_memory();
    if let Some(hooks) = hooks().filter(|_| reason != Failure::Cancelled) {
        (hooks.on_trouble)(format!("The analysis stopped: {reason}."));
    }
}
