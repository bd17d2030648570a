"""Every distribution is publishable: licence, README, links, classifiers, Python version, and
backends that pin the core versions speaking their backend API (scripts/build-dists.sh builds
them and runs ``twine check``; this checks what that cannot: the pins and the files)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

import fusegrad
from fusegrad.plugin.hookspecs import BACKEND_API_VERSION

ROOT = Path(__file__).resolve().parents[2]
DISTRIBUTIONS = sorted(
    p.parent
    for pattern in ("core", "backend-*", "plugins/*")
    for p in ROOT.glob(f"{pattern}/pyproject.toml")
)
#: ``fusegrad>=X,<Y`` (in either order)
CORE_PIN = re.compile(r"^fusegrad\s*(>=\s*[\d.]+\s*,\s*<\s*[\d.]+|<\s*[\d.]+\s*,\s*>=\s*[\d.]+)$")


def project(folder: Path) -> dict:
    return tomllib.loads((folder / "pyproject.toml").read_text())["project"]


def version(text: str) -> tuple[int, ...]:
    return tuple(int(n) for n in text.split("."))


def test_all_distributions_found() -> None:
    names = {project(d)["name"] for d in DISTRIBUTIONS}
    assert {"fusegrad", "fusegrad-cpu", "fusegrad-webgpu", "fusegrad-template-device"} <= names


@pytest.mark.parametrize("folder", DISTRIBUTIONS, ids=lambda p: str(p.relative_to(ROOT)))
def test_metadata_is_complete(folder: Path) -> None:
    meta = project(folder)
    assert meta["license"] == "MIT"
    assert all((folder / f).is_file() for f in meta["license-files"])
    assert (folder / meta["readme"]).is_file() and (folder / meta["readme"]).stat().st_size > 200
    # (no [project.urls] yet: the project has no public address to point at)
    assert meta["requires-python"] == ">=3.11"
    assert "Programming Language :: Python :: 3.11" in meta["classifiers"]
    assert not any(
        c.startswith("License ::") for c in meta["classifiers"]
    )  # the expression says it


@pytest.mark.parametrize(
    "folder", [d for d in DISTRIBUTIONS if d.name != "core"], ids=lambda p: p.name
)
def test_plugins_pin_the_core_versions_of_their_api(folder: Path) -> None:
    """pip, not the runtime, refuses a core that speaks another backend API."""
    meta = project(folder)
    assert f"fusegrad-backend-api-{BACKEND_API_VERSION}" in meta["keywords"]
    (pin,) = [d for d in meta["dependencies"] if re.match(r"fusegrad\b(?!-)", d)]
    assert CORE_PIN.match(pin), f"{meta['name']} depends on {pin!r}, not fusegrad>=X,<Y"
    low = version(re.search(r">=\s*([\d.]+)", pin).group(1))  # type: ignore[union-attr]
    high = version(re.search(r"<\s*([\d.]+)", pin).group(1))  # type: ignore[union-attr]
    assert low <= version(fusegrad.__version__) < high


def test_core_ships_its_type_information() -> None:
    assert (ROOT / "core" / "src" / "fusegrad" / "py.typed").is_file()
    assert (ROOT / "LICENSE").is_file()
