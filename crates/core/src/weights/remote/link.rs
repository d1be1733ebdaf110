//! How a model is named by link: `hf:ORG/NAME[@REVISION]` for the Hugging Face Hub, or a web
//! folder in the Hub's layout (`https://host/path/`, or `url:PATH` relative to the page).

use std::fmt;

use crate::{Error, Result};

/// The Hub's public endpoint; `HF_ENDPOINT` (the CLI) or the page's setting replaces it.
pub const HUB_ENDPOINT: &str = "https://huggingface.co";

/// The revision a Hub link without `@` means.
pub const DEFAULT_REVISION: &str = "main";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ModelLink {
    /// A Hub repository at a revision: a branch, a tag or a commit.
    Hub { repo: String, revision: String },
    /// A folder on the web holding config.json, tokenizer.json and the safetensors files. Always
    /// ends with `/`; relative (no scheme) only in the page, where it is read against the page.
    Web { folder: String },
}

impl ModelLink {
    /// Whether `text` is a link rather than a local path.
    pub fn looks_like_link(text: &str) -> bool {
        text.starts_with("hf:")
            || text.starts_with("url:")
            || text.starts_with("http://")
            || text.starts_with("https://")
    }

    pub fn parse(text: &str) -> Result<ModelLink> {
        let bad = |reason: &str| Error::BadLink { link: text.into(), reason: reason.into() };
        if let Some(rest) = text.strip_prefix("hf:") {
            let (repo, revision) = match rest.split_once('@') {
                Some((repo, revision)) => (repo, revision),
                None => (rest, DEFAULT_REVISION),
            };
            let parts: Vec<&str> = repo.split('/').collect();
            let name_ok = |p: &str| {
                !p.is_empty()
                    && p != "."
                    && p != ".."
                    && p.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            };
            if parts.len() != 2 || !parts.iter().all(|p| name_ok(p)) {
                return Err(bad("write hf:ORG/NAME or hf:ORG/NAME@REVISION, e.g. hf:openai-community/gpt2"));
            }
            // A branch may hold `/` (e.g. `refs/pr/1`), never `..` or spaces.
            let revision_ok = !revision.is_empty()
                && !revision.split('/').any(|p| p.is_empty() || p == "." || p == "..")
                && revision.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'));
            if !revision_ok {
                return Err(bad("the revision after @ must be a branch, a tag or a commit, e.g. main or step1000"));
            }
            return Ok(ModelLink::Hub { repo: repo.into(), revision: revision.into() });
        }
        let folder = match text.strip_prefix("url:") {
            Some(rest) => rest,
            None if text.starts_with("http://") || text.starts_with("https://") => text,
            None => return Err(bad("a link starts with hf:, url:, http:// or https://")),
        };
        if folder.is_empty() || folder.contains(['?', '#', ' ']) {
            return Err(bad("a folder's address, without a query, a fragment or spaces"));
        }
        let folder = if folder.ends_with('/') { folder.to_string() } else { format!("{folder}/") };
        Ok(ModelLink::Web { folder })
    }

    /// The same link pinned to a commit (Hub links only; a web folder has no commits).
    pub fn pinned(&self, commit: Option<&str>) -> ModelLink {
        match (self, commit) {
            (ModelLink::Hub { repo, .. }, Some(commit)) => {
                ModelLink::Hub { repo: repo.clone(), revision: commit.to_string() }
            }
            _ => self.clone(),
        }
    }

    /// Where a cache keeps every version of this model: a Hub repository's commits under
    /// `hf/ORG--NAME/`, a web folder's versions under `web/HASH/`. A store can list, or remove,
    /// one model by this prefix.
    pub fn store_prefix(&self) -> String {
        match self {
            ModelLink::Hub { repo, .. } => format!("hf/{}/", repo.replace('/', "--")),
            ModelLink::Web { .. } => format!("web/{}/", super::store::short_hash(&self.to_string())),
        }
    }

    /// Whether a revision names a commit (40 hexadecimal digits), which no push can move.
    pub fn is_commit(revision: &str) -> bool {
        revision.len() == 40 && revision.bytes().all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
    }
}

impl fmt::Display for ModelLink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ModelLink::Hub { repo, revision } if revision == DEFAULT_REVISION => write!(f, "hf:{repo}"),
            ModelLink::Hub { repo, revision } => write!(f, "hf:{repo}@{revision}"),
            ModelLink::Web { folder } if folder.starts_with("http://") || folder.starts_with("https://") => {
                write!(f, "{folder}")
            }
            ModelLink::Web { folder } => write!(f, "url:{folder}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hub_links_name_a_repository_and_a_revision() {
        assert_eq!(
            ModelLink::parse("hf:openai-community/gpt2").unwrap(),
            ModelLink::Hub { repo: "openai-community/gpt2".into(), revision: "main".into() }
        );
        assert_eq!(
            ModelLink::parse("hf:EleutherAI/pythia-160m@step1000").unwrap(),
            ModelLink::Hub { repo: "EleutherAI/pythia-160m".into(), revision: "step1000".into() }
        );
        for bad in ["hf:gpt2", "hf:a/b/c", "hf:a/..", "hf:a/b@", "hf:a/b@x y", "hf:a/b@../main", "hf:/b"] {
            assert!(matches!(ModelLink::parse(bad), Err(Error::BadLink { .. })), "{bad}");
        }
    }

    #[test]
    fn web_folders_end_with_a_slash_and_print_back_as_given() {
        let link = ModelLink::parse("https://example.org/models/gpt2").unwrap();
        assert_eq!(link, ModelLink::Web { folder: "https://example.org/models/gpt2/".into() });
        assert_eq!(link.to_string(), "https://example.org/models/gpt2/");
        let relative = ModelLink::parse("url:models/gpt2/").unwrap();
        assert_eq!(relative.to_string(), "url:models/gpt2/");
        assert!(ModelLink::parse("ftp://x/").is_err());
        assert!(ModelLink::parse("https://x/?a=b").is_err());
    }

    #[test]
    fn a_pinned_link_names_the_commit_and_only_hex_commits_count() {
        let commit = "607a30d783dfa663caf39e06633721c8d4cfcd7e";
        assert!(ModelLink::is_commit(commit));
        assert!(!ModelLink::is_commit("main"));
        assert!(!ModelLink::is_commit(&commit.to_uppercase()));
        let pinned = ModelLink::parse("hf:openai-community/gpt2").unwrap().pinned(Some(commit));
        assert_eq!(pinned.to_string(), format!("hf:openai-community/gpt2@{commit}"));
        assert_eq!(ModelLink::parse(&pinned.to_string()).unwrap(), pinned);
    }
}
