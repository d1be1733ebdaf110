#!/usr/bin/env bash
# Installs what a fresh Debian 12 machine lacks for building, serving and testing headprint,
# skipping whatever is already there. Only package registries are used (crates.io, npm, Debian).
# Usage: scripts/setup.sh [--page]   (--page adds Trunk, wasm-bindgen-cli, wasm-opt, Chromium)
set -euo pipefail
cd "$(dirname "$0")/.."

have() { command -v "$1" >/dev/null 2>&1; }

rustup target list --installed | grep -q wasm32-unknown-unknown || rustup target add wasm32-unknown-unknown
rustup component list --installed | grep -q clippy || rustup component add clippy rustfmt
# The fuzz step (scripts/fuzz.sh --ci): nightly Rust for the instrumented build, a C++ compiler
# for libFuzzer itself (libfuzzer-sys builds it).
rustup toolchain list | grep -q '^nightly' || rustup toolchain install nightly --profile minimal
have c++ || { apt-get update -q && apt-get install -y -q g++; }

# The GPU tests (tests/gpu.rs) need a Vulkan adapter; Mesa's lavapipe is one on the CPU.
if ! dpkg -s mesa-vulkan-drivers >/dev/null 2>&1; then
  apt-get update -q && apt-get install -y -q mesa-vulkan-drivers
fi

if [ "${1:-}" = "--page" ]; then
  # The wasm-bindgen CLI must be exactly the library version in Cargo.lock, or Trunk downloads one.
  bindgen_version=$(grep -A1 '^name = "wasm-bindgen"$' Cargo.lock | sed -n 's/^version = "\(.*\)"/\1/p')
  if ! have trunk || ! trunk --version | grep -q "0.21.14"; then
    # trunk 0.22 needs a newer rustc than the one the project is built and tested with; LTO off
    # shortens the build.
    CARGO_PROFILE_RELEASE_LTO=false CARGO_PROFILE_RELEASE_CODEGEN_UNITS=16 \
      cargo install trunk --locked --version 0.21.14
  fi
  if ! have wasm-bindgen || ! wasm-bindgen --version | grep -q "$bindgen_version"; then
    # --locked fails: a pinned dependency version is gone from the registry.
    cargo install wasm-bindgen-cli --version "$bindgen_version"
  fi
  if ! have chromium || ! have chromedriver; then
    apt-get update -q && apt-get install -y -q chromium chromium-driver
  fi
  # binaryen@132's wasm-opt (Debian's 108 breaks the app) and playwright-core, from package.json.
  if [ -f package.json ] && [ ! -d node_modules/playwright-core ]; then
    npm ci --no-audit --no-fund
  fi
fi
