//! Any text as a prompt suite; accepted suites are run on the character fixture.
#![no_main]

use headprint::analysis::HeadId;
use headprint::backend::{Backend, block_on};
use headprint::probes::{Suite, verdict_table};
use headprint::tokens::Tokenizer;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(suite) = Suite::from_json(text) else { return };
    let model = headprint_fuzz::gptchar();
    let tokenizer = Tokenizer::for_model(model, None).unwrap();
    let _ = block_on(verdict_table(model, &tokenizer, &suite, HeadId::new(1, 0), None, &mut Backend::cpu()));
});
