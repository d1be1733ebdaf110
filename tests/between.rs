//! Circuits between heads (docs/methods.md#8-circuits-between-heads): composition scores and
//! singular values against float64 numpy's dense matrices on every family fixture
//! (tests/fixtures/families/*/between.json, scripts/make_between_references.py), folded and raw;
//! the random baseline against its expectation; the planted induction circuit's K-composition;
//! the GPU against the CPU; the bytes read; the CLI's contract.

use std::sync::{Arc, Mutex};

use crate::common::*;
use crate::families::{FIXTURES, folder};
use headprint::analysis::composition::{Composition, baseline, composition};
use headprint::analysis::singular::{degenerate_blocks, head_svd};
use headprint::analysis::{CompositionKind, HeadId, Mode};
use headprint::backend::Backend;
use headprint::model::{LoadParts, ModelStream};
use headprint::tokens::Tokenizer;
use headprint::weights::ModelFiles;

/// f64 against f64 from the same f32 weights: the order of the sums differs, and the query/key
/// and output norms fold into the weights as stored, in f32 (`circuit_attention`), which the
/// reference folds in f64 (2^-24 relative to each weight).
const BETWEEN_TOLERANCE: f64 = 1e-7;

fn between(name: &str) -> serde_json::Value {
    let text = std::fs::read_to_string(fixture(&folder(name)).join("between.json")).expect("between.json");
    serde_json::from_str(&text).unwrap()
}

fn composition_of(path: &std::path::Path, mode: Mode, backend: &mut Backend) -> Composition {
    let files = ModelFiles::from_path(path).unwrap();
    composition(&ModelStream::open(&files).unwrap(), mode, backend, &mut |_, _| {}).unwrap()
}

fn close(actual: f64, expected: f64, floor: f64) -> bool {
    (actual - expected).abs() <= BETWEEN_TOLERANCE * expected.abs().max(floor)
}

#[test]
fn every_familys_composition_scores_are_numpys_dense_ones_folded_and_raw() {
    for name in FIXTURES {
        let reference = between(name);
        for mode in [Mode::Folded, Mode::Raw] {
            let ours = composition_of(&fixture(&folder(name)), mode, &mut Backend::cpu());
            let json = serde_json::to_value(ours.to_json(3)).unwrap();
            for kind in CompositionKind::ALL {
                let expected = &reference[mode.name()]["composition"][kind.name()];
                let (ours, theirs) = (flatten(&json["scores"][kind.name()]), flatten(expected));
                assert_eq!(ours.len(), theirs.len(), "{name} {kind:?}");
                let nonzero = theirs.iter().filter(|&&s| s > 0.0).count();
                assert!(nonzero > 0, "{name} {kind:?}: the reference has no pair");
                for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
                    assert!(close(*a, *b, 1e-3), "{name} {} {kind:?} [{i}]: {a} against {b}", mode.name());
                }
            }
        }
    }
}

fn flatten(value: &serde_json::Value) -> Vec<f64> {
    match value {
        serde_json::Value::Array(items) => items.iter().flat_map(flatten).collect(),
        number => vec![number.as_f64().expect("a number")],
    }
}

#[test]
fn every_familys_singular_values_are_numpys_folded_and_raw() {
    for name in FIXTURES {
        let reference = between(name);
        let files = ModelFiles::from_path(&fixture(&folder(name))).unwrap();
        let model = ModelStream::open(&files).unwrap();
        let tokenizer = Tokenizer::for_model(&model, None).unwrap();
        for mode in [Mode::Folded, Mode::Raw] {
            for head in reference[mode.name()]["svd"].as_array().unwrap() {
                let id = HeadId::new(head["layer"].as_u64().unwrap() as usize, head["head"].as_u64().unwrap() as usize);
                let ours = head_svd(&model, &tokenizer, id, mode, 3).unwrap();
                for (circuit, values) in [("ov", &ours.ov.singular_values), ("qk", &ours.qk.singular_values)] {
                    let theirs = flatten(&head[circuit]);
                    let top = theirs[0];
                    assert_eq!(values.len(), theirs.len(), "{name} {id} {circuit}");
                    for (a, b) in values.iter().zip(&theirs) {
                        assert!((a - b).abs() <= BETWEEN_TOLERANCE * top, "{name} {id} {circuit}: {a} against {b}");
                    }
                }
            }
        }
    }
}

