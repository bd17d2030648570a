#!/usr/bin/env bash
# Sets everything up, then runs the main job: train the MNIST CNN (examples/mnist.py).
# Data: --data DIR, else $FUSEGRAD_DATA, else ../shared/data/mnist beside the repository when it
# exists, else the IDX files are downloaded once into ~/.cache/fusegrad/datasets/mnist.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
if [ -z "${FUSEGRAD_DATA:-}" ] && [ -d ../shared/data/mnist ]; then
  export FUSEGRAD_DATA=../shared/data/mnist
fi
exec .venv/bin/python examples/mnist.py "$@"
