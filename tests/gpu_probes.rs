//! The probes' forward pass asked of the GPU, against the CPU: through the CLI (`probe`,
//! `attention`, `compare` with `--backend gpu`) and through the worker session (a probe request
//! with `backend: Gpu`). The scores are the CPU's within 1e-4 with the same verdicts, and the
//! JSON names the GPU, which ran the forward pass: its numbers are not the CPU's bits, and no
//! note says it fell back (`tests/gpu.rs` checks the fallback itself).
//!
//! Like `gpu.rs`, these run on whatever adapter `--backend gpu` takes (lavapipe on a machine
//! without a GPU) and fail, saying so, where there is none.
#![cfg(all(feature = "gpu", not(target_arch = "wasm32")))]

use std::process::Command;

use crate::common;

use common::fixture;
use headprint::backend::{BackendChoice, BackendInfo};
use serde_json::Value;

/// How far a GPU's scores and attention weights may be from the CPU's (both are f32 forward
/// passes; only the order of their sums differs).
const TOLERANCE: f64 = 1e-4;

/// Runs the CLI; `no_adapter` hides every adapter (WGPU_BACKEND names GL, which this build does
/// not include), as on a machine with no GPU driver at all.
fn headprint(args: &[&str], no_adapter: bool) -> (bool, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_headprint"));
    if no_adapter {
        command.env("WGPU_BACKEND", "gl");
    }
    let out = command.args(args).output().expect("runs");
    (out.status.success(), String::from_utf8(out.stdout).unwrap(), String::from_utf8(out.stderr).unwrap())
}

/// `args` with `--json --backend backend`: the JSON and stderr.
fn json_on(args: &[&str], backend: &str) -> (Value, String) {
    let (ok, stdout, stderr) = headprint(&[args, &["--json", "--backend", backend]].concat(), false);
    assert!(
        ok,
        "{args:?} --backend {backend} failed: {stderr}. Without a GPU, install Mesa's lavapipe: \
         apt-get install -y mesa-vulkan-drivers (scripts/setup.sh does)"
    );
    (serde_json::from_str(&stdout).expect("JSON"), stderr)
}

/// The GPU run's `backend` is the GPU that ran it: its adapter named, no note, nothing on
/// stderr, and numbers that are not all the CPU's bits.
fn assert_names_what_ran(backend: &Value, stderr: &str, on_gpu: &[f64], on_cpu: &[f64], what: &str) {
    let backend: BackendInfo = serde_json::from_value(backend.clone()).expect("a backend object");
    assert_eq!(on_gpu.len(), on_cpu.len(), "{what}");
    assert_eq!(backend.name, "gpu", "{what}: {backend:?}");
    assert!(backend.adapter.as_deref().is_some_and(|a| !a.is_empty()), "{what}: {backend:?}");
    assert_eq!(backend.note, None, "{what}");
    assert!(!stderr.contains("note:"), "{what}: {stderr}");
    assert!(on_gpu != on_cpu, "{what}: the JSON names the GPU, but the numbers are the CPU's bits");
}

fn assert_within(on_gpu: &[f64], on_cpu: &[f64], what: &str) {
    for (i, (g, c)) in on_gpu.iter().zip(on_cpu).enumerate() {
        assert!((g - c).abs() <= TOLERANCE, "{what} [{i}]: GPU {g}, CPU {c}");
    }
}

/// Every score of an induction probe's report, in order.
fn induction_numbers(report: &Value) -> Vec<f64> {
    let mut numbers = vec![report["prefix_copy_accuracy"].as_f64().unwrap()];
    for head in report["heads"].as_array().unwrap() {
        for key in ["induction_score", "previous_token_score", "duplicate_token_score", "copy_fidelity"] {
            numbers.push(head[key].as_f64().unwrap());
        }
    }
    numbers
}

