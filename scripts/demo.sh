#!/usr/bin/env bash
# Sets everything up, then runs the main job: the demo (later: MNIST training).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/demo.py "$@"
