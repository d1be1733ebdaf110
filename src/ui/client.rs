//! The page's side of the analysis worker: starts it, sends requests and awaits their replies,
//! routes progress, and replaces the worker after a cancel or a crash, loading again the model
//! the page shows (its results stay on the page; only the worker's copy is rebuilt).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use crate::worker::protocol::{ModelId, Progress, Reply, Request};
use crate::worker::{field, js_message};

/// What a request cancelled by the user fails with.
pub const CANCELLED: &str = "cancelled";

/// The worker script, next to the page (see `public/worker.js`).
const WORKER_URL: &str = "worker.js";

/// What the page wants to hear from the worker.
pub struct Hooks {
    pub on_progress: Box<dyn Fn(Progress)>,
    /// The worker's wasm memory in bytes (it only grows: the peak so far).
    pub on_memory: Box<dyn Fn(f64)>,
    /// A restarted worker could not load the shown model again, or stopped.
    pub on_trouble: Box<dyn Fn(String)>,
    /// The hashing worker's progress; `None` when it has ended (answered or cancelled).
    pub on_hashing: Box<dyn Fn(Option<Progress>)>,
}

/// Named files as the browser holds them (`File`s, or the fetched demo model as a `Blob`).
pub type Files = Vec<(String, web_sys::Blob)>;

struct Running {
    worker: web_sys::Worker,
    /// Request id -> the promise its caller awaits.
    pending: HashMap<u64, Waiting>,
    _on_message: Closure<dyn FnMut(web_sys::MessageEvent)>,
    _on_error: Closure<dyn FnMut(web_sys::Event)>,
}

struct Waiting {
    resolve: js_sys::Function,
    reject: js_sys::Function,
    /// Whether the page shows this request's progress (a restart's reload is silent).
    shows_progress: bool,
}

