//! The page's half: keeps what the workers fetched by link in IndexedDB (database
//! `headprint-links`: `records` for small files, pins and facts, `ranges` for byte ranges as
//! `Blob`s), hands a model's catalog to the workers that open it, and lists and removes stored
//! models. A store that cannot be opened, or that is full, costs nothing but the keeping: the
//! analysis runs from the network, keeping nothing.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::{RANGES, RECORDS, name_key};
use crate::js::{field, js_message};
use headprint::weights::remote::ModelLink;

const DATABASE: &str = "headprint-links";
const VERSION: u32 = 1;

/// A stored model, as the "Stored models" list shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredModel {
    /// Every key of the model starts with it (`ModelLink::store_prefix`).
    pub prefix: String,
    /// The link it was last opened by, pinned.
    pub name: String,
    pub bytes: f64,
}

/// What the page is told about the store.
pub struct Hooks {
    /// The writes asked for and not yet ended, each time that number changes.
    pub on_pending: Box<dyn Fn(usize)>,
    /// The browser refused a write for want of room (once, until a model is removed), with the
    /// bytes it says this site uses and allows, when it says.
    pub on_full: Box<dyn Fn(Option<Usage>)>,
}

/// The bytes the browser says this site uses and allows it.
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    pub used: f64,
    pub allowed: f64,
}

thread_local! {
    /// The database's open, shared by every caller.
    static OPENED: RefCell<Option<js_sys::Promise>> = const { RefCell::new(None) };
    static HOOKS: RefCell<Option<Rc<Hooks>>> = const { RefCell::new(None) };
    /// Writes asked for and not yet ended.
    static PENDING: Cell<usize> = const { Cell::new(0) };
    /// The browser said the store is full: ranges are no longer kept until a model is removed.
    static FULL: Cell<bool> = const { Cell::new(false) };
}

pub fn set_hooks(hooks: Hooks) {
    HOOKS.with_borrow_mut(|h| *h = Some(Rc::new(hooks)));
}

fn hooks() -> Option<Rc<Hooks>> {
    HOOKS.with_borrow(Clone::clone)
}

/// The result of a request, once it succeeds.
async fn finished(request: &web_sys::IdbRequest) -> Result<JsValue, String> {
    JsFuture::from(settled(request)).await.map_err(|e| error_text(&e))
}

/// A promise of a request's result (rejected with its error).
fn settled(request: &web_sys::IdbRequest) -> js_sys::Promise {
    js_sys::Promise::new(&mut |resolve, reject| {
        let done = request.clone();
        let on_success = Closure::once_into_js(move || {
            let _ = resolve.call1(&JsValue::NULL, &done.result().unwrap_or(JsValue::UNDEFINED));
        });
        let failed = request.clone();
        let on_error = Closure::once_into_js(move || {
            let error = failed.error().ok().flatten().map_or(JsValue::UNDEFINED, JsValue::from);
            let _ = reject.call1(&JsValue::NULL, &error);
        });
        request.set_onsuccess(Some(on_success.unchecked_ref()));
        request.set_onerror(Some(on_error.unchecked_ref()));
    })
}

/// A write's end: Ok once committed; the error's name and message when it was aborted.
async fn committed(transaction: &web_sys::IdbTransaction) -> Result<(), (String, String)> {
    let promise = js_sys::Promise::new(&mut |resolve, reject| {
        let on_complete = Closure::once_into_js(move || {
            let _ = resolve.call0(&JsValue::NULL);
        });
        let failed = transaction.clone();
        let on_abort = Closure::once_into_js(move || {
            let error = failed.error().map_or(JsValue::UNDEFINED, JsValue::from);
            let _ = reject.call1(&JsValue::NULL, &error);
        });
        transaction.set_oncomplete(Some(on_complete.unchecked_ref()));
        transaction.set_onabort(Some(on_abort.unchecked_ref()));
    });
    JsFuture::from(promise).await.map(|_| ()).map_err(|e| {
        let name = e.dyn_ref::<web_sys::DomException>().map(|d| d.name()).unwrap_or_default();
        (name, error_text(&e))
    })
}

fn error_text(error: &JsValue) -> String {
    match error.dyn_ref::<web_sys::DomException>() {
        Some(exception) => exception.message(),
        None if error.is_undefined() => "the browser's storage refused it".into(),
        None => js_message(error),
    }
}

/// The database, opened (and made, the first time) once per page: every caller awaits the same
/// open, so writes that begin together share one connection.
async fn database() -> Result<web_sys::IdbDatabase, String> {
    let opening = match OPENED.with_borrow(Clone::clone) {
        Some(opening) => opening,
        None => {
            let opening = open()?;
            OPENED.with_borrow_mut(|o| *o = Some(opening.clone()));
            opening
        }
    };
    JsFuture::from(opening).await.map(JsCast::unchecked_into).map_err(|e| error_text(&e))
}

