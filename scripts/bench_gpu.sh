#!/usr/bin/env bash
# GPU (whatever `--backend gpu` takes: lavapipe on a machine without a GPU) against the CPU,
# stage by stage, with FLOP counts and achieved FLOP/s, on the GPT-2-Small- and
# Llama-3.2-1B-shaped random checkpoints. One JSON line per model on stdout.
# Usage: scripts/bench_gpu.sh [--gram-rows=N] [MODEL_DIR ...]
# Default: GPT-2 Small over its whole vocabulary, then Llama-3.2-1B's Gram stage over its first
# 8192 vocabulary rows (lavapipe is far too slow for all 128256).
# Make the checkpoints with scripts/make_fixtures.py --gpt2-small and scripts/make_big_models.py.
#
# scripts/bench_gpu.sh --tab [DIST]: the same comparison in the page instead (tests/e2e/bench_gpu.mjs):
# the Gram stage on WebGPU (SwiftShader, Chromium's software adapter) against the tab's CPU path,
# on GPT-2 Small's width and 8192 tokens (VOCAB=, D= to change them), with FLOP and FLOP/s. Needs a
# built dist/ (scripts/e2e.sh) and no checkpoint.
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" = --tab ]; then
  exec node tests/e2e/bench_gpu.mjs "${2:-dist}"
fi
cargo build --release --example bench_gpu
if [ $# -eq 0 ]; then
  target/release/examples/bench_gpu --layers=2 bench-data/gpt2-small
  target/release/examples/bench_gpu --gram-rows=8192 --layers=2 bench-data/llama-3.2-1b
else
  target/release/examples/bench_gpu "$@"
fi
