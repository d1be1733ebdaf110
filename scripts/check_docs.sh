#!/usr/bin/env bash
# Checks the documentation: README.md is at most 200 lines, and every relative
# markdown link in README.md, CONTRIBUTING.md, CHANGELOG.md and docs/*.md
# resolves to an existing file (relative to the file that holds the link).
# Links to http(s):, mailto: and pure #anchors are not checked; a #anchor
# after a path is ignored. Links inside code (fenced blocks, `spans`) are not links.
# Usage: scripts/check_docs.sh   (from anywhere; exits non-zero on a problem)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

max_lines=200
status=0

lines=$(wc -l < README.md)
if (( lines > max_lines )); then
    echo "check_docs: README.md has $lines lines; at most $max_lines are allowed (move reference material into docs/)" >&2
    status=1
fi

files=(README.md CONTRIBUTING.md CHANGELOG.md)
for f in docs/*.md; do files+=("$f"); done

python3 - "${files[@]}" <<'PY' || status=1
import os, re, sys, urllib.parse

link = re.compile(r'!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)')
bad = 0
for path in sys.argv[1:]:
    if not os.path.exists(path):
        print(f"check_docs: {path} is missing", file=sys.stderr)
        bad += 1
        continue
    base = os.path.dirname(path)
    in_fence = False
    with open(path, encoding="utf-8") as fh:
        for number, line in enumerate(fh, 1):
            if re.match(r'^\s*(```|~~~)', line):
                in_fence = not in_fence
                continue
            if in_fence:
                continue
            text = re.sub(r'(`+)(.+?)\1', '', line)  # drop inline code spans
            for target in link.findall(text):
                if re.match(r'^(https?:|mailto:|#)', target):
                    continue
                target_path = urllib.parse.unquote(target.split('#', 1)[0])
                if not target_path:
                    continue
                resolved = os.path.normpath(os.path.join(base, target_path))
                if not os.path.exists(resolved):
                    print(f"check_docs: {path}:{number}: the link to '{target}' does not resolve "
                          f"(looked for {resolved})", file=sys.stderr)
                    bad += 1
sys.exit(1 if bad else 0)
PY

if (( status == 0 )); then
    echo "check_docs: README.md has $lines lines (at most $max_lines); every relative link in ${#files[@]} files resolves"
fi
exit "$status"
