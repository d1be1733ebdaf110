//! Any bytes as a safetensors file, beside a config.json that is also fuzzed: the input is a
//! 2-byte little-endian config length, that many bytes of config.json (none when 0), then the
//! weights file. The model is loaded whole and also streamed, as the page and CLI read it.
#![no_main]

use headprint::model::LoadParts;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((length, rest)) = data.split_first_chunk::<2>() else { return };
    let length = (u16::from_le_bytes(*length) as usize).min(rest.len());
    let (config, weights) = rest.split_at(length);
    let config = (!config.is_empty()).then_some(config);
    if let Ok(model) = headprint_fuzz::load(weights, config, LoadParts::Everything) {
        headprint_fuzz::exercise(&model);
    }
    headprint_fuzz::stream(weights, config);
});
