//! The page's analysis worker: a Web Worker that holds the loaded models and does every heavy
//! computation, so the page never freezes. `protocol` is what page and worker say, `session`
//! answers it from the core (plain Rust, tested natively), one handler a request; the model it
//! holds and what is computed from it is `held`, opening one `opening`, the memory estimates and
//! budgets `memory`, the files' SHA-256 `hashing`, the backend it keeps `backends`, and the
//! stages' busy lines and the default probe `stages`. `pool` is the arithmetic of the pool
//! of such workers the page runs (segments of the Grams, layers of heads). The browser glue (the
//! messages, reading `File`s by byte range) is the page crate's `worker_host.rs`, and the page's
//! side of the pool its `ui/pool.rs`.

mod backends;
mod hashing;
mod held;
pub mod memory;
mod opening;
pub mod pool;
pub mod protocol;
pub mod session;
pub mod stages;
