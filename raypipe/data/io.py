"""Readers and writers of instance/passage files, with per-row validation and a rejects file.

Input comes from many sources (the synthetic world, converted public data sets, user files), so every
row is checked against the kind's schema before it enters a pipeline. A bad row never stops a job and
is never dropped silently: it goes to ``<rejects_dir>/<file stem>.rejects.jsonl`` with its source
file, position, id, reason, field and raw text, and the per-reason counts land in a `ReadReport` that
jobs put in their stats JSON. A file that cannot be read at all is a `DataError` naming the file.

Reject reasons (exact strings, used as stats keys): see `REASONS`. Size limits come from the config's
`limits` section (`LimitsConfig`; its defaults when a caller passes none): a field longer than its
limit is `too_long`, and the record's detail gives the size; so is a JSON line of more than
`max_line_bytes` (field `line`), found without reading it whole. A reject record's `raw` is cut to
`RAW_MAX_CHARS` (its full length in `raw_chars`), so one huge row cannot swell the rejects file.

Formats: ``.jsonl`` (one JSON object per line), ``.json`` (JSON lines, or one JSON array of objects
when the file starts with ``[``; an array file is read whole) and ``.parquet`` (streamed by batches).
JSON lines are decoded line by line from bytes, so one line of invalid UTF-8 rejects that line only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from pathlib import Path
from typing import IO, Any, Literal, NamedTuple

import pyarrow as pa
import pyarrow.parquet as pq

from raypipe.data.schemas import NON_EMPTY, OPTIONAL_DEFAULTS, SCHEMAS
from raypipe.disk import atomic_path, full_disk_named, temp_sibling
from raypipe.errors import DataError
from raypipe.settings.data import LimitsConfig

logger = logging.getLogger(__name__)

Kind = Literal["instance", "passage"]

DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
REASONS = ("malformed_json", "missing_field", "wrong_type", "empty_output", "empty_field", "duplicate_id",
           "invalid_utf8", "too_long", "too_many_sentences")
#: `too_many_sentences` is given where outputs are split (augmentation), not by the readers here
RAW_MAX_CHARS = 4096
#: `meta` is stored as a JSON string; rows may carry it as an object, which is serialized.
META_FIELD = "meta"


@dataclass
class ReadReport:
    """What reading one file (or a directory of files) produced: rows kept and rows rejected by reason.

    `rejects_path` is the rejects file of a single input file, or the rejects directory when the
    report covers several files; None when nothing was rejected or no rejects_dir was given.
    """

    path: str
    kind: str
    n_ok: int = 0
    rejects: dict[str, int] = field(default_factory=dict)
    rejects_path: str | None = None

    @property
    def n_rejected(self) -> int:
        return sum(self.rejects.values())

    def as_dict(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "n_ok": self.n_ok, "n_rejected": self.n_rejected,
                "rejects": dict(self.rejects), "rejects_path": self.rejects_path}

    def count(self, reason: str, n: int = 1) -> None:
        self.rejects[reason] = self.rejects.get(reason, 0) + n

    def snapshot(self) -> ReadReport:
        """An independent copy, so a consumer keeping yielded reports sees the counts of that moment."""
        return dataclasses.replace(self, rejects=dict(self.rejects))


@dataclass(frozen=True)
class _Problem:
    reason: str
    field: str | None
    detail: str


class _Item(NamedTuple):
    """One input row as read from a file: a parsed value, or a problem found before parsing."""

    line: int
    row: Any = None
    raw: str | None = None
    problem: _Problem | None = None


# --- per-row validation ----------------------------------------------------------------------------


def _schema(kind: str) -> pa.Schema:
    if kind not in SCHEMAS:
        raise ValueError(f"kind must be one of {sorted(SCHEMAS)}, got {kind!r}")
    return SCHEMAS[kind]


def _as_meta_json(value: Any) -> str | _Problem:
    """A meta object becomes a JSON string; a meta string must already be a JSON object."""
    if isinstance(value, dict):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, str):
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = None
        if isinstance(parsed, dict):
            return value
        return _Problem("wrong_type", META_FIELD, "meta must be a JSON object or a string holding one")
    return _Problem("wrong_type", META_FIELD, f"meta must be a JSON object, got {type(value).__name__}")


def _clean_row(row: Any, kind: str, max_chars: dict[str, int]) -> dict[str, str] | _Problem:
    """The row reduced to the schema's fields as strings, or the first problem found (schema order;
    sizes are checked last, against `max_chars`: field -> longest value accepted)."""
    if not isinstance(row, dict):
        return _Problem("malformed_json", None, f"expected a JSON object, got {type(row).__name__}")
    defaults = OPTIONAL_DEFAULTS[kind]
    clean: dict[str, str] = {}
    for name in _schema(kind).names:
        value = row.get(name)
        if value is None:
            if name not in defaults:
                what = "null" if name in row else "missing"
                return _Problem("missing_field", name, f"required field {name!r} is {what}")
            value = defaults[name]
        if isinstance(value, bytes):
            try:
                value = value.decode("utf-8")
            except UnicodeDecodeError as exc:
                return _Problem("invalid_utf8", name, f"{name!r} is not valid UTF-8: {exc}")
        if name == META_FIELD:
            value = _as_meta_json(value)
            if isinstance(value, _Problem):
                return value
        if not isinstance(value, str):
            return _Problem("wrong_type", name, f"{name!r} must be a string, got {type(value).__name__}")
        clean[name] = value
    for name in NON_EMPTY[kind]:
        if not clean[name].strip():
            reason = "empty_output" if name == "output" else "empty_field"
            return _Problem(reason, name, f"{name!r} is empty")
    for name, limit in max_chars.items():
        if len(clean[name]) > limit:
            return _Problem("too_long", name, f"{name!r} has {len(clean[name]):,} characters (limit {limit:,})")
    return clean


def _printable(value: Any) -> str:
    """JSON fallback for a rejected row's raw text: bytes (bad UTF-8 from parquet) stay readable."""
    return value.decode("utf-8", errors="backslashreplace") if isinstance(value, bytes) else repr(value)


