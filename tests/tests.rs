//! Every integration test, in one test binary (one link of the core and the CLI instead of one
//! per file). Each file is a module: `cargo test --release --test tests cli::` runs one of them.

mod common;
mod hub_imitation;

mod bad_input;
mod between;
mod cli;
mod demo_model;
mod families;
mod figures;
mod gpu;
mod gpu_probes;
mod gram_precision;
mod hostile_tokens;
mod hub;
mod hub_layouts;
mod properties;
mod reference;
mod stream;
mod sweep;
mod timeline;
mod verdicts;
mod worker_session;
