"""MkDocs hook: the benchmark records under benchmarks/results/ as pages of the site.

Every `benchmarks/results/**/README.md` becomes the page `records/<its directory>/README.md`
(the index, `benchmarks/results/README.md`, becomes `records/README.md`), and every PNG under
`benchmarks/results/` is copied to the same place under `records/`, so a record's images show.

The records are written for the repository, so their relative links may point at files the site
does not hold (JSON, YAML, configs, scripts). On a record's page such a link becomes a code span
that shows the file's repository path, and a link to a directory becomes a link to that
directory's record when it has one (and a link to a page's source under docs/ becomes a link to
that page). `mkdocs build --strict` then passes, and the paths stay readable. Links inside code
are left alone.
"""

from __future__ import annotations

import posixpath
import re
from pathlib import Path
from typing import TYPE_CHECKING

from mkdocs.structure.files import File, Files

if TYPE_CHECKING:
    from mkdocs.config.defaults import MkDocsConfig
    from mkdocs.livereload import LiveReloadServer
    from mkdocs.structure.pages import Page

RESULTS = "benchmarks/results"
"""The records' directory, relative to the repository root (the directory of mkdocs.yml)."""
DOCS = "docs"
"""The site's pages in the repository (mkdocs.yml's docs_dir)."""
PREFIX = "records"
"""Where the records go in the site."""

_records: dict[str, str] = {}
"""src_uri of each record page → its directory in the repository (e.g. benchmarks/results/x)."""

