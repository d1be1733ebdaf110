//! The page's analysis worker: a Web Worker that holds the loaded models and does every heavy
//! computation, so the page never freezes. `protocol` is what page and worker say, `session`
//! answers it from the core (plain Rust, tested natively), `host` is the browser glue (messages,
//! reading `File`s by byte range with `FileReaderSync`). `pool` is the arithmetic of the pool of
//! such workers the page runs (segments of the Grams, layers of heads; the page's side is
//! `src/ui/pool.rs`).

pub mod pool;
pub mod protocol;
pub mod session;

#[cfg(target_arch = "wasm32")]
mod host;
#[cfg(target_arch = "wasm32")]
pub use host::worker_main;
#[cfg(target_arch = "wasm32")]
pub(crate) use host::{field, js_message};
