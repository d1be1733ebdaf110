//! Prompt suites as plain JSON (the character-transformer case study's quote, bracket and swap
//! tests, or any a teacher writes) and the verdict table: for each prompt and one head, what the
//! query attends to most, the runner-up, and a label for why.

use serde::{Deserialize, Serialize};

use crate::analysis::HeadId;
use crate::backend::Backend;
use crate::forward::{self, HeadOutputs, Keep, Logits, Patterns};
use crate::model::Weights;
use crate::probes::induction::induction_cells;
use crate::probes::question::Question;
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
    /// On an exercise sheet: what the student answers before the page reveals it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub question: Option<Question>,
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
        for prompt in &suite.prompts {
            if let Some(question) = &prompt.question {
                question.check(&prompt.id)?;
            }
        }
        Ok(suite)
    }

    /// The suites of the character-transformer case study and the demo model's exercise sheet,
    /// shipped with the tool.
    pub fn builtin(name: &str) -> Option<Suite> {
        let text = match name {
            "quote" => include_str!("../../../../public/suites/quote.json"),
            "bracket" => include_str!("../../../../public/suites/bracket.json"),
            "swap" => include_str!("../../../../public/suites/swap.json"),
            "exercises-demo" => include_str!("../../../../public/suites/exercises-demo.json"),
            _ => return None,
        };
        Some(Suite::from_json(text).expect("built-in suites are valid"))
    }

    pub const BUILTIN: [&'static str; 4] = ["quote", "bracket", "swap", "exercises-demo"];
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

/// A key's labels: its verdict, and for a key at position 0 (always the `position-0 sink`) the
/// label it would otherwise have had, so the sink never hides a bracket or a quote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Labels {
    pub verdict: Verdict,
    pub also: Option<Verdict>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Attended {
    pub position: usize,
    pub token: String,
    pub weight: f64,
    pub verdict: Verdict,
    /// At position 0: the label that also applies besides the sink (absent when none does).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub also: Option<Verdict>,
}

impl Attended {
    /// The verdict as the tables print it, e.g. `position-0 sink (also open bracket still to close)`.
    pub fn labels(&self) -> String {
        match self.also {
            Some(also) => format!("{} (also {})", self.verdict.label(), also.label()),
            None => self.verdict.label().to_string(),
        }
    }
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
    /// The verdict of the row: the top key's (`top.also` holds its second label, if any).
    pub verdict: Verdict,
    /// The whole attention row of the query, for heatmaps.
    pub attention: Vec<f64>,
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub note: String,
    /// Set when a token up to the query merges several quote/bracket characters (BPE `("`, `")`):
    /// the quote and bracket labels then name a token that also holds another such character.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub caveat: String,
}

/// The characters the quote and bracket rules read.
const MARKS: [char; 3] = ['"', '(', ')'];

/// Quote and bracket characters of tokens 0..=query in reading order, each with its token's
/// position. A merged BPE token (`("`, `),`, `Ġ("`) contributes every such character it holds,
/// so `),` counts as `)` and `("` as `(` then `"`.
fn marks(tokens: &[String], query: usize) -> Vec<(usize, char)> {
    tokens[..=query]
        .iter()
        .enumerate()
        .flat_map(|(i, token)| token.chars().filter(|c| MARKS.contains(c)).map(move |c| (i, c)))
        .collect()
}

/// Labels key `key` for query `query`. A key at position 0 is the `position-0 sink`; otherwise the
/// first rule that applies, in the order of docs/methods.md#6-verdict-tables: induction successor
/// (the token after the query token's most recent earlier occurrence, the heatmap's induction
/// cell), matching quote, open bracket still to close, most recent bracket, other.
pub fn classify(tokens: &[String], query: usize, key: usize) -> Labels {
    let rule = rule_label(tokens, query, key);
    if key == 0 {
        Labels { verdict: Verdict::PositionZeroSink, also: Some(rule).filter(|&v| v != Verdict::Other) }
    } else {
        Labels { verdict: rule, also: None }
    }
}

fn rule_label(tokens: &[String], query: usize, key: usize) -> Verdict {
    // Equal texts, equal ids: each token as the position of its text's first occurrence.
    let ids: Vec<usize> =
        tokens[..=query].iter().map(|t| tokens.iter().position(|u| u == t).unwrap_or_default()).collect();
    let successor = induction_cells(&ids).into_iter().find(|&(t, _)| t == query).map(|(_, k)| k);
    if successor == Some(key) {
        return Verdict::InductionSuccessor;
    }
    let marks = marks(tokens, query);
    let quotes: Vec<usize> = marks.iter().filter(|m| m.1 == '"').map(|m| m.0).collect();
    let query_quotes = quotes.iter().filter(|&&p| p == query).count();
    let partner = if quotes.len() % 2 == 1 {
        // An unpaired quote is open; the query's partner unless the query itself opened it.
        quotes.last().copied().filter(|&p| p != query)
    } else if query_quotes > 0 {
        // The query's last quote closes a pair: its partner is the quote before it.
        quotes.len().checked_sub(2).map(|i| quotes[i]).filter(|&p| p != query)
    } else {
        None
    };
    if partner == Some(key) {
        return Verdict::MatchingQuote;
    }
    let mut open = Vec::new();
    for &(position, c) in &marks {
        match c {
            '(' => open.push(position),
            ')' => {
                open.pop();
            }
            _ => {}
        }
    }
    if open.contains(&key) {
        return Verdict::OpenBracket;
    }
    let latest = |bracket: char| marks.iter().rev().find(|m| m.1 == bracket).map(|m| m.0);
    if latest('(') == Some(key) || latest(')') == Some(key) {
        return Verdict::MostRecentBracket;
    }
    Verdict::Other
}

/// Names the tokens up to the query that hold more than one quote/bracket character, if any.
pub fn merged_marks_caveat(tokens: &[String], query: usize) -> String {
    let merged: Vec<String> = tokens[..=query]
        .iter()
        .enumerate()
        .filter(|(_, token)| token.chars().filter(|c| MARKS.contains(c)).count() > 1)
        .map(|(i, token)| format!("{i} `{token}`"))
        .collect();
    if merged.is_empty() {
        return String::new();
    }
    format!(
        "the prompt's tokens do not isolate its quote and bracket characters: token {} holds several; \
         they are read in order, and a quote or bracket label names the whole token",
        merged.join(", token ")
    )
}

/// One verdict row per prompt for `head`. With `bos`, every prompt runs as `BOS, tokens...`:
/// positions (the query, the keys, `tokens`) then count from the BOS, and a prompt's `query`,
/// which counts the prompt's own tokens from 0, is shifted by one to stay on the same token.
/// The forward pass runs on `backend`; a GPU that fails gives `Error::Gpu` (callers run the
/// table in [`Backend::with_fallback`]).
pub async fn verdict_table(
    model: &(impl Weights + ?Sized),
    tokenizer: &Tokenizer,
    suite: &Suite,
    head: HeadId,
    bos: Option<usize>,
    backend: &mut Backend,
) -> Result<Vec<VerdictRow>> {
    // Every prompt's ids and query first (a bad prompt is refused before anything runs), then
    // one layer-by-layer pass over all of them.
    let prepared: Vec<(Vec<usize>, usize)> = suite
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
            Ok((ids, query))
        })
        .collect::<Result<_>>()?;
    // Each pass keeps only the query's row of each pattern (and no logits), of which one head's
    // is read; a batch's outputs are dropped before the next batch runs.
    let query_rows: Vec<Vec<(usize, usize)>> =
        prepared.iter().map(|(ids, query)| (0..ids.len()).map(|k| (*query, k)).collect()).collect();
    let runs: Vec<(&[usize], Keep)> = prepared
        .iter()
        .zip(&query_rows)
        .map(|((ids, _), cells)| {
            let keep = Keep { patterns: Patterns::Cells(cells), logits: Logits::None, ..HeadOutputs::None.into() };
            (ids.as_slice(), keep)
        })
        .collect();
    let mut rows: Vec<Vec<f64>> = Vec::with_capacity(runs.len());
    for range in forward::batches(model, &runs) {
        let outputs = backend.forward(model, &runs[range.clone()], &mut |_, _| {}).await?;
        rows.extend(
            outputs
                .iter()
                .map(|output| output.pattern_cells[head.layer][head.head].iter().map(|&w| f64::from(w)).collect()),
        );
    }
    suite
        .prompts
        .iter()
        .zip(prepared)
        .zip(rows)
        .map(|((prompt, (ids, query)), attention)| {
            let tokens: Vec<String> = ids.iter().map(|&i| tokenizer.token_text(i)).collect();
            let mut order: Vec<usize> = (0..=query).collect();
            order.sort_by(|&a, &b| attention[b].total_cmp(&attention[a]));
            let attended = |k: usize| {
                let Labels { verdict, also } = classify(&tokens, query, k);
                Attended { position: k, token: tokens[k].clone(), weight: attention[k], verdict, also }
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
                caveat: merged_marks_caveat(&tokens, query),
                tokens,
                note: prompt.note.clone(),
            })
        })
        .collect()
}
