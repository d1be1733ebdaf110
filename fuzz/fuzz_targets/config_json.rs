//! Any text as the config.json of a real (fixture) GPT-2, GPT-NeoX or Llama file: the first byte
//! picks the family. The model is loaded whole and also streamed, as the page and CLI read it.
#![no_main]

use headprint::model::LoadParts;
use headprint_fuzz::{GPT2, LLAMA, PYTHIA};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&which, config)) = data.split_first() else { return };
    let weights = [GPT2, PYTHIA, LLAMA][which as usize % 3];
    if let Ok(model) = headprint_fuzz::load(weights, Some(config), LoadParts::Everything) {
        headprint_fuzz::exercise(&model);
    }
    headprint_fuzz::stream(weights, Some(config));
});
