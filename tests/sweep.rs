//! `headprint sweep` against the Hub imitation: one Parquet file per unit whose rows are the
//! single-model fingerprint bit for bit, a failing unit's reason in `error` and the exit status,
//! shards (by `--shard` and by Slurm's variables) that split the units, a rerun that fetches no
//! weight byte, and a repeated checkpoint that is never fetched.

use crate::common;
use crate::hub_imitation;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use crate::hub::{json_of, run, scratch};
use crate::timeline::gpt2_with;
use common::fixture;
use headprint::sweep::sweep_columns;
use hub_imitation::{Imitation, Origin};
use parquet::file::reader::{FileReader, SerializedFileReader};
use parquet::record::Field;
use serde_json::{Value, json};

const REPO: &str = "test-org/sweep";

/// A file's column names and its rows as JSON objects.
fn rows_of(path: &Path) -> (Vec<String>, Vec<Value>) {
    let reader = SerializedFileReader::try_from(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let names = reader.metadata().file_metadata().schema_descr().columns().iter().map(|c| c.name().to_string());
    let rows = reader
        .get_row_iter(None)
        .unwrap()
        .map(|row| {
            let row = row.unwrap();
            let fields = row.get_column_iter().map(|(name, field)| {
                let value = match field {
                    Field::Null => Value::Null,
                    Field::Bool(b) => json!(b),
                    Field::Long(n) => json!(n),
                    Field::Double(x) => json!(x),
                    Field::Str(s) => json!(s),
                    other => panic!("{name}: unexpected {other:?}"),
                };
                (name.clone(), value)
            });
            Value::Object(fields.collect())
        })
        .collect();
    (names.collect(), rows)
}

fn files_in(out: &Path) -> BTreeSet<String> {
    std::fs::read_dir(out).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect()
}

/// Body bytes the CDN sent of `commit`'s weights.
fn weight_bytes(hub: &Imitation, commit: &str) -> u64 {
    hub.log()
        .iter()
        .filter(|e| e.origin == Origin::Cdn && e.path.contains(commit) && e.path.contains(".safetensors"))
        .map(|e| e.sent)
        .sum()
}

fn sweep(hub: &Imitation, home: &Path, out: &Path, args: &[&str], env: &[(&str, &str)]) -> (bool, String, String) {
    let mut all = vec!["sweep", "--out", out.to_str().unwrap(), "--backend", "cpu"];
    all.extend(args);
    // A test run under a Slurm array must not pick a shard of its own: empty counts as unset.
    let mut vars = vec![("SLURM_ARRAY_TASK_ID", ""), ("SLURM_ARRAY_TASK_COUNT", ""), ("SLURM_ARRAY_TASK_MIN", "")];
    vars.extend(env);
    run(hub, home, &all, &vars)
}

#[test]
fn sweep_rows_are_the_fingerprint_and_probe_bit_for_bit_and_a_failing_unit_says_why() {
    let hub = Imitation::start();
    let step0 = hub.add_commit(REPO, "step0", gpt2_with(Some("transformer.h.1.attn.c_proj.weight")));
    let step1000 = hub.add_commit(REPO, "step1000", gpt2_with(None));
    let home = scratch("sweep-rows");
    let out = home.join("out");
    let probe = ["--len", "10", "--sequences", "2"];
    let link = format!("hf:{REPO}");
    let mut args = vec![link.as_str(), "--steps", "0,999,1000", "--probe"];
    args.extend(probe);
    let (ok, stdout, stderr) = sweep(&hub, &home, &out, &args, &[]);
    assert!(!ok, "a failed unit fails the sweep: {stdout}");
    assert!(stderr.contains("1 of 3 units failed"), "{stderr}");
    assert!(stdout.contains("2 computed") && stdout.contains("1 failed"), "{stdout}");
    let names =
        ["test-org--sweep@step0.parquet", "test-org--sweep@step1000.parquet", "test-org--sweep@step999.parquet"];
    assert_eq!(files_in(&out), names.iter().map(|n| n.to_string()).collect(), "one file per unit, no temporary left");

    let wanted: Vec<String> = sweep_columns(true).into_iter().map(|(name, _)| name).collect();
    let (columns, failed) = rows_of(&out.join(names[2]));
    assert_eq!(columns, wanted, "a failed unit's file has every column");
    assert_eq!(failed.len(), 1);
    let error = failed[0]["error"].as_str().expect("the reason");
    assert!(error.contains(&format!("hf:{REPO}@step999")) && error.lines().count() == 1, "{error}");
    assert_eq!(
        (&failed[0]["step"], &failed[0]["layer"], &failed[0]["commit"]),
        (&json!(999), &Value::Null, &Value::Null)
    );

    for (file, step, commit) in [(names[0], 0, &step0), (names[1], 1000, &step1000)] {
        let (columns, rows) = rows_of(&out.join(file));
        assert_eq!(columns, wanted);
        let link = format!("hf:{REPO}@step{step}");
        let fingerprint = json_of(run(&hub, &home, &["fingerprint", &link, "--json", "--backend", "cpu"], &[]));
        let mut probe_run = vec!["probe", &link, "--induction", "--json", "--backend", "cpu"];
        probe_run.extend(probe);
        let scores = json_of(run(&hub, &home, &probe_run, &[]));
        let heads = fingerprint["heads"].as_array().unwrap();
        assert_eq!(rows.len(), heads.len(), "{file}: one row per head");
        for (row, head) in rows.iter().zip(heads) {
            assert_eq!(row["model"], format!("hf:{REPO}"));
            assert_eq!(
                (&row["revision"], &row["commit"], &row["step"]),
                (&json!(format!("step{step}")), &json!(commit), &json!(step))
            );
            assert_eq!((&row["layer"], &row["head"]), (&head["layer"], &head["head"]));
            assert_eq!(row["name"], format!("L{}H{}", head["layer"], head["head"]));
            assert!(row["error"].is_null() && row["same_weights_as"].is_null(), "{row}");
            for circuit in ["ov", "qk", "ov_residual", "qk_token"] {
                for (field, value) in head[circuit].as_object().unwrap() {
                    if field != "eigenvalues" {
                        assert_eq!(&row[format!("{circuit}_{field}")], value, "{file} {circuit}_{field}");
                    }
                }
            }
            let probed = scores["heads"]
                .as_array()
                .unwrap()
                .iter()
                .find(|h| h["layer"] == head["layer"] && h["head"] == head["head"])
                .unwrap();
            for score in ["induction_score", "previous_token_score", "duplicate_token_score", "copy_fidelity"] {
                assert_eq!(row[score], probed[score], "{file} {score}");
                assert_eq!(row[format!("spread_{score}_std")], probed["spread"][score]["std"], "{file} {score} spread");
            }
        }
        if step == 0 {
            // Layer 1's output projection is zero there: its OV circuits could not be read.
            let broken = rows.iter().filter(|r| r["layer"] == 1).collect::<Vec<_>>();
            assert!(
                !broken.is_empty()
                    && broken.iter().all(|r| r["ov_error"].is_string() && r["ov_copying_score"].is_null())
            );
        }
    }
}

#[test]
fn a_rerun_fetches_no_weight_byte_a_repeated_checkpoint_is_never_fetched_and_a_moved_branch_is_redone() {
    let hub = Imitation::start();
    // step1 and step2 serve the same bytes under two commits, as Pythia's later branches do.
    let step1 = hub.add_commit(REPO, "step1", gpt2_with(None));
    let step2 = hub.add_commit(REPO, "step2", gpt2_with(None));
    let step3 = hub.add_commit(REPO, "step3", gpt2_with(Some("transformer.h.0.attn.c_attn.bias")));
    assert_ne!(step1, step2);
    let out = scratch("sweep-rerun").join("out");
    let link = format!("hf:{REPO}");
    let args = [link.as_str(), "--revisions", "step1,step2,step3"];
    let first_home = scratch("sweep-rerun-1");
    let (ok, stdout, stderr) = sweep(&hub, &first_home, &out, &args, &[]);
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stdout.contains("2 computed") && stdout.contains("1 with the same weights"), "{stdout}");
    assert!(weight_bytes(&hub, &step1) > 0 && weight_bytes(&hub, &step3) > 0, "the distinct checkpoints are read");
    assert_eq!(weight_bytes(&hub, &step2), 0, "the repeated checkpoint is not fetched");
    assert!(
        hub.log().iter().all(|e| !e.path.contains(&step2) || e.path.contains("/api/")),
        "nothing of step2 but its API entry"
    );

    let (_, first) = rows_of(&out.join("test-org--sweep@step1.parquet"));
    let (_, second) = rows_of(&out.join("test-org--sweep@step2.parquet"));
    assert_eq!(first.len(), second.len());
    for (a, b) in first.iter().zip(&second) {
        assert_eq!(b["same_weights_as"], "step1");
        assert_eq!((&b["revision"], &b["commit"], &b["step"]), (&json!("step2"), &json!(step2), &json!(2)));
        assert_eq!(a["weights_sha256"], b["weights_sha256"]);
        assert_eq!(a["qk_imaginary_fraction"], b["qk_imaginary_fraction"]);
        assert_eq!(a["ov_copying_score"], b["ov_copying_score"]);
    }
    let (_, third) = rows_of(&out.join("test-org--sweep@step3.parquet"));
    assert!(third[0]["same_weights_as"].is_null() && third[0]["weights_sha256"] != first[0]["weights_sha256"]);

    // Offline, the cache's record of each branch's commit is enough to skip them all.
    let (ok, stdout, stderr) = sweep(&hub, &first_home, &out, &[&args[..], &["--offline"]].concat(), &[]);
    assert!(ok && stdout.contains("3 already written"), "{stdout}\n{stderr}");

    // A rerun with an empty cache, as on another node: every file is there for its commit.
    hub.clear_log();
    let (ok, stdout, _) = sweep(&hub, &scratch("sweep-rerun-2"), &out, &args, &[]);
    assert!(ok && stdout.contains("3 already written"), "{stdout}");
    let fetched: u64 = hub.log().iter().filter(|e| e.path.contains(".safetensors")).map(|e| e.sent).sum();
    assert_eq!(fetched, 0, "a rerun fetches no weight byte");
    assert!(hub.log().iter().all(|e| e.path.starts_with("/api/models/")), "only the API is asked: {:?}", hub.log());

    // step3's branch moves to a new commit: that unit alone is done again.
    let mut files = gpt2_with(Some("transformer.h.1.attn.c_attn.bias"));
    files.push(("README.md".into(), b"moved".to_vec()));
    let moved = hub.add_commit(REPO, "step3", files);
    assert_ne!(moved, step3);
    let (ok, stdout, _) = sweep(&hub, &scratch("sweep-rerun-3"), &out, &args, &[]);
    assert!(ok && stdout.contains("1 computed") && stdout.contains("2 already written"), "{stdout}");
    let (_, redone) = rows_of(&out.join("test-org--sweep@step3.parquet"));
    assert_eq!(redone[0]["commit"], moved.as_str());
}

