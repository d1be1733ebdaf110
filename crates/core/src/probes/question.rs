//! A prompt's question on an exercise sheet: what it asks, about which head, and whether it is
//! well formed. A leaf: the suite that carries questions and the sheet that scores them both
//! build on it.

use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A prompt's question, about one head (`L{layer}H{head}`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Question {
    /// Which key does `head` attend to most from the prompt's query? Answered with a position
    /// (counted as the verdict table counts, from the BOS when one is prepended).
    Attend { head: String },
    /// Is `head` an induction head (mean induction score at or above the threshold)? Yes or no.
    Induction { head: String },
    /// Which token does `head`'s OV circuit promote most when it attends `after`? A token.
    OvTop { head: String, after: String },
}

impl Question {
    pub fn head(&self) -> &str {
        match self {
            Question::Attend { head } | Question::Induction { head } | Question::OvTop { head, .. } => head,
        }
    }

    /// The question as the sheet asks it.
    pub fn text(&self) -> String {
        match self {
            Question::Attend { head } => format!("Which key will {head} attend to most from the query?"),
            Question::Induction { head } => format!("Is {head} an induction head?"),
            Question::OvTop { head, after } => {
                format!("Which token does the OV circuit of {head} promote most after attending `{after}`?")
            }
        }
    }

    /// Whether the question can be asked: its head is written `L<layer>H<head>` and an OV
    /// question names the token attended. `prompt` is the id of the prompt that carries it.
    /// Whether the head exists is checked against the model when the question is answered.
    pub fn check(&self, prompt: &str) -> Result<()> {
        let head = self.head().to_ascii_uppercase();
        let well_formed = head
            .strip_prefix('L')
            .and_then(|rest| rest.split_once('H'))
            .is_some_and(|(l, h)| l.parse::<usize>().is_ok() && h.parse::<usize>().is_ok());
        if !well_formed {
            return Err(Error::BadSuite(format!(
                "prompt {prompt}: the question's head `{}` is not written L<layer>H<head>",
                self.head()
            )));
        }
        if let Question::OvTop { after, .. } = self
            && after.is_empty()
        {
            return Err(Error::BadSuite(format!("prompt {prompt}: the OV question's `after` token is empty")));
        }
        Ok(())
    }
}
