//! Text <-> token ids: characters from the file's `vocab` metadata, `tokenizer.json` through
//! the `tokenizers` crate, or bare ids when a model has neither. Ids are accepted everywhere
//! text is.

use crate::model::Model;
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
    pub fn for_model(model: &Model, tokenizer_json: Option<&[u8]>) -> Result<Self> {
        if let Some(bytes) = tokenizer_json {
            let tokenizer = tokenizers::Tokenizer::from_bytes(bytes).map_err(|e| Error::Tokenizer(e.to_string()))?;
            return Ok(Tokenizer::Hugging(Box::new(tokenizer)));
        }
        Ok(match &model.vocab_strings {
            Some(chars) => Tokenizer::Chars(chars.clone()),
            None => Tokenizer::IdsOnly { vocab: model.config.vocab },
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
            Tokenizer::IdsOnly { .. } => Err(Error::BadTokens(
                "this model has no vocabulary (no tokenizer.json, no `vocab` metadata): give token ids, e.g. 3,1,4"
                    .into(),
            )),
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
}

/// Parses `3,1,4` (spaces allowed).
pub fn parse_ids(text: &str) -> Result<Vec<usize>> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<usize>().map_err(|_| Error::BadTokens(format!("{s:?} is not a token id"))))
        .collect()
}
