//! `headprint timeline` against the Hub imitation serving several revisions of one repository:
//! every series entry is the single-revision `fingerprint` / `probe` number bit for bit, a
//! missing revision is one line on its row, the fingerprint fetches no MLP byte, the cache keeps
//! every revision, and local checkpoints work the same way.

use crate::common;
use crate::hub_imitation;

use std::path::Path;

use crate::hub::{asked, json_of, run, scratch, tensor_ranges};
use common::{fixture, with_zeroed_tensor};
use hub_imitation::{Imitation, Origin};
use serde_json::Value;

const REPO: &str = "test-org/ckpt";

/// The gpt2 fixture's files with `zeroed` (a tensor name) set to zero in its weights.
pub fn gpt2_with(zeroed: Option<&str>) -> Vec<(String, Vec<u8>)> {
    let folder = fixture("gpt2");
    ["config.json", "tokenizer.json", "model.safetensors"]
        .iter()
        .map(|name| {
            let bytes = match (*name, zeroed) {
                ("model.safetensors", Some(tensor)) => with_zeroed_tensor("gpt2", tensor),
                _ => std::fs::read(folder.join(name)).unwrap(),
            };
            (name.to_string(), bytes)
        })
        .collect()
}

/// Three checkpoints that differ: at step0 layer 1's output projection is zero (its heads' OV
/// circuits cannot be read), at step1000 layer 0's attention biases are zero (the same
/// fingerprint, another probe), at step143000 the fixture itself. Returns each step's commit.
fn checkpoints(hub: &Imitation) -> Vec<(u64, String)> {
    [(0, Some("transformer.h.1.attn.c_proj.weight")), (1000, Some("transformer.h.0.attn.c_attn.bias")), (143000, None)]
        .into_iter()
        .map(|(step, zeroed)| (step, hub.add_commit(REPO, &format!("step{step}"), gpt2_with(zeroed))))
        .collect()
}

/// Every series entry of revision `index` against the single-revision reports: the fingerprint
/// JSON's field at the series' path, and the probe's head scores, bit for bit.
fn assert_series_equal(timeline: &Value, index: usize, fingerprint: &Value, probe: Option<&Value>, what: &str) {
    let heads = timeline["heads"].as_array().unwrap();
    assert_eq!(heads.len(), fingerprint["heads"].as_array().unwrap().len(), "{what}: heads");
    let mut compared = 0;
    for head in heads {
        let (layer, number) = (&head["layer"], &head["head"]);
        let single =
            fingerprint["heads"].as_array().unwrap().iter().find(|h| &h["layer"] == layer && &h["head"] == number);
        let single = single.unwrap_or_else(|| panic!("{what}: L{layer}H{number} in the fingerprint"));
        let scores = probe.map(|p| {
            p["heads"].as_array().unwrap().iter().find(|h| &h["layer"] == layer && &h["head"] == number).unwrap()
        });
        for (path, values) in head["series"].as_object().unwrap() {
            let got = &values[index];
            let want = match scores {
                Some(scores) if scores.get(path).is_some() => &scores[path],
                _ => {
                    let (circuit, field) = ["qk_token", "ov_residual", "qk", "ov"]
                        .iter()
                        .find_map(|c| path.strip_prefix(&format!("{c}_")).map(|f| (*c, f)))
                        .unwrap_or_else(|| panic!("{what}: a series `{path}` of no circuit"));
                    &single[circuit][field]
                }
            };
            assert_eq!(got, want, "{what}: L{layer}H{number} {path}");
            if let (Some(g), Some(w)) = (got.as_f64(), want.as_f64()) {
                assert_eq!(g.to_bits(), w.to_bits(), "{what}: L{layer}H{number} {path}");
            }
            compared += 1;
        }
    }
    assert!(compared >= heads.len() * 20, "{what}: {compared} entries compared");
}