#[test]
fn shards_split_the_units_disjointly_and_slurm_array_variables_pick_the_same_part() {
    let hub = Imitation::start();
    for step in [1, 2] {
        hub.add_commit(
            REPO,
            &format!("step{step}"),
            gpt2_with(Some(&format!("transformer.h.{}.attn.c_attn.bias", step - 1))),
        );
    }
    let local: PathBuf = fixture("gpt2");
    let units = [format!("hf:{REPO}@step1"), format!("hf:{REPO}@step2"), local.display().to_string()];
    let units: Vec<&str> = units.iter().map(String::as_str).collect();
    let home = scratch("sweep-shards");
    let mut parts = Vec::new();
    for shard in ["0/2", "1/2"] {
        let out = home.join(format!("shard{}", &shard[..1]));
        let mut args = units.clone();
        args.extend(["--shard", shard]);
        let (ok, stdout, stderr) = sweep(&hub, &home, &out, &args, &[]);
        assert!(ok, "{stdout}\n{stderr}");
        parts.push(files_in(&out));
    }
    assert!(parts[0].is_disjoint(&parts[1]), "{parts:?}");
    assert_eq!(parts[0].len() + parts[1].len(), 3, "every unit in one shard: {parts:?}");
    let local_file = parts.iter().flatten().find(|f| !f.starts_with("test-org")).unwrap();
    let (_, rows) = rows_of(&home.join("shard1").join(local_file));
    assert_eq!(
        (&rows[0]["model"], &rows[0]["revision"], &rows[0]["commit"]),
        (&json!(units[2]), &Value::Null, &Value::Null)
    );

    // Task 7 of an array 6-7 is the second of two parts, as --shard 1/2 is.
    let slurm = [("SLURM_ARRAY_TASK_ID", "7"), ("SLURM_ARRAY_TASK_COUNT", "2"), ("SLURM_ARRAY_TASK_MIN", "6")];
    let out = home.join("slurm");
    let (ok, stdout, stderr) = sweep(&hub, &home, &out, &units, &slurm);
    assert!(ok && stdout.contains("shard 1/2"), "{stdout}\n{stderr}");
    assert_eq!(files_in(&out), parts[1]);
    let (ok, _, stderr) =
        sweep(&hub, &home, &home.join("bad"), &units, &[("SLURM_ARRAY_TASK_ID", "9"), ("SLURM_ARRAY_TASK_COUNT", "2")]);
    assert!(!ok && stderr.contains("Slurm array task 9"), "{stderr}");
}

