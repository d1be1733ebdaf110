#!/usr/bin/env bash
# Builds the page and serves it on http://127.0.0.1:${PORT:-8080}; the demo model loads on open.
# Does its own set-up (scripts/setup.sh --page). Ctrl-C stops the server.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --page
scripts/build-page.sh
port="${PORT:-8080}"
echo "headprint: serving dist/ on http://127.0.0.1:$port"
cd dist && exec python3 -m http.server "$port" --bind 127.0.0.1
