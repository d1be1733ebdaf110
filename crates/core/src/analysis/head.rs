//! Head names as TransformerLens writes them: `L{layer}H{head}`, zero-based.

use std::fmt;

use crate::model::ModelConfig;
use crate::{Error, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct HeadId {
    pub layer: usize,
    pub head: usize,
}

impl HeadId {
    pub fn new(layer: usize, head: usize) -> Self {
        Self { layer, head }
    }

    /// Parses `L5H0` (case-insensitive) and checks it exists in the model.
    pub fn parse(name: &str, config: &ModelConfig) -> Result<Self> {
        Self::parse_within(name, config.layers, config.heads)
    }

    /// Parses `L5H0` (case-insensitive) and checks it lies within `layers` x `heads`.
    pub fn parse_within(name: &str, layers: usize, heads: usize) -> Result<Self> {
        let unknown = || Error::UnknownHead { name: name.into(), layers, heads };
        let upper = name.trim().to_ascii_uppercase();
        let rest = upper.strip_prefix('L').ok_or_else(unknown)?;
        let (layer, head) = rest.split_once('H').ok_or_else(unknown)?;
        let layer: usize = layer.parse().map_err(|_| unknown())?;
        let head: usize = head.parse().map_err(|_| unknown())?;
        if layer >= layers || head >= heads {
            return Err(unknown());
        }
        Ok(Self { layer, head })
    }

    /// Every head, layer-major.
    pub fn all(config: &ModelConfig) -> impl Iterator<Item = HeadId> + use<> {
        let heads = config.heads;
        (0..config.layers).flat_map(move |layer| (0..heads).map(move |head| HeadId { layer, head }))
    }
}

impl fmt::Display for HeadId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "L{}H{}", self.layer, self.head)
    }
}
