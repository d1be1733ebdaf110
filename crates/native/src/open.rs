//! A model named by a path or a link (`hf:ORG/NAME@REV`, an
//! http(s) folder), read through the local Hugging Face cache, headprint's own cache, and the
//! network, in that order.

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use headprint::Result;
use headprint::weights::ModelFiles;
use headprint::weights::remote::{
    Client, DiskCache, HUB_ENDPOINT, LinkCache, ModelLink, NoCache, Opener, Patience, Published, READ_TIMEOUT_SECONDS,
    hf_cache_root,
};
use serde_json::json;

use crate::http::UreqTransport;

/// Large files' ranges held in memory when there is no cache folder.
const MEMORY_BUDGET: u64 = 512 << 20;

/// Where the network's notes go.
pub type NoteSink = Box<dyn Fn(&str) + Send + Sync>;

/// How links are opened in this run.
#[derive(Default)]
pub struct LinkSettings {
    pub offline: bool,
    /// Where the network's notes go (a retried request, a server that fell silent): the CLI
    /// prints them above its progress bar, Python sends them to `warnings`.
    pub on_note: Option<NoteSink>,
}

static SETTINGS: OnceLock<LinkSettings> = OnceLock::new();
static CLIENT: OnceLock<Arc<Client>> = OnceLock::new();

/// Sets how links are opened; the first call of a run wins.
pub fn configure(settings: LinkSettings) {
    let _ = SETTINGS.set(settings);
}

/// One client for the run, so that two models of a comparison share the rate limits and notes.
fn client() -> Result<Arc<Client>> {
    if let Some(client) = CLIENT.get() {
        return Ok(client.clone());
    }
    let patience = Patience { read_timeout_seconds: read_timeout()?, ..Patience::default() };
    let transport = UreqTransport::new(Duration::from_secs_f64(patience.read_timeout_seconds));
    let token = std::env::var("HF_TOKEN").ok().or_else(|| std::env::var("HUGGING_FACE_HUB_TOKEN").ok());
    let client = Client::new(Box::new(transport), &hub_endpoint(), token, patience).on_note(|note| {
        match SETTINGS.get().and_then(|s| s.on_note.as_ref()) {
            Some(on_note) => on_note(note),
            None => eprintln!("note: {note}"),
        }
    });
    let env_offline =
        std::env::var("HF_HUB_OFFLINE").is_ok_and(|v| matches!(v.as_str(), "1" | "true" | "TRUE" | "yes"));
    let offline = SETTINGS.get().is_some_and(|s| s.offline) || env_offline;
    Ok(CLIENT.get_or_init(|| Arc::new(if offline { client.offline() } else { client })).clone())
}

/// How long a server may stay silent before a request is abandoned and asked again:
/// `HEADPRINT_READ_TIMEOUT` seconds, else 20.
fn read_timeout() -> Result<f64> {
    let Some(text) = std::env::var("HEADPRINT_READ_TIMEOUT").ok().filter(|t| !t.trim().is_empty()) else {
        return Ok(READ_TIMEOUT_SECONDS);
    };
    // More than an hour is most likely milliseconds meant as seconds.
    match text.trim().parse::<f64>() {
        Ok(seconds) if seconds.is_finite() && seconds > 0.0 && seconds <= 3600.0 => Ok(seconds),
        _ => Err(headprint::Error::BadSetting {
            name: "HEADPRINT_READ_TIMEOUT".into(),
            expected: "a number of seconds above 0 and at most 3600".into(),
            value: text,
        }),
    }
}

fn hub_endpoint() -> String {
    std::env::var("HF_ENDPOINT")
        .ok()
        .filter(|e| !e.is_empty())
        .unwrap_or_else(|| HUB_ENDPOINT.into())
        .trim_end_matches('/')
        .to_string()
}

/// A model's files and, when it came by link, where from.
pub struct Opened {
    pub files: ModelFiles,
    pub link: Option<LinkFacts>,
    /// How the model is named in tables: the path, or the pinned link.
    pub label: String,
}

pub struct LinkFacts {
    pub given: String,
    pub pinned: String,
    pub total_bytes: u64,
    pub local_files: usize,
    client: Arc<Client>,
    fetched_before: u64,
}

impl LinkFacts {
    /// The JSON reports' `model_link`: the link as given and as pinned, and the bytes it cost.
    pub fn json(&self) -> serde_json::Value {
        json!({
            "given": self.given,
            "pinned": self.pinned,
            "bytes_fetched": self.client.bytes_fetched() - self.fetched_before,
            "bytes_total": self.total_bytes,
            "files_from_hf_cache": self.local_files,
        })
    }
}

pub fn open(model: &str) -> Result<Opened> {
    if !ModelLink::looks_like_link(model) {
        let files = ModelFiles::from_path(Path::new(model))?;
        return Ok(Opened { files, link: None, label: model.to_string() });
    }
    let link = ModelLink::parse(model)?;
    if let ModelLink::Web { folder } = &link
        && !folder.starts_with("http://")
        && !folder.starts_with("https://")
    {
        return Err(headprint::Error::BadLink {
            link: model.into(),
            reason: "a url: link relative to a page works in the page; here give http:// or https://".into(),
        });
    }
    let client = client()?;
    let fetched_before = client.bytes_fetched();
    let disk = DiskCache::default_root().map(DiskCache::new);
    let memory = NoCache { budget: MEMORY_BUDGET };
    let cache: &dyn LinkCache = match &disk {
        Some(disk) => disk,
        None => &memory,
    };
    let opener = Opener { hf_cache: hf_cache_root(), ..Opener::new(client.clone(), cache, &hub_endpoint()) };
    let opened = opener.open(&link)?;
    let pinned = opened.pinned.to_string();
    Ok(Opened {
        files: opened.files,
        label: pinned.clone(),
        link: Some(LinkFacts {
            given: model.to_string(),
            pinned,
            total_bytes: opened.total_bytes,
            local_files: opened.local_files,
            client,
            fetched_before,
        }),
    })
}

/// What the Hub publishes about `repo` at `revision` (its commit and its weights' content
/// hashes), asked before any file of it is read; an error when offline.
pub fn published(repo: &str, revision: &str) -> Result<Published> {
    let client = client()?;
    let disk = DiskCache::default_root().map(DiskCache::new);
    let memory = NoCache { budget: 0 };
    let cache: &dyn LinkCache = match &disk {
        Some(disk) => disk,
        None => &memory,
    };
    Opener::new(client, cache, &hub_endpoint()).published(repo, revision)
}

/// Body bytes fetched so far in this run, when a link was opened.
pub fn bytes_fetched() -> Option<u64> {
    CLIENT.get().map(|client| client.bytes_fetched())
}
