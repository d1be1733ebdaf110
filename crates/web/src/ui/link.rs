//! Share links: the URL's fragment holds the view (model, tab, head, metric, mode, sequence, BOS
//! switch, induction-head threshold, suite or, deflated, a teacher's sheet, prompt, the Circuits
//! tab's kind, colour and edges' ratio, a forced backend, and the repository and revisions the compare tab follows over training), so a link
//! opens the same view. A local model is named by its file name and the first digits of its
//! SHA-256; the page asks for the file and checks the hash. The text itself is read and written
//! by the core (crates/core/src/link.rs).

use leptos::prelude::*;
use wasm_bindgen::JsValue;

use super::state::{Awaited, CircuitColour, Ctx, Identity, Origin, Sequence, Tab};
use headprint::analysis::Mode;
use headprint::backend::BackendChoice;
use headprint::figures::metric::Metric;
use headprint::link::{self, encode_component};
use headprint::probes::Suite;
use headprint::probes::exercise::link_form;
use headprint::weights::remote::HUB_ENDPOINT;

/// Hex digits of the SHA-256 a link keeps (48 bits: enough to tell files apart by accident).
pub const HASH_DIGITS: usize = 12;

/// The fragment for the current view.
pub fn fragment(ctx: Ctx) -> Option<String> {
    let loaded = ctx.loaded.get()?;
    let mut parts = match &loaded.origin {
        Origin::Demo => vec!["model=demo".to_string()],
        Origin::Link { pinned, hub, .. } => {
            let mut parts = vec![format!("model={}", encode_component(pinned))];
            parts.extend(hub.as_ref().map(|hub| format!("hub={}", encode_component(hub))));
            parts
        }
        Origin::Local { name, sha256 } => {
            let mut parts = vec!["model=file".into(), format!("name={}", encode_component(name.as_str()))];
            // While the hashing worker runs, the link names the file alone; the hash joins it
            // when known (this reruns: `sha256` is a signal).
            if let Identity::Known(hex) = sha256.get() {
                parts.push(format!("sha256={}", &hex[..HASH_DIGITS.min(hex.len())]));
            }
            parts
        }
    };
    parts.push(format!("tab={}", ctx.tab.get().key()));
    parts.push(format!("head={}", ctx.head.get()));
    parts.push(format!("metric={}", ctx.metric.get().key()));
    parts.push(format!("mode={}", ctx.mode.get().name()));
    parts.push(format!("seq={}", ctx.sequence.get().key()));
    parts.push(format!("bos={}", if ctx.prepend_bos.get() { "on" } else { "off" }));
    parts.push(format!("threshold={}", ctx.threshold.get()));
    let suite = ctx.suite.get();
    if Suite::BUILTIN.contains(&suite.name.as_str()) {
        parts.push(format!("suite={}", encode_component(&suite.name)));
    } else {
        // A teacher's suite or exercise sheet travels compressed, when it fits (else: JSON file).
        if let Some(sheet) = link_form(&suite) {
            parts.push(format!("sheet={sheet}"));
        }
    }
    parts.push(format!("prompt={}", encode_component(&ctx.prompt.get())));
    if let Some((repo, revisions)) = ctx.timeline_asked.get() {
        parts.push(format!("timeline={}", encode_component(&repo)));
        parts.push(format!("revisions={}", encode_component(&revisions.join(","))));
        // The timeline's revisions come from the Hub the page reads, which the link must name
        // when it is not the public one (a model by link names it already).
        let hub = ctx.hub.get();
        if hub != HUB_ENDPOINT && !parts.iter().any(|p| p.starts_with("hub=")) {
            parts.push(format!("hub={}", encode_component(&hub)));
        }
    }
    // The Circuits tab's view: its kind, colour and edges' ratio (other tabs' links stay as
    // they were).
    if ctx.tab.get() == Tab::Circuits {
        parts.push(format!("kind={}", ctx.circuit_kind.get().name()));
        parts.push(format!("colour={}", ctx.circuit_colour.get().key()));
        parts.push(format!("ratio={}", ctx.edge_ratio.get()));
    }
    // Auto is the default, left out so links stay as they were; a forced backend travels.
    match ctx.backend.get() {
        BackendChoice::Auto => {}
        BackendChoice::Gpu => parts.push("backend=gpu".into()),
        BackendChoice::Cpu => parts.push("backend=cpu".into()),
    }
    Some(format!("#{}", parts.join("&")))
}

