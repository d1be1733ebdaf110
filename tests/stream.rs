//! Reading a model a layer at a time gives exactly what the whole load gives: the same rows of
//! a tensor, the same Grams, the same layers and the same fingerprints, on every fixture.

use crate::common;

use common::{FAMILIES, fixture};
use headprint::Error;
use std::rc::Rc;

use headprint::analysis::circuits::{Grams, SEGMENT_ROWS};
use headprint::analysis::{Mode, fingerprint_model, fingerprint_stream};
use headprint::backend::BackendChoice;
use headprint::model::{LoadParts, Model, ModelStream, Weights};
use headprint::weights::{ByteSource, MemorySource, ModelFiles, SafetensorsFile};
use headprint::worker::pool::{GramSum, LayerHeads};
use headprint::worker::protocol::{GramsData, Reply, Request, Role};
use headprint::worker::session::Session;
use safetensors::Dtype;
use safetensors::tensor::TensorView;

fn files(name: &str) -> ModelFiles {
    ModelFiles::from_path(&fixture(name)).expect("fixture files")
}

#[test]
fn streamed_fingerprints_equal_the_whole_model_fingerprints_on_every_fixture() {
    for name in FAMILIES {
        let files = files(name);
        let model = Model::load(&files, LoadParts::Circuits).unwrap();
        let stream = ModelStream::open(&files).unwrap();
        for mode in [Mode::Folded, Mode::Raw] {
            let whole = fingerprint_model(&model, mode).unwrap();
            let streamed = fingerprint_stream(&stream, mode).unwrap();
            // Same blocks, same products, same order: the numbers are bit for bit the same, so
            // the JSON contract (every eigenvalue and feature, the model summary) is identical.
            let (whole, streamed) = (serde_json::to_string(&whole).unwrap(), serde_json::to_string(&streamed).unwrap());
            assert_eq!(whole, streamed, "{name} ({})", mode.name());
        }
    }
}

#[test]
fn streamed_grams_equal_the_whole_model_grams_on_every_fixture() {
    for name in FAMILIES {
        let files = files(name);
        let model = Model::load(&files, LoadParts::Circuits).unwrap();
        let whole = Grams::compute(&model);
        let streamed = Grams::stream(&ModelStream::open(&files).unwrap()).unwrap();
        assert_eq!(streamed.tied, whole.tied, "{name}: tied");
        assert_eq!(streamed.tied, model.w_u.is_none(), "{name}: tied as loaded");
        assert_eq!(streamed.embed.shape(), (model.config.d_model, model.config.d_model), "{name}");
        assert_eq!(streamed.embed, whole.embed, "{name}: W_E^T W_E");
        assert_eq!(streamed.cross, whole.cross, "{name}: W_U W_E");
        assert_eq!(streamed.unembed, whole.unembed, "{name}: W_U W_U^T");
    }
}

#[test]
fn a_streamed_layer_is_the_loaded_layer() {
    for name in FAMILIES {
        let files = files(name);
        let model = Model::load(&files, LoadParts::Everything).unwrap();
        let stream = ModelStream::open(&files).unwrap();
        assert_eq!(stream.config, model.config, "{name}: config");
        assert_eq!(stream.parameter_count, model.parameter_count, "{name}: parameters");
        assert_eq!(stream.ln_final.weight, model.ln_final.weight, "{name}: ln_final");
        for (l, loaded) in model.layers.iter().enumerate() {
            let layer = stream.layer(l, LoadParts::Everything).unwrap();
            let (a, b) = (&layer.attention, &loaded.attention);
            assert!(a.w_q == b.w_q && a.w_k == b.w_k && a.w_v == b.w_v && a.w_o == b.w_o, "{name} L{l}: weights");
            assert!(a.b_q == b.b_q && a.b_k == b.b_k && a.b_v == b.b_v && a.b_o == b.b_o, "{name} L{l}: biases");
            assert_eq!((&layer.ln1, &layer.ln2), (&loaded.ln1, &loaded.ln2), "{name} L{l}: norms");
            let (m, n) = (layer.mlp.as_ref().unwrap(), loaded.mlp.as_ref().unwrap());
            assert!(m.w_in == n.w_in && m.w_out == n.w_out && m.w_gate == n.w_gate, "{name} L{l}: MLP");
            assert!(stream.layer(l, LoadParts::Circuits).unwrap().mlp.is_none(), "{name} L{l}: no MLP for circuits");
        }
    }
}

