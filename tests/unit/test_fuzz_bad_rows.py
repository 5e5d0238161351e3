"""Property-based tests: shards mixing good rows with generated bad ones (broken UTF-8 at the byte
level, nulls, missing fields, wrong types, non-finite floats, empty strings, fields over the limits,
malformed JSON, duplicate ids within and across batches and files) through every reader in
raypipe.data.io and through the augmentation job's validation and shard writer.

Each bad row has exactly one flaw, so its reject reason is known in advance. The properties: every row
read is kept or rejected (input = kept + dropped + rejected; only the augmentation's sampling drops),
every good row survives in order, and each bad row is rejected at its own position with the reason its
flaw calls for.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from raypipe.augment import pipeline
from raypipe.augment.stages import REJECT
from raypipe.data.io import iter_batches
from raypipe.data.schemas import NON_EMPTY
from raypipe.settings.data import LimitsConfig

LIMIT = 40
LIMITS = LimitsConfig(max_instruction_chars=LIMIT, max_input_chars=LIMIT, max_output_chars=LIMIT,
                      max_passage_chars=LIMIT)
FIELDS = {"instance": ("id", "instruction", "input", "output", "task", "dataset"),
          "passage": ("id", "title", "text")}
LIMITED = {"instance": ("instruction", "input", "output"), "passage": ("title", "text")}
#: byte sequences that are not UTF-8: a lone continuation byte, truncated sequences, latin-1, an
#: encoded surrogate, an overlong encoding, bytes past U+10FFFF
BAD_BYTES = [b"\x80", b"\xff", b"\xc3", b"\xe2\x82", b"caf\xe9", b"\xed\xa0\x80", b"\xc0\xaf",
             b"\xf8\x88\x80\x80\x80", b"\xf4\x90\x80\x80"]
PLACEHOLDER = "@@BAD@@"
REASON = {"null": "missing_field", "missing": "missing_field", "wrong_type": "wrong_type",
          "nonfinite": "wrong_type", "huge": "too_long", "invalid_utf8": "invalid_utf8",
          "duplicate": "duplicate_id", "malformed": "malformed_json"}
FUZZ = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])

good_text = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=12).filter(str.strip)


@dataclass
class Case:
    kind: str
    #: per row: the row (None for malformed JSON), its flaw (None = good) and its bad bytes
    rows: list[tuple[dict[str, Any] | None, str | None, bytes]]
    #: rows per file (the files are read as one stream, so duplicates cross files)
    split: int
    batch_size: int

    @property
    def good_ids(self) -> list[str]:
        return [row["id"] for row, flaw, _ in self.rows if flaw is None]

    def reason(self, row: dict[str, Any] | None, flaw: str) -> str:
        if flaw == "empty":
            return "empty_output" if row is not None and row.get("_field") == "output" else "empty_field"
        return REASON[flaw]


@st.composite
def cases(draw, kind: str, flaws: tuple[str, ...]) -> Case:
    n = draw(st.integers(1, 14))
    plan = [draw(st.one_of(st.none(), st.none(), st.sampled_from(flaws))) for _ in range(n)]
    good_ids = [f"g{i}" for i, flaw in enumerate(plan) if flaw is None]
    rows: list[tuple[dict[str, Any] | None, str | None, bytes]] = []
    for i, flaw in enumerate(plan):
        earlier_good = [f"g{j}" for j in range(i) if plan[j] is None]
        if flaw == "duplicate" and not earlier_good:
            flaw = "empty"
        row = {name: draw(good_text) for name in FIELDS[kind]}
        # a bad row may carry any good row's id, earlier or later: it must not cost that row its place
        row["id"] = f"g{i}" if flaw is None else draw(st.sampled_from([f"b{i}", *good_ids]))
        bad = b""
        if flaw == "duplicate":
            row["id"] = draw(st.sampled_from(earlier_good))
        elif flaw == "malformed":
            row = None
        elif flaw is not None:
            field = draw(st.sampled_from(_fields_for(kind, flaw)))
            row["_field"] = field
            if flaw == "null":
                row[field] = None
            elif flaw == "missing":
                del row[field]
            elif flaw == "wrong_type":
                row[field] = draw(st.one_of(st.integers(), st.booleans(), st.lists(st.integers(), max_size=2),
                                            st.floats(allow_nan=False, allow_infinity=False)))
            elif flaw == "nonfinite":
                row[field] = draw(st.sampled_from([math.nan, math.inf, -math.inf]))
            elif flaw == "empty":
                row[field] = draw(st.sampled_from(["", " ", "\t\n ", "\u3000"]))
            elif flaw == "huge":
                row[field] = "x" * draw(st.integers(LIMIT + 1, LIMIT + 5000))
            elif flaw == "invalid_utf8":
                row[field] = PLACEHOLDER
                bad = draw(st.sampled_from(BAD_BYTES))
        rows.append((row, flaw, bad))
    return Case(kind, rows, split=draw(st.integers(1, n)), batch_size=draw(st.integers(1, 5)))


def _fields_for(kind: str, flaw: str) -> tuple[str, ...]:
    if flaw in ("null", "missing", "empty"):
        return NON_EMPTY[kind]
    if flaw == "huge":
        return LIMITED[kind]
    return FIELDS[kind]


def _clean(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if k != "_field"}


def _jsonl(rows) -> bytes:
    lines = []
    for row, flaw, bad in rows:
        if flaw == "malformed":
            lines.append(b'{"id": "broken", "output": "no end')
            continue
        data = json.dumps(_clean(row), ensure_ascii=False).encode()  # NaN/Infinity as JSON allows them
        lines.append(data.replace(PLACEHOLDER.encode(), b"ok " + bad))
    return b"\n".join(lines) + b"\n"


def _json_array(rows) -> bytes:
    return json.dumps([_clean(row) for row, _, _ in rows], ensure_ascii=False).encode()


def _parquet_table(kind: str, rows) -> pa.Table:
    """String columns as bytes viewed as strings, so a cell can hold invalid UTF-8."""
    columns = {}
    for name in FIELDS[kind]:
        cells = []
        for row, _, bad in rows:
            value = row.get(name)
            cells.append(None if value is None else (b"ok " + bad if value == PLACEHOLDER else value.encode()))
        columns[name] = pa.array(cells, type=pa.binary()).view(pa.string())
    return pa.table(columns)


def _write(case: Case, folder: Path, fmt: str) -> list[tuple[Path, int]]:
    """The case as one or two files; returns (file, rows in it)."""
    parts = [case.rows[:case.split], case.rows[case.split:]]
    written = []
    for index, part in enumerate(p for p in parts if p):
        path = folder / f"part-{index}{fmt}"
        if fmt == ".jsonl":
            path.write_bytes(_jsonl(part))
        elif fmt == ".json":
            path.write_bytes(_json_array(part))
        else:
            pq.write_table(_parquet_table(case.kind, part), path, row_group_size=max(1, case.batch_size))
        written.append((path, len(part)))
    return written


def _check_reader(case: Case, fmt: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "in"
        folder.mkdir()
        files = _write(case, folder, fmt)
        kept: list[str] = []
        final = {}
        for table, report in iter_batches(folder, case.kind, batch_size=case.batch_size,
                                          rejects_dir=Path(tmp) / "rejects", limits=LIMITS):
            kept += table.column("id").to_pylist()
            final[report.path] = report
        rejects = [json.loads(line) for f in sorted((Path(tmp) / "rejects").glob("*.jsonl"))
                   for line in f.read_text(encoding="utf-8").split("\n") if line]

    n_input = len(case.rows)
    n_kept = sum(r.n_ok for r in final.values())
    n_rejected = sum(r.n_rejected for r in final.values())
    assert n_kept + n_rejected == n_input  # nothing dropped by a reader
    assert kept == case.good_ids  # every good row, in order
    assert len(rejects) == n_rejected
    expected = set()
    position = 0
    for path, count in files:
        for line in range(1, count + 1):
            row, flaw, _ = case.rows[position]
            position += 1
            if flaw is not None:
                expected.add((str(path), line, case.reason(row, flaw)))
    assert {(r["source"], r["line"], r["reason"]) for r in rejects} == expected


FLAWS = ("null", "missing", "wrong_type", "nonfinite", "empty", "huge", "duplicate")


@FUZZ
@given(cases("instance", (*FLAWS, "invalid_utf8", "malformed")))
def test_jsonl_instances(case):
    _check_reader(case, ".jsonl")


@FUZZ
@given(cases("passage", (*FLAWS, "invalid_utf8", "malformed")))
def test_jsonl_passages(case):
    _check_reader(case, ".jsonl")


@FUZZ
@given(cases("instance", FLAWS))
def test_json_array_instances(case):
    _check_reader(case, ".json")


@FUZZ
@given(cases("instance", ("null", "empty", "huge", "invalid_utf8", "duplicate")))
def test_parquet_instances(case):
    _check_reader(case, ".parquet")


@FUZZ
@given(cases("passage", ("null", "empty", "huge", "invalid_utf8", "duplicate")))
def test_parquet_passages(case):
    _check_reader(case, ".parquet")


@FUZZ
@given(cases("instance", ("null", "empty", "huge", "invalid_utf8", "duplicate")))
def test_augment_validation_and_shard_writer(case):
    """The job's path for a parquet shard: validation per batch (positions, no id lookups), then the
    driver's writer, which rejects repeated ids over the whole stream. Sampling keeps every row here
    (no render step), so dropped is 0 and kept must be exactly the good rows."""
    table = _parquet_table("instance", case.rows)
    source = "/in/part-0.parquet"
    table = table.append_column("path", pa.array([source] * table.num_rows))
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp)
        writer = pipeline.ShardWriter(out, {source: table.num_rows}, seen_ids=set())
        for start in range(0, table.num_rows, case.batch_size):
            batch = pipeline.validate(table.slice(start, case.batch_size), LIMITS)
            batch["augmented"] = batch["output"]
            n = len(batch["id"])
            assert n == min(case.batch_size, table.num_rows - start)
            writer.add([{k: v[i] for k, v in batch.items()} for i in range(n)])
        counts = json.loads((out / "shard_counts" / "part-0.json").read_text())
        data = pq.read_table(out / "data" / "part-0.parquet")
        rejects = [json.loads(x) for x in (out / "rejects" / "part-0.rejects.jsonl").read_text().split("\n") if x]

    assert counts["input"] == len(case.rows)
    assert counts.get("kept", 0) + counts.get("dropped_by_sampling", 0) + counts["rejected"] == counts["input"]
    assert data.column("id").to_pylist() == case.good_ids
    expected = Counter(case.reason(row, flaw) for row, flaw, _ in case.rows if flaw is not None)
    assert Counter(r["reason"] for r in rejects) == expected
    bad_rows = [i + 1 for i, (_, flaw, _) in enumerate(case.rows) if flaw is not None]
    assert [r["row"] for r in rejects] == bad_rows


def test_validation_output_has_no_reject_for_good_rows_only():
    """A fixed example of the property above, readable without hypothesis."""
    rows = [({"id": "g0", "instruction": "q", "input": "", "output": "a", "task": "", "dataset": ""}, None, b""),
            ({"id": "g0", "instruction": "q", "input": "", "output": PLACEHOLDER, "task": "", "dataset": ""},
             "invalid_utf8", b"\xff")]
    table = _parquet_table("instance", rows).append_column("path", pa.array(["/x.parquet"] * 2))
    out = pipeline.validate(table, LIMITS)
    assert list(out[REJECT]) == ["", "invalid_utf8"]
    assert isinstance(out["output"], np.ndarray)