#[test]
fn each_revision_equals_fingerprint_and_probe_of_that_revision_alone_and_a_missing_one_is_its_rows_line() {
    let hub = Imitation::start();
    let commits = checkpoints(&hub);
    let home = scratch("timeline-equal");
    let probe_args = ["--len", "10", "--sequences", "2"];
    let mut args = vec!["timeline", "hf:test-org/ckpt", "--steps", "0,999,1000,143000", "--probe", "--json"];
    args.extend(probe_args);
    let timeline = json_of(run(&hub, &home, &args, &[]));

    assert_eq!(timeline["model"], "hf:test-org/ckpt");
    let revisions = timeline["revisions"].as_array().unwrap();
    let steps: Vec<u64> = revisions.iter().map(|r| r["step"].as_u64().unwrap()).collect();
    assert_eq!(steps, vec![0, 999, 1000, 143000]);
    let names: Vec<&str> = revisions.iter().map(|r| r["revision"].as_str().unwrap()).collect();
    assert_eq!(names, vec!["step0", "step999", "step1000", "step143000"]);
    let good = [(0, &commits[0]), (2, &commits[1]), (3, &commits[2])];
    for (index, (_, commit)) in good {
        assert_eq!(revisions[index]["commit"], commit.as_str(), "revision {index} is pinned to its commit");
    }

    // The missing revision: no commit, one line on its row, a null at its place in every series.
    assert!(revisions[1]["commit"].is_null());
    let row = &timeline["table"][1];
    let error = row["error"].as_str().expect("the missing revision's row says why");
    assert!(error.contains("hf:test-org/ckpt@step999") && error.contains("not found on the server"), "{error}");
    assert_eq!(error.lines().count(), 1, "{error}");
    assert!(row.get("mean_qk_imaginary_fraction").is_none(), "{row}");
    for head in timeline["heads"].as_array().unwrap() {
        for (path, values) in head["series"].as_object().unwrap() {
            assert_eq!(values.as_array().unwrap().len(), 4, "{path}");
            assert!(values[1].is_null(), "{path} at the missing revision");
        }
    }

    // Every other revision: the single-revision reports of the same link, bit for bit.
    for (index, (step, _)) in good {
        let link = format!("hf:{REPO}@step{step}");
        let fingerprint = json_of(run(&hub, &home, &["fingerprint", &link, "--json"], &[]));
        let mut probe_run = vec!["probe", link.as_str(), "--induction", "--json"];
        probe_run.extend(probe_args);
        let probe = json_of(run(&hub, &home, &probe_run, &[]));
        assert_series_equal(&timeline, index, &fingerprint, Some(&probe), &link);
        // The study's row is `compare`'s for that revision.
        let mut compare_run = vec!["compare", link.as_str(), "--json"];
        compare_run.extend(probe_args);
        let compared = json_of(run(&hub, &home, &compare_run, &[]));
        let row = &timeline["table"][index];
        for key in ["model", "mean_qk_imaginary_fraction", "induction_heads", "prefix_copy_accuracy", "sequence", "bos"]
        {
            assert_eq!(row[key], compared["models"][0][key], "{link}: {key}");
        }
        assert!(row["error"].is_null(), "{row}");
    }

    // The three checkpoints differ where they were made to: layer 1's OV is unreadable at step0
    // only, and the attention biases change the probe, never the fingerprint.
    let l1h0 = timeline["heads"].as_array().unwrap().iter().find(|h| h["layer"] == 1 && h["head"] == 0).unwrap();
    let ov = &l1h0["series"]["ov_copying_score"];
    assert!(ov[0].is_null() && ov[2].is_number() && ov[3].is_number(), "{ov}");
    let l0h0 = timeline["heads"].as_array().unwrap().iter().find(|h| h["layer"] == 0 && h["head"] == 0).unwrap();
    assert_eq!(l0h0["series"]["qk_copying_score"][2], l0h0["series"]["qk_copying_score"][3]);
    let induction = timeline["heads"].as_array().unwrap().iter().map(|h| &h["series"]["induction_score"]);
    assert!(induction.clone().any(|s| s[2] != s[3]), "the biases move some head's induction score");

    // The text table: one line per revision, the missing one's line its error.
    let (ok, stdout, stderr) = run(&hub, &home, &["timeline", "hf:test-org/ckpt", "--steps", "0,999,1000,143000"], &[]);
    assert!(ok, "{stderr}");
    let missing: Vec<&str> = stdout.lines().filter(|l| l.starts_with("step999 ")).collect();
    assert_eq!(missing.len(), 1, "{stdout}");
    assert!(missing[0].contains("error: hf:test-org/ckpt@step999: ") && missing[0].contains("not found"), "{stdout}");
    let _ = std::fs::remove_dir_all(home);
}

