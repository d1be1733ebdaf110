//! GPU against CPU, stage by stage, on a model folder or file. For each backend: the Gram
//! matrices, every layer's products through them (`LayerProducts`: the large `F X` products the
//! backend runs), and the whole per-layer stage (those products plus the f64 eigen work, which
//! stays on the CPU), each with its FLOP count and achieved FLOP/s; then how far the two
//! backends' fingerprints are apart. Prints one JSON line per model (and each stage to stderr as
//! it ends). A benchmark, not a test.
//!
//! cargo run --release --example bench_gpu -- [--gram-rows=N] [--layers=N] [--backends=gpu,gpu-pairs,cpu] MODEL [MODEL ...]
//! (scripts/bench_gpu.sh). `--gram-rows=N` sums the Grams over the first N vocabulary rows only
//! (rounded up to whole segments of 4096) and `--layers=N` takes the first N layers: a software
//! GPU would take many minutes over a whole large model. The numbers are then not the model's,
//! but every stage's work per row and per layer is the same. `--backends=cpu` runs one backend;
//! `gpu-pairs` is the GPU with its f32-pair kernel even where the adapter has native f64.
//!
//! Each stage also reports the peak of what this process's own code held on the heap during it
//! (`peak_heap_mb`, counted by the allocator below): a GPU driver's allocations, and the memory
//! of the buffers it maps for uploads, do not pass through Rust's allocator, so comparing it
//! with the peak resident memory tells the two apart. That is `peak_resident_mb`, the stage's
//! peak resident set (Linux: the kernel's high-water mark, reset as each stage starts). It
//! counts only pages touched, where the heap counts whole allocations: a matrix library's
//! packing buffers sized by the cache sizes the machine reports, mostly untouched, are in the
//! heap's peak and not in this one. On a software adapter the device's memory is resident too.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use headprint::analysis::circuits::{Grams, LayerProducts, Mode, SEGMENT_ROWS};
use headprint::analysis::fingerprint::{HeadFingerprint, fingerprint_layer_on};
use headprint::backend::gpu::Arithmetic;
use headprint::backend::{Backend, BackendChoice, block_on};
use headprint::model::{LoadParts, ModelStream, Weights};
use headprint::weights::ModelFiles;
use serde_json::json;

/// The system allocator, counting the bytes live and their peak.
struct Counting;

static LIVE: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn allocated(bytes: usize) {
    let live = LIVE.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(live, Ordering::Relaxed);
}

// SAFETY: every call goes to the system allocator unchanged; only counters are added.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            allocated(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            allocated(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) };
        LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let moved = unsafe { System.realloc(p, layout, new_size) };
        if !moved.is_null() {
            LIVE.fetch_sub(layout.size(), Ordering::Relaxed);
            allocated(new_size);
        }
        moved
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Starts a stage's peaks from what is live and resident now.
fn start_peak() {
    PEAK.store(LIVE.load(Ordering::Relaxed), Ordering::Relaxed);
    // "5" resets the high-water mark of the resident set to the resident set now.
    let _ = std::fs::write("/proc/self/clear_refs", "5");
}

/// The stage's peak resident set so far, in MB (None where /proc does not say).
fn peak_resident_mb() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: f64 = line.trim_start_matches("VmHWM:").trim().trim_end_matches("kB").trim().parse().ok()?;
    Some(kb / 1e3)
}

/// For stderr: the peak resident set in MB, or "?".
fn resident_text(mb: Option<f64>) -> String {
    mb.map_or("?".into(), |mb| format!("{mb:.0}"))
}

/// The stage's peak so far, in MB.
fn peak_mb() -> f64 {
    PEAK.load(Ordering::Relaxed) as f64 / 1e6
}

/// A backend to time: a user's choice, or the GPU with its f32-pair kernel.
#[derive(Clone, Copy)]
enum Which {
    Choice(BackendChoice),
    GpuPairs,
}

struct Options {
    gram_rows: Option<usize>,
    layers: Option<usize>,
    backends: Vec<Which>,
    paths: Vec<String>,
}

