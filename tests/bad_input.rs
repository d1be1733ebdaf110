//! Bad input gets a specific error, never a panic or a hang.

use crate::common;

use std::collections::HashMap;

use common::fixture;
use headprint::Error;
use headprint::analysis::HeadId;
use headprint::backend::{Backend, block_on};
use headprint::model::{LoadParts, Model};
use headprint::weights::{ByteSource, MemorySource, ModelFiles};
use safetensors::tensor::TensorView;
use safetensors::{Dtype, SafeTensors};

fn gptchar_bytes() -> Vec<u8> {
    std::fs::read(fixture("gptchar/model.safetensors")).unwrap()
}

fn load_bytes(bytes: Vec<u8>) -> Result<Model, Error> {
    let files = ModelFiles::from_named(vec![(
        "model.safetensors".into(),
        Box::new(MemorySource::new("model.safetensors", bytes)) as Box<dyn ByteSource>,
    )])?;
    Model::load(&files, LoadParts::Everything)
}

/// Rewrites the gptchar fixture through `edit`, which may drop, rename or replace tensors.
fn edited(edit: impl Fn(&mut Vec<(String, Dtype, Vec<usize>, Vec<u8>)>)) -> Vec<u8> {
    let bytes = gptchar_bytes();
    let file = SafeTensors::deserialize(&bytes).unwrap();
    let (_, metadata) = SafeTensors::read_metadata(&bytes).unwrap();
    let mut tensors: Vec<_> =
        file.tensors().into_iter().map(|(n, t)| (n, t.dtype(), t.shape().to_vec(), t.data().to_vec())).collect();
    edit(&mut tensors);
    let views: Vec<(String, TensorView)> =
        tensors.iter().map(|(n, d, s, b)| (n.clone(), TensorView::new(*d, s.clone(), b).unwrap())).collect();
    let meta: Option<HashMap<String, String>> = metadata.metadata().clone();
    safetensors::serialize(views, meta).unwrap()
}

/// A file with a hand-written header and `data_len` zero bytes of data.
fn with_header(header: &str, data_len: usize) -> Vec<u8> {
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header.as_bytes());
    bytes.extend(std::iter::repeat_n(0u8, data_len));
    bytes
}

fn message(result: Result<Model, Error>) -> String {
    result.expect_err("an error").to_string()
}

#[test]
fn not_a_safetensors_file() {
    let text = b"PREFACE\n\n\nSUPPOSING that Truth is a woman--what then?".to_vec();
    let m = message(load_bytes(text));
    assert!(m.contains("not a safetensors file") || m.contains("absurd"), "{m}");
    assert!(message(load_bytes(b"tiny".to_vec())).contains("shorter than the 8-byte header length"));
    let m = message(load_bytes(with_header("[1, 2, 3]", 0)));
    assert!(m.contains("not a JSON object"), "{m}");
}

#[test]
fn truncated_file() {
    let mut bytes = gptchar_bytes();
    bytes.truncate(bytes.len() - 100);
    let m = message(load_bytes(bytes));
    assert!(m.contains("truncated"), "{m}");
}

#[test]
fn header_past_the_end_and_absurd_header() {
    let mut bytes = 5_000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    assert!(message(load_bytes(bytes)).contains("runs past the end"));
    let mut bytes = 10_000_000_000u64.to_le_bytes().to_vec();
    bytes.extend_from_slice(b"{}");
    let m = message(load_bytes(bytes));
    assert!(m.contains("absurd") && m.contains("10000000000"), "{m}");
}

#[test]
fn overlapping_and_out_of_range_offsets() {
    let overlapping = r#"{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}"#;
    let m = message(load_bytes(with_header(overlapping, 12)));
    assert!(m.contains("bad tensor table") && m.contains("overlap"), "{m}");
    let out_of_range = r#"{"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}"#;
    let m = message(load_bytes(with_header(out_of_range, 8)));
    assert!(m.contains("truncated"), "{m}");
    let mismatched = r#"{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,16]}}"#;
    let m = message(load_bytes(with_header(mismatched, 16)));
    assert!(m.contains("does not match its shape"), "{m}");
}

#[test]
fn unknown_dtype() {
    let unknown = r#"{"token_embedding_table.weight":{"dtype":"F99","shape":[2],"data_offsets":[0,8]}}"#;
    let m = message(load_bytes(with_header(unknown, 8)));
    assert!(m.contains("unknown dtype"), "{m}");
    let integer = edited(|t| {
        let lm = t.iter_mut().find(|x| x.0 == "lm_head.bias").unwrap();
        lm.1 = Dtype::I32;
    });
    let m = message(load_bytes(integer));
    assert!(m.contains("lm_head.bias") && m.contains("I32") && m.contains("cannot read"), "{m}");
}

