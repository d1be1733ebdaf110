//! Share-link fragments as text: the `key=value&…` pairs after `#`, percent-encoded as
//! `encodeURIComponent` does. Pure, so the untrusted half (a link from a stranger) is fuzzed
//! natively (fuzz/fuzz_targets/share_link.rs); the page (crates/web/src/ui/link.rs) writes and
//! applies it.

use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, percent_decode_str, utf8_percent_encode};

use crate::Result;
use crate::analysis::composition::CompositionKind;
use crate::backend::BackendChoice;
use crate::probes::Suite;
use crate::probes::exercise::decode_sheet;
use crate::weights::ModelLink;

/// What `encodeURIComponent` leaves as it is: ASCII letters, digits and `-_.!~*'()`.
const COMPONENT: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'!')
    .remove(b'~')
    .remove(b'*')
    .remove(b'\'')
    .remove(b'(')
    .remove(b')');

/// `text` as one fragment value (the same bytes as the browser's `encodeURIComponent`).
pub fn encode_component(text: &str) -> String {
    utf8_percent_encode(text, COMPONENT).to_string()
}

/// A fragment value back to its text; `None` when the escapes are not UTF-8.
pub fn decode_component(text: &str) -> Option<String> {
    percent_decode_str(text).decode_utf8().ok().map(Into::into)
}

/// A link's fields, each as the link gave it; unknown keys and values that do not decode are
/// skipped, so an old or damaged link still opens what it can. Names of tabs, metrics and
/// sequences stay text: the page knows them.
#[derive(Debug, Default)]
pub struct LinkFields {
    /// `false` when the link names a local file (`model=file`) or a model by link instead of
    /// the demo.
    pub wants_demo: bool,
    /// A model by link (`model=hf:ORG/NAME@COMMIT`, `model=url:FOLDER/`, an http(s) folder).
    pub model_link: Option<String>,
    /// The Hub's address for `hf:` links (`hub=`; absent: the public Hub).
    pub hub: Option<String>,
    pub name: Option<String>,
    /// Lower-case hex digits (a prefix of the file's SHA-256).
    pub sha256: Option<String>,
    pub tab: Option<String>,
    pub head: Option<String>,
    pub metric: Option<String>,
    pub mode: Option<String>,
    pub sequence: Option<String>,
    pub prepend_bos: Option<bool>,
    /// Within 0..=1; anything else is dropped.
    pub threshold: Option<f64>,
    /// A built-in suite named by `suite=`.
    pub suite: Option<Suite>,
    /// A teacher's sheet (`sheet=`), or why it could not be read.
    pub sheet: Option<Result<Suite>>,
    pub prompt: Option<String>,
    /// `backend=gpu|cpu|auto`: where the Gram matrices are computed (absent: auto).
    pub backend: Option<BackendChoice>,
    /// A timeline's repository (`timeline=hf:ORG/NAME`, no revision) and its revisions
    /// (`revisions=step0,step1000`), each a valid revision name.
    pub timeline: Option<String>,
    pub revisions: Vec<String>,
    /// The Circuits tab's composition kind (`kind=q|k|v`).
    pub circuit_kind: Option<CompositionKind>,
    /// The ratio to the baseline at or above which the Circuits graph draws an edge (`ratio=`,
    /// finite, within 0..=1000).
    pub edge_ratio: Option<f64>,
    /// What colours the Circuits map (`colour=score|ratio`), as text: the page knows them.
    pub circuit_colour: Option<String>,
}

