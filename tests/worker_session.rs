//! The page's analysis worker, natively: its session answers the page's requests from the
//! core, and what the page receives (after the JSON trip) matches the Python references.

use crate::common;

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use common::{assert_close, assert_verdicts_match, expected, fixture};
use headprint::analysis::composition::{CompositionKind, composition};
use headprint::analysis::singular::head_svd;
use headprint::analysis::{HeadId, Mode};
use headprint::backend::{Backend, BackendChoice};
use headprint::compare::ComparisonRow;
use headprint::probes::Suite;
use headprint::weights::{ByteSource, MemorySource};
use headprint::worker::memory::{POOL_BUDGET_BYTES, pool_workers};
use headprint::worker::pool::combine_induction;
use headprint::worker::protocol::{InductionShare, ProbeSequence, Progress, Reply, Request, Role};
use headprint::worker::session::{Reporter, Session};

fn clock() -> f64 {
    0.0
}

fn bytes(name: &str) -> Vec<u8> {
    std::fs::read(fixture(name).join("model.safetensors")).unwrap()
}

fn files(name: &str, contents: Vec<u8>) -> Vec<Box<dyn ByteSource>> {
    vec![Box::new(MemorySource::new(format!("{name}.safetensors"), contents))]
}

/// Sends a request as the page does: through JSON both ways.
fn ask(session: &mut Session, request: Request, files: Vec<Box<dyn ByteSource>>) -> Result<Reply, String> {
    ask_reporting(session, request, files, Rc::new(|_| {}))
}

fn ask_reporting(
    session: &mut Session,
    request: Request,
    files: Vec<Box<dyn ByteSource>>,
    report: Reporter,
) -> Result<Reply, String> {
    let request: Request = serde_json::from_str(&serde_json::to_string(&request).unwrap()).unwrap();
    let mut answer = session.handle(request, files, report).map_err(|e| e.to_string());
    // Large matrices travel beside the JSON, as the worker's host moves them.
    let payload = answer.as_mut().ok().and_then(Reply::take_payload);
    let mut answer: Result<Reply, String> = serde_json::from_str(&serde_json::to_string(&answer).unwrap()).unwrap();
    if let (Ok(reply), Some(values)) = (&mut answer, payload) {
        reply.put_payload(values).unwrap();
    }
    answer
}

fn load(session: &mut Session, id: u64, name: &str, contents: Vec<u8>) -> Result<Reply, String> {
    let request = Request::Load {
        model: id,
        names: vec![format!("{name}.safetensors")],
        analyse: true,
        prepend_bos: true,
        backend: BackendChoice::Cpu,
        link: None,
    };
    ask(session, request, files(name, contents))
}

fn sha256sum(path: &std::path::Path) -> String {
    let output = std::process::Command::new("sha256sum").arg(path).output().expect("sha256sum runs");
    String::from_utf8(output.stdout).unwrap().split_whitespace().next().unwrap().to_string()
}

#[test]
fn a_load_brings_fingerprints_probe_and_hash_that_match_the_references() {
    let mut session = Session::new(clock);
    let reference = expected("gptchar");
    let Ok(Reply::Analysed(analysis)) = load(&mut session, 1, "gptchar", bytes("gptchar")) else {
        panic!("the fixture loads")
    };
    // The share link's identity, asked for beside the load (the page uses a second worker).
    let hash = Request::Hash { names: vec!["gptchar.safetensors".into()] };
    let Ok(Reply::Hashed { sha256 }) = ask(&mut session, hash, files("gptchar", bytes("gptchar"))) else {
        panic!("the hash answers")
    };
    assert_eq!(sha256, sha256sum(&fixture("gptchar").join("model.safetensors")));
    assert_eq!(analysis.info.config.layers, reference["config"]["layers"].as_u64().unwrap() as usize);
    // Raw mode comes on request, as the page asks for it when first shown.
    let Ok(Reply::Fingerprint { fingerprint: raw, .. }) =
        ask(&mut session, Request::Fingerprint { model: 1, mode: Mode::Raw }, vec![])
    else {
        panic!("raw mode answers")
    };
    for (mode, fingerprint) in [("folded", &analysis.folded), ("raw", &*raw)] {
        for (got, want) in fingerprint.heads.iter().zip(reference[mode]["heads"].as_array().unwrap()) {
            for (circuit, value) in
                [("qk", &got.qk), ("qk_token", &got.qk_token), ("ov", &got.ov), ("ov_residual", &got.ov_residual)]
            {
                let want = &want[circuit];
                let what = format!("{mode} L{}H{} {circuit}", got.layer, got.head);
                assert_close(value.copying_score, want["copying_score"].as_f64().unwrap(), 1.0, &what);
                assert_close(value.imaginary_fraction, want["imaginary_fraction"].as_f64().unwrap(), 1.0, &what);
                match want["eigenvector_condition"].as_f64() {
                    Some(kappa) => assert_close(value.eigenvector_condition.unwrap(), kappa, 1.0, &what),
                    None => assert!(value.eigenvector_condition.is_none(), "{what}: defective survives the trip"),
                }
            }
        }
    }
    // The spectral-fingerprint study's row: the mean QK imaginary fraction against the
    // reference's per-head values, and induction heads counted from the report at the default
    // threshold (docs/methods.md#5-probes-running-the-model).
    let reference_heads = reference["folded"]["heads"].as_array().unwrap();
    let reference_mean = reference_heads.iter().map(|h| h["qk"]["imaginary_fraction"].as_f64().unwrap()).sum::<f64>()
        / reference_heads.len() as f64;
    let report = analysis.induction.report.as_ref().unwrap();
    let row = ComparisonRow::new("gptchar", &analysis.folded, Some(report), &analysis.induction.sequence, 0.4);
    assert_close(row.mean_qk_imaginary_fraction, reference_mean, 1.0, "mean QK imaginary fraction");
    let above: usize = report.heads.iter().filter(|h| h.induction_score >= 0.4).count();
    assert_eq!((row.heads, row.induction_heads), (reference_heads.len(), Some(above)));
    assert_eq!(row.prefix_copy_accuracy, Some(report.prefix_copy_accuracy));
    // The load's probe is the default one: uniform random tokens, seed 0.
    assert!(analysis.induction.sequence.contains("uniformly random"), "{}", analysis.induction.sequence);
    let report = analysis.induction.report.as_ref().unwrap();
    assert_eq!(report.heads.len(), analysis.folded.heads.len());
    assert_eq!(session.models_held(), 1);
}

