#!/usr/bin/env bash
# Issue 42's economy measurement: the eight Pythia-160M-shaped checkpoints of
# scripts/bench_timeline.sh as `headprint sweep`, once in one process and once as two shards run
# at the same time into one output folder, against the tests' Hub imitation on loopback. Prints
# one JSON line: units, the weights' megabytes fetched, the seconds of each. The test asserts the
# rest: the same files with the same rows, each checkpoint fetched once across the shards, no MLP
# byte. Needs about 2 GB of memory and of the temporary folder. Results: docs/benchmarks.md, "Sweeps".
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release --test tests sweep::pythia_160m_shaped -- --ignored --nocapture --test-threads 1 2>&1 |
    tee /dev/stderr | grep -o 'SWEEP-BENCH .*' | sed 's/^SWEEP-BENCH //'