fn options() -> Result<Options, Box<dyn std::error::Error>> {
    let mut options = Options {
        gram_rows: None,
        layers: None,
        backends: vec![Which::Choice(BackendChoice::Gpu), Which::Choice(BackendChoice::Cpu)],
        paths: Vec::new(),
    };
    for arg in std::env::args().skip(1) {
        if let Some(n) = arg.strip_prefix("--gram-rows=") {
            options.gram_rows = Some(n.parse()?);
        } else if let Some(n) = arg.strip_prefix("--layers=") {
            options.layers = Some(n.parse()?);
        } else if let Some(list) = arg.strip_prefix("--backends=") {
            options.backends = list
                .split(',')
                .map(|name| match name {
                    "gpu-pairs" => Ok(Which::GpuPairs),
                    name => BackendChoice::parse(name).map(Which::Choice),
                })
                .collect::<Result<_, _>>()?;
        } else {
            options.paths.push(arg);
        }
    }
    if options.paths.is_empty() {
        return Err(
            "usage: bench_gpu [--gram-rows=N] [--layers=N] [--backends=gpu,gpu-pairs,cpu] MODEL [MODEL ...]".into()
        );
    }
    Ok(options)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let options = options()?;
    for path in &options.paths {
        let files = ModelFiles::from_path(std::path::Path::new(path))?;
        let model = ModelStream::open(&files)?;
        let c = &model.config;
        // Whole segments, as the Grams are summed (`Grams::segment`).
        let rows = options.gram_rows.map_or(c.vocab, |r| r.div_ceil(SEGMENT_ROWS) * SEGMENT_ROWS).min(c.vocab);
        let layers = options.layers.unwrap_or(c.layers).min(c.layers);
        let (vocab, d, h) = (rows as f64, c.d_model as f64, c.d_head as f64);
        let (heads, kv_heads) = (c.heads as f64, c.kv_heads as f64);
        let tied = model.tied();
        // Nominal GEMM counts (2 m n k). Grams: one when tied, three otherwise (a SYRK does
        // about half of its count). Layer products: F_E [W_Q | W_K | W_V], F_U Ô^T and, untied,
        // C W_V, each d_model x d_model times d_model x (heads' columns) (the CPU skips the
        // triangular factors' zeros, half of the first two).
        let gram_flop = 2.0 * vocab * d * d * if tied { 1.0 } else { 3.0 };
        let columns = (heads + 2.0 * kv_heads) * h + heads * h + if tied { 0.0 } else { kv_heads * h };
        let products_flop = layers as f64 * 2.0 * d * d * columns;
        let (gflop, per_s) = (|flop: f64| flop / 1e9, |flop: f64, s: f64| flop / s.max(1e-9) / 1e9);

        // Reading alone (file I/O and widening), to tell it from compute.
        let start = Instant::now();
        for first in (0..rows).step_by(SEGMENT_ROWS) {
            let range = first..(first + SEGMENT_ROWS).min(rows);
            model.embedding_rows(range.clone())?;
            if !tied {
                model.unembedding_rows(range)?;
            }
        }
        let read_vocabulary_s = start.elapsed().as_secs_f64();
        let start = Instant::now();
        for l in 0..layers {
            model.layer(l, LoadParts::Circuits)?;
        }
        let read_layers_s = start.elapsed().as_secs_f64();
        eprintln!(
            "{path}: read the vocabulary rows in {read_vocabulary_s:.2} s, {layers} layers in {read_layers_s:.2} s"
        );

        let mut runs = Vec::new();
        let mut fingerprints: Vec<Vec<HeadFingerprint>> = Vec::new();
        for &which in &options.backends {
            let mut backend = match which {
                Which::Choice(choice) => Backend::select(choice)?,
                Which::GpuPairs => block_on(Backend::gpu_preferring(Arithmetic::F32Pairs))?,
            };
            let label = backend.info().label();
            start_peak();
            let start = Instant::now();
            let segments = rows.div_ceil(SEGMENT_ROWS);
            let grams = block_on(Grams::gather_segments(&model, &mut backend, segments, &mut |_, _| {}))?;
            let grams_s = start.elapsed().as_secs_f64();
            let (grams_heap, grams_resident) = (peak_mb(), peak_resident_mb());
            eprintln!(
                "{label}: Grams in {grams_s:.2} s, heap peak {grams_heap:.0} MB, resident {} MB",
                resident_text(grams_resident)
            );

            start_peak();
            let start = Instant::now();
            // As the CLI keeps them: the factors (made here) and C, the Gram matrices dropped.
            let for_products = grams.for_products();
            drop(grams);
            for l in 0..layers {
                let layer = model.layer(l, LoadParts::Circuits)?;
                block_on(LayerProducts::new(c, &layer, &model.ln_final, Mode::Folded, &for_products, &mut backend))?
                    .map_err(|e| e.to_string())?;
            }
            let products_s = start.elapsed().as_secs_f64();
            let (products_heap, products_resident) = (peak_mb(), peak_resident_mb());
            eprintln!(
                "{label}: layer products (read included) in {products_s:.2} s, heap peak {products_heap:.0} MB, \
                 resident {} MB",
                resident_text(products_resident)
            );

            start_peak();
            let start = Instant::now();
            let mut heads = Vec::new();
            for l in 0..layers {
                heads.extend(block_on(fingerprint_layer_on(&model, &for_products, Mode::Folded, l, &mut backend))?);
            }
            let layers_s = start.elapsed().as_secs_f64();
            let (layers_heap, layers_resident) = (peak_mb(), peak_resident_mb());
            eprintln!(
                "{label}: whole per-layer stage in {layers_s:.2} s, heap peak {layers_heap:.0} MB, \
                 resident {} MB",
                resident_text(layers_resident)
            );
            fingerprints.push(heads);
            runs.push(json!({
                "backend": backend.info(),
                "grams_s": grams_s,
                "grams_gflop_per_s": per_s(gram_flop, (grams_s - read_vocabulary_s).max(1e-9)),
                "layer_products_s": products_s,
                "layer_products_gflop_per_s": per_s(products_flop, (products_s - read_layers_s).max(1e-9)),
                "layers_s": layers_s,
                "fingerprint_s": grams_s + layers_s,
                "peak_heap_mb": { "grams": grams_heap, "layer_products": products_heap, "layers": layers_heap },
                "peak_resident_mb": { "grams": grams_resident, "layer_products": products_resident, "layers": layers_resident },
            }));
        }
        let line = json!({
            "model": path,
            "vocab": c.vocab, "gram_rows": rows, "d_model": c.d_model, "d_head": c.d_head,
            "layers": layers, "heads": layers * c.heads, "kv_heads": c.kv_heads, "tied": tied,
            "cpu_threads": std::thread::available_parallelism().map_or(1, |n| n.get()),
            "grams_gflop": gflop(gram_flop),
            "layer_products_gflop": gflop(products_flop),
            "read_vocabulary_s": read_vocabulary_s,
            "read_layers_s": read_layers_s,
            "runs": runs,
            // Each backend against the last (the CPU, as the script orders them).
            "differences_from_the_last": fingerprints
                .split_last()
                .map(|(last, others)| others.iter().map(|f| difference(f, last)).collect::<Vec<_>>()),
        });
        println!("{line}");
    }
    Ok(())
}

/// The largest difference between two backends' copying scores and eigenvector
/// conditions, relative to the larger of the two values (what tests/gpu.rs holds to 1e-4 on
/// the fixtures).
fn difference(gpu: &[HeadFingerprint], cpu: &[HeadFingerprint]) -> serde_json::Value {
    let mut copying: f64 = 0.0;
    let mut condition: f64 = 0.0;
    let relative = |a: f64, b: f64| if a == b { 0.0 } else { (a - b).abs() / a.abs().max(b.abs()) };
    for (g, c) in gpu.iter().zip(cpu) {
        for ((_, g), (_, c)) in g.circuits().into_iter().zip(c.circuits()) {
            if g.copying_score.is_finite() && c.copying_score.is_finite() {
                copying = copying.max((g.copying_score - c.copying_score).abs());
            }
            if let (Some(a), Some(b)) = (g.eigenvector_condition, c.eigenvector_condition) {
                condition = condition.max(relative(a, b));
            }
        }
    }
    json!({ "copying_score_max_abs": copying, "eigenvector_condition_max_rel": condition })
}
