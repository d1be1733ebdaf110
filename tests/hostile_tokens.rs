//! Token strings come from files and reach the page's charts (inline SVG), its tables and the
//! exports: a hostile vocabulary must stay text everywhere, never markup or script.

use crate::common;

use std::rc::Rc;

use common::with_metadata;
use headprint::analysis::{HeadId, Mode};
use headprint::backend::BackendChoice;
use headprint::figures::svg::{Bar, Point, bar_chart, heatmap, key_picker, scatter};
use headprint::model::{LoadParts, Model};
use headprint::tokens::Tokenizer;
use headprint::weights::{ByteSource, MemorySource, ModelFiles};
use headprint::worker::protocol::{Reply, Request};
use headprint::worker::session::Session;

/// gptchar's 13 characters replaced by tokens that would be markup, script, XML-breaking or
/// text-reordering if written into the page unescaped.
const HOSTILE: [&str; 13] = [
    "<img src=x onerror=window.__pwned=1>",
    "</script>",
    "]]>",
    "\"",
    "'",
    "\u{202e}evil",
    "a\u{0}b",
    "&amp;",
    "<![CDATA[x",
    "\u{ffff}",
    "<!--",
    " ",
    "\u{2066}x",
];

/// What the page shows for each: the same text, with NUL, U+FFFF and bidirectional controls as
/// U+FFFD and a space as a visible space.
const SHOWN: [&str; 13] = [
    "<img\u{2423}src=x\u{2423}onerror=window.__pwned=1>",
    "</script>",
    "]]>",
    "\"",
    "'",
    "\u{fffd}evil",
    "a\u{fffd}b",
    "&amp;",
    "<![CDATA[x",
    "\u{fffd}",
    "<!--",
    "\u{2423}",
    "\u{fffd}x",
];

/// The committed fixture (scripts/make_fixtures.py --only hostile; the browser test loads it too).
fn hostile_bytes() -> Vec<u8> {
    std::fs::read(common::fixture("hostile/model.safetensors")).unwrap()
}

#[test]
fn the_hostile_fixture_is_gptchar_with_the_hostile_vocabulary() {
    let fixture = hostile_model();
    let gptchar = common::load("gptchar", LoadParts::Everything);
    assert_eq!(fixture.vocab_strings.as_deref(), Some(HOSTILE.map(String::from).as_slice()));
    let expected = Model::load(
        &ModelFiles::from_named(vec![(
            "x.safetensors".into(),
            Box::new(MemorySource::new(
                "x.safetensors",
                with_metadata("gptchar", "vocab", &serde_json::to_string(&HOSTILE).unwrap()),
            )) as Box<dyn ByteSource>,
        )])
        .unwrap(),
        LoadParts::Everything,
    )
    .unwrap();
    assert_eq!(fixture.parameter_count, gptchar.parameter_count);
    let ids: Vec<usize> = (0..13).collect();
    let (a, b) = (headprint::forward::run(&fixture, &ids).unwrap(), headprint::forward::run(&expected, &ids).unwrap());
    assert_eq!(a.patterns[1][0], b.patterns[1][0], "the same weights as gptchar");
}

/// The fixture's tokenizer.json: words that would be script, markup or CSV formulas.
const WORDS: [&str; 13] = [
    "[UNK]",
    "<script>window.__pwned=3</script>",
    "\"><img/src=x/onerror=window.__pwned=4>",
    "</title><svg/onload=window.__pwned=5>",
    "]]><!--",
    "<style>*{display:none!important}</style>",
    "'\"`",
    "\u{202e}evil\u{202c}",
    "nul\u{0}byte",
    "=cmd|'/C calc'!A0",
    "a,b;\"c\"",
    "&lt;&amp;",
    "\u{2066}rtl\u{2069}",
];

#[test]
fn a_hostile_tokenizer_encodes_and_labels_its_words_as_text() {
    let model = hostile_model();
    let json = std::fs::read(common::fixture("hostile/tokenizer.json")).unwrap();
    let tokenizer = Tokenizer::for_model(&model, Some(&json)).unwrap();
    let texts: Vec<String> = (0..13).map(|i| tokenizer.token_text(i)).collect();
    assert_eq!(texts, WORDS);
    let prompt = WORDS[1..].iter().filter(|w| !w.contains(char::is_whitespace)).copied().collect::<Vec<_>>().join(" ");
    let ids = tokenizer.encode(&prompt).unwrap();
    let typed: Vec<usize> = (1..13).filter(|&i| !WORDS[i].contains(char::is_whitespace)).collect();
    assert_eq!(ids, typed);
    let output = headprint::forward::run(&model, &ids).unwrap();
    let n = ids.len();
    let rows: Vec<Vec<f64>> = (0..n).map(|q| (0..n).map(|k| output.patterns[0][0][(q, k)] as f64).collect()).collect();
    let tokens: Vec<String> = ids.iter().map(|&i| tokenizer.token_text(i)).collect();
    let document_text = heatmap(&rows, &tokens, &[], None, 480.0, "L0H0");
    let document = parse(&document_text);
    assert_eq!(element_names(&document), ["rect", "svg", "text", "title"]);
    let labels: Vec<&str> = document
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .map(|n| n.text().unwrap_or_default())
        .step_by(2)
        .collect();
    assert_eq!(labels[0], WORDS[1]);
    assert_eq!(labels[6], "\u{fffd}evil\u{fffd}", "bidi controls shown as U+FFFD");
    assert_eq!(labels[7], "nul\u{fffd}byte");
}