#[test]
fn missing_tensor_and_bad_shape() {
    let m = message(load_bytes(edited(|t| t.retain(|x| x.0 != "blocks.1.ln2.weight"))));
    assert_eq!(m, "missing tensor `blocks.1.ln2.weight` for a gptchar model");
    let m = message(load_bytes(edited(|t| {
        let x = t.iter_mut().find(|x| x.0 == "lm_head.weight").unwrap();
        x.2 = vec![x.2[1], x.2[0]];
    })));
    assert!(m.contains("lm_head.weight") && m.contains("has shape [16, 13]"), "{m}");
}

#[test]
fn unknown_family() {
    let m = message(load_bytes(edited(|t| {
        for x in t.iter_mut() {
            x.0 = format!("encoder.{}", x.0.replace("token_embedding_table", "tok"));
        }
    })));
    assert!(m.contains("cannot tell which model family"), "{m}");
}

#[test]
fn non_finite_weights() {
    let m = message(load_bytes(edited(|t| {
        let x = t.iter_mut().find(|x| x.0 == "blocks.0.sa.heads.1.value.weight").unwrap();
        x.3[8..12].copy_from_slice(&f32::NAN.to_le_bytes());
        x.3[20..24].copy_from_slice(&f32::INFINITY.to_le_bytes());
    })));
    assert_eq!(m, "tensor `blocks.0.sa.heads.1.value.weight` holds 2 non-finite values (NaN or Inf), e.g. at index 2");
}

#[test]
fn zero_head_is_a_spectrum_error() {
    let model = load_bytes(edited(|t| {
        let x = t.iter_mut().find(|x| x.0 == "blocks.1.sa.heads.0.value.weight").unwrap();
        x.3.iter_mut().for_each(|b| *b = 0);
    }))
    .unwrap();
    // The model still fingerprints; the dead head carries the specific message in its cells.
    let report = headprint::analysis::fingerprint_model(&model, headprint::analysis::Mode::Folded).unwrap();
    let messages: Vec<String> = report.heads.iter().flat_map(|h| h.errors()).map(|e| e.to_string()).collect();
    assert_eq!(
        messages,
        [
            "head L1H0: OV circuit: the circuit is zero: no eigenvalues to read",
            "head L1H0: OV (residual) circuit: the circuit is zero: no eigenvalues to read"
        ]
    );
}

#[test]
fn tokens_out_of_range_and_unknown_heads() {
    let model = load_bytes(gptchar_bytes()).unwrap();
    let m = headprint::forward::run(&model, &[1, 2, 13]).err().unwrap().to_string();
    assert_eq!(m, "token id 13 is out of range (vocabulary size 13)");
    let too_long: Vec<usize> = vec![1; 25];
    assert!(
        headprint::forward::run(&model, &too_long)
            .err()
            .unwrap()
            .to_string()
            .contains("longer than the model's context of 24")
    );
    for bad in ["L2H0", "L0H2", "head3", "L-1H0", ""] {
        let m = HeadId::parse(bad, &model.config).unwrap_err().to_string();
        assert!(m.starts_with("unknown head") && m.contains("layer < 2"), "{bad}: {m}");
    }
    let tokenizer = headprint::tokens::Tokenizer::for_model(&model, None).unwrap();
    assert!(tokenizer.encode("Zarathustra").unwrap_err().to_string().contains("'Z' is not in the model's vocabulary"));
}

#[test]
fn shards_named_by_the_index_must_be_present() {
    let dir = fixture("llama");
    let mut files: Vec<(String, Box<dyn ByteSource>)> = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap().to_str().unwrap().contains("00003") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        files.push((path.display().to_string(), Box::new(MemorySource::new(path.display().to_string(), bytes))));
    }
    let files = ModelFiles::from_named(files).unwrap();
    let m = Model::load(&files, LoadParts::Circuits).unwrap_err().to_string();
    assert!(m.contains("shard `model-00003-of-00004.safetensors` named by the index is missing"), "{m}");
}

