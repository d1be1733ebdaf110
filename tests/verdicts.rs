//! Verdict labels (docs/methods.md#6-verdict-tables): each rule on hand-made token sequences,
//! merged BPE tokens through a real byte-level tokenizer, and the built-in suites run for real on
//! the planted induction model (tests/fixtures/gptchar-induction) against the Python reference of
//! scripts/make_fixtures.py (PyTorch forward pass + labels written from that section's words).

use crate::common;

use common::*;
use headprint::analysis::HeadId;
use headprint::backend::{Backend, block_on};
use headprint::forward;
use headprint::model::LoadParts;
use headprint::probes::induction::{FirstCopy, RepeatSource, induction_probe};
use headprint::probes::suite::{Labels, Verdict, classify, merged_marks_caveat};
use headprint::probes::{Suite, verdict_table};
use headprint::tokens::Tokenizer;

const PLANTED: &str = "gptchar-induction";

fn chars(s: &str) -> Vec<String> {
    s.chars().map(|c| c.to_string()).collect()
}

fn strings(tokens: &[&str]) -> Vec<String> {
    tokens.iter().map(|t| t.to_string()).collect()
}

fn only(verdict: Verdict) -> Labels {
    Labels { verdict, also: None }
}

fn sink(also: Option<Verdict>) -> Labels {
    Labels { verdict: Verdict::PositionZeroSink, also }
}

#[test]
fn position_zero_is_always_the_sink_with_its_other_label_beside_it() {
    use Verdict::*;
    // C3-C6 of the character-transformer case study start with `(`: attention on it is the sink,
    // and also a bracket.
    let c3 = chars("(a (b");
    assert_eq!(classify(&c3, 4, 0), sink(Some(OpenBracket)));
    assert_eq!(classify(&c3, 4, 3), only(OpenBracket));
    let c4 = chars("(a) b");
    assert_eq!(classify(&c4, 4, 0), sink(Some(MostRecentBracket)));
    assert_eq!(classify(&c4, 4, 2), only(MostRecentBracket));
    let c5 = chars("(a (b) c");
    assert_eq!(classify(&c5, 7, 0), sink(Some(OpenBracket)));
    assert_eq!(classify(&c5, 7, 3), only(MostRecentBracket));
    assert_eq!(classify(&c5, 7, 5), only(MostRecentBracket));
    let c6 = chars("((a) b");
    assert_eq!(classify(&c6, 5, 0), sink(Some(OpenBracket)));
    assert_eq!(classify(&c6, 5, 1), only(MostRecentBracket));
    assert_eq!(classify(&c6, 5, 3), only(MostRecentBracket));
    // No other label: the sink alone.
    let c8 = chars("A (B (C) D");
    assert_eq!(classify(&c8, 9, 0), sink(None));
    assert_eq!(classify(&c8, 9, 2), only(OpenBracket));
    assert_eq!(classify(&c8, 9, 5), only(MostRecentBracket));
    assert_eq!(classify(&c8, 9, 7), only(MostRecentBracket));
    assert_eq!(classify(&c8, 9, 6), only(Other));
    // A quote at position 0 that the query closes.
    let closing = chars("\"a\"");
    assert_eq!(classify(&closing, 2, 0), sink(Some(MatchingQuote)));
}

#[test]
fn the_induction_successor_follows_the_most_recent_occurrence() {
    // Query `a` at 6; earlier `a`s at 0 and 3: only the token after 3 is the successor.
    let tokens = chars("ab ac a");
    assert_eq!(classify(&tokens, 6, 4).verdict, Verdict::InductionSuccessor);
    assert_eq!(classify(&tokens, 6, 1).verdict, Verdict::Other, "after an older occurrence");
    // The character-transformer case study's P3-A: `r` occurs at 3 and 5; the successor is `e` at
    // 6, not `a` at 4.
    let p3 = chars("a \"rare\" w \"r");
    assert_eq!(classify(&p3, 12, 6).verdict, Verdict::InductionSuccessor);
    assert_eq!(classify(&p3, 12, 4).verdict, Verdict::Other);
    // The induction rule comes first: a successor that is also the open quote is the successor.
    let both = chars("x\"y x");
    assert_eq!(classify(&both, 4, 1).verdict, Verdict::InductionSuccessor);
    // No earlier occurrence: no successor.
    assert_eq!(classify(&chars("abc"), 2, 1).verdict, Verdict::Other);
}

#[test]
fn quotes_pair_left_to_right() {
    let open = chars("a \"rare\" w \"r");
    assert_eq!(classify(&open, 12, 11).verdict, Verdict::MatchingQuote, "the quote still open");
    assert_eq!(classify(&open, 12, 2).verdict, Verdict::Other, "a closed quote");
    assert_eq!(classify(&open, 12, 7).verdict, Verdict::Other);
    // The query closes a pair: its partner is the quote that opened it.
    let closing = chars("\"a\" \"b\"");
    assert_eq!(classify(&closing, 6, 4).verdict, Verdict::MatchingQuote);
    assert_eq!(classify(&closing, 6, 2).verdict, Verdict::Other);
    // The query opens a quote: nothing before it matches.
    let opening = chars("\"a\" \"");
    assert!((0..5).all(|k| classify(&opening, 4, k).verdict != Verdict::MatchingQuote));
}

