//! headprint's page: the views (Leptos, client-side rendering) over the core, and the browser
//! host of its analysis workers. One wasm module runs both: the page starts at `ui`'s start
//! function, each worker at [`worker_main`].
//!
//! Browser-only: natively the crate is empty, so the workspace's native commands skip it.
#![cfg(target_arch = "wasm32")]

mod js;
mod stored;
pub mod ui;
mod webgpu;
mod worker_host;

pub use worker_host::worker_main;