/// Loads a fixture folder with its config.json rewritten by `edit`.
fn with_config(name: &str, edit: impl Fn(&mut serde_json::Value)) -> Result<Model, Error> {
    let mut files: Vec<(String, Box<dyn ByteSource>)> = Vec::new();
    for entry in std::fs::read_dir(fixture(name)).unwrap() {
        let path = entry.unwrap().path();
        let file_name = path.file_name().unwrap().to_str().unwrap().to_string();
        let mut bytes = std::fs::read(&path).unwrap();
        if file_name == "config.json" {
            let mut config: serde_json::Value = serde_json::from_slice(&bytes).unwrap();
            edit(&mut config);
            bytes = serde_json::to_vec(&config).unwrap();
        } else if !file_name.ends_with(".safetensors") && !file_name.ends_with(".index.json") {
            continue;
        }
        files.push((file_name.clone(), Box::new(MemorySource::new(file_name, bytes))));
    }
    Model::load(&ModelFiles::from_named(files)?, LoadParts::Circuits)
}

fn config_message(name: &str, key: &str, value: serde_json::Value) -> String {
    message(with_config(name, |c| c[key] = value.clone()))
}

#[test]
fn config_contradicting_the_tensors_names_both_values() {
    // Each fixture loads with its own config (so only the edit can fail).
    for name in ["gpt2", "pythia", "llama", "llama32"] {
        with_config(name, |_| {}).unwrap();
    }
    let trillion = serde_json::json!(1_000_000_000_000u64);
    assert_eq!(
        config_message("gpt2", "n_layer", trillion.clone()),
        "bad config.json: `n_layer` is 1000000000000 but the tensors hold 2 layers"
    );
    for name in ["pythia", "llama"] {
        assert_eq!(
            config_message(name, "num_hidden_layers", trillion.clone()),
            "bad config.json: `num_hidden_layers` is 1000000000000 but the tensors hold 2 layers"
        );
    }
    assert_eq!(
        config_message("gpt2", "vocab_size", serde_json::json!(1u64 << 40)),
        "bad config.json: `vocab_size` is 1099511627776 but the tensors hold 40 embedding rows (vocabulary)"
    );
    assert_eq!(
        config_message("llama32", "vocab_size", serde_json::json!(67)),
        "bad config.json: `vocab_size` is 67 but the tensors hold 50 embedding rows (vocabulary)"
    );
    assert_eq!(
        config_message("gpt2", "n_embd", serde_json::json!(17)),
        "bad config.json: `n_embd` is 17 but the tensors hold 16 embedding columns (model width)"
    );
    for name in ["pythia", "llama32"] {
        let m = config_message(name, "hidden_size", serde_json::json!(64));
        assert!(m.starts_with("bad config.json: `hidden_size` is 64 but the tensors hold"), "{m}");
        assert!(m.ends_with(" embedding columns (model width)"), "{m}");
        let m = config_message(name, "hidden_size", serde_json::json!(-4));
        assert_eq!(m, "bad config.json: `hidden_size` is -4, not a whole number");
    }
    let m = config_message("pythia", "vocab_size", serde_json::json!("fifty"));
    assert_eq!(m, "bad config.json: `vocab_size` is \"fifty\" but the tensors hold 50 embedding rows (vocabulary)");
}

#[test]
fn head_counts_are_sentences_naming_the_field() {
    assert_eq!(
        config_message("llama", "num_attention_heads", serde_json::json!(0)),
        "bad config.json: the attention heads (config.json `num_attention_heads`) is 0: a model needs at least 1"
    );
    assert_eq!(
        config_message("llama32", "num_key_value_heads", serde_json::json!(0)),
        "bad config.json: the key/value heads (config.json `num_key_value_heads`) is 0: a model needs at least 1"
    );
    assert_eq!(
        config_message("llama32", "num_key_value_heads", serde_json::json!(3)),
        "bad config.json: 4 attention heads cannot share 3 key/value heads (it must divide them)"
    );
    assert_eq!(
        config_message("gpt2", "n_head", serde_json::json!(3)),
        "bad config.json: 3 attention heads (config.json `n_head`) do not divide the model width 16 evenly"
    );
    assert_eq!(
        config_message("pythia", "num_attention_heads", serde_json::json!(5)),
        "bad config.json: 5 attention heads (config.json `num_attention_heads`) do not divide the model width 32 evenly"
    );
    let m = message(with_config("llama", |c| {
        c["num_attention_heads"] = serde_json::json!(5);
        c.as_object_mut().unwrap().remove("head_dim");
    }));
    assert_eq!(
        m,
        "bad config.json: `num_attention_heads` 5 does not divide `hidden_size` 32 (and there is no `head_dim`)"
    );
    let m = config_message("llama", "head_dim", serde_json::json!(u64::MAX / 2));
    assert_eq!(m, format!("bad config.json: 4 heads of width {} overflow", u64::MAX / 2));
    assert_eq!(
        config_message("pythia-hub", "rotary_pct", serde_json::json!(1e12)),
        "bad config.json: `rotary_pct` 1000000000000 must be a fraction of the head, above 0 and at most 1"
    );
    let m = message(with_config("pythia", |c| c["rope_parameters"]["partial_rotary_factor"] = serde_json::json!(-1)));
    assert_eq!(m, "bad config.json: `partial_rotary_factor` -1 must be a fraction of the head, above 0 and at most 1");
}

