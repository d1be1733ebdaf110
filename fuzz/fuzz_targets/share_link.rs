//! Any text as a share link's fragment (a link from a stranger): parsed as the page does, its
//! head resolved against the character fixture, and every value round-trips through the encoder
//! the page writes links with.
#![no_main]

use std::sync::OnceLock;

use headprint::analysis::HeadId;
use headprint::link::{decode_component, encode_component, parse};
use headprint::model::{LoadParts, Model};
use headprint::probes::exercise::encode_sheet;
use headprint_fuzz::GPTCHAR;
use libfuzzer_sys::fuzz_target;

fn model() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| headprint_fuzz::load(GPTCHAR, None, LoadParts::Everything).unwrap())
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let fields = parse(text);
    if let Some(head) = &fields.head {
        let _ = HeadId::parse(head, &model().config);
    }
    // What the page writes, it reads back unchanged.
    for value in [&fields.name, &fields.prompt, &fields.tab].into_iter().flatten() {
        assert_eq!(decode_component(&encode_component(value)).as_deref(), Some(value.as_str()));
    }
    if let Some(Ok(sheet)) = &fields.sheet {
        let again =
            headprint::probes::exercise::decode_sheet(&encode_sheet(sheet)).expect("a written sheet reads back");
        assert_eq!(serde_json::to_string(&again).unwrap(), serde_json::to_string(sheet).unwrap());
    }
});