fn hostile_model() -> Model {
    let source = MemorySource::new("hostile.safetensors", hostile_bytes());
    let files = ModelFiles::from_named(vec![("hostile.safetensors".into(), Box::new(source) as Box<dyn ByteSource>)]);
    Model::load(&files.unwrap(), LoadParts::Everything).unwrap()
}

/// Parses as XML 1.0 (strictly: any unescaped markup or forbidden character fails here).
fn parse(svg: &str) -> roxmltree::Document<'_> {
    roxmltree::Document::parse(svg).unwrap_or_else(|e| panic!("not well-formed XML ({e}): {svg}"))
}

fn element_names(document: &roxmltree::Document) -> Vec<String> {
    let mut names: Vec<String> =
        document.descendants().filter(|n| n.is_element()).map(|n| n.tag_name().name().to_string()).collect();
    names.sort();
    names.dedup();
    names
}

#[test]
fn the_vocabulary_reaches_the_core_unchanged() {
    let model = hostile_model();
    let tokenizer = Tokenizer::for_model(&model, None).unwrap();
    let texts: Vec<String> = (0..13).map(|i| tokenizer.token_text(i)).collect();
    assert_eq!(texts, HOSTILE);
}

#[test]
fn an_attention_heatmap_of_hostile_tokens_is_well_formed_svg_with_the_tokens_as_text() {
    let model = hostile_model();
    let tokenizer = Tokenizer::for_model(&model, None).unwrap();
    let ids: Vec<usize> = (0..13).collect();
    let output = headprint::forward::run(&model, &ids).unwrap();
    let pattern = &output.patterns[1][0];
    let rows: Vec<Vec<f64>> = (0..13).map(|q| (0..13).map(|k| pattern[(q, k)] as f64).collect()).collect();
    let tokens: Vec<String> = ids.iter().map(|&i| tokenizer.token_text(i)).collect();
    let title = format!("L1H0: {}", HOSTILE[0]);
    let svg = heatmap(&rows, &tokens, &[(3, 1)], Some(2), 480.0, &title);
    let document = parse(&svg);
    assert_eq!(element_names(&document), ["rect", "svg", "text", "title"]);
    assert_eq!(document.root_element().attribute("aria-label"), Some(title.as_str()));
    // Each token is labelled twice (query row, key column), as text, with a hover title.
    let labels: Vec<&str> =
        document.descendants().filter(|n| n.has_tag_name("text")).map(|n| n.text().unwrap_or_default()).collect();
    let twice: Vec<&str> = SHOWN.iter().flat_map(|s| [*s, *s]).collect();
    assert_eq!(labels, twice);
    let titles: Vec<String> = document
        .descendants()
        .filter(|n| n.has_tag_name("title"))
        .map(|n| n.text().unwrap_or_default().into())
        .collect();
    for (i, shown) in SHOWN.iter().enumerate() {
        assert!(titles.contains(&format!("query {i}: {shown}")), "query {i}");
        assert!(titles.contains(&format!("key {i}: {shown}")), "key {i}");
    }
    let cell = format!("query 5 {} → key 0 {}: {:.4}", SHOWN[5], SHOWN[0], rows[5][0]);
    assert!(titles.contains(&cell), "{cell}");
}

