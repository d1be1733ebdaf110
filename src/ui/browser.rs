//! Thin wrappers over browser APIs: fetching the page's own files, reading user files,
//! downloading text, yielding to the event loop. Every failure is a message, never a panic.

use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

/// A JS exception as a one-line message.
pub fn js_message(value: &JsValue) -> String {
    if let Some(error) = value.dyn_ref::<js_sys::Error>() {
        return String::from(error.message());
    }
    value.as_string().unwrap_or_else(|| format!("{value:?}"))
}

/// Fetches one of the page's own static files.
pub async fn fetch_bytes(url: &str) -> Result<Vec<u8>, String> {
    let window = web_sys::window().ok_or("no window")?;
    let response =
        JsFuture::from(window.fetch_with_str(url)).await.map_err(|e| format!("{url}: {}", js_message(&e)))?;
    let response: web_sys::Response = response.dyn_into().map_err(|_| format!("{url}: not a response"))?;
    if !response.ok() {
        return Err(format!("{url}: HTTP {} {}", response.status(), response.status_text()));
    }
    let buffer = response.array_buffer().map_err(|e| format!("{url}: {}", js_message(&e)))?;
    let buffer = JsFuture::from(buffer).await.map_err(|e| format!("{url}: {}", js_message(&e)))?;
    Ok(js_sys::Uint8Array::new(&buffer).to_vec())
}

/// Reads a user's file fully into memory.
pub async fn read_file(file: &web_sys::File) -> Result<Vec<u8>, String> {
    let buffer = JsFuture::from(file.array_buffer())
        .await
        .map_err(|e| format!("{}: cannot read the file ({})", file.name(), js_message(&e)))?;
    Ok(js_sys::Uint8Array::new(&buffer).to_vec())
}

/// The files of a `FileList` (file input or drop).
pub fn file_list(list: Option<web_sys::FileList>) -> Vec<web_sys::File> {
    list.map(|list| (0..list.length()).filter_map(|i| list.get(i)).collect()).unwrap_or_default()
}

/// Lets the browser paint (a status line) before a long synchronous step.
pub async fn next_tick() {
    let promise = js_sys::Promise::new(&mut |resolve, _reject| {
        if let Some(window) = web_sys::window() {
            let _ = window.set_timeout_with_callback_and_timeout_and_arguments_0(&resolve, 0);
        } else {
            let _ = resolve.call0(&JsValue::NULL);
        }
    });
    let _ = JsFuture::from(promise).await;
}

/// Offers `text` as a file download (a `blob:` URL; nothing leaves the page).
pub fn download_text(file_name: &str, text: &str) -> Result<(), String> {
    let parts = js_sys::Array::of1(&JsValue::from_str(text));
    let options = web_sys::BlobPropertyBag::new();
    options.set_type("application/json");
    let blob = web_sys::Blob::new_with_str_sequence_and_options(&parts, &options).map_err(|e| js_message(&e))?;
    let url = web_sys::Url::create_object_url_with_blob(&blob).map_err(|e| js_message(&e))?;
    let document = web_sys::window().and_then(|w| w.document()).ok_or("no document")?;
    let anchor: web_sys::HtmlAnchorElement =
        document.create_element("a").map_err(|e| js_message(&e))?.dyn_into().map_err(|_| "not an anchor")?;
    anchor.set_href(&url);
    anchor.set_download(file_name);
    anchor.click();
    let _ = web_sys::Url::revoke_object_url(&url);
    Ok(())
}

/// Moves keyboard focus to the element with this id, if it exists.
pub fn focus_id(id: &str) {
    if let Some(element) = web_sys::window()
        .and_then(|w| w.document())
        .and_then(|d| d.get_element_by_id(id))
        .and_then(|e| e.dyn_into::<web_sys::HtmlElement>().ok())
    {
        let _ = element.focus();
    }
}

/// The `data-head` attribute of an event's target or its nearest ancestor (clicks inside SVG).
pub fn data_head_of(event: &web_sys::Event) -> Option<String> {
    let element: web_sys::Element = event.target()?.dyn_into().ok()?;
    element.closest("[data-head]").ok().flatten()?.get_attribute("data-head")
}
