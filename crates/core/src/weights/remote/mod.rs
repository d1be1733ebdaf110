//! Models by link: a Hub repository at a revision, or a web folder in the Hub's layout, opened
//! as the same `ModelFiles` a local folder gives. Small files are fetched whole; large ones are
//! read by byte range as the analysis asks (`RemoteFile`), kept in a cache so nothing is fetched
//! twice, and pinned (to the commit, or to the ETag and size) so that two versions never mix.
//!
//! The HTTP itself is the host's (`Transport`): the core knows no network library and no browser.

mod file;
mod http;
mod link;
mod store;

use std::sync::Arc;

pub use file::{LONGEST_REQUEST, MERGE_GAP, RemoteFile};
pub use http::{Client, Followed, Patience, READ_TIMEOUT_SECONDS, Response, Transport, is_stall};
pub use link::{DEFAULT_REVISION, HUB_ENDPOINT, ModelLink};
#[cfg(not(target_arch = "wasm32"))]
pub use store::DiskCache;
pub use store::{FileFacts, FileKey, LinkCache, MemoryRanges, NoCache, RangeStore, gaps};

use super::{ByteSource, ModelFiles};
use crate::{Error, Result};
pub(crate) use store::short_hash;

/// The first request to a large file asks for its 8-byte header length (and learns its size,
/// version and CDN address); the header is the next request, and then only the tensors read.
pub const FIRST_BYTES: u64 = 8;

/// The largest small file (config.json, tokenizer.json, an index) read whole.
const SMALL_FILE_LIMIT: u64 = 128 << 20;

/// The most held in memory of a web file whose server names no version.
const UNVERSIONED_BYTES: u64 = 256 << 20;

/// A large file's version as the cache names it: its ETag (or date) with its size.
fn version(facts: &FileFacts) -> Option<String> {
    facts.etag.as_ref().map(|etag| format!("{etag} {}", facts.size))
}

/// A model opened by link.
pub struct OpenedLink {
    pub files: ModelFiles,
    /// The link as it will read the same bytes forever: a Hub link names the commit.
    pub pinned: ModelLink,
    /// The sizes of all the model's files added up, fetched or not.
    pub total_bytes: u64,
    /// Files read from the local Hugging Face cache instead of the network.
    pub local_files: usize,
}

/// A Hub revision as its API describes it, before any of its files is read.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Published {
    pub commit: String,
    /// The safetensors files the model is read from, by name, with the content hash the Hub
    /// publishes for each (None for a file it gives none for).
    pub weights: Vec<(String, Option<String>)>,
}

impl Published {
    /// One hash for all the weights: two revisions have the same one exactly when every weights
    /// file's published hash is the same. None when a file has no published hash, or there are
    /// no weights files.
    pub fn weights_sha256(&self) -> Option<String> {
        match &self.weights[..] {
            [] => None,
            [(_, hash)] => hash.clone(),
            files => {
                use sha2::{Digest, Sha256};
                let mut hasher = Sha256::new();
                for (name, hash) in files {
                    hasher.update(format!("{name}={};", hash.as_deref()?).as_bytes());
                }
                Some(hasher.finalize().iter().map(|b| format!("{b:02x}")).collect())
            }
        }
    }
}

/// What the files of a model add up to.
#[derive(Default)]
struct Tally {
    total_bytes: u64,
    local_files: usize,
}

/// A small file's answer.
struct Whole {
    commit: Option<String>,
    bytes: Option<Vec<u8>>,
    /// What a `404` said was missing.
    missing: Option<Error>,
}

/// Opens links through one client and one cache.
pub struct Opener<'a> {
    pub client: Arc<Client>,
    pub cache: &'a dyn LinkCache,
    /// The Hub's address (`HF_ENDPOINT`), without a trailing slash.
    pub hub_endpoint: String,
    /// The local Hugging Face cache (`$HF_HUB_CACHE`), searched before the network.
    #[cfg(not(target_arch = "wasm32"))]
    pub hf_cache: Option<std::path::PathBuf>,
}

