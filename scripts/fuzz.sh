#!/usr/bin/env bash
# Fuzzes headprint's readers of untrusted input (fuzz/fuzz_targets): weights + config.json,
# config.json alone, tokenizer.json, prompt suites, share-link fragments and worker messages.
#
#   scripts/fuzz.sh [SECONDS_PER_TARGET] [TARGET...]   fuzz (default 60 s, every target), growing
#                                                       fuzz/corpus/TARGET (not committed)
#   scripts/fuzz.sh --ci [SECONDS_PER_TARGET]          scripts/test.sh's step: each target replays
#                                                       its committed corpus, then fuzzes (default 8 s)
#   scripts/fuzz.sh --minimise                         merges fuzz/corpus/TARGET into the committed
#                                                       fuzz/corpus-min/TARGET (libFuzzer -merge=1)
#
# Needs nightly Rust (scripts/setup.sh installs it) and builds every dependency instrumented the way
# `cargo fuzz build -s none` does (slow on a fresh machine, seconds after). The long runs behind the
# committed corpora, and how they were run: docs/validation.md#fuzzing. Seeds come from
# tests/fixtures, public/suites and fuzz/seeds; crashes land in fuzz/artifacts/TARGET/.
set -euo pipefail
cd "$(dirname "$0")/.."
all=(model_files config_json tokenizer_json suite_json share_link worker_request)
mode=fuzz
case ${1:-} in
  --ci) mode=ci; shift ;;
  --minimise) mode=minimise; shift ;;
esac
seconds=${1:-$([ $mode = ci ] && echo 8 || echo 60)}
shift || true
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=("${all[@]}")
failed=()

seed() {
  local dir=$2
  mkdir -p "$dir"
  case $1 in
    model_files)
      # 2-byte config length, config.json, weights (see the target).
      for f in tests/fixtures/*/model.safetensors tests/fixtures/families/*/model.safetensors; do
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
      { printf '\2'; cat tests/fixtures/llama32/config.json; } > "$dir/llama"
      { printf '\3'; cat tests/fixtures/families/gemma2/config.json; } > "$dir/gemma2"
      { printf '\4'; cat tests/fixtures/families/falcon-rw/config.json; } > "$dir/falcon-rw"
      { printf '\5'; cat tests/fixtures/families/mixtral/config.json; } > "$dir/mixtral"
      { printf '\6'; cat tests/fixtures/families/olmo2/config.json; } > "$dir/olmo2" ;;
    tokenizer_json)
      cp tests/fixtures/gpt2/tokenizer.json "$dir/gpt2"
      cp tests/fixtures/pythia/tokenizer.json "$dir/pythia"
      cp tests/fixtures/hostile/tokenizer.json "$dir/hostile" ;;
    suite_json)
      cp public/suites/*.json "$dir/" ;;
    share_link | worker_request)
      cp fuzz/seeds/"$1"/* "$dir/" ;;
  esac
}

export RUSTFLAGS="-Cpasses=sancov-module -Cllvm-args=-sanitizer-coverage-level=4 -Cllvm-args=-sanitizer-coverage-inline-8bit-counters -Cllvm-args=-sanitizer-coverage-pc-table -Cllvm-args=-sanitizer-coverage-trace-compares --cfg fuzzing -Cdebug-assertions -Coverflow-checks"
(cd fuzz && cargo +nightly build --release --target x86_64-unknown-linux-gnu --bins)
bin=fuzz/target/x86_64-unknown-linux-gnu/release
limits=(-timeout=10 -rss_limit_mb=2048)

for t in "${targets[@]}"; do
  mkdir -p "fuzz/artifacts/$t"
  case $mode in
    fuzz)
      seed "$t" "fuzz/corpus/$t"
      "$bin/$t" "fuzz/corpus/$t" -artifact_prefix="fuzz/artifacts/$t/" -max_total_time="$seconds" \
        "${limits[@]}" -print_final_stats=1 || failed+=("$t") ;;
    ci)
      # New inputs go to a scratch directory (the first one named), never into the repository.
      scratch=$(mktemp -d)
      seed "$t" "$scratch/seeds"
      "$bin/$t" "$scratch" "fuzz/corpus-min/$t" "$scratch/seeds" -artifact_prefix="fuzz/artifacts/$t/" \
        -max_total_time="$seconds" "${limits[@]}" -print_final_stats=1 > "$scratch/log" 2>&1 || { failed+=("$t"); tail -n 40 "$scratch/log"; }
      # The executions, or the failure's report.
      grep -E '^(stat::number_of_executed_units|==|SUMMARY|thread|Test unit written)' "$scratch/log" | sed "s/^/$t: /" || true
      rm -rf "$scratch" ;;
    minimise)
      # The smallest set covering every edge (hit counts ignored), inputs cut to 2 KB: the
      # committed corpus stays small (fixture-sized models are re-seeded from tests/fixtures).
      mkdir -p "fuzz/corpus-min/$t"
      "$bin/$t" -set_cover_merge=1 -use_counters=0 -max_len=2048 "${limits[@]}" "fuzz/corpus-min/$t" "fuzz/corpus/$t" \
        || failed+=("$t") ;;
  esac
done
# Every target runs even when one fails; the failures are listed at the end.
if [ ${#failed[@]} -gt 0 ]; then
  echo "fuzz targets that found a crash, hang or OOM: ${failed[*]} (inputs in fuzz/artifacts/)" >&2
  exit 1
fi
