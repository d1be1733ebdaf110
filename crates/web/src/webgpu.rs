//! The few browser calls wgpu does not make for the core's GPU backend, on the worker's or the
//! window's `navigator.gpu`: whether WebGPU is there at all, and how the browser names its adapter.

use wasm_bindgen::{JsCast, JsValue};

/// Gives the core's GPU backend these calls; the page and every worker call it as they start.
pub fn register() {
    #[cfg(feature = "gpu")]
    headprint::backend::gpu::set_browser_gpu(headprint::backend::gpu::BrowserGpu {
        has_webgpu,
        describe_adapter: || Box::pin(adapter_description()),
    });
}

fn get(object: &JsValue, key: &str) -> JsValue {
    js_sys::Reflect::get(object, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

fn gpu() -> JsValue {
    get(&get(&js_sys::global(), "navigator"), "gpu")
}

fn has_webgpu() -> bool {
    !gpu().is_undefined()
}

/// "vendor architecture [description]" of the adapter `requestAdapter` gives (the one wgpu
/// was given with the same options), or None.
async fn adapter_description() -> Option<String> {
    let gpu = gpu();
    let request = get(&gpu, "requestAdapter").dyn_into::<js_sys::Function>().ok()?;
    let options = js_sys::Object::new();
    js_sys::Reflect::set(&options, &"powerPreference".into(), &"high-performance".into()).ok()?;
    let promise = request.call1(&gpu, &options).ok()?.dyn_into::<js_sys::Promise>().ok()?;
    let adapter = wasm_bindgen_futures::JsFuture::from(promise).await.ok()?;
    let info = get(&adapter, "info");
    let parts: Vec<String> = ["vendor", "architecture", "description"]
        .iter()
        .filter_map(|key| get(&info, key).as_string())
        .map(|part| part.trim().to_string())
        .filter(|part| !part.is_empty())
        .collect();
    (!parts.is_empty()).then(|| parts.join(" "))
}
