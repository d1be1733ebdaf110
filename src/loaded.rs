//! A model named on the command line, opened with its tokenizer, and what the commands draw
//! from it: the BOS, the probe's first copies, a suite.

use headprint::model::ModelStream;
use headprint::probes::Suite;
use headprint::probes::induction::{FirstCopy, RepeatSource, random_first_copies, text_window_first_copies};
use headprint::tokens::{Bos, Tokenizer, choose_bos, parse_ids};
use headprint::weights::ModelFiles;
use headprint::{Error, Result};

use crate::commands::{BosArg, SequenceArgs};
use crate::open::{self, LinkFacts};

/// A model's files and tokenizer: its weights are read a layer at a time when a command
/// needs them (`model()`), never held whole.
pub struct Loaded {
    pub files: ModelFiles,
    pub tokenizer: Tokenizer,
    /// Where the model came from, when it was named by a link.
    pub link: Option<LinkFacts>,
    /// How tables name the model: the path, or the pinned link.
    pub label: String,
}

/// Opens `model` (a path or a link) and its tokenizer.
pub fn load(model: &str) -> Result<Loaded> {
    let opened = open::open(model)?;
    let files = opened.files;
    let tokenizer = Tokenizer::for_model(&ModelStream::open(&files)?, files.tokenizer_json.as_deref())?;
    Ok(Loaded { files, tokenizer, link: opened.link, label: opened.label })
}

impl Loaded {
    /// The weights, read from the files as they are asked for.
    pub fn model(&self) -> Result<ModelStream<'_>> {
        ModelStream::open(&self.files)
    }

    /// The model's BOS unless switched off.
    pub fn bos(&self, arg: &BosArg) -> Result<Option<Bos>> {
        Ok(if arg.no_bos { None } else { choose_bos(&self.model()?, &self.tokenizer) })
    }

    /// The probe's first copies: given ids (one sequence), text windows or random draws.
    pub fn first_copies(&self, args: &SequenceArgs, given: Option<&str>) -> Result<Vec<FirstCopy>> {
        match (given, &args.text_file) {
            (Some(ids), _) => Ok(vec![FirstCopy { tokens: parse_ids(ids)?, source: RepeatSource::Given }]),
            (None, Some(path)) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| Error::File { path: path.display().to_string(), reason: e.to_string() })?;
                text_window_first_copies(&self.tokenizer.encode(&text)?, args.len, args.seed, args.sequences)
            }
            (None, None) => {
                random_first_copies(&self.tokenizer.ordinary_ids(&self.model()?), args.len, args.seed, args.sequences)
            }
        }
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
