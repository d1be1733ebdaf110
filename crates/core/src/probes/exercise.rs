//! Exercise sheets: a suite whose prompts carry questions a student answers before the page
//! reveals what the model does, the answer checking and the score, and the compact form in
//! which a sheet travels in a share link.

use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use serde::{Deserialize, Serialize};

use crate::probes::Suite;
use crate::probes::suite::VerdictRow;
use crate::{Error, Result};

/// A student's answer, or the model's.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum Answer {
    Position(usize),
    YesNo(bool),
    Token(String),
}

impl Answer {
    /// The model's answer to an `attend` question: the verdict row's top key.
    pub fn attended(row: &VerdictRow) -> Answer {
        Answer::Position(row.top.position)
    }

    /// The model's answer to an `induction` question, from the head's mean induction score.
    pub fn induction(score: f64, threshold: f64) -> Answer {
        Answer::YesNo(score >= threshold)
    }

    /// The model's answer to an `ov_top` question: the first token of the row's `promotes`
    /// list (largest logit first).
    pub fn promoted(promotes: &[(String, f64)]) -> Result<Answer> {
        promotes
            .first()
            .map(|(token, _)| Answer::Token(token.clone()))
            .ok_or_else(|| Error::BadSuite("the OV row has no tokens".into()))
    }

    /// Whether `self` (the student's) matches `truth` (the model's). Tokens are compared
    /// exactly, spaces included: for a character model ` ` and `e` are different answers.
    pub fn matches(&self, truth: &Answer) -> Result<bool> {
        match (self, truth) {
            (Answer::Position(a), Answer::Position(b)) => Ok(a == b),
            (Answer::YesNo(a), Answer::YesNo(b)) => Ok(a == b),
            (Answer::Token(a), Answer::Token(b)) => Ok(a == b),
            _ => Err(Error::BadSuite(format!("answer {self:?} does not fit a question answered by {truth:?}"))),
        }
    }
}

/// The running score: `correct` of `answered`, out of `questions` on the sheet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Score {
    pub correct: usize,
    pub answered: usize,
    pub questions: usize,
}

impl Score {
    /// Tallies `outcomes`, one per answered question (`true` when right).
    pub fn tally(questions: usize, outcomes: impl IntoIterator<Item = bool>) -> Score {
        let (mut correct, mut answered) = (0, 0);
        for right in outcomes {
            answered += 1;
            correct += usize::from(right);
        }
        Score { correct, answered, questions }
    }

    pub fn summary(&self) -> String {
        format!("{} correct of {} answered ({} questions)", self.correct, self.answered, self.questions)
    }
}

/// Share links hold a sheet this long at most (characters of the encoded sheet); a longer one
/// is saved as a JSON file instead. 2000 characters keep the whole link within what every
/// browser, chat program and QR code (version 40 holds 2953 bytes) carries.
pub const LINK_LIMIT: usize = 2000;

/// The sheet as it travels in a link: its JSON, deflated (miniz_oxide, level 9), base64url
/// without padding (safe in a URL fragment as it stands).
pub fn encode_sheet(suite: &Suite) -> String {
    let json = serde_json::to_vec(suite).expect("a suite serialises");
    URL_SAFE_NO_PAD.encode(miniz_oxide::deflate::compress_to_vec(&json, 9))
}

/// The sheet's link form, or `None` when it is longer than [`LINK_LIMIT`] (then it travels as
/// its JSON file).
pub fn link_form(suite: &Suite) -> Option<String> {
    Some(encode_sheet(suite)).filter(|encoded| encoded.len() <= LINK_LIMIT)
}

