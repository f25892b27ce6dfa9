#!/usr/bin/env bash
# Build the documentation site: regenerate the generated pages (command reference, exit codes, bad inputs), then
# `mkdocs build --strict`. With --check (what scripts/test.sh runs) it writes no page: a stale generated page fails
# instead, and the site goes to a temporary folder. Otherwise the site lands in site/ (or the folder given). No
# --quiet: it would hide the warnings that --strict counts, and the build would pass with them.
# Usage: bash scripts/docs.sh [--check] [SITE_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${KVBAKE_PYTHON:-.venv/bin/python}
check=0
if [ "${1:-}" = --check ]; then
  check=1
  shift
fi
started=$EPOCHREALTIME
if [ "$check" = 1 ]; then
  "$PYTHON" scripts/docs_pages.py --check
  site=$(mktemp -d)
  trap 'rm -rf "$site"' EXIT
else
  "$PYTHON" scripts/docs_pages.py
  site=${1:-site}
fi
NO_MKDOCS_2_WARNING=1 "$PYTHON" -m mkdocs build --strict --site-dir "$site"
pages=$(find "$site" -name '*.html' ! -name 404.html | wc -l)
echo "docs: mkdocs build --strict: $pages pages in $(awk -v a="$started" -v b="$EPOCHREALTIME" 'BEGIN { printf "%.1f", b - a }') s"