#[derive(Default)]
struct Client {
    running: Option<Running>,
    next_id: u64,
    hooks: Option<Rc<Hooks>>,
    /// The model the page shows: what a fresh worker must load again.
    shown: Option<(ModelId, Files)>,
    /// Worker failures since the last answer: a worker that cannot start is not restarted forever.
    failures: u32,
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

fn hooks() -> Option<Rc<Hooks>> {
    CLIENT.with_borrow(|c| c.hooks.clone())
}

/// Remembers the files of the model the page now shows (to load again after a restart).
pub fn set_shown(model: ModelId, files: Files) {
    CLIENT.with_borrow_mut(|c| c.shown = Some((model, files)));
}

/// The shown model's files (to analyse it again, e.g. on another backend).
pub fn shown_files() -> Option<Files> {
    CLIENT.with_borrow(|c| c.shown.as_ref().map(|(_, files)| files.clone()))
}

fn on_message(event: web_sys::MessageEvent) {
    let data = event.data();
    let id = field(&data, "id").as_f64().unwrap_or(-1.0) as u64;
    let json = field(&data, "json").as_string().unwrap_or_default();
    let hooks = hooks();
    if let (Some(hooks), Some(memory)) = (&hooks, field(&data, "memory").as_f64()) {
        (hooks.on_memory)(memory);
    }
    match field(&data, "kind").as_string().as_deref() {
        Some("progress") => {
            let shown = CLIENT
                .with_borrow(|c| c.running.as_ref().and_then(|r| r.pending.get(&id)).is_some_and(|w| w.shows_progress));
            if let (true, Some(hooks), Ok(progress)) = (shown, &hooks, serde_json::from_str::<Progress>(&json)) {
                (hooks.on_progress)(progress);
            }
        }
        Some("reply") => {
            let waiting = CLIENT.with_borrow_mut(|c| {
                c.failures = 0;
                c.running.as_mut().and_then(|r| r.pending.remove(&id))
            });
            if let Some(waiting) = waiting {
                let _ = waiting.resolve.call1(&JsValue::NULL, &JsValue::from_str(&json));
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

/// Posts one request, with its files as `Blob`s (structured clone: their bytes are not copied).
fn post_request(worker: &web_sys::Worker, id: u64, json: &str, files: &Files) -> Result<(), String> {
    let blobs: js_sys::Array = files.iter().map(|(_, blob)| JsValue::from(blob)).collect();
    let message = js_sys::Object::new();
    let _ = js_sys::Reflect::set(&message, &"id".into(), &JsValue::from_f64(id as f64));
    let _ = js_sys::Reflect::set(&message, &"json".into(), &JsValue::from_str(json));
    let _ = js_sys::Reflect::set(&message, &"files".into(), &blobs);
    worker.post_message(&message).map_err(|e| js_message(&e))
}

fn spawn() -> Result<Running, String> {
    let worker = new_worker()?;
    let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(on_message);
    let on_error = Closure::<dyn FnMut(web_sys::Event)>::new(|event: web_sys::Event| {
        let detail = event.dyn_ref::<web_sys::ErrorEvent>().map(|e| e.message()).unwrap_or_default();
        let failures = CLIENT.with_borrow_mut(|c| {
            c.failures += 1;
            c.failures
        });
        if failures < MAX_FAILURES {
            restart(&format!("the analysis worker stopped ({detail}); it was restarted"));
        } else {
            stop(&format!("the analysis worker cannot run in this browser ({detail})"));
        }
    });
    worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    Ok(Running { worker, pending: HashMap::new(), _on_message: on_message, _on_error: on_error })
}

/// Starts the worker now, so its start overlaps other work (the demo model's download).
pub fn warm_up() {
    CLIENT.with_borrow_mut(|c| {
        if c.running.is_none() {
            // On failure `request` tries again and reports it.
            c.running = spawn().ok();
        }
    });
}

/// Sends one request (with the files of a `Load`) and waits for the worker's answer.
pub async fn request(request: &Request, files: &Files) -> Result<Reply, String> {
    send(request, files, true).await
}

async fn send(request: &Request, files: &Files, shows_progress: bool) -> Result<Reply, String> {
    let json = serde_json::to_string(request).map_err(|e| e.to_string())?;
    let promise = CLIENT.with_borrow_mut(|c| -> Result<js_sys::Promise, String> {
        if c.running.is_none() {
            c.running = Some(spawn()?);
        }
        c.next_id += 1;
        let id = c.next_id;
        let running = c.running.as_mut().expect("just started");
        let mut handlers = None;
        let promise = js_sys::Promise::new(&mut |resolve, reject| handlers = Some((resolve, reject)));
        let (resolve, reject) = handlers.expect("the promise executor runs at once");
        running.pending.insert(id, Waiting { resolve, reject, shows_progress });
        post_request(&running.worker, id, &json, files)?;
        Ok(promise)
    })?;
    let answer = JsFuture::from(promise).await.map_err(|e| js_message(&e))?;
    read_reply(answer)
}

fn read_reply(answer: JsValue) -> Result<Reply, String> {
    let json = answer.as_string().ok_or("the worker sent no text")?;
    serde_json::from_str::<Result<Reply, String>>(&json)
        .map_err(|e| format!("unreadable reply from the worker: {e}"))?
}

/// The files' SHA-256 (a share link's identity of local files), computed in a worker of its own
/// beside the analysis worker: the first heads never wait for a whole model to be read twice,
/// and the two run on two cores. The worker ends when it has answered.
pub async fn identify(files: &Files) -> Result<String, String> {
    let request = Request::Hash { names: files.iter().map(|(name, _)| name.clone()).collect() };
    let json = serde_json::to_string(&request).map_err(|e| e.to_string())?;
    let worker = new_worker()?;
    let mut handlers = None;
    let promise = js_sys::Promise::new(&mut |resolve, reject| handlers = Some((resolve, reject)));
    let (resolve, reject) = handlers.expect("the promise executor runs at once");
    let on_message = Closure::<dyn FnMut(web_sys::MessageEvent)>::new(move |event: web_sys::MessageEvent| {
        let data = event.data();
        match field(&data, "kind").as_string().as_deref() {
            Some("reply") => {
                let _ = resolve.call1(&JsValue::NULL, &field(&data, "json"));
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
        let message = JsValue::from_str(&format!("the hashing worker stopped ({detail})"));
        let _ = on_error_reject.call1(&JsValue::NULL, &message);
    });
    worker.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
    worker.set_onerror(Some(on_error.as_ref().unchecked_ref()));
    // One hashing worker at a time: a newer load's hash replaces (cancels) an older one.
    cancel_hashing();
    HASHING.with_borrow_mut(|h| *h = Some(Hashing { worker: worker.clone(), reject }));
    let answer = match post_request(&worker, 1, &json, files) {
        Ok(()) => JsFuture::from(promise).await.map_err(|e| js_message(&e)),
        Err(e) => Err(e),
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
    match read_reply(answer?)? {
        Reply::Hashed { sha256 } => Ok(sha256),
        _ => Err("the hashing worker gave an unexpected answer".into()),
    }
}

/// Stops the hashing worker, if one runs; its request fails with [`CANCELLED`].
pub fn cancel_hashing() {
    if let Some(Hashing { worker, reject }) = HASHING.with_borrow_mut(Option::take) {
        worker.terminate();
        let _ = reject.call1(&JsValue::NULL, &JsValue::from_str(CANCELLED));
    }
}

/// Stops the worker at once and fails every waiting request with `reason`.
fn stop(reason: &str) {
    if let Some(old) = CLIENT.with_borrow_mut(|c| c.running.take()) {
        let Running { worker, pending, _on_message, _on_error } = old;
        worker.terminate();
        for waiting in pending.into_values() {
            let _ = waiting.reject.call1(&JsValue::NULL, &JsValue::from_str(reason));
        }
        // `stop` may run inside the worker's own error handler: free its closures afterwards.
        wasm_bindgen_futures::spawn_local(async move { drop((_on_message, _on_error)) });
    }
    if let Some(hooks) = hooks().filter(|_| reason != CANCELLED) {
        (hooks.on_trouble)(format!("The analysis stopped: {reason}."));
    }
}

/// Stops the worker at once (whatever it is doing), fails every waiting request with `reason`,
/// and starts a fresh one that loads the shown model again.
pub fn restart(reason: &str) {
    stop(reason);
    let shown = CLIENT.with_borrow(|c| c.shown.clone());
    if let Some((model, files)) = shown {
        wasm_bindgen_futures::spawn_local(async move {
            let names = files.iter().map(|(name, _)| name.clone()).collect();
            let reload = Request::Load { model, names, analyse: false, prepend_bos: true, backend: Default::default() };
            if let Err(e) = send(&reload, &files, false).await
                && let Some(hooks) = hooks()
            {
                (hooks.on_trouble)(format!("The fresh worker could not load the shown model again: {e}"));
            }
        });
    }
}