#[test]
fn the_singular_directions_rebuild_the_circuit_and_are_orthonormal() {
    let model = load("llama", LoadParts::Circuits);
    let tokenizer = Tokenizer::for_model(&model, None).unwrap();
    let svd = head_svd(&model, &tokenizer, HeadId::new(1, 3), Mode::Raw, 2).unwrap();
    let layer = &model.layers[1].attention;
    // Head 3 of 4 reads key/value head 1 of 2.
    let (d, w) = (8, |m: &nalgebra::DMatrix<f32>, at: usize| m.columns(at * 8, 8).map(f64::from));
    let ov = w(&layer.w_v, 1) * layer.w_o.rows(3 * d, d).map(f64::from);
    let qk = w(&layer.w_q, 3) * w(&layer.w_k, 1).transpose();
    for (circuit, dense) in [(&svd.ov, ov), (&svd.qk, qk)] {
        let sigma = nalgebra::DMatrix::from_diagonal(&nalgebra::DVector::from_vec(circuit.singular_values.clone()));
        let rebuilt = &circuit.u * sigma * circuit.v.transpose();
        assert!((rebuilt - &dense).norm() <= 1e-10 * dense.norm());
        for side in [&circuit.u, &circuit.v] {
            let identity = nalgebra::DMatrix::<f64>::identity(side.ncols(), side.ncols());
            assert!((side.transpose() * side - identity).norm() <= 1e-12);
        }
        let covered: Vec<usize> = circuit.blocks.iter().flatten().copied().collect();
        assert_eq!(covered, (0..circuit.singular_values.len()).collect::<Vec<_>>());
    }
}

#[test]
fn near_equal_values_form_one_block_read_as_a_subspace() {
    // TransformerLens's rule: a relative gap under 1e-2 joins the open block; nulls run together.
    let blocks = degenerate_blocks(&[3.0, 2.995, 2.0, 1.0, 0.999, 0.998, 1e-9, 1e-10], 1e-2, 1e-6);
    assert_eq!(blocks, vec![vec![0, 1], vec![2], vec![3, 4, 5], vec![6, 7]]);
    // A block's readout is the norm of each token's projection onto its span: unsigned, no
    // bottom end; a lone direction's is signed, both ends.
    let model = load("gptchar-induction", LoadParts::Circuits);
    let tokenizer = Tokenizer::for_model(&model, None).unwrap();
    let svd = head_svd(&model, &tokenizer, HeadId::new(0, 0), Mode::Raw, 4).unwrap();
    for direction in svd.ov.directions.iter().chain(&svd.qk.directions).filter(|d| !d.null) {
        let readout = direction.input.as_ref().expect("a non-null block is read out");
        assert_eq!(readout.signed, direction.indices.len() == 1);
        assert_eq!(readout.bottom.is_empty(), !readout.signed);
        assert!(readout.top.windows(2).all(|t| t[0].value >= t[1].value));
        if !readout.signed {
            assert!(readout.top.iter().all(|t| t.value >= 0.0));
        }
    }
    assert!(svd.ov.directions.iter().any(|d| d.degenerate), "the planted copying head has a degenerate block");
}

#[test]
fn the_random_baseline_has_its_expected_mean_square() {
    // For rotation-invariant random heads E[score²] = 1/d_model exactly; 32 draws of a 64-wide
    // model land within a few percent of it, and the mean score just under its root.
    let base = baseline(64, 16);
    assert!((base.rms - 0.125).abs() < 1e-15);
    assert!(base.mean < base.rms && base.mean > 0.9 * base.rms, "{base:?}");
    assert!(base.spread > 0.0 && base.spread < 0.2 * base.mean, "{base:?}");
    assert_eq!(base, baseline(64, 16), "seeded: the same draws every time");
}

#[test]
fn the_planted_previous_token_heads_k_compose_into_the_induction_head() {
    let report = composition_of(&fixture("gptchar-induction"), Mode::Folded, &mut Backend::cpu());
    let into_induction: Vec<_> =
        report.ranked(CompositionKind::K).into_iter().filter(|edge| edge.to == "L1H0").collect();
    // Both layer-0 heads write the previous tokens that the induction head's keys read: well above
    // the random baseline, and five times what the other head's keys read of them.
    assert_eq!(into_induction.len(), 2);
    assert!(into_induction.iter().all(|e| e.ratio > 1.2), "{into_induction:?}");
    for from in [HeadId::new(0, 0), HeadId::new(0, 1)] {
        let other = report.scores.get(CompositionKind::K, from, HeadId::new(1, 1));
        assert!(report.scores.get(CompositionKind::K, from, HeadId::new(1, 0)) > 5.0 * other, "{from}");
    }
    assert_eq!(
        report.scores.get(CompositionKind::K, HeadId::new(1, 0), HeadId::new(0, 0)),
        0.0,
        "a later head does not compose into an earlier one"
    );
}

