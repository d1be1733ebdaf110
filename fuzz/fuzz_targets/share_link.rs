//! Any text as a share link's fragment (a link from a stranger): parsed as the page does, its
//! head resolved against the character fixture, and every value round-trips through the encoder
//! the page writes links with.
#![no_main]

use headprint::analysis::HeadId;
use headprint::link::{decode_component, encode_component, parse};
use headprint::probes::exercise::encode_sheet;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let fields = parse(text);
    if let Some(head) = &fields.head {
        let _ = HeadId::parse(head, &headprint_fuzz::gptchar().config);
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
