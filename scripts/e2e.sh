#!/usr/bin/env bash
# Builds the page with Trunk (offline, release: wasm-opt -O3) and runs the Playwright tests
# against it in the system Chromium. Screenshots land in tests/e2e/screenshots/.
#
# Needs (see the report / docs): trunk 0.21.14 and wasm-bindgen-cli 0.2.130 on PATH,
# `npm ci` (binaryen@132 for wasm-opt, playwright-core), Chromium at /usr/bin/chromium
# (or CHROMIUM=/path).
set -euo pipefail
cd "$(dirname "$0")/.."

[ -d node_modules/playwright-core ] || npm ci
export PATH="$PWD/node_modules/.bin:$HOME/.cargo/bin:$PATH"
export TRUNK_SKIP_VERSION_CHECK=true

if [ "${SKIP_BUILD:-0}" != 1 ]; then
  cargo fetch --target wasm32-unknown-unknown >/dev/null
  trunk build --release --offline
fi
# The tests' Hub and CDN, which the models-by-link test serves its fixture from.
cargo build --release --example hub_imitation
node tests/e2e/run.mjs dist
# The module uses SIMD and no relaxed-SIMD instruction (Safari rejects a module that has one).
scripts/check_wasm.sh dist/headprint-web_bg.wasm
