"""README.md and docs/ hold together: every relative markdown link resolves to a file or folder inside
the repository, every `#anchor` to a heading of its target (GitHub's slugs), and README.md stays a
product page of at most 300 lines (the rest lives in docs/)."""

from __future__ import annotations

import re
from collections import Counter
from functools import cache
from pathlib import Path
from urllib.parse import unquote

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
MAX_README_LINES = 300

_FENCE = re.compile(r"^ {0,3}(```|~~~)")
_CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1")
#: [text](target) and ![alt](target), text holding at most one level of brackets; an optional title
_INLINE = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
#: [label]: target
_REFERENCE = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s|$)")
_HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
_EXTERNAL = re.compile(r"^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|//)")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) outside fenced code blocks."""
    lines, fenced = [], None
    for number, line in enumerate(text.splitlines(), 1):
        fence = _FENCE.match(line)
        if fence:
            if fenced is None:
                fenced = fence.group(1)
            elif fence.group(1) == fenced:
                fenced = None
            continue
        if fenced is None:
            lines.append((number, line))
    return lines


def links(page: Path) -> list[tuple[int, str]]:
    """(line number, target) of every markdown link on `page` outside code."""
    found = []
    for number, line in _prose_lines(page.read_text(encoding="utf-8")):
        line = _CODE_SPAN.sub("", line)
        found += [(number, m.group(1)) for m in _INLINE.finditer(line)]
        if m := _REFERENCE.match(line):
            found.append((number, m.group(1)))
    return found


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: its text without markup, lower-cased, punctuation dropped
    (letters, digits, `_`, `-` and spaces stay), spaces as hyphens."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = text.replace("`", "").replace("*", "")
    text = re.sub(r"<[^>]+>", "", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    """Every heading anchor of `page`; a repeated slug gets -1, -2, ... as on GitHub."""
    seen: Counter[str] = Counter()
    result = set()
    for _, line in _prose_lines(page.read_text(encoding="utf-8")):
        if m := _HEADING.match(line):
            base = slug(m.group(2))
            result.add(f"{base}-{seen[base]}" if seen[base] else base)
            seen[base] += 1
    return frozenset(result)


def broken(page: Path, target: str) -> str | None:
    """Why `target`, linked from `page`, does not resolve; None when it does or is not relative."""
    if not target or _EXTERNAL.match(target):
        return None
    path, _, anchor = target.partition("#")
    resolved = (page.parent / unquote(path)).resolve() if path else page
    if not resolved.is_relative_to(ROOT):
        return "points outside the repository"
    if not resolved.exists():
        return "no such file"
    if anchor and resolved.suffix == ".md" and unquote(anchor).lower() not in anchors(resolved):
        return f"no heading #{anchor} in {resolved.relative_to(ROOT)}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page: Path) -> None:
    problems = [f"line {n}: ({target}) {why}" for n, target in links(page) if (why := broken(page, target))]
    assert not problems, f"{page.relative_to(ROOT)}:\n" + "\n".join(problems)


def test_readme_is_at_most_300_lines() -> None:
    n = len(README.read_text(encoding="utf-8").splitlines())
    assert n <= MAX_README_LINES, f"README.md has {n} lines (at most {MAX_README_LINES}); move detail into docs/"


def test_docs_exist_and_links_are_found() -> None:
    """The checker sees links at all: README links into docs/, and a broken one would be caught."""
    assert len(PAGES) > 1
    assert any(t.startswith("docs/") for _, t in links(README))
    assert broken(README, "docs/no-such-page.md") == "no such file"
    assert broken(README, "docs/README.md#no-such-heading") is not None
    assert broken(README, "../outside.md") == "points outside the repository"


@pytest.mark.parametrize(("heading", "anchor"), [
    ("Training: `raypipe train critic|generator|self-reasoning`", "training-raypipe-train-criticgeneratorself-reasoning"),
    ("§1 What flows through the system", "1-what-flows-through-the-system"),
    ("Reproducing the papers' tables", "reproducing-the-papers-tables"),
    ("ZeRO-3 memory on the real LM (2026-11-24)", "zero-3-memory-on-the-real-lm-2026-11-24"),
])
def test_slug_follows_github(heading: str, anchor: str) -> None:
    assert slug(heading) == anchor
