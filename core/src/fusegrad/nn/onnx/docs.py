"""The supported-ops table of docs/onnx.md, generated from the registry.

    python -m fusegrad.nn.onnx.docs > table.md   # or: --write docs/onnx.md

``--write`` replaces the text between the ``<!-- ops-table -->`` markers of the file; a test
checks that the committed docs match the registry.
"""

from __future__ import annotations

import sys
from pathlib import Path

import onnx.defs

from fusegrad.nn.onnx import OPS

BEGIN, END = "<!-- ops-table -->", "<!-- /ops-table -->"


def ops_table() -> str:
    """A markdown table: domain, op, the opsets its implementations start at, and the newest
    version onnx defines."""
    lines = [
        "| domain | op | implemented from opset | onnx's newest version |",
        "|---|---|---|---|",
    ]
    for (domain, op), versions in sorted(OPS.items()):
        try:
            newest = str(onnx.defs.get_schema(op, domain=domain).since_version)
        except onnx.defs.SchemaError:
            newest = "-"
        since = ", ".join(str(v) for v in sorted({v for v, _ in versions}))
        lines.append(f"| {domain or 'ai.onnx'} | {op} | {since} | {newest} |")
    return "\n".join(lines)


def replace_table(text: str) -> str:
    """``text`` with the table between the markers regenerated."""
    head, _, rest = text.partition(BEGIN)
    _, _, tail = rest.partition(END)
    return f"{head}{BEGIN}\n{ops_table()}\n{END}{tail}"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        path = Path(sys.argv[2])
        path.write_text(replace_table(path.read_text()))
    else:
        print(ops_table())
