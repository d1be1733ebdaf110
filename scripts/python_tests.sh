#!/usr/bin/env bash
# The Python package's tests: `pip install ./python` (maturin builds the extension) into a
# virtual environment, then pytest against the release CLI (target/release/headprint, built
# first). Usage: scripts/python_tests.sh [--torch]
#   (default)  target/python-env with numpy, pandas, pytest and Dask's `distributed` (for
#              headprint.sweep's test on a two-process LocalCluster; pure Python, a few MB):
#              every test but the ones that need torch (python/tests, `-m "not torch"`); run
#              by scripts/test.sh.
#   --torch    .venv, with torch, transformers and transformer-lens installed if missing: the
#              transformers and TransformerLens tests (`-m torch`). Too heavy for CI (torch
#              alone is gigabytes); run it and report, as for the other heavy checks.
set -euo pipefail
cd "$(dirname "$0")/.."
quiet=(-q --disable-pip-version-check)
if [ "${1:-}" = --torch ]; then
  env=.venv
  [ -x $env/bin/python ] || python3 -m venv $env
  $env/bin/python -c "import torch, transformers, transformer_lens" 2>/dev/null ||
    $env/bin/pip install "${quiet[@]}" torch==2.15.0 transformers==5.24.0 transformer-lens==3.9.0
  marker=torch
else
  env=target/python-env
  [ -x $env/bin/python ] || python3 -m venv $env
  marker="not torch"
fi
$env/bin/pip install "${quiet[@]}" numpy pandas pytest
[ "$marker" = torch ] || $env/bin/pip install "${quiet[@]}" dask distributed
[ -x target/release/headprint ] || cargo build --release --bin headprint
$env/bin/pip install "${quiet[@]}" ./python
$env/bin/python -m pytest -q -m "$marker" python/tests
