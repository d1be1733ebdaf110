//! The shipped demo model (public/models/nietzsche-char.safetensors): shapes, metadata, and
//! fingerprints of a few heads against numpy values stored by scripts/evaluate_demo.py.

use crate::common;

use common::assert_close;
use headprint::analysis::{HeadId, Mode, fingerprint_model};
use headprint::model::{LoadParts, Model};
use headprint::weights::ModelFiles;

fn demo() -> Model {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("public/models/nietzsche-char.safetensors");
    Model::load(&ModelFiles::from_path(&path).unwrap(), LoadParts::Circuits).unwrap()
}

fn evaluation() -> serde_json::Value {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/demo-eval.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn demo_model_has_the_seed_architecture_and_its_facts() {
    let model = demo();
    let c = &model.config;
    assert_eq!(
        (c.family.as_str(), c.layers, c.heads, c.d_model, c.d_head, c.vocab, c.context),
        ("gptchar", 6, 4, 256, 64, 84, Some(128))
    );
    let vocab = model.vocab_strings.as_ref().unwrap();
    assert_eq!(vocab.len(), 84);
    assert!(vocab.contains(&"\"".to_string()) && vocab.contains(&"(".to_string()) && vocab.contains(&")".to_string()));
    let fact = |k: &str| model.facts.iter().find(|(key, _)| key == k).map(|(_, v)| v.clone()).unwrap();
    let val_loss: f64 = fact("val_loss").parse().unwrap();
    assert!(val_loss <= 1.7, "validation loss {val_loss}");
    assert_eq!(fact("steps"), evaluation()["metadata"]["steps"].as_str().unwrap());
    let file_size = std::fs::metadata(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("public/models/nietzsche-char.safetensors"),
    )
    .unwrap()
    .len();
    assert!(file_size < 20_000_000);
}

#[test]
fn demo_fingerprints_match_numpy() {
    let model = demo();
    let ours = fingerprint_model(&model, Mode::Folded).unwrap();
    let reference = &evaluation()["reference_fingerprints_folded"];
    for (name, circuits) in reference.as_object().unwrap() {
        let head = ours.head(HeadId::parse(name, &model.config).unwrap()).unwrap();
        for (circuit, fp) in [("qk", &head.qk), ("ov", &head.ov), ("ov_residual", &head.ov_residual)] {
            let want = &circuits[circuit];
            for (metric, value) in [
                ("copying_score", fp.copying_score),
                ("imaginary_fraction", fp.imaginary_fraction),
                ("departure_from_normality", fp.departure_from_normality),
                ("scale", fp.scale),
            ] {
                assert_close(value, want[metric].as_f64().unwrap(), 1e-2, &format!("{name} {circuit} {metric}"));
            }
        }
    }
}
