"""An eval file as rows: a jsonl file (one object per line) or a `.json` file holding a list of objects
(or `{"data": [...]}`, the wrapper ALCE's ASQA files use), each row with where it came from, so a
reject names its file, row and line. Kept apart from the row shapes (`datasets`, `released`), which
only see parsed values.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raypipe.errors import DataError


class Reject(Exception):
    """A bad row: `reason` (a reject count key), `field` (the field at fault, or None) and a detail."""

    def __init__(self, reason: str, field_name: str | None, detail: str):
        super().__init__(detail)
        self.reason, self.field = reason, field_name


@dataclass(frozen=True)
class FileRow:
    """One row: its 0-based `position` among the file's rows (blank lines skipped), its jsonl `line`
    (None in a JSON list), the parsed `value` or the `problem` that stopped parsing, and `raw` text for
    the rejects file."""

    position: int
    line: int | None
    value: Any
    problem: Reject | None
    raw: str


def text_field(row: dict[str, Any], name: str) -> str:
    """`row[name]`, which must be a non-blank string."""
    if name not in row or row[name] is None:
        raise Reject("missing_field", name, f"required field {name!r} is missing")
    value = row[name]
    if not isinstance(value, str):
        raise Reject("wrong_type", name, f"{name!r} must be a string, got {type(value).__name__}")
    if not value.strip():
        raise Reject("empty_field", name, f"{name!r} is empty")
    return value


def _jsonl_rows(path: Path) -> list[FileRow]:
    rows: list[FileRow] = []
    with path.open("rb") as fh:
        for number, raw in enumerate(fh, start=1):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                shown = raw.decode("utf-8", errors="backslashreplace").rstrip("\r\n")
                rows.append(FileRow(len(rows), number, None, Reject("invalid_utf8", None, "line is not valid UTF-8"), shown))
                continue
            if not text.strip():
                continue
            try:
                value, problem = json.loads(text), None
            except json.JSONDecodeError as exc:
                value, problem = None, Reject("malformed_json", None, f"not valid JSON: {exc}")
            rows.append(FileRow(len(rows), number, value, problem, text.rstrip("\r\n")))
    return rows


def _json_rows(path: Path) -> list[FileRow]:
    """A whole-file JSON list; a file that is not one is an error of the file, not of a row."""
    try:
        data = json.loads(path.read_bytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"not a JSON file: {exc}", file=str(path)) from None
    if isinstance(data, dict) and isinstance(data.get("data"), list):
        data = data["data"]
    if not isinstance(data, list):
        raise DataError("a .json eval set must hold a list of rows (or {\"data\": [...]}), got "
                        f"{type(data).__name__}", file=str(path))
    return [FileRow(i, None, value, None, json.dumps(value, ensure_ascii=False)) for i, value in enumerate(data)]


def read_rows(path: Path) -> list[FileRow]:
    """Every row of `path`: a `.json` file is one JSON document (as the released Self-RAG scripts read
    a `.json` input), anything else is jsonl."""
    return _json_rows(path) if path.suffix == ".json" else _jsonl_rows(path)
