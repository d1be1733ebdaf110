//! GPU against CPU, stage by stage, on a model folder or file: the Gram matrices (the stage the
//! GPU backend runs) and the per-head stage (f64 on the CPU for both), with each stage's FLOP
//! count and achieved FLOP/s. Prints one JSON line per model. A benchmark, not a test.
//!
//! cargo run --release --example bench_gpu -- MODEL [MODEL ...]   (scripts/bench_gpu.sh)

use std::time::Instant;

use headprint::analysis::circuits::Grams;
use headprint::analysis::{Mode, fingerprint_stream_with};
use headprint::backend::{Backend, BackendChoice};
use headprint::model::ModelStream;
use headprint::weights::ModelFiles;
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let paths: Vec<String> = std::env::args().skip(1).collect();
    if paths.is_empty() {
        return Err("usage: bench_gpu MODEL [MODEL ...]".into());
    }
    for path in paths {
        let files = ModelFiles::from_path(std::path::Path::new(&path))?;
        let model = ModelStream::open(&files)?;
        let c = &model.config;
        let (vocab, d, h) = (c.vocab as f64, c.d_model as f64, c.d_head as f64);
        let tied = model.tied();
        // Nominal GEMM counts (2 m n k): one Gram when tied, three otherwise. The GPU's SYRK
        // computes only the upper tiles, so it does about half of its Grams' count.
        let gram_flop = 2.0 * vocab * d * d * if tied { 1.0 } else { 3.0 };
        // Per head: W_E^T W_E times W_Q, W_K, W_V and the unembedding Gram times Ô^T, plus the
        // cross Gram times W_V when untied: d_model² · d_head products, 2 FLOP each.
        let head_flop = (c.layers * c.heads) as f64 * 2.0 * d * d * h * if tied { 4.0 } else { 5.0 };

        // Reading the vocabulary blocks alone (file I/O and widening), to tell it from compute.
        let start = Instant::now();
        for first in (0..c.vocab).step_by(8192) {
            let rows = first..(first + 8192).min(c.vocab);
            model.embedding_rows(rows.clone())?;
            model.unembedding_rows(rows)?;
        }
        let read_s = start.elapsed().as_secs_f64();

        let mut runs = Vec::new();
        for choice in [BackendChoice::Cpu, BackendChoice::Gpu] {
            let mut backend = Backend::select(choice)?;
            let start = Instant::now();
            Grams::stream_with(&model, &mut backend)?;
            let grams_s = start.elapsed().as_secs_f64();
            let start = Instant::now();
            let report = fingerprint_stream_with(&model, Mode::Folded, &mut backend)?;
            let total_s = start.elapsed().as_secs_f64();
            // The fingerprint recomputes the Grams; what is left is the per-head stage.
            let heads_s = (total_s - grams_s).max(0.0);
            let compute_s = (grams_s - read_s).max(1e-9);
            runs.push(json!({
                "backend": report.backend,
                "grams_s": grams_s,
                "grams_compute_s": compute_s,
                "grams_gflop_per_s": gram_flop / compute_s / 1e9,
                "heads_s": heads_s,
                "heads_gflop_per_s": head_flop / heads_s.max(1e-9) / 1e9,
                "fingerprint_s": total_s,
            }));
        }
        let line = json!({
            "model": path,
            "vocab": c.vocab, "d_model": c.d_model, "d_head": c.d_head, "heads": c.layers * c.heads, "tied": tied,
            "grams_gflop": gram_flop / 1e9,
            "heads_gflop": head_flop / 1e9,
            "read_vocabulary_s": read_s,
            "runs": runs,
        });
        println!("{line}");
    }
    Ok(())
}
