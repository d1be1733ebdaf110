//! Any text as a message from the page to the worker, answered by a session holding the
//! character fixture as model 1 (a load or a pool's open is given the fixture's bytes). The fuzz
//! build has no GPU backend, so a GPU choice (a load's, a layer's, or a probe's, a pattern's or a
//! verdict table's forward pass) ends on the CPU with a note.
#![no_main]

use std::cell::RefCell;
use std::rc::Rc;

use headprint::backend::BackendChoice;
use headprint::weights::{ByteSource, MemorySource};
use headprint::worker::protocol::Request;
use headprint::worker::session::Session;
use headprint_fuzz::GPTCHAR;
use libfuzzer_sys::fuzz_target;

fn files() -> Vec<Box<dyn ByteSource>> {
    vec![Box::new(MemorySource::new("gptchar.safetensors", GPTCHAR.to_vec()))]
}

thread_local! {
    static SESSION: RefCell<Session> = RefCell::new(Session::new(|| 0.0));
}

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    let Ok(request) = serde_json::from_str::<Request>(text) else { return };
    SESSION.with_borrow_mut(|session| {
        if session.models_held() == 0 {
            let load = Request::Load {
                model: 1,
                names: vec!["gptchar.safetensors".into()],
                analyse: false,
                prepend_bos: true,
                backend: BackendChoice::Cpu,
                link: None,
            };
            session.handle(load, files(), Rc::new(|_| {})).unwrap();
        }
        let given = match request {
            Request::Load { .. } | Request::Open { .. } | Request::Hash { .. } => files(),
            _ => Vec::new(),
        };
        if let Ok(reply) = session.handle(request, given, Rc::new(|_| {})) {
            serde_json::to_string(&reply).unwrap();
        }
    });
});