#[test]
fn the_induction_probe_on_the_gpu_gives_the_cpus_scores_and_names_its_backend() {
    // The planted induction model, and a Llama (rotary, grouped-query heads, a BOS).
    for (name, extra) in [("gptchar-induction", &["--len", "12"][..]), ("llama32", &["--len", "6"][..])] {
        let path = fixture(name);
        let args = [&["probe", path.to_str().unwrap(), "--induction", "--sequences", "3"][..], extra].concat();
        let (gpu, stderr) = json_on(&args, "gpu");
        let (cpu, _) = json_on(&args, "cpu");
        let (on_gpu, on_cpu) = (induction_numbers(&gpu), induction_numbers(&cpu));
        assert_within(&on_gpu, &on_cpu, name);
        assert_eq!(gpu["induction_heads"], cpu["induction_heads"], "{name}: the same induction heads");
        assert_eq!(gpu["tokens"], cpu["tokens"], "{name}");
        assert_names_what_ran(&gpu["backend"], &stderr, &on_gpu, &on_cpu, name);
    }
    let planted = induction_numbers(
        &json_on(
            &[
                "probe",
                fixture("gptchar-induction").to_str().unwrap(),
                "--induction",
                "--len",
                "12",
                "--sequences",
                "3",
            ],
            "cpu",
        )
        .0,
    );
    assert!(planted.iter().any(|&score| score > 0.5), "the planted model's probe finds its induction head");
}

#[test]
fn a_suites_verdicts_on_the_gpu_are_the_cpus() {
    let path = fixture("gptchar-induction");
    let args = ["probe", path.to_str().unwrap(), "--suite", "bracket", "--head", "L1H1"];
    let (gpu, stderr) = json_on(&args, "gpu");
    let (cpu, _) = json_on(&args, "cpu");
    let (gpu_rows, cpu_rows) = (gpu["rows"].as_array().unwrap(), cpu["rows"].as_array().unwrap());
    assert_eq!(gpu_rows.len(), cpu_rows.len());
    let (mut on_gpu, mut on_cpu) = (Vec::new(), Vec::new());
    for (g, c) in gpu_rows.iter().zip(cpu_rows) {
        assert_eq!((&g["verdict"], &g["top"]["position"]), (&c["verdict"], &c["top"]["position"]), "{}", c["id"]);
        on_gpu.extend(common::floats(&g["attention"]));
        on_cpu.extend(common::floats(&c["attention"]));
    }
    assert_within(&on_gpu, &on_cpu, "bracket L1H1");
    assert_names_what_ran(&gpu["backend"], &stderr, &on_gpu, &on_cpu, "bracket L1H1");
}

#[test]
fn attention_patterns_on_the_gpu_are_the_cpus() {
    let path = fixture("gpt2");
    let args = ["attention", path.to_str().unwrap(), "--tokens", "3,1,4,1,5,9,2,6"];
    let (gpu, stderr) = json_on(&args, "gpu");
    let (cpu, _) = json_on(&args, "cpu");
    let flat = |report: &Value| -> Vec<f64> {
        let rows = report["patterns"].as_array().unwrap().iter().flat_map(|l| l.as_array().unwrap());
        rows.flat_map(|h| h.as_array().unwrap()).flat_map(common::floats).collect()
    };
    let (on_gpu, on_cpu) = (flat(&gpu), flat(&cpu));
    assert_within(&on_gpu, &on_cpu, "gpt2 patterns");
    assert_names_what_ran(&gpu["backend"], &stderr, &on_gpu, &on_cpu, "gpt2 patterns");
}

