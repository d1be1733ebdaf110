//! Opening a model on a native machine, by path or by link, as the command line and the Python
//! package both do (and running a sweep's units, `sweep`, with their Parquet files, `rows_file`): the same caches (the local Hugging Face cache, headprint's own), the same
//! `HF_*` variables and the same patience with servers. How progress and the network's notes
//! are shown is the caller's (`open::configure`).

pub mod describe;
#[cfg(unix)]
pub mod driver;
mod http;
pub mod open;
pub mod rows_file;
pub mod sweep;
