//! The induction probe on each backend, side by side, on model folders or files: the same
//! seeded sequences (`--sequences` first copies of `--copy` random ordinary tokens, each repeated
//! once after the BOS where the model has one), the model streamed layer by layer as the CLI's
//! `probe` reads it. For each backend: the wall time, the forward pass's FLOP count and FLOP/s,
//! the bytes that crossed to and from a GPU; then how far the GPU's scores are from the CPU's and
//! whether the induction heads (score ≥ 0.4) are the same. One JSON line per model and backend.
//! A benchmark, not a test.
//!
//! cargo run --release --example bench_probe -- [--sequences=8] [--copy=256] [--backends=gpu,cpu] MODEL [MODEL ...]

use std::time::Instant;

use headprint::backend::{Backend, BackendChoice, block_on, moved_between};
use headprint::model::{ModelConfig, ModelStream};
use headprint::probes::induction::{InductionReport, induction_probe, random_first_copies};
use headprint::weights::ModelFiles;
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (mut sequences, mut copy) = (8, 256);
    let mut backends = vec![BackendChoice::Gpu, BackendChoice::Cpu];
    let mut paths = Vec::new();
    for arg in std::env::args().skip(1) {
        if let Some(n) = arg.strip_prefix("--sequences=") {
            sequences = n.parse()?;
        } else if let Some(n) = arg.strip_prefix("--copy=") {
            copy = n.parse()?;
        } else if let Some(list) = arg.strip_prefix("--backends=") {
            backends = list.split(',').map(BackendChoice::parse).collect::<Result<_, _>>()?;
        } else {
            paths.push(arg);
        }
    }
    for path in paths {
        let files = ModelFiles::from_path(std::path::Path::new(&path))?;
        let model = ModelStream::open(&files)?;
        let config = model.config.clone();
        let bos = config.bos_token_id;
        let ordinary: Vec<usize> = (0..config.vocab).filter(|id| !config.config_special_ids.contains(id)).collect();
        let copies = random_first_copies(&ordinary, copy, 0, sequences)?;
        let len = 2 * copy + bos.is_some() as usize;
        let flop = forward_flop(&config, len) * sequences as f64;
        let mut reports: Vec<(String, InductionReport)> = Vec::new();
        for &choice in &backends {
            let mut backend = Backend::select(choice)?;
            let before = backend.bytes_moved();
            let start = Instant::now();
            let report =
                block_on(backend.with_fallback(async |backend| induction_probe(&model, &copies, bos, backend).await))?;
            let seconds = start.elapsed().as_secs_f64();
            let info = backend.info();
            let moved = moved_between(before, backend.bytes_moved());
            println!(
                "{}",
                json!({
                    "model": path,
                    "backend": info.label(),
                    "note": info.note,
                    "sequences": sequences,
                    "tokens_each": len,
                    "seconds": (seconds * 1000.0).round() / 1000.0,
                    "forward_gflop": (flop / 1e7).round() / 100.0,
                    "gflop_per_s": (flop / seconds / 1e7).round() / 100.0,
                    "mb_to_device": moved.map(|(to, _)| (to as f64 / 1e5).round() / 10.0),
                    "mb_from_device": moved.map(|(_, from)| (from as f64 / 1e5).round() / 10.0),
                })
            );
            reports.push((info.label(), report));
        }
        if let [(first, a), rest @ ..] = reports.as_slice() {
            for (other, b) in rest {
                println!("{}", json!({ "model": path, "compared": [first, other], "differences": difference(a, b) }));
            }
        }
    }
    Ok(())
}

/// The forward pass's multiply-adds, times two, for one sequence of `len` tokens: the
/// projections, the attention's scores and mixing (causal: half the square), the MLP and the
/// unembedding.
fn forward_flop(config: &ModelConfig, len: usize) -> f64 {
    let (len, d) = (len as f64, config.d_model as f64);
    let (heads, kv_heads, d_head) = (config.heads as f64, config.kv_heads as f64, config.d_head as f64);
    let mlp_matrices = config.mlp.matrices() as f64;
    let projections = d * (heads + 2.0 * kv_heads) * d_head + heads * d_head * d;
    let attention = 2.0 * heads * d_head * (len + 1.0) / 2.0;
    let per_token_layer = projections + attention + mlp_matrices * d * config.d_mlp as f64;
    2.0 * len * (config.layers as f64 * per_token_layer + d * config.vocab as f64)
}

/// The largest difference of any head's score and of the prefix-copy accuracy, and whether the
/// two find the same induction heads.
fn difference(a: &InductionReport, b: &InductionReport) -> serde_json::Value {
    let mut worst: f64 = (a.prefix_copy_accuracy - b.prefix_copy_accuracy).abs();
    for (x, y) in a.heads.iter().zip(&b.heads) {
        for (p, q) in [
            (x.induction_score, y.induction_score),
            (x.previous_token_score, y.previous_token_score),
            (x.duplicate_token_score, y.duplicate_token_score),
            (x.copy_fidelity, y.copy_fidelity),
        ] {
            worst = worst.max((p - q).abs());
        }
    }
    json!({
        "largest_score_difference": worst,
        "same_induction_heads": a.induction_heads(0.4) == b.induction_heads(0.4),
    })
}
