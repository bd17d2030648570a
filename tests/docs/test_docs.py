"""The documentation site builds with ``mkdocs build --strict``, its internal links lead
somewhere, and the hook reference matches the hook docstrings."""

from __future__ import annotations

import os
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]


class Links(HTMLParser):
    """The hrefs and element ids of one HTML page."""

    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []
        self.ids: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = dict(attrs)
        if values.get("id"):
            self.ids.add(values["id"] or "")
        if tag == "a" and values.get("href"):
            self.hrefs.append(values["href"] or "")


def parse(page: Path) -> Links:
    links = Links()
    links.feed(page.read_text(encoding="utf-8"))
    return links


def dead_links(site: Path) -> list[str]:
    site = site.resolve()
    """Every internal link of every built page whose file, or anchor in it, does not exist."""
    pages = {page: parse(page) for page in site.rglob("*.html")}
    dead = []
    for page, links in pages.items():
        for href in links.hrefs:
            url = urlsplit(href)
            if url.scheme or url.netloc or href.startswith("mailto:"):
                continue
            path = unquote(url.path)
            base = site if path.startswith("/") else page.parent  # the 404 page links from "/"
            target = (base / path.lstrip("/")).resolve() if path else page
            if target.is_dir():
                target = target / "index.html"
            if not target.is_file():
                dead.append(f"{page.relative_to(site)}: {href} (no such file)")
            elif url.fragment and target.suffix == ".html":
                ids = pages[target].ids if target in pages else parse(target).ids
                if unquote(url.fragment) not in ids:
                    dead.append(f"{page.relative_to(site)}: {href} (no such anchor)")
    return dead


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site, built once with ``mkdocs build --strict`` (warnings are errors)."""
    out = tmp_path_factory.mktemp("site")
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(out)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return out


def test_every_page_is_built(site: Path):
    for page in ("tutorial", "architecture", "backend-guide", "hooks", "api", "glossary"):
        assert (site / page / "index.html").is_file(), page
    assert (site / "index.html").is_file()


def test_every_page_is_in_the_nav():
    """A page left out of mkdocs.yml's nav is built but reached by no menu."""
    nav = (ROOT / "mkdocs.yml").read_text(encoding="utf-8").split("\nnav:\n")[1]
    pages = {page.name for page in (ROOT / "docs").glob("*.md")}
    assert {page for page in pages if f": {page}\n" not in nav} == set()


def test_no_dead_internal_links(site: Path):
    assert dead_links(site) == []


def test_dead_link_check_finds_dead_links(tmp_path: Path):
    (tmp_path / "a").mkdir()
    (tmp_path / "index.html").write_text(
        '<a href="a/">ok</a> <a href="b/">dead</a> <a href="#x">x</a>'
    )
    (tmp_path / "a" / "index.html").write_text('<h1 id="top">A</h1><a href="../#nothere">no</a>')
    assert dead_links(tmp_path) == [
        "index.html: b/ (no such file)",
        "index.html: #x (no such anchor)",
        "a/index.html: ../#nothere (no such anchor)",
    ]


def test_hook_reference_documents_every_hook(site: Path):
    from fusegrad.plugin.hookspecs import BACKEND_API_VERSION, hook_names

    page = (site / "hooks" / "index.html").read_text()
    for name in hook_names():
        assert f'id="{name}"' in page, name
    assert f"backend API version <strong>{BACKEND_API_VERSION}</strong>" in page


def test_api_reference_is_generated(site: Path):
    page = (site / "api" / "index.html").read_text()
    assert "fusegrad.tensor.Tensor" in page and "schedule" in page
    assert "UnsupportedOp" in page


def test_hook_reference_is_up_to_date():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_hook_reference.py"), "--check"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr


def test_torch_name_table_is_current():
    """docs/torch-names.md is what scripts/torch_names.py makes of today's API and torch."""
    pytest.importorskip("torch")
    script = ROOT / "scripts" / "torch_names.py"
    result = subprocess.run(
        [sys.executable, str(script), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
