//! The arithmetic of the tab's worker pool, as plain Rust (the page's side, which sends the parts
//! to the workers, is `crates/web/src/ui/pool.rs`). The pool splits the two large stages of a load:
//! the Grams into segments of vocabulary rows and the fingerprint into layers; the induction probe
//! splits into shares of its sequences. Whatever worker computed which part, and in whatever order
//! the parts come back, the results are the bits of one worker doing it all: each segment is summed
//! from zero and the segments are added in order ([`GramSum`]), as `Grams::stream_with_progress`
//! adds them; each head is computed alone; each probe sequence is run alone and the shares are
//! averaged in sequence order ([`combine_induction`]).

use std::collections::BTreeMap;

use crate::analysis::circuits::Grams;
use crate::analysis::fingerprint::assemble_fingerprint;
use crate::analysis::{HeadFingerprint, Mode, ModelFingerprint};
use crate::backend::{BackendInfo, BytesMoved};
use crate::model::ModelConfig;
use crate::probes::induction::induction_report;
use crate::worker::protocol::{InductionRun, InductionShare};
use crate::{Error, Result};

/// The Grams of a model summed from its segments as they arrive, in segment order.
pub struct GramSum {
    total: Grams,
    segments: usize,
    /// The next segment to add; later ones wait.
    next: usize,
    waiting: BTreeMap<usize, Grams>,
}

impl GramSum {
    pub fn new(d_model: usize, tied: bool, segments: usize) -> GramSum {
        GramSum { total: Grams::zeros(d_model, tied), segments, next: 0, waiting: BTreeMap::new() }
    }

    /// Takes segment `segment`'s Grams; adds every segment that is now next in order.
    pub fn add(&mut self, segment: usize, part: Grams) -> Result<()> {
        if segment >= self.segments || segment < self.next || self.waiting.contains_key(&segment) {
            return Err(Error::Worker(format!("Gram segment {segment} came twice or does not exist")));
        }
        self.waiting.insert(segment, part);
        while let Some(part) = self.waiting.remove(&self.next) {
            self.total.add(&part)?;
            self.next += 1;
        }
        Ok(())
    }

    /// The Grams, once every segment is in.
    pub fn finish(self) -> Result<Grams> {
        match self.next == self.segments {
            true => Ok(self.total),
            false => Err(Error::Worker(format!("{} of {} Gram segments came back", self.next, self.segments))),
        }
    }
}

/// A model's heads collected a layer at a time, in any order, with the bytes the layers'
/// products moved to and from the workers' GPUs.
pub struct LayerHeads {
    layers: Vec<Option<Vec<HeadFingerprint>>>,
    gpu_bytes: Option<BytesMoved>,
}

impl LayerHeads {
    pub fn new(layers: usize) -> LayerHeads {
        LayerHeads { layers: vec![None; layers], gpu_bytes: None }
    }

    pub fn add(&mut self, layer: usize, heads: Vec<HeadFingerprint>, gpu_bytes: Option<BytesMoved>) -> Result<()> {
        match self.layers.get_mut(layer) {
            Some(slot @ None) => {
                *slot = Some(heads);
                if let Some((to, from)) = gpu_bytes {
                    let (to_before, from_before) = self.gpu_bytes.unwrap_or_default();
                    self.gpu_bytes = Some((to_before + to, from_before + from));
                }
                Ok(())
            }
            _ => Err(Error::Worker(format!("layer {layer}'s heads came twice or the layer does not exist"))),
        }
    }

    /// The fingerprint, heads in order, once every layer is in.
    pub fn finish(
        self,
        config: &ModelConfig,
        parameters: u64,
        backend: &BackendInfo,
        mode: Mode,
    ) -> Result<ModelFingerprint> {
        let missing = self.layers.iter().filter(|l| l.is_none()).count();
        if missing > 0 {
            return Err(Error::Worker(format!("{missing} layers' heads did not come back")));
        }
        let heads = self.layers.into_iter().flatten().flatten().collect();
        let mut fingerprint = assemble_fingerprint(config, parameters, backend, mode, heads);
        if let Some(moved) = self.gpu_bytes {
            fingerprint.backend.add_stage("heads", moved);
        }
        Ok(fingerprint)
    }
}

/// An induction probe's run from its shares, in share order (share i holds the sequences
/// before share i + 1's): the first share's error if any failed, else the sequences averaged.
pub fn combine_induction(shares: Vec<InductionShare>) -> InductionRun {
    let Some(first) = shares.first() else {
        return InductionRun {
            sequence: String::new(),
            report: Err("no share of the induction probe came back".into()),
        };
    };
    let (sequence, bos) = (first.sequence.clone(), first.bos);
    let report =
        shares.into_iter().map(|share| share.scores).collect::<std::result::Result<Vec<_>, String>>().and_then(
            |scores| induction_report(bos, scores.into_iter().flatten().collect()).map_err(|e| e.to_string()),
        );
    InductionRun { sequence, report }
}
