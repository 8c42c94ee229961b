"""The documentation is tested: generated reference pages match the code and every config file
the README and docs name loads (tests/e2e/test_docs_runnable.py runs the runnable blocks)."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from doc_pages import MARK, NAV, PAGES, runnable_blocks

from rlanything_core.run.config import load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIG_PATH = re.compile(
    r"(?<![\w/.-])((?:configs|examples|benchmarks/results)/[\w./-]+?\.ya?ml)\b"
)

sys.path.insert(0, str(ROOT / "docs"))
import generate  # noqa: E402


def test_generated_reference_pages_are_current() -> None:
    assert not generate.missing_descriptions(), "config fields without a docstring"
    stale = [str(p.relative_to(ROOT)) for p in generate.stale_pages()]
    assert not stale, f"stale generated pages {stale}: run python docs/generate.py"


def test_the_check_fails_on_a_stale_page(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    page = tmp_path / "cli.md"
    page.write_text(generate.cli_page() + "an edit by hand\n", encoding="utf-8")
    monkeypatch.setattr(generate, "PAGES", {page: generate.cli_page})
    assert generate.stale_pages() == [page]
    assert generate.main(["--check"]) == 1


def test_every_config_file_the_docs_name_loads() -> None:
    named = {
        (page.relative_to(ROOT), path)
        for page in PAGES
        for path in CONFIG_PATH.findall(page.read_text(encoding="utf-8"))
    }
    assert named, "no config paths found: the pattern is wrong"
    for page, path in sorted(named):
        if not (ROOT / path).is_file():
            raise AssertionError(f"{page} names {path}, which does not exist")
        load_config(ROOT / path)


def test_runnable_blocks_are_found() -> None:
    assert runnable_blocks(), f"no block in the docs is marked {MARK}"


def test_every_page_is_in_the_nav() -> None:
    pages = {p.relative_to(ROOT / "docs").as_posix() for p in (ROOT / "docs").rglob("*.md")}
    assert pages == set(NAV) - {"records/README.md"}, "a page is missing from mkdocs.yml's nav"
