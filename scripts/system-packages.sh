#!/usr/bin/env bash
# System packages the tests use, installed with apt when running as root (CI, a fresh machine);
# otherwise each missing one is named and its tests skip or fail with the reason. Cheap when
# everything is there: each check is one command.
set -euo pipefail
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  exit 0
fi
missing=()
# the CPU device compiles kernels with gcc (or clang)
command -v gcc >/dev/null || command -v clang >/dev/null || missing+=(gcc libc6-dev)
# WEBGPU: llvmpipe through Vulkan (shader-f16, int64); Chromium runs the exported pages
ldconfig -p | grep -q libvulkan.so.1 || missing+=(mesa-vulkan-drivers libvulkan1)
command -v chromium >/dev/null || missing+=(chromium)
# OPENCL: the pip wheel's PoCL 3.0 (LLVM 14) cannot build for CPUs its LLVM does not know
# (Zen 5: "unknown target CPU 'generic'"); Debian's PoCL (LLVM 15) can, and comes first among
# pyopencl's platforms
ldconfig -p | grep -q libpocl.so.2 || missing+=(pocl-opencl-icd)
# fusegrad.distributed: OpenMPI's mpirun and library (mpi4py links against them)
command -v mpirun >/dev/null || missing+=(openmpi-bin libopenmpi-dev)
if [ ${#missing[@]} -gt 0 ]; then
  (apt-get update -qq && apt-get install -y -qq "${missing[@]}" >/dev/null) \
    || echo "warning: could not install ${missing[*]}; the tests that need them will say so" >&2
fi
