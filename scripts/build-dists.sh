#!/usr/bin/env bash
# Builds the sdist and wheel of every distribution (core, backend-*, plugins/*) into dist/
# and checks them with `twine check --strict` (metadata, README rendering). Needs the venv of
# scripts/setup.sh (build, twine, hatchling). Builds without isolation, with the venv's
# hatchling: no download, a few seconds in all.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
rm -rf dist
for dist in core backend-* plugins/*; do
  [ -f "$dist/pyproject.toml" ] || continue
  "$PY" -m build --quiet --no-isolation --sdist --wheel --outdir dist "$dist" >/dev/null
done
"$PY" -m twine check --strict dist/*
echo "built $(ls dist/*.whl | wc -l) wheels and $(ls dist/*.tar.gz | wc -l) sdists into dist/"
