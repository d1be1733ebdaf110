#!/usr/bin/env bash
# GPU (whatever `--backend gpu` takes: lavapipe on a machine without a GPU) against the CPU,
# stage by stage, with FLOP counts and achieved FLOP/s, on the GPT-2-Small- and
# Llama-3.2-1B-shaped random checkpoints. One JSON line per model on stdout.
# Usage: scripts/bench_gpu.sh [--gram-rows=N] [MODEL_DIR ...]
# Default: GPT-2 Small over its whole vocabulary, then Llama-3.2-1B's Gram stage over its first
# 8192 vocabulary rows (lavapipe would take ~15 minutes over all 128256).
# Make the checkpoints with scripts/make_fixtures.py --gpt2-small and scripts/make_big_models.py.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --example bench_gpu
if [ $# -eq 0 ]; then
  target/release/examples/bench_gpu bench-data/gpt2-small
  target/release/examples/bench_gpu --gram-rows=8192 bench-data/llama-3.2-1b
else
  target/release/examples/bench_gpu "$@"
fi
