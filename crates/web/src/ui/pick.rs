//! Choosing a heatmap cell with the pointer or the keyboard. Charts mark choosable cells with
//! `data-query` and `data-key` (see `svg::key_picker`); one handler on the chart's container
//! reads them from the event, so any chart that writes those attributes (or computes the cell
//! from pointer coordinates, as a canvas would) can call the same `on_cell`.

use wasm_bindgen::JsCast;
use web_sys::{Element, Event, KeyboardEvent};

/// The (query, key) cell an event happened on, from the nearest element carrying both
/// `data-query` and `data-key`.
pub fn cell_of(ev: &Event) -> Option<(usize, usize)> {
    let target: Element = ev.target()?.dyn_into().ok()?;
    let cell = target.closest("[data-query][data-key]").ok()??;
    let read = |name: &str| cell.get_attribute(name)?.parse().ok();
    Some((read("data-query")?, read("data-key")?))
}

/// Whether a key press activates the focused cell (Enter or Space, as for a button); the
/// page's own scrolling on Space is then prevented.
pub fn activates(ev: &KeyboardEvent) -> bool {
    let yes = matches!(ev.key().as_str(), "Enter" | " ");
    if yes {
        ev.prevent_default();
    }
    yes
}
