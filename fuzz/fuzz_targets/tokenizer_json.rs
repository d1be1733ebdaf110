//! Any bytes as tokenizer.json beside the GPT-2 fixture: accepted tokenizers encode, decode
//! token ids and choose a BOS.
#![no_main]

use std::sync::OnceLock;

use headprint::model::{LoadParts, Model};
use headprint::tokens::{Tokenizer, choose_bos};
use headprint_fuzz::{GPT2, GPT2_CONFIG};
use libfuzzer_sys::fuzz_target;

fn model() -> &'static Model {
    static MODEL: OnceLock<Model> = OnceLock::new();
    MODEL.get_or_init(|| headprint_fuzz::load(GPT2, Some(GPT2_CONFIG.as_bytes()), LoadParts::Circuits).unwrap())
}

fuzz_target!(|data: &[u8]| {
    let model = model();
    let Ok(tokenizer) = Tokenizer::for_model(model, Some(data)) else { return };
    let _ = tokenizer.encode("Hello, world! <|endoftext|> ë");
    for id in 0..model.config.vocab + 2 {
        let _ = tokenizer.single(&tokenizer.token_text(id));
    }
    let _ = choose_bos(model, &tokenizer);
    let _ = tokenizer.ordinary_ids(model);
});