_FENCE = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})")
_CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`)(?:(?!\n[ \t]*\n).)+?(?<!`)\1(?!`)", re.DOTALL)
"""A code span: it may wrap lines but not cross a blank line."""
_LINK = re.compile(
    r"(?P<bang>!?)\[(?P<text>(?:[^\[\]]|\[[^\[\]]*\])*)\]"
    r"\((?P<target><[^>]*>|[^()\s]*(?:\([^()\s]*\)[^()\s]*)*)(?P<title>\s+\"[^\"]*\")?\)"
)
_INDENTED = re.compile(r"^(?: {4}|\t)")
_CONTINUES = re.compile(r"^(?: {2,}|\t|\s*(?:[-*+]|\d+[.)])\s)")
"""A line after which an indented line continues a list item rather than starting code."""
_SCHEME = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:")


def _root(config: MkDocsConfig) -> Path:
    """The repository root: the directory that holds mkdocs.yml."""
    return Path(config.config_file_path).resolve().parent


def on_files(files: Files, *, config: MkDocsConfig) -> Files:
    """Add the records (the index benchmarks/results/README.md among them) and their PNGs
    under records/."""
    results = _root(config) / RESULTS
    _records.clear()
    if not results.is_dir():
        return files
    readmes = sorted(results.rglob("README.md"))
    for readme in readmes:
        relative = readme.relative_to(results).as_posix()
        src_uri = f"{PREFIX}/{relative}"
        files.append(File.generated(config, src_uri, abs_src_path=str(readme)))
        _records[src_uri] = posixpath.dirname(f"{RESULTS}/{relative}")
    for image in sorted(results.rglob("*.png")):
        src_uri = f"{PREFIX}/{image.relative_to(results).as_posix()}"
        files.append(File.generated(config, src_uri, abs_src_path=str(image)))
    return files


def _resolve(target: str, page_uri: str, repo_dir: str, files: Files) -> tuple[str, str | None]:
    """For a relative link `target` on the record page `page_uri`: the target to keep (a site
    file, or a directory's record) and None, or the target unchanged and the repository path
    to show in its place when the site does not hold it."""
    path, hash_, fragment = target.partition("#")
    here = posixpath.dirname(page_uri)
    site_path = posixpath.normpath(posixpath.join(here, path))
    if not path.endswith("/") and files.get_file_from_path(site_path) is not None:
        return target, None
    for name in ("README.md", "index.md"):
        if files.get_file_from_path(posixpath.join(site_path, name)) is not None:
            joined = posixpath.join(path, name) if path else name
            return joined + hash_ + fragment, None
    repo_path = posixpath.normpath(posixpath.join(repo_dir, path))
    if repo_path.startswith(f"{DOCS}/") and not path.endswith("/"):
        page = repo_path.removeprefix(f"{DOCS}/")
        if files.get_file_from_path(page) is not None:  # a page of this site, linked by its source
            return posixpath.relpath(page, here or ".") + hash_ + fragment, None
    if path.endswith("/"):
        repo_path += "/"
    return target, repo_path


def _is_relative(target: str) -> bool:
    """A link that points into the site or the repository, not to a URL, an anchor or a root."""
    return bool(target) and not (target.startswith(("#", "/")) or _SCHEME.match(target) is not None)


def _shown(text: str, repo_path: str) -> str:
    """What an unresolved link becomes: its repository path as code, after its text when the
    text says something else."""
    code = f"`{repo_path}`"
    plain = text.strip().strip("`").strip()
    names = {repo_path, repo_path.rstrip("/"), posixpath.basename(repo_path.rstrip("/"))}
    if not plain or plain in names or plain.rstrip("/") in names:
        return code
    return f"{text} ({code})"


def _rewrite_prose(text: str, page_uri: str, repo_dir: str, files: Files) -> str:
    """Rewrite the inline links of prose (code spans already taken out)."""

    def replace(match: re.Match[str]) -> str:
        raw = match["target"]
        target = raw[1:-1] if raw.startswith("<") else raw
        if not _is_relative(target):
            return match[0]
        kept, repo_path = _resolve(target, page_uri, repo_dir, files)
        if repo_path is None:
            title = match["title"] or ""
            return f"{match['bang']}[{match['text']}]({kept}{title})"
        return _shown(match["text"], repo_path)

    return _LINK.sub(replace, text)


def _outside_code_spans(text: str, page_uri: str, repo_dir: str, files: Files) -> str:
    """Rewrite the links of a stretch of prose, leaving its code spans as they are."""
    out: list[str] = []
    last = 0
    for span in _CODE_SPAN.finditer(text):
        out.append(_rewrite_prose(text[last : span.start()], page_uri, repo_dir, files))
        out.append(span[0])
        last = span.end()
    out.append(_rewrite_prose(text[last:], page_uri, repo_dir, files))
    return "".join(out)


def on_page_markdown(markdown: str, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    """On a record's page, make every relative link resolve in the site or show its path."""
    repo_dir = _records.get(page.file.src_uri)
    if repo_dir is None:
        return markdown
    out: list[str] = []
    prose: list[str] = []
    fence: str | None = None

    def flush() -> None:
        if not prose:
            return
        text = "\n".join(prose)
        out.append(_outside_code_spans(text, page.file.src_uri, repo_dir, files))
        prose.clear()

    indented = False  # inside an indented code block
    last = ""  # the last non-blank line of prose, to tell an indented code block from a list
    for line in markdown.split("\n"):
        match = _FENCE.match(line)
        if fence is None and match is not None:
            flush()
            fence = match["fence"]
            out.append(line)
        elif fence is not None:
            out.append(line)
            closing = line.strip()
            if closing.startswith(fence[0] * len(fence)) and set(closing) == {fence[0]}:
                fence = None
        elif _INDENTED.match(line) and (
            indented or (prose and not prose[-1].strip() and not _CONTINUES.match(last))
        ):
            flush()
            indented = True
            out.append(line)
        elif indented and not line.strip():
            out.append(line)
        else:
            indented = False
            prose.append(line)
            if line.strip():
                last = line
    flush()
    return "\n".join(out)


def on_serve(server: LiveReloadServer, *, config: MkDocsConfig, builder: object) -> None:
    """`mkdocs serve` rebuilds when a record changes."""
    results = _root(config) / RESULTS
    if results.is_dir():
        server.watch(str(results))
