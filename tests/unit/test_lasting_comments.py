"""Config comments and docstrings say what a thing does and why, not what it measured on which day.

A dated figure or a run's history in a config file or a docstring goes stale the day the code moves
on; figures live in docs/results/, dated, with the file they came from. Read from the sources, so a
lab note added to a config comment fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted((ROOT / "configs").glob("*.yaml")) + [ROOT / "raypipe" / "demo.yaml"]
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
#: words of a lab log: a measurement's history rather than a key's meaning
HISTORY = re.compile(r"\bmeasured\b|\b\d+(\.\d+)? -> \d+(\.\d+)?\b", re.IGNORECASE)
MAX_COMMENT_LINES = 2


def _comment_blocks(text: str) -> list[tuple[int, list[str]]]:
    """(first line number, lines) of each run of whole-line comments after the file's header block."""
    blocks: list[tuple[int, list[str]]] = []
    run: list[str] = []
    start = 0
    seen_key = False
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if stripped.startswith("#"):
            if not run:
                start = number
            run.append(stripped)
            continue
        if run and seen_key:
            blocks.append((start, run))
        run = []
        seen_key = seen_key or bool(stripped)
    return blocks


def _lab_notes(text: str) -> list[str]:
    return [m.group(0) for pattern in (DATE, HISTORY) for m in pattern.finditer(text)]


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_a_config_comment_is_short_and_undated(path: Path):
    text = path.read_text(encoding="utf-8")
    long = [f"{path.name}:{line}: {len(lines)} lines" for line, lines in _comment_blocks(text)
            if len(lines) > MAX_COMMENT_LINES]
    notes = [f"{path.name}: {note!r}" for line in text.splitlines() if "#" in line
             for note in _lab_notes(line.split("#", 1)[1])]
    assert not long and not notes, "\n".join(long + notes)


def test_no_docstring_or_comment_in_the_package_carries_a_date():
    dated = [f"{p.relative_to(ROOT)}:{n}" for p in sorted((ROOT / "raypipe").rglob("*.py"))
             for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1) if DATE.search(line)]
    assert not dated, dated


def test_the_scan_sees_a_lab_note_and_a_long_comment():
    """The checks above must flag what they look for (else they prove nothing)."""
    text = "run_dir: x\n# one\n# two\n# three\nkey: 1\n"
    assert _comment_blocks(text) == [(2, ["# one", "# two", "# three"])]
    assert _lab_notes("measured on 2026-11-29: QA 58 -> 70") == ["2026-11-29", "measured", "58 -> 70"]
    assert _comment_blocks("# header\n# more\n# lines\nkey: 1\n") == []
