"""The README and the documentation site's pages, in the order a reader meets them (the README,
then mkdocs.yml's nav), and the code blocks in them marked runnable: the line before the fence
is `<!-- runnable -->`."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NAV = re.findall(r":\s*([\w/-]+\.md)\s*$", (ROOT / "mkdocs.yml").read_text(), flags=re.M)
PAGES = [ROOT / "README.md", *(ROOT / "docs" / page for page in NAV if page != "records/README.md")]
MARK = "<!-- runnable -->"
FENCE = re.compile(r"^```(\w+)[^\n]*\n(.*?)^```", re.S | re.M)


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
