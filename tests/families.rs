//! Every decoder family against its references (tests/fixtures/families, built by
//! scripts/make_family_fixtures.py from transformers' own config classes): the eager forward
//! pass's attention patterns and logits, and every head's circuits and fingerprints from float64
//! numpy, folded and raw; then what must hold on every backend and source: the GPU's
//! fingerprint and forward pass (or its named fallback), the streamed model, the bytes a
//! fingerprint reads, real-shaped layouts, and the refusals of what is not implemented.

use std::ops::Range;
use std::sync::{Arc, Mutex};

use crate::common;
use crate::hub::HeaderOnly;
use crate::hub_imitation::safetensors_header;

use common::*;
use headprint::analysis::{Mode, fingerprint_model, fingerprint_stream_with};
use headprint::backend::{Backend, BackendChoice, block_on};
use headprint::forward::{self, HeadOutputs};
use headprint::model::{LoadParts, Model, ModelStream};
use headprint::weights::{ByteSource, ModelFiles};

/// Every family fixture (a folder of tests/fixtures/families).
pub const FIXTURES: [&str; 21] = [
    "qwen2",
    "qwen3",
    "mistral",
    "mixtral",
    "gemma",
    "gemma2",
    "gemma3",
    "phi",
    "phi3",
    "olmo",
    "olmo2",
    "gptj",
    "gptneo",
    "opt",
    "stablelm",
    "bloom",
    "falcon-rw",
    "falcon-mq",
    "falcon-new",
    "granite",
    "smollm3",
];

pub fn folder(name: &str) -> String {
    format!("families/{name}")
}

