//! DeepSeek V2 / V3 are refused: their latent attention compresses keys and values through a
//! shared low-rank projection, with a rotary key shared by the heads and query/key heads wider
//! than the value heads, so a head has no W_Q W_K^T or W_V W_O of the shapes the circuits use.

use super::super::{Blueprint, Reader};
use super::Family;
use crate::{Error, Result};

pub(super) const FAMILY: Family = Family {
    name: "deepseek",
    model_types: &["deepseek_v2", "deepseek_v3"],
    marker: None,
    mlp_parts: &[".mlp."],
    blueprint,
};

fn blueprint(_: &Reader, _: Option<&serde_json::Value>) -> Result<Blueprint> {
    Err(Error::BadModel(
        "DeepSeek's latent attention (deepseek_v2, deepseek_v3) is not supported: its heads read keys and values \
         through a shared low-rank latent and a rotary key shared by all heads, so they have no per-head QK and OV \
         circuits of the shapes headprint analyses"
            .into(),
    ))
}
