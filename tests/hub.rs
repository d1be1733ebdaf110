//! Models by link through the CLI, against a loopback imitation of the Hub and its CDN
//! (`hub_imitation`): the numbers equal the local files' bit for bit, only the tensors an
//! analysis reads are fetched, every misbehaviour of a real network gives the model or one clear
//! line, and a second run needs no network.

use crate::common;
use crate::hub_imitation;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::fixture;
use hub_imitation::{GOOD_TOKEN, Imitation, Logged, Origin, gpt2_small, safetensors_header};
use serde_json::Value;

/// A fresh folder for one test's caches.
pub(crate) fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("headprint-hub-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// The CLI with the imitation as its Hub, its caches under `home`: (success, stdout, stderr).
pub(crate) fn run(hub: &Imitation, home: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_headprint"));
    command
        .args(args)
        .env("HF_ENDPOINT", &hub.hub)
        .env("HEADPRINT_CACHE", home.join("headprint"))
        .env("HF_HUB_CACHE", home.join("hf-empty"))
        .env_remove("HF_TOKEN")
        .env_remove("HUGGING_FACE_HUB_TOKEN")
        .env_remove("HF_HUB_OFFLINE");
    for (name, value) in env {
        command.env(name, value);
    }
    let out = command.output().expect("runs");
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

pub(crate) fn json_of(outcome: (bool, String, String)) -> Value {
    let (ok, stdout, stderr) = outcome;
    assert!(ok, "failed: {stderr}");
    serde_json::from_str(&stdout).expect("JSON on stdout")
}

fn local(args: &[&str]) -> Value {
    common::json(args)
}

/// A report without its `model_link` (which only a model by link has).
fn without_link(mut report: Value) -> Value {
    report.as_object_mut().unwrap().remove("model_link");
    report
}

/// The byte ranges of the tensors whose names match, in a safetensors file's bytes.
pub(crate) fn tensor_ranges(bytes: &[u8], wanted: impl Fn(&str) -> bool) -> Vec<(u64, u64)> {
    let header_len = u64::from_le_bytes(bytes[..8].try_into().unwrap());
    let header: Value = serde_json::from_slice(&bytes[8..8 + header_len as usize]).unwrap();
    header
        .as_object()
        .unwrap()
        .iter()
        .filter(|(name, _)| *name != "__metadata__" && wanted(name))
        .map(|(_, t)| {
            let offsets = &t["data_offsets"];
            (8 + header_len + offsets[0].as_u64().unwrap(), 8 + header_len + offsets[1].as_u64().unwrap())
        })
        .collect()
}

/// The inclusive span a logged request asked for.
pub(crate) fn asked(entry: &Logged) -> Option<(u64, u64)> {
    let (first, last) = entry.range.as_deref()?.strip_prefix("bytes=")?.split_once('-')?;
    Some((first.parse().ok()?, last.parse().ok()?))
}

#[test]
fn a_hub_model_equals_its_local_files_fetches_no_mlp_and_reopens_with_no_network() {
    let hub = Imitation::start();
    let folder = fixture("gpt2");
    let commit = hub.add_folder("test-org/gpt2", "main", &folder);
    let home = scratch("gpt2");

    let report = json_of(run(&hub, &home, &["fingerprint", "hf:test-org/gpt2", "--json"], &[]));
    let expected = local(&["fingerprint", folder.to_str().unwrap(), "--json"]);
    assert_eq!(without_link(report.clone()), expected, "the same numbers as the local files, bit for bit");

    let source = &report["model_link"];
    assert_eq!(source["given"], "hf:test-org/gpt2");
    assert_eq!(source["pinned"], format!("hf:test-org/gpt2@{commit}"));
    let file_sizes: u64 = ["config.json", "tokenizer.json", "model.safetensors"]
        .iter()
        .map(|f| std::fs::metadata(folder.join(f)).unwrap().len())
        .sum();
    assert_eq!(source["bytes_total"], file_sizes);
    let fetched = source["bytes_fetched"].as_u64().unwrap();
    assert_eq!(fetched, hub.bytes_sent(), "every byte the server sent is counted");
    assert!(fetched < file_sizes, "{fetched} of {file_sizes}");

    let log = hub.log();
    let mlp = tensor_ranges(&std::fs::read(folder.join("model.safetensors")).unwrap(), |n| n.contains(".mlp."));
    let weights: Vec<&Logged> = log.iter().filter(|e| e.origin == Origin::Cdn).collect();
    assert!(!weights.is_empty());
    for entry in &weights {
        let (first, last) = asked(entry).expect("every weight request asks for one range");
        assert!(
            mlp.iter().all(|&(start, end)| last < start || first >= end),
            "the fingerprint asked for an MLP weight's bytes: {:?}",
            entry.range
        );
    }
    // Every request after the first names the commit, never the branch.
    for entry in log.iter().filter(|e| e.origin == Origin::Hub).skip(1) {
        assert!(!entry.path.contains("/resolve/main/"), "{}", entry.path);
    }
    assert!(log.iter().all(|e| e.authorization.is_none()), "no token, no Authorization");

    // The pinned link again: everything from headprint's cache, no request at all.
    hub.clear_log();
    let pinned = format!("hf:test-org/gpt2@{commit}");
    let again = json_of(run(&hub, &home, &["fingerprint", &pinned, "--json"], &[]));
    assert_eq!(again["model_link"]["bytes_fetched"], 0);
    assert!(hub.log().is_empty(), "{:?}", hub.log());
    assert_eq!(without_link(again), expected);

    // Offline, by branch: the commit the branch resolved to is remembered.
    for (flag, env) in [(Some("--offline"), None), (None, Some(("HF_HUB_OFFLINE", "1")))] {
        let mut args = vec!["fingerprint", "hf:test-org/gpt2", "--json"];
        args.extend(flag);
        let offline = json_of(run(&hub, &home, &args, env.as_slice()));
        assert_eq!(offline["model_link"]["pinned"], pinned);
        assert_eq!(without_link(offline), expected);
    }
    assert!(hub.log().is_empty());

    // The probe reads the MLPs, which the fingerprint left on the server: offline says so.
    let (ok, _, stderr) =
        run(&hub, &home, &["probe", "hf:test-org/gpt2", "--induction", "--len", "10", "--offline"], &[]);
    assert!(!ok);
    assert!(stderr.starts_with("headprint: offline: bytes "), "{stderr}");
    assert!(stderr.contains("model.safetensors is not stored here"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
    assert!(hub.log().is_empty());

    // Online, the probe fetches what it lacks and gives the local numbers.
    let probe = json_of(run(&hub, &home, &["probe", &pinned, "--induction", "--len", "10", "--json"], &[]));
    let expected_probe = local(&["probe", folder.to_str().unwrap(), "--induction", "--len", "10", "--json"]);
    assert_eq!(without_link(probe), expected_probe);
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn the_newer_families_by_link_equal_their_local_files_and_fetch_no_mlp_or_expert_byte() {
    let hub = Imitation::start();
    for name in ["gemma2", "qwen3", "mixtral", "falcon-rw"] {
        let folder = fixture(&format!("families/{name}"));
        let repo = format!("test-org/{name}");
        hub.add_folder(&repo, "main", &folder);
        let home = scratch(name);
        hub.clear_log();
        let link = format!("hf:{repo}");
        let report = json_of(run(&hub, &home, &["fingerprint", &link, "--json"], &[]));
        assert_eq!(without_link(report), local(&["fingerprint", folder.to_str().unwrap(), "--json"]), "{name}");
        let feed_forward = tensor_ranges(&std::fs::read(folder.join("model.safetensors")).unwrap(), |n| {
            n.contains(".mlp.") || n.contains(".block_sparse_moe.")
        });
        assert!(!feed_forward.is_empty(), "{name}");
        for entry in hub.log().iter().filter(|e| e.origin == Origin::Cdn) {
            let (first, last) = asked(entry).expect("every weight request asks for one range");
            assert!(
                feed_forward.iter().all(|&(start, end)| last < start || first >= end),
                "{name}: the fingerprint asked for an MLP or expert weight's bytes: {:?}",
                entry.range
            );
        }
        // The probe fetches the rest and runs as it runs on the local files.
        let args = ["probe", "--induction", "--len", "6", "--sequences", "2", "--json"];
        let probe = json_of(run(&hub, &home, &[&args[..1], &[link.as_str()], &args[1..]].concat(), &[]));
        let expected = local(&[&args[..1], &[folder.to_str().unwrap()], &args[1..]].concat());
        assert_eq!(without_link(probe), expected, "{name}");
        let _ = std::fs::remove_dir_all(home);
    }
}

#[test]
fn a_sharded_model_by_link_equals_its_local_files() {
    let hub = Imitation::start();
    let folder = fixture("llama");
    hub.add_folder("test-org/llama", "main", &folder);
    let home = scratch("llama");
    for args in [vec!["fingerprint", "--json"], vec!["probe", "--induction", "--json"]] {
        let mut remote = vec![args[0], "hf:test-org/llama"];
        remote.extend(&args[1..]);
        let mut local_args = vec![args[0], folder.to_str().unwrap()];
        local_args.extend(&args[1..]);
        let report = json_of(run(&hub, &home, &remote, &[]));
        assert_eq!(without_link(report), local(&local_args), "{args:?}");
    }
    let shards = hub.log().iter().filter(|e| e.origin == Origin::Cdn && e.path.contains("-of-00004")).count();
    assert!(shards >= 8, "each of the four shards read by range ({shards} requests)");
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn a_web_folder_by_link_equals_its_local_files() {
    let hub = Imitation::start();
    let folder = fixture("pythia-hub");
    let url = hub.add_web_folder("pythia", &folder);
    let home = scratch("web");
    let report = json_of(run(&hub, &home, &["fingerprint", &url, "--json"], &[]));
    assert_eq!(report["model_link"]["pinned"], url);
    assert_eq!(without_link(report), local(&["fingerprint", folder.to_str().unwrap(), "--json"]));
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn a_server_that_ignores_ranges_still_gives_the_model_and_says_so_once() {
    let hub = Imitation::start();
    let folder = fixture("gpt2");
    hub.add_folder("test-org/gpt2", "main", &folder);
    hub.faults().ignore_range = true;
    let home = scratch("ignore-range");
    let (ok, stdout, stderr) = run(&hub, &home, &["fingerprint", "hf:test-org/gpt2", "--json"], &[]);
    assert!(ok, "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(without_link(report), local(&["fingerprint", folder.to_str().unwrap(), "--json"]));
    assert_eq!(stderr.matches("does not serve byte ranges").count(), 1, "{stderr}");
    let whole_files: Vec<Logged> = hub.log().into_iter().filter(|e| e.origin == Origin::Cdn).collect();
    assert!(whole_files.iter().all(|e| e.status == 200));
    // The length, the header, then every tensor read from one stream: not a stream per read.
    assert!(whole_files.len() <= 3, "{} whole-file answers", whole_files.len());
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn dropped_connections_are_resumed_three_times_then_named() {
    let hub = Imitation::start();
    let folder = fixture("gpt2");
    hub.add_folder("test-org/gpt2", "main", &folder);
    let expected = local(&["fingerprint", folder.to_str().unwrap(), "--json"]);

    let home = scratch("drop-once");
    {
        let mut faults = hub.faults();
        faults.drops = 2;
        faults.drop_after = 3;
    }
    let report = json_of(run(&hub, &home, &["fingerprint", "hf:test-org/gpt2", "--json"], &[]));
    assert_eq!(without_link(report), expected);
    let resumed = hub.log().windows(2).any(|pair| match (asked(&pair[0]), asked(&pair[1])) {
        (Some((a, b)), Some((c, d))) => c == a + 3 && d == b,
        _ => false,
    });
    assert!(resumed, "a dropped range is asked again from where it broke: {:?}", hub.log());

    let home = scratch("drop-always");
    hub.faults().drops = 100;
    let (ok, _, stderr) = run(&hub, &home, &["fingerprint", "hf:test-org/gpt2"], &[]);
    assert!(!ok);
    assert!(stderr.contains("model.safetensors: the connection dropped 4 times"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "{stderr}");
}

#[test]
fn the_hubs_refusals_are_one_clear_line_each() {
    let hub = Imitation::start();
    hub.add_folder("test-org/gpt2", "main", &fixture("gpt2"));
    hub.add_folder("test-org/gated", "main", &fixture("gpt2"));
    hub.gate("test-org/gated");
    let home = scratch("refusals");
    let cases = [
        ("hf:test-org/missing", "not found on the server (no such repository, or it is private)"),
        ("hf:test-org/gpt2@no-such-branch", "not found on the server (no such branch, tag or commit)"),
        ("hf:test-org/gated", "gated or private"),
        ("hf:gpt2", "bad model link `hf:gpt2`"),
    ];
    for (link, message) in cases {
        let (ok, stdout, stderr) = run(&hub, &home, &["fingerprint", link], &[]);
        assert!(!ok && stdout.is_empty(), "{link}");
        assert!(stderr.starts_with("headprint: ") && stderr.contains(message), "{link}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{link}: {stderr}");
    }
    let (_, _, stderr) = run(&hub, &home, &["fingerprint", "hf:test-org/gated"], &[]);
    assert!(stderr.contains("HF_TOKEN"), "{stderr}");

    // With the token the gated model opens; the token goes to the Hub only, never to its CDN.
    hub.clear_log();
    let report =
        json_of(run(&hub, &home, &["fingerprint", "hf:test-org/gated", "--json"], &[("HF_TOKEN", GOOD_TOKEN)]));
    assert!(report["heads"].is_array());
    let log = hub.log();
    assert!(log.iter().filter(|e| e.origin == Origin::Hub).all(|e| e.authorization.is_some()));
    assert!(log.iter().filter(|e| e.origin == Origin::Cdn).all(|e| e.authorization.is_none()));
}

#[test]
fn rate_limits_are_waited_out_and_expired_addresses_resolved_again() {
    let hub = Imitation::start();
    let folder = fixture("gpt2");
    hub.add_folder("test-org/gpt2", "main", &folder);
    let expected = local(&["fingerprint", folder.to_str().unwrap(), "--json"]);
    {
        let mut faults = hub.faults();
        faults.rate_limits = 2;
        faults.url_uses = 1;
    }
    let home = scratch("limits");
    let (ok, stdout, stderr) = run(&hub, &home, &["fingerprint", "hf:test-org/gpt2", "--json"], &[]);
    assert!(ok, "{stderr}");
    assert_eq!(without_link(serde_json::from_str(&stdout).unwrap()), expected);
    assert!(stderr.contains("limited the request rate"), "{stderr}");
    let log = hub.log();
    assert_eq!(log.iter().filter(|e| e.status == 429).count(), 2);
    let expired = log.iter().position(|e| e.status == 403).expect("a signed address expired");
    assert!(
        log[expired + 1..].iter().any(|e| e.origin == Origin::Hub && e.path.contains("/resolve/")),
        "resolved again after the expiry"
    );
}

#[test]
fn a_file_that_changes_under_its_name_is_an_error_never_a_mix() {
    let folder = fixture("pythia-hub");
    for (fault, message) in [("etag", "changed on the server since it was opened"), ("shrink", "changed on the server")]
    {
        let hub = Imitation::start();
        let url = hub.add_web_folder("pythia", &folder);
        {
            let mut faults = hub.faults();
            // After the header is read (the web files' first requests), the file is replaced.
            match fault {
                "etag" => faults.change_etag_after = 4,
                _ => faults.shrink_after = 4,
            }
        }
        let home = scratch(&format!("changed-{fault}"));
        let (ok, stdout, stderr) = run(&hub, &home, &["fingerprint", &url, "--json"], &[]);
        assert!(!ok && stdout.is_empty(), "{fault}: {stdout}");
        assert!(stderr.contains(message) && stderr.contains("model.safetensors"), "{fault}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{fault}: {stderr}");
    }
}

#[test]
fn a_web_file_with_no_version_is_not_kept_so_a_replaced_file_is_read_anew() {
    let hub = Imitation::start();
    hub.faults().no_etag = true;
    let original = fixture("pythia-hub");
    // The same file with other weights, the same size: only its bytes tell them apart.
    let replaced = scratch("replaced-model");
    std::fs::copy(original.join("config.json"), replaced.join("config.json")).unwrap();
    let mut bytes = std::fs::read(original.join("model.safetensors")).unwrap();
    let header = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    for byte in &mut bytes[8 + header..] {
        *byte = byte.wrapping_add(1) & 0xbf;
    }
    std::fs::write(replaced.join("model.safetensors"), &bytes).unwrap();
    let home = scratch("no-etag");
    for folder in [&original, &replaced] {
        let url = hub.add_web_folder("m", folder);
        let report = json_of(run(&hub, &home, &["fingerprint", &url, "--json"], &[]));
        assert_eq!(without_link(report), local(&["fingerprint", folder.to_str().unwrap(), "--json"]), "{folder:?}");
    }
    let _ = std::fs::remove_dir_all(home);
    let _ = std::fs::remove_dir_all(replaced);
}

#[test]
fn the_hugging_face_cache_is_read_first_with_no_network() {
    let folder = fixture("gpt2");
    let home = scratch("hf-cache");
    let commit = "0123456789abcdef0123456789abcdef01234567";
    let repo = home.join("hf/models--test-org--gpt2");
    std::fs::create_dir_all(repo.join("refs")).unwrap();
    std::fs::write(repo.join("refs/main"), commit).unwrap();
    let snapshot = repo.join("snapshots").join(commit);
    std::fs::create_dir_all(&snapshot).unwrap();
    for file in ["config.json", "tokenizer.json", "model.safetensors"] {
        std::fs::copy(folder.join(file), snapshot.join(file)).unwrap();
    }
    // A hub with nothing in it: any request would fail the run.
    let hub = Imitation::start();
    let hf_cache = home.join("hf");
    let report = json_of(run(
        &hub,
        &home,
        &["fingerprint", "hf:test-org/gpt2", "--json"],
        &[("HF_HUB_CACHE", hf_cache.to_str().unwrap())],
    ));
    assert!(hub.log().is_empty(), "{:?}", hub.log());
    assert_eq!(report["model_link"]["files_from_hf_cache"], 3);
    assert_eq!(report["model_link"]["pinned"], format!("hf:test-org/gpt2@{commit}"));
    assert_eq!(without_link(report), local(&["fingerprint", folder.to_str().unwrap(), "--json"]));
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn two_training_checkpoints_compare_by_revision() {
    let hub = Imitation::start();
    let (early, late) = (fixture("gpt2"), fixture("gpt2-nanogpt"));
    let early_commit = hub.add_folder("test-org/ckpt", "step1000", &early);
    let late_commit = hub.add_folder("test-org/ckpt", "step143000", &late);
    let home = scratch("compare");
    let report = json_of(run(
        &hub,
        &home,
        &[
            "compare",
            "hf:test-org/ckpt@step1000",
            "hf:test-org/ckpt@step143000",
            "--json",
            "--sequences",
            "2",
            "--len",
            "10",
        ],
        &[],
    ));
    let expected = local(&[
        "compare",
        early.to_str().unwrap(),
        late.to_str().unwrap(),
        "--json",
        "--sequences",
        "2",
        "--len",
        "10",
    ]);
    let models = report["models"].as_array().unwrap();
    for (i, commit) in [early_commit, late_commit].iter().enumerate() {
        let mut model = models[i].clone();
        assert_eq!(model["model"], format!("hf:test-org/ckpt@{commit}"));
        let mut local_model = expected["models"][i].clone();
        model.as_object_mut().unwrap().remove("model_link");
        model["model"] = Value::Null;
        local_model["model"] = Value::Null;
        assert_eq!(model, local_model, "checkpoint {i}");
    }
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn gpt2_small_in_its_real_shape_fingerprints_from_the_hub_within_280_mb() {
    let files = gpt2_small();
    let size = files.iter().map(|(_, bytes)| bytes.len() as u64).sum::<u64>();
    let hub = Imitation::start();
    hub.add_commit("openai-community/gpt2", "main", files);
    let home = scratch("gpt2-small");
    let report =
        json_of(run(&hub, &home, &["fingerprint", "hf:openai-community/gpt2", "--json", "--backend", "cpu"], &[]));
    assert_eq!(report["heads"].as_array().unwrap().len(), 144);
    let fetched = report["model_link"]["bytes_fetched"].as_u64().unwrap();
    // The embeddings, the attention weights and the norms, f32: what the fingerprint reads.
    let read: u64 = 4 * (50257 * 768 + 1024 * 768 + 2 * 768 + 12 * (4 * 768 + 768 * 2304 + 2304 + 768 * 768 + 768));
    assert!(fetched >= read && fetched <= read + (1 << 20), "fetched {fetched} bytes; the tensors read are {read}");
    assert!(fetched <= 280_000_000, "{fetched} bytes of {size}");
    eprintln!("GPT-2 Small's fingerprint fetched {fetched} of {size} bytes");
    let _ = std::fs::remove_dir_all(home);
}

/// A file that holds a real header and claims its full size, reads as zeros past the header
/// and records what it is told will be read (no memory for the 16 GB it stands for).
pub(crate) struct HeaderOnly {
    pub name: String,
    pub header: Vec<u8>,
    pub len: u64,
    pub announced: std::sync::Arc<std::sync::Mutex<Vec<std::ops::Range<u64>>>>,
}

impl headprint::weights::ByteSource for HeaderOnly {
    fn name(&self) -> &str {
        &self.name
    }
    fn len(&self) -> u64 {
        self.len
    }
    fn read_range(&self, offset: u64, len: usize) -> headprint::Result<Vec<u8>> {
        let mut bytes = vec![0u8; len];
        let start = offset as usize;
        if start < self.header.len() {
            let end = (start + len).min(self.header.len());
            bytes[..end - start].copy_from_slice(&self.header[start..end]);
        }
        Ok(bytes)
    }
    fn will_read(&self, ranges: Vec<std::ops::Range<u64>>) {
        self.announced.lock().unwrap().extend(ranges);
    }
}

#[test]
fn llama_3_8b_in_its_real_shape_plans_its_fingerprint_within_5_5_gb() {
    let (d, d_kv, d_mlp, vocab, layers) = (4096usize, 1024usize, 14336usize, 128256usize, 32usize);
    let layer = |l: usize| -> Vec<(String, &'static str, Vec<usize>)> {
        let p = format!("model.layers.{l}");
        vec![
            (format!("{p}.input_layernorm.weight"), "BF16", vec![d]),
            (format!("{p}.post_attention_layernorm.weight"), "BF16", vec![d]),
            (format!("{p}.self_attn.q_proj.weight"), "BF16", vec![d, d]),
            (format!("{p}.self_attn.k_proj.weight"), "BF16", vec![d_kv, d]),
            (format!("{p}.self_attn.v_proj.weight"), "BF16", vec![d_kv, d]),
            (format!("{p}.self_attn.o_proj.weight"), "BF16", vec![d, d]),
            (format!("{p}.mlp.gate_proj.weight"), "BF16", vec![d_mlp, d]),
            (format!("{p}.mlp.up_proj.weight"), "BF16", vec![d_mlp, d]),
            (format!("{p}.mlp.down_proj.weight"), "BF16", vec![d, d_mlp]),
        ]
    };
    // Four shards as the Hub's: the embedding with the first layers, the head with the last.
    let mut shards: Vec<Vec<(String, &str, Vec<usize>)>> = vec![Vec::new(); 4];
    shards[0].push(("model.embed_tokens.weight".into(), "BF16", vec![vocab, d]));
    for l in 0..layers {
        shards[l * 4 / layers].extend(layer(l));
    }
    shards[3].push(("model.norm.weight".into(), "BF16", vec![d]));
    shards[3].push(("lm_head.weight".into(), "BF16", vec![vocab, d]));
    let mut weight_map = serde_json::Map::new();
    let mut weights: Vec<Box<dyn headprint::weights::ByteSource>> = Vec::new();
    let mut announced = Vec::new();
    let (mut total, mut headers) = (0u64, 0u64);
    for (i, tensors) in shards.into_iter().enumerate() {
        let name = format!("model-0000{}-of-00004.safetensors", i + 1);
        for (tensor, ..) in &tensors {
            weight_map.insert(tensor.clone(), name.clone().into());
        }
        let (header, _, data) = safetensors_header(tensors);
        let len = (header.len() + data) as u64;
        (total, headers) = (total + len, headers + header.len() as u64);
        let record = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        announced.push(record.clone());
        weights.push(Box::new(HeaderOnly { name, header, len, announced: record }));
    }
    let config = serde_json::json!({
        "model_type": "llama", "hidden_size": d, "intermediate_size": d_mlp, "num_attention_heads": 32,
        "num_key_value_heads": 8, "num_hidden_layers": layers, "vocab_size": vocab, "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0, "max_position_embeddings": 8192, "tie_word_embeddings": false,
        "bos_token_id": 128000, "eos_token_id": 128001
    });
    let files = headprint::weights::ModelFiles {
        config_json: Some(config.to_string()),
        tokenizer_json: None,
        index_json: Some(serde_json::json!({"weight_map": weight_map}).to_string()),
        weights,
    };
    let model = headprint::model::ModelStream::open(&files).expect("a real Llama-3-8B layout opens");
    assert_eq!(model.config.layers, 32);
    let planned: u64 =
        announced.iter().map(|a| a.lock().unwrap().iter().map(|r| r.end - r.start).sum::<u64>()).sum::<u64>() + headers;
    // Both vocabularies' matrices, the four attention projections and two norms of every
    // layer, and the final norm, in bf16.
    let per_layer = 2 * (2 * d * d + 2 * d_kv * d + 2 * d) as u64;
    let expected = 2 * (2 * vocab * d) as u64 + layers as u64 * per_layer + 2 * d as u64;
    assert_eq!(planned, expected + headers, "the fingerprint reads the embeddings, attention and norms, no MLP");
    assert!(planned <= 5_500_000_000, "{planned} bytes of {total}");
    eprintln!("Llama-3-8B's fingerprint reads {planned} of {total} bytes");
}

#[test]
fn the_pages_worker_opens_a_model_by_link_with_the_local_files_numbers() {
    use headprint::backend::BackendChoice;
    use headprint::weights::{ByteSource, MemorySource};
    use headprint::worker::protocol::{LinkSource, Reply, Request};
    use headprint::worker::session::Session;

    let hub = Imitation::start();
    let folder = fixture("pythia-hub");
    let commit = hub.add_folder("test-org/pythia", "main", &folder);
    let load = |link: Option<LinkSource>, files: Vec<Box<dyn ByteSource>>, names: Vec<String>| {
        let mut session = Session::new(|| 0.0).with_transport(|| Box::new(hub_imitation::TcpTransport::default()));
        let request =
            Request::Load { model: 1, names, analyse: true, prepend_bos: true, backend: BackendChoice::Cpu, link };
        match session.handle(request, files, std::rc::Rc::new(|_| {})) {
            Ok(Reply::Analysed(analysis)) => analysis,
            Ok(_) => panic!("an unexpected reply"),
            Err(e) => panic!("the load failed: {e}"),
        }
    };
    let source = LinkSource { link: "hf:test-org/pythia".into(), hub: hub.hub.clone(), offline: false };
    let by_link = load(Some(source), Vec::new(), Vec::new());
    let names = ["config.json", "model.safetensors"];
    let files = names
        .iter()
        .map(|n| Box::new(MemorySource::new(*n, std::fs::read(folder.join(n)).unwrap())) as Box<dyn ByteSource>)
        .collect();
    let by_files = load(None, files, names.iter().map(|n| n.to_string()).collect());
    let pinned = by_link.info.link.as_ref().expect("the pinned link is reported");
    assert_eq!(pinned.pinned, format!("hf:test-org/pythia@{commit}"));
    assert_eq!(serde_json::to_value(&by_link.folded).unwrap(), serde_json::to_value(&by_files.folded).unwrap());
    assert_eq!(serde_json::to_value(&by_link.induction).unwrap(), serde_json::to_value(&by_files.induction).unwrap());
}

#[test]
fn a_worker_given_a_store_keeps_what_it_fetched_and_reopens_offline_from_it() {
    use headprint::backend::BackendChoice;
    use headprint::weights::remote::DiskCache;
    use headprint::worker::protocol::{LinkSource, Reply, Request};
    use headprint::worker::session::Session;

    let hub = Imitation::start();
    let commit = hub.add_folder("test-org/gpt2", "main", &fixture("gpt2"));
    let store = scratch("worker-store");
    let load = |link: &str, offline: bool| {
        let mut session = Session::new(|| 0.0).with_transport(|| Box::new(hub_imitation::TcpTransport::default()));
        session.keep_links_in(Box::new(DiskCache::new(store.clone())));
        let link = Some(LinkSource { link: link.into(), hub: hub.hub.clone(), offline });
        let request = Request::Load {
            model: 1,
            names: Vec::new(),
            analyse: true,
            prepend_bos: true,
            backend: BackendChoice::Cpu,
            link,
        };
        match session.handle(request, Vec::new(), std::rc::Rc::new(|_| {})) {
            Ok(Reply::Analysed(analysis)) => Ok(analysis),
            Ok(_) => panic!("an unexpected reply"),
            Err(e) => Err(e.to_string()),
        }
    };
    let online = load("hf:test-org/gpt2", false).expect("the first open");
    let served = hub.log().len();
    // Offline, the branch resolves to the commit the store remembers, and every byte the
    // analysis reads (the probe's MLPs too) comes from the store.
    let offline = load("hf:test-org/gpt2", true).expect("the offline open");
    assert_eq!(hub.log().len(), served, "offline, no request reaches the server");
    assert_eq!(offline.info.link.as_ref().unwrap().pinned, format!("hf:test-org/gpt2@{commit}"));
    assert_eq!(serde_json::to_value(&offline.folded).unwrap(), serde_json::to_value(&online.folded).unwrap());
    assert_eq!(serde_json::to_value(&offline.induction).unwrap(), serde_json::to_value(&online.induction).unwrap());
    // Without the store's bytes, offline is one line that says what is missing.
    let elsewhere = load("hf:test-org/other", true).expect_err("nothing is stored of it");
    assert!(
        elsewhere.starts_with("offline: hf:test-org/other") && elsewhere.contains("not stored here"),
        "{elsewhere}"
    );
}

/// The CLI as `run` starts it, killed if it has not finished within `bound`: a network fault
/// must cost retries, never a run that hangs.
fn run_within(
    hub: &Imitation,
    home: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    bound: std::time::Duration,
) -> (bool, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_headprint"));
    command
        .args(args)
        .env("HF_ENDPOINT", &hub.hub)
        .env("HEADPRINT_CACHE", home.join("headprint"))
        .env("HF_HUB_CACHE", home.join("hf-empty"))
        .env_remove("HF_TOKEN")
        .env_remove("HUGGING_FACE_HUB_TOKEN")
        .env_remove("HF_HUB_OFFLINE")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command.spawn().expect("runs");
    let started = std::time::Instant::now();
    while child.try_wait().expect("waits").is_none() {
        if started.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            panic!("`headprint {}` still ran after {bound:?}", args.join(" "));
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().expect("its output");
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

/// Statuses a CDN answers while it restarts or is overloaded.
const TRANSIENT: [(u16, &str); 5] = [
    (503, "503 (service unavailable)"),
    (500, "500 (internal server error)"),
    (502, "502 (bad gateway)"),
    (504, "504 (gateway timeout)"),
    (408, "408 (request timeout)"),
];

#[test]
fn transient_statuses_are_asked_again_and_give_the_local_numbers() {
    let folder = fixture("gpt2");
    let expected = local(&["fingerprint", folder.to_str().unwrap(), "--json"]);
    for (status, named) in TRANSIENT {
        let hub = Imitation::start();
        hub.add_folder("test-org/gpt2", "main", &folder);
        {
            let mut faults = hub.faults();
            faults.transient_every = 2;
            faults.transient_status = status;
        }
        let home = scratch(&format!("transient-{status}"));
        let bound = std::time::Duration::from_secs(60);
        let (ok, stdout, stderr) = run_within(&hub, &home, &["fingerprint", "hf:test-org/gpt2", "--json"], &[], bound);
        assert!(ok, "{status}: {stderr}");
        let report: Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(without_link(report), expected, "{status}: the local numbers, bit for bit");
        let log = hub.log();
        let faulted = log.iter().filter(|e| e.status == status).count();
        assert!(faulted >= 2, "{status}: every second byte request failed ({faulted} did)");
        assert!(stderr.contains(&format!("note: the server answered {named}; asked again")), "{status}: {stderr}");
        // Every range that failed was asked again, the same bytes.
        for (i, entry) in log.iter().enumerate().filter(|(_, e)| e.status == status) {
            assert!(
                log[i + 1..].iter().any(|later| later.range == entry.range && later.status != status),
                "{status}: {:?} was not asked again",
                entry.range
            );
        }
        let _ = std::fs::remove_dir_all(home);
    }
}

#[test]
fn a_server_that_keeps_failing_is_named_with_its_status_and_the_tries() {
    let folder = fixture("gpt2");
    let hub = Imitation::start();
    hub.add_folder("test-org/gpt2", "main", &folder);
    {
        let mut faults = hub.faults();
        faults.transient_every = 1;
        faults.transient_status = 503;
    }
    let home = scratch("transient-always");
    let bound = std::time::Duration::from_secs(60);
    let (ok, stdout, stderr) = run_within(&hub, &home, &["fingerprint", "hf:test-org/gpt2"], &[], bound);
    assert!(!ok && stdout.is_empty());
    let error = stderr.lines().last().unwrap_or_default();
    assert_eq!(
        error,
        "headprint: hf:test-org/gpt2/model.safetensors: the server answered 503 (service unavailable); tried 4 times",
        "{stderr}"
    );
    assert_eq!(hub.log().iter().filter(|e| e.status == 503).count(), 4, "one try and three retries");

    // A Retry-After longer than headprint waits is an error that says how long, at once.
    hub.faults().transient_retry_after = Some(1000);
    let (ok, _, stderr) = run_within(&hub, &home, &["fingerprint", "hf:test-org/gpt2"], &[], bound);
    assert!(!ok);
    let error = stderr.lines().last().unwrap_or_default();
    assert!(error.ends_with("the server answered 503 (service unavailable) and asks to wait 1000 s"), "{stderr}");
    let _ = std::fs::remove_dir_all(home);
}

/// The imitation's TCP client, recording the waits the client asks for instead of sleeping.
struct RecordedWaits {
    inner: hub_imitation::TcpTransport,
    waits: std::sync::Arc<std::sync::Mutex<Vec<f64>>>,
}

impl headprint::weights::remote::Transport for RecordedWaits {
    fn get(
        &self,
        url: &str,
        range: Option<(u64, u64)>,
        authorization: Option<&str>,
    ) -> std::io::Result<headprint::weights::remote::Response> {
        self.inner.get(url, range, authorization)
    }
    fn wait(&self, seconds: f64) {
        self.waits.lock().unwrap().push(seconds);
    }
}

#[test]
fn retry_after_is_honoured_and_backoff_doubles_without_it() {
    use headprint::weights::remote::{Client, ModelLink, NoCache, Opener, Patience};
    let folder = fixture("gpt2");
    let local_bytes = std::fs::read(folder.join("model.safetensors")).unwrap();
    for (retry_after, every) in [(Some(7), 2), (None, 1)] {
        let hub = Imitation::start();
        hub.add_folder("test-org/gpt2", "main", &folder);
        {
            let mut faults = hub.faults();
            faults.transient_every = every;
            faults.transient_status = 503;
            faults.transient_retry_after = retry_after;
        }
        let waits = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let transport = RecordedWaits { inner: hub_imitation::TcpTransport::default(), waits: waits.clone() };
        let client = std::sync::Arc::new(Client::new(Box::new(transport), &hub.hub, None, Patience::default()));
        let cache = NoCache { budget: 1 << 30 };
        let opener = Opener::new(client.clone(), &cache, &hub.hub);
        let opened = opener.open(&ModelLink::parse("hf:test-org/gpt2").unwrap());
        match retry_after {
            Some(seconds) => {
                let opened = opened.expect("a 503 on every second request is waited out");
                let file = &opened.files.weights[0];
                // In three reads, each its own request, each byte compared with the local file's.
                let third = local_bytes.len() / 3;
                let mut read = Vec::new();
                for (offset, len) in [(0, third), (third, third), (2 * third, local_bytes.len() - 2 * third)] {
                    read.extend(file.read_range(offset as u64, len).expect("read through the 503s"));
                }
                assert!(read == local_bytes, "the bytes read equal the local file's");
                let waits = waits.lock().unwrap().clone();
                assert!(!waits.is_empty() && waits.iter().all(|&w| w == seconds as f64), "{waits:?}");
                assert!(client.notes().iter().any(|n| n.contains("503 (service unavailable); asked again")));
            }
            None => {
                let error = opened.err().expect("a 503 on every request gives up").to_string();
                assert!(error.ends_with("the server answered 503 (service unavailable); tried 4 times"), "{error}");
                assert_eq!(*waits.lock().unwrap(), vec![0.5, 1.0, 2.0], "backoff doubles from 0.5 s");
            }
        }
    }
}

#[test]
fn a_stalled_body_is_abandoned_and_resumed_from_the_bytes_received() {
    let folder = fixture("gpt2");
    let expected = local(&["fingerprint", folder.to_str().unwrap(), "--json"]);
    let quick = [("HEADPRINT_READ_TIMEOUT", "1")];
    let bound = std::time::Duration::from_secs(60);

    let hub = Imitation::start();
    hub.add_folder("test-org/gpt2", "main", &folder);
    // The first two ranged answers stall halfway: the 8 bytes that give the header's length, then
    // their resumption.
    hub.faults().stalls = 2;
    let home = scratch("stall");
    let (ok, stdout, stderr) = run_within(&hub, &home, &["fingerprint", "hf:test-org/gpt2", "--json"], &quick, bound);
    assert!(ok, "{stderr}");
    assert_eq!(without_link(serde_json::from_str(&stdout).unwrap()), expected, "the local numbers, bit for bit");
    let log = hub.log();
    let stalled: Vec<&Logged> = log.iter().filter(|e| e.origin == Origin::Cdn && e.range.is_some()).take(2).collect();
    for entry in &stalled {
        let (first, last) = asked(entry).unwrap();
        let half = (last + 1 - first) / 2;
        assert_eq!(entry.sent, half, "the imitation stalled after half: {entry:?}");
        let resumed = log.iter().any(|e| asked(e) == Some((first + half, last)));
        assert!(resumed, "the rest of {first}-{last} is asked from byte {}: {log:?}", first + half);
        assert!(
            stderr.contains(&format!(
                "note: the connection stalled (no byte for 1 s) reading hf:test-org/gpt2/model.safetensors; resumed at byte {}",
                first + half
            )),
            "{stderr}"
        );
    }
    let _ = std::fs::remove_dir_all(home);

    // A server that accepts the connection and never answers: asked again after the timeout.
    let hub = Imitation::start();
    hub.add_folder("test-org/gpt2", "main", &folder);
    hub.faults().silences = 2;
    let home = scratch("silence");
    let (ok, stdout, stderr) = run_within(&hub, &home, &["fingerprint", "hf:test-org/gpt2", "--json"], &quick, bound);
    assert!(ok, "{stderr}");
    assert_eq!(without_link(serde_json::from_str(&stdout).unwrap()), expected);
    assert!(stderr.contains("note: the server did not answer within 1 s; asked again"), "{stderr}");
    assert_eq!(hub.log().iter().filter(|e| e.status == 0).count(), 2, "two requests went unanswered");
    let _ = std::fs::remove_dir_all(home);

    // A server that stalls every time: four tries, then one line that says so.
    let hub = Imitation::start();
    hub.add_folder("test-org/gpt2", "main", &folder);
    hub.faults().stalls = 1000;
    let home = scratch("stall-always");
    let (ok, stdout, stderr) = run_within(&hub, &home, &["fingerprint", "hf:test-org/gpt2"], &quick, bound);
    assert!(!ok && stdout.is_empty());
    let error = stderr.lines().last().unwrap_or_default();
    assert!(
        error.starts_with(
            "headprint: hf:test-org/gpt2/model.safetensors: the connection stalled 4 times (no byte for 1 s)"
        ),
        "{stderr}"
    );
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn the_read_timeout_is_read_from_the_environment_or_refused_in_one_line() {
    let hub = Imitation::start();
    let home = scratch("bad-timeout");
    for bad in ["soon", "0", "-3", "1e9"] {
        let (ok, _, stderr) =
            run(&hub, &home, &["fingerprint", "hf:test-org/gpt2"], &[("HEADPRINT_READ_TIMEOUT", bad)]);
        assert!(!ok);
        assert_eq!(
            stderr.trim_end(),
            format!(
                "headprint: HEADPRINT_READ_TIMEOUT must be a number of seconds above 0 and at most 3600, not `{bad}`"
            )
        );
    }
    assert!(hub.log().is_empty(), "nothing is asked with a timeout that makes no sense");
}

/// The page's pool on a first open of GPT-2 Small by link, replayed natively in the order
/// `crates/web/src/ui/pool.rs` asks: the lead opens the link and a helper the pinned link, then
/// the lead alone computes the Grams, every layer's heads and the induction probe (a model the
/// page's store does not hold whole), keeping what it fetched as the page's `Blob`s do. Until
/// the overview is complete, each byte is fetched once: at most the file, with the small files
/// and header the helper fetches. Prints the bytes of each stage.
#[test]
fn a_first_open_by_link_in_the_pool_fetches_each_byte_of_gpt2_small_once() {
    use headprint::analysis::Mode;
    use headprint::backend::BackendChoice;
    use headprint::weights::remote::DiskCache;
    use headprint::worker::pool::GramSum;
    use headprint::worker::protocol::{GramsData, LinkSource, Reply, Request, Role};
    use headprint::worker::session::Session;
    use headprint::worker::stages::default_sequence;

    let files = gpt2_small();
    let size = files.iter().map(|(_, bytes)| bytes.len() as u64).sum::<u64>();
    let hub = Imitation::start();
    hub.add_commit("openai-community/gpt2", "main", files);
    let home = scratch("pool-bytes");
    let mut workers: Vec<Session> = (0..2)
        .map(|w| {
            let mut session = Session::new(|| 0.0).with_transport(|| Box::new(hub_imitation::TcpTransport::default()));
            session.keep_links_in(Box::new(DiskCache::new(home.join(format!("worker-{w}")))));
            session
        })
        .collect();
    let quiet = || -> headprint::worker::session::Reporter { std::rc::Rc::new(|_| {}) };
    let mut ask = |w: usize, request: Request| -> Reply {
        workers[w].handle(request, Vec::new(), quiet()).unwrap_or_else(|e| panic!("worker {w}: {e}"))
    };
    let mut stages: Vec<(String, u64)> = Vec::new();
    let mut sent = hub.bytes_sent();
    let mut stage = |name: &str| {
        let now = hub.bytes_sent();
        stages.push((name.to_string(), now - sent));
        sent = now;
    };
    let model = 1;
    let link = |given: &str| Some(LinkSource { link: given.into(), hub: hub.hub.clone(), offline: false });
    let Reply::Opened { info, tied, segments, .. } =
        ask(0, Request::Open { model, names: Vec::new(), role: Role::Lead, link: link("hf:openai-community/gpt2") })
    else {
        panic!("the lead did not open the model")
    };
    stage("the lead opens the link");
    let pinned = info.link.as_ref().unwrap().pinned.clone();
    ask(1, Request::Open { model, names: Vec::new(), role: Role::Helper, link: link(&pinned) });
    stage("the helper opens the pinned link");
    let mut sum = GramSum::new(info.config.d_model, tied, segments);
    for segment in 0..segments {
        let Reply::GramSegment { grams, .. } = ask(0, Request::GramSegment { model, segment }) else { panic!() };
        sum.add(segment, grams.grams().unwrap()).unwrap();
    }
    let grams = GramsData::of(&sum.finish().unwrap());
    for w in 0..2 {
        ask(w, Request::SetGrams { model, grams: grams.clone() });
    }
    stage("the Grams, on the lead");
    for layer in 0..info.config.layers {
        let request = Request::FingerprintLayer { model, mode: Mode::Folded, layer, backend: BackendChoice::Cpu };
        let Reply::Heads { .. } = ask(0, request) else { panic!("no heads for layer {layer}") };
    }
    stage("every layer's heads, on the lead");
    let sequence = default_sequence(&info.config);
    let probe = Request::InductionShare {
        model,
        sequence,
        prepend_bos: true,
        share: 0,
        shares: 1,
        backend: BackendChoice::Cpu,
    };
    let Reply::InductionShare(_) = ask(0, probe) else { panic!() };
    stage("the induction probe, on the lead");
    let total: u64 = stages.iter().map(|(_, bytes)| bytes).sum();
    for (name, bytes) in &stages {
        eprintln!("{name}: {:.1} MB", *bytes as f64 / 1e6);
    }
    eprintln!("until the overview: {:.1} MB of a {:.1} MB file", total as f64 / 1e6, size as f64 / 1e6);
    let helper = stages[1].1;
    assert!(helper < 100_000, "the helper fetches its small files and the header only: {helper} bytes");
    assert!(total <= size + helper, "{total} bytes fetched until the overview, of a {size}-byte file");
    let _ = std::fs::remove_dir_all(home);
}
