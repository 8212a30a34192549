"""The documentation's links hold: every relative link in README.md, docs/ and deployments/README.md
names a file that exists and, with `#anchor`, a heading of that file; every repository path the docs
cite in backticks (`lib/training/train.py`, `flows/consolidate.py:nightly_consolidation`) exists; and the
README links every page of docs/.

Anchors are GitHub's: the heading's text, lower case, punctuation dropped, spaces to hyphens, a
repeated heading suffixed -1, -2. Links inside code (fenced blocks, `spans`) are not links.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), ROOT / "deployments" / "README.md"]
TOP_DIRS = ("lib", "tasks", "flows", "cli", "bench", "scripts", "tests", "deployments", "docker", "docs")

FENCE = re.compile(r"^(```|~~~).*?^\1[ \t]*$", re.S | re.M)
CODE_SPAN = re.compile(r"(`+)(.+?)\1", re.S)
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})[ \t]+(.+?)[ \t]*#*[ \t]*$", re.M)


def prose(text: str) -> str:
    """The text outside fenced code blocks."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: rendered text, lower case, punctuation out, spaces to '-'."""
    text = CODE_SPAN.sub(lambda m: m.group(2), heading)  # `code` renders as its text
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link renders as its label
    text = text.lower()
    text = "".join(c for c in text if c.isalnum() or c in "-_ ")
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for m in HEADING.finditer(prose(page.read_text(encoding="utf-8"))):
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[str]:
    text = CODE_SPAN.sub("", prose(page.read_text(encoding="utf-8")))
    return [m.group(1) for m in LINK.finditer(text)]


def test_slug_is_githubs():
    assert slug("Data: manifests, token shards, packing") == "data-manifests-token-shards-packing"
    assert slug("Conversations in the model's format") == "conversations-in-the-models-format"
    assert slug("Day → night → day") == "day--night--day"
    assert slug("Files dropped into `buffers/`") == "files-dropped-into-buffers"
    assert slug("`consolidate demo` and **bold**") == "consolidate-demo-and-bold"
    assert slug("max_drop_share") == "max_drop_share"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_anchors_resolve(page: Path):
    broken = []
    for target in links(page):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
            continue
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no file {dest.relative_to(ROOT) if dest.is_relative_to(ROOT) else dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{page.relative_to(ROOT)}:\n  " + "\n  ".join(broken)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_cited_repository_paths_exist(page: Path):
    missing = []
    for m in CODE_SPAN.finditer(prose(page.read_text(encoding="utf-8"))):
        token = m.group(2).strip()
        if not re.fullmatch(rf"(?:{'|'.join(TOP_DIRS)})/[\w./-]*(?::\w+)?", token):
            continue
        path = token.split(":", 1)[0]
        if not (ROOT / path).exists():
            missing.append(token)
    assert not missing, f"{page.relative_to(ROOT)} cites paths that do not exist: {sorted(set(missing))}"


def test_readme_links_every_docs_page():
    linked = {(ROOT / t.partition("#")[0]).resolve() for t in links(ROOT / "README.md") if t.startswith("docs/")}
    unlinked = [p.name for p in sorted((ROOT / "docs").glob("*.md")) if p.resolve() not in linked]
    assert not unlinked, f"README.md does not link these docs pages: {unlinked}"
