"""The ``fusegrad`` command's tool verbs: ``cache info|clear``, ``profile -- CMD``, and
``export-web MODULE:OBJECT``. Each ``add_*_command`` registers one on the subparsers that
``fusegrad/__main__.py`` makes; each verb returns its exit code and says what went wrong on
stderr, with exit code 1, rather than raising.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np

from fusegrad import kernel_cache, profiler
from fusegrad.device import Device
from fusegrad.dtype import dtypes
from fusegrad.errors import FusegradError
from fusegrad.helpers import cache_dir
from fusegrad.tensor import Tensor


def add_cache_command(commands: argparse._SubParsersAction) -> None:
    """Register ``fusegrad cache info|clear``."""
    cache = commands.add_parser(
        "cache",
        help="show or clear the kernel cache on disk",
        description="The compiled kernels and BEAM choices fusegrad keeps on disk (in "
        "FUSEGRAD_CACHE, else $XDG_CACHE_HOME/fusegrad or ~/.cache/fusegrad).",
    )
    verbs = cache.add_subparsers(dest="verb", metavar="verb", required=True)
    info = verbs.add_parser("info", help="where the cache is, its files and bytes by kind")
    info.add_argument("--json", action="store_true", help="print machine-readable JSON")
    info.set_defaults(run=cache_info_command)
    clear = verbs.add_parser("clear", help="delete the compiled kernels and BEAM choices")
    clear.set_defaults(run=cache_clear_command)


def cache_info_command(args: argparse.Namespace) -> int:
    """``fusegrad cache info [--json]``."""
    folders = kernel_cache.usage()
    if args.json:
        report = {"path": cache_dir(), "folders": [vars(f) for f in folders]}
        print(json.dumps(report, indent=2))
        return 0
    total = sum(f.nbytes for f in folders)
    files = sum(f.files for f in folders)
    print(f"kernel cache: {cache_dir()} ({files} files, {_size(total)})")
    if not folders:
        print("  empty (nothing compiled yet, or it was cleared)")
    for folder in folders:
        print(f"  {folder.name}/: {folder.holds}, {folder.files} files, {_size(folder.nbytes)}")
        for kind, (count, nbytes) in sorted(folder.kinds.items(), key=lambda k: -k[1][1]):
            if kind != folder.holds:
                print(f"      {kind}: {count} files, {_size(nbytes)}")
    return 0


def cache_clear_command(args: argparse.Namespace) -> int:
    """``fusegrad cache clear``: the next run compiles its kernels again."""
    files, nbytes = kernel_cache.clear()
    print(f"removed {files} files ({_size(nbytes)}) from {cache_dir()}")
    return 0


def _size(nbytes: int) -> str:
    """``nbytes`` as people read it: ``117.3 MB``."""
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if nbytes >= scale:
            return f"{nbytes / scale:.1f} {unit}"
    return f"{nbytes} B"


def add_profile_command(commands: argparse._SubParsersAction) -> None:
    """Register ``fusegrad profile [-o TRACE] -- python script.py ...``."""
    profile = commands.add_parser(
        "profile",
        help="run a command with PROFILE=1 and say where its Chrome trace went",
        description="Run COMMAND (e.g. `python train.py`) with PROFILE=1: the fusegrad in it "
        "writes a Chrome trace of its kernels, compiles, copies and scheduling when it exits. "
        "Open the trace in https://ui.perfetto.dev or chrome://tracing.",
    )
    profile.add_argument(
        "-o", "--output", default=profiler.DEFAULT_PATH, help="the trace file to write"
    )
    profile.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- COMMAND ...")
    profile.set_defaults(run=profile_command)


def profile_command(args: argparse.Namespace) -> int:
    """``fusegrad profile -- CMD``: CMD's exit code; the trace's path on stderr."""
    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        print(
            "fusegrad profile: give the command to run, e.g. `fusegrad profile -- python train.py`",
            file=sys.stderr,
        )
        return 2
    trace = Path(args.output).resolve()
    trace.unlink(missing_ok=True)  # so that an old trace is not taken for this run's
    env = {**os.environ, "PROFILE": "1", "PROFILE_PATH": str(trace)}
    try:
        code = subprocess.call(cmd, env=env)
    except OSError as e:
        print(f"fusegrad profile: cannot run {cmd[0]!r}: {e}", file=sys.stderr)
        return 1
    if trace.is_file():
        print(
            f"fusegrad profile: trace written to {trace}; open it in https://ui.perfetto.dev "
            "or chrome://tracing",
            file=sys.stderr,
        )
    else:
        print(
            f"fusegrad profile: {' '.join(cmd)} wrote no trace (did it import fusegrad, and "
            "exit normally?)",
            file=sys.stderr,
        )
        return code or 1
    return code


def add_export_web_command(commands: argparse._SubParsersAction) -> None:
    """Register ``fusegrad export-web MODULE:OBJECT --input-shape ... OUT/``."""
    export = commands.add_parser(
        "export-web",
        help="write a model as a web page that runs it on WebGPU (needs fusegrad-webgpu)",
        description="Import MODULE (a dotted name or a .py file) with its tensors on --device, "
        "take OBJECT from it (a callable of tensors returning one tensor; a class is called "
        "with no arguments first), call it on random inputs of the given shapes, and write "
        "its kernels, weights and a page that runs them on navigator.gpu into OUT.",
    )
    export.add_argument("target", metavar="MODULE:OBJECT")
    export.add_argument("out", metavar="OUT", help="the folder to write (created if needed)")
    export.add_argument(
        "--input-shape",
        action="append",
        required=True,
        metavar="N,N,...",
        help="the shape of an example input, e.g. 1,784; once per input",
    )
    export.add_argument("--dtype", default="float32", help="the inputs' dtype (float32)")
    export.add_argument("--device", default="WEBGPU", help="the device to trace it on")
    export.set_defaults(run=export_web_command)


def export_web_command(args: argparse.Namespace) -> int:
    """``fusegrad export-web``: 0 and the folder written, or 1 and what was wrong."""
    try:
        folder = _export_web(args)
    except (FusegradError, ImportError, AttributeError, ValueError, OSError) as e:
        print(f"fusegrad export-web: {e}", file=sys.stderr)
        return 1
    print(f"wrote {folder}: serve it over http (python -m http.server) and open index.html")
    return 0


def _export_web(args: argparse.Namespace) -> Path:
    try:
        from fusegrad_webgpu.export import export_webgpu  # an optional distribution
    except ImportError as e:
        raise ImportError(
            f"export-web needs the WebGPU backend ({e}); install it with "
            "`pip install 'fusegrad[webgpu]'`"
        ) from None
    module_name, _, object_path = args.target.partition(":")
    if not module_name or not object_path:
        raise ValueError(f"{args.target!r} is not MODULE:OBJECT (e.g. mymodel:net)")
    if not hasattr(dtypes, args.dtype):
        raise ValueError(f"unknown dtype {args.dtype!r} (e.g. float32, int32)")
    shapes = [_shape(text) for text in args.input_shape]
    previous = Device.DEFAULT
    Device.DEFAULT = args.device  # the module's tensors are made where the export reads them
    try:
        target: Any = _import(module_name)
        for attribute in object_path.split("."):
            target = getattr(target, attribute)
        if isinstance(target, type):
            target = target()
        if not callable(target):
            raise ValueError(f"{args.target} is a {type(target).__name__}, not a callable")
        rng = np.random.default_rng(0)
        dtype = getattr(dtypes, args.dtype)
        inputs = [
            Tensor(rng.standard_normal(s).astype(dtype.np), device=args.device) for s in shapes
        ]
        return export_webgpu(target, inputs, args.out, device=args.device)
    finally:
        Device.DEFAULT = previous


def _shape(text: str) -> tuple[int, ...]:
    try:
        shape = tuple(int(n) for n in text.split(","))
    except ValueError:
        shape = ()
    if not shape or any(n <= 0 for n in shape):
        raise ValueError(f"--input-shape {text!r}: give positive sizes separated by commas, 1,784")
    return shape


def _import(name: str) -> Any:
    """The module ``name``: a ``.py`` file's path, or a dotted name importable from here (the
    working folder first, as ``python -m`` does)."""
    if name.endswith(".py"):
        path = Path(name).resolve()
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None or not path.is_file():
            raise ImportError(f"no Python file {name}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        return module
    if "" not in sys.path and os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    return importlib.import_module(name)
