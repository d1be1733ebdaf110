//! Thin wrappers over browser APIs: fetching the page's own files, reading user files,
//! downloads (text, SVG drawn to PNG), focus. Every failure is a message, never a panic.

use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_futures::JsFuture;

use crate::js::js_message;

/// Fetches one of the page's own static files.
async fn fetch_response(url: &str) -> Result<web_sys::Response, String> {
    let window = web_sys::window().ok_or("no window")?;
    let response =
        JsFuture::from(window.fetch_with_str(url)).await.map_err(|e| format!("{url}: {}", js_message(&e)))?;
    let response: web_sys::Response = response.dyn_into().map_err(|_| format!("{url}: not a response"))?;
    if !response.ok() {
        return Err(format!("{url}: HTTP {} {}", response.status(), response.status_text()));
    }
    Ok(response)
}

/// One of the page's own files as a `Blob` (the worker reads it by byte range).
pub async fn fetch_blob(url: &str) -> Result<web_sys::Blob, String> {
    let promise = fetch_response(url).await?.blob().map_err(|e| format!("{url}: {}", js_message(&e)))?;
    let blob = JsFuture::from(promise).await.map_err(|e| format!("{url}: {}", js_message(&e)))?;
    blob.dyn_into().map_err(|_| format!("{url}: not a blob"))
}

/// One of the page's own text files.
pub async fn fetch_text(url: &str) -> Result<String, String> {
    let promise = fetch_response(url).await?.text().map_err(|e| format!("{url}: {}", js_message(&e)))?;
    let text = JsFuture::from(promise).await.map_err(|e| format!("{url}: {}", js_message(&e)))?;
    text.as_string().ok_or_else(|| format!("{url}: not text"))
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

/// Offers a blob as a file download (a `blob:` URL; nothing leaves the page).
fn download_blob(file_name: &str, blob: &web_sys::Blob) -> Result<(), String> {
    let url = web_sys::Url::create_object_url_with_blob(blob).map_err(|e| js_message(&e))?;
    let offered = download_url(file_name, &url);
    let _ = web_sys::Url::revoke_object_url(&url);
    offered
}

/// Offers what a page-local URL (`blob:` or `data:`) holds as a file download.
pub fn download_url(file_name: &str, url: &str) -> Result<(), String> {
    let document = web_sys::window().and_then(|w| w.document()).ok_or("no document")?;
    let anchor: web_sys::HtmlAnchorElement =
        document.create_element("a").map_err(|e| js_message(&e))?.dyn_into().map_err(|_| "not an anchor")?;
    anchor.set_href(url);
    anchor.set_download(file_name);
    anchor.click();
    Ok(())
}

fn text_blob(text: &str, mime: &str) -> Result<web_sys::Blob, String> {
    let parts = js_sys::Array::of1(&JsValue::from_str(text));
    let options = web_sys::BlobPropertyBag::new();
    options.set_type(mime);
    web_sys::Blob::new_with_str_sequence_and_options(&parts, &options).map_err(|e| js_message(&e))
}

/// Offers `text` as a file download, with its MIME type.
pub fn download_text(file_name: &str, text: &str, mime: &str) -> Result<(), String> {
    download_blob(file_name, &text_blob(text, mime)?)
}

/// Draws an SVG chart on a canvas at `scale`x and offers it as a PNG download.
pub async fn download_png(file_name: &str, svg: &str, scale: f64) -> Result<(), String> {
    let document = web_sys::window().and_then(|w| w.document()).ok_or("no document")?;
    let url =
        web_sys::Url::create_object_url_with_blob(&text_blob(svg, "image/svg+xml")?).map_err(|e| js_message(&e))?;
    let image = web_sys::HtmlImageElement::new().map_err(|e| js_message(&e))?;
    let loaded = js_sys::Promise::new(&mut |resolve, reject| {
        image.set_onload(Some(&resolve));
        image.set_onerror(Some(&reject));
    });
    image.set_src(&url);
    let decoded = JsFuture::from(loaded).await;
    let _ = web_sys::Url::revoke_object_url(&url);
    decoded.map_err(|_| "the chart could not be drawn as an image".to_string())?;
    let canvas: web_sys::HtmlCanvasElement =
        document.create_element("canvas").map_err(|e| js_message(&e))?.dyn_into().map_err(|_| "not a canvas")?;
    let (width, height) = (image.natural_width() as f64 * scale, image.natural_height() as f64 * scale);
    canvas.set_width(width as u32);
    canvas.set_height(height as u32);
    let context: web_sys::CanvasRenderingContext2d = canvas
        .get_context("2d")
        .map_err(|e| js_message(&e))?
        .ok_or("no 2d canvas")?
        .dyn_into()
        .map_err(|_| "not a 2d context")?;
    context.set_fill_style_str("#ffffff");
    context.fill_rect(0.0, 0.0, width, height);
    context
        .draw_image_with_html_image_element_and_dw_and_dh(&image, 0.0, 0.0, width, height)
        .map_err(|e| js_message(&e))?;
    let data_url = canvas.to_data_url_with_type("image/png").map_err(|e| js_message(&e))?;
    let anchor: web_sys::HtmlAnchorElement =
        document.create_element("a").map_err(|e| js_message(&e))?.dyn_into().map_err(|_| "not an anchor")?;
    anchor.set_href(&data_url);
    anchor.set_download(file_name);
    anchor.click();
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

/// Whether the browser says it is online (`navigator.onLine`; true when it does not say).
pub fn online() -> bool {
    web_sys::window().is_none_or(|window| window.navigator().on_line())
}
