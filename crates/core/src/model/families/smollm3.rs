//! SmolLM3: Llama's layout, with no positional embedding on some layers (`no_rope_layers[l]`:
//! 1 rotary, 0 NoPE; by default every fourth layer is NoPE).

use super::super::{Blueprint, Positions, Reader};
use super::llama::llama_shaped;
use super::{Family, Layout, flag, layer_attention, require, windows};
use crate::{Error, Result};

pub(super) const FAMILY: Family =
    Family { name: "smollm3", model_types: &["smollm3"], marker: None, mlp_parts: &[".mlp."], blueprint };

fn blueprint(reader: &Reader, config: Option<&serde_json::Value>) -> Result<Blueprint> {
    let json = require(config, "SmolLM3")?;
    llama_shaped(reader, json, "smollm3", true, |config, sizes| {
        let interval = super::super::config_usize(json, &["no_rope_layer_interval"]).unwrap_or(4).max(1);
        let rope: Vec<bool> = match json.get("no_rope_layers") {
            Some(serde_json::Value::Array(items)) => {
                if items.len() != sizes.layers {
                    return Err(Error::BadConfig(format!(
                        "`no_rope_layers` lists {} layers but the model has {}",
                        items.len(),
                        sizes.layers
                    )));
                }
                items.iter().map(|v| v.as_u64().unwrap_or(1) != 0).collect()
            }
            _ => (0..sizes.layers).map(|l| (l + 1) % interval != 0).collect(),
        };
        // Without `layer_types`, transformers slides the NoPE layers when the window is on.
        let windows = match flag(json, "use_sliding_window", false) {
            true => windows(json, sizes.layers, |l| !rope[l])?,
            false => vec![None; sizes.layers],
        };
        let positions = rope.into_iter().map(|r| (!r).then_some(Positions::Nope)).collect();
        config.features.layers = layer_attention(windows, positions);
        Ok(Layout::llama())
    })
}