#[test]
fn brackets_open_and_most_recent() {
    let p7b = chars("so (we were) the few");
    assert_eq!(classify(&p7b, 19, 3).verdict, Verdict::MostRecentBracket, "closed, but the latest `(`");
    assert_eq!(classify(&p7b, 19, 11).verdict, Verdict::MostRecentBracket, "the latest `)`");
    let p7a = chars("so (we were the few");
    assert_eq!(classify(&p7a, 18, 3).verdict, Verdict::OpenBracket);
    // A stray `)` closes nothing.
    let stray = chars(") (a");
    assert_eq!(classify(&stray, 3, 2).verdict, Verdict::OpenBracket);
}

#[test]
fn merged_bpe_tokens_count_their_quote_and_bracket_characters() {
    use Verdict::*;
    // Single marks inside merged tokens count as the mark.
    let single = strings(&["Ġ(", "a", "),", "Ġb"]);
    assert_eq!(classify(&single, 3, 0), sink(Some(MostRecentBracket)));
    assert_eq!(classify(&single, 3, 2), only(MostRecentBracket));
    assert_eq!(merged_marks_caveat(&single, 3), "");
    // `("` opens a bracket and a quote; `"),` closes both.
    let merged = strings(&["a", "Ġ(\"", "b", "\"),"]);
    assert_eq!(classify(&merged, 3, 1), only(MatchingQuote));
    assert_eq!(classify(&merged, 3, 0), sink(None));
    let caveat = merged_marks_caveat(&merged, 3);
    assert!(caveat.contains("1 `Ġ(\"`") && caveat.contains("3 `\"),`"), "{caveat}");
    assert_eq!(merged_marks_caveat(&merged, 2), merged_marks_caveat(&strings(&["a", "Ġ(\"", "b"]), 2));
}

/// A byte-level BPE (GPT-2's pre-tokenizer) whose merges make `("`, `"),` and `Ġ("` tokens.
const BPE_TOKENIZER: &str = r#"{
  "version": "1.0", "truncation": null, "padding": null, "added_tokens": [], "normalizer": null,
  "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
  "post_processor": null, "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
  "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
    "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
    "vocab": {"f": 0, "(": 1, "\"": 2, "x": 3, ")": 4, ",": 5, "Ġ": 6, "y": 7,
              "(\"": 8, "\")": 9, "\"),": 10, "Ġ(\"": 11},
    "merges": ["( \"", "\" )", "\") ,", "Ġ (\""]}
}"#;

#[test]
fn a_byte_level_tokenizer_merges_marks_and_the_labels_read_them() {
    let tokenizer =
        Tokenizer::Hugging(Box::new(tokenizers::Tokenizer::from_bytes(BPE_TOKENIZER.as_bytes()).expect("tokenizer")));
    let ids = tokenizer.encode("f(\"x\"), (\"y").unwrap();
    let tokens: Vec<String> = ids.iter().map(|&i| tokenizer.token_text(i)).collect();
    assert_eq!(tokens, strings(&["f", "(\"", "x", "\"),", "Ġ(\"", "y"]));
    // Marks in reading order: ( " | " ) | ( " -> the open quote and the open bracket are token 4.
    assert_eq!(classify(&tokens, 5, 4).verdict, Verdict::MatchingQuote);
    assert_eq!(classify(&tokens, 5, 3).verdict, Verdict::MostRecentBracket);
    assert_eq!(classify(&tokens, 5, 1).verdict, Verdict::Other, "its bracket and quote are closed");
    let caveat = merged_marks_caveat(&tokens, 5);
    assert!(caveat.contains("do not isolate") && caveat.contains("4 `Ġ(\"`"), "{caveat}");
}

#[test]
fn planted_model_forward_pass_matches_pytorch() {
    let model = load(PLANTED, LoadParts::Everything);
    let reference = expected(PLANTED);
    let tokens: Vec<usize> =
        reference["forward"]["tokens"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as usize).collect();
    let tokenizer = Tokenizer::for_model(&model, None).unwrap();
    assert_eq!(tokenizer.encode(reference["forward"]["text"].as_str().unwrap()).unwrap(), tokens);
    let output = forward::run(&model, &tokens).unwrap();
    for (layer, heads) in reference["forward"]["patterns"].as_array().unwrap().iter().enumerate() {
        for (head, rows) in heads.as_array().unwrap().iter().enumerate() {
            for (q, row) in rows.as_array().unwrap().iter().enumerate() {
                for (k, value) in floats(row).into_iter().enumerate() {
                    let got = output.patterns[layer][head][(q, k)] as f64;
                    assert_close(got, value, 1.0, &format!("pattern L{layer}H{head} [{q},{k}]"));
                }
            }
        }
    }
    let scale = reference["forward"]["logits"].as_array().unwrap().iter().flat_map(floats).fold(0.0, f64::max);
    for (t, row) in reference["forward"]["logits"].as_array().unwrap().iter().enumerate() {
        for (v, value) in floats(row).into_iter().enumerate() {
            assert_close(output.logits[(t, v)] as f64, value, scale, &format!("logits [{t},{v}]"));
        }
    }
}

