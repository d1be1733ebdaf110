//! The hub's real layouts of the spectral-fingerprint study's models: an older-transformers
//! Pythia file with its buffers and old config keys, and a Llama-3.2-style model (tied, bf16,
//! `head_dim`, llama3 rope scaling). Their fingerprints and forward passes are checked with the
//! other families in tests/reference.rs; here, what is particular to the layouts.

use crate::common;

use common::*;
use headprint::model::{LoadParts, Positions, RopeScaling, rope_settings};
use serde_json::json;

#[test]
fn rotary_frequencies_match_transformers_for_every_scaling() {
    let reference = expected("llama32");
    for (name, case) in reference["rope_inverse_frequencies"].as_object().unwrap() {
        let (base, scaling) = rope_settings(&json!({ "rope_parameters": case["rope_parameters"] })).unwrap();
        let dims = case["head_dim"].as_u64().unwrap() as usize;
        let ours = Positions::Rotary { dims, base, scaling, interleaved: false }.inverse_frequencies();
        let theirs = floats(&case["inverse_frequencies"]);
        assert_eq!(ours.len(), theirs.len(), "{name}");
        for (i, (a, b)) in ours.iter().zip(&theirs).enumerate() {
            assert!((*a as f64 - b).abs() <= 1e-6 * b.abs(), "{name} frequency {i}: {a} vs {b}");
        }
    }
}

#[test]
fn older_config_keys_read_like_the_newer_ones() {
    let newer = json!({"rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}});
    // transformers 4.x: rope_theta at top level, scaling under rope_scaling with `rope_type` or `type`.
    let older = json!({"rope_theta": 500000.0, "rope_scaling": {"type": "llama3", "factor": 32.0,
        "low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}});
    assert_eq!(rope_settings(&newer).unwrap(), rope_settings(&older).unwrap());
    assert!(matches!(rope_settings(&newer).unwrap(), (500000.0, RopeScaling::Llama3 { factor: 32.0, .. })));
    // GPT-NeoX's older name for the base.
    assert_eq!(rope_settings(&json!({"rotary_emb_base": 10000})).unwrap(), (10000.0, RopeScaling::None));
    assert_eq!(
        rope_settings(&json!({"rope_scaling": {"rope_type": "linear", "factor": 4.0}})).unwrap(),
        (10000.0, RopeScaling::Linear { factor: 4.0 })
    );
}

#[test]
fn unknown_or_incomplete_rope_scaling_is_a_clear_error() {
    let message =
        rope_settings(&json!({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}})).unwrap_err().to_string();
    assert!(message.contains("\"yarn\" is not supported"), "{message}");
    let message =
        rope_settings(&json!({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}})).unwrap_err().to_string();
    assert!(message.contains("low_freq_factor"), "{message}");
    let message =
        rope_settings(&json!({"rope_scaling": {"rope_type": "linear", "factor": -1.0}})).unwrap_err().to_string();
    assert!(message.contains("-1"), "{message}");
}

#[test]
fn pythia_buffers_are_skipped_and_not_counted() {
    let model = load("pythia-hub", LoadParts::Everything);
    let reference = expected("pythia-hub");
    assert_eq!(model.parameter_count, reference["parameters"].as_u64().unwrap());
    let Positions::Rotary { dims, base, scaling, .. } = model.config.positions else { panic!("rotary") };
    // rotary_pct 0.5 of d_head 8, rotary_emb_base 10000: the older keys were read.
    assert_eq!((dims, base, scaling), (4, 10000.0, RopeScaling::None));
}

#[test]
fn llama32_is_tied_with_its_own_head_dim_and_llama3_rope() {
    let model = load("llama32", LoadParts::Everything);
    let reference = expected("llama32");
    assert!(model.w_u.is_none(), "no lm_head in the file: the unembedding is the embedding");
    assert_eq!((model.config.d_model, model.config.heads, model.config.d_head), (24, 4, 8));
    assert_eq!(model.parameter_count, reference["parameters"].as_u64().unwrap());
    assert!(matches!(model.config.positions, Positions::Rotary { scaling: RopeScaling::Llama3 { .. }, .. }));
}