/// One version of a model: where its files are and how the cache names them.
struct Place<'a> {
    link: &'a ModelLink,
    /// The Hub's commit; None for a web folder.
    commit: Option<String>,
    /// A snapshot folder of the local Hugging Face cache holding some of the files.
    #[cfg(not(target_arch = "wasm32"))]
    local: Option<std::path::PathBuf>,
}

impl<'a> Opener<'a> {
    /// An opener that asks the network, through `client`, for what `cache` lacks.
    pub fn new(client: Arc<Client>, cache: &'a dyn LinkCache, hub_endpoint: &str) -> Self {
        Self {
            client,
            cache,
            hub_endpoint: hub_endpoint.trim_end_matches('/').to_string(),
            #[cfg(not(target_arch = "wasm32"))]
            hf_cache: None,
        }
    }

    pub fn open(&self, link: &ModelLink) -> Result<OpenedLink> {
        let mut place = Place {
            link,
            commit: None,
            #[cfg(not(target_arch = "wasm32"))]
            local: None,
        };
        let mut config_json = None;
        if let ModelLink::Hub { repo, revision } = link {
            #[cfg(not(target_arch = "wasm32"))]
            if let Some((commit, folder)) = self.hf_cache.as_deref().and_then(|root| hf_snapshot(root, repo, revision))
            {
                place.commit = Some(commit);
                place.local = Some(folder);
            }
            if place.commit.is_none() {
                if ModelLink::is_commit(revision) {
                    place.commit = Some(revision.clone());
                } else if let Some(commit) = self.cache.commit_of(repo, revision).filter(|_| self.client.is_offline()) {
                    place.commit = Some(commit);
                } else {
                    // The revision resolves to a commit once: config.json's answer names it.
                    let (commit, bytes) = self.resolve(repo, revision)?;
                    self.cache.keep_commit(repo, revision, &commit);
                    place.commit = Some(commit);
                    if let Some(bytes) = &bytes {
                        self.cache.keep_whole_file(&self.key(&place, "config.json", None), bytes);
                    }
                    config_json = bytes;
                }
            }
        }
        let mut tally = Tally::default();
        let text = |path: &str, bytes: Option<Vec<u8>>| -> Result<Option<String>> {
            bytes.map(|b| String::from_utf8(b).map_err(|_| Error::NotText { file: path.to_string() })).transpose()
        };
        let config_json = match config_json {
            Some(bytes) => {
                tally.total_bytes += bytes.len() as u64;
                Some(bytes)
            }
            None => self.small(&place, "config.json", &mut tally)?,
        };
        let config_json = text("config.json", config_json)?;
        if config_json.is_none() && matches!(link, ModelLink::Hub { .. }) {
            return Err(Error::NotFound { what: format!("{link}: config.json"), detail: String::new() });
        }
        let tokenizer_json = self.small(&place, "tokenizer.json", &mut tally)?;
        let mut weights: Vec<Box<dyn ByteSource>> = Vec::new();
        let mut index_json = None;
        match self.large(&place, "model.safetensors", &mut tally)? {
            Some(file) => weights.push(file),
            None => {
                let index = self.small(&place, "model.safetensors.index.json", &mut tally)?;
                let Some(index) = text("model.safetensors.index.json", index)? else {
                    return Err(Error::NotFound {
                        what: format!("{link}: model.safetensors"),
                        detail: " (nor model.safetensors.index.json: headprint reads safetensors weights only)".into(),
                    });
                };
                for shard in crate::weights::store::shards_named_by_index(&index)? {
                    if shard.contains("..") || shard.starts_with('/') {
                        return Err(Error::ShardOutsideModel { shard });
                    }
                    match self.large(&place, &shard, &mut tally)? {
                        Some(file) => weights.push(file),
                        None => {
                            return Err(Error::NotFound {
                                what: format!("{link}: {shard}"),
                                detail: " (a shard the index names)".into(),
                            });
                        }
                    }
                }
                index_json = Some(index);
            }
        }
        Ok(OpenedLink {
            files: ModelFiles { config_json, tokenizer_json, index_json, weights },
            pinned: link.pinned(place.commit.as_deref()),
            total_bytes: tally.total_bytes,
            local_files: tally.local_files,
        })
    }

