//! Any text as the config.json of a real (fixture) GPT-2, GPT-NeoX, Llama, Gemma 2, Falcon,
//! Mixtral or OLMo-2 file: the first byte picks the file. The model is loaded whole and also streamed, as the page and CLI read it.
#![no_main]

use headprint::model::LoadParts;
use headprint_fuzz::{FALCON_RW, GEMMA2, GPT2, LLAMA, MIXTRAL, OLMO2, PYTHIA};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, config)) = data.split_first() else { return };
    let weights = [GPT2, PYTHIA, LLAMA, GEMMA2, FALCON_RW, MIXTRAL, OLMO2][which as usize % 7];
    if let Ok(model) = headprint_fuzz::load(weights, Some(config), LoadParts::Everything) {
        headprint_fuzz::exercise(&model);
    }
    headprint_fuzz::stream(weights, Some(config));
});
