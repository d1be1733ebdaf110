//! The tests' loopback Hub and CDN as a program, for trying models by link by hand and for the
//! browser tests: serves local folders as Hub repositories and as web folders until stopped.
//!
//!     cargo run --release --example hub_imitation -- --repo test-org/gpt2=tests/fixtures/gpt2 \
//!         --web gpt2=tests/fixtures/gpt2 [--hub-port 8091] [--cdn-port 8092]
//!     HF_ENDPOINT=http://127.0.0.1:8091 headprint fingerprint hf:test-org/gpt2
//!
//! A repository may be given at a revision: `--repo ORG/NAME@step1000=FOLDER`; `--gpt2-small
//! ORG/NAME=REVISION` serves a random GPT-2 Small in the Hub's layout. Prints one line
//! of JSON with the two origins' addresses once it is listening, and one line of counts for
//! each `sent` read from stdin. A line `faults {JSON}` switches faults on (the fields of
//! `hub_imitation::Faults` that the browser tests use: `transient_every`, `transient_status`,
//! `transient_retry_after`, `stalls`, `silences`, `drops`, `drop_after`) and is answered `{}`.

#[path = "../tests/hub_imitation/mod.rs"]
mod hub_imitation;

use std::path::Path;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let port = |flag: &str| -> u16 {
        args.iter().position(|a| a == flag).and_then(|i| args.get(i + 1)).and_then(|p| p.parse().ok()).unwrap_or(0)
    };
    let hub = hub_imitation::Imitation::start_on(port("--hub-port"), port("--cdn-port"));
    let mut commits = serde_json::Map::new();
    let mut web = serde_json::Map::new();
    for pair in args.windows(2) {
        let Some((name, folder)) = pair[1].split_once('=') else { continue };
        match pair[0].as_str() {
            "--repo" => {
                let (repo, revision) = name.split_once('@').unwrap_or((name, "main"));
                let commit = hub.add_folder(repo, revision, Path::new(folder));
                commits.insert(format!("{repo}@{revision}"), commit.into());
            }
            "--gpt2-small" => {
                let commit = hub.add_commit(name, folder, hub_imitation::gpt2_small());
                commits.insert(format!("{name}@{folder}"), commit.into());
            }
            "--web" => {
                web.insert(name.to_string(), hub.add_web_folder(name, Path::new(folder)).into());
            }
            _ => {}
        }
    }
    println!("{}", serde_json::json!({"hub": hub.hub, "cdn": hub.cdn, "commits": commits, "web": web}));
    // Each line `sent` on stdin is answered with the body bytes and requests served so far
    // (the browser tests count what a reopen fetched); the end of stdin leaves it serving.
    for line in std::io::stdin().lines().map_while(Result::ok) {
        if line.trim() == "sent" {
            println!("{}", serde_json::json!({"bytes": hub.bytes_sent(), "requests": hub.log().len()}));
        } else if let Some(json) = line.trim().strip_prefix("faults ") {
            let asked: serde_json::Value = serde_json::from_str(json).unwrap_or_default();
            let number = |name: &str| asked[name].as_u64().map(|n| n as u32);
            let mut faults = hub.faults();
            if let Some(n) = number("transient_every") {
                faults.transient_every = n;
            }
            if let Some(n) = number("transient_status") {
                faults.transient_status = n as u16;
            }
            if asked.get("transient_retry_after").is_some() {
                faults.transient_retry_after = number("transient_retry_after");
            }
            if let Some(n) = number("stalls") {
                faults.stalls = n;
            }
            if let Some(n) = number("silences") {
                faults.silences = n;
            }
            if let Some(n) = number("drops") {
                faults.drops = n;
            }
            if let Some(n) = asked["drop_after"].as_u64() {
                faults.drop_after = n;
            }
            drop(faults);
            println!("{{}}");
        }
    }
    loop {
        std::thread::park();
    }
}