#[test]
fn head_requests_match_the_full_ov_matrix() {
    let mut session = Session::new(clock);
    load(&mut session, 7, "gptchar", bytes("gptchar")).unwrap();
    let all = expected("gptchar")["ov_token_logits"].clone();
    let reference = all
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["mode"] == "folded" && e["head"] == "L1H0")
        .expect("a folded L1H0 reference");
    let vocab: Vec<String> = serde_json::from_value(expected("gptchar")["vocab"].clone()).unwrap();
    let head = HeadId::new(1, 0);
    let diagonal: Vec<f64> = reference["diagonal"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let scale = diagonal.iter().fold(0.0f64, |m, v| m.max(v.abs()));

    let Ok(Reply::SelfCopy { raw, normalised }) =
        ask(&mut session, Request::SelfCopy { model: 7, mode: Mode::Folded, head, top: 5 }, vec![])
    else {
        panic!("self-copy answers")
    };
    assert_eq!((raw.len(), normalised.len()), (5, 5));
    let mut order: Vec<usize> = (0..diagonal.len()).collect();
    order.sort_by(|&a, &b| diagonal[b].total_cmp(&diagonal[a]));
    for ((token, value), want) in raw.iter().zip(order) {
        assert_eq!(token, &vocab[want]);
        assert_close(*value, diagonal[want], scale, "self-copy logit");
    }

    for pair in reference["pairs"].as_array().unwrap() {
        let (i, j) = (pair[0].as_u64().unwrap() as usize, pair[1].as_u64().unwrap() as usize);
        let request =
            Request::Pair { model: 7, mode: Mode::Folded, head, from: vocab[i].clone(), to: vocab[j].clone() };
        let Ok(Reply::Pair { from, to, value }) = ask(&mut session, request, vec![]) else { panic!("pair answers") };
        assert_eq!((from, to), (vocab[i].clone(), vocab[j].clone()));
        assert_close(value, pair[2].as_f64().unwrap(), scale, "pair");
    }

    let token = reference["row"]["token"].as_u64().unwrap() as usize;
    let row: Vec<f64> = reference["row"]["values"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
    let request = Request::Row { model: 7, mode: Mode::Folded, head, token: vocab[token].clone(), top: 3 };
    let Ok(Reply::Row { promotes, suppresses, .. }) = ask(&mut session, request, vec![]) else { panic!("row answers") };
    let best = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let worst = row.iter().copied().fold(f64::INFINITY, f64::min);
    assert_close(promotes[0].1, best, scale, "most promoted");
    assert_close(suppresses[0].1, worst, scale, "most suppressed");
}

#[test]
fn patterns_and_verdicts_come_from_the_forward_pass() {
    let mut session = Session::new(clock);
    load(&mut session, 3, "gptchar", bytes("gptchar")).unwrap();
    let forward = &expected("gptchar")["forward"];
    let text = forward["text"].as_str().unwrap().to_string();
    for layer in 0..2 {
        for head in 0..2 {
            let request = Request::Pattern {
                model: 3,
                head: HeadId::new(layer, head),
                text: text.clone(),
                prepend_bos: true,
                backend: BackendChoice::Cpu,
            };
            let Ok(Reply::Pattern(pattern)) = ask(&mut session, request, vec![]) else { panic!("pattern answers") };
            let want = &forward["patterns"][layer][head];
            for (q, row) in pattern.rows.iter().enumerate() {
                for (k, value) in row.iter().enumerate() {
                    assert_close(*value, want[q][k].as_f64().unwrap(), 1.0, &format!("L{layer}H{head} [{q},{k}]"));
                }
            }
            assert_eq!(pattern.tokens.concat(), text);
        }
    }
    // A suite in the fixture's 13-character vocabulary.
    let suite = Suite::from_json(
        r#"{"name": "tiny", "prompts": [{"id": "Q1", "text": "a \"b\" c \""}, {"id": "B1", "text": "(a(b)c"}]}"#,
    )
    .unwrap();
    let reply = ask(
        &mut session,
        Request::Verdicts { model: 3, head: HeadId::new(1, 1), suite, prepend_bos: true, backend: BackendChoice::Cpu },
        vec![],
    );
    let rows = match reply {
        Ok(Reply::Verdicts(rows)) => rows,
        other => panic!("verdicts answer: {other:?}"),
    };
    assert_eq!(rows.iter().map(|r| r.id.as_str()).collect::<Vec<_>>(), ["Q1", "B1"]);
    for row in &rows {
        let total: f64 = row.attention.iter().sum();
        assert!((total - 1.0).abs() < 1e-4, "{}: the query's attention sums to {total}", row.id);
    }
    // A built-in suite on the planted model, as the page receives it, against the Python reference.
    let request = Request::Load {
        model: 4,
        names: vec!["gptchar-induction.safetensors".into()],
        analyse: false,
        prepend_bos: true,
        backend: BackendChoice::Cpu,
        link: None,
    };
    ask(&mut session, request, files("gptchar-induction", bytes("gptchar-induction")))
        .expect("the planted model loads");
    let suite = Suite::builtin("quote").unwrap();
    let Ok(Reply::Verdicts(rows)) = ask(
        &mut session,
        Request::Verdicts { model: 4, head: HeadId::new(1, 0), suite, prepend_bos: true, backend: BackendChoice::Cpu },
        vec![],
    ) else {
        panic!("verdicts answer")
    };
    let rows = serde_json::to_value(&rows).unwrap();
    assert_verdicts_match(&rows, &expected("gptchar-induction")["verdicts"]["quote"]["L1H0"], "worker");
}

#[test]
fn the_held_out_text_probe_says_which_sequence_it_used() {
    let mut session = Session::new(clock);
    load(&mut session, 1, "gptchar", bytes("gptchar")).unwrap();
    let text = "a(b)c \"d\" e(f)g ".repeat(8);
    let sequence = ProbeSequence::TextWindow { text, seed: 0, len: 12, count: 3 };
    let request = Request::Induction { model: 1, sequence, prepend_bos: true, backend: BackendChoice::Cpu };
    let Ok(Reply::Induction(run)) = ask(&mut session, request, vec![]) else { panic!("probe answers") };
    assert!(run.sequence.contains("held-out text") && run.sequence.contains("seeds 0–2"), "{}", run.sequence);
    let report = run.report.unwrap();
    // A character model has no BOS, whatever the switch says.
    assert_eq!((report.tokens.len(), report.bos, report.sequences.len()), (24, None, 3));
    let too_short = ProbeSequence::TextWindow { text: "abc".into(), seed: 0, len: 12, count: 8 };
    let request = Request::Induction { model: 1, sequence: too_short, prepend_bos: true, backend: BackendChoice::Cpu };
    let Ok(Reply::Induction(run)) = ask(&mut session, request, vec![]) else { panic!("probe answers") };
    assert!(run.report.unwrap_err().contains("fewer than the 12"));
}

/// Messages from a page older than the probes' `backend` field still parse (as `auto`), and the
/// probe's run names what computed it.
#[test]
fn probe_requests_without_a_backend_parse_and_the_run_names_its_backend() {
    for text in [
        r#"{"Induction":{"model":1,"sequence":{"UniformRandom":{"seed":0,"len":4,"count":1}},"prepend_bos":true}}"#,
        r#"{"InductionShare":{"model":1,"sequence":{"UniformRandom":{"seed":0,"len":4,"count":2}},"prepend_bos":true,"share":0,"shares":2}}"#,
        r#"{"Pattern":{"model":1,"head":{"layer":0,"head":0},"text":"ab","prepend_bos":true}}"#,
        r#"{"Verdicts":{"model":1,"head":{"layer":0,"head":0},"suite":{"name":"s","prompts":[]},"prepend_bos":true}}"#,
    ] {
        let request: Request = serde_json::from_str(text).expect(text);
        let backend = match request {
            Request::Induction { backend, .. }
            | Request::InductionShare { backend, .. }
            | Request::Pattern { backend, .. }
            | Request::Verdicts { backend, .. } => backend,
            other => panic!("{other:?}"),
        };
        assert_eq!(backend, BackendChoice::Auto, "{text}");
    }
    let mut session = Session::new(clock);
    assert!(load(&mut session, 1, "gptchar", bytes("gptchar")).is_ok());
    let sequence = ProbeSequence::UniformRandom { seed: 0, len: 6, count: 2 };
    let request = Request::Induction { model: 1, sequence, prepend_bos: false, backend: BackendChoice::Cpu };
    let Ok(Reply::Induction(run)) = ask(&mut session, request, vec![]) else { panic!("probe answers") };
    assert!(run.report.is_ok());
    assert_eq!(run.backend, headprint::backend::BackendInfo::default(), "the CPU, with no note");
}

/// The tab's pool gives each worker a share of a probe's sequences: put back together, in any
/// split (shares of one sequence, uneven ones, more shares than sequences), they are the whole
/// probe's report to the bit, with the BOS and without.
#[test]
fn an_induction_probe_split_into_shares_is_the_whole_probe() {
    let mut session = Session::new(clock);
    let (names, sources) = folder("gpt2", &["config.json", "tokenizer.json", "model.safetensors"]);
    let request =
        Request::Load { model: 1, names, analyse: false, prepend_bos: true, backend: BackendChoice::Cpu, link: None };
    assert!(matches!(ask(&mut session, request, sources), Ok(Reply::Loaded)));
    for prepend_bos in [true, false] {
        let sequence = ProbeSequence::UniformRandom { seed: 3, len: 9, count: 5 };
        let request =
            Request::Induction { model: 1, sequence: sequence.clone(), prepend_bos, backend: BackendChoice::Cpu };
        let Ok(Reply::Induction(whole)) = ask(&mut session, request, vec![]) else { panic!("probe answers") };
        let report = whole.report.as_ref().unwrap();
        assert_eq!((report.sequences.len(), report.tokens.len()), (5, 18 + usize::from(prepend_bos)));
        for shares in [1, 2, 3, 5, 7] {
            let parts: Vec<InductionShare> = (0..shares)
                .map(|share| {
                    let request = Request::InductionShare {
                        model: 1,
                        sequence: sequence.clone(),
                        prepend_bos,
                        share,
                        shares,
                        backend: BackendChoice::Cpu,
                    };
                    let Ok(Reply::InductionShare(part)) = ask(&mut session, request, vec![]) else {
                        panic!("share {share} of {shares} answers")
                    };
                    part
                })
                .collect();
            let counts: Vec<usize> = parts.iter().map(|p| p.scores.as_ref().unwrap().len()).collect();
            assert_eq!(counts.iter().sum::<usize>(), 5, "{shares} shares: {counts:?}");
            let combined = combine_induction(parts);
            assert_eq!(combined.sequence, whole.sequence);
            let json = |run: &headprint::worker::protocol::InductionRun| serde_json::to_string(run).unwrap();
            assert_eq!(json(&combined), json(&whole), "{shares} shares, BOS {prepend_bos}");
        }
    }
    // A share that does not exist is the probe's error, not a panic.
    let request = Request::InductionShare {
        model: 1,
        sequence: ProbeSequence::UniformRandom { seed: 0, len: 9, count: 2 },
        prepend_bos: true,
        share: 2,
        shares: 2,
        backend: BackendChoice::Cpu,
    };
    let Ok(Reply::InductionShare(part)) = ask(&mut session, request, vec![]) else { panic!("share answers") };
    assert!(part.scores.unwrap_err().contains("no share 2 of 2"));
}

#[test]
fn a_failed_load_keeps_the_held_model_and_bad_requests_get_messages() {
    let mut session = Session::new(clock);
    load(&mut session, 1, "gptchar", bytes("gptchar")).unwrap();
    let mut truncated = bytes("gptchar");
    truncated.truncate(truncated.len() / 2);
    let error = load(&mut session, 2, "broken", truncated).unwrap_err();
    assert!(error.contains("broken.safetensors"), "{error}");
    assert_eq!(session.models_held(), 1);
    // The first model still answers.
    let pattern = first_heads_pattern();
    assert!(matches!(ask(&mut session, pattern, vec![]), Ok(Reply::Pattern(_))));
    // A head the model does not have, and a model the worker does not hold.
    let missing_head = Request::Pattern {
        model: 1,
        head: HeadId::new(9, 0),
        text: "abc".into(),
        prepend_bos: true,
        backend: BackendChoice::Cpu,
    };
    assert!(ask(&mut session, missing_head, vec![]).unwrap_err().contains("L9H0"));
    assert!(matches!(ask(&mut session, Request::Forget { model: 1 }, vec![]), Ok(Reply::Done)));
    let gone = Request::Pattern {
        model: 1,
        head: HeadId::new(0, 0),
        text: "abc".into(),
        prepend_bos: true,
        backend: BackendChoice::Cpu,
    };
    assert!(ask(&mut session, gone, vec![]).unwrap_err().contains("not loaded"));
    assert_eq!(session.models_held(), 0);
}

#[test]
fn loading_reports_progress_up_to_every_byte_and_head() {
    let mut session = Session::new(clock);
    let seen: Rc<RefCell<Vec<Progress>>> = Rc::default();
    let sink = seen.clone();
    // A folder's files: config.json beside the weights (GPT-2 needs its head count).
    let (weights, config) = (fixture("gpt2").join("model.safetensors"), fixture("gpt2").join("config.json"));
    let contents = [std::fs::read(&config).unwrap(), std::fs::read(&weights).unwrap()];
    let size = contents.iter().map(|c| c.len() as u64).sum::<u64>();
    let names = vec!["config.json".to_string(), "model.safetensors".to_string()];
    let sources: Vec<Box<dyn ByteSource>> = names
        .iter()
        .zip(contents)
        .map(|(name, c)| Box::new(MemorySource::new(name.clone(), c)) as Box<dyn ByteSource>)
        .collect();
    let request = Request::Load {
        model: 1,
        names: names.clone(),
        analyse: true,
        prepend_bos: true,
        backend: BackendChoice::Cpu,
        link: None,
    };
    let copies: Vec<Box<dyn ByteSource>> = sources
        .iter()
        .map(|s| {
            Box::new(MemorySource::new(s.name(), s.read_range(0, s.len() as usize).unwrap())) as Box<dyn ByteSource>
        })
        .collect();
    let reply = ask_reporting(&mut session, request, sources, Rc::new(move |p| sink.borrow_mut().push(p)));
    let analysis = match reply {
        Ok(Reply::Analysed(analysis)) => analysis,
        other => panic!("the GPT-2 fixture loads: {other:?}"),
    };
    // Several files: the SHA-256 of their sorted `name:sha256` lines.
    let lines = format!("config.json:{}\nmodel.safetensors:{}\n", sha256sum(&config), sha256sum(&weights));
    let listing = std::env::temp_dir().join(format!("headprint-hash-{}.txt", std::process::id()));
    std::fs::write(&listing, lines).unwrap();
    let sink = seen.clone();
    let reply =
        ask_reporting(&mut session, Request::Hash { names }, copies, Rc::new(move |p| sink.borrow_mut().push(p)));
    let Ok(Reply::Hashed { sha256 }) = reply else { panic!("the hash answers: {reply:?}") };
    assert_eq!(sha256, sha256sum(&listing));
    std::fs::remove_file(&listing).unwrap();
    let seen = seen.borrow();
    let last = |stage: &str| seen.iter().rfind(|p| p.stage.starts_with(stage)).cloned().unwrap();
    // Every stage the page can cancel is named while it runs, in order.
    let mut stages: Vec<&str> = seen.iter().map(|p| p.stage.as_str()).collect();
    stages.dedup();
    assert_eq!(
        stages,
        [
            "Computing the embedding Grams (reading W_E)",
            "Fingerprinting heads (folded)",
            "Running the induction probe (layer by layer)",
            "Identifying the files (SHA-256)"
        ]
    );
    assert_eq!(last("Identifying the files").done, size);
    // The Grams read the embedding a block of token rows at a time, up to the last row.
    let vocab = analysis.info.config.vocab as u64;
    let reading = last("Computing the embedding Grams");
    assert_eq!((reading.done, reading.total), (vocab, vocab), "{reading:?}");
    // The probe runs every sequence through one layer at a time, then the unembedding.
    let probing = last("Running the induction probe");
    let steps = analysis.info.config.layers as u64 + 1;
    assert_eq!((probing.done, probing.total), (steps, steps), "{probing:?}");
    let heads = analysis.folded.heads.len() as u64;
    let fingerprinting = last("Fingerprinting heads (folded)");
    assert_eq!((fingerprinting.done, fingerprinting.total, fingerprinting.grid), (heads, heads, Some((2, 2))));
    // Every head is streamed once, in order, as the final fingerprint has it (both through the
    // JSON trip that the page's messages take: serde_json's parse may move the last bit).
    let tripped = |h: &headprint::analysis::HeadFingerprint| -> headprint::analysis::HeadFingerprint {
        serde_json::from_str(&serde_json::to_string(h).unwrap()).unwrap()
    };
    let streamed: Vec<String> = seen
        .iter()
        .filter(|p| p.stage == "Fingerprinting heads (folded)")
        .flat_map(|p| p.heads.iter().map(tripped).map(|h| format!("L{}H{} {}", h.layer, h.head, h.ov.copying_score)))
        .collect();
    let fingerprinted: Vec<String> =
        analysis.folded.heads.iter().map(|h| format!("L{}H{} {}", h.layer, h.head, h.ov.copying_score)).collect();
    assert_eq!(streamed, fingerprinted);
    // Progress only moves forward within a stage.
    for pair in seen.windows(2) {
        if pair[0].stage == pair[1].stage {
            assert!(pair[1].done >= pair[0].done, "{pair:?}");
        }
    }
}

/// A folder's files, as the page sends them.
fn folder(name: &str, files: &[&str]) -> (Vec<String>, Vec<Box<dyn ByteSource>>) {
    let names: Vec<String> = files.iter().map(|f| f.to_string()).collect();
    let sources = files
        .iter()
        .map(|f| {
            let contents = std::fs::read(fixture(name).join(f)).unwrap();
            Box::new(MemorySource::new(f.to_string(), contents)) as Box<dyn ByteSource>
        })
        .collect();
    (names, sources)
}

#[test]
fn the_bos_switch_reaches_patterns_verdicts_and_probes() {
    let mut session = Session::new(clock);
    let (names, sources) = folder("gpt2", &["config.json", "tokenizer.json", "model.safetensors"]);
    let request =
        Request::Load { model: 1, names, analyse: true, prepend_bos: true, backend: BackendChoice::Cpu, link: None };
    let Ok(Reply::Analysed(analysis)) = ask(&mut session, request, sources) else { panic!("gpt2 loads") };
    let reference = expected("gpt2");
    assert_eq!(serde_json::to_value(&analysis.info.bos).unwrap(), reference["bos"]);
    // The load's probe: 8 sequences, each BOS + 15 tokens twice (the context is 32).
    let report = analysis.induction.report.as_ref().unwrap();
    assert_eq!((report.bos, report.sequences.len(), report.tokens.len()), (Some(1), 8, 31));
    assert!(analysis.induction.sequence.contains("after BOS <|endoftext|>"), "{}", analysis.induction.sequence);
    // The copies were shortened to fit the BOS in the context: the description says so.
    assert!(analysis.induction.sequence.starts_with("15 uniformly random tokens"), "{}", analysis.induction.sequence);
    // The pattern of the reference's text, after the BOS, is the reference's forward pass.
    let forward = &reference["forward"];
    let text = forward["text"].as_str().unwrap().to_string();
    let request = Request::Pattern {
        model: 1,
        head: HeadId::new(1, 1),
        text: text.clone(),
        prepend_bos: true,
        backend: BackendChoice::Cpu,
    };
    let Ok(Reply::Pattern(pattern)) = ask(&mut session, request, vec![]) else { panic!("pattern answers") };
    assert_eq!(pattern.tokens[0], "<|endoftext|>");
    let want = &forward["patterns"][1][1];
    assert_eq!(pattern.rows.len(), want.as_array().unwrap().len());
    for (q, row) in pattern.rows.iter().enumerate() {
        for (k, value) in row.iter().enumerate() {
            assert_close(*value, want[q][k].as_f64().unwrap(), 1.0, &format!("L1H1 [{q},{k}]"));
        }
    }
    let request =
        Request::Pattern { model: 1, head: HeadId::new(1, 1), text, prepend_bos: false, backend: BackendChoice::Cpu };
    let Ok(Reply::Pattern(plain)) = ask(&mut session, request, vec![]) else { panic!("pattern answers") };
    assert_eq!(plain.tokens[..], pattern.tokens[1..]);
    // Verdicts: the query shifts with the BOS; the probe switches it off on request.
    let suite =
        Suite::from_json(r#"{"name": "s", "prompts": [{"id": "A", "text": "the cat sat", "query": 1}]}"#).unwrap();
    for (prepend_bos, position) in [(true, 2), (false, 1)] {
        let request = Request::Verdicts {
            model: 1,
            head: HeadId::new(0, 0),
            suite: suite.clone(),
            prepend_bos,
            backend: BackendChoice::Cpu,
        };
        let Ok(Reply::Verdicts(rows)) = ask(&mut session, request, vec![]) else { panic!("verdicts answer") };
        assert_eq!(rows[0].query_position, position);
    }
    let sequence = ProbeSequence::UniformRandom { seed: 0, len: 15, count: 2 };
    let request = Request::Induction { model: 1, sequence, prepend_bos: false, backend: BackendChoice::Cpu };
    let Ok(Reply::Induction(run)) = ask(&mut session, request, vec![]) else { panic!("probe answers") };
    let plain = run.report.unwrap();
    assert_eq!((plain.bos, plain.tokens.len()), (None, 30));
    assert_eq!(plain.tokens[..15], report.tokens[1..16], "the same seed draws the same tokens");
}

#[test]
fn a_zeroed_head_reaches_the_page_as_an_error_in_its_own_cells() {
    let mut session = Session::new(clock);
    let Ok(Reply::Analysed(normal)) = load(&mut session, 1, "gptchar", bytes("gptchar")) else {
        panic!("the fixture loads")
    };
    let dead = common::with_zeroed_tensor("gptchar", common::DEAD_VALUE);
    let Ok(Reply::Analysed(analysis)) = load(&mut session, 2, "dead", dead) else {
        panic!("a model with a dead head still loads and is analysed")
    };
    let json = |f: &headprint::analysis::ModelFingerprint| serde_json::to_value(f).unwrap();
    common::assert_only_the_dead_head_fails(&json(&analysis.folded), &json(&normal.folded));
    let Ok(Reply::Fingerprint { fingerprint: raw, .. }) =
        ask(&mut session, Request::Fingerprint { model: 2, mode: Mode::Raw }, vec![])
    else {
        panic!("raw mode answers")
    };
    let Ok(Reply::Fingerprint { fingerprint: normal_raw, .. }) =
        ask(&mut session, Request::Fingerprint { model: 1, mode: Mode::Raw }, vec![])
    else {
        panic!("raw mode answers")
    };
    common::assert_only_the_dead_head_fails(&json(&raw), &json(&normal_raw));
    // After the JSON trip the failed circuit is still a failure, not a number.
    let head = analysis.folded.head(HeadId::new(0, 1)).unwrap();
    assert!(head.ov.copying_score.is_nan() && head.ov.error.is_some() && !head.ov.defective());
    assert!(head.qk.error.is_none());
}

/// The shipped exercise sheet's answer key (what its notes explain) is what the demo model
/// does, computed by the requests the page makes and checked by the core's answer checking;
/// the induction answers also agree with PyTorch's induction scores (docs/demo-eval.json,
/// scripts/evaluate_demo.py).
#[test]
fn the_demo_exercise_sheet_answers_are_what_the_demo_model_does() {
    use headprint::probes::exercise::Answer;
    use headprint::probes::question::Question;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let demo = std::fs::read(root.join("public/models/nietzsche-char.safetensors")).unwrap();
    let torch: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("docs/demo-eval.json")).unwrap()).unwrap();
    let mut session = Session::new(clock);
    let Ok(Reply::Analysed(analysis)) = load(&mut session, 1, "demo", demo) else { panic!("the demo loads") };
    let report = analysis.induction.report.as_ref().unwrap();
    let threshold = 0.4;
    let key = [
        ("E1", Answer::YesNo(true)),
        ("E2", Answer::YesNo(true)),
        ("E3", Answer::YesNo(false)),
        ("E4", Answer::Position(11)),
        ("E5", Answer::Position(0)),
        ("E6", Answer::Position(0)),
        ("E7", Answer::Token(")".into())),
    ];
    let sheet = Suite::builtin("exercises-demo").unwrap();
    assert_eq!(sheet.prompts.iter().filter(|p| p.question.is_some()).count(), key.len());
    for (id, expected) in key {
        let prompt = sheet.prompts.iter().find(|p| p.id == id).unwrap();
        let question = prompt.question.clone().unwrap();
        let head = HeadId::parse(question.head(), &analysis.info.config).unwrap();
        let truth = match &question {
            Question::Induction { .. } => {
                let ours = report.heads.iter().find(|h| h.layer == head.layer && h.head == head.head).unwrap();
                let reference =
                    torch["induction_uniform_random"]["heads"][head.to_string()]["induction_score"].as_f64().unwrap();
                assert_eq!(Answer::induction(reference, threshold), Answer::induction(ours.induction_score, threshold));
                Answer::induction(ours.induction_score, threshold)
            }
            Question::Attend { .. } => {
                let one = Suite { prompts: vec![prompt.clone()], pairs: vec![], ..sheet.clone() };
                let request =
                    Request::Verdicts { model: 1, head, suite: one, prepend_bos: true, backend: BackendChoice::Cpu };
                let Ok(Reply::Verdicts(rows)) = ask(&mut session, request, vec![]) else { panic!("{id}: verdicts") };
                Answer::attended(&rows[0])
            }
            Question::OvTop { after, .. } => {
                let request = Request::Row { model: 1, mode: Mode::Folded, head, token: after.clone(), top: 5 };
                let Ok(Reply::Row { promotes, .. }) = ask(&mut session, request, vec![]) else { panic!("{id}: row") };
                Answer::promoted(&promotes).unwrap()
            }
        };
        assert!(expected.matches(&truth).unwrap(), "{id}: the key says {expected:?}, the model {truth:?}");
    }
}