/// A 7 x 5 matrix of distinct values, exact in f16 and bf16, stored as `dtype`.
fn matrix_file(dtype: Dtype) -> (Vec<f32>, Vec<u8>) {
    let values: Vec<f32> = (0..35).map(|i| (i as f32 - 17.0) * 0.25).collect();
    let bytes: Vec<u8> = match dtype {
        Dtype::F32 => values.iter().flat_map(|v| v.to_le_bytes()).collect(),
        Dtype::F16 => values.iter().flat_map(|&v| half::f16::from_f32(v).to_le_bytes()).collect(),
        Dtype::BF16 => values.iter().flat_map(|&v| half::bf16::from_f32(v).to_le_bytes()).collect(),
        other => panic!("no test data for {other:?}"),
    };
    let vector: Vec<u8> = [1.0f32, 2.0].iter().flat_map(|v| v.to_le_bytes()).collect();
    let views = vec![
        ("m".to_string(), TensorView::new(dtype, vec![7, 5], &bytes).unwrap()),
        ("v".to_string(), TensorView::new(Dtype::F32, vec![2], &vector).unwrap()),
    ];
    (values, safetensors::serialize(views, None).unwrap())
}

#[test]
fn a_block_of_rows_equals_the_same_rows_of_the_whole_tensor() {
    for dtype in [Dtype::F32, Dtype::F16, Dtype::BF16] {
        let (values, bytes) = matrix_file(dtype);
        let source = MemorySource::new("m.safetensors", bytes);
        let file = SafetensorsFile::open(&source).unwrap();
        let whole = file.read("m").unwrap().unwrap();
        assert_eq!(whole.data, values, "{dtype:?}: the values survive the dtype");
        for (start, end) in [(0, 7), (2, 5), (6, 7), (3, 3)] {
            let rows = file.read_rows("m", start..end).unwrap().unwrap();
            assert_eq!(rows.shape, vec![end - start, 5], "{dtype:?} {start}..{end}");
            assert_eq!(rows.data, whole.data[start * 5..end * 5], "{dtype:?} {start}..{end}");
        }
        assert_eq!(file.read_rows("absent", 0..1).unwrap(), None);
    }
    // Through the store, across the files of a model.
    let (values, bytes) = matrix_file(Dtype::BF16);
    let files = ModelFiles::from_named(vec![(
        "model.safetensors".into(),
        Box::new(MemorySource::new("model.safetensors", bytes)) as Box<dyn ByteSource>,
    )])
    .unwrap();
    let store = headprint::weights::TensorStore::open(&files).unwrap();
    assert_eq!(store.read_rows("m", "test", 4..6).unwrap().data, values[20..30]);
    assert!(matches!(store.read_rows("w", "test", 0..1), Err(Error::MissingTensor { .. })));
}

#[test]
fn rows_outside_the_tensor_are_a_clear_error() {
    let (_, bytes) = matrix_file(Dtype::F16);
    let source = MemorySource::new("m.safetensors", bytes);
    let file = SafetensorsFile::open(&source).unwrap();
    let error = file.read_rows("m", 5..8).unwrap_err();
    assert_eq!(error, Error::RowsOutOfRange { tensor: "m".into(), start: 5, end: 8, rows: 7 });
    assert_eq!(error.to_string(), "rows 5..8 of tensor `m` are out of range: it has 7 rows");
    #[allow(clippy::reversed_empty_ranges)]
    let backwards = file.read_rows("m", 4..2).unwrap_err();
    assert!(matches!(backwards, Error::RowsOutOfRange { start: 4, end: 2, .. }), "{backwards}");
    let vector = file.read_rows("v", 0..1).unwrap_err();
    assert!(matches!(&vector, Error::BadShape { tensor, .. } if tensor == "v"), "{vector}");
}