/// `compare --backend gpu` fingerprints on the GPU and names, apart, what ran the probe.
#[test]
fn compare_names_the_fingerprints_backend_and_the_probes() {
    let path = fixture("gptchar-induction");
    let args = ["compare", path.to_str().unwrap(), "--len", "8", "--sequences", "2"];
    let (gpu, stderr) = json_on(&args, "gpu");
    let (cpu, _) = json_on(&args, "cpu");
    let (model, on_cpu) = (&gpu["models"][0], &cpu["models"][0]);
    assert_eq!(model["backend"]["name"], "gpu", "{}", model["backend"]);
    let scores = |model: &Value| -> Vec<f64> {
        model["head_scores"].as_array().unwrap().iter().map(|h| h["induction_score"].as_f64().unwrap()).collect()
    };
    assert_within(&scores(model), &scores(on_cpu), "compare");
    assert_names_what_ran(&model["probe_backend"], &stderr, &scores(model), &scores(on_cpu), "compare's probe");
}

#[test]
fn without_an_adapter_the_probe_under_auto_notes_the_cpu_and_forced_gpu_is_an_error() {
    let path = fixture("gptchar");
    let args = ["probe", path.to_str().unwrap(), "--induction", "--len", "6", "--sequences", "1"];
    let (ok, stdout, stderr) = headprint(&[&args[..], &["--json"]].concat(), true);
    assert!(ok, "{stderr}");
    let report: Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(report["backend"]["name"], "cpu");
    let note = report["backend"]["note"].as_str().expect("a note says why not the GPU");
    assert!(note.contains("no GPU adapter"), "{note}");
    assert_eq!(stderr.trim(), format!("note: {note}"), "one line on stderr");

    let (ok, stdout, stderr) = headprint(&[&args[..], &["--backend", "gpu"]].concat(), true);
    assert!(!ok && stdout.is_empty(), "forced GPU without an adapter must fail");
    assert_eq!(stderr.trim().lines().count(), 1, "{stderr}");
    assert!(stderr.starts_with("headprint: --backend gpu: no GPU adapter found"), "{stderr}");
}

/// The tab's path natively: a probe request asking for the GPU names what ran it, and its
/// scores are the CPU session's within the tolerance (exactly, when it fell back).
#[test]
fn the_worker_session_runs_a_probe_on_the_backend_it_asks_for() {
    use headprint::weights::{ByteSource, MemorySource};
    use headprint::worker::protocol::{ProbeSequence, Reply, Request};
    use headprint::worker::session::Session;

    let bytes = std::fs::read(fixture("gptchar-induction").join("model.safetensors")).unwrap();
    let mut session = Session::new(|| 0.0);
    let files: Vec<Box<dyn ByteSource>> = vec![Box::new(MemorySource::new("planted.safetensors", bytes))];
    let load = Request::Load {
        model: 1,
        names: vec!["planted.safetensors".into()],
        analyse: false,
        prepend_bos: false,
        backend: BackendChoice::Gpu,
        link: None,
    };
    assert!(matches!(session.handle(load, files, std::rc::Rc::new(|_| {})), Ok(Reply::Loaded)));
    let mut probe = |backend: BackendChoice| {
        let sequence = ProbeSequence::UniformRandom { seed: 1, len: 10, count: 3 };
        let request = Request::Induction { model: 1, sequence, prepend_bos: false, backend };
        match session.handle(request, vec![], std::rc::Rc::new(|_| {})) {
            Ok(Reply::Induction(run)) => run,
            other => panic!("the probe: {:?}", other.map(|_| "another reply")),
        }
    };
    let (gpu, cpu) = (probe(BackendChoice::Gpu), probe(BackendChoice::Cpu));
    assert_eq!(cpu.backend, BackendInfo::default());
    let numbers = |run: &headprint::worker::protocol::InductionRun| {
        induction_numbers(&serde_json::to_value(run.report.as_ref().expect("the probe's report")).unwrap())
    };
    let (on_gpu, on_cpu) = (numbers(&gpu), numbers(&cpu));
    assert_within(&on_gpu, &on_cpu, "session");
    assert_eq!(gpu.backend.name, "gpu", "{:?}", gpu.backend);
    assert!(on_gpu != on_cpu, "the run names the GPU, but its numbers are the CPU's bits");
}