def _printable_id(value: Any) -> str:
    """A rejected row's id as text: undecodable bytes are shown with backslash escapes, cut to 200."""
    text = value.decode("utf-8", errors="backslashreplace") if isinstance(value, bytes) else str(value)
    return text[:200]


class _BatchBuilder:
    """Validates rows one by one into column lists of good rows plus reject records.

    `seen_ids` is shared across batches and files so duplicates are caught over a whole stream; the
    first valid occurrence of an id wins.
    """

    def __init__(self, kind: str, source: str, seen_ids: set[str] | None, limits: LimitsConfig | None):
        self.kind, self.source, self.seen_ids = kind, source, seen_ids
        self.max_chars = (limits or LimitsConfig()).chars(kind)
        self.schema = _schema(kind)
        self.columns: dict[str, list[str]] = {name: [] for name in self.schema.names}
        self.rejects: list[dict[str, Any]] = []
        #: keys outside the schema; they are dropped, and the reader logs them once per file
        self.extra_fields: set[str] = set()

    def feed(self, item: _Item) -> None:
        if item.problem is not None:
            self._reject(item.problem, item.line, None, item.raw)
            return
        row = item.row
        if isinstance(row, dict):
            self.extra_fields.update(row.keys() - self.columns.keys())
        clean = _clean_row(row, self.kind, self.max_chars)
        if isinstance(clean, dict) and self.seen_ids is not None:
            if clean["id"] in self.seen_ids:
                clean = _Problem("duplicate_id", "id", f"id {clean['id']!r} already seen")
            else:
                self.seen_ids.add(clean["id"])
        if isinstance(clean, _Problem):
            self._reject(clean, item.line, row, item.raw)
            return
        for name, value in clean.items():
            self.columns[name].append(value)

    def _reject(self, problem: _Problem, line: int, row: Any, raw: str | None) -> None:
        row_id = row.get("id") if isinstance(row, dict) else None
        if raw is None:
            raw = json.dumps(row, ensure_ascii=False, default=_printable)
        record = {
            "source": self.source, "line": line, "id": None if row_id is None else _printable_id(row_id),
            "reason": problem.reason, "field": problem.field, "detail": problem.detail,
            "raw": raw[:RAW_MAX_CHARS],
        }
        if len(raw) > RAW_MAX_CHARS:
            record["raw_chars"] = len(raw)
        self.rejects.append(record)

    def table(self) -> pa.Table:
        return pa.table(self.columns, schema=self.schema)


