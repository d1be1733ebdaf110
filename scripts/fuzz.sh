#!/usr/bin/env bash
# Fuzzes headprint's readers of untrusted input (fuzz/fuzz_targets): weights + config.json,
# config.json alone, tokenizer.json, prompt suites and worker messages. Not part of
# scripts/test.sh: it needs nightly Rust and a separate instrumented build of every dependency
# (minutes on a fresh machine), far over the 60 s a CI step may cost.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]     (default 60 s, every target)
#
# Uses cargo-fuzz when installed (`cargo +nightly install cargo-fuzz`), else builds the same
# instrumentation directly. Seeds come from tests/fixtures (generated into fuzz/corpus, not
# committed); crashes land in fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-60}
shift || true
targets=("$@")
failed=()
[ ${#targets[@]} -gt 0 ] || targets=(model_files config_json tokenizer_json suite_json worker_request)

seed() {
  local dir=fuzz/corpus/$1
  mkdir -p "$dir"
  case $1 in
    model_files)
      # 2-byte config length, config.json, weights (see the target).
      for f in tests/fixtures/*/model.safetensors; do
        local d; d=$(dirname "$f")
        [ "$(stat -c %s "$f")" -lt 200000 ] || continue
        if [ -f "$d/config.json" ]; then
          python3 -c 'import sys,struct; c=open(sys.argv[1],"rb").read(); w=open(sys.argv[2],"rb").read(); sys.stdout.buffer.write(struct.pack("<H",len(c))+c+w)' "$d/config.json" "$f" > "$dir/$(basename "$d")"
        else
          { printf '\0\0'; cat "$f"; } > "$dir/$(basename "$d")"
        fi
      done ;;
    config_json)
      { printf '\0'; cat tests/fixtures/gpt2/config.json; } > "$dir/gpt2"
      { printf '\1'; cat tests/fixtures/pythia-hub/config.json; } > "$dir/pythia"
      { printf '\2'; cat tests/fixtures/llama32/config.json; } > "$dir/llama" ;;
    tokenizer_json)
      cp tests/fixtures/gpt2/tokenizer.json "$dir/gpt2"
      cp tests/fixtures/pythia/tokenizer.json "$dir/pythia" ;;
    suite_json)
      cp public/suites/*.json "$dir/" ;;
    worker_request)
      cp fuzz/seeds/worker_request/* "$dir/" ;;
  esac
}

if cargo +nightly fuzz --help >/dev/null 2>&1; then
  for t in "${targets[@]}"; do
    seed "$t"
    cargo +nightly fuzz run -s none "$t" "fuzz/corpus/$t" -- -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 \
      || failed+=("$t")
  done
else
  export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
  (cd fuzz && cargo +nightly build --release --target x86_64-unknown-linux-gnu --bins)
  for t in "${targets[@]}"; do
    seed "$t"
    mkdir -p "fuzz/artifacts/$t"
    "fuzz/target/x86_64-unknown-linux-gnu/release/$t" "fuzz/corpus/$t" -artifact_prefix="fuzz/artifacts/$t/" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -print_final_stats=1 || failed+=("$t")
  done
fi
# Every target runs even when one fails; the failures are listed at the end.
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz targets that found a crash, hang or OOM: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
