#!/usr/bin/env bash
# Sets everything up, then runs the whole test suite (extra arguments go to pytest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/system-packages.sh  # what the OPENCL and WEBGPU tests need (as root, with apt)
bash scripts/setup.sh
bash scripts/build-dists.sh  # every distribution's sdist and wheel, checked by twine
# what tests save for people to look at (the browser test's screenshot of generated text)
export FUSEGRAD_TEST_ARTEFACTS="${FUSEGRAD_TEST_ARTEFACTS:-$PWD/test-artefacts}"
exec .venv/bin/python -m pytest -q -n 2 "$@"
