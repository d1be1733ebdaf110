//! The printed handout: under `@media print` the page drops its controls and shows the current
//! view's charts and tables with the share link, as text and as a QR code drawn here (the
//! `qrcode` crate's SVG renderer; nothing leaves the tab).
//!
//! The QR code is drawn only when the page prints (`beforeprint`, or the print media query starting
//! to match), not on every change of the link: for a long prompt the link is over a thousand
//! characters and its QR code is slow enough to lengthen the frame of the click that ran the
//! prompt.

use leptos::prelude::*;
use qrcode::render::svg;
use qrcode::{EcLevel, QrCode};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::Closure;

use super::link;
use super::state::Ctx;

/// The page's address without its fragment.
fn page_address() -> String {
    let href = web_sys::window().and_then(|w| w.location().href().ok()).unwrap_or_default();
    href.split('#').next().unwrap_or_default().to_string()
}

/// The QR code of `text` as SVG; medium error correction when it fits, low for long links.
fn qr_svg(text: &str) -> Result<String, String> {
    let code = QrCode::with_error_correction_level(text.as_bytes(), EcLevel::M)
        .or_else(|_| QrCode::with_error_correction_level(text.as_bytes(), EcLevel::L))
        .map_err(|e| format!("the link is too long for a QR code ({e}); type it instead"))?;
    Ok(code.render::<svg::Color>().min_dimensions(180, 180).quiet_zone(true).build())
}

/// Draws the QR code of `url` into `#print-qr` (or says why there is none), at once: called
/// from `beforeprint`, which may run inside `window.print()`, before the reactive graph has a
/// chance to update the page.
fn draw_qr(url: &str) {
    let Some(element) = web_sys::window().and_then(|w| w.document()).and_then(|d| d.get_element_by_id("print-qr"))
    else {
        return;
    };
    match qr_svg(url) {
        Ok(svg) => element.set_inner_html(&svg),
        Err(e) => element.set_inner_html(&format!("<p class=\"note\">{}</p>", html_escape(&e))),
    }
}

fn html_escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// Calls `on_change(matches)` whenever the print media query starts or stops matching (an
/// emulated print medium fires no `beforeprint`). Through `js_sys` since web-sys's
/// `MediaQueryList` is not among the enabled features; a browser without `matchMedia` simply
/// relies on `beforeprint`.
fn watch_print_media(on_change: impl Fn(bool) + 'static) {
    let Some(window) = web_sys::window() else { return };
    let query = js_sys::Reflect::get(&window, &"matchMedia".into())
        .ok()
        .and_then(|f| f.dyn_into::<js_sys::Function>().ok())
        .and_then(|f| f.call1(&window, &"print".into()).ok());
    let Some(query) = query else { return };
    let listener = Closure::<dyn Fn(web_sys::Event)>::new(move |event: web_sys::Event| {
        let matches = js_sys::Reflect::get(&event, &"matches".into()).ok().and_then(|m| m.as_bool());
        on_change(matches.unwrap_or(false));
    });
    let target: web_sys::EventTarget = query.unchecked_into();
    let _ = target.add_event_listener_with_callback("change", listener.as_ref().unchecked_ref());
    // The page lives as long as the tab: the listener is never removed.
    listener.forget();
}

/// Shown only in print: the share link of what is printed, and its QR code.
#[component]
pub fn PrintHandout() -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    let url = Memo::new(move |_| link::fragment(ctx).map(|fragment| format!("{}{fragment}", page_address())));
    // Whether the page is being printed (or shown as print media): the QR code follows the
    // link only then.
    let printing = RwSignal::new(false);
    watch_print_media(move |matches| printing.set(matches));
    let before = Closure::<dyn Fn()>::new(move || {
        printing.set(true);
        if let Some(url) = url.get_untracked() {
            draw_qr(&url);
        }
    });
    let after = Closure::<dyn Fn()>::new(move || printing.set(false));
    if let Some(window) = web_sys::window() {
        let _ = window.add_event_listener_with_callback("beforeprint", before.as_ref().unchecked_ref());
        let _ = window.add_event_listener_with_callback("afterprint", after.as_ref().unchecked_ref());
    }
    before.forget();
    after.forget();
    Effect::new(move |_| {
        if printing.get()
            && let Some(url) = url.get()
        {
            draw_qr(&url);
        }
    });
    move || {
        let url = url.get()?;
        Some(view! {
            <section class="print-only" id="print-handout">
                <h3>"Open this view"</h3>
                <div class="qr" id="print-qr"></div>
                <p class="print-link" id="print-link">{url}</p>
            </section>
        })
    }
}

/// Opens the browser's print dialog (the handout is the print style of the page).
pub fn print_page() {
    if let Some(window) = web_sys::window() {
        let _ = window.print();
    }
}
