#!/usr/bin/env bash
# Runs the same commands with two headprint binaries on every fixture of the first four
# families and the demo model, and says whether each JSON output is byte-identical: the check
# that a change to the model code left what existing models give untouched.
#
#   scripts/compare_outputs.sh OLD_BINARY NEW_BINARY [BACKEND]   (BACKEND: cpu by default)
#
# An old binary: `git worktree add /tmp/base <commit> && cd /tmp/base && cargo build --release`.
set -euo pipefail
cd "$(dirname "$0")/.."
old=$1 new=$2 backend=${3:-cpu}
models=(public/models/nietzsche-char.safetensors tests/fixtures/gptchar tests/fixtures/gpt2 tests/fixtures/gpt2-nanogpt
  tests/fixtures/pythia tests/fixtures/llama tests/fixtures/pythia-hub tests/fixtures/llama32)
commands=(
  "fingerprint --json --backend $backend"
  "fingerprint --json --raw --backend $backend"
  "probe --induction --json --len 12 --sequences 2 --backend $backend"
  "attention --json --tokens 3,1,4,1,5,9,2,6 --backend $backend"
  "ov-logits --json --head L0H0 --top 5"
)
out=$(mktemp -d)
same=0 different=0
for model in "${models[@]}"; do
  for command in "${commands[@]}"; do
    # shellcheck disable=SC2086
    "$old" $command "$model" --quiet >"$out/old.json" 2>/dev/null || echo "old failed: $command $model" >"$out/old.json"
    # shellcheck disable=SC2086
    "$new" $command "$model" --quiet >"$out/new.json" 2>/dev/null || echo "new failed: $command $model" >"$out/new.json"
    if cmp -s "$out/old.json" "$out/new.json"; then
      same=$((same + 1))
    else
      different=$((different + 1))
      echo "DIFFERENT: $command $model"
    fi
  done
done
rm -rf "$out"
echo "$same byte-identical, $different different"
[ "$different" -eq 0 ]