    /// A Hub revision's commit, from `X-Repo-Commit` on config.json's answer, with the bytes.
    fn resolve(&self, repo: &str, revision: &str) -> Result<(String, Option<Vec<u8>>)> {
        let what = format!("hf:{repo}@{revision}");
        let url = format!("{}/{repo}/resolve/{revision}/config.json", self.hub_endpoint);
        let whole = self.whole(&url, &what)?;
        if let Some(missing) = whole.missing.filter(|_| whole.commit.is_none()) {
            return Err(missing);
        }
        match whole.commit.filter(|c| ModelLink::is_commit(c)) {
            Some(commit) => Ok((commit, whole.bytes)),
            // A browser follows redirects itself and may not see `X-Repo-Commit`: the Hub's
            // API names the commit too. The bytes came from the branch, which may have moved
            // since: config.json is read again at the commit.
            None => Ok((self.commit_from_api(repo, revision, &what)?, None)),
        }
    }

    /// What the Hub publishes about a revision before any of its files is read: the commit and
    /// each safetensors file's content hash (its LFS sha256), from one answer of its API
    /// (`/api/models/ORG/NAME/revision/REVISION?blobs=true`). No weight byte is fetched.
    /// Offline, the cache's record of the revision's commit stands in (with no hashes).
    pub fn published(&self, repo: &str, revision: &str) -> Result<Published> {
        let what = format!("hf:{repo}@{revision}");
        if self.client.is_offline() {
            let commit = ModelLink::is_commit(revision).then(|| revision.to_string());
            let commit = commit.or_else(|| self.cache.commit_of(repo, revision));
            return commit.map(|commit| Published { commit, weights: Vec::new() }).ok_or(Error::Offline { what });
        }
        let url = format!("{}/api/models/{repo}/revision/{revision}?blobs=true", self.hub_endpoint);
        let whole = self.whole(&url, &what)?;
        if let Some(missing) = whole.missing {
            return Err(missing);
        }
        let answer: serde_json::Value = serde_json::from_slice(&whole.bytes.unwrap_or_default()).unwrap_or_default();
        let commit = answer["sha"].as_str().filter(|c| ModelLink::is_commit(c)).ok_or_else(|| Error::Network {
            what: what.clone(),
            reason: "the Hub's API did not say which commit the revision is (no sha)".into(),
        })?;
        self.cache.keep_commit(repo, revision, commit);
        let mut weights = Vec::new();
        for sibling in answer["siblings"].as_array().into_iter().flatten() {
            let Some(name) = sibling["rfilename"].as_str().filter(|n| n.ends_with(".safetensors") && !n.contains('/'))
            else {
                continue;
            };
            // The model-info API names it `sha256`, the tree API `oid`; both are the file's sha256.
            let lfs = &sibling["lfs"];
            let hash = lfs["sha256"].as_str().or_else(|| lfs["oid"].as_str()).map(|h| h.trim_start_matches("sha256:"));
            weights.push((name.to_string(), hash.map(str::to_string)));
        }
        // The opener reads model.safetensors alone when there is one (see `open`).
        if weights.iter().any(|(name, _)| name == "model.safetensors") {
            weights.retain(|(name, _)| name == "model.safetensors");
        }
        weights.sort();
        Ok(Published { commit: commit.to_string(), weights })
    }

    /// The commit of `revision` from `/api/models/ORG/NAME/revision/REVISION` (`sha`).
    fn commit_from_api(&self, repo: &str, revision: &str, what: &str) -> Result<String> {
        let url = format!("{}/api/models/{repo}/revision/{revision}", self.hub_endpoint);
        let bytes = self.whole(&url, what)?.bytes.unwrap_or_default();
        let answer: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        answer["sha"].as_str().filter(|c| ModelLink::is_commit(c)).map(str::to_string).ok_or_else(|| Error::Network {
            what: what.into(),
            reason: "the server did not say which commit the revision is (no X-Repo-Commit, no sha from its API)"
                .into(),
        })
    }