#[test]
fn a_non_finite_value_in_a_block_of_rows_is_refused_with_its_index_in_the_tensor() {
    let values: Vec<f32> = (0..12).map(|i| if i == 9 { f32::NAN } else { i as f32 }).collect();
    let bytes: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
    let views = vec![("m".to_string(), TensorView::new(Dtype::F32, vec![4, 3], &bytes).unwrap())];
    let source = MemorySource::new("m.safetensors", safetensors::serialize(views, None).unwrap());
    let file = SafetensorsFile::open(&source).unwrap();
    assert_eq!(file.read_rows("m", 0..3).unwrap().unwrap().data, values[..9]);
    let error = file.read_rows("m", 2..4).unwrap_err();
    assert_eq!(error, Error::NonFinite { tensor: "m".into(), count: 1, first_index: 9 });
}

#[test]
fn the_streamed_embedding_rows_are_the_loaded_ones() {
    for name in ["gpt2-nanogpt", "llama32", "pythia"] {
        let files = files(name);
        let model = Model::load(&files, LoadParts::Circuits).unwrap();
        let stream = ModelStream::open(&files).unwrap();
        let vocab = model.config.vocab;
        let rows = vocab / 3..vocab / 2;
        let embed = stream.embedding_rows(rows.clone()).unwrap();
        assert_eq!(embed, model.w_e.rows(rows.start, rows.len()), "{name}: W_E rows");
        match (stream.stored_unembedding_rows(rows.clone()).unwrap(), &model.w_u) {
            (Some(u), Some(w_u)) => assert_eq!(u.transpose(), w_u.columns(rows.start, rows.len()), "{name}: W_U"),
            (None, None) => {}
            (u, w_u) => panic!("{name}: tied disagrees ({} vs {})", u.is_some(), w_u.is_some()),
        }
        let past = stream.embedding_rows(vocab - 1..vocab + 1).unwrap_err();
        assert!(matches!(past, Error::RowsOutOfRange { rows, .. } if rows == vocab), "{name}: {past}");
    }
}

/// The gptchar fixture with its vocabulary grown to 2600 tokens (three blocks of the Grams'
/// 1024 rows, the last one partial): embedding stored as bf16, unembedding as f16, so the
/// streamed blocks cross block boundaries in both half-precision formats.
fn gptchar_with_large_vocabulary() -> Vec<u8> {
    gptchar_with_vocabulary(2600)
}

/// The gptchar fixture with its vocabulary grown to `vocab` tokens (see above).
fn gptchar_with_vocabulary(vocab: usize) -> Vec<u8> {
    let bytes = std::fs::read(fixture("gptchar/model.safetensors")).unwrap();
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let d_model = file.tensor("token_embedding_table.weight").unwrap().shape()[1];
    // A fixed, irregular pattern with a common direction, as trained embeddings have.
    let value = |i: usize, salt: usize| ((i * 7919 + salt * 104_729) % 2003) as f32 / 1001.5 - 1.0 + 0.25;
    let embedding: Vec<u8> =
        (0..vocab * d_model).flat_map(|i| half::bf16::from_f32(value(i, 1)).to_le_bytes()).collect();
    let unembedding: Vec<u8> =
        (0..vocab * d_model).flat_map(|i| half::f16::from_f32(value(i, 2)).to_le_bytes()).collect();
    let mut views: Vec<(String, TensorView)> = file
        .tensors()
        .into_iter()
        .filter(|(name, _)| {
            !["token_embedding_table.weight", "lm_head.weight", "lm_head.bias"].contains(&name.as_str())
        })
        .collect();
    views.push((
        "token_embedding_table.weight".into(),
        TensorView::new(Dtype::BF16, vec![vocab, d_model], &embedding).unwrap(),
    ));
    views.push(("lm_head.weight".into(), TensorView::new(Dtype::F16, vec![vocab, d_model], &unembedding).unwrap()));
    // No `vocab` metadata: its 13 characters would not match the grown embedding.
    safetensors::serialize(views, None).unwrap()
}

#[test]
fn streaming_across_several_blocks_of_vocabulary_rows_gives_the_same_grams_and_fingerprints() {
    let files = ModelFiles::from_named(vec![(
        "model.safetensors".into(),
        Box::new(MemorySource::new("model.safetensors", gptchar_with_large_vocabulary())) as Box<dyn ByteSource>,
    )])
    .unwrap();
    let model = Model::load(&files, LoadParts::Circuits).unwrap();
    assert_eq!(model.config.vocab, 2600);
    let stream = ModelStream::open(&files).unwrap();
    let (whole, streamed) = (Grams::compute(&model), Grams::stream(&stream).unwrap());
    assert!(!streamed.tied);
    assert_eq!(streamed.embed, whole.embed);
    assert_eq!(streamed.cross, whole.cross);
    assert_eq!(streamed.unembed, whole.unembed);
    for mode in [Mode::Folded, Mode::Raw] {
        let whole = serde_json::to_string(&fingerprint_model(&model, mode).unwrap()).unwrap();
        let streamed = serde_json::to_string(&fingerprint_stream(&stream, mode).unwrap()).unwrap();
        assert_eq!(whole, streamed, "{}", mode.name());
    }
}

