//! Text <-> token ids: characters from the file's `vocab` metadata, `tokenizer.json` through
//! the `tokenizers` crate, or bare ids when a model has neither. Ids are accepted everywhere
//! text is.

use serde::{Deserialize, Serialize};

use crate::model::Weights;
use crate::{Error, Result};

pub enum Tokenizer {
    /// Character model: id -> character.
    Chars(Vec<String>),
    /// A Hugging Face `tokenizer.json`.
    Hugging(Box<tokenizers::Tokenizer>),
    /// No vocabulary known: only ids, shown as `#id`.
    IdsOnly { vocab: usize },
}

impl Tokenizer {
    pub fn for_model(model: &(impl Weights + ?Sized), tokenizer_json: Option<&[u8]>) -> Result<Self> {
        if let Some(bytes) = tokenizer_json {
            // The tokenizers crate panics (an abort in the browser) on a decoder that is not
            // valid JSON: check the whole file first (fuzz/fuzz_targets/tokenizer_json.rs). Every
            // string is read in full: a syntax-only check (serde's IgnoredAny) would pass bytes
            // that are not UTF-8 and lone surrogate escapes, on which the crate panics too.
            let text = std::str::from_utf8(bytes).map_err(|e| {
                Error::Tokenizer(format!("tokenizer.json is not UTF-8 text (byte {} is not)", e.valid_up_to()))
            })?;
            let json = serde_json::from_str::<serde_json::Value>(text)
                .map_err(|e| Error::Tokenizer(format!("tokenizer.json is not valid JSON: {e}")))?;
            check_bpe_merges(&json)?;
            let tokenizer = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| Error::Tokenizer(e.to_string()))?;
            // A tokenizer from another (bigger) model would hand out ids past the embedding.
            let vocab = model.config().vocab;
            if let Some(largest) = tokenizer.get_vocab(true).into_values().max()
                && largest as usize >= vocab
            {
                return Err(Error::Tokenizer(format!(
                    "tokenizer.json has token ids up to {largest}, but the model's embedding has {vocab} rows (ids 0..{}): it belongs to another model",
                    vocab - 1
                )));
            }
            return Ok(Tokenizer::Hugging(Box::new(tokenizer)));
        }
        Ok(match model.vocab_strings() {
            Some(chars) => Tokenizer::Chars(chars.to_vec()),
            None => Tokenizer::IdsOnly { vocab: model.config().vocab },
        })
    }

    pub fn encode(&self, text: &str) -> Result<Vec<usize>> {
        match self {
            Tokenizer::Chars(chars) => {
                text.chars()
                    .map(|c| {
                        let s = c.to_string();
                        chars.iter().position(|v| *v == s).ok_or_else(|| {
                            Error::BadTokens(format!("character {c:?} is not in the model's vocabulary"))
                        })
                    })
                    .collect()
            }
            Tokenizer::Hugging(tokenizer) => {
                let encoding = tokenizer.encode(text, false).map_err(|e| Error::Tokenizer(e.to_string()))?;
                Ok(encoding.get_ids().iter().map(|&i| i as usize).collect())
            }
            // Prompts and suites on such a model are written as ids.
            Tokenizer::IdsOnly { .. } => parse_ids(text).map_err(|e| {
                Error::BadTokens(format!(
                    "this model has no vocabulary (no tokenizer.json, no `vocab` metadata): give token ids, e.g. 3,1,4 ({})",
                    match e {
                        Error::BadTokens(why) => why,
                        other => other.to_string(),
                    }
                ))
            }),
        }
    }

    /// How a token is shown: its text, or `#id` when unknown.
    pub fn token_text(&self, id: usize) -> String {
        match self {
            Tokenizer::Chars(chars) => chars.get(id).cloned().unwrap_or_else(|| format!("#{id}")),
            Tokenizer::Hugging(tokenizer) => tokenizer.id_to_token(id as u32).unwrap_or_else(|| format!("#{id}")),
            Tokenizer::IdsOnly { .. } => format!("#{id}"),
        }
    }

    /// One token, written as its text or as `#id`.
    pub fn single(&self, written: &str) -> Result<usize> {
        if let Some(id) = written.strip_prefix('#').and_then(|n| n.parse().ok()) {
            return Ok(id);
        }
        let ids = match self {
            Tokenizer::Hugging(tokenizer) => match tokenizer.token_to_id(written) {
                Some(id) => vec![id as usize],
                None => self.encode(written)?,
            },
            _ => self.encode(written)?,
        };
        match ids[..] {
            [id] => Ok(id),
            _ => Err(Error::BadTokens(format!(
                "{written:?} is {} tokens, not one (write #id for a token id)",
                ids.len()
            ))),
        }
    }

    /// Ids the tokenizer marks special (excluded from random probe sequences).
    pub fn special_ids(&self) -> Vec<usize> {
        match self {
            Tokenizer::Hugging(tokenizer) => tokenizer
                .get_added_tokens_decoder()
                .iter()
                .filter(|(_, t)| t.special)
                .map(|(&id, _)| id as usize)
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The ids random probe tokens are drawn from (docs/methods.md#5-probes-running-the-model): the
    /// tokens the tokenizer knows, without its special tokens and without embedding rows past its
    /// vocabulary (Pythia pads its embedding from 50277 to 50304 rows that training never touched).
    /// Without a tokenizer, every row but the ids config.json names special.
    pub fn ordinary_ids(&self, model: &(impl Weights + ?Sized)) -> Vec<usize> {
        let rows = model.config().vocab;
        let mut excluded = self.special_ids();
        excluded.extend(&model.config().config_special_ids);
        let known: Vec<usize> = match self {
            Tokenizer::Chars(chars) => (0..chars.len().min(rows)).collect(),
            Tokenizer::Hugging(tokenizer) => {
                let mut ids: Vec<usize> =
                    tokenizer.get_vocab(true).into_values().map(|id| id as usize).filter(|&id| id < rows).collect();
                ids.sort_unstable();
                ids
            }
            Tokenizer::IdsOnly { .. } => (0..rows).collect(),
        };
        known.into_iter().filter(|id| !excluded.contains(id)).collect()
    }
}

/// Names that tokenizers give the token models are trained to see first (GPT-2 and Pythia's
/// `<|endoftext|>`, Llama 2's `<s>`, Llama 3's `<|begin_of_text|>`, Gemma's `<bos>`), in order of
/// preference when config.json names none.
const BOS_NAMES: [&str; 4] = ["<|begin_of_text|>", "<s>", "<bos>", "<|endoftext|>"];

/// The token prepended to probes and prompts (docs/methods.md#1-conventions, "BOS"), and where it
/// came from.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Bos {
    pub id: usize,
    pub token: String,
    /// `config.json bos_token_id` or `tokenizer special token`.
    pub source: String,
}

/// The model's BOS: config.json's `bos_token_id` (validated when the model was loaded), else a
/// special token of the tokenizer with a known BOS name. Character models have none.
pub fn choose_bos(model: &(impl Weights + ?Sized), tokenizer: &Tokenizer) -> Option<Bos> {
    let config = model.config();
    if config.characters {
        return None;
    }
    if let Some(id) = config.bos_token_id {
        return Some(Bos { id, token: tokenizer.token_text(id), source: "config.json bos_token_id".into() });
    }
    let Tokenizer::Hugging(hugging) = tokenizer else { return None };
    let specials = hugging.get_added_tokens_decoder();
    BOS_NAMES.iter().find_map(|name| {
        specials
            .iter()
            .find(|(id, t)| t.special && t.content == *name && (**id as usize) < config.vocab)
            .map(|(&id, t)| Bos { id: id as usize, token: t.content.clone(), source: "tokenizer special token".into() })
    })
}

/// `ids` with the BOS in front when there is one.
pub fn with_bos(bos: Option<usize>, ids: &[usize]) -> Vec<usize> {
    bos.into_iter().chain(ids.iter().copied()).collect()
}

/// Parses `3,1,4` (spaces allowed).
/// The tokenizers crate cuts a BPE merge's second token after `continuing_subword_prefix`
/// bytes and panics when the token is shorter or the cut splits a character (found by fuzzing):
/// such a merge is refused here first.
fn check_bpe_merges(json: &serde_json::Value) -> Result<()> {
    let model = &json["model"];
    let Some(prefix) = model["continuing_subword_prefix"].as_str().filter(|_| model["type"] == "BPE") else {
        return Ok(());
    };
    let merges = model["merges"].as_array().map(Vec::as_slice).unwrap_or_default();
    for (i, merge) in merges.iter().enumerate() {
        let second = match merge {
            serde_json::Value::Array(pair) => pair.get(1).and_then(|b| b.as_str()),
            serde_json::Value::String(pair) => pair.split_once(' ').map(|(_, b)| b),
            _ => None,
        };
        if let Some(b) = second
            && !b.is_char_boundary(prefix.len())
        {
            return Err(Error::Tokenizer(format!(
                "tokenizer.json's merge {i} joins {b:?}, which is too short for its continuing-subword prefix {prefix:?} ({} bytes) or splits a character there",
                prefix.len()
            )));
        }
    }
    Ok(())
}

pub fn parse_ids(text: &str) -> Result<Vec<usize>> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| Error::BadTokens(format!("{s:?} is not a token id"))))
        .collect()
}
