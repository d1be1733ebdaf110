//! The page's analysis worker, natively: its session answers the page's requests from the
//! core, and what the page receives (after the JSON trip) matches the Python references.

mod common;

use std::cell::RefCell;
use std::rc::Rc;

use common::{assert_close, assert_verdicts_match, expected, fixture};
use headprint::analysis::{HeadId, Mode};
use headprint::compare::ComparisonRow;
use headprint::probes::Suite;
use headprint::weights::{ByteSource, MemorySource};
use headprint::worker::protocol::{ProbeSequence, Progress, Reply, Request};
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
    let answer = session.handle(request, files, report).map_err(|e| e.to_string());
    serde_json::from_str(&serde_json::to_string(&answer).unwrap()).unwrap()
}

fn load(session: &mut Session, id: u64, name: &str, contents: Vec<u8>) -> Result<Reply, String> {
    let request = Request::Load { model: id, names: vec![format!("{name}.safetensors")], analyse: true, hash: true };
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
    assert_eq!(analysis.info.sha256, sha256sum(&fixture("gptchar").join("model.safetensors")));
    assert_eq!(analysis.info.config.layers, reference["config"]["layers"].as_u64().unwrap() as usize);
    // Raw mode comes on request, as the page asks for it when first shown.
    let Ok(Reply::Fingerprint { fingerprint: raw, .. }) =
        ask(&mut session, Request::Fingerprint { model: 1, mode: Mode::Raw }, vec![])
    else {
        panic!("raw mode answers")
    };
    for (mode, fingerprint) in [("folded", &analysis.folded), ("raw", &*raw)] {
        for (got, want) in fingerprint.heads.iter().zip(reference[mode]["heads"].as_array().unwrap()) {
            for (circuit, value) in [("qk", &got.qk), ("ov", &got.ov), ("ov_residual", &got.ov_residual)] {
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
    // Seed 000's row: the mean QK imaginary fraction against the reference's per-head values,
    // and induction heads counted from the report at the spec's threshold.
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
    let reference = &expected("gptchar")["ov_token_logits"];
    let vocab: Vec<String> = serde_json::from_value(expected("gptchar")["vocab"].clone()).unwrap();
    let head = HeadId::new(1, 0);
    assert_eq!(reference["head"], "L1H0");
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
            let request = Request::Pattern { model: 3, head: HeadId::new(layer, head), text: text.clone() };
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
    let reply = ask(&mut session, Request::Verdicts { model: 3, head: HeadId::new(1, 1), suite }, vec![]);
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
    let request =
        Request::Load { model: 4, names: vec!["gptchar-induction.safetensors".into()], analyse: false, hash: false };
    ask(&mut session, request, files("gptchar-induction", bytes("gptchar-induction")))
        .expect("the planted model loads");
    let suite = Suite::builtin("quote").unwrap();
    let Ok(Reply::Verdicts(rows)) =
        ask(&mut session, Request::Verdicts { model: 4, head: HeadId::new(1, 0), suite }, vec![])
    else {
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
    let request = Request::Induction { model: 1, sequence: ProbeSequence::TextWindow { text, seed: 0, len: 12 } };
    let Ok(Reply::Induction(run)) = ask(&mut session, request, vec![]) else { panic!("probe answers") };
    assert!(run.sequence.contains("held-out text"), "{}", run.sequence);
    assert_eq!(run.report.unwrap().tokens.len(), 24);
    let too_short = ProbeSequence::TextWindow { text: "abc".into(), seed: 0, len: 12 };
    let Ok(Reply::Induction(run)) = ask(&mut session, Request::Induction { model: 1, sequence: too_short }, vec![])
    else {
        panic!("probe answers")
    };
    assert!(run.report.unwrap_err().contains("fewer than the 12"));
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
    let pattern = Request::Pattern { model: 1, head: HeadId::new(0, 0), text: "abc".into() };
    assert!(matches!(ask(&mut session, pattern, vec![]), Ok(Reply::Pattern(_))));
    // A head the model does not have, and a model the worker does not hold.
    let missing_head = Request::Pattern { model: 1, head: HeadId::new(9, 0), text: "abc".into() };
    assert!(ask(&mut session, missing_head, vec![]).unwrap_err().contains("L9H0"));
    assert!(matches!(ask(&mut session, Request::Forget { model: 1 }, vec![]), Ok(Reply::Done)));
    let gone = Request::Pattern { model: 1, head: HeadId::new(0, 0), text: "abc".into() };
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
    let request = Request::Load { model: 1, names, analyse: true, hash: true };
    let reply = ask_reporting(&mut session, request, sources, Rc::new(move |p| sink.borrow_mut().push(p)));
    let analysis = match reply {
        Ok(Reply::Analysed(analysis)) => analysis,
        other => panic!("the GPT-2 fixture loads: {other:?}"),
    };
    // Several files: the SHA-256 of their sorted `name:sha256` lines.
    let lines = format!("config.json:{}\nmodel.safetensors:{}\n", sha256sum(&config), sha256sum(&weights));
    let listing = std::env::temp_dir().join(format!("headprint-hash-{}.txt", std::process::id()));
    std::fs::write(&listing, lines).unwrap();
    assert_eq!(analysis.info.sha256, sha256sum(&listing));
    std::fs::remove_file(&listing).unwrap();
    let seen = seen.borrow();
    let last = |stage: &str| seen.iter().rfind(|p| p.stage.starts_with(stage)).cloned().unwrap();
    assert_eq!(last("Hashing").done, size);
    let reading = last("Reading tensors");
    assert!(reading.done > 0 && reading.done <= size && reading.total == size, "{reading:?}");
    let heads = analysis.folded.heads.len() as u64;
    let fingerprinting = last("Fingerprinting heads (folded)");
    assert_eq!((fingerprinting.done, fingerprinting.total, fingerprinting.grid), (heads, heads, Some((2, 2))));
    // Every head is streamed once, in order, as the final fingerprint has it.
    let streamed: Vec<String> = seen
        .iter()
        .filter(|p| p.stage == "Fingerprinting heads (folded)")
        .flat_map(|p| p.heads.iter().map(|h| format!("L{}H{} {}", h.layer, h.head, h.ov.copying_score)))
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