#[test]
fn composition_reads_no_mlp_expert_or_vocabulary_byte() {
    let forbidden_name =
        |name: &str| [".mlp.", ".block_sparse_moe.", "embed", "lm_head"].iter().any(|part| name.contains(part));
    for name in ["mixtral", "qwen2", "gemma2"] {
        let path = fixture(&folder(name));
        let bytes = std::fs::read(path.join("model.safetensors")).unwrap();
        let forbidden = crate::families::ranges_of(&bytes, forbidden_name);
        assert!(forbidden.iter().any(|(t, _)| t.contains("embed")), "{name}: no embedding found to check");
        let reads = Arc::new(Mutex::new(Vec::new()));
        let files = ModelFiles {
            config_json: Some(std::fs::read_to_string(path.join("config.json")).unwrap()),
            tokenizer_json: None,
            index_json: None,
            weights: vec![Box::new(crate::families::Recording {
                name: "model.safetensors".into(),
                bytes,
                reads: reads.clone(),
            })],
        };
        let stream = ModelStream::open(&files).unwrap();
        composition(&stream, Mode::Folded, &mut Backend::cpu(), &mut |_, _| {}).unwrap();
        for read in reads.lock().unwrap().iter() {
            for (tensor, range) in &forbidden {
                assert!(read.end <= range.start || read.start >= range.end, "{name}: read {read:?} is in {tensor}");
            }
        }
    }
}

#[cfg(feature = "gpu")]
#[test]
fn the_gpus_composition_is_the_cpus() {
    for name in ["gpt2", "llama"] {
        let mut gpu = crate::families::gpu();
        let on_gpu = composition_of(&fixture(name), Mode::Folded, &mut gpu);
        assert_eq!(on_gpu.backend.name, "gpu", "{name}");
        let on_cpu = composition_of(&fixture(name), Mode::Folded, &mut Backend::cpu());
        for kind in CompositionKind::ALL {
            for (a, b) in on_gpu.scores.flat(kind).iter().zip(on_cpu.scores.flat(kind)) {
                assert!((a - b).abs() <= 1e-9, "{name} {kind:?}: {a} against {b}");
            }
        }
    }
}

#[test]
fn the_cli_prints_composition_and_singular_directions() {
    let planted = fixture("gptchar-induction");
    let planted = planted.to_str().unwrap();
    let report = json(&["composition", planted, "--json", "--top", "2", "--backend", "cpu"]);
    let heads = report["heads"].as_array().unwrap();
    assert_eq!(heads[0], "L0H0");
    let (layers, per_layer) = (report["model"]["layers"].as_u64().unwrap(), report["model"]["heads"].as_u64().unwrap());
    assert_eq!(heads.len() as u64, layers * per_layer);
    assert_eq!(report["scores"]["k"].as_array().unwrap().len() as u64, layers);
    assert_eq!(report["top"].as_array().unwrap().len(), 6, "two per kind");
    assert_eq!(report["top"][2]["kind"], "k");
    assert_eq!(report["mode"], "folded");
    let base = report["baseline"]["k"]["mean"].as_f64().unwrap();
    assert!(
        (report["top"][2]["ratio"].as_f64().unwrap() - report["top"][2]["score"].as_f64().unwrap() / base).abs()
            < 1e-12
    );

    let svd = json(&["svd", planted, "--head", "L1H0", "--json", "--tokens", "3"]);
    for circuit in ["ov", "qk"] {
        let values = svd[circuit]["singular_values"].as_array().unwrap();
        assert!(values.windows(2).all(|w| w[0].as_f64() >= w[1].as_f64()), "{circuit}: descending");
        assert!(svd[circuit]["directions"][0]["input"]["top"].as_array().unwrap().len() <= 3);
    }
    let (ok, _, stderr) = headprint(&["svd", planted, "--head", "L9H0"]);
    assert!(!ok);
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(stderr.contains("unknown head `L9H0`"), "{stderr}");
}

#[test]
fn the_figures_cells_are_each_pairs_ratio_to_its_baseline() {
    use headprint::figures::composition::CompositionChart;
    use headprint::figures::output::{Figure, Format};
    let report = composition_of(&fixture("gptchar-induction"), Mode::Folded, &mut Backend::cpu());
    let chart = CompositionChart::of(&report, 1.2, 10, "planted".into());
    assert_eq!(chart.edges.len(), 3, "the planted K- and Q-pairs into the induction head: {:?}", chart.edges);
    let scale = chart.scale();
    let (kind, from, to) = (CompositionKind::K, HeadId::new(0, 1), HeadId::new(1, 0));
    let ratio = report.scores.get(kind, from, to) / report.baseline(kind).mean;
    let layout = chart.layout(1);
    let (x0, y0, x1, y1) = layout.cell(from.layer * 2 + from.head, to.layer * 2 + to.head);
    let png = Figure::Composition(chart).render(Format::Png).unwrap();
    let (width, _, pixels) = crate::figures::decode(&png);
    let at = (((y0 + y1) / 2) as usize * width as usize + ((x0 + x1) / 2) as usize) * 3;
    assert_eq!(pixels[at..at + 3], scale.rgb(ratio), "K L0H1 → L1H0 at ratio {ratio}");
}