def _rows_of(batch: pa.Table | pa.RecordBatch) -> list[dict[str, Any]]:
    """Rows as dicts; a string column holding invalid UTF-8 is read as bytes so the bad cells are
    rejected one by one instead of failing the whole batch."""
    columns: dict[str, list[Any]] = {}
    for name, column in zip(batch.schema.names, batch.columns, strict=True):
        try:
            columns[name] = column.to_pylist()
        except UnicodeDecodeError:
            columns[name] = column.cast(pa.binary()).to_pylist()
    return [{name: values[i] for name, values in columns.items()} for i in range(batch.num_rows)]


def validate_batch(table: pa.Table, kind: Kind, source: str, seen_ids: set[str] | None = None,
                   limits: LimitsConfig | None = None) -> tuple[pa.Table, list[dict[str, Any]]]:
    """Good rows (conforming to the kind's schema, input order kept) and reject records of one batch.

    Meant for Ray Data ``map_batches(batch_format="pyarrow")``: there a batch has no file position, so
    a reject's `line` is the 1-based row within `table` (which is how a caller maps rejects back to
    rows: ids can repeat). With `seen_ids` None duplicates are not checked (workers cannot share a
    set; deduplicate in the reader instead). A string column holding invalid UTF-8 is fine here: the
    bad cells become `invalid_utf8` rejects.
    """
    builder = _BatchBuilder(kind, source, seen_ids, limits)
    for line, row in enumerate(_rows_of(table), start=1):
        builder.feed(_Item(line, row))
    return builder.table(), builder.rejects


# --- files -----------------------------------------------------------------------------------------


def list_data_files(path: str | Path) -> list[Path]:
    """`path` itself, or the data files directly inside a directory, sorted by name.

    Files in one directory must have distinct stems: rejects files and downstream output shards are
    named by input stem, so `a.jsonl` next to `a.parquet` would overwrite each other's outputs.
    """
    p = Path(path)
    if p.is_file():
        if p.suffix not in DATA_SUFFIXES:
            raise DataError(f"not a data file (expected one of {', '.join(DATA_SUFFIXES)})", file=str(p))
        return [p]
    if not p.is_dir():
        raise DataError("no such file or directory", file=str(p))
    files = sorted(f for f in p.iterdir() if f.is_file() and f.suffix in DATA_SUFFIXES
                   and not f.name.startswith((".", "_")))
    if not files:
        raise DataError(f"directory holds no {'/'.join(DATA_SUFFIXES)} files", file=str(p))
    stems: dict[str, Path] = {}
    for f in files:
        if f.stem in stems:
            raise DataError(f"two data files share the stem {f.stem!r} ({stems[f.stem].name}, {f.name}); "
                            "rename one", file=str(p))
        stems[f.stem] = f
    return files


#: bytes read at a time while passing over the rest of a line longer than `limits.max_line_bytes`
_SKIP_CHUNK_BYTES = 1 << 20


def _bounded_lines(fh: IO[bytes], max_bytes: int) -> Iterator[tuple[bytes, int | None]]:
    """Each line (line break included) as (bytes, None), or, for a line of more than `max_bytes`, as
    (its first `max_bytes + 1` bytes, its full length): the rest of it is read in chunks of at most
    `_SKIP_CHUNK_BYTES` and dropped, so no read returns more than the larger of the two."""
    while line := fh.readline(max_bytes + 1):
        if len(line) <= max_bytes:
            yield line, None
            continue
        total, tail = len(line), line
        while not tail.endswith(b"\n") and (tail := fh.readline(_SKIP_CHUNK_BYTES)):
            total += len(tail)
        yield line, total


