"""Limits as data: the readers reject a field over `limits` as `too_long` with its size, count it,
and cut the raw copy in the rejects file; the label job's reader and the index's reader take them."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq

from raypipe.data.io import _SKIP_CHUNK_BYTES, RAW_MAX_CHARS, _bounded_lines, read_records
from raypipe.settings.data import LimitsConfig


def test_instance_fields_over_their_limits_are_rejected_with_their_size(tmp_path):
    limits = LimitsConfig(max_instruction_chars=20, max_input_chars=30, max_output_chars=40)
    rows = [
        {"id": "ok", "instruction": "i" * 20, "input": "n" * 30, "output": "o" * 40},
        {"id": "ins", "instruction": "i" * 21, "output": "o"},
        {"id": "inp", "instruction": "i", "input": "n" * 31, "output": "o"},
        {"id": "out", "instruction": "i", "output": "o" * 200_000},
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table, report = read_records(path, "instance", rejects_dir=tmp_path / "rej", limits=limits)

    assert table.column("id").to_pylist() == ["ok"]
    assert report.rejects == {"too_long": 3}
    rejects = [json.loads(x) for x in (tmp_path / "rej" / "in.rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["id"], r["field"]) for r in rejects] == [(2, "ins", "instruction"), (3, "inp", "input"),
                                                                   (4, "out", "output")]
    assert rejects[2]["detail"] == "'output' has 200,000 characters (limit 40)"
    # the 200 KB row is not copied whole into the rejects file
    assert len(rejects[2]["raw"]) == RAW_MAX_CHARS and rejects[2]["raw_chars"] > 200_000
    assert "raw_chars" not in rejects[0]


def test_passage_title_and_text_limits_apply_to_parquet(tmp_path):
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"id": ["a", "b", "c"], "title": ["T", "t" * 11, "T"],
                             "text": ["x" * 10, "y", "z" * 11]}), path)
    table, report = read_records(path, "passage", limits=LimitsConfig(max_passage_chars=10))
    assert table.column("id").to_pylist() == ["a"]
    assert report.rejects == {"too_long": 2}


def test_default_limits_apply_when_none_are_given(tmp_path):
    path = tmp_path / "in.jsonl"
    big = LimitsConfig().max_output_chars + 1
    path.write_text(json.dumps({"id": "x", "instruction": "i", "output": "o" * big}) + "\n")
    table, report = read_records(path, "instance")
    assert table.num_rows == 0 and report.rejects == {"too_long": 1}


class _ReadSizes(io.BytesIO):
    """A file that records the size of every readline result (how much of a line one read held)."""

    def __init__(self, data: bytes):
        super().__init__(data)
        self.sizes: list[int] = []

    def readline(self, size: int | None = -1) -> bytes:
        line = super().readline(size)
        self.sizes.append(len(line))
        return line


def test_an_over_long_json_line_is_rejected_without_being_read_whole(tmp_path):
    good = [json.dumps({"id": i, "title": "T", "text": "short"}) + "\n" for i in ("a", "b", "c")]
    huge = json.dumps({"id": "huge", "title": "T", "text": "x" * 3_000_000}) + "\n"
    path = tmp_path / "p.jsonl"
    path.write_text(good[0] + huge + good[1] + good[2].rstrip("\n") + "y" * 2_000)  # last line: no newline
    limits = LimitsConfig(max_line_bytes=1_000)
    table, report = read_records(path, "passage", rejects_dir=tmp_path / "rej", limits=limits)

    assert table.column("id").to_pylist() == ["a", "b"]  # the rows after the long line are still read
    assert report.rejects == {"too_long": 2}
    rejects = [json.loads(x) for x in (tmp_path / "rej" / "p.rejects.jsonl").read_text().splitlines()]
    assert [(r["source"], r["line"], r["id"], r["reason"], r["field"]) for r in rejects] == [
        (str(path), 2, None, "too_long", "line"), (str(path), 4, None, "too_long", "line")]
    assert rejects[0]["detail"] == f"line has {len(huge):,} bytes (limit 1,000)"
    assert rejects[0]["raw"].startswith('{"id": "huge"') and len(rejects[0]["raw"]) <= RAW_MAX_CHARS

    reader = _ReadSizes(good[0].encode() + huge.encode() + good[1].encode())
    lines = list(_bounded_lines(reader, 1_000))
    assert [over for _, over in lines] == [None, len(huge), None]
    assert max(reader.sizes) <= max(1_001, _SKIP_CHUNK_BYTES) < len(huge)


def test_a_line_at_the_limit_is_read():
    line = json.dumps({"id": "a", "title": "T", "text": "t"}).encode() + b"\n"
    assert list(_bounded_lines(io.BytesIO(line * 2), len(line))) == [(line, None), (line, None)]
    assert list(_bounded_lines(io.BytesIO(line), len(line) - 1)) == [(line, len(line))]
