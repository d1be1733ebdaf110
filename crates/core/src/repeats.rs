//! Repeated checkpoints (docs/sweeps.md#repeated-checkpoints): in Pythia's repositories many
//! later step branches serve the same bytes as an earlier checkpoint. A revision whose weights
//! the Hub says are byte-identical to an earlier checkpoint's is not fetched or computed again;
//! it reuses that checkpoint's results and says whose they are.
//!
//! One rule for the sweep, the timeline and the page's Heads over training: before any weight
//! byte of a revision is read, its weights' identity is asked of the Hub's API
//! ([`Opener::published`](crate::weights::remote::Opener::published), one small JSON answer),
//! as [`Published::weights_sha256`] (the LFS sha256 the Hub publishes for each safetensors
//! file). The first checkpoint computed with an identity is the one every later checkpoint with
//! the same identity names. A revision whose identity is unknown (offline, a file the Hub gives
//! no hash for, a local folder) is never a repeat: it is computed.

use std::collections::HashMap;

use crate::weights::remote::Published;

/// The checkpoints computed so far, each under its weights' identity; `T` is what the caller
/// needs to reuse one (an index into its revisions, a unit with its rows).
#[derive(Debug, Clone)]
pub struct Repeats<T> {
    first: HashMap<String, T>,
}

impl<T> Default for Repeats<T> {
    fn default() -> Self {
        Repeats { first: HashMap::new() }
    }
}

/// A revision's weights' identity as the rule compares it: None when not every weights file has
/// a published hash (then it is never a repeat).
pub fn identity(published: Option<&Published>) -> Option<String> {
    published.and_then(Published::weights_sha256)
}

impl<T> Repeats<T> {
    /// The checkpoint computed first with these weights, if their identity is known and one was.
    pub fn earlier(&self, weights: Option<&str>) -> Option<&T> {
        self.first.get(weights?)
    }

    /// As [`Repeats::earlier`], to fill in what it holds (rows read back lazily).
    pub fn earlier_mut(&mut self, weights: Option<&str>) -> Option<&mut T> {
        self.first.get_mut(weights?)
    }

    /// Records `checkpoint` as computed with these weights, unless another was first. Returns
    /// whether it was kept. A checkpoint whose weights' identity is unknown is not kept.
    pub fn keep(&mut self, weights: Option<&str>, checkpoint: T) -> bool {
        let Some(weights) = weights else { return false };
        if self.first.contains_key(weights) {
            return false;
        }
        self.first.insert(weights.to_string(), checkpoint);
        true
    }

    /// Records `checkpoint` in place of the one kept for these weights (whose results could not
    /// be read back, so this one was computed afresh).
    pub fn replace(&mut self, weights: Option<&str>, checkpoint: T) {
        if let Some(weights) = weights {
            self.first.insert(weights.to_string(), checkpoint);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn published(hash: Option<&str>) -> Published {
        Published { commit: "c".repeat(40), weights: vec![("model.safetensors".into(), hash.map(str::to_string))] }
    }

    #[test]
    fn the_first_checkpoint_with_known_weights_is_the_one_later_repeats_name() {
        let mut repeats = Repeats::default();
        let a = identity(Some(&published(Some("aa"))));
        let unknown = identity(Some(&published(None)));
        assert_eq!(unknown, None);
        assert_eq!(identity(None), None);
        assert_eq!(repeats.earlier(a.as_deref()), None);
        assert!(repeats.keep(a.as_deref(), "step1"));
        assert!(!repeats.keep(a.as_deref(), "step2"), "the first stays");
        assert_eq!(repeats.earlier(a.as_deref()), Some(&"step1"));
        assert!(!repeats.keep(unknown.as_deref(), "step3"));
        assert_eq!(repeats.earlier(unknown.as_deref()), None, "unknown weights are never a repeat");
        repeats.replace(a.as_deref(), "step4");
        assert_eq!(repeats.earlier(Some("aa")), Some(&"step4"));
        assert_eq!(repeats.earlier(Some("bb")), None);
    }
}