def _jsonl_items(path: Path, max_line_bytes: int) -> Iterator[_Item]:
    """JSON lines, decoded per line from bytes; blank lines are not rows and are skipped. A line over
    `max_line_bytes` is a `too_long` reject of field `line`, never read whole."""
    with path.open("rb") as fh:
        for line_no, (raw_bytes, over) in enumerate(_bounded_lines(fh, max_line_bytes), start=1):
            if over is not None:
                raw = raw_bytes[:RAW_MAX_CHARS].decode("utf-8", errors="backslashreplace")
                problem = _Problem("too_long", "line", f"line has {over:,} bytes (limit {max_line_bytes:,})")
                yield _Item(line_no, raw=raw, problem=problem)
                continue
            try:
                text = raw_bytes.decode("utf-8-sig" if line_no == 1 else "utf-8")
            except UnicodeDecodeError as exc:
                raw = raw_bytes.decode("utf-8", errors="backslashreplace").rstrip("\r\n")
                problem = _Problem("invalid_utf8", None, f"not valid UTF-8: {exc}")
                yield _Item(line_no, raw=raw, problem=problem)
                continue
            if not text.strip():
                continue
            raw = text.rstrip("\r\n")
            try:
                yield _Item(line_no, json.loads(text), raw)
            except json.JSONDecodeError as exc:
                problem = _Problem("malformed_json", None, f"not valid JSON: {exc}")
                yield _Item(line_no, raw=raw, problem=problem)


def _json_array_items(path: Path) -> Iterator[_Item]:
    """A `.json` file holding one array (e.g. Alpaca-style data); read whole, rows numbered from 1."""
    try:
        rows = json.loads(path.read_bytes().decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"a .json file starting with '[' must be one valid JSON array: {exc}",
                        file=str(path)) from exc
    if not isinstance(rows, list):
        raise DataError("expected a JSON array of objects", file=str(path))
    for index, row in enumerate(rows, start=1):
        yield _Item(index, row)


def _parquet_items(path: Path, kind: str, batch_size: int) -> Iterator[_Item]:
    """Parquet rows streamed by record batches; only the schema's columns are read."""
    pfile = pq.ParquetFile(path)
    present = pfile.schema_arrow.names
    columns = [name for name in _schema(kind).names if name in present]
    line = 0
    for batch in pfile.iter_batches(batch_size=batch_size, columns=columns):
        for row in _rows_of(batch):
            line += 1
            yield _Item(line, row)


def is_json_array(path: Path) -> bool:
    """Whether a `.json` file is one JSON array (Alpaca-style data, Self-RAG's released critic data)
    rather than JSON lines."""
    with path.open("rb") as fh:
        head = fh.read(4096).lstrip(b"\xef\xbb\xbf \t\r\n")
    return head.startswith(b"[")


def _items(path: Path, kind: str, batch_size: int, max_line_bytes: int) -> Iterator[_Item]:
    try:
        if path.suffix == ".parquet":
            yield from _parquet_items(path, kind, batch_size)
        elif path.suffix == ".json" and is_json_array(path):
            yield from _json_array_items(path)
        else:
            yield from _jsonl_items(path, max_line_bytes)
    except (OSError, pa.ArrowException) as exc:
        raise DataError(f"cannot read file: {exc}", file=str(path)) from exc


def _chunks(items: Iterator[_Item], size: int) -> Iterator[list[_Item]]:
    while chunk := list(islice(items, size)):
        yield chunk


# --- writing ---------------------------------------------------------------------------------------


def _json_line(row: dict[str, Any]) -> str:
    return json.dumps(row, ensure_ascii=False) + "\n"


def write_parquet(table: pa.Table, path: str | Path) -> Path:
    with atomic_path(path) as tmp:
        pq.write_table(table, tmp)
    return Path(path)


