//! The printed handout: under `@media print` the page drops its controls and shows the current
//! view's charts and tables with the share link, as text and as a QR code drawn here (the
//! `qrcode` crate's SVG renderer; nothing leaves the tab).

use leptos::prelude::*;
use qrcode::render::svg;
use qrcode::{EcLevel, QrCode};

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

/// Shown only in print: the share link of what is printed, and its QR code.
#[component]
pub fn PrintHandout() -> impl IntoView {
    let ctx = expect_context::<Ctx>();
    move || {
        let url = format!("{}{}", page_address(), link::fragment(ctx)?);
        let qr = match qr_svg(&url) {
            Ok(svg) => view! { <div class="qr" id="print-qr" inner_html=svg></div> }.into_any(),
            Err(e) => view! { <p class="note">{e}</p> }.into_any(),
        };
        Some(view! {
            <section class="print-only" id="print-handout">
                <h3>"Open this view"</h3>
                {qr}
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