fn tokens_of(reference: &serde_json::Value) -> Vec<usize> {
    reference["forward"]["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as usize).collect()
}

/// The largest difference between two runs' attention patterns.
fn pattern_distance(a: &forward::ForwardOutput, b: &forward::ForwardOutput) -> f32 {
    let mut worst = 0.0f32;
    for (la, lb) in a.patterns.iter().zip(&b.patterns) {
        for (ha, hb) in la.iter().zip(lb) {
            worst = worst.max((ha - hb).abs().max());
        }
    }
    worst
}

#[test]
fn every_family_runs_as_transformers_runs_it() {
    for name in FIXTURES {
        let model = load(&folder(name), LoadParts::Everything);
        let reference = expected(&folder(name));
        let output = forward::run(&model, &tokens_of(&reference)).unwrap_or_else(|e| panic!("{name}: {e}"));
        crate::reference::check_forward(name, &output, &reference);
    }
}

#[test]
fn every_familys_circuits_match_float64_references_folded_and_raw() {
    for name in FIXTURES {
        let model = load(&folder(name), LoadParts::Circuits);
        let reference = expected(&folder(name));
        for (mode, key) in [(Mode::Folded, "folded"), (Mode::Raw, "raw")] {
            let ours = serde_json::to_value(fingerprint_model(&model, mode).unwrap()).unwrap();
            crate::reference::check_heads(
                &ours["heads"],
                reference[key]["heads"].as_array().unwrap(),
                &format!("{name} {key}"),
            );
        }
        assert_eq!(model.parameter_count, reference["parameters"].as_u64().unwrap(), "{name}: parameters");
    }
}

#[test]
fn the_folds_of_query_key_and_output_norms_change_the_circuits() {
    // Where a family folds more than its input norms, folded and raw differ beyond the
    // tolerance in the circuits those norms touch (so the fold tests above can fail).
    for (name, circuit) in [("qwen3", "qk"), ("olmo2", "qk"), ("gemma2", "ov_residual"), ("granite", "ov_residual")] {
        let reference = expected(&folder(name));
        let score = |key: &str| reference[key]["heads"][0][circuit]["scale"].as_f64().unwrap();
        assert!((score("folded") - score("raw")).abs() > 100.0 * TOLERANCE * score("raw"), "{name} {circuit}");
    }
}

#[test]
fn sliding_windows_shape_the_patterns_of_the_families_that_have_them() {
    for name in ["mistral", "mixtral", "qwen2", "gemma2", "gemma3", "phi3", "gptneo"] {
        let mut model = load(&folder(name), LoadParts::Everything);
        let tokens = tokens_of(&expected(&folder(name)));
        let windows: Vec<Option<usize>> = (0..model.config.layers).map(|l| model.config.layer_window(l)).collect();
        assert!(windows.iter().any(|w| w.is_some_and(|w| w < tokens.len())), "{name}: {windows:?}");
        let windowed = forward::run(&model, &tokens).unwrap();
        for (l, window) in windows.iter().enumerate() {
            let Some(window) = window else { continue };
            for (h, pattern) in windowed.patterns[l].iter().enumerate() {
                for q in 0..tokens.len() {
                    for k in 0..(q + 1).saturating_sub(*window) {
                        assert_eq!(pattern[(q, k)], 0.0, "{name} L{l}H{h}: query {q} sees key {k}");
                    }
                }
            }
        }
        // Without its windows the model attends elsewhere: ignoring them would be seen.
        for layer in &mut model.config.features.layers {
            layer.window = None;
        }
        let unwindowed = forward::run(&model, &tokens).unwrap();
        assert!(pattern_distance(&windowed, &unwindowed) > 0.05, "{name}: the window changes nothing");
    }
}

#[test]
fn streamed_families_are_their_loaded_models() {
    for name in FIXTURES {
        let files = ModelFiles::from_path(&fixture(&folder(name))).unwrap();
        let model = Model::load(&files, LoadParts::Everything).unwrap();
        let stream = ModelStream::open(&files).unwrap();
        assert_eq!(stream.config, model.config, "{name}");
        let tokens = tokens_of(&expected(&folder(name)));
        let (a, b) = (forward::run(&model, &tokens).unwrap(), forward::run(&stream, &tokens).unwrap());
        assert_eq!((a.patterns, a.logits), (b.patterns, b.logits), "{name}: forward");
        let held = serde_json::to_value(fingerprint_model(&model, Mode::Folded).unwrap()).unwrap();
        let streamed =
            serde_json::to_value(fingerprint_stream_with(&stream, Mode::Folded, &mut Backend::cpu()).unwrap()).unwrap();
        assert_eq!(held["heads"], streamed["heads"], "{name}: fingerprint");
    }
}

/// A file in memory that records every range read from it.
pub struct Recording {
    pub name: String,
    pub bytes: Vec<u8>,
    pub reads: Arc<Mutex<Vec<Range<u64>>>>,
}

impl ByteSource for Recording {
    fn name(&self) -> &str {
        &self.name
    }
    fn len(&self) -> u64 {
        self.bytes.len() as u64
    }
    fn read_range(&self, offset: u64, len: usize) -> headprint::Result<Vec<u8>> {
        self.reads.lock().unwrap().push(offset..offset + len as u64);
        Ok(self.bytes[offset as usize..offset as usize + len].to_vec())
    }
}

/// The byte ranges of a safetensors file's tensors whose names `pick` takes.
pub fn ranges_of(bytes: &[u8], pick: impl Fn(&str) -> bool) -> Vec<(String, Range<u64>)> {
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len as usize]).unwrap();
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(name, _)| *name != "__metadata__" && pick(name))
        .map(|(name, entry)| {
            let offsets = &entry["data_offsets"];
            let start = 8 + header_len + offsets[0].as_u64().unwrap();
            (name.clone(), start..8 + header_len + offsets[1].as_u64().unwrap())
        })
        .collect()
}

