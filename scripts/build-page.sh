#!/usr/bin/env bash
# Builds the static page into dist/ with Trunk, offline, with the pinned wasm-bindgen and
# binaryen@132's wasm-opt from node_modules (Debian's wasm-opt breaks the app).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PWD/node_modules/.bin:$HOME/.cargo/bin:$PATH" TRUNK_SKIP_VERSION_CHECK=true
cargo fetch --quiet
trunk build --release --offline
