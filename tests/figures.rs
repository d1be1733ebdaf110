//! `headprint figure`: the same figure is the same bytes every run, PNGs have their
//! stated size, and what is drawn is the data: each grid cell has the colour map's colour of that
//! head's copying score from `fingerprint --json`, the scatter prints `compare --json`'s ρ, the swap
//! figure outlines every induction cell, the verdict picture has a row per prompt. Errors are one line.

use crate::common;

use std::path::{Path, PathBuf};

use common::{fixture, headprint, json};
use headprint::figures::colour::Scale;
use headprint::figures::copying::CopyingScores;
use headprint::probes::Suite;
use headprint::probes::induction::induction_cells;

fn demo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("public/models/nietzsche-char.safetensors")
}

fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("headprint-figures-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir.join(name)
}

/// Draws a figure and returns the file's bytes.
fn figure(model: &Path, kind: &str, file: &str, extra: &[&str]) -> Vec<u8> {
    let out = scratch(file);
    let mut args = vec!["figure", model.to_str().unwrap(), "--kind", kind, "--out", out.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (ok, stdout, stderr) = headprint(&args);
    assert!(ok, "{args:?} failed: {stderr}");
    assert!(stdout.starts_with("wrote "), "{stdout}");
    std::fs::read(&out).unwrap()
}

/// Width, height and RGB pixels of a PNG.
pub fn decode(png_bytes: &[u8]) -> (u32, u32, Vec<u8>) {
    let decoder = png::Decoder::new(std::io::Cursor::new(png_bytes));
    let mut reader = decoder.read_info().unwrap();
    let mut pixels = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut pixels).unwrap();
    assert_eq!(info.color_type, png::ColorType::Rgb);
    pixels.truncate(info.buffer_size());
    (info.width, info.height, pixels)
}

const KINDS: [&str; 7] = ["copying", "spectrum", "self-copy", "swap", "verdicts", "scatter", "composition"];

#[test]
fn every_kind_is_byte_identical_across_runs_and_pngs_are_wide_enough() {
    let model = fixture("gptchar-induction");
    for kind in KINDS {
        for extension in ["svg", "png"] {
            let first = figure(&model, kind, &format!("{kind}-1.{extension}"), &[]);
            let second = figure(&model, kind, &format!("{kind}-2.{extension}"), &[]);
            assert!(first == second, "{kind}.{extension} differs between two runs");
            if extension == "png" {
                let (width, height, pixels) = decode(&first);
                assert!(width >= 600, "{kind}: {width} px wide");
                assert_eq!(pixels.len(), (width * height * 3) as usize);
                // Something is drawn: not a blank page.
                assert!(pixels.iter().any(|&b| b < 200), "{kind}: blank");
            } else {
                let text = String::from_utf8(first).unwrap();
                assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"), "{kind}: not an SVG");
                roxmltree::Document::parse(&text).unwrap_or_else(|e| panic!("{kind}: ill-formed SVG: {e}"));
            }
        }
    }
}

#[test]
fn copying_grid_cells_have_the_colour_of_each_heads_score() {
    let model = demo();
    let fingerprint = json(&["fingerprint", model.to_str().unwrap(), "--json"]);
    let heads = fingerprint["heads"].as_array().unwrap();
    let (layers, per_layer) = (
        fingerprint["model"]["layers"].as_u64().unwrap() as usize,
        fingerprint["model"]["heads"].as_u64().unwrap() as usize,
    );
    let scores: Vec<f64> = heads.iter().map(|h| h["ov"]["copying_score"].as_f64().unwrap()).collect();
    let png_bytes = figure(&model, "copying", "copying.png", &[]);
    let (width, height, pixels) = decode(&png_bytes);
    let layout = CopyingScores { layers, heads: per_layer, values: vec![], title: String::new() }.layout();
    assert_eq!(
        (width, height),
        CopyingScores { layers, heads: per_layer, values: vec![None; 24], title: String::new() }.size()
    );
    let scale = Scale::diverging(1.0, "");
    let mut distinct = std::collections::BTreeSet::new();
    for layer in 0..layers {
        for head in 0..per_layer {
            let score = scores[layer * per_layer + head];
            // A pixel near the cell's corner (the value is printed at its centre).
            let (x0, y0, _, _) = layout.cell(layer, head);
            let at = ((y0 as u32 + 3) * width + x0 as u32 + 3) as usize * 3;
            let got = [pixels[at], pixels[at + 1], pixels[at + 2]];
            assert_eq!(got, scale.rgb(score), "L{layer}H{head}: score {score}");
            distinct.insert(got);
        }
    }
    // The check could fail: the 24 scores give many different colours, not one.
    assert!(distinct.len() > 12, "{distinct:?}");
    // The SVG holds one filled rectangle per head in that colour at that place.
    let svg = String::from_utf8(figure(&model, "copying", "copying.svg", &[])).unwrap();
    for layer in 0..layers {
        let [r, g, b] = scale.rgb(scores[layer * per_layer]);
        let (x0, y0, x1, y1) = layout.cell(layer, 0);
        let rect = format!(
            r##"<rect x="{x0}" y="{y0}" width="{}" height="{}" opacity="1" fill="#{r:02X}{g:02X}{b:02X}" stroke="none"/>"##,
            x1 - x0,
            y1 - y0
        );
        assert!(svg.contains(&rect), "L{layer}H0: no {rect}");
    }
}

