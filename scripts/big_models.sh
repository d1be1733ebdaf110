#!/usr/bin/env bash
# The spectral-fingerprint study's Pythia-1B at full size, end to end: the checkpoint (random
# weights in the hub's layout, f16) is written if missing, fingerprinted by the CLI and three heads
# checked against float64 numpy (scripts/check_big_model.py), then opened in the tab through the
# file input (full grid, induction probe, one head's OV view) with the analysis worker's memory
# asserted ≤ 1.5 GB from the page's own report (tests/e2e/big.mjs).
# Needs a built dist/ (scripts/e2e.sh builds it) and Chromium. The python is $PYTHON, else a
# python3 that has numpy, else a virtual environment with numpy made here (target/numpy-venv:
# numpy from the package registry, once). scripts/test.sh runs this after the page's tests.
# Usage: scripts/big_models.sh [more model folders for the tab, e.g. bench-data/llama-3.2-1b]
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${BIG_MODELS:-bench-data}
python=${PYTHON:-}
if [ -z "$python" ]; then
  if python3 -c 'import numpy' 2>/dev/null; then
    python=python3
  else
    venv=target/numpy-venv
    [ -x "$venv/bin/python" ] && "$venv/bin/python" -c 'import numpy' 2>/dev/null \
      || { python3 -m venv "$venv" && "$venv/bin/pip" install --quiet numpy; }
    python=$venv/bin/python
  fi
fi
[ -f "$dir/pythia-1b/model.safetensors" ] || "$python" scripts/make_big_models.py --only pythia-1b --out "$dir"
cargo build --release --bin headprint
json=$(mktemp)
trap 'rm -f "$json"' EXIT
target/release/headprint fingerprint "$dir/pythia-1b" --raw --json > "$json"
"$python" scripts/check_big_model.py "$dir/pythia-1b" "$json" --heads L0H0 L7H3 L15H7
node tests/e2e/big.mjs dist "$dir/pythia-1b" "$@"
