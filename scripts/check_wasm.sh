#!/usr/bin/env bash
# Checks what the built page's wasm asks of a browser: it must use WebAssembly SIMD (the
# `+simd128` build flag took effect) and no relaxed-SIMD instruction (Safari rejects a whole
# module that has one, even if the code is never run). binaryen's validator decides both, with
# a feature turned off at a time; the checks are first shown to fail on modules that break them.
# Usage: scripts/check_wasm.sh [dist/headprint-web_bg.wasm]
set -euo pipefail
cd "$(dirname "$0")/.."
module=${1:-dist/headprint-web_bg.wasm}
bin=node_modules/.bin
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Validates $1 with every feature on except $2; exit status says whether it passed.
valid_without() { "$bin/wasm-opt" --all-features "--disable-$2" "$1" -o /dev/null 2>/dev/null; }

# The checks can fail: a one-instruction module with relaxed SIMD, and one with plain SIMD.
printf '(module (func (export "f") (param v128 v128 v128) (result v128)\n  (f32x4.relaxed_madd (local.get 0) (local.get 1) (local.get 2))))\n' >"$tmp/relaxed.wat"
printf '(module (func (export "f") (param v128 v128) (result v128)\n  (f32x4.add (local.get 0) (local.get 1))))\n' >"$tmp/simd.wat"
"$bin/wasm-as" --enable-simd --enable-relaxed-simd "$tmp/relaxed.wat" -o "$tmp/relaxed.wasm"
"$bin/wasm-as" --enable-simd "$tmp/simd.wat" -o "$tmp/simd.wasm"
if valid_without "$tmp/relaxed.wasm" relaxed-simd; then
  echo "check_wasm: the relaxed-SIMD check passed a module with f32x4.relaxed_madd" >&2; exit 1
fi
if valid_without "$tmp/simd.wasm" simd; then
  echo "check_wasm: the SIMD check passed a module with f32x4.add" >&2; exit 1
fi

# binaryen adds the features a module's own `target_features` section declares to those asked
# for, so the checks run on a copy without that section.
"$bin/wasm-opt" --all-features --strip-target-features "$module" -o "$tmp/module.wasm"
module_name=$module
module=$tmp/module.wasm
if ! valid_without "$module" relaxed-simd; then
  echo "check_wasm: $module_name has relaxed-SIMD instructions (Safari would reject it)" >&2; exit 1
fi
if valid_without "$module" simd; then
  echo "check_wasm: $module_name has no SIMD instruction: was it built without +simd128?" >&2; exit 1
fi
echo "check_wasm: $module_name uses SIMD and no relaxed-SIMD instruction ($(stat -c %s "$module_name") bytes)"
