//! GPU against CPU, stage by stage, on a model folder or file: the Gram matrices on each backend
//! (the stage the GPU runs) and the per-head stage (f64 on the CPU whichever backend made the
//! Grams, timed once as a whole CPU fingerprint minus its Grams), with each stage's FLOP count
//! and achieved FLOP/s. Prints one JSON line per model. A benchmark, not a test.
//!
//! cargo run --release --example bench_gpu -- MODEL [MODEL ...]   (scripts/bench_gpu.sh)

use std::time::Instant;

use headprint::analysis::circuits::{Grams, SEGMENT_ROWS};
use headprint::analysis::{Mode, fingerprint_stream_with};
use headprint::backend::{Backend, BackendChoice, block_on};
use headprint::model::{ModelStream, Weights};
use headprint::weights::ModelFiles;
use nalgebra::DMatrix;
use serde_json::json;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut gram_rows: Option<usize> = None;
    let mut paths = Vec::new();
    for arg in std::env::args().skip(1) {
        match arg.strip_prefix("--gram-rows=") {
            Some(n) => gram_rows = Some(n.parse()?),
            None => paths.push(arg),
        }
    }
    if paths.is_empty() {
        return Err("usage: bench_gpu [--gram-rows=N] MODEL [MODEL ...]".into());
    }
    for path in paths {
        let files = ModelFiles::from_path(std::path::Path::new(&path))?;
        let model = ModelStream::open(&files)?;
        let c = &model.config;
        // --gram-rows=N times the Gram stage on the first N vocabulary rows only (a slow
        // software GPU would take many minutes over a 128k vocabulary).
        let rows = gram_rows.unwrap_or(c.vocab).min(c.vocab);
        let (vocab, d, h) = (rows as f64, c.d_model as f64, c.d_head as f64);
        let tied = model.tied();
        // Nominal GEMM counts (2 m n k): one Gram when tied, three otherwise. The GPU's SYRK
        // computes only the upper tiles, so it does about half of its Grams' count.
        let gram_flop = 2.0 * vocab * d * d * if tied { 1.0 } else { 3.0 };
        // Per head: W_E^T W_E times W_Q, W_K, W_V and the unembedding Gram times Ô^T, plus the
        // cross Gram times W_V when untied: d_model² · d_head products, 2 FLOP each.
        let head_flop = (c.layers * c.heads) as f64 * 2.0 * d * d * h * if tied { 4.0 } else { 5.0 };

        // Reading the vocabulary blocks alone (file I/O and widening), to tell it from compute.
        let start = Instant::now();
        for first in (0..rows).step_by(8192) {
            let rows = first..(first + 8192).min(rows);
            model.embedding_rows(rows.clone())?;
            if !model.tied() {
                model.unembedding_rows(rows)?;
            }
        }
        let read_s = start.elapsed().as_secs_f64();

        // The per-head stage runs on the CPU (f64) whichever backend made the Grams: timed once.
        let mut cpu = Backend::select(BackendChoice::Cpu)?;
        let start = Instant::now();
        fingerprint_stream_with(&model, Mode::Folded, &mut cpu)?;
        let cpu_fingerprint_s = start.elapsed().as_secs_f64();

        let mut runs = Vec::new();
        for choice in [BackendChoice::Cpu, BackendChoice::Gpu] {
            let mut backend = Backend::select(choice)?;
            let start = Instant::now();
            if rows == c.vocab {
                Grams::stream_with(&model, &mut backend)?;
            } else {
                grams_of_rows(&model, rows, &mut backend)?;
            }
            let grams_s = start.elapsed().as_secs_f64();
            let compute_s = (grams_s - read_s).max(1e-9);
            runs.push(json!({
                "backend": backend.info(),
                "grams_s": grams_s,
                "grams_compute_s": compute_s,
                "grams_gflop_per_s": gram_flop / compute_s / 1e9,
            }));
        }
        // The fingerprint's own Grams cover the whole vocabulary: subtract that time.
        let cpu_grams_s = match rows == c.vocab {
            true => runs[0]["grams_s"].as_f64().unwrap_or(0.0),
            false => {
                let start = Instant::now();
                Grams::stream_with(&model, &mut Backend::cpu())?;
                start.elapsed().as_secs_f64()
            }
        };
        let heads_s = (cpu_fingerprint_s - cpu_grams_s).max(1e-9);
        let line = json!({
            "model": path,
            "vocab": c.vocab, "gram_rows": rows, "d_model": c.d_model, "d_head": c.d_head, "heads": c.layers * c.heads, "tied": tied,
            "grams_gflop": gram_flop / 1e9,
            "heads_gflop": head_flop / 1e9,
            "read_vocabulary_s": read_s,
            "cpu_fingerprint_s": cpu_fingerprint_s,
            "cpu_full_vocabulary_grams_s": cpu_grams_s,
            "heads_s": heads_s,
            "heads_gflop_per_s": head_flop / heads_s / 1e9,
            "grams": runs,
        });
        println!("{line}");
    }
    Ok(())
}

/// The Grams' products over the first `rows` vocabulary rows, as `Grams::stream_with` runs them.
fn grams_of_rows(model: &ModelStream, rows: usize, backend: &mut Backend) -> headprint::Result<()> {
    let d = model.config.d_model;
    let (mut embed, mut cross, mut unembed) = (DMatrix::zeros(d, d), DMatrix::zeros(d, d), DMatrix::zeros(d, d));
    let block = backend.block_rows(d).min(SEGMENT_ROWS);
    for first in (0..rows).step_by(block) {
        let range = first..(first + block).min(rows);
        let e = model.embedding_rows(range.clone())?;
        block_on(backend.add_gram(&e, &mut embed))?;
        if !model.tied() {
            let u = model.unembedding_rows(range)?;
            block_on(backend.add_product(&u, &e, &mut cross))?;
            block_on(backend.add_gram(&u, &mut unembed))?;
        }
    }
    Ok(())
}
