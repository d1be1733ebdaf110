//! Prompt suites as plain JSON (seed 003's quote, bracket and swap tests, or any a teacher
//! writes) and the verdict table: for each prompt and one head, what the query attends to
//! most, the runner-up, and a label for why.

use serde::{Deserialize, Serialize};

use crate::analysis::HeadId;
use crate::forward;
use crate::model::Model;
use crate::tokens::{Tokenizer, with_bos};
use crate::{Error, Result};

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Prompt {
    pub id: String,
    pub text: String,
    /// Query position; the last token when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub query: Option<usize>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Suite {
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// The head the suite was written for, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub head: Option<String>,
    pub prompts: Vec<Prompt>,
    /// Swap suites: prompt ids shown side by side.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pairs: Vec<(String, String)>,
}

impl Suite {
    pub fn from_json(text: &str) -> Result<Suite> {
        let suite: Suite = serde_json::from_str(text).map_err(|e| Error::BadSuite(e.to_string()))?;
        if suite.prompts.is_empty() {
            return Err(Error::BadSuite(format!("suite `{}` has no prompts", suite.name)));
        }
        for (a, b) in &suite.pairs {
            for id in [a, b] {
                if !suite.prompts.iter().any(|p| &p.id == id) {
                    return Err(Error::BadSuite(format!("pair names prompt `{id}`, which the suite does not have")));
                }
            }
        }
        Ok(suite)
    }

    /// The suites of seed 003, shipped with the tool.
    pub fn builtin(name: &str) -> Option<Suite> {
        let text = match name {
            "quote" => include_str!("../../public/suites/quote.json"),
            "bracket" => include_str!("../../public/suites/bracket.json"),
            "swap" => include_str!("../../public/suites/swap.json"),
            _ => return None,
        };
        Some(Suite::from_json(text).expect("built-in suites are valid"))
    }

    pub const BUILTIN: [&'static str; 3] = ["quote", "bracket", "swap"];
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Verdict {
    #[serde(rename = "induction successor")]
    InductionSuccessor,
    #[serde(rename = "matching quote")]
    MatchingQuote,
    #[serde(rename = "open bracket still to close")]
    OpenBracket,
    #[serde(rename = "most recent bracket")]
    MostRecentBracket,
    #[serde(rename = "position-0 sink")]
    PositionZeroSink,
    #[serde(rename = "other")]
    Other,
}

impl Verdict {
    pub fn label(self) -> &'static str {
        match self {
            Verdict::InductionSuccessor => "induction successor",
            Verdict::MatchingQuote => "matching quote",
            Verdict::OpenBracket => "open bracket still to close",
            Verdict::MostRecentBracket => "most recent bracket",
            Verdict::PositionZeroSink => "position-0 sink",
            Verdict::Other => "other",
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attended {
    pub position: usize,
    pub token: String,
    pub weight: f64,
    pub verdict: Verdict,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct VerdictRow {
    pub id: String,
    pub text: String,
    pub tokens: Vec<String>,
    pub query_position: usize,
    pub query_token: String,
    pub top: Attended,
    pub runner_up: Option<Attended>,
    /// The verdict of the row: the top key's.
    pub verdict: Verdict,
    /// The whole attention row of the query, for heatmaps.
    pub attention: Vec<f64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
}

/// Labels key `key` for query `query` (first matching rule wins, in the spec's order).
pub fn classify(tokens: &[String], query: usize, key: usize) -> Verdict {
    let is = |i: usize, s: &str| tokens[i].trim_start_matches(['Ġ', '▁', ' ']) == s;
    if key >= 1 && key - 1 < query && tokens[key - 1] == tokens[query] {
        return Verdict::InductionSuccessor;
    }
    let quotes: Vec<usize> = (0..=query).filter(|&i| is(i, "\"")).collect();
    let quote_partner = if is(query, "\"") && quotes.len().is_multiple_of(2) {
        quotes.len().checked_sub(2).map(|i| quotes[i])
    } else if !quotes.len().is_multiple_of(2) {
        quotes.last().copied().filter(|&p| p != query)
    } else {
        None
    };
    if quote_partner == Some(key) {
        return Verdict::MatchingQuote;
    }
    let mut open = Vec::new();
    for i in 0..=query {
        if is(i, "(") {
            open.push(i);
        } else if is(i, ")") {
            open.pop();
        }
    }
    if open.contains(&key) {
        return Verdict::OpenBracket;
    }
    let latest = |s: &str| (0..=query).rev().find(|&i| is(i, s));
    if latest("(") == Some(key) || latest(")") == Some(key) {
        return Verdict::MostRecentBracket;
    }
    if key == 0 {
        return Verdict::PositionZeroSink;
    }
    Verdict::Other
}

/// One verdict row per prompt for `head`. With `bos`, every prompt runs as `BOS, tokens...`:
/// positions (the query, the keys, `tokens`) then count from the BOS, and a prompt's `query`,
/// which counts the prompt's own tokens from 0, is shifted by one to stay on the same token.
pub fn verdict_table(
    model: &Model,
    tokenizer: &Tokenizer,
    suite: &Suite,
    head: HeadId,
    bos: Option<usize>,
) -> Result<Vec<VerdictRow>> {
    suite
        .prompts
        .iter()
        .map(|prompt| {
            let prompt_ids =
                tokenizer.encode(&prompt.text).map_err(|e| Error::BadSuite(format!("prompt {}: {e}", prompt.id)))?;
            if let Some(query) = prompt.query.filter(|&q| q >= prompt_ids.len()) {
                return Err(Error::BadSuite(format!(
                    "prompt {}: query position {query} is past its {} tokens",
                    prompt.id,
                    prompt_ids.len()
                )));
            }
            let ids = with_bos(bos, &prompt_ids);
            let offset = ids.len() - prompt_ids.len();
            let query = prompt.query.map_or(ids.len().saturating_sub(1), |q| q + offset);
            let output = forward::run(model, &ids)?;
            let pattern = &output.patterns[head.layer][head.head];
            let attention: Vec<f64> = (0..ids.len()).map(|k| pattern[(query, k)] as f64).collect();
            let tokens: Vec<String> = ids.iter().map(|&i| tokenizer.token_text(i)).collect();
            let mut order: Vec<usize> = (0..=query).collect();
            order.sort_by(|&a, &b| attention[b].total_cmp(&attention[a]));
            let attended = |k: usize| Attended {
                position: k,
                token: tokens[k].clone(),
                weight: attention[k],
                verdict: classify(&tokens, query, k),
            };
            let top = attended(order[0]);
            Ok(VerdictRow {
                id: prompt.id.clone(),
                text: prompt.text.clone(),
                query_position: query,
                query_token: tokens[query].clone(),
                verdict: top.verdict,
                top,
                runner_up: order.get(1).map(|&k| attended(k)),
                attention,
                tokens,
                note: prompt.note.clone(),
            })
        })
        .collect()
}