#[test]
fn absurd_shapes_and_indices_are_refused_before_allocating() {
    // A 0-dimensional tensor where a matrix belongs.
    let m = message(load_bytes(edited(|t| {
        let x = t.iter_mut().find(|x| x.0 == "position_embedding_table.weight").unwrap();
        x.2 = vec![];
        x.3 = 1.0f32.to_le_bytes().to_vec();
    })));
    assert_eq!(m, "tensor `position_embedding_table.weight` has shape [], expected [block_size, n_embd]");
    // A layer (or head) numbered 10^12 must not size a list of 10^12 layers.
    let m = message(load_bytes(edited(|t| {
        for x in t.iter_mut().filter(|x| x.0.starts_with("blocks.1.")) {
            x.0 = x.0.replace("blocks.1.", "blocks.1000000000000.");
        }
    })));
    assert_eq!(m, "tensor names number `blocks.*` up to 1000000000000 but none is numbered 1");
    let m = message(load_bytes(edited(|t| {
        let x = t.iter_mut().find(|x| x.0 == "blocks.0.sa.heads.1.key.weight").unwrap();
        x.0 = "blocks.0.sa.heads.99999999999.key.weight".into();
    })));
    assert!(m.contains("up to 99999999999 but none is numbered 2"), "{m}");
    // Element counts that overflow, or need more bytes than the file has.
    let overflowing = r#"{"a":{"dtype":"F32","shape":[4294967296,4294967296,4294967296],"data_offsets":[0,8]}}"#;
    let m = message(load_bytes(with_header(overflowing, 8)));
    assert!(m.contains("bad tensor table") && m.contains("overflows"), "{m}");
    let huge = r#"{"a":{"dtype":"F32","shape":[1000000000,1000],"data_offsets":[0,4000000000000]}}"#;
    let m = message(load_bytes(with_header(huge, 8)));
    assert!(m.contains("truncated: the header says 40000000000") && m.ends_with("the file has 96"), "{m}");
    // A table whose end is just below u64::MAX: adding the header's length must not wrap.
    let end = u64::MAX - 4;
    let wrapping = format!(r#"{{"a":{{"dtype":"U8","shape":[{end}],"data_offsets":[0,{end}]}}}}"#);
    let m = message(load_bytes(with_header(&wrapping, 8)));
    assert!(m.contains("bad tensor table") && m.contains("overflows"), "{m}");
}

#[test]
fn tokenizer_of_another_model_is_refused() {
    let model = load_bytes(gptchar_bytes()).unwrap();
    let pythia = std::fs::read(fixture("pythia/tokenizer.json")).unwrap();
    let m = headprint::tokens::Tokenizer::for_model(&model, Some(&pythia)).err().unwrap().to_string();
    assert!(m.starts_with("tokenizer: tokenizer.json has token ids up to 4") && m.contains("13 rows"), "{m}");
    // An absurd id in an otherwise fitting tokenizer.
    let mut json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(fixture("gpt2/tokenizer.json")).unwrap()).unwrap();
    json["model"]["vocab"]["absurd"] = serde_json::json!(u32::MAX);
    let gpt2 = common::load("gpt2", LoadParts::Circuits);
    let bytes = serde_json::to_vec(&json).unwrap();
    let m = headprint::tokens::Tokenizer::for_model(&gpt2, Some(&bytes)).err().unwrap().to_string();
    assert!(m.contains(&format!("token ids up to {}", u32::MAX)) && m.contains("40 rows"), "{m}");
    assert!(
        headprint::tokens::Tokenizer::for_model(&gpt2, Some(&std::fs::read(fixture("gpt2/tokenizer.json")).unwrap()))
            .is_ok()
    );
}

