//! Where a GPU product's time goes, and what the kernel could do instead: times the kernel of
//! crates/core/src/backend/gpu/products.wgsl alone (one large dispatch, inputs uploaded once, nothing
//! read back) beside variants of it, with wgpu's runtime checks on and off, then whole products
//! through the backend (uploads, dispatches, read-back) on the same shape, against the CPU. A
//! benchmark for a machine with a hardware GPU, not a test; prints one JSON line per
//! measurement.
//!
//! cargo run --release --example gpu_kernels -- [SIZE] [REPEATS]   (SIZE: 4096, REPEATS: 3)
//!
//! The variants are text edits of products.wgsl, each testing one guess about its cost:
//! - `plain`: the split arithmetic replaced by one f32 FMA, the ceiling of this tiling;
//! - `folded_zero`: the opaque zero that hides the TwoSum from the compiler made a constant (its
//!   numbers may be wrong: only its speed is of interest);
//! - `by_value`: the multiply-add written without pointers, returning its two sums.

use std::sync::Arc;
use std::time::Instant;

use headprint::backend::gpu::Gpu;
use headprint::backend::{Backend, BackendChoice, Factor, block_on};
use nalgebra::DMatrix;
use serde_json::json;

const KERNELS: &str = concat!(
    include_str!("../crates/core/src/backend/gpu/products_layout.wgsl"),
    include_str!("../crates/core/src/backend/gpu/products.wgsl")
);

fn variants() -> Vec<(&'static str, String)> {
    let body_start = KERNELS.find("    let h = *high;").expect("multiply_add's body");
    let body_end = KERNELS[body_start..].find("\n}\n").expect("its end") + body_start;
    let plain = format!("{}    *high = fma(ah, vec4<f32>(bh), *high);{}", &KERNELS[..body_start], &KERNELS[body_end..]);
    let folded_zero =
        KERNELS.replace("let zero = vec4<u32>(opaque_zero[0]);", "let zero = vec4<u32>(opaque_zero[0] & 0u);");
    let mut by_value = KERNELS.replace(
        "fn multiply_add(high: ptr<function, vec4<f32>>, part: ptr<function, vec4<f32>>,",
        "struct Sums { high: vec4<f32>, part: vec4<f32> }\n\nfn multiply_add_value(h: vec4<f32>, part_in: vec4<f32>,",
    );
    by_value = by_value
        .replace("    let h = *high;\n", "")
        .replace(
            "                bh: f32, bl: f32, zero: vec4<u32>) {",
            "                bh: f32, bl: f32, zero: vec4<u32>) -> Sums {",
        )
        .replace(
            "    *high = t;\n    *part += e + (ah * bl + al * bh + al * bl);",
            "    return Sums(t, part_in + e + (ah * bl + al * bh + al * bl));",
        );
    for (s, lane) in ["x", "y", "z", "w"].iter().enumerate() {
        by_value = by_value.replace(
            &format!("multiply_add(&high{s}, &part{s}, ah, al, bh.{lane}, bl.{lane}, zero);"),
            &format!(
                "let sums{s} = multiply_add_value(high{s}, part{s}, ah, al, bh.{lane}, bl.{lane}, zero);\n            high{s} = sums{s}.high;\n            part{s} = sums{s}.part;"
            ),
        );
    }
    assert!(!by_value.contains("multiply_add(&"), "the by-value edit missed a call");
    vec![("current", KERNELS.to_string()), ("plain", plain), ("folded_zero", folded_zero), ("by_value", by_value)]
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let size: usize = args.next().map_or(Ok(4096), |a| a.parse())?;
    let repeats: usize = args.next().map_or(Ok(3), |a| a.parse())?;
    let shape = (size, size, size);
    let nominal = 2.0 * (size as f64).powi(3);
    for (name, source) in variants() {
        for (checks_name, checks) in
            [("checked", wgpu::ShaderRuntimeChecks::checked()), ("unchecked", wgpu::ShaderRuntimeChecks::unchecked())]
        {
            // SAFETY: every variant is products.wgsl with its arithmetic rewritten, never its
            // indexing or loops, which stay inside the bindings as the checked kernel's do.
            let gpu = match pollster::block_on(unsafe { Gpu::open_with(true, &source, checks) }) {
                Ok(gpu) => gpu,
                Err(reason) => {
                    println!("{}", json!({"variant": name, "checks": checks_name, "error": reason.to_string()}));
                    continue;
                }
            };
            for (kernel, syrk, wide) in [("gemm", false, false), ("gemm wide", false, true), ("syrk", true, false)] {
                if name != "current" && kernel != "gemm" {
                    continue;
                }
                let line = match gpu.time_kernel(shape, syrk, wide, repeats) {
                    Ok(seconds) => {
                        let best = seconds.iter().cloned().fold(f64::INFINITY, f64::min);
                        json!({"variant": name, "checks": checks_name, "kernel": kernel, "size": size,
                               "adapter": gpu.adapter(), "seconds": seconds,
                               "nominal_gflops": (nominal / best / 1e9).round()})
                    }
                    Err(reason) => {
                        json!({"variant": name, "checks": checks_name, "kernel": kernel, "error": reason.to_string()})
                    }
                };
                println!("{line}");
            }
        }
    }

    // Whole products through each backend, as the analysis asks for them: a Gram summed over
    // BLOCKS blocks and read back, then `A X` twice (the second time with A on the device).
    const BLOCKS: usize = 4;
    let block = DMatrix::from_fn(size, size, |i, j| ((i * 31 + j * 17) % 101) as f32 / 101.0 - 0.5);
    let upper =
        Arc::new(DMatrix::from_fn(size, size, |i, j| if i <= j { ((i + 2 * j) % 13) as f64 / 13.0 } else { 0.0 }));
    let x = DMatrix::from_fn(size, size / 2, |i, j| ((3 * i + j) % 11) as f64 / 11.0 - 0.5);
    for choice in [BackendChoice::Gpu, BackendChoice::Cpu] {
        let mut backend = Backend::select(choice)?;
        let start = Instant::now();
        let mut sum = block_on(backend.sum(size, size))?;
        for _ in 0..BLOCKS {
            block_on(backend.add_gram(&block, &mut sum))?;
        }
        block_on(backend.read(sum))?;
        let gram_s = start.elapsed().as_secs_f64();
        let mut multiply_s = Vec::new();
        for _ in 0..2 {
            let start = Instant::now();
            block_on(backend.multiply(&upper, Factor::UpperTriangular, &x))?;
            multiply_s.push(start.elapsed().as_secs_f64());
        }
        println!(
            "{}",
            json!({"whole_product": backend.info().label(), "size": size, "gram_blocks": BLOCKS,
                   "gram_sum_s": gram_s, "multiply_upper_by_half_width_s": multiply_s})
        );
    }
    Ok(())
}