#[test]
fn scatter_prints_compares_rho() {
    let model = demo();
    for (x, y) in [("qk.imaginary_fraction", "induction_score"), ("ov.copying_score", "copy_fidelity")] {
        let compare = json(&["compare", model.to_str().unwrap(), "--json"]);
        let entry = compare["models"][0]["spearman"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["spectral"] == x && c["behavioural"] == y)
            .unwrap()
            .clone();
        let rho = entry["rho"].as_f64().unwrap();
        let svg = String::from_utf8(figure(&model, "scatter", "scatter.svg", &["--x", x, "--y", y])).unwrap();
        let printed = format!("Spearman ρ = {rho:+.3} (n = {} heads)", entry["n"]);
        assert!(svg.contains(&printed), "{x} vs {y}: no `{printed}` in the figure");
    }
}

#[test]
fn swap_outlines_every_induction_cell_and_verdicts_have_a_row_per_prompt() {
    let model = fixture("gptchar-induction");
    let svg = String::from_utf8(figure(&model, "swap", "swap.svg", &["--head", "L1H0"])).unwrap();
    let tokenizer_ids = |text: &str| -> Vec<usize> {
        // The character model's vocabulary: its tokens are single characters; ids come from the CLI.
        let attention = json(&["attention", model.to_str().unwrap(), "--text", text, "--json"]);
        attention["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as usize).collect()
    };
    let swap = Suite::builtin("swap").unwrap();
    let marks: usize = swap.prompts.iter().map(|p| induction_cells(&tokenizer_ids(&p.text)).len()).sum();
    assert!(marks > 20, "{marks}");
    assert_eq!(svg.matches(r##"fill="none" stroke="#FF2D8A""##).count(), marks);
    let svg = String::from_utf8(figure(&model, "verdicts", "verdicts.svg", &["--head", "L1H1", "--suite", "bracket"]))
        .unwrap();
    let bracket = Suite::builtin("bracket").unwrap();
    for prompt in &bracket.prompts {
        assert!(svg.contains(&format!("\n{}\n", prompt.id)), "no row {}", prompt.id);
    }
}

#[test]
fn figure_errors_are_one_line() {
    let model = fixture("gptchar");
    let model = model.to_str().unwrap();
    let out = scratch("bad.jpg");
    for (args, wanted) in [
        (vec!["figure", model, "--kind", "copying", "--out", out.to_str().unwrap()], "must end in .svg or .png"),
        (vec!["figure", model, "--kind", "spectrum", "--head", "L9H0", "--out", "x.svg"], "unknown head `L9H0`"),
        (
            vec!["figure", model, "--kind", "scatter", "--x", "qk.nonsense", "--out", "x.svg"],
            "unknown spectral feature `qk.nonsense`",
        ),
        (vec!["figure", model, "--kind", "verdicts", "--suite", "/no/such/suite.json", "--out", "x.svg"], "bad suite"),
        (vec!["figure", model, "--kind", "copying", "--out", "/no/such/dir/x.png"], "/no/such/dir/x.png"),
    ] {
        let (ok, _, stderr) = headprint(&args);
        assert!(!ok, "{args:?} succeeded");
        assert_eq!(stderr.trim_end().lines().count(), 1, "{stderr}");
        assert!(stderr.starts_with("headprint: ") && stderr.contains(wanted), "{args:?}: {stderr}");
    }
    assert!(!Path::new("x.svg").exists());
}