#[test]
fn probe_sizes_past_the_bounds_are_refused_before_drawing() {
    use headprint::probes::induction::{random_first_copies, text_window_first_copies};
    let ordinary: Vec<usize> = (0..13).collect();
    let m = random_first_copies(&ordinary, 10, 0, 1_000_000_000_000).unwrap_err().to_string();
    assert_eq!(m, "an induction probe of 1000000000000 sequences: ask for 1 to 1000");
    let m = random_first_copies(&ordinary, usize::MAX, 0, 8).unwrap_err().to_string();
    assert_eq!(m, format!("a first copy of {} tokens: ask for 2 to 8192 (it is repeated once)", usize::MAX));
    assert!(random_first_copies(&ordinary, 0, 0, 8).unwrap_err().to_string().contains("of 0 tokens"));
    assert!(text_window_first_copies(&ordinary, 5, 0, 0).unwrap_err().to_string().contains("of 0 sequences"));
    // Seeds wrap past u64::MAX instead of overflowing.
    let copies = random_first_copies(&ordinary, 4, u64::MAX, 2).unwrap();
    assert_eq!(copies[1].tokens, headprint::probes::random_first_copy(&ordinary, 4, 0).unwrap());
}

#[test]
fn a_model_without_positions_is_refused() {
    let m = message(load_bytes(edited(|t| {
        let x = t.iter_mut().find(|x| x.0 == "position_embedding_table.weight").unwrap();
        x.2[0] = 0;
        x.3.clear();
    })));
    assert_eq!(m, "the context (position embedding rows) is 0: a model needs at least 1 position");
}

#[test]
fn a_tokenizer_json_with_a_broken_decoder_is_an_error_not_a_panic() {
    // Found by fuzzing: the tokenizers crate panics ("Helper") on a decoder that is not valid JSON.
    let text = std::fs::read_to_string(fixture("gpt2/tokenizer.json")).unwrap();
    let broken = text.replacen("\"decoder\": null", "\"decoder\": {\"x\": ,}", 1);
    assert_ne!(broken, text);
    let gpt2 = common::load("gpt2", LoadParts::Circuits);
    let m = headprint::tokens::Tokenizer::for_model(&gpt2, Some(broken.as_bytes())).err().unwrap().to_string();
    assert!(m.starts_with("tokenizer: tokenizer.json is not valid JSON: expected value at line"), "{m}");
}

#[test]
fn a_tokenizer_json_with_bad_text_in_its_decoder_is_an_error_not_a_panic() {
    // Found by fuzzing: bytes that are not UTF-8 in a decoder's key passed the syntax check
    // (serde_json skips ignored strings unchecked) and the tokenizers crate panicked ("Helper").
    let text = std::fs::read_to_string(fixture("gpt2/tokenizer.json")).unwrap();
    let gpt2 = common::load("gpt2", LoadParts::Circuits);
    let mut bytes =
        text.replacen("\"decoder\": null", "\"decoder\": {\"type\": \"BPE\", \"enXXXX\": null}", 1).into_bytes();
    let at = bytes.windows(6).position(|w| w == b"enXXXX").unwrap();
    bytes[at + 2..at + 6].copy_from_slice(&[0x9f, 0xa0, 0x90, 0x99]);
    let m = headprint::tokens::Tokenizer::for_model(&gpt2, Some(&bytes)).err().unwrap().to_string();
    assert_eq!(m, format!("tokenizer: tokenizer.json is not UTF-8 text (byte {} is not)", at + 2));
    // A lone surrogate escape is valid JSON syntax but no string: refused, not a panic.
    let lone = text.replacen("\"decoder\": null", "\"decoder\": {\"type\": \"BPE\", \"\\ud800\": null}", 1);
    assert_ne!(lone, text);
    let m = headprint::tokens::Tokenizer::for_model(&gpt2, Some(lone.as_bytes())).err().unwrap().to_string();
    assert!(m.starts_with("tokenizer: tokenizer.json is not valid JSON: unexpected end of hex escape"), "{m}");
}

#[test]
fn describing_empty_or_wrapping_probe_sequences_does_not_overflow() {
    // Found by fuzzing worker messages: `count: 0` underflowed the last seed.
    use headprint::worker::protocol::ProbeSequence;
    let empty = ProbeSequence::UniformRandom { seed: 0, len: 12, count: 0 };
    assert_eq!(empty.describe(None), "12 uniformly random tokens repeated twice (no sequences)");
    let wrapping = ProbeSequence::UniformRandom { seed: u64::MAX, len: 4, count: 2 };
    assert_eq!(
        wrapping.describe(None),
        format!("4 uniformly random tokens repeated twice (mean of 2, seeds {}–0)", u64::MAX)
    );
}