    /// A small file whole (None for a `404`), asked again from its start when the connection
    /// drops or stalls (small files are not worth resuming by range).
    fn whole(&self, url: &str, what: &str) -> Result<Whole> {
        let mut cuts = 0;
        loop {
            let mut followed = self.client.get(url, None, what, &[404])?;
            let commit = followed.hub_header("x-repo-commit").map(str::to_string);
            if followed.response.status == 404 {
                let missing = Some(http::not_found(&followed.response, what));
                return Ok(Whole { commit, bytes: None, missing });
            }
            let length = followed.response.header("content-length").and_then(|l| l.trim().parse::<u64>().ok());
            if length.is_some_and(|l| l > SMALL_FILE_LIMIT) {
                return Err(Error::SmallFileTooLarge { file: what.to_string(), limit: SMALL_FILE_LIMIT });
            }
            let read =
                http::read_all(&mut followed.response, &self.client, SMALL_FILE_LIMIT).and_then(|bytes| match length {
                    Some(length) if length != bytes.len() as u64 => {
                        Err(http::Cut::ended(format!("the body ended at byte {} of {length}", bytes.len())))
                    }
                    _ => Ok(bytes),
                });
            match read {
                Ok(bytes) => return Ok(Whole { commit, bytes: Some(bytes), missing: None }),
                Err(cut) => {
                    cuts += 1;
                    let verb = if cut.stalled { "stalled" } else { "dropped" };
                    if cuts > self.client.patience().retries {
                        let reason = format!("the connection {verb} {cuts} times ({})", cut.reason);
                        return Err(Error::Network { what: what.into(), reason });
                    }
                    if cut.stalled {
                        self.client.note_once(&format!(
                            "the connection stalled ({}) reading {what}; asked for it again",
                            cut.reason
                        ));
                    }
                    self.client.wait(self.client.backoff(cuts));
                }
            }
        }
    }

    fn address(&self, place: &Place, path: &str) -> String {
        match (place.link, &place.commit) {
            (ModelLink::Hub { repo, .. }, Some(commit)) => {
                format!("{}/{repo}/resolve/{commit}/{path}", self.hub_endpoint)
            }
            (ModelLink::Hub { repo, revision }, None) => {
                format!("{}/{repo}/resolve/{revision}/{path}", self.hub_endpoint)
            }
            (ModelLink::Web { folder }, _) => format!("{folder}{path}"),
        }
    }

    /// The cache's name for a file: by commit on the Hub; a web folder's files by their ETag
    /// (`version`), or as `latest` for small files.
    fn key(&self, place: &Place, path: &str, version: Option<&str>) -> FileKey {
        let prefix = place.link.store_prefix();
        let scope = match (place.link, &place.commit) {
            (ModelLink::Hub { .. }, Some(commit)) => format!("{prefix}{commit}"),
            _ => format!("{prefix}{}", version.map_or("latest".into(), short_hash)),
        };
        FileKey { scope, path: path.to_string() }
    }

    /// Where a large file's ranges are kept: the cache, by commit or by version and size; a web
    /// file with no version at all (no ETag, no Last-Modified) only in memory for this run, as
    /// nothing would tell its next version from this one.
    fn ranges(&self, place: &Place, path: &str, facts: &FileFacts) -> Box<dyn RangeStore> {
        match (place.commit.is_some(), version(facts)) {
            (false, None) => Box::new(MemoryRanges::new(UNVERSIONED_BYTES)),
            (_, version) => self.cache.ranges(&self.key(place, path, version.as_deref())),
        }
    }

    #[cfg(not(target_arch = "wasm32"))]
    fn local(&self, place: &Place, path: &str) -> Option<std::path::PathBuf> {
        place.local.as_ref().map(|folder| folder.join(path)).filter(|p| p.is_file())
    }

    /// A small file, whole; None when the server says it does not exist.
    fn small(&self, place: &Place, path: &str, tally: &mut Tally) -> Result<Option<Vec<u8>>> {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(file) = self.local(place, path) {
            let bytes = std::fs::read(&file)
                .map_err(|e| Error::File { path: file.display().to_string(), reason: e.to_string() })?;
            tally.total_bytes += bytes.len() as u64;
            tally.local_files += 1;
            return Ok(Some(bytes));
        }
        let key = self.key(place, path, None);
        // A web folder's small files can change under their names: fetched each time online.
        let pinned = place.commit.is_some();
        if pinned || self.client.is_offline() {
            if let Some(bytes) = self.cache.whole_file(&key) {
                tally.total_bytes += bytes.len() as u64;
                return Ok(Some(bytes));
            }
            if self.cache.known_absent(&key) {
                return Ok(None);
            }
        }
        let what = format!("{}: {path}", place.link);
        let Some(bytes) = self.whole(&self.address(place, path), &what)?.bytes else {
            self.cache.keep_absent(&key);
            return Ok(None);
        };
        self.cache.keep_whole_file(&key, &bytes);
        tally.total_bytes += bytes.len() as u64;
        Ok(Some(bytes))
    }