/// A run that keeps only some cells of each pattern and each position's top token gets exactly
/// those of the same run kept whole (the top token the last of the highest logits), batched
/// beside it, on every family.
#[test]
fn a_run_keeping_cells_and_top_tokens_gets_those_of_the_whole_run() {
    use headprint::forward::{self, HeadOutputs, Keep, Logits, Patterns};
    for name in FAMILIES {
        let files = files(name);
        let stream = ModelStream::open(&files).unwrap();
        let vocab = stream.config.vocab;
        let tokens: Vec<usize> = (0..11).map(|i| (i * 5 + 2) % vocab).collect();
        let cells: Vec<(usize, usize)> =
            (0..tokens.len()).flat_map(|q| [(q, q), (q, q / 3), (q, tokens.len() - 1)]).collect();
        let some =
            Keep { head_outputs: HeadOutputs::None, patterns: Patterns::Cells(&cells), logits: Logits::TopToken };
        let runs: Vec<(&[usize], Keep)> = vec![(&tokens, HeadOutputs::None.into()), (&tokens, some)];
        let outputs = forward::run_batch(&stream, &runs, &mut |_, _| {}).unwrap();
        let (whole, kept) = (&outputs[0], &outputs[1]);
        assert!(kept.patterns.is_empty() && kept.logits.is_empty(), "{name}: nothing kept whole");
        for (layer, (cells_kept, patterns)) in kept.pattern_cells.iter().zip(&whole.patterns).enumerate() {
            for (head, (values, pattern)) in cells_kept.iter().zip(patterns).enumerate() {
                let want: Vec<f32> = cells.iter().map(|&(q, k)| pattern[(q, k)]).collect();
                assert_eq!(values, &want, "{name} L{layer}H{head}");
            }
        }
        assert_eq!(kept.pattern_cells.len(), stream.config.layers, "{name}");
        let top: Vec<usize> = (0..tokens.len())
            .map(|t| {
                let row = whole.logits.row(t);
                (0..vocab).max_by(|&a, &b| row[a].total_cmp(&row[b])).unwrap()
            })
            .collect();
        assert_eq!(kept.top_tokens, top, "{name}: top tokens");
        assert_eq!(kept.final_scale, whole.final_scale, "{name}: final scales");
    }
}

/// Heads' ranks kept pair by pair during the pass are exactly the ranks the kept projections
/// give once divided by the final norm's scale (`x / s >= p / s`), on every family: with a
/// direction that is another's copy (equal contributions) and one that is another's times
/// (1 - 1e-7) (contributions an ulp or so apart, which the division may round together).
#[test]
fn ranks_kept_during_the_pass_are_those_of_the_kept_projections() {
    use headprint::forward::{self, HeadOutputs, Keep};
    for name in FAMILIES {
        let files = files(name);
        let stream = ModelStream::open(&files).unwrap();
        let (vocab, d_model) = (stream.config.vocab, stream.config.d_model);
        let tokens: Vec<usize> = (0..13).map(|i| (i * 7 + 5) % vocab).collect();
        let mut directions = nalgebra::DMatrix::from_fn(d_model, 6, |i, j| ((i * 5 + j * 3) % 7) as f32 - 3.0);
        let first = directions.column(0).into_owned();
        directions.column_mut(1).copy_from(&first);
        directions.column_mut(2).copy_from(&(&first * (1.0 - 1e-7)));
        let pairs: Vec<(usize, usize)> = (0..tokens.len()).flat_map(|t| [(t, 0), (t, 2), (t, t % 6)]).collect();
        let ranked = Keep::from(HeadOutputs::Ranked { directions: &directions, pairs: &pairs });
        let runs: Vec<(&[usize], Keep)> =
            vec![(&tokens, HeadOutputs::Projected(&directions).into()), (&tokens, ranked)];
        let outputs = forward::run_batch(&stream, &runs, &mut |_, _| {}).unwrap();
        let (projected, kept) = (&outputs[0], &outputs[1]);
        assert!(kept.head_outputs.is_empty(), "{name}: no projections kept");
        let scale = &projected.final_scale;
        let want: Vec<Vec<usize>> = projected
            .head_outputs
            .iter()
            .flatten()
            .map(|p| {
                let value = |t: usize, j: usize| p[(t, j)] / scale[t];
                pairs
                    .iter()
                    .map(|&(t, c)| 1 + (0..6).filter(|&j| j != c && value(t, j) >= value(t, c)).count())
                    .collect()
            })
            .collect();
        let got: Vec<Vec<usize>> = kept.head_ranks.iter().flatten().cloned().collect();
        assert_eq!(got, want, "{name}");
        assert!(want.iter().flatten().any(|&r| r > 1), "{name}: some pair is outranked");
    }
}

