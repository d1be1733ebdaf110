//! Any text as a prompt suite; accepted suites are run on the character fixture.
#![no_main]

use std::sync::OnceLock;

use headprint::analysis::HeadId;
use headprint::model::{LoadParts, Model};
use headprint::probes::{Suite, verdict_table};
use headprint::tokens::Tokenizer;
use headprint_fuzz::GPTCHAR;
use libfuzzer_sys::fuzz_target;

fn model() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| headprint_fuzz::load(GPTCHAR, None, LoadParts::Everything).unwrap())
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(suite) = Suite::from_json(text) else { return };
    let model = model();
    let tokenizer = Tokenizer::for_model(model, None).unwrap();
    let _ = verdict_table(model, &tokenizer, &suite, HeadId::new(1, 0), None);
});