#[test]
fn a_fingerprint_reads_no_mlp_or_expert_byte_of_any_family() {
    let mlp = |name: &str| {
        [".mlp.", ".fc1.", ".fc2.", ".block_sparse_moe."].iter().any(|part| name.contains(part))
            || name.contains("feed_forward")
    };
    for name in FIXTURES {
        let path = fixture(&folder(name));
        let bytes = std::fs::read(path.join("model.safetensors")).unwrap();
        let forbidden = ranges_of(&bytes, mlp);
        assert!(!forbidden.is_empty(), "{name}: no MLP tensor found to check");
        let reads = Arc::new(Mutex::new(Vec::new()));
        let files = ModelFiles {
            config_json: Some(std::fs::read_to_string(path.join("config.json")).unwrap()),
            tokenizer_json: None,
            index_json: None,
            weights: vec![Box::new(Recording { name: "model.safetensors".into(), bytes, reads: reads.clone() })],
        };
        let stream = ModelStream::open(&files).unwrap();
        fingerprint_stream_with(&stream, Mode::Folded, &mut Backend::cpu()).unwrap();
        for read in reads.lock().unwrap().iter() {
            for (tensor, range) in &forbidden {
                assert!(read.end <= range.start || read.start >= range.end, "{name}: read {read:?} is in {tensor}");
            }
        }
    }
}

#[cfg(feature = "gpu")]
pub fn gpu() -> Backend {
    Backend::select(BackendChoice::Gpu).unwrap_or_else(|e| {
        panic!("no GPU adapter ({e}): install Mesa's lavapipe (apt-get install -y mesa-vulkan-drivers)")
    })
}

#[cfg(feature = "gpu")]
#[test]
fn every_familys_gpu_fingerprint_is_the_cpus() {
    for name in FIXTURES {
        let files = ModelFiles::from_path(&fixture(&folder(name))).unwrap();
        let stream = ModelStream::open(&files).unwrap();
        let on_gpu = serde_json::to_value(fingerprint_stream_with(&stream, Mode::Folded, &mut gpu()).unwrap()).unwrap();
        assert_eq!(on_gpu["backend"]["name"], "gpu", "{name}: {}", on_gpu["backend"]);
        let on_cpu =
            serde_json::to_value(fingerprint_stream_with(&stream, Mode::Folded, &mut Backend::cpu()).unwrap()).unwrap();
        crate::reference::check_heads(&on_gpu["heads"], on_cpu["heads"].as_array().unwrap(), &format!("{name} gpu"));
    }
}

#[cfg(feature = "gpu")]
#[test]
fn every_family_runs_its_forward_pass_on_the_gpu() {
    for name in FIXTURES {
        let model = load(&folder(name), LoadParts::Everything);
        let reference = expected(&folder(name));
        let tokens = tokens_of(&reference);
        let runs = [(&tokens[..], HeadOutputs::None.into())];
        let mut backend = gpu();
        let gpu_out = block_on(backend.forward(&model, &runs, &mut |_, _| {})).unwrap().remove(0);
        let cpu_out = forward::run(&model, &tokens).unwrap();
        let info = backend.forward_info();
        assert!(info.note.is_none() && info.name == "gpu", "{name}: {info:?}");
        assert!(pattern_distance(&gpu_out, &cpu_out) <= 1e-4, "{name}: GPU patterns");
        let logits = (&gpu_out.logits - &cpu_out.logits).abs().max();
        assert!(logits <= 1e-4 * cpu_out.logits.abs().max().max(1.0), "{name}: GPU logits off by {logits}");
        assert!(gpu_out.logits != cpu_out.logits, "{name}: the GPU's numbers are the CPU's bits");
        crate::reference::check_forward(&format!("{name} gpu"), &gpu_out, &reference);
    }
}

/// A folder with a fixture's weights and its config.json edited by `edit`.
fn with_config(name: &str, edit: impl FnOnce(&mut serde_json::Value)) -> std::path::PathBuf {
    let source = fixture(&folder(name));
    let dir = std::env::temp_dir().join(format!("headprint-family-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(source.join("model.safetensors"), dir.join("model.safetensors")).unwrap();
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("config.json")).unwrap()).unwrap();
    edit(&mut config);
    std::fs::write(dir.join("config.json"), config.to_string()).unwrap();
    dir
}

/// A change to a fixture's config.json.
type ConfigEdit = Box<dyn FnOnce(&mut serde_json::Value)>;