#[test]
fn a_streamed_batched_forward_pass_is_each_sequence_run_alone_on_the_loaded_model() {
    use headprint::forward::{self, HeadOutputs, Keep};
    for name in FAMILIES {
        let files = files(name);
        let model = Model::load(&files, LoadParts::Everything).unwrap();
        let stream = ModelStream::open(&files).unwrap();
        let vocab = model.config.vocab;
        let sequences: Vec<Vec<usize>> =
            vec![(0..9).map(|i| (i * 7 + 3) % vocab).collect(), (0..5).map(|i| (i * 11 + 1) % vocab).collect()];
        let directions = nalgebra::DMatrix::from_fn(model.config.d_model, 3, |i, j| ((i + 2 * j) % 5) as f32 - 2.0);
        let runs: Vec<(&[usize], Keep)> =
            sequences.iter().map(|s| (s.as_slice(), HeadOutputs::Projected(&directions).into())).collect();
        let mut layers_done = Vec::new();
        let batched = forward::run_batch(&stream, &runs, &mut |done, _| layers_done.push(done)).unwrap();
        let steps = model.config.layers + 1;
        assert_eq!(layers_done, (1..=steps).collect::<Vec<_>>(), "{name}: a step per layer, then the unembedding");
        for (tokens, streamed) in sequences.iter().zip(&batched) {
            let alone = forward::run_with(&model, tokens, HeadOutputs::Projected(&directions).into()).unwrap();
            // The same layers and the same per-sequence products: patterns, head outputs and
            // norm scales are bit for bit those of the sequence run alone on the loaded model.
            assert_eq!(streamed.patterns, alone.patterns, "{name}: patterns");
            assert_eq!(streamed.head_outputs, alone.head_outputs, "{name}: head outputs");
            assert_eq!(streamed.final_scale, alone.final_scale, "{name}: final norm scales");
            // The logits come from W_U read a block of tokens at a time (one product per block),
            // so only the summation's rounding may differ.
            let largest = alone.logits.amax();
            let difference = (&streamed.logits - &alone.logits).amax();
            assert!(difference <= 1e-5 * largest.max(1.0), "{name}: logits differ by {difference} (largest {largest})");
        }
    }
}