/// Opens the database, making its stores the first time.
fn open() -> Result<js_sys::Promise, String> {
    let factory = web_sys::window()
        .and_then(|w| w.indexed_db().ok().flatten())
        .ok_or("this browser gives the page no IndexedDB")?;
    let request = factory.open_with_u32(DATABASE, VERSION).map_err(|e| error_text(&e))?;
    let upgrading = request.clone();
    let on_upgrade = Closure::once_into_js(move || {
        if let Ok(result) = upgrading.result()
            && let Ok(database) = result.dyn_into::<web_sys::IdbDatabase>()
        {
            for store in [RECORDS, RANGES] {
                if !database.object_store_names().contains(store) {
                    let _ = database.create_object_store(store);
                }
            }
        }
    });
    request.set_onupgradeneeded(Some(on_upgrade.unchecked_ref()));
    Ok(settled(&request))
}

/// The keys from `prefix` up to every key that starts with it.
fn keys_under(prefix: &str) -> Result<web_sys::IdbKeyRange, String> {
    let upper = format!("{prefix}\u{ffff}");
    web_sys::IdbKeyRange::bound(&JsValue::from_str(prefix), &JsValue::from_str(&upper)).map_err(|e| error_text(&e))
}

fn transaction(
    stores: &[&str],
    mode: web_sys::IdbTransactionMode,
) -> impl Future<Output = Result<web_sys::IdbTransaction, String>> {
    let names: js_sys::Array = stores.iter().map(|s| JsValue::from_str(s)).collect();
    async move { database().await?.transaction_with_str_sequence_and_mode(&names, mode).map_err(|e| error_text(&e)) }
}

/// Every (key, value) of `store` under `prefix`, in key order.
async fn pairs_under(
    transaction: &web_sys::IdbTransaction,
    store: &str,
    prefix: &str,
) -> Result<js_sys::Array, String> {
    let store = transaction.object_store(store).map_err(|e| error_text(&e))?;
    let range = keys_under(prefix)?;
    let keys = store.get_all_keys_with_key(&range).map_err(|e| error_text(&e))?;
    let values = store.get_all_with_key(&range).map_err(|e| error_text(&e))?;
    let (keys, values) = (js_sys::Array::from(&finished(&keys).await?), js_sys::Array::from(&finished(&values).await?));
    Ok(keys.iter().zip(values.iter()).map(|(k, v)| JsValue::from(js_sys::Array::of2(&k, &v))).collect())
}

/// What is stored of the model `link` names, as the workers read it (`worker::StoredLinks`);
/// an empty catalog that keeps nothing when the page has no store (the workers still keep
/// what they fetch for the run). None for a link that does not parse.
pub async fn catalog(link: &str) -> Option<JsValue> {
    let prefix = ModelLink::parse(link).ok()?.store_prefix();
    let read = async {
        let transaction = transaction(&[RECORDS, RANGES], web_sys::IdbTransactionMode::Readonly).await?;
        let records = pairs_under(&transaction, RECORDS, &prefix).await?;
        let ranges = pairs_under(&transaction, RANGES, &prefix).await?;
        Ok::<_, String>((records, ranges))
    };
    let (keeps, records, ranges) = match read.await {
        Ok((records, ranges)) => (true, records, ranges),
        Err(_) => (false, js_sys::Array::new(), js_sys::Array::new()),
    };
    let catalog = js_sys::Object::new();
    let _ = js_sys::Reflect::set(&catalog, &"prefix".into(), &JsValue::from_str(&prefix));
    let _ = js_sys::Reflect::set(&catalog, &"keeps".into(), &JsValue::from_bool(keeps));
    let _ = js_sys::Reflect::set(&catalog, &"records".into(), &records);
    let _ = js_sys::Reflect::set(&catalog, &"ranges".into(), &ranges);
    Some(catalog.into())
}

/// The bytes a catalog holds of the version `pinned` names (a Hub commit's; a web folder has
/// no version of its own, so all of its). Runs that overlap count each time, so this can pass
/// what they cover; a partly stored model taken for whole has each worker fetch what is missing.
pub fn stored_bytes(catalog: &JsValue, pinned: &str) -> f64 {
    let Ok(link) = ModelLink::parse(pinned) else { return 0.0 };
    let scope = match &link {
        ModelLink::Hub { revision, .. } => format!("{}{revision}/", link.store_prefix()),
        ModelLink::Web { .. } => link.store_prefix(),
    };
    ["records", "ranges"]
        .iter()
        .flat_map(|name| js_sys::Array::from(&field(catalog, name)).to_vec())
        .map(|pair| js_sys::Array::from(&pair))
        .filter(|pair| pair.get(0).as_string().is_some_and(|key| key.starts_with(&scope)))
        .filter_map(|pair| pair.get(1).dyn_into::<web_sys::Blob>().ok())
        .map(|blob| blob.size())
        .sum()
}

