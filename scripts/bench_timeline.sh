#!/usr/bin/env bash
# Issue 36's economy measurement: `headprint timeline` over eight checkpoints of a
# Pythia-160M-shaped repository (random f16 weights, Pythia's layout) served by the tests' Hub
# imitation on loopback. Prints one JSON line: the megabytes fetched and the seconds taken by one
# fingerprint alone, the timeline's first run, the same run again from the cache, and --probe after
# it. The test asserts what the numbers must show: each revision fetches exactly one fingerprint's
# bytes, no MLP byte without --probe, none at all the second time. Needs about 2 GB of memory
# and 2 GB in the temporary folder. Results: docs/benchmarks.md, "Timeline".
set -euo pipefail
cd "$(dirname "$0")/.."
cargo test --release --test tests timeline::pythia_160m_shaped -- --ignored --nocapture --test-threads 1 2>&1 |
    tee /dev/stderr | grep -o 'TIMELINE-BENCH .*' | sed 's/^TIMELINE-BENCH //'
