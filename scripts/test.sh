#!/usr/bin/env bash
# Runs all of headprint's tests. Does its own set-up first (scripts/setup.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
page_tests=$( [ -x scripts/e2e.sh ] && echo yes || echo no )
scripts/setup.sh $( [ "$page_tests" = yes ] && echo --page )

scripts/check_docs.sh
cargo fmt --all -- --check
cargo clippy --all-targets --release -- -D warnings
cargo clippy --release -p headprint-python -- -D warnings
# The core and the page for the browser (the core alone too: it must build without the page).
cargo clippy --target wasm32-unknown-unknown -p headprint -p headprint-web --lib -- -D warnings
cargo build --target wasm32-unknown-unknown -p headprint --lib
cargo test --release
# The Python package, built by maturin and tested against the CLI just built (the tests that
# need torch run in `scripts/python_tests.sh --torch`).
scripts/python_tests.sh
# Every fuzz target replays its committed corpus and fuzzes 8 s (the instrumented build is slow
# cold): a parser that panics again on a known input shows here.
scripts/fuzz.sh --ci 8
if [ "$page_tests" = yes ]; then
  # The core compiled to wasm, in headless Chromium (wasm-bindgen-test).
  CHROMEDRIVER=/usr/bin/chromedriver cargo test --target wasm32-unknown-unknown -p headprint --no-default-features --test wasm_pipeline --test wasm_gemm
  # The built page, end to end (Playwright driving Debian's Chromium).
  scripts/e2e.sh
  # The spectral-fingerprint study's Pythia-1B at full size (a random checkpoint written here):
  # the CLI's fingerprint checked against float64 numpy on three heads, and the tab from the file
  # input to the grid and the probe within 1.5 GB of worker memory.
  BIG_RESULTS=target/big-models-tab.json scripts/big_models.sh
fi
