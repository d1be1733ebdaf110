//! Mistral: Llama's layout and a sliding window on every layer (`sliding_window`; v0.1's is
//! 4096, later versions set it to null).

use super::super::{Blueprint, Reader};
use super::llama::llama_shaped;
use super::{Family, Layout, layer_attention, require, windows};
use crate::Result;

pub(super) const FAMILY: Family =
    Family { name: "mistral", model_types: &["mistral"], marker: None, mlp_parts: &[".mlp."], blueprint };

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "Mistral")?;
    llama_shaped(reader, json, "mistral", false, |config, sizes| {
        let windows = windows(json, sizes.layers, |_| true)?;
        config.features.layers = layer_attention(windows, vec![None; sizes.layers]);
        Ok(Layout::llama())
    })
}
