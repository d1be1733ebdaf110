#!/usr/bin/env bash
# GPU (whatever `--backend gpu` takes: lavapipe on a machine without a GPU) against the CPU,
# stage by stage, with FLOP counts and achieved FLOP/s, on the GPT-2-Small- and
# Llama-3.2-1B-shaped random checkpoints. One JSON line per model on stdout.
# Usage: scripts/bench_gpu.sh [MODEL_DIR ...]   (default: bench-data/gpt2-small bench-data/llama-3.2-1b)
# Make the checkpoints with scripts/make_fixtures.py --gpt2-small and scripts/make_big_models.py.
set -euo pipefail
cd "$(dirname "$0")/.."
models=("$@")
if [ ${#models[@]} -eq 0 ]; then
  models=(bench-data/gpt2-small bench-data/llama-3.2-1b)
fi
cargo build --release --example bench_gpu
for model in "${models[@]}"; do
  target/release/examples/bench_gpu "$model"
done