def write_jsonl(rows: Iterable[dict[str, Any]] | pa.Table, path: str | Path) -> Path:
    """One JSON object per line, UTF-8 (not ASCII-escaped); a table is written batch by batch."""
    if isinstance(rows, pa.Table):
        rows = (row for batch in rows.to_batches() for row in batch.to_pylist())
    with atomic_path(path) as tmp, tmp.open("w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(_json_line(row))
    return Path(path)


class _RejectsFile:
    """Streams one input file's reject records to ``<rejects_dir>/<stem>.rejects.jsonl``.

    The file appears (atomically) only when there is at least one reject; committing with none removes
    a stale file from an earlier run, so the rejects directory always describes the latest read.
    """

    def __init__(self, rejects_dir: str | Path | None, source: Path):
        self.path = None if rejects_dir is None else Path(rejects_dir) / f"{source.stem}.rejects.jsonl"
        self._fh: IO[str] | None = None

    def write(self, records: list[dict[str, Any]]) -> None:
        if self.path is None or not records:
            return
        with full_disk_named(self.path):
            if self._fh is None:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                self._fh = temp_sibling(self.path).open("w", encoding="utf-8")
            self._fh.writelines(_json_line(record) for record in records)

    def commit(self) -> str | None:
        if self.path is None:
            return None
        if self._fh is None:
            self.path.unlink(missing_ok=True)
            return None
        with full_disk_named(self.path):
            self._fh.close()
            os.replace(temp_sibling(self.path), self.path)
        return str(self.path)

    def discard(self) -> None:
        if self._fh is not None and self.path is not None:
            with contextlib.suppress(OSError):  # the flush of a close on a full disk fails: the file goes anyway
                self._fh.close()
            temp_sibling(self.path).unlink(missing_ok=True)


# --- reading ---------------------------------------------------------------------------------------


def _iter_file(path: Path, kind: str, batch_size: int, rejects_dir: str | Path | None,
               seen_ids: set[str], limits: LimitsConfig | None) -> Iterator[tuple[pa.Table, ReadReport]]:
    """Validated batches of one file. Yields at least once (an empty table for an empty file), and
    the last yield carries the file's final report with its committed `rejects_path`."""
    report = ReadReport(path=str(path), kind=kind)
    rejects = _RejectsFile(rejects_dir, path)
    extra_fields: set[str] = set()
    pending: tuple[pa.Table, ReadReport] | None = None
    try:
        max_line_bytes = (limits or LimitsConfig()).max_line_bytes
        for chunk in _chunks(_items(path, kind, batch_size, max_line_bytes), batch_size):
            builder = _BatchBuilder(kind, str(path), seen_ids, limits)
            for item in chunk:
                builder.feed(item)
            rejects.write(builder.rejects)
            extra_fields |= builder.extra_fields
            table = builder.table()
            report.n_ok += table.num_rows
            for record in builder.rejects:
                report.count(record["reason"])
            if pending is not None:
                yield pending
            pending = table, report.snapshot()
        report.rejects_path = rejects.commit()
    except BaseException:
        rejects.discard()
        raise
    if extra_fields:
        logger.info("%s: ignored fields outside the %s schema: %s", path, kind, sorted(extra_fields))
    if report.n_rejected:
        where = report.rejects_path or "no rejects_dir given, rejected rows not written"
        logger.warning("%s: rejected %d rows %s (%s)", path, report.n_rejected, report.rejects, where)
    yield (pending[0] if pending is not None else _schema(kind).empty_table()), report.snapshot()


def iter_batches(path: str | Path, kind: Kind, batch_size: int = 10_000, rejects_dir: str | Path | None = None,
                 limits: LimitsConfig | None = None) -> Iterator[tuple[pa.Table, ReadReport]]:
    """Streams validated tables of at most `batch_size` rows from a file or a directory of files.

    Memory stays flat apart from the set of ids seen, which spans the whole stream so duplicates across
    files are caught. Each table comes with a snapshot of its file's report so far; a file's last
    yield carries its final report (a table may be empty when a whole batch was rejected).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    _schema(kind)
    seen_ids: set[str] = set()
    for file in list_data_files(path):
        yield from _iter_file(file, kind, batch_size, rejects_dir, seen_ids, limits)


def read_records(path: str | Path, kind: Kind, rejects_dir: str | Path | None = None,
                 limits: LimitsConfig | None = None) -> tuple[pa.Table, ReadReport]:
    """A whole file or directory as one validated table (input order kept) and the combined report.

    For a directory, the report's `rejects_path` is `rejects_dir` when any file had rejects (each file
    has its own rejects file there).
    """
    tables: list[pa.Table] = []
    final: dict[str, ReadReport] = {}
    for table, report in iter_batches(path, kind, rejects_dir=rejects_dir, limits=limits):
        tables.append(table)
        final[report.path] = report
    total = ReadReport(path=str(path), kind=kind)
    for report in final.values():
        total.n_ok += report.n_ok
        for reason, n in report.rejects.items():
            total.count(reason, n)
    written = [r.rejects_path for r in final.values() if r.rejects_path]
    if written:
        total.rejects_path = written[0] if len(final) == 1 else str(rejects_dir)
    return pa.concat_tables(tables), total
