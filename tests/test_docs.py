"""The documentation is tested: generated reference pages match the code, every config file the
README and docs name loads, and every code block marked runnable runs as written.

A block is runnable when the line before its fence is `<!-- runnable -->`. The marked blocks run
one after another, in the order a reader meets them (the README, then the site's pages in the
order of mkdocs.yml's nav), in one scratch directory that sees the repository's configs/,
examples/ and benchmarks/: a later block may read what an earlier one wrote (runs/tiny), and
nothing lands in the checkout. Bash blocks run with `bash -eu` and the virtualenv's `rlanything`
first on PATH; Python blocks in a fresh interpreter. Runnable blocks stay at tiny scale.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from suite import prefect_server

from rlanything_core.run.config import load_config

ROOT = Path(__file__).resolve().parents[1]
NAV = re.findall(r":\s*([\w/-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M)
PAGES = [ROOT / "README.md", *(ROOT / "docs" / page for page in NAV if page != "records/README.md")]
MARK = "<!-- runnable -->"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)
CONFIG_PATH = re.compile(
    r"(?<![\w/.-])((?:configs|examples|benchmarks/results)/[\w./-]+?\.ya?ml)\b"
)

sys.path.insert(0, str(ROOT / "docs"))
import generate  # noqa: E402


def runnable_blocks() -> list[tuple[str, str, str]]:
    """(page:line, language, code) of every block marked runnable in the README and docs."""
    blocks = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for match in FENCE.finditer(text):
            before = text[: match.start()].rstrip("\n").rsplit("\n", 1)[-1]
            if before.strip() == MARK:
                line = text.count("\n", 0, match.start()) + 1
                where = f"{page.relative_to(ROOT)}:{line}"
                blocks.append((where, match.group(1), match.group(2)))
    return blocks


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


@pytest.mark.slow
def test_runnable_blocks_run_in_reading_order(tmp_path: Path) -> None:
    for name in ("configs", "examples", "benchmarks"):
        (tmp_path / name).symlink_to(ROOT / name, target_is_directory=True)
    env = os.environ | {
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        # the session's server, not a temporary one started by each command
        "PREFECT_API_URL": prefect_server(),
        "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}",
    }
    for where, language, code in runnable_blocks():
        if language == "bash":
            command = ["bash", "-euc", code]
        elif language == "python":
            command = [sys.executable, "-c", code]
        else:
            pytest.fail(f"{where}: a runnable block must be bash or python, not {language}")
        done = subprocess.run(
            command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=900
        )
        output = (done.stdout + done.stderr)[-3000:]
        assert done.returncode == 0, f"{where} failed ({done.returncode}):\n{output}"