#[test]
fn the_planted_induction_head_is_found_and_copies() {
    let model = load(PLANTED, LoadParts::Everything);
    let reference = expected(PLANTED);
    let first: Vec<usize> =
        reference["induction"]["first_copy"].as_array().unwrap().iter().map(|t| t.as_u64().unwrap() as usize).collect();
    // One given sequence (a character model: no BOS), so the report's means are its scores.
    let copies = [FirstCopy { tokens: first, source: RepeatSource::Given }];
    let report = block_on(induction_probe(&model, &copies, None, &mut Backend::cpu())).unwrap();
    let want_accuracy = reference["induction"]["prefix_copy_accuracy"].as_f64().unwrap();
    assert_close(report.prefix_copy_accuracy, want_accuracy, 1.0, "prefix-copy accuracy");
    assert!(report.prefix_copy_accuracy >= 0.8, "the planted circuit copies: {}", report.prefix_copy_accuracy);
    for (got, want) in report.heads.iter().zip(reference["induction"]["heads"].as_array().unwrap()) {
        for (metric, value) in [
            ("induction_score", got.induction_score),
            ("previous_token_score", got.previous_token_score),
            ("duplicate_token_score", got.duplicate_token_score),
        ] {
            assert_close(value, want[metric].as_f64().unwrap(), 1.0, &format!("L{}H{} {metric}", got.layer, got.head));
        }
    }
    // The heads planted by construction (scripts/make_fixtures.py, planted_weights).
    let planted = &reference["planted_heads"];
    let top = report.heads.iter().max_by(|a, b| a.induction_score.total_cmp(&b.induction_score)).unwrap();
    assert_eq!(HeadId::new(top.layer, top.head).to_string(), planted["induction"].as_str().unwrap());
    assert!(top.induction_score >= 0.4, "{}", top.induction_score);
    let previous = report.heads.iter().max_by(|a, b| a.previous_token_score.total_cmp(&b.previous_token_score));
    let previous = previous.unwrap();
    assert_eq!(HeadId::new(previous.layer, previous.head).to_string(), planted["previous_token"].as_str().unwrap());
    assert!(previous.previous_token_score >= 0.9, "{}", previous.previous_token_score);
}

#[test]
fn built_in_suites_run_on_the_planted_model_and_match_the_python_reference() {
    let model = load(PLANTED, LoadParts::Everything);
    let tokenizer = Tokenizer::for_model(&model, None).unwrap();
    let reference = expected(PLANTED);
    let mut labels_seen = std::collections::BTreeSet::new();
    // The character-transformer case study's suites; the exercise sheet is written for the demo
    // model, where worker_session.rs checks its answers.
    for name in Suite::BUILTIN.into_iter().filter(|&name| name != "exercises-demo") {
        let suite = Suite::builtin(name).unwrap();
        for (head, want) in reference["verdicts"][name].as_object().unwrap() {
            let head_id = HeadId::parse(head, &model.config).unwrap();
            let rows = block_on(verdict_table(&model, &tokenizer, &suite, head_id, None, &mut Backend::cpu()))
                .expect("the suite runs on this vocabulary");
            let json = serde_json::to_value(&rows).unwrap();
            assert_verdicts_match(&json, want, &format!("{name} {head}"));
            for row in &rows {
                labels_seen.insert(row.top.labels());
                assert_eq!(row.caveat, "", "single characters isolate every mark");
            }
        }
    }
    // The comparison exercised every label, and the sink with a second label beside it.
    for label in [
        "induction successor",
        "matching quote",
        "open bracket still to close",
        "most recent bracket",
        "position-0 sink",
        "position-0 sink (also open bracket still to close)",
        "other",
    ] {
        assert!(labels_seen.contains(label), "no top key labelled `{label}`: {labels_seen:?}");
    }
}

/// The planted model's heads read one subspace and write or compare another, so several of its
/// circuits are nilpotent (`B A = 0` with `M ≠ 0`): each says so in its own cell, and the
/// induction head's copying OV circuit still reads.
#[test]
fn the_planted_models_cross_subspace_circuits_are_named_nilpotent() {
    use headprint::analysis::{Mode, fingerprint_model};
    let model = load(PLANTED, LoadParts::Circuits);
    let report = fingerprint_model(&model, Mode::Raw).unwrap();
    let induction = report.head(HeadId::new(1, 0)).unwrap();
    let qk = induction.qk.error.as_deref().unwrap_or_default();
    assert!(qk.contains("nilpotent"), "L1H0 QK: {qk:?}");
    assert!(induction.ov.error.is_none(), "{:?}", induction.ov.error);
    assert!(induction.ov.copying_score > 0.5, "the induction head copies: {}", induction.ov.copying_score);
}