/// Reads a fragment (with or without its `#`).
pub fn parse(fragment: &str) -> LinkFields {
    let mut fields = LinkFields { wants_demo: true, ..LinkFields::default() };
    for pair in fragment.strip_prefix('#').unwrap_or(fragment).split('&') {
        let Some((key, value)) = pair.split_once('=') else { continue };
        let Some(value) = decode_component(value) else { continue };
        match key {
            "model" if value == "file" => fields.wants_demo = false,
            "model" if ModelLink::looks_like_link(&value) => {
                fields.wants_demo = false;
                fields.model_link = Some(value);
            }
            "hub" if value.starts_with("http://") || value.starts_with("https://") => fields.hub = Some(value),
            "name" => fields.name = Some(value),
            "sha256" => fields.sha256 = Some(value.to_ascii_lowercase()),
            "tab" => fields.tab = Some(value),
            "head" => fields.head = Some(value),
            "metric" => fields.metric = Some(value),
            "mode" => fields.mode = Some(value),
            "seq" => fields.sequence = Some(value),
            "bos" => fields.prepend_bos = Some(value != "off"),
            "threshold" => {
                fields.threshold = value.parse::<f64>().ok().filter(|t| (0.0..=1.0).contains(t)).or(fields.threshold)
            }
            "suite" => fields.suite = Suite::builtin(&value).or(fields.suite),
            "sheet" => fields.sheet = Some(decode_sheet(&value)),
            "prompt" => fields.prompt = Some(value),
            "backend" => fields.backend = BackendChoice::parse(&value).ok().or(fields.backend),
            "kind" => fields.circuit_kind = CompositionKind::parse(&value).ok().or(fields.circuit_kind),
            "ratio" => {
                fields.edge_ratio =
                    value.parse::<f64>().ok().filter(|r| (0.0..=1000.0).contains(r)).or(fields.edge_ratio)
            }
            "colour" => fields.circuit_colour = Some(value),
            "timeline" => {
                if let Ok(ModelLink::Hub { repo, .. }) = ModelLink::parse(&value)
                    && !value.contains('@')
                {
                    fields.timeline = Some(format!("hf:{repo}"));
                }
            }
            "revisions" => {
                fields.revisions = value
                    .split(',')
                    .filter(|r| ModelLink::parse(&format!("hf:a/b@{r}")).is_ok())
                    .map(str::to_string)
                    .collect()
            }
            _ => {}
        }
    }
    fields
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn components_round_trip_and_match_encode_uri_component() {
        // encodeURIComponent("a b&c=d/é#%'()") in a browser.
        assert_eq!(encode_component("a b&c=d/é#%'()"), "a%20b%26c%3Dd%2F%C3%A9%23%25'()");
        for text in ["", "plain", "&=#%", "L2H0 ← ( \u{202e}x\u{202c}", "\0<img src=x>"] {
            assert_eq!(decode_component(&encode_component(text)).as_deref(), Some(text));
        }
        // Escapes of bytes that are not UTF-8 are refused; a stray `%` is kept as it stands.
        assert_eq!(decode_component("%FF%FE"), None);
        assert_eq!(decode_component("100%").as_deref(), Some("100%"));
    }

    #[test]
    fn fields_are_read_and_bad_values_skipped() {
        let fields = parse(
            "#model=file&name=my%20model.safetensors&sha256=ABCDEF012345&tab=head&head=L1H0\
             &bos=off&threshold=2&threshold=0.25&threshold=NaN&suite=nope&suite=quote&junk&sheet=!!\
             &prompt=%FF&prompt=a%26b&backend=gpu&backend=tpu",
        );
        assert!(!fields.wants_demo);
        assert_eq!(fields.name.as_deref(), Some("my model.safetensors"));
        assert_eq!(fields.sha256.as_deref(), Some("abcdef012345"));
        assert_eq!((fields.tab.as_deref(), fields.head.as_deref()), (Some("head"), Some("L1H0")));
        assert_eq!(fields.prepend_bos, Some(false));
        assert_eq!(fields.threshold, Some(0.25));
        assert_eq!(fields.suite.map(|s| s.name), Some("quote".to_string()));
        assert!(fields.sheet.unwrap().unwrap_err().to_string().contains("base64url"));
        assert_eq!(fields.prompt.as_deref(), Some("a&b"));
        assert_eq!(fields.backend, Some(BackendChoice::Gpu), "an unknown backend is skipped");
        assert_eq!(parse("#model=demo&backend=cpu").backend, Some(BackendChoice::Cpu));
        let linked = parse("#model=hf%3Aopenai-community%2Fgpt2%40abc&hub=http%3A%2F%2F127.0.0.1%3A8091&head=L5H1");
        assert!(!linked.wants_demo);
        assert_eq!(linked.model_link.as_deref(), Some("hf:openai-community/gpt2@abc"));
        assert_eq!(linked.hub.as_deref(), Some("http://127.0.0.1:8091"));
        assert_eq!(parse("#model=url%3Amodels%2Fgpt2%2F").model_link.as_deref(), Some("url:models/gpt2/"));
        assert!(parse("#model=other").wants_demo && parse("#hub=javascript:x").hub.is_none());
        assert_eq!(parse("#model=demo").backend, None);
        assert!(parse("").wants_demo);
        let timeline = parse("#timeline=hf%3AEleutherAI%2Fpythia-14m&revisions=step0%2Cstep1000%2C..%2F..%2C%2Cmain");
        assert_eq!(timeline.timeline.as_deref(), Some("hf:EleutherAI/pythia-14m"));
        assert_eq!(timeline.revisions, vec!["step0", "step1000", "main"], "bad and empty revisions are skipped");
        assert!(parse("#timeline=hf%3Aa%2Fb%40step0").timeline.is_none(), "the revisions come from revisions=");
        assert!(parse("#timeline=https%3A%2F%2Fexample.org%2Fm%2F").timeline.is_none());
        let circuits = parse("#tab=circuits&kind=K&kind=x&ratio=2.5&ratio=-1&ratio=inf&colour=ratio&head=L2H1");
        assert_eq!(circuits.circuit_kind, Some(CompositionKind::K), "an unknown kind is skipped");
        assert_eq!(circuits.edge_ratio, Some(2.5), "a negative or infinite ratio is skipped");
        assert_eq!(circuits.circuit_colour.as_deref(), Some("ratio"));
    }
}
