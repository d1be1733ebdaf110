//! A model named on the command line, opened as `headprint-native` opens it, with the network's
//! notes printed above the progress bar and a spinner while a link is resolved.

use headprint::Result;
use headprint::weights::ModelLink;
pub use headprint_native::open::{LinkFacts, Opened};
use headprint_native::open::{LinkSettings, configure as configure_links};

/// Opens links offline (`--offline`) or not, for the whole run.
pub fn configure(offline: bool) {
    configure_links(LinkSettings {
        offline,
        on_note: Some(Box::new(|note| crate::progress::say(&format!("note: {note}")))),
    });
}

pub fn open(model: &str) -> Result<Opened> {
    if !ModelLink::looks_like_link(model) {
        return headprint_native::open::open(model);
    }
    let opening = crate::progress::stage("opening", None, "");
    opening.message(model.to_string());
    headprint_native::open::open(model)
}
