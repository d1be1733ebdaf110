#!/usr/bin/env bash
# Times two headprint binaries side by side on the same models, alternating A B A B so that a
# machine that slows down during the run slows both: the fingerprint (CPU, folded) of each model
# and the induction probe of the first. Prints a row per model and command with each run's wall
# time. Used to check that a change is no slower (docs/benchmarks.md).
#
#   scripts/bench_ab.sh OLD_BINARY NEW_BINARY ROUNDS MODEL_DIR...
#
# Models: `.venv/bin/python scripts/make_fixtures.py --gpt2-small DIR/gpt2-small` and
# `.venv/bin/python scripts/make_big_models.py --only pythia-1b llama-3.2-1b --out DIR`.
set -euo pipefail
old=$1 new=$2 rounds=$3
shift 3
seconds() {
  local start end
  start=$(date +%s%N)
  "$@" >/dev/null 2>&1
  end=$(date +%s%N)
  printf '%d.%03d' $(((end - start) / 1000000000)) $(((end - start) / 1000000 % 1000))
}
run() {
  local what=$1
  shift
  local a=() b=()
  for _ in $(seq "$rounds"); do
    a+=("$(seconds "$old" "$@")")
    b+=("$(seconds "$new" "$@")")
  done
  printf '%-48s old %s   new %s\n' "$what" "${a[*]}" "${b[*]}"
}
first=1
for model in "$@"; do
  run "fingerprint $(basename "$model")" fingerprint "$model" --json --backend cpu --quiet
  if [ "$first" = 1 ]; then
    run "probe --induction $(basename "$model")" probe "$model" --induction --json --backend cpu --quiet
    first=0
  fi
done