/// The inclusive byte span each CDN request of the log asked for.
fn weight_requests(hub: &Imitation) -> Vec<(String, u64, u64)> {
    hub.log()
        .into_iter()
        .filter(|e| e.origin == Origin::Cdn)
        .map(|e| {
            let (first, last) = asked(&e).expect("every weight request asks for one range");
            (e.path, first, last)
        })
        .collect()
}

#[test]
fn a_timeline_fetches_each_revisions_fingerprint_bytes_once_and_no_mlp_byte_without_the_probe() {
    let hub = Imitation::start();
    let commits = checkpoints(&hub);
    let home = scratch("timeline-economy");
    let timeline =
        json_of(run(&hub, &home, &["timeline", "hf:test-org/ckpt", "--steps", "0,1000,143000", "--json"], &[]));
    let mlp = tensor_ranges(&gpt2_with(None)[2].1, |name| name.contains(".mlp."));
    let requests = weight_requests(&hub);
    for (_, commit) in &commits {
        assert!(requests.iter().any(|(path, ..)| path.contains(commit.as_str())), "revision {commit} was read");
    }
    for (path, first, last) in &requests {
        assert!(
            mlp.iter().all(|&(start, end)| *last < start || *first >= end),
            "the fingerprint asked for an MLP weight's bytes: {path} {first}-{last}"
        );
    }
    // Each revision costs what a fingerprint of it alone costs, in a fresh cache.
    let rows = timeline["table"].as_array().unwrap();
    let mut total = 0;
    for (row, (step, _)) in rows.iter().zip(&commits) {
        let fetched = row["model_link"]["bytes_fetched"].as_u64().unwrap();
        let alone = scratch(&format!("timeline-alone-{step}"));
        let single = json_of(run(&hub, &alone, &["fingerprint", &format!("hf:{REPO}@step{step}"), "--json"], &[]));
        assert_eq!(fetched, single["model_link"]["bytes_fetched"].as_u64().unwrap(), "step{step}");
        total += fetched;
        let _ = std::fs::remove_dir_all(alone);
    }
    assert!(total > 0);

    // The cache keeps every revision: the same timeline again fetches no weight byte; only each
    // branch is resolved anew, which costs its config.json, after the API's answer on its weights.
    hub.clear_log();
    let again = json_of(run(&hub, &home, &["timeline", "hf:test-org/ckpt", "--steps", "0,1000,143000", "--json"], &[]));
    let log = hub.log();
    let resolved = |e: &hub_imitation::Logged| e.path.ends_with("/config.json") || e.path.starts_with("/api/models/");
    assert!(log.iter().all(|e| e.origin == Origin::Hub && resolved(e)), "{log:?}");
    let config = gpt2_with(None)[0].1.len() as u64;
    for row in again["table"].as_array().unwrap() {
        assert_eq!(row["model_link"]["bytes_fetched"], config, "{row}");
    }
    assert_eq!(again["heads"], timeline["heads"]);

    // The probe is what reads the MLPs.
    hub.clear_log();
    let args = ["timeline", "hf:test-org/ckpt", "--steps", "143000", "--probe", "--len", "6", "--json"];
    json_of(run(&hub, &home, &args, &[]));
    let requests = weight_requests(&hub);
    let reads_mlp = |&(start, end): &(u64, u64)| requests.iter().any(|(_, first, last)| *first < end && *last >= start);
    assert!(mlp.iter().all(reads_mlp), "--probe reads every MLP tensor");
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn a_revision_with_an_earlier_revisions_weights_is_never_fetched_and_reuses_its_numbers() {
    let hub = Imitation::start();
    // step1 and step2 serve byte-identical weights under two commits, as Pythia's later
    // branches do; step3 differs.
    let step1 = hub.add_commit(REPO, "step1", gpt2_with(None));
    let step2 = hub.add_commit(REPO, "step2", gpt2_with(None));
    hub.add_commit(REPO, "step3", gpt2_with(Some("transformer.h.0.attn.c_attn.bias")));
    let home = scratch("timeline-repeats");
    let args = ["timeline", "hf:test-org/ckpt", "--steps", "1,2,3", "--probe", "--len", "6", "--sequences", "2"];
    let timeline = json_of(run(&hub, &home, &[&args[..], &["--json", "--backend", "cpu"]].concat(), &[]));

    // Nothing of step2 is asked for but its API entry: no config, no weight byte.
    let log = hub.log();
    assert!(log.iter().any(|e| e.origin == Origin::Cdn && e.path.contains(&step1)), "step1 is read");
    let of_step2: Vec<&str> = log.iter().filter(|e| e.path.contains(&step2)).map(|e| e.path.as_str()).collect();
    assert!(of_step2.is_empty(), "step2 was fetched: {of_step2:?}");
    let asked: Vec<&str> = log.iter().filter(|e| e.path.contains("/step2")).map(|e| e.path.as_str()).collect();
    assert!(!asked.is_empty() && asked.iter().all(|p| p.starts_with("/api/models/")), "{asked:?}");

    // It is marked, at its own commit, and its numbers are step1's.
    let revisions = timeline["revisions"].as_array().unwrap();
    assert_eq!(revisions[1]["same_weights_as"], "step1");
    assert_eq!(revisions[1]["commit"], step2.as_str());
    assert!(revisions[0].get("same_weights_as").is_none() && revisions[2].get("same_weights_as").is_none());
    let table = timeline["table"].as_array().unwrap();
    assert_eq!(table[1]["same_weights_as"], "step1");
    for key in ["mean_qk_imaginary_fraction", "induction_heads", "prefix_copy_accuracy"] {
        assert_eq!(table[1][key], table[0][key], "{key}");
    }
    assert_eq!(table[1]["model"], format!("hf:{REPO}@{step2}"), "the row names its own commit");
    let mut compared = 0;
    for head in timeline["heads"].as_array().unwrap() {
        for (path, values) in head["series"].as_object().unwrap() {
            assert_eq!(values[1], values[0], "{path}");
            compared += 1;
        }
    }
    assert!(compared >= 96, "every head's every series: {compared}");
    let induction = timeline["heads"].as_array().unwrap().iter().map(|h| &h["series"]["induction_score"]);
    assert!(induction.clone().any(|s| s[2] != s[0]), "step3 is computed: its biases move the probe");

    // The table marks it; a rerun from the cache finds it so again.
    let (ok, stdout, stderr) = run(&hub, &home, &args, &[]);
    assert!(ok, "{stderr}");
    let line = stdout.lines().find(|l| l.starts_with("step2 ")).unwrap_or_default();
    assert!(line.ends_with("= step1 (same weights)"), "{stdout}");
    assert!(stdout.lines().filter(|l| l.contains("(same weights)")).count() == 1, "{stdout}");
    let _ = std::fs::remove_dir_all(home);
}

/// What the page's Heads over training asks a worker before opening a revision: the Hub's
/// commit and weights' hash, the same identity for two branches of byte-identical weights, and
/// not a byte of either's files.
#[test]
fn a_worker_says_what_the_hub_publishes_of_a_revision_without_reading_its_files() {
    use headprint::repeats::identity;
    use headprint::worker::protocol::{LinkSource, Reply, Request};
    use headprint::worker::session::Session;

    let hub = Imitation::start();
    let step1 = hub.add_commit(REPO, "step1", gpt2_with(None));
    let step2 = hub.add_commit(REPO, "step2", gpt2_with(None));
    hub.add_commit(REPO, "step3", gpt2_with(Some("transformer.h.0.attn.c_attn.bias")));
    let mut session = Session::new(|| 0.0).with_transport(|| Box::new(hub_imitation::TcpTransport::default()));
    let mut ask = |revision: &str| {
        let link = LinkSource { link: format!("hf:{REPO}@{revision}"), hub: hub.hub.clone(), offline: false };
        match session.handle(Request::Published { link }, Vec::new(), std::rc::Rc::new(|_| {})) {
            Ok(Reply::Published(published)) => published,
            other => panic!("{revision}: {other:?}"),
        }
    };
    let (first, second, third) = (ask("step1"), ask("step2"), ask("step3"));
    assert_eq!((first.commit.as_str(), second.commit.as_str()), (step1.as_str(), step2.as_str()));
    assert!(identity(Some(&first)).is_some());
    assert_eq!(identity(Some(&first)), identity(Some(&second)));
    assert_ne!(identity(Some(&first)), identity(Some(&third)));
    let log = hub.log();
    assert!(log.iter().all(|e| e.origin == Origin::Hub && e.path.starts_with("/api/models/")), "{log:?}");
}

#[test]
fn local_checkpoints_are_revisions_named_by_their_folders() {
    let home = scratch("timeline-local");
    let mut folders = Vec::new();
    for (step, zeroed) in [(0, Some("transformer.h.1.attn.c_proj.weight")), (512, None)] {
        let folder = home.join(format!("step{step}"));
        std::fs::create_dir_all(&folder).unwrap();
        for (name, bytes) in gpt2_with(zeroed) {
            std::fs::write(folder.join(name), bytes).unwrap();
        }
        folders.push(folder.to_str().unwrap().to_string());
    }
    let mut args = vec!["timeline", "--json", "--backend", "cpu"];
    args.extend(folders.iter().map(String::as_str));
    let timeline = common::json(&args);
    assert_eq!(timeline["model"], home.to_str().unwrap());
    for (index, folder) in folders.iter().enumerate() {
        let revision = &timeline["revisions"][index];
        assert_eq!(revision["revision"], folder.as_str());
        assert_eq!(revision["step"], [0, 512][index]);
        assert!(revision["commit"].is_null());
        let fingerprint = common::json(&["fingerprint", folder, "--json", "--backend", "cpu"]);
        assert_series_equal(&timeline, index, &fingerprint, None, folder);
        assert!(timeline["table"][index]["induction_heads"].is_null(), "no --probe, no induction heads");
    }
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn bad_timeline_requests_are_one_readable_line_each() {
    let hub = Imitation::start();
    checkpoints(&hub);
    let home = scratch("timeline-bad");
    let gpt2 = fixture("gpt2");
    let local = gpt2.to_str().unwrap();
    let cases: [(&[&str], &str); 6] = [
        (&["timeline", local, "--steps", "0,1"], "give local checkpoints one by one"),
        (&["timeline", "hf:test-org/ckpt@step0", "--revisions", "step1000"], "without @REVISION"),
        (&["timeline", "hf:test-org/ckpt", "hf:test-org/other", "--steps", "0"], "revisions of one model by link"),
        (&["timeline", "hf:test-org/ckpt", "--revisions", "step0,,step1000"], "empty name"),
        (
            &["timeline", "hf:test-org/ckpt", "--steps", "7,8"],
            "no revision could be read; the first: hf:test-org/ckpt@step7",
        ),
        (
            &["timeline", local, "--show", "qk_no_such_thing"],
            "no series `qk_no_such_thing` in this timeline: use one of",
        ),
    ];
    for (args, message) in cases {
        let (ok, stdout, stderr) = run(&hub, &home, args, &[]);
        assert!(!ok && stdout.is_empty(), "{args:?}: {stdout}");
        assert!(stderr.starts_with("headprint: ") && stderr.contains(message), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
    }
    let (ok, _, stderr) = run(&hub, &home, &["timeline", "hf:test-org/ckpt", "--steps", "x"], &[]);
    assert!(!ok && stderr.starts_with("headprint: ") && stderr.lines().count() == 1, "{stderr}");
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn the_timeline_figure_draws_the_top_heads_by_score_and_a_table_row_per_revision() {
    let home = scratch("timeline-figure");
    let mut given = Vec::new();
    for (step, zeroed) in
        [(0, Some("transformer.h.1.attn.c_proj.weight")), (1000, Some("transformer.h.0.attn.c_attn.bias"))]
    {
        let folder = home.join(format!("step{step}"));
        std::fs::create_dir_all(&folder).unwrap();
        for (name, bytes) in gpt2_with(zeroed) {
            std::fs::write(folder.join(name), bytes).unwrap();
        }
        given.push(folder.to_str().unwrap().to_string());
    }
    given.push(fixture("gpt2").to_str().unwrap().to_string());
    given.push(home.join("step2000").to_str().unwrap().to_string());
    let probe = ["--len", "10", "--sequences", "2"];
    let mut args = vec!["timeline", "--probe", "--json"];
    args.extend(given.iter().map(String::as_str));
    args.extend(probe);
    let timeline = common::json(&args);
    // The two heads whose induction score peaks highest, by the timeline's own numbers.
    let mut peaks: Vec<(f64, String)> = timeline["heads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| {
            let peak = h["series"]["induction_score"]
                .as_array()
                .unwrap()
                .iter()
                .filter_map(Value::as_f64)
                .fold(f64::MIN, f64::max);
            (peak, format!("L{}H{}", h["layer"], h["head"]))
        })
        .collect();
    peaks.sort_by(|a, b| b.0.total_cmp(&a.0));

    let draw = |file: &str| {
        let out = home.join(file);
        let mut args = vec!["figure", "--kind", "timeline", "--top", "2", "--out", out.to_str().unwrap()];
        args.extend(given.iter().map(String::as_str));
        args.extend(probe);
        let (ok, stdout, stderr) = common::headprint(&args);
        assert!(ok && stdout.starts_with("wrote "), "{stderr}");
        std::fs::read(out).unwrap()
    };
    let svg = String::from_utf8(draw("a.svg")).unwrap();
    assert_eq!(svg.as_bytes(), draw("b.svg"), "the same figure every run");
    roxmltree::Document::parse(&svg).expect("a well-formed SVG");
    for (rank, (_, name)) in peaks.iter().enumerate() {
        // Each chosen head is named at the end of its line in both panels; the others nowhere.
        let expected = if rank < 2 { 2 } else { 0 };
        assert_eq!(svg.matches(&format!("\n{name}\n")).count(), expected, "{name} (rank {rank}): {svg}");
    }
    for name in ["step0", "step1000", "gpt2", "step2000"] {
        assert!(svg.contains(&format!("\n{name}\n")), "the table has a row {name}");
    }
    assert_eq!(svg.matches("\nerror: ").count(), 1, "the missing checkpoint's row says why");
    let png = draw("a.png");
    assert_eq!(png, draw("b.png"));
    assert!(png.starts_with(b"\x89PNG"));

    for (extra, message) in
        [(vec!["--x", "qk.nonsense"], "no series `qk_nonsense`"), (vec!["--head", "L7H0"], "unknown head `L7H0`")]
    {
        let out = home.join("bad.svg");
        let mut args = vec!["figure", "--kind", "timeline", "--out", out.to_str().unwrap()];
        args.extend(given[..1].iter().map(String::as_str));
        args.extend(extra);
        args.extend(probe);
        let (ok, _, stderr) = common::headprint(&args);
        assert!(!ok && stderr.starts_with("headprint: ") && stderr.contains(message), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
    let (ok, _, stderr) = common::headprint(&["figure", &given[0], &given[1], "--kind", "copying", "--out", "x.svg"]);
    assert!(!ok && stderr.contains("this figure takes one model; several are for --kind timeline"), "{stderr}");
    let (ok, _, stderr) =
        common::headprint(&["figure", &given[0], "--kind", "copying", "--steps", "1", "--out", "x.svg"]);
    assert!(!ok && stderr.contains("--revisions and --steps go with --kind timeline"), "{stderr}");
    let _ = std::fs::remove_dir_all(home);
}

/// Issue 36's measurement (docs/benchmarks.md, "Timeline"): eight checkpoints of a
/// Pythia-160M-shaped repository served by the imitation. Run by `scripts/bench_timeline.sh`.
#[test]
#[ignore = "a measurement of minutes that holds 1.7 GB: scripts/bench_timeline.sh runs it"]
fn pythia_160m_shaped_eight_revisions_cost_eight_fingerprints_and_no_mlp_byte() {
    use std::time::Instant;
    let hub = Imitation::start();
    let repo = "EleutherAI/pythia-160m";
    let steps = [0u64, 1, 8, 64, 512, 1000, 10000, 143000];
    let mut file_bytes = 0;
    let mut mlp_bytes = 0;
    let mut mlp = Vec::new();
    for (seed, step) in steps.iter().enumerate() {
        let files = hub_imitation::pythia_160m(seed as u64);
        file_bytes += files.iter().map(|(_, b)| b.len() as u64).sum::<u64>();
        mlp = tensor_ranges(&files[1].1, |name| name.contains(".mlp."));
        mlp_bytes += mlp.iter().map(|(start, end)| end - start).sum::<u64>();
        hub.add_commit(repo, &format!("step{step}"), files);
    }
    let list = steps.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let link = format!("hf:{repo}");
    let timed = |home: &Path, args: &[&str]| {
        let started = Instant::now();
        let report = json_of(run(&hub, home, args, &[]));
        (report, started.elapsed().as_secs_f64())
    };

    let alone_home = scratch("timeline-p160-alone");
    let (alone, alone_seconds) =
        timed(&alone_home, &["fingerprint", &format!("{link}@step0"), "--json", "--backend", "cpu"]);
    let alone_bytes = alone["model_link"]["bytes_fetched"].as_u64().unwrap();
    let _ = std::fs::remove_dir_all(alone_home);

    let home = scratch("timeline-p160");
    hub.clear_log();
    let sent_before = hub.bytes_sent();
    let (first, first_seconds) = timed(&home, &["timeline", &link, "--steps", &list, "--json", "--backend", "cpu"]);
    let sent = hub.bytes_sent() - sent_before;
    let rows = first["table"].as_array().unwrap();
    assert!(rows.iter().all(|r| r["error"].is_null()), "{rows:?}");
    let fetched: Vec<u64> = rows.iter().map(|r| r["model_link"]["bytes_fetched"].as_u64().unwrap()).collect();
    // What the client counts is every answer's body but the refusals' (the 404 of the
    // tokenizer.json these checkpoints lack) and the API's answers on each revision's weights,
    // asked before the revision is opened.
    let answered: u64 = hub
        .log()
        .iter()
        .filter(|e| (200..300).contains(&e.status) && !e.path.starts_with("/api/models/"))
        .map(|e| e.sent)
        .sum();
    assert_eq!(fetched.iter().sum::<u64>(), answered, "every byte received is counted on some revision");
    assert!(
        fetched.iter().all(|&b| b == alone_bytes),
        "each revision costs one fingerprint: {fetched:?} vs {alone_bytes}"
    );
    for (path, first, last) in weight_requests(&hub) {
        assert!(mlp.iter().all(|&(start, end)| last < start || first >= end), "an MLP byte: {path} {first}-{last}");
    }

    hub.clear_log();
    let (again, again_seconds) = timed(&home, &["timeline", &link, "--steps", &list, "--json", "--backend", "cpu"]);
    let again_bytes: u64 =
        again["table"].as_array().unwrap().iter().map(|r| r["model_link"]["bytes_fetched"].as_u64().unwrap()).sum();
    assert!(weight_requests(&hub).is_empty(), "the cache keeps every revision");
    assert_eq!(again["heads"], first["heads"]);

    hub.clear_log();
    let probe_args = ["timeline", &link, "--steps", &list, "--probe", "--json", "--backend", "cpu"];
    let (probed, probe_seconds) = timed(&home, &probe_args);
    let probe_bytes: u64 =
        probed["table"].as_array().unwrap().iter().map(|r| r["model_link"]["bytes_fetched"].as_u64().unwrap()).sum();
    assert!(probe_bytes >= mlp_bytes, "--probe fetches the MLPs: {probe_bytes} < {mlp_bytes}");
    let _ = std::fs::remove_dir_all(home);

    let mb = |b: u64| b as f64 / 1e6;
    println!(
        "TIMELINE-BENCH {}",
        serde_json::json!({
            "revisions": steps.len(),
            "files_mb_per_revision": mb(file_bytes / steps.len() as u64),
            "mlp_mb_per_revision": mb(mlp_bytes / steps.len() as u64),
            "fingerprint_alone": {"mb": mb(alone_bytes), "seconds": alone_seconds},
            "timeline_first": {"mb": mb(sent), "seconds": first_seconds},
            "timeline_cached": {"mb": mb(again_bytes), "seconds": again_seconds},
            "timeline_probe_after": {"mb": mb(probe_bytes), "seconds": probe_seconds},
        })
    );
}