/// Reads a sheet from its link form; every failure says which step failed.
pub fn decode_sheet(text: &str) -> Result<Suite> {
    let bad = |what: String| Error::BadSuite(format!("the link's exercise sheet {what}"));
    let deflated = URL_SAFE_NO_PAD.decode(text.trim()).map_err(|e| bad(format!("is not base64url: {e}")))?;
    // Bounded, so a crafted link cannot make the tab inflate gigabytes.
    let json = miniz_oxide::inflate::decompress_to_vec_with_limit(&deflated, 1 << 20)
        .map_err(|e| bad(format!("does not inflate: {e:?}")))?;
    let json = String::from_utf8(json).map_err(|_| bad("is not UTF-8".into()))?;
    Suite::from_json(&json)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::probes::question::Question;
    use crate::probes::suite::{Attended, Verdict};

    fn sheet() -> Suite {
        Suite::from_json(
            r#"{"name": "sheet", "prompts": [
                {"id": "Q1", "text": "abc abc", "question": {"kind": "attend", "head": "L2H0"}},
                {"id": "Q2", "text": "ab", "question": {"kind": "induction", "head": "l1h0"}},
                {"id": "Q3", "text": "ab", "question": {"kind": "ov_top", "head": "L0H1", "after": "e"}},
                {"id": "Q4", "text": "plain prompt"}
            ]}"#,
        )
        .unwrap()
    }

    #[test]
    fn questions_parse_and_plain_suites_still_do() {
        let suite = sheet();
        assert_eq!(suite.prompts[0].question, Some(Question::Attend { head: "L2H0".into() }));
        assert_eq!(suite.prompts[2].question, Some(Question::OvTop { head: "L0H1".into(), after: "e".into() }));
        assert_eq!(suite.prompts[3].question, None);
        // The built-in suites have no questions and are unchanged by the new field.
        let quote = Suite::builtin("quote").unwrap();
        assert!(quote.prompts.iter().all(|p| p.question.is_none()));
        assert!(!serde_json::to_string(&quote).unwrap().contains("question"));
    }

    #[test]
    fn malformed_questions_are_refused_with_the_prompt_named() {
        let unknown_kind =
            r#"{"name": "s", "prompts": [{"id": "A", "text": "x", "question": {"kind": "guess", "head": "L0H0"}}]}"#;
        assert!(Suite::from_json(unknown_kind).unwrap_err().to_string().contains("guess"));
        let bad_head =
            r#"{"name": "s", "prompts": [{"id": "A", "text": "x", "question": {"kind": "attend", "head": "head 3"}}]}"#;
        let message = Suite::from_json(bad_head).unwrap_err().to_string();
        assert!(message.contains("prompt A") && message.contains("head 3"), "{message}");
        let empty_after = r#"{"name": "s", "prompts": [{"id": "B", "text": "x", "question": {"kind": "ov_top", "head": "L0H0", "after": ""}}]}"#;
        assert!(Suite::from_json(empty_after).unwrap_err().to_string().contains("prompt B"));
    }

    #[test]
    fn answers_are_checked_against_the_models() {
        let attended =
            |position| Attended { position, token: "a".into(), weight: 0.5, verdict: Verdict::Other, also: None };
        let row = VerdictRow {
            id: "Q1".into(),
            text: "abc abc".into(),
            tokens: vec![],
            query_position: 6,
            query_token: "c".into(),
            top: attended(3),
            runner_up: Some(attended(0)),
            verdict: Verdict::Other,
            attention: vec![],
            note: String::new(),
            caveat: String::new(),
        };
        let truth = Answer::attended(&row);
        assert!(Answer::Position(3).matches(&truth).unwrap());
        assert!(!Answer::Position(0).matches(&truth).unwrap());
        // The threshold is inclusive, as the probe's induction-head list is.
        assert_eq!(Answer::induction(0.4, 0.4), Answer::YesNo(true));
        assert_eq!(Answer::induction(0.39, 0.4), Answer::YesNo(false));
        assert!(!Answer::YesNo(false).matches(&Answer::induction(0.9, 0.4)).unwrap());
        let promoted = Answer::promoted(&[("e".into(), 3.0), (" ".into(), 2.0)]).unwrap();
        assert!(Answer::Token("e".into()).matches(&promoted).unwrap());
        assert!(!Answer::Token(" e".into()).matches(&promoted).unwrap());
        assert!(Answer::promoted(&[]).is_err());
        assert!(Answer::YesNo(true).matches(&truth).is_err());
    }

    #[test]
    fn the_score_counts_right_answers_of_those_given() {
        let score = Score::tally(4, [true, false, true]);
        assert_eq!(score, Score { correct: 2, answered: 3, questions: 4 });
        assert_eq!(score.summary(), "2 correct of 3 answered (4 questions)");
        assert_eq!(Score::tally(2, []), Score { correct: 0, answered: 0, questions: 2 });
    }

    #[test]
    fn a_sheet_survives_its_link_form() {
        let suite = sheet();
        let encoded = encode_sheet(&suite);
        assert!(encoded.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_'), "{encoded}");
        assert_eq!(decode_sheet(&encoded).unwrap(), suite);
        // Deflate pays off on a real sheet: the shipped demo sheet fits a link.
        let demo = Suite::builtin("exercises-demo").unwrap();
        let json = serde_json::to_string(&demo).unwrap();
        let encoded = encode_sheet(&demo);
        assert!(encoded.len() < json.len() && encoded.len() <= LINK_LIMIT, "{} vs {}", encoded.len(), json.len());
        assert_eq!(decode_sheet(&encoded).unwrap(), demo);
    }

    #[test]
    fn a_sheet_too_long_for_a_link_has_no_link_form() {
        let mut suite = sheet();
        assert!(link_form(&suite).is_some());
        // Text that deflate cannot shrink much: a deterministic pseudo-random alphabet soup.
        let mut state = 7u64;
        let mut noise = String::new();
        while noise.len() < 4 * LINK_LIMIT {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            noise.push(char::from(b'a' + (state >> 59) as u8 % 26));
        }
        suite.prompts[3].text = noise;
        assert!(encode_sheet(&suite).len() > LINK_LIMIT);
        assert_eq!(link_form(&suite), None);
    }

    #[test]
    fn broken_link_sheets_say_what_is_wrong() {
        assert!(decode_sheet("not base64!").unwrap_err().to_string().contains("base64url"));
        assert!(decode_sheet("AAAA").unwrap_err().to_string().contains("inflate"));
        // Valid deflate of something that is not a suite.
        let junk = URL_SAFE_NO_PAD.encode(miniz_oxide::deflate::compress_to_vec(b"{\"name\": 3}", 9));
        assert!(decode_sheet(&junk).is_err());
    }
}
