//! A model named on the command line, opened with its tokenizer, and what the commands draw
//! from it: the BOS, the probe's first copies, a suite.

use headprint::model::{CopySource, ModelStream, OpenedModel};
use headprint::probes::Suite;
use headprint::probes::induction::FirstCopy;
use headprint::tokens::{Bos, parse_ids};
use headprint::{Error, Result};

use crate::commands::{BosArg, SequenceArgs};
use crate::open::{self, LinkFacts};

/// A model named on the command line: its files and tokenizer, and where it came from.
pub struct Loaded {
    pub opened: OpenedModel,
    /// Where the model came from, when it was named by a link.
    pub link: Option<LinkFacts>,
    /// How tables name the model: the path, or the pinned link.
    pub label: String,
}

/// Opens `model` (a path or a link) and its tokenizer.
pub fn load(model: &str) -> Result<Loaded> {
    let named = open::open(model)?;
    Ok(Loaded { opened: OpenedModel::open(named.files)?, link: named.link, label: named.label })
}

impl Loaded {
    /// The weights, read from the files as they are asked for.
    pub fn model(&self) -> Result<ModelStream<'_>> {
        self.opened.stream()
    }

    /// The model's BOS unless switched off; `model` is this model's `model()`.
    pub fn bos(&self, model: &ModelStream, arg: &BosArg) -> Option<Bos> {
        self.opened.bos(model, !arg.no_bos)
    }

    /// The probe's first copies: given ids (one sequence), text windows or random draws;
    /// `model` is this model's `model()`.
    pub fn first_copies(
        &self,
        model: &ModelStream,
        args: &SequenceArgs,
        given: Option<&str>,
    ) -> Result<Vec<FirstCopy>> {
        let given = given.map(parse_ids).transpose()?;
        let source = match (&given, &args.text_file) {
            (Some(ids), _) => CopySource::Given(ids),
            (None, Some(path)) => CopySource::TextFile(path),
            (None, None) => CopySource::Random,
        };
        self.opened.first_copies(model, &source, args.len, args.seed, args.sequences)
    }
}

/// A built-in suite by name, or a suite JSON file.
pub fn load_suite(name: &str) -> Result<Suite> {
    match Suite::builtin(name) {
        Some(suite) => Ok(suite),
        None => {
            let text = std::fs::read_to_string(name).map_err(|e| Error::BadSuite(format!("{name}: {e}")))?;
            Suite::from_json(&text)
        }
    }
}
