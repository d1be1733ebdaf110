//! Opening a model in a worker: its files as the host hands them over, or a model by link
//! fetched through the host's HTTP; the header, config, tokenizer and BOS read, after checking
//! that this worker's share of the model fits beside what it holds. Nothing large is read.

use super::held::Held;
use super::memory::{
    LINK_BYTES_PER_FILE, WORKER_BUDGET_BYTES, estimated_helper_bytes, estimated_peak_bytes, too_large,
};
use super::protocol::{LinkSource, PinnedLink, Reply, Role};
use crate::model::{ModelStream, OpenedModel, Weights};
use crate::tokens::{Tokenizer, choose_bos};
use crate::weights::remote::{Client, LinkCache, ModelLink, NoCache, Opener, Patience, Transport};
use crate::weights::{ByteSource, ModelFiles};
use crate::{Error, Result};

/// What opening a model tells the pool besides the model itself.
pub(super) struct Opening {
    pub(super) tied: bool,
    pub(super) lead_bytes: u64,
    pub(super) helper_bytes: u64,
}

/// How a worker reaches models by link: the host's HTTP (none where it cannot fetch), and
/// where the next one opened finds what was fetched before (none: a run's memory only).
pub(super) struct Fetching {
    pub(super) transport: Option<fn() -> Box<dyn Transport>>,
    pub(super) cache: Option<Box<dyn LinkCache>>,
}

/// Reads a model's files (`files`, named by `names`, or the model at `link`): header, config,
/// tokenizer and BOS, after checking that what `role` needs of it fits beside the `resident`
/// bytes the worker already holds. Nothing large is read.
pub(super) fn open(
    names: Vec<String>,
    files: Vec<Box<dyn ByteSource>>,
    link: Option<LinkSource>,
    role: Role,
    fetching: Fetching,
    resident: u64,
) -> Result<(Held, Opening)> {
    let (files, link) = match link {
        Some(source) => open_link(&source, fetching)?,
        None => {
            if names.len() != files.len() {
                return Err(Error::Worker(format!("{} file names for {} files", names.len(), files.len())));
            }
            let named: Vec<(String, Box<dyn ByteSource>)> = names.into_iter().zip(files).collect();
            (ModelFiles::from_named(named)?, None)
        }
    };
    let (config, parameters, facts, tokenizer, bos, opening) = {
        let model = ModelStream::open(&files)?;
        let tokenizer_bytes = files.tokenizer_json.as_ref().map_or(0, |t| t.len() as u64);
        let fetched_bytes = if link.is_some() { files.weights.len() as u64 * LINK_BYTES_PER_FILE } else { 0 };
        let lead_bytes = estimated_peak_bytes(&model.config, model.tied(), tokenizer_bytes) + fetched_bytes;
        let helper_bytes = estimated_helper_bytes(&model.config, model.tied(), tokenizer_bytes) + fetched_bytes;
        let need = if role == Role::Lead { lead_bytes } else { helper_bytes };
        if need + resident > WORKER_BUDGET_BYTES {
            return Err(too_large(&model.config, need, resident));
        }
        let tokenizer = Tokenizer::for_model(&model, files.tokenizer_json.as_deref())?;
        let bos = choose_bos(&model, &tokenizer);
        let opening = Opening { tied: model.tied(), lead_bytes, helper_bytes };
        (model.config.clone(), model.parameter_count, model.facts().to_vec(), tokenizer, bos, opening)
    };
    let opened = OpenedModel { files, tokenizer };
    Ok((Held { opened, link, config, grams: None, bos, parameters, facts }, opening))
}

/// A model by link: its small files fetched whole, its weights read by range as asked.
fn open_link(source: &LinkSource, fetching: Fetching) -> Result<(ModelFiles, Option<PinnedLink>)> {
    let transport =
        fetching.transport.ok_or_else(|| Error::Internal("this worker cannot fetch models by link".into()))?;
    let link = ModelLink::parse(&source.link)?;
    // The page sends no token: a gated model needs the command line.
    let client = Client::new(transport(), &source.hub, None, Patience::default());
    let client = std::sync::Arc::new(if source.offline { client.offline() } else { client });
    let cache = fetching.cache.unwrap_or_else(|| Box::new(NoCache { budget: LINK_BYTES_PER_FILE }));
    let opened = Opener::new(client, cache.as_ref(), &source.hub).open(&link)?;
    let pinned = PinnedLink { pinned: opened.pinned.to_string(), total_bytes: opened.total_bytes };
    Ok((opened.files, Some(pinned)))
}

/// What the Hub publishes about a revision by link: no file of it is read.
pub(super) fn published(source: &LinkSource, transport: Option<fn() -> Box<dyn Transport>>) -> Result<Reply> {
    let transport = transport.ok_or_else(|| Error::Internal("this worker cannot fetch models by link".into()))?;
    let ModelLink::Hub { repo, revision } = ModelLink::parse(&source.link)? else {
        return Err(Error::Invalid(format!(
            "{}: only a Hub revision (hf:ORG/NAME@REVISION) has published hashes",
            source.link
        )));
    };
    let client = Client::new(transport(), &source.hub, None, Patience::default());
    let client = std::sync::Arc::new(if source.offline { client.offline() } else { client });
    let cache = NoCache { budget: 0 };
    Ok(Reply::Published(Opener::new(client, &cache, &source.hub).published(&repo, &revision)?))
}