    /// A large file read by range; None when the server says it does not exist.
    fn large(&self, place: &Place, path: &str, tally: &mut Tally) -> Result<Option<Box<dyn ByteSource>>> {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(file) = self.local(place, path) {
            let source = crate::weights::FileSource::open(&file)?;
            tally.total_bytes += source.len();
            tally.local_files += 1;
            return Ok(Some(Box::new(source)));
        }
        let name = format!("{}/{path}", place.link);
        let address = self.address(place, path);
        let remembered = match (place.link, place.commit.is_some(), self.client.is_offline()) {
            (_, true, _) => self.cache.facts(&self.key(place, path, None)),
            (ModelLink::Web { folder }, false, true) => self.cache.latest(folder, path),
            _ => None,
        };
        if let Some(facts) = remembered {
            tally.total_bytes += facts.size;
            let store = self.ranges(place, path, &facts);
            return Ok(Some(Box::new(RemoteFile::new(name, address, facts, self.client.clone(), store))));
        }
        if place.commit.is_some() && self.cache.known_absent(&self.key(place, path, None)) {
            return Ok(None);
        }
        if self.client.is_offline() {
            return Err(Error::Offline { what: name });
        }
        let followed = self.client.get(&address, Some((0, FIRST_BYTES - 1)), &name, &[404, 416])?;
        if followed.response.status == 404 {
            if place.commit.is_some() {
                self.cache.keep_absent(&self.key(place, path, None));
            }
            return Ok(None);
        }
        let facts = file::facts_of(&followed, &name)?;
        let key = self.key(place, path, version(&facts).as_deref());
        self.cache.keep_facts(&key, &facts);
        if let ModelLink::Web { folder } = place.link {
            self.cache.keep_latest(folder, path, &facts);
        }
        tally.total_bytes += facts.size;
        let store = self.ranges(place, path, &facts);
        let file = RemoteFile::new(name, address, facts, self.client.clone(), store);
        file.keep_first_answer(followed)?;
        Ok(Some(Box::new(file)))
    }
}

/// Where the local Hugging Face cache is: `$HF_HUB_CACHE`, `$HF_HOME/hub`, or
/// `~/.cache/huggingface/hub`.
#[cfg(not(target_arch = "wasm32"))]
pub fn hf_cache_root() -> Option<std::path::PathBuf> {
    use std::path::PathBuf;
    let var = |name: &str| std::env::var_os(name).filter(|v| !v.is_empty()).map(PathBuf::from);
    var("HF_HUB_CACHE")
        .or_else(|| var("HF_HOME").map(|h| h.join("hub")))
        .or_else(|| var("XDG_CACHE_HOME").map(|c| c.join("huggingface/hub")))
        .or_else(|| var("HOME").map(|h| h.join(".cache/huggingface/hub")))
}

/// The commit and snapshot folder of `repo` at `revision` in a Hugging Face cache, when the
/// cache has resolved that revision (`refs/REVISION`) or holds the commit itself.
#[cfg(not(target_arch = "wasm32"))]
fn hf_snapshot(root: &std::path::Path, repo: &str, revision: &str) -> Option<(String, std::path::PathBuf)> {
    let repo_dir = root.join(format!("models--{}", repo.replace('/', "--")));
    let commit = if ModelLink::is_commit(revision) {
        revision.to_string()
    } else {
        std::fs::read_to_string(repo_dir.join("refs").join(revision)).ok()?.trim().to_string()
    };
    let folder = repo_dir.join("snapshots").join(&commit);
    (ModelLink::is_commit(&commit) && folder.is_dir()).then_some((commit, folder))
}