/// The timeline benchmark's eight Pythia-160M-shaped checkpoints (`scripts/bench_timeline.sh`)
/// as a sweep: one process, then two shards at once sharing one output folder, each with a
/// cache of its own as on two nodes. Asserts what the numbers must show: the same files with
/// the same rows, each checkpoint's weight bytes fetched once across the shards, no MLP byte.
/// Prints `SWEEP-BENCH {json}` with the seconds and megabytes; run by `scripts/bench_sweep.sh`.
#[test]
#[ignore = "a benchmark: scripts/bench_sweep.sh"]
fn pythia_160m_shaped_sweep_in_one_process_and_in_two_shards_at_once() {
    use crate::hub::{asked, tensor_ranges};
    use std::time::Instant;
    let hub = Imitation::start();
    let repo = "EleutherAI/pythia-160m";
    let steps = [0u64, 1, 8, 64, 512, 1000, 10000, 143000];
    let mut mlp = Vec::new();
    for (seed, step) in steps.iter().enumerate() {
        let files = hub_imitation::pythia_160m(seed as u64);
        mlp = tensor_ranges(&files[1].1, |name| name.contains(".mlp."));
        hub.add_commit(repo, &format!("step{step}"), files);
    }
    let list = steps.iter().map(u64::to_string).collect::<Vec<_>>().join(",");
    let link = format!("hf:{repo}");
    let args = [link.as_str(), "--steps", &list];
    let weights_sent = |hub: &Imitation| -> u64 {
        hub.log().iter().filter(|e| e.origin == Origin::Cdn && e.path.contains(".safetensors")).map(|e| e.sent).sum()
    };

    let one = scratch("sweep-bench-one");
    hub.clear_log();
    let started = Instant::now();
    let (ok, stdout, stderr) = sweep(&hub, &one, &one.join("out"), &args, &[]);
    let one_seconds = started.elapsed().as_secs_f64();
    assert!(ok && stdout.contains("8 computed"), "{stdout}{stderr}");
    let one_bytes = weights_sent(&hub);

    let two = scratch("sweep-bench-two");
    let out = two.join("out");
    hub.clear_log();
    let started = Instant::now();
    let shards: Vec<(bool, String, String, f64)> = std::thread::scope(|scope| {
        let runs = ["0/2", "1/2"].map(|shard| {
            let (hub, out, home) = (&hub, &out, two.join(shard.replace('/', "-of-")));
            let args = &args;
            scope.spawn(move || {
                let started = Instant::now();
                let mut all = args.to_vec();
                all.extend(["--shard", shard]);
                let (ok, stdout, stderr) = sweep(hub, &home, out, &all, &[]);
                (ok, stdout, stderr, started.elapsed().as_secs_f64())
            })
        });
        runs.map(|r| r.join().unwrap()).into()
    });
    let two_seconds = started.elapsed().as_secs_f64();
    for (ok, stdout, stderr, _) in &shards {
        assert!(*ok && stdout.contains("4 computed"), "each shard computes its half: {stdout}{stderr}");
    }
    let two_bytes = weights_sent(&hub);
    for entry in hub.log().iter().filter(|e| e.origin == Origin::Cdn && e.path.contains(".safetensors")) {
        let (first, last) = asked(entry).expect("one range a request");
        assert!(mlp.iter().all(|&(start, end)| last < start || first >= end), "an MLP byte: {}", entry.path);
    }
    assert_eq!(two_bytes, one_bytes, "each checkpoint's weight bytes once across the shards");
    let files = files_in(&one.join("out"));
    assert_eq!(files.len(), steps.len());
    assert_eq!(files_in(&out), files, "the shards' files are the one process's");
    for file in &files {
        assert_eq!(rows_of(&out.join(file)), rows_of(&one.join("out").join(file)), "{file}");
    }
    println!(
        "SWEEP-BENCH {}",
        json!({
            "units": steps.len(),
            "weights_mb": one_bytes as f64 / 1e6,
            "one_process_s": one_seconds,
            "two_shards_s": two_seconds,
            "shard_s": shards.iter().map(|s| s.3).collect::<Vec<_>>(),
        })
    );
    let _ = (std::fs::remove_dir_all(one), std::fs::remove_dir_all(two));
}