/// A file that is a safetensors header followed by zeros it never holds: a full-size model's
/// shape without its bytes. Counts what is read from it.
struct HeaderOnly {
    name: String,
    header: Vec<u8>,
    len: u64,
    read: Arc<AtomicU64>,
}

impl ByteSource for HeaderOnly {
    fn name(&self) -> &str {
        &self.name
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn read_range(&self, offset: u64, len: usize) -> headprint::Result<Vec<u8>> {
        self.read.fetch_add(len as u64, Ordering::Relaxed);
        let mut out = vec![0u8; len];
        for (i, byte) in out.iter_mut().enumerate() {
            if let Some(&b) = self.header.get(offset as usize + i) {
                *byte = b;
            }
        }
        Ok(out)
    }
}

/// A bf16 Llama-2-70B-shaped checkpoint (80 layers of width 8192, 64 heads, 8 key/value heads,
/// MLP 28672, vocabulary 32000) and its config.json, as header-only sources.
fn llama_70b_shaped(read: &Arc<AtomicU64>) -> (Vec<String>, Vec<Box<dyn ByteSource>>) {
    llama_shaped(read, LlamaShape { d: 8192, layers: 80, heads: 64, d_kv: 1024, d_mlp: 28672, vocab: 32000 })
}

/// A bf16 Llama-3-8B-shaped checkpoint (32 layers of width 4096, 32 heads, 8 key/value heads,
/// MLP 14336, vocabulary 128256), as header-only sources.
fn llama_8b_shaped(read: &Arc<AtomicU64>) -> (Vec<String>, Vec<Box<dyn ByteSource>>) {
    llama_shaped(read, LlamaShape { d: 4096, layers: 32, heads: 32, d_kv: 1024, d_mlp: 14336, vocab: 128256 })
}

struct LlamaShape {
    d: u64,
    layers: u64,
    heads: u64,
    d_kv: u64,
    d_mlp: u64,
    vocab: u64,
}

fn llama_shaped(read: &Arc<AtomicU64>, shape: LlamaShape) -> (Vec<String>, Vec<Box<dyn ByteSource>>) {
    let LlamaShape { d, layers, heads, d_kv, d_mlp, vocab } = shape;
    let mut tensors: Vec<(String, Vec<u64>)> = vec![
        ("model.embed_tokens.weight".into(), vec![vocab, d]),
        ("lm_head.weight".into(), vec![vocab, d]),
        ("model.norm.weight".into(), vec![d]),
    ];
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        for (name, shape) in [
            ("self_attn.q_proj.weight", vec![d, d]),
            ("self_attn.k_proj.weight", vec![d_kv, d]),
            ("self_attn.v_proj.weight", vec![d_kv, d]),
            ("self_attn.o_proj.weight", vec![d, d]),
            ("mlp.gate_proj.weight", vec![d_mlp, d]),
            ("mlp.up_proj.weight", vec![d_mlp, d]),
            ("mlp.down_proj.weight", vec![d, d_mlp]),
            ("input_layernorm.weight", vec![d]),
            ("post_attention_layernorm.weight", vec![d]),
        ] {
            tensors.push((format!("{p}.{name}"), shape));
        }
    }
    let mut table = serde_json::Map::new();
    let mut offset = 0u64;
    for (name, shape) in tensors {
        let bytes = 2 * shape.iter().product::<u64>();
        let entry = serde_json::json!({"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + bytes]});
        table.insert(name, entry);
        offset += bytes;
    }
    let json = serde_json::to_vec(&table).unwrap();
    let header: Vec<u8> = (json.len() as u64).to_le_bytes().into_iter().chain(json).collect();
    let len = header.len() as u64 + offset;
    let config = serde_json::json!({
        "model_type": "llama", "hidden_size": d, "num_hidden_layers": layers, "num_attention_heads": heads,
        "num_key_value_heads": d_kv / (d / heads), "intermediate_size": d_mlp, "vocab_size": vocab, "rms_norm_eps": 1e-5,
    });
    let names = vec!["config.json".to_string(), "model.safetensors".to_string()];
    let weights = HeaderOnly { name: names[1].clone(), header, len, read: read.clone() };
    let config = MemorySource::new(names[0].clone(), serde_json::to_vec(&config).unwrap());
    (names, vec![Box::new(config), Box::new(weights)])
}

#[test]
fn a_model_over_the_workers_budget_is_refused_in_one_line_before_its_weights_are_read() {
    let mut session = Session::new(clock);
    load(&mut session, 1, "gptchar", bytes("gptchar")).unwrap();
    let read = Arc::new(AtomicU64::new(0));
    let (names, sources) = llama_70b_shaped(&read);
    let size = sources[1].len();
    assert!(size > 130_000_000_000, "a 70B model's size: {size}");
    let request =
        Request::Load { model: 2, names, analyse: true, prepend_bos: true, backend: BackendChoice::Cpu, link: None };
    let error = ask(&mut session, request, sources).unwrap_err();
    assert!(!error.contains('\n'), "one line: {error}");
    assert!(error.contains("80 layers x 64 heads, width 8192"), "{error}");
    // The numbers: what it needs (the Grams alone are 3 x 8192² f64 = 1.61 GB) and the budget.
    let need: f64 = error.split("needs about ").nth(1).and_then(|r| r.split(" GB").next()).unwrap().parse().unwrap();
    assert!(need > 3.22, "{error}");
    assert!(error.contains("budget of 3.22 GB"), "{error}");
    // Refused from the headers: nothing beyond them and the final norm was read.
    let read = read.load(Ordering::Relaxed);
    assert!(read < 4 << 20, "{read} bytes read before refusing");
    // The model shown stays, and answers.
    assert_eq!(session.models_held(), 1);
    let pattern = first_heads_pattern();
    assert!(matches!(ask(&mut session, pattern, vec![]), Ok(Reply::Pattern(_))));
}

/// The OV matrix view's entries against TransformerLens's full OV logit matrix (the diagonal,
/// one row and the sampled pairs of `expected.json`), at the references' tolerance (1e-4 of the
/// largest self-copy logit); its top k are the k largest diagonal entries, sorted independently.
#[test]
fn ov_matrix_matches_the_reference_circuit() {
    let mut session = Session::new(clock);
    load(&mut session, 7, "gptchar", bytes("gptchar")).unwrap();
    let vocab: Vec<String> = serde_json::from_value(expected("gptchar")["vocab"].clone()).unwrap();
    let head = HeadId::new(1, 0);
    for mode in [Mode::Folded, Mode::Raw] {
        let all = expected("gptchar")["ov_token_logits"].clone();
        let reference = all
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["mode"] == mode.name() && e["head"] == "L1H0")
            .expect("an L1H0 reference");
        let floats =
            |v: &serde_json::Value| -> Vec<f64> { v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect() };
        let diagonal = floats(&reference["diagonal"]);
        let scale = diagonal.iter().fold(0.0f64, |m, v| m.max(v.abs()));
        let what = format!("{} OV matrix", mode.name());

        // Every token (the character model's 84 fit).
        let Ok(Reply::OvMatrix { tokens, ids, values }) =
            ask(&mut session, Request::OvMatrix { model: 7, mode, head, top: None }, vec![])
        else {
            panic!("the OV matrix answers")
        };
        assert_eq!(ids, (0..vocab.len()).collect::<Vec<_>>(), "{what}: every token in id order");
        assert_eq!(tokens, vocab);
        assert_eq!(values.len(), vocab.len());
        for (i, want) in diagonal.iter().enumerate() {
            assert_eq!(values[i].len(), vocab.len());
            assert_close(values[i][i], *want, scale, &format!("{what} diagonal {i}"));
        }
        let token = reference["row"]["token"].as_u64().unwrap() as usize;
        for (j, want) in floats(&reference["row"]["values"]).iter().enumerate() {
            assert_close(values[token][j], *want, scale, &format!("{what} row {token} col {j}"));
        }
        for pair in reference["pairs"].as_array().unwrap() {
            let (i, j) = (pair[0].as_u64().unwrap() as usize, pair[1].as_u64().unwrap() as usize);
            assert_close(values[i][j], pair[2].as_f64().unwrap(), scale, &format!("{what} pair ({i},{j})"));
        }

        // The top 7 by self-copy logit: the reference's 7 largest diagonal entries, largest first,
        // and the same entries as the full matrix.
        let Ok(Reply::OvMatrix { tokens: top_tokens, ids: top_ids, values: top_values }) =
            ask(&mut session, Request::OvMatrix { model: 7, mode, head, top: Some(7) }, vec![])
        else {
            panic!("the top-k OV matrix answers")
        };
        let mut order: Vec<usize> = (0..diagonal.len()).collect();
        order.sort_by(|&a, &b| diagonal[b].total_cmp(&diagonal[a]));
        assert_eq!(top_ids, order[..7].to_vec(), "{what}: top 7 by self-copy logit");
        assert_eq!(top_tokens, top_ids.iter().map(|&i| vocab[i].clone()).collect::<Vec<_>>());
        for (a, &i) in top_ids.iter().enumerate() {
            for (b, &j) in top_ids.iter().enumerate() {
                assert_eq!(top_values[a][b], values[i][j], "{what}: top-k entry ({i},{j})");
            }
        }
    }

    // k = 0 and k past the vocabulary: one readable error each, and the session still answers.
    let zero = ask(&mut session, Request::OvMatrix { model: 7, mode: Mode::Folded, head, top: Some(0) }, vec![])
        .expect_err("k = 0 is refused");
    assert_eq!(zero, "top k for the OV matrix must be at least 1");
    let n = vocab.len();
    let past = ask(&mut session, Request::OvMatrix { model: 7, mode: Mode::Folded, head, top: Some(n + 1) }, vec![])
        .expect_err("k > vocab is refused");
    assert_eq!(past, format!("top k = {} for the OV matrix is more than {n} (the vocabulary has {n} tokens)", n + 1));
    assert!(matches!(
        ask(&mut session, Request::OvMatrix { model: 7, mode: Mode::Folded, head, top: Some(3) }, vec![]),
        Ok(Reply::OvMatrix { .. })
    ));
}

/// The pool's size: one worker per core (at least 2), cut to what the 4 GiB pool budget holds
/// beside the lead, and never below the lead alone.
#[test]
fn the_pool_uses_every_core_that_its_memory_budget_allows() {
    const MB: u64 = 1 << 20;
    // Small models: every core, and at least two workers on one- or two-core machines.
    assert_eq!(pool_workers(8, 100 * MB, 50 * MB), 8);
    assert_eq!(pool_workers(1, 100 * MB, 50 * MB), 2);
    assert_eq!(pool_workers(0, 100 * MB, 50 * MB), 2);
    // A large lead: exactly 3 GiB left is room for three helpers of 1 GiB (four workers, not
    // sixteen); a byte less, for two.
    assert_eq!(pool_workers(16, POOL_BUDGET_BYTES - 3 * 1024 * MB, 1024 * MB), 4);
    assert_eq!(pool_workers(16, POOL_BUDGET_BYTES - 3 * 1024 * MB + 1, 1024 * MB), 3);
    // No room for a helper, or a lead past the pool's budget (its own check refuses it): the lead alone.
    assert_eq!(pool_workers(8, POOL_BUDGET_BYTES - MB, 2 * MB), 1);
    assert_eq!(pool_workers(8, POOL_BUDGET_BYTES + MB, MB), 1);
}

/// The held model 1's L0H0 pattern on "abc", on the CPU.
fn first_heads_pattern() -> Request {
    Request::Pattern {
        model: 1,
        head: HeadId::new(0, 0),
        text: "abc".into(),
        prepend_bos: true,
        backend: BackendChoice::Cpu,
    }
}

/// The Circuits tab's requests: the composition scores (their values moved beside the JSON) and
/// a head's singular directions are the core's reports, after the trip through the messages.
#[test]
fn composition_and_singular_directions_reach_the_page_as_the_core_computes_them() {
    let mut session = Session::new(clock);
    load(&mut session, 3, "gptchar", bytes("gptchar")).unwrap();
    let path = fixture("gptchar");
    let model_files = headprint::weights::ModelFiles::from_path(&path).unwrap();
    let stream = headprint::model::ModelStream::open(&model_files).unwrap();
    for mode in [Mode::Folded, Mode::Raw] {
        let stages = Rc::new(RefCell::new(Vec::new()));
        let seen = stages.clone();
        let report: Reporter = Rc::new(move |p: Progress| seen.borrow_mut().push((p.stage, p.done, p.total)));
        let Ok(Reply::Composition(ours)) =
            ask_reporting(&mut session, Request::Composition { model: 3, mode }, vec![], report)
        else {
            panic!("composition answers")
        };
        let core = composition(&stream, mode, &mut Backend::cpu(), &mut |_, _| {}).unwrap();
        assert_eq!(*ours, core, "{mode:?}: the page's composition is the core's, to the bit");
        assert!(ours.scores.flat(CompositionKind::K).iter().any(|&s| s > 0.0));
        // Progress: a layer at a time, up to every layer.
        let layers = core.scores.layers as u64;
        let stages = stages.borrow();
        assert_eq!(stages.first().map(|s| (s.1, s.2)), Some((0, layers)), "{stages:?}");
        assert_eq!(stages.last().map(|s| (s.1, s.2)), Some((layers, layers)), "{stages:?}");

        let head = HeadId::new(1, 0);
        let Ok(Reply::Svd(svd)) = ask(&mut session, Request::Svd { model: 3, head, mode, tokens: 4 }, vec![]) else {
            panic!("svd answers")
        };
        let tokenizer = headprint::tokens::Tokenizer::for_model(&stream, None).unwrap();
        let core = head_svd(&stream, &tokenizer, head, mode, 4).unwrap();
        assert_eq!(serde_json::to_value(&*svd).unwrap(), serde_json::to_value(&core).unwrap());
        assert_eq!(svd.ov.singular_values, core.ov.singular_values);
    }
    // A head out of range is one line.
    let bad = Request::Svd { model: 3, head: HeadId::new(40, 0), mode: Mode::Folded, tokens: 4 };
    let error = ask(&mut session, bad, vec![]).unwrap_err();
    assert!(!error.contains('\n') && error.contains("L40H0"), "{error}");
}

/// Llama-3-8B's writers alone are 32 x 32 x 128 x 4096 f64 = 4.29 GB: its composition scores are
/// refused in one line with the numbers, before any weight is read, and the model stays.
#[test]
fn composition_of_a_model_too_large_for_the_tab_is_refused_with_its_numbers() {
    let mut session = Session::new(clock);
    let read = Arc::new(AtomicU64::new(0));
    let (names, sources) = llama_8b_shaped(&read);
    let open = Request::Open { model: 5, names, role: Role::Lead, link: None };
    assert!(matches!(ask(&mut session, open, sources), Ok(Reply::Opened { .. })), "the model itself opens");
    let before = read.load(Ordering::Relaxed);
    let error = ask(&mut session, Request::Composition { model: 5, mode: Mode::Folded }, vec![]).unwrap_err();
    assert!(!error.contains('\n'), "one line: {error}");
    assert!(error.contains("32 layers x 32 heads, d_head 128, width 4096"), "{error}");
    assert!(error.contains("writers (4.29 GB, f64)"), "{error}");
    assert!(error.contains("budget of 3.22 GB"), "{error}");
    assert_eq!(read.load(Ordering::Relaxed), before, "nothing read before refusing");
    assert_eq!(session.models_held(), 1);
}
