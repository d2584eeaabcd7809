"""Every relative link of README.md and docs/ resolves: the file exists, and so does its anchor.

A link is read with markdown-it (the parser rich already depends on), not a regular
expression; an anchor is a heading's GitHub slug (lower case, punctuation dropped, spaces as
hyphens, ``-1``, ``-2`` … for repeats). Links to other sites are not fetched.
"""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest
from markdown_it import MarkdownIt
from markdown_it.token import Token

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
_MD = MarkdownIt("commonmark").enable("table")


def _tokens(page: Path) -> list[Token]:
    return _MD.parse(page.read_text(encoding="utf-8"))


def _walk(tokens: list[Token]) -> list[Token]:
    out: list[Token] = []
    for token in tokens:
        out.append(token)
        out.extend(_walk(token.children or []))
    return out


def slug(text: str) -> str:
    """Return GitHub's anchor for a heading's text (before de-duplication).

    Args:
        text: the heading as plain text (code spans as their content).

    Returns:
        Lower case, every character that is not a letter, digit, ``_``, ``-`` or space
        dropped, spaces turned into hyphens.
    """
    return re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """Return the anchors of ``page``'s headings (repeats suffixed ``-1``, ``-2`` …, as GitHub)."""
    tokens = _tokens(page)
    seen: Counter[str] = Counter()
    found = set()
    for i, token in enumerate(tokens):
        if token.type != "heading_open":
            continue
        text = "".join(c.content for c in tokens[i + 1].children or [] if c.type != "softbreak")
        base = slug(text)
        found.add(base if not seen[base] else f"{base}-{seen[base]}")
        seen[base] += 1
    return frozenset(found)


def links(page: Path) -> list[str]:
    """Return the targets of ``page``'s links and images that point inside the repository."""
    targets = []
    for token in _walk(_tokens(page)):
        target = token.attrGet("href") if token.type == "link_open" else None
        if token.type == "image":
            target = token.attrGet("src")
        if isinstance(target, str) and not urlsplit(target).scheme:
            targets.append(target)
    return targets


def broken(page: Path) -> list[str]:
    """Return each relative link of ``page`` whose file or anchor does not exist, with why."""
    problems = []
    for target in links(page):
        parts = urlsplit(target)
        path = (page.parent / unquote(parts.path)).resolve() if parts.path else page
        if not path.exists():
            problems.append(f"{target}: no such file")
        elif parts.fragment and path.suffix == ".md" and parts.fragment not in anchors(path):
            problems.append(f"{target}: no heading with anchor #{parts.fragment} in {path.name}")
    return problems


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page: Path) -> None:
    assert broken(page) == []


def test_the_check_catches_a_broken_link(tmp_path: Path) -> None:
    (tmp_path / "other.md").write_text("# The `other` page: notes\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](other.md) [ok](other.md#the-other-page-notes) [ok](other.md#twice-1) "
        "[ok](#here) [web](https://example.org/x.md)\n\n# Here\n\n"
        "[gone](missing.md) [no anchor](other.md#nowhere) [third](other.md#twice-2)\n"
    )
    assert broken(page) == [
        "missing.md: no such file",
        "other.md#nowhere: no heading with anchor #nowhere in other.md",
        "other.md#twice-2: no heading with anchor #twice-2 in other.md",
    ]