/// Writes the view into the address bar without adding a history entry.
pub fn write(fragment: &str) {
    if let Some(window) = web_sys::window()
        && let Ok(history) = window.history()
    {
        let _ = history.replace_state_with_url(&JsValue::NULL, "", Some(fragment));
    }
}

/// What a share link asks the page to open first.
pub enum Opening {
    /// The demo model (also while a link waits for a local file to be opened).
    Demo,
    /// A model by link.
    Link(String),
}

/// Applies a link's fragment to the page; returns what it asks to open.
pub fn apply(ctx: Ctx, fragment: &str) -> Opening {
    let fields = link::parse(fragment);
    if let Some(hub) = fields.hub {
        ctx.hub.set(hub.trim_end_matches('/').to_string());
    }
    if let Some(tab) = fields.tab.as_deref().and_then(Tab::from_key) {
        ctx.tab.set(tab);
    }
    if fields.head.is_some() {
        ctx.linked_head.set(fields.head);
    }
    if let Some(metric) = fields.metric.as_deref().and_then(Metric::from_key) {
        ctx.metric.set(metric);
    }
    if let Some(mode) = fields.mode {
        ctx.mode.set(if mode == "raw" { Mode::Raw } else { Mode::Folded });
    }
    if let Some(sequence) = fields.sequence.as_deref().and_then(Sequence::from_key) {
        ctx.sequence.set(sequence);
    }
    if let Some(prepend_bos) = fields.prepend_bos {
        ctx.prepend_bos.set(prepend_bos);
    }
    if let Some(threshold) = fields.threshold {
        ctx.threshold.set(threshold);
    }
    if let Some(suite) = fields.suite {
        ctx.suite.set(suite);
    }
    match fields.sheet {
        Some(Ok(suite)) => ctx.suite.set(suite),
        Some(Err(e)) => report_after_load(ctx, e.to_string()),
        None => {}
    }
    if let Some(prompt) = fields.prompt {
        ctx.prompt.set(prompt);
    }
    if let Some(backend) = fields.backend {
        ctx.backend.set(backend);
    }
    if let Some(kind) = fields.circuit_kind {
        ctx.circuit_kind.set(kind);
    }
    if let Some(colour) = fields.circuit_colour.as_deref().and_then(CircuitColour::from_key) {
        ctx.circuit_colour.set(colour);
    }
    if let Some(ratio) = fields.edge_ratio {
        ctx.edge_ratio.set(ratio);
    }
    if let Some(repo) = fields.timeline
        && !fields.revisions.is_empty()
    {
        ctx.timeline_asked.set(Some((repo, fields.revisions)));
    }
    if let Some(model_link) = fields.model_link {
        return Opening::Link(model_link);
    }
    if !fields.wants_demo {
        ctx.awaited.set(Some(Awaited {
            name: fields.name.unwrap_or_else(|| "a local model".into()),
            sha256_prefix: fields.sha256.unwrap_or_default(),
        }));
    }
    Opening::Demo
}

/// Shows `message` on the error line once the first model is shown (showing a model clears
/// that line, so a message set before would vanish unread).
fn report_after_load(ctx: Ctx, message: String) {
    Effect::new(move |reported: Option<bool>| {
        if reported == Some(true) || ctx.loaded.with(Option::is_none) {
            return reported.unwrap_or(false);
        }
        ctx.show_error(message.clone());
        true
    });
}

/// The fragment the page was opened with.
pub fn current() -> String {
    web_sys::window().and_then(|w| w.location().hash().ok()).unwrap_or_default()
}