#[test]
fn the_key_picker_offers_the_query_rows_keys_as_labelled_buttons_and_no_weights() {
    let tokens: Vec<String> = HOSTILE.iter().map(|t| t.to_string()).collect();
    let svg = key_picker(&tokens, 6, 360.0, HOSTILE[0]);
    let document = parse(&svg);
    assert_eq!(element_names(&document), ["rect", "svg", "text", "title"]);
    let choices: Vec<roxmltree::Node> = document.descendants().filter(|n| n.attribute("data-key").is_some()).collect();
    // Keys 0..=6 of query 6 only, each focusable, a button, named by its token as shown.
    let keys: Vec<&str> = choices.iter().map(|n| n.attribute("data-key").unwrap()).collect();
    assert_eq!(keys, ["0", "1", "2", "3", "4", "5", "6"]);
    for (k, node) in choices.iter().enumerate() {
        assert_eq!(node.attribute("data-query"), Some("6"));
        assert_eq!((node.attribute("tabindex"), node.attribute("role")), (Some("0"), Some("button")));
        assert_eq!(node.attribute("aria-label"), Some(format!("key {k}: {}", SHOWN[k]).as_str()));
    }
    // The other cells of the lower triangle are drawn, without titles, so no weight is given away.
    let cells = document.descendants().filter(|n| n.has_tag_name("rect")).count();
    assert_eq!(cells, 13 * 14 / 2);
    assert!(!svg.contains('→'), "no query → key weight titles");
}

#[test]
fn bar_and_scatter_labels_stay_text() {
    let bars: Vec<Bar> = HOSTILE
        .iter()
        .map(|t| Bar { label: t.to_string(), value: 0.5, fill: "#123".into(), head: t.to_string(), selected: false })
        .collect();
    let svg = bar_chart(&bars, 4, 0.0, 1.0, HOSTILE[1]);
    let document = parse(&svg);
    assert!(!element_names(&document).iter().any(|n| n == "img" || n == "script"));
    let heads: Vec<&str> = document.descendants().filter_map(|n| n.attribute("data-head")).collect();
    // Head names and hover labels are not token labels: only XML's forbidden characters change.
    let expected: Vec<String> = HOSTILE.iter().map(|t| t.replace(['\u{0}', '\u{ffff}'], "\u{fffd}")).collect();
    assert_eq!(heads, expected);
    let points: Vec<Point> = HOSTILE
        .iter()
        .enumerate()
        .map(|(i, t)| Point { x: i as f64, y: 1.0, label: t.to_string(), head: t.to_string(), highlighted: false })
        .collect();
    let svg = scatter(&points, HOSTILE[2], HOSTILE[3], HOSTILE[4]);
    let document = parse(&svg);
    let titles: Vec<&str> = document
        .descendants()
        .filter(|n| n.has_tag_name("circle"))
        .filter_map(|n| n.children().find(|c| c.has_tag_name("title")).and_then(|t| t.text()))
        .collect();
    assert_eq!(titles, expected);
}

#[test]
fn hostile_tokens_survive_the_worker_json_trip_exactly() {
    let mut session = Session::new(|| 0.0);
    let files = |bytes: Vec<u8>| vec![Box::new(MemorySource::new("hostile.safetensors", bytes)) as Box<dyn ByteSource>];
    let trip = |session: &mut Session, request: Request, files: Vec<Box<dyn ByteSource>>| {
        let request: Request = serde_json::from_str(&serde_json::to_string(&request).unwrap()).unwrap();
        let answer = session.handle(request, files, Rc::new(|_| {})).map_err(|e| e.to_string());
        let text = serde_json::to_string(&answer).unwrap();
        serde_json::from_str::<Result<Reply, String>>(&text).unwrap()
    };
    let load = Request::Load {
        model: 1,
        names: vec!["hostile.safetensors".into()],
        analyse: false,
        prepend_bos: false,
        backend: BackendChoice::Cpu,
        link: None,
    };
    assert!(matches!(trip(&mut session, load, files(hostile_bytes())), Ok(Reply::Loaded)));
    let request = Request::SelfCopy { model: 1, mode: Mode::Folded, head: HeadId::new(0, 0), top: 13 };
    let Ok(Reply::SelfCopy { raw, .. }) = trip(&mut session, request, vec![]) else { panic!("self-copy answers") };
    let mut returned: Vec<String> = raw.into_iter().map(|(token, _)| token).collect();
    let mut sent: Vec<String> = HOSTILE.iter().map(|t| t.to_string()).collect();
    returned.sort();
    sent.sort();
    assert_eq!(returned, sent);
}

#[test]
fn a_lone_surrogate_in_the_vocabulary_is_a_clear_error() {
    // JSON can spell a lone surrogate; a Rust string cannot hold one.
    let bytes = std::fs::read(common::fixture("hostile/lone-surrogate.safetensors")).unwrap();
    let files = ModelFiles::from_named(vec![(
        "lone.safetensors".into(),
        Box::new(MemorySource::new("lone.safetensors", bytes)) as Box<dyn ByteSource>,
    )]);
    let m = Model::load(&files.unwrap(), LoadParts::Circuits).unwrap_err().to_string();
    assert!(
        m.starts_with("the file's metadata `vocab` is not a JSON list of strings") && m.contains("hex escape"),
        "{m}"
    );
}
