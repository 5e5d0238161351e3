"""Limits as data: the readers reject a field over `limits` as `too_long` with its size, count it,
and cut the raw copy in the rejects file; the label job's reader and the index's reader take them."""

from __future__ import annotations

import json

import pyarrow as pa
import pyarrow.parquet as pq

from raypipe.data.io import RAW_MAX_CHARS, read_records
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
