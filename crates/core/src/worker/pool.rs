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
use crate::backend::{BackendChoice, BackendInfo, BytesMoved};
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

/// The backend a loaded model's later work asks for (its layers' products, its probes): a GPU
/// when its Grams were computed on one, else the CPU, so a GPU the load did not find (or that
/// `auto` passed over) is not looked for again in every worker.
pub fn backend_found(grams: &BackendInfo) -> BackendChoice {
    if grams.name == "gpu" { BackendChoice::Gpu } else { BackendChoice::Cpu }
}

/// An induction probe's run from its shares, in share order (share i holds the sequences
/// before share i + 1's): the first share's error if any failed, else the sequences averaged.
pub fn combine_induction(shares: Vec<InductionShare>) -> InductionRun {
    let Some(first) = shares.first() else {
        return InductionRun::failed(String::new(), "no share of the induction probe came back".into());
    };
    let (sequence, bos, backend) = (first.sequence.clone(), first.bos, shares_backend(&shares));
    let report =
        shares.into_iter().map(|share| share.scores).collect::<std::result::Result<Vec<_>, String>>().and_then(
            |scores| induction_report(bos, scores.into_iter().flatten().collect()).map_err(|e| e.to_string()),
        );
    InductionRun { sequence, report, backend }
}

/// What ran a probe's shares: theirs when every share ran on a GPU or every one on the CPU;
/// when only some ran on the CPU (a worker without a GPU, or whose GPU failed), the CPU's, with
/// a note saying how many, since the probe's numbers are then not all the GPU's.
fn shares_backend(shares: &[InductionShare]) -> BackendInfo {
    let on_cpu: Vec<&BackendInfo> = shares.iter().map(|s| &s.backend).filter(|b| b.name != "gpu").collect();
    match on_cpu.first() {
        None => shares.first().map(|s| s.backend.clone()).unwrap_or_default(),
        Some(&cpu) if on_cpu.len() == shares.len() => cpu.clone(),
        Some(&cpu) => {
            let why = cpu.note.as_ref().map_or(String::new(), |note| format!(" ({note})"));
            let note =
                format!("{} of {} shares of the probe's sequences ran on the CPU{why}", on_cpu.len(), shares.len());
            BackendInfo { note: Some(note), ..cpu.clone() }
        }
    }
}

/// The parts of a stage not yet handed out, a contiguous block per worker. Each worker takes
/// its own block's parts in order, then helps the worker with the most left, from that block's
/// end. Neighbouring parts read neighbouring bytes (a Gram segment's vocabulary rows, a layer's
/// weights): with blocks, a model by link is fetched about once, sharing at most a window at
/// each block's edge, where handing the next part to whoever is free has every worker fetch
/// nearly every window.
pub struct PartQueue {
    left: Vec<std::ops::Range<usize>>,
}

impl PartQueue {
    pub fn new(parts: usize, workers: usize) -> PartQueue {
        let workers = workers.max(1);
        PartQueue { left: (0..workers).map(|w| (w * parts / workers)..((w + 1) * parts / workers)).collect() }
    }

    /// The next part for worker `w`; None when every part is handed out.
    pub fn claim(&mut self, w: usize) -> Option<usize> {
        if let Some(own) = self.left.get_mut(w).filter(|own| own.start < own.end) {
            own.start += 1;
            return Some(own.start - 1);
        }
        let largest =
            self.left.iter_mut().filter(|block| block.start < block.end).max_by_key(|block| block.end - block.start)?;
        largest.end -= 1;
        Some(largest.end)
    }
}

#[cfg(test)]
mod tests {
    use super::{PartQueue, shares_backend};
    use crate::backend::BackendInfo;
    use crate::worker::protocol::InductionShare;

    /// A probe whose shares ran on the GPU says so; one whose shares ran partly on the CPU
    /// says the CPU, and how many of its shares, with the reason.
    #[test]
    fn a_probes_backend_is_the_gpu_only_when_every_share_ran_there() {
        let gpu =
            BackendInfo { name: "gpu".into(), adapter: Some("swiftshader (WebGPU)".into()), ..Default::default() };
        let fell_back =
            BackendInfo { note: Some("the GPU failed (lost); computed on the CPU".into()), ..Default::default() };
        let share = |backend: &BackendInfo| InductionShare {
            sequence: "s".into(),
            bos: None,
            scores: Ok(Vec::new()),
            backend: backend.clone(),
        };
        assert_eq!(shares_backend(&[share(&gpu), share(&gpu)]), gpu);
        assert_eq!(shares_backend(&[share(&fell_back), share(&fell_back)]), fell_back);
        let mixed = shares_backend(&[share(&gpu), share(&fell_back), share(&gpu)]);
        assert_eq!(mixed.name, "cpu");
        assert_eq!(
            mixed.note.as_deref(),
            Some("1 of 3 shares of the probe's sequences ran on the CPU (the GPU failed (lost); computed on the CPU)")
        );
    }

    #[test]
    fn blocks_hand_out_every_part_once_contiguously_and_the_idle_help_from_the_far_end() {
        let mut blocks = PartQueue::new(10, 3);
        // Worker 0 owns 0..3, worker 1 3..6, worker 2 6..10.
        assert_eq!([blocks.claim(0), blocks.claim(1), blocks.claim(2)], [Some(0), Some(3), Some(6)]);
        assert_eq!([blocks.claim(0), blocks.claim(0)], [Some(1), Some(2)]);
        // Worker 0's block is done: it takes the last part of the largest block left (7..10).
        assert_eq!(blocks.claim(0), Some(9));
        let mut rest: Vec<usize> = std::iter::from_fn(|| blocks.claim(1)).collect();
        rest.sort();
        assert_eq!(rest, [4, 5, 7, 8]);
        assert_eq!([blocks.claim(0), blocks.claim(2)], [None, None]);
        // More workers than parts: each part still goes out once.
        let mut few = PartQueue::new(2, 4);
        let mut handed: Vec<usize> = (0..4).filter_map(|w| few.claim(w)).collect();
        handed.extend((0..4).filter_map(|w| few.claim(w)));
        handed.sort();
        assert_eq!(handed, [0, 1]);
    }
}