#[test]
fn runs_are_batched_so_that_their_outputs_fit_the_budget_together() {
    use headprint::forward::{self, HeadOutputs, Keep};
    let files = files("llama32");
    let stream = ModelStream::open(&files).unwrap();
    let vocab = stream.config.vocab;
    let sequences: Vec<Vec<usize>> =
        [9usize, 5, 12, 3, 7, 10].iter().map(|&n| (0..n).map(|i| (i * 7 + n) % vocab).collect()).collect();
    let runs: Vec<(&[usize], Keep)> = sequences.iter().map(|s| (s.as_slice(), HeadOutputs::None.into())).collect();
    let bytes: Vec<u64> = runs.iter().map(|(t, k)| forward::kept_bytes(&stream, t.len(), *k)).collect();
    // Patterns (layers × heads × n², f32) and logits (n × vocab, f32), counted independently.
    let config = &stream.config;
    for (b, s) in bytes.iter().zip(&sequences) {
        let n = s.len() as u64;
        assert_eq!(*b, 4 * (config.layers as u64 * config.heads as u64 * n * n + n * vocab as u64));
    }
    // A budget that holds the first two runs together but not the third beside them.
    let limit = bytes[0] + bytes[1];
    let ranges = forward::batches_within(&stream, &runs, limit);
    assert!(ranges.len() > 1, "{ranges:?}");
    assert_eq!(ranges[0], 0..2, "{ranges:?}");
    // The ranges cover every run once, in order; each fits (or holds one run) and could not
    // have taken the next run too.
    assert_eq!(ranges.iter().flat_map(|r| r.clone()).collect::<Vec<_>>(), (0..runs.len()).collect::<Vec<_>>());
    for (i, range) in ranges.iter().enumerate() {
        let sum: u64 = bytes[range.clone()].iter().sum();
        assert!(sum <= limit || range.len() == 1, "{range:?}: {sum} > {limit}");
        if let Some(next) = ranges.get(i + 1) {
            assert!(sum + bytes[next.start] > limit, "{range:?} could have taken run {}", next.start);
        }
    }
    // Run batch by batch, the outputs are those of one pass over all the runs.
    let whole = forward::run_batch(&stream, &runs, &mut |_, _| {}).unwrap();
    let mut parts = Vec::new();
    for range in &ranges {
        parts.extend(forward::run_batch(&stream, &runs[range.clone()], &mut |_, _| {}).unwrap());
    }
    for (part, one) in parts.iter().zip(&whole) {
        assert_eq!(part.patterns, one.patterns);
        assert_eq!(part.logits, one.logits);
    }
    // With the default budget these small runs make one batch.
    assert_eq!(forward::batches(&stream, &runs), vec![0..runs.len()]);
}

#[test]
fn the_streamed_ov_token_view_is_the_loaded_one() {
    use headprint::analysis::circuits::{Circuits, HeadWeights};
    use headprint::analysis::{HeadId, OvTokenLogits};
    for name in FAMILIES {
        let files = files(name);
        let model = Model::load(&files, LoadParts::Circuits).unwrap();
        let stream = ModelStream::open(&files).unwrap();
        let grams = Grams::compute(&model);
        let id = HeadId::new(model.config.layers - 1, model.config.heads - 1);
        for mode in [Mode::Folded, Mode::Raw] {
            let loaded = OvTokenLogits::new(&Circuits::new(&model, &grams, mode), id).unwrap();
            let layer = stream.layer(id.layer, LoadParts::Circuits).unwrap();
            let weights = HeadWeights::new(&stream.config, &layer, &stream.ln_final, id.head, mode);
            let streamed = OvTokenLogits::read(&stream, &weights, mode).unwrap();
            assert_eq!(streamed.diagonal(), loaded.diagonal(), "{name} {}: self-copy logits", mode.name());
            assert_eq!(streamed.normalised_diagonal(), loaded.normalised_diagonal(), "{name} {}", mode.name());
            assert_eq!(streamed.row(1).unwrap(), loaded.row(1).unwrap(), "{name} {}: a row", mode.name());
            // What the worker counts against its budget: two vocab x d_head f32 sides and two
            // f32 norms per token.
            let (vocab, d_head) = (stream.config.vocab as u64, stream.config.d_head as u64);
            assert_eq!(streamed.bytes(), 4 * (2 * vocab * d_head + 2 * vocab), "{name}: bytes held");
        }
    }
}

/// A request and its reply as the page and a worker pass them: JSON both ways, the large
/// matrices beside it (as the host moves them in a `Float64Array`).
fn trip(session: &mut Session, mut request: Request, files: Vec<Box<dyn ByteSource>>) -> Reply {
    let payload = request.take_payload();
    let mut request: Request = serde_json::from_str(&serde_json::to_string(&request).unwrap()).unwrap();
    if let Some(values) = payload {
        request.put_payload(values);
    }
    let mut reply = session.handle(request, files, Rc::new(|_| {})).unwrap();
    let payload = reply.take_payload();
    let mut reply: Reply = serde_json::from_str(&serde_json::to_string(&reply).unwrap()).unwrap();
    if let Some(values) = payload {
        reply.put_payload(values).unwrap();
    }
    reply
}

