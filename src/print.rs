//! What the commands print: JSON, and the small pieces their tables share.

use headprint::{Error, Result};
use serde_json::Value;

pub use headprint_native::describe::{
    bos as describe_bos, mean_spread, sequences as describe_sequences, show, sources as describe_sources,
};

use crate::open::LinkFacts;

/// A value as JSON, typed or built with `json!`.
pub fn to_json(value: &impl serde::Serialize) -> Result<Value> {
    serde_json::to_value(value).map_err(|e| Error::Internal(e.to_string()))
}

/// One line of JSON on stdout. Every report passes through a `serde_json::Value`, whose objects
/// keep their keys sorted, so a typed report and one built with `json!` print alike.
pub fn print_json(value: &impl serde::Serialize) -> Result<()> {
    print_json_from(value, None)
}

/// A report with, for a model by link, its `model_link`: the pinned link and the bytes fetched.
pub fn print_json_from(value: &impl serde::Serialize, link: Option<&LinkFacts>) -> Result<()> {
    let mut value = to_json(value)?;
    if let (Some(link), Some(object)) = (link, value.as_object_mut()) {
        object.insert("model_link".into(), link.json());
    }
    println!("{}", serde_json::to_string(&value).map_err(|e| Error::Internal(e.to_string()))?);
    Ok(())
}