#[test]
fn what_headprint_does_not_implement_is_refused_by_name() {
    let cases: Vec<(&str, ConfigEdit, &str)> = vec![
        ("olmo", Box::new(|c| c["clip_qkv"] = 8.0.into()), "clip_qkv"),
        (
            "phi3",
            Box::new(|c| c["rope_parameters"] = serde_json::json!({"rope_type": "longrope", "rope_theta": 10000.0})),
            "\"longrope\" is not supported",
        ),
        ("opt", Box::new(|c| c["do_layer_norm_before"] = false.into()), "do_layer_norm_before"),
        ("opt", Box::new(|c| c["word_embed_proj_dim"] = 16.into()), "word_embed_proj_dim"),
        ("bloom", Box::new(|c| c["apply_residual_connection_post_layernorm"] = true.into()), "post_layernorm"),
        ("mistral", Box::new(|c| c["sliding_window"] = 100.into()), "`sliding_window` 100 is larger than the context"),
        ("gemma2", Box::new(|c| c["layer_types"] = serde_json::json!(["full_attention"])), "`layer_types` lists 1"),
        ("qwen2", Box::new(|c| c["hidden_act"] = "gelu_fancy".into()), "`hidden_act` \"gelu_fancy\""),
        ("qwen3", Box::new(|c| c["num_key_value_heads"] = 3.into()), "cannot share 3 key/value heads"),
        ("mixtral", Box::new(|c| c["num_experts_per_tok"] = 9.into()), "9 experts per token out of 4"),
        ("mistral", Box::new(|c| c["model_type"] = "deepseek_v2".into()), "latent attention"),
        ("mistral", Box::new(|c| c["model_type"] = "mamba".into()), "model_type \"mamba\"; headprint reads"),
    ];
    for (name, edit, message) in cases {
        let dir = with_config(name, edit);
        let error = Model::load(&ModelFiles::from_path(&dir).unwrap(), LoadParts::Circuits).unwrap_err().to_string();
        assert!(error.contains(message), "{name}: {error}");
        let (ok, stdout, stderr) = headprint(&["fingerprint", dir.to_str().unwrap()]);
        assert!(!ok && stdout.is_empty(), "{name}: {stdout}");
        assert_eq!(stderr.lines().count(), 1, "{name}: {stderr}");
        assert!(stderr.contains(message), "{name}: {stderr}");
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn falcon_checkpoints_saved_for_falcons_own_code_read_as_their_transformers_versions() {
    // Before transformers took Falcon in, its checkpoints said `RefinedWebModel` (7B's layout)
    // or `RefinedWeb` (40B's, whose two norms marked the new architecture) and used the short
    // keys of Falcon's own configuration class.
    for (name, model_type) in [("falcon-mq", "RefinedWebModel"), ("falcon-new", "RefinedWeb")] {
        let dir = with_config(name, |c| {
            let c = c.as_object_mut().unwrap();
            c.insert("model_type".into(), model_type.into());
            c.remove("new_decoder_architecture");
            for (long, short) in
                [("num_attention_heads", "n_head"), ("num_hidden_layers", "n_layer"), ("num_kv_heads", "n_head_kv")]
            {
                if let Some(value) = c.remove(long) {
                    c.insert(short.into(), value);
                }
            }
        });
        let old = Model::load(&ModelFiles::from_path(&dir).unwrap(), LoadParts::Everything).unwrap();
        let current = load(&folder(name), LoadParts::Everything);
        assert_eq!(old.config, current.config, "{name}");
        let fingerprint =
            |m: &Model| serde_json::to_value(fingerprint_model(m, Mode::Folded).unwrap()).unwrap()["heads"].clone();
        assert_eq!(fingerprint(&old), fingerprint(&current), "{name}");
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[test]
fn a_multimodal_gemma_3_checkpoint_reads_its_text_model() {
    // The Hub's multimodal Gemma 3 files keep the text model under `language_model.model.`,
    // its config in `text_config`: the same model as the text-only fixture.
    let source = fixture(&folder("gemma3"));
    let bytes = std::fs::read(source.join("model.safetensors")).unwrap();
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header: serde_json::Value = serde_json::from_slice(&bytes[8..8 + header_len]).unwrap();
    let mut renamed = serde_json::Map::new();
    for (name, entry) in header.as_object().unwrap() {
        let name = match name.strip_prefix("model.") {
            Some(rest) => format!("language_model.model.{rest}"),
            None => name.clone(),
        };
        renamed.insert(name, entry.clone());
    }
    let mut text = serde_json::to_string(&renamed).unwrap();
    while !(8 + text.len()).is_multiple_of(8) {
        text.push(' ');
    }
    let mut file = (text.len() as u64).to_le_bytes().to_vec();
    file.extend_from_slice(text.as_bytes());
    file.extend_from_slice(&bytes[8 + header_len..]);
    let text_config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(source.join("config.json")).unwrap()).unwrap();
    let files = ModelFiles {
        config_json: Some(
            serde_json::json!({
                "model_type": "gemma3", "text_config": text_config, "bos_token_id": text_config["bos_token_id"],
                "eos_token_id": text_config["eos_token_id"], "pad_token_id": text_config["pad_token_id"]
            })
            .to_string(),
        ),
        tokenizer_json: None,
        index_json: None,
        weights: vec![Box::new(headprint::weights::MemorySource::new("model.safetensors", file))],
    };
    let multimodal = Model::load(&files, LoadParts::Everything).unwrap();
    let text_only = load(&folder("gemma3"), LoadParts::Everything);
    assert_eq!(multimodal.config, text_only.config);
    let fingerprint =
        |m: &Model| serde_json::to_value(fingerprint_model(m, Mode::Folded).unwrap()).unwrap()["heads"].clone();
    assert_eq!(fingerprint(&multimodal), fingerprint(&text_only));
}

/// A one-file model of these tensors, opened to be streamed: the tensor bytes its fingerprint
/// plans to read, and the file's size.
fn planned(
    tensors: Vec<(String, &'static str, Vec<usize>)>,
    config: serde_json::Value,
) -> (ModelStream<'static>, u64, u64) {
    let (header, _, data) = safetensors_header(tensors);
    let len = (header.len() + data) as u64;
    let announced = Arc::new(Mutex::new(Vec::new()));
    let files = Box::leak(Box::new(ModelFiles {
        config_json: Some(config.to_string()),
        tokenizer_json: None,
        index_json: None,
        weights: vec![Box::new(HeaderOnly {
            name: "model.safetensors".into(),
            header,
            len,
            announced: announced.clone(),
        })],
    }));
    let stream = ModelStream::open(files).expect("the layout opens");
    let read = announced.lock().unwrap().iter().map(|r| r.end - r.start).sum::<u64>();
    (stream, read, len)
}

#[test]
fn gemma_3_270m_in_its_real_shape_plans_its_fingerprint_without_an_mlp_byte() {
    // 262 144 tokens, width 640, 18 layers of 4 heads of 256 over one key/value head, q/k norms
    // and sandwich norms, tied: the vocabulary is most of the model.
    let (d, heads, d_head, d_mlp, vocab, layers) = (640usize, 4usize, 256usize, 2048usize, 262_144usize, 18usize);
    let mut tensors = vec![("model.embed_tokens.weight".to_string(), "BF16", vec![vocab, d])];
    tensors.push(("model.norm.weight".into(), "BF16", vec![d]));
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        for norm in
            ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm", "post_feedforward_layernorm"]
        {
            tensors.push((format!("{p}.{norm}.weight"), "BF16", vec![d]));
        }
        tensors.push((format!("{p}.self_attn.q_norm.weight"), "BF16", vec![d_head]));
        tensors.push((format!("{p}.self_attn.k_norm.weight"), "BF16", vec![d_head]));
        tensors.push((format!("{p}.self_attn.q_proj.weight"), "BF16", vec![heads * d_head, d]));
        tensors.push((format!("{p}.self_attn.k_proj.weight"), "BF16", vec![d_head, d]));
        tensors.push((format!("{p}.self_attn.v_proj.weight"), "BF16", vec![d_head, d]));
        tensors.push((format!("{p}.self_attn.o_proj.weight"), "BF16", vec![d, heads * d_head]));
        for (proj, shape) in [("gate_proj", [d_mlp, d]), ("up_proj", [d_mlp, d]), ("down_proj", [d, d_mlp])] {
            tensors.push((format!("{p}.mlp.{proj}.weight"), "BF16", shape.to_vec()));
        }
    }
    let config = serde_json::json!({
        "model_type": "gemma3_text", "hidden_size": d, "intermediate_size": d_mlp, "num_attention_heads": heads,
        "num_key_value_heads": 1, "head_dim": d_head, "num_hidden_layers": layers, "vocab_size": vocab,
        "query_pre_attn_scalar": 256, "sliding_window": 512, "max_position_embeddings": 32768,
        "rope_theta": 1000000.0, "rope_local_base_freq": 10000.0, "sliding_window_pattern": 6,
        "bos_token_id": 2, "eos_token_id": 1, "pad_token_id": 0
    });
    let (stream, read, total) = planned(tensors, config);
    // Per layer, in bf16: four sandwich norms, the query and key norms, the four projections.
    let per_layer = 2 * (4 * d + 2 * d_head + 2 * heads * d_head * d + 2 * d_head * d) as u64;
    assert_eq!(read, 2 * (vocab * d) as u64 + layers as u64 * per_layer + 2 * d as u64, "embedding, attention, norms");
    assert_eq!(stream.config.features.layers.iter().filter(|l| l.window.is_none()).count(), 3, "one global in six");
    eprintln!("Gemma-3-270m's fingerprint reads {read} of {total} bytes");
}

#[test]
fn mixtral_8x7b_in_its_real_shape_plans_its_fingerprint_without_an_expert_byte() {
    let (d, d_kv, d_mlp, vocab, layers, experts) = (4096usize, 1024usize, 14336usize, 32000usize, 32usize, 8usize);
    let mut tensors = vec![
        ("model.embed_tokens.weight".to_string(), "BF16", vec![vocab, d]),
        ("lm_head.weight".into(), "BF16", vec![vocab, d]),
        ("model.norm.weight".into(), "BF16", vec![d]),
    ];
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        tensors.push((format!("{p}.input_layernorm.weight"), "BF16", vec![d]));
        tensors.push((format!("{p}.post_attention_layernorm.weight"), "BF16", vec![d]));
        for (proj, rows) in [("q_proj", d), ("k_proj", d_kv), ("v_proj", d_kv)] {
            tensors.push((format!("{p}.self_attn.{proj}.weight"), "BF16", vec![rows, d]));
        }
        tensors.push((format!("{p}.self_attn.o_proj.weight"), "BF16", vec![d, d]));
        tensors.push((format!("{p}.block_sparse_moe.gate.weight"), "BF16", vec![experts, d]));
        for e in 0..experts {
            for (w, shape) in [("w1", [d_mlp, d]), ("w3", [d_mlp, d]), ("w2", [d, d_mlp])] {
                tensors.push((format!("{p}.block_sparse_moe.experts.{e}.{w}.weight"), "BF16", shape.to_vec()));
            }
        }
    }
    let config = serde_json::json!({
        "model_type": "mixtral", "hidden_size": d, "intermediate_size": d_mlp, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": layers, "vocab_size": vocab, "num_local_experts": experts,
        "num_experts_per_tok": 2, "rope_theta": 1000000.0, "sliding_window": null,
        "max_position_embeddings": 32768, "bos_token_id": 1, "eos_token_id": 2
    });
    let (stream, read, total) = planned(tensors, config);
    let per_layer = 2 * (2 * d * d + 2 * d_kv * d + 2 * d) as u64;
    let expected = 2 * (2 * vocab * d) as u64 + layers as u64 * per_layer + 2 * d as u64;
    assert_eq!(read, expected, "the embeddings, attention and norms");
    assert!(matches!(stream.config.mlp, headprint::model::MlpKind::Experts { experts: 8, top_k: 2, .. }));
    eprintln!("Mixtral-8x7B's fingerprint reads {read} of {total} bytes");
}