#[test]
fn the_worker_pool_gives_the_bits_of_one_worker_whichever_worker_computes_which_part() {
    let vocab = 2 * SEGMENT_ROWS + 1808; // three segments, the last one partial
    let bytes = gptchar_with_vocabulary(vocab);
    let files = || vec![Box::new(MemorySource::new("model.safetensors", bytes.clone())) as Box<dyn ByteSource>];
    let names = || vec!["model.safetensors".to_string()];

    // One worker: the load the page asked for before the pool, and raw mode on request.
    let mut alone = Session::new(|| 0.0);
    let load = Request::Load {
        model: 1,
        names: names(),
        analyse: true,
        prepend_bos: true,
        backend: BackendChoice::Cpu,
        link: None,
    };
    let Reply::Analysed(analysis) = trip(&mut alone, load, files()) else { panic!("the model loads") };
    let Reply::Fingerprint { fingerprint: raw, .. } =
        trip(&mut alone, Request::Fingerprint { model: 1, mode: Mode::Raw }, vec![])
    else {
        panic!("raw mode answers")
    };

    // A pool of two: segments and layers split unevenly, the parts coming back out of order.
    let mut pool = [Session::new(|| 0.0), Session::new(|| 0.0)];
    let mut opened = Vec::new();
    for (session, role) in pool.iter_mut().zip([Role::Lead, Role::Helper]) {
        opened.push(trip(session, Request::Open { model: 7, names: names(), role, link: None }, files()));
    }
    let Reply::Opened { info, tied, segments, lead_bytes, helper_bytes } = &opened[0] else { panic!("the lead opens") };
    assert_eq!((*segments, *tied), (3, false));
    assert!(helper_bytes <= lead_bytes, "a helper holds no more than the lead ({helper_bytes} vs {lead_bytes})");
    assert_eq!(serde_json::to_string(info).unwrap(), serde_json::to_string(&analysis.info).unwrap());
    let config = &info.config;
    let mut sum = GramSum::new(config.d_model, false, *segments);
    for (worker, segment) in [(1, 2), (0, 1), (1, 0)] {
        let Reply::GramSegment { segment: got, grams } =
            trip(&mut pool[worker], Request::GramSegment { model: 7, segment }, vec![])
        else {
            panic!("segment {segment} answers")
        };
        assert_eq!(got, segment);
        sum.add(segment, grams.grams().unwrap()).unwrap();
    }
    let grams = sum.finish().unwrap();
    // The page's sum is the one worker's sum, bit for bit.
    let stream_files = ModelFiles::from_named(vec![("model.safetensors".into(), files().remove(0))]).unwrap();
    let whole = Grams::stream(&ModelStream::open(&stream_files).unwrap()).unwrap();
    assert_eq!((&grams.embed, &grams.cross, &grams.unembed), (&whole.embed, &whole.cross, &whole.unembed));
    for session in pool.iter_mut() {
        let set = Request::SetGrams { model: 7, grams: GramsData::of(&grams) };
        assert!(matches!(trip(session, set, vec![]), Reply::Done));
    }
    for (mode, single) in [(Mode::Folded, &analysis.folded), (Mode::Raw, &*raw)] {
        let mut heads = LayerHeads::new(config.layers);
        for layer in (0..config.layers).rev() {
            let request = Request::FingerprintLayer { model: 7, mode, layer, backend: BackendChoice::Cpu };
            let Reply::Heads { heads: got, gpu_bytes: None } = trip(&mut pool[layer % 2], request, vec![]) else {
                panic!("layer {layer} answers, from the CPU")
            };
            heads.add(layer, got, None).unwrap();
        }
        let pooled = heads.finish(config, info.parameters, &grams.backend, mode).unwrap();
        assert_eq!(serde_json::to_string(&pooled).unwrap(), serde_json::to_string(single).unwrap(), "{}", mode.name());
    }
    // A part the model does not have is refused by name, and a repeated segment by the sum.
    let bad = Request::GramSegment { model: 7, segment: 3 };
    let answer = pool[1].handle(bad, vec![], Rc::new(|_| {})).map(|_| ()).unwrap_err().to_string();
    assert!(answer.contains("no Gram segment 3"), "{answer}");
    let mut twice = GramSum::new(config.d_model, false, 3);
    twice.add(0, Grams::zeros(config.d_model, false)).unwrap();
    assert!(twice.add(0, Grams::zeros(config.d_model, false)).is_err());
}
