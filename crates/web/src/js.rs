//! Small helpers over JavaScript values that the page, its workers and the page's store all
//! use: a property of a message, an exception as one line, a `Blob`'s bytes.

use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

/// A property of a message object (the page reads the worker's messages the same way).
pub(crate) fn field(data: &JsValue, key: &str) -> JsValue {
    js_sys::Reflect::get(data, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// A JS exception as a one-line message.
pub(crate) fn js_message(value: &JsValue) -> String {
    match value.dyn_ref::<js_sys::Error>() {
        Some(error) => String::from(error.message()),
        None => value.as_string().unwrap_or_else(|| format!("{value:?}")),
    }
}

/// Bytes `from..to` of a `Blob`, read synchronously (workers only); fewer where it ends first.
pub(crate) fn read_blob(blob: &web_sys::Blob, from: u64, to: u64) -> std::result::Result<Vec<u8>, JsValue> {
    let slice = blob.slice_with_f64_and_f64(from as f64, to as f64)?;
    let buffer = web_sys::FileReaderSync::new()?.read_as_array_buffer(&slice)?;
    Ok(js_sys::Uint8Array::new(&buffer).to_vec())
}
