"""``fusegrad onnx MODEL.onnx``: run an ONNX model once (or ``--bench N`` times) and report.

It prints the graph's summary (opsets, op counts, parameters, inputs and outputs), then each
output's shape, dtype and values, and the kernels launched and their time. Inputs not given
with ``--input name=FILE.npy`` are random, shaped as the model declares them (a named,
symbolic dimension is 1). This module imports the onnx package only when the command runs, so
``fusegrad --help`` works without it.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter
from typing import Any

import numpy as np

from fusegrad.engine.realize import GlobalCounters
from fusegrad.errors import FusegradError, InvalidArgument
from fusegrad.nn.onnx import OnnxRunner


def add_onnx_command(commands: argparse._SubParsersAction) -> None:
    """Register ``fusegrad onnx`` on the ``fusegrad`` command's subparsers."""
    cmd = commands.add_parser(
        "onnx",
        help="run an ONNX model: graph summary, outputs, kernels and time",
        description="Run an ONNX model with fusegrad and print its graph summary, its outputs "
        "and the kernels it launched. Inputs not given are random (symbolic dims = 1).",
    )
    cmd.add_argument("model", help="the .onnx file")
    cmd.add_argument(
        "--input",
        action="append",
        default=[],
        metavar="NAME=FILE.npy",
        help="an input's value from a .npy file (repeat for several)",
    )
    cmd.add_argument(
        "--shape",
        action="append",
        default=[],
        metavar="NAME=D0,D1,...",
        help="the shape of a random input (default: as declared, unknown dims 1)",
    )
    cmd.add_argument("--device", default=None, help="the device, e.g. CPU (default: DEV)")
    cmd.add_argument(
        "--bench",
        type=int,
        default=0,
        metavar="N",
        help="also run N more times and print the median time",
    )
    cmd.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    cmd.set_defaults(run=onnx_command)


def onnx_command(args: argparse.Namespace) -> int:
    runner = OnnxRunner(args.model, device=args.device)
    print(graph_summary(runner))
    shapes = {name: [int(d) for d in dims.split(",")] for name, dims in _pairs(args.shape)}
    given = {name: np.load(path, allow_pickle=False) for name, path in _pairs(args.input)}
    inputs = make_inputs(runner, given, shapes, np.random.default_rng(args.seed))
    try:
        seconds, kernels = run_once(runner, inputs)
    except FusegradError as e:
        random = [name for name in inputs if name not in given]
        hint = (
            f"\n(inputs {', '.join(random)} are random, unknown dims 1: give real ones with "
            "--input NAME=FILE.npy or their shape with --shape NAME=D0,D1,...)"
            if random
            else ""
        )
        print(f"error: {e}{hint}", file=sys.stderr)
        return 1
    outputs = runner(inputs)
    print("\noutputs:")
    for name, value in outputs.items():
        print(f"  {name}: {describe(value)}")
    print(f"\n{kernels} kernels, {seconds * 1e3:.2f} ms (first run, compiling included)")
    if args.bench > 0:
        times = [run_once(runner, inputs)[0] for _ in range(args.bench)]
        print(
            f"bench: median {np.median(times) * 1e3:.3f} ms, min {min(times) * 1e3:.3f} ms "
            f"over {args.bench} runs on {runner.device}"
        )
    return 0


def graph_summary(runner: Any) -> str:
    """Opsets, op counts (subgraphs included), parameters, inputs and outputs."""
    model = runner.model
    ops: Counter[str] = Counter()

    def count(graph: Any) -> None:
        for node in graph.node:
            ops[f"{node.domain + '.' if node.domain else ''}{node.op_type}"] += 1
            for a in node.attribute:
                if a.HasField("g"):
                    count(a.g)

    count(model.graph)
    params = sum(int(np.prod(t.dims)) for t in model.graph.initializer)
    params += sum(  # weights some exporters (Paddle) put in Constant nodes
        int(np.prod(a.t.dims))
        for node in model.graph.node
        if node.op_type == "Constant"
        for a in node.attribute
        if a.name == "value"
    )
    opsets = ", ".join(f"{o.domain or 'ai.onnx'} {o.version}" for o in model.opset_import)
    lines = [
        f"model: {model.graph.name or '?'} (producer {model.producer_name or '?'}, opset {opsets})",
        f"nodes: {sum(ops.values())}, parameters: {params:,}",
        "ops: " + ", ".join(f"{op} x{n}" for op, n in ops.most_common()),
        "inputs:",
        *[f"  {spec.name}: {spec.describe()}" for spec in runner.inputs],
        "outputs (declared):",
        *[f"  {spec.name}: {spec.describe()}" for spec in runner.outputs],
    ]
    return "\n".join(lines)


def _pairs(items: list[str]) -> list[tuple[str, str]]:
    """``NAME=VALUE`` options as pairs."""
    out = []
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise InvalidArgument(f"{item!r} should be NAME=VALUE, e.g. --input x=x.npy")
        out.append((name, value))
    return out


def make_inputs(
    runner: Any,
    given: dict[str, np.ndarray],
    shapes: dict[str, list[int]],
    rng: np.random.Generator,
) -> dict:
    """The given inputs, plus a random value for each one not given (of the shape in
    ``shapes``, else the declared one with 1 for each unknown size)."""
    from onnx import helper

    inputs: dict[str, Any] = dict(given)
    for spec in runner.inputs:
        if spec.name in inputs or spec.kind != "tensor":
            continue
        shape = shapes.get(spec.name) or [
            d if isinstance(d, int) and d > 0 else 1 for d in (spec.dims or ())
        ]
        dtype = np.dtype(helper.tensor_dtype_to_np_dtype(spec.elem_type or 1))
        if dtype.kind == "f":
            value = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            value = rng.integers(0, 2, shape).astype(bool)
        else:
            value = rng.integers(0, 10, shape).astype(dtype)
        inputs[spec.name] = value
    return inputs


def run_once(runner: Any, inputs: dict) -> tuple[float, int]:
    """Seconds and kernel count of one run, every output read back."""
    GlobalCounters.reset()
    start = time.perf_counter()
    for value in runner(inputs).values():
        for t in value if isinstance(value, list) else [value]:
            if hasattr(t, "realize"):
                t.realize()
    took = time.perf_counter() - start
    return took, GlobalCounters.kernel_count


def describe(value: Any) -> str:
    if value is None:
        return "None (empty optional)"
    if isinstance(value, list):
        return f"sequence of {len(value)}: [" + "; ".join(describe(v) for v in value) + "]"
    array = value if isinstance(value, np.ndarray) else value.numpy()
    dtype = getattr(value.dtype, "name", value.dtype)
    text = np.array2string(array, threshold=20, edgeitems=3, precision=5)
    return f"shape {list(array.shape)} {dtype}\n" + "\n".join("    " + s for s in text.split("\n"))
