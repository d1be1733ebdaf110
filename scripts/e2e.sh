#!/usr/bin/env bash
# Builds the page with Trunk (offline, release: wasm-opt -O3) and runs the Playwright tests
# against it in the system Chromium. Screenshots land in tests/e2e/screenshots/.
#
# Needs (see the report / docs): trunk 0.21.14 and wasm-bindgen-cli 0.2.130 on PATH,
# `npm ci` (binaryen@132 for wasm-opt, playwright-core, puppeteer-core), Chromium at
# /usr/bin/chromium (or CHROMIUM=/path), and optionally firefox-esr (or FIREFOX=/path).
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
# Firefox where it is installed (Debian's firefox-esr): the demo, and a model by link opened
# from the test Hub and again from the browser's store.
if command -v "${FIREFOX:-firefox-esr}" >/dev/null; then
  FIREFOX="$(command -v "${FIREFOX:-firefox-esr}")" node tests/e2e/firefox.mjs dist
else
  echo "e2e: Firefox (firefox-esr) is not installed here, so its check did not run"
fi
# The module uses SIMD and no relaxed-SIMD instruction (Safari rejects a module that has one).
scripts/check_wasm.sh dist/headprint-web_bg.wasm