#[test]
fn a_run_that_would_keep_gigabytes_of_patterns_is_refused_before_it_allocates() {
    // A rotary model has no context limit: a long prompt on it is bounded by what the run keeps.
    let llama = common::load("llama32", LoadParts::Everything);
    let (layers, heads, vocab) = (llama.config.layers as u64, llama.config.heads as u64, llama.config.vocab as u64);
    assert_eq!(llama.config.context, None);
    // Largest n with layers × heads × n² f32 patterns and n × vocab f32 logits within 1 GiB,
    // found independently.
    let kept = |n: u64| (layers * heads * n * n + n * vocab) * 4;
    let mut longest = 0u64;
    while kept(longest + 1) <= 1 << 30 {
        longest += 1;
    }
    let tokens = vec![1usize; longest as usize + 1];
    let m = match headprint::forward::run(&llama, &tokens) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("{} tokens ran", tokens.len()),
    };
    let gb = kept(longest + 1) as f64 / 1e9;
    assert!(
        m.contains(&format!(
            "{} tokens on {layers} layers × {heads} heads would keep {gb:.1} GB of attention patterns and logits, over the 1.1 GB a run may use: use at most {longest} tokens",
            longest + 1
        )),
        "{m}"
    );
    // The induction probe's longest first copy (8192 tokens, so 16 385 with the BOS) on it.
    let copy: Vec<usize> = (0..8192).map(|i| i % llama.config.vocab).collect();
    let first = headprint::probes::FirstCopy { tokens: copy, source: headprint::probes::RepeatSource::Given };
    let m = match block_on(headprint::probes::induction_probe(&llama, &[first], Some(1), &mut Backend::cpu())) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("a 16 385-token probe ran"),
    };
    assert!(m.contains("16385 tokens on") && m.contains("attention patterns, head outputs and logits"), "{m}");
}

#[test]
fn a_model_without_a_vocabulary_takes_prompts_and_suites_as_ids() {
    // Prompts and suites alike take ids: a model without a vocabulary has no other way in.
    let gpt2 = common::load("gpt2", LoadParts::Everything);
    let tokenizer = headprint::tokens::Tokenizer::for_model(&gpt2, None).unwrap();
    assert_eq!(tokenizer.encode(" 3, 1,4 ").unwrap(), [3, 1, 4]);
    let m = tokenizer.encode("abc").unwrap_err().to_string();
    assert!(m.ends_with("give token ids, e.g. 3,1,4 (\"abc\" is not a token id)"), "{m}");
    let suite =
        headprint::probes::Suite::from_json(r#"{"name": "ids", "prompts": [{"id": "P", "text": "5,6,5"}]}"#).unwrap();
    let head = headprint::analysis::HeadId::new(1, 0);
    let rows =
        block_on(headprint::probes::verdict_table(&gpt2, &tokenizer, &suite, head, None, &mut Backend::cpu())).unwrap();
    assert_eq!(rows[0].tokens, ["#5", "#6", "#5"]);
}

#[test]
fn a_bpe_merge_shorter_than_its_subword_prefix_is_an_error_not_a_panic() {
    // Found by fuzzing: the tokenizers crate slices `b[prefix.len()..]` of every merge (a, b).
    let text = std::fs::read_to_string(fixture("gpt2/tokenizer.json")).unwrap();
    let mut json: serde_json::Value = serde_json::from_str(&text).unwrap();
    json["model"]["continuing_subword_prefix"] = "v\\".into();
    let first = json["model"]["merges"][0].clone();
    let gpt2 = common::load("gpt2", LoadParts::Circuits);
    let m =
        headprint::tokens::Tokenizer::for_model(&gpt2, Some(json.to_string().as_bytes())).err().unwrap().to_string();
    let b = match &first {
        serde_json::Value::Array(pair) => pair[1].as_str().unwrap().to_string(),
        other => other.as_str().unwrap().split_once(' ').unwrap().1.to_string(),
    };
    assert_eq!(
        m,
        format!(
            "tokenizer: tokenizer.json's merge 0 joins {b:?}, which is too short for its continuing-subword prefix \"v\\\\\" (2 bytes) or splits a character there"
        )
    );
}