/// Keeps what a worker posted (`{store, key, value}`: text, a `Blob`, or bytes kept as one).
pub fn keep(message: &JsValue) {
    let (Some(store), Some(key)) = (field(message, "store").as_string(), field(message, "key").as_string()) else {
        return;
    };
    if store == RANGES && FULL.get() {
        return;
    }
    let value = field(message, "value");
    let value = match value.dyn_ref::<js_sys::Uint8Array>() {
        Some(bytes) => match web_sys::Blob::new_with_u8_array_sequence(&js_sys::Array::of1(bytes)) {
            Ok(blob) => JsValue::from(blob),
            Err(_) => return,
        },
        None => value,
    };
    write(move |transaction| {
        let store = transaction.object_store(&store).map_err(|e| error_text(&e))?;
        store.put_with_key(&value, &JsValue::from_str(&key)).map_err(|e| error_text(&e))?;
        Ok(())
    });
}

/// Names a stored model by the pinned link it was opened by (the list shows it).
pub fn name_model(pinned: &str) {
    let Ok(link) = ModelLink::parse(pinned) else { return };
    let (key, name) = (name_key(&link.store_prefix()), JsValue::from_str(pinned));
    write(move |transaction| {
        let store = transaction.object_store(RECORDS).map_err(|e| error_text(&e))?;
        store.put_with_key(&name, &JsValue::from_str(&key)).map_err(|e| error_text(&e))?;
        Ok(())
    });
}

/// One write, in a transaction of its own; the page hears how many are under way, and once
/// when the browser refuses one for want of room.
fn write(put: impl FnOnce(&web_sys::IdbTransaction) -> Result<(), String> + 'static) {
    PENDING.set(PENDING.get() + 1);
    if let Some(hooks) = hooks() {
        (hooks.on_pending)(PENDING.get());
    }
    wasm_bindgen_futures::spawn_local(async move {
        let result = match transaction(&[RECORDS, RANGES], web_sys::IdbTransactionMode::Readwrite).await {
            Ok(transaction) => match put(&transaction) {
                Ok(()) => committed(&transaction).await,
                Err(reason) => Err((String::new(), reason)),
            },
            Err(reason) => Err((String::new(), reason)),
        };
        if let Err((name, _)) = &result
            && name == "QuotaExceededError"
            && !FULL.replace(true)
        {
            let figures = estimate().await;
            if let Some(hooks) = hooks() {
                (hooks.on_full)(figures);
            }
        }
        PENDING.set(PENDING.get() - 1);
        if let Some(hooks) = hooks() {
            (hooks.on_pending)(PENDING.get());
        }
    });
}

/// The bytes the browser says this site uses and allows (`navigator.storage.estimate()`).
async fn estimate() -> Option<Usage> {
    let storage = field(&field(&web_sys::window()?.into(), "navigator"), "storage");
    let estimate = js_sys::Reflect::get(&storage, &"estimate".into()).ok()?.dyn_into::<js_sys::Function>().ok()?;
    let promise = estimate.call0(&storage).ok()?.dyn_into::<js_sys::Promise>().ok()?;
    let answer = JsFuture::from(promise).await.ok()?;
    Some(Usage { used: field(&answer, "usage").as_f64()?, allowed: field(&answer, "quota").as_f64()? })
}

/// The stored models, each with the bytes it holds.
pub async fn list() -> Result<Vec<StoredModel>, String> {
    let transaction = transaction(&[RECORDS, RANGES], web_sys::IdbTransactionMode::Readonly).await?;
    let records = transaction.object_store(RECORDS).map_err(|e| error_text(&e))?;
    let keys = js_sys::Array::from(&finished(&records.get_all_keys().map_err(|e| error_text(&e))?).await?);
    let mut models = Vec::new();
    for key in keys.iter().filter_map(|k| k.as_string()) {
        let Some(prefix) = key.strip_suffix("name").filter(|p| p.matches('/').count() == 2) else { continue };
        let name = finished(&records.get(&JsValue::from_str(&key)).map_err(|e| error_text(&e))?).await?;
        let mut bytes = 0.0;
        for store in [RECORDS, RANGES] {
            for pair in pairs_under(&transaction, store, prefix).await?.iter() {
                bytes += js_sys::Array::from(&pair).get(1).dyn_ref::<web_sys::Blob>().map_or(0.0, web_sys::Blob::size);
            }
        }
        models.push(StoredModel { prefix: prefix.to_string(), name: name.as_string().unwrap_or_default(), bytes });
    }
    Ok(models)
}

/// Removes everything stored of one model. Workers reading it meanwhile fetch what they read
/// again.
pub async fn remove(prefix: &str) -> Result<(), String> {
    let transaction = transaction(&[RECORDS, RANGES], web_sys::IdbTransactionMode::Readwrite).await?;
    for store in [RECORDS, RANGES] {
        let store = transaction.object_store(store).map_err(|e| error_text(&e))?;
        store.delete(&keys_under(prefix)?.into()).map_err(|e| error_text(&e))?;
    }
    committed(&transaction).await.map_err(|(_, reason)| reason)?;
    FULL.set(false);
    Ok(())
}
