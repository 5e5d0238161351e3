"""Readers and writers: each kind of bad row is rejected with its reason, counted, and written to the
rejects file; good rows are kept in input order; writes are atomic."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from raypipe.data import io
from raypipe.data.io import (
    REASONS,
    iter_batches,
    list_data_files,
    read_records,
    validate_batch,
    write_jsonl,
    write_parquet,
)
from raypipe.data.schemas import INSTANCE_SCHEMA, PASSAGE_SCHEMA
from raypipe.errors import DataError


def instance(row_id: str, **fields) -> dict:
    row = {"id": row_id, "instruction": f"Question {row_id}?", "input": "", "output": f"Answer {row_id}.",
           "task": "qa", "dataset": "world", "meta": "{}"}
    row.update(fields)
    return row


def line(row) -> bytes:
    return json.dumps(row).encode() + b"\n"


def read_rejects(path: str | Path) -> list[dict]:
    return [json.loads(x) for x in Path(path).read_text(encoding="utf-8").splitlines()]


def invalid_utf8_strings(values: list[bytes]) -> pa.Array:
    """A string array holding bytes that are not UTF-8 (arrow does not validate a binary->string view),
    as a parquet writer in another language could produce."""
    return pa.array(values, type=pa.binary()).view(pa.string())


@pytest.fixture
def bad_instances_jsonl(tmp_path) -> Path:
    path = tmp_path / "in" / "shard-0.jsonl"
    path.parent.mkdir()
    path.write_bytes(b"".join([
        line(instance("a1")),                                           # 1 good
        b'{"id": "x1", "instruction": \n',                              # 2 malformed json
        line({"id": "m1", "output": "o"}),                              # 3 missing instruction
        line(instance("w1", output=5)),                                 # 4 wrong type
        line(instance("e1", output="   ")),                             # 5 empty output
        line(instance("e2", instruction="")),                           # 6 empty required field
        line(instance("a1", output="second a1")),                       # 7 duplicate id
        b'{"id": "u1", "instruction": "caf\xe9", "output": "o"}\n',     # 8 invalid utf-8 (latin-1)
        b"\n",                                                          # 9 blank: not a row
        line({"id": "a2", "instruction": "Say hi.", "output": "Hi.", "meta": {"k": [1]}}),  # 10 good
    ]))
    return path


def test_jsonl_rejects_each_bad_kind_and_keeps_good_rows(bad_instances_jsonl, tmp_path):
    table, report = read_records(bad_instances_jsonl, "instance", rejects_dir=tmp_path / "rejects")

    assert table.schema == INSTANCE_SCHEMA
    assert table.column("id").to_pylist() == ["a1", "a2"]
    assert table.column("output").to_pylist() == ["Answer a1.", "Hi."]
    assert report.n_ok == 2
    assert report.rejects == {"malformed_json": 1, "missing_field": 1, "wrong_type": 1, "empty_output": 1,
                              "empty_field": 1, "duplicate_id": 1, "invalid_utf8": 1}
    assert report.n_rejected == 7
    # every reason but the size ones (tests/unit/test_limits.py)
    assert set(report.rejects) == set(REASONS) - {"too_long", "too_many_sentences"}

    rejects_path = tmp_path / "rejects" / "shard-0.rejects.jsonl"
    assert report.rejects_path == str(rejects_path)
    rejects = read_rejects(rejects_path)
    got = [(r["line"], r["id"], r["reason"], r["field"]) for r in rejects]
    assert got == [
        (2, None, "malformed_json", None),
        (3, "m1", "missing_field", "instruction"),
        (4, "w1", "wrong_type", "output"),
        (5, "e1", "empty_output", "output"),
        (6, "e2", "empty_field", "instruction"),
        (7, "a1", "duplicate_id", "id"),
        (8, None, "invalid_utf8", None),
    ]
    assert {r["source"] for r in rejects} == {str(bad_instances_jsonl)}
    assert rejects[0]["raw"] == '{"id": "x1", "instruction": '
    assert rejects[5]["raw"] == json.dumps(instance("a1", output="second a1"))
    assert "\\xe9" in rejects[6]["raw"]
    assert report.as_dict()["n_rejected"] == 7


def test_optional_fields_default_and_meta_object_becomes_json_string(bad_instances_jsonl):
    table, _ = read_records(bad_instances_jsonl, "instance")
    a2 = table.to_pylist()[1]
    assert (a2["input"], a2["task"], a2["dataset"]) == ("", "", "")
    assert json.loads(a2["meta"]) == {"k": [1]}
    assert json.loads(table.to_pylist()[0]["meta"]) == {}


@pytest.mark.parametrize(("row", "reason", "field"), [
    ({"id": "r", "instruction": "i"}, "missing_field", "output"),
    (instance("r", id=None), "missing_field", "id"),
    (instance("r", id=7), "wrong_type", "id"),
    (instance("r", task=["qa"]), "wrong_type", "task"),
    (instance("r", meta="not json"), "wrong_type", "meta"),
    (instance("r", meta="[1, 2]"), "wrong_type", "meta"),
    (["a", "list"], "malformed_json", None),
    (instance("r", output="\n\t "), "empty_output", "output"),
    (instance(" "), "empty_field", "id"),
])
def test_single_bad_row_reason_and_field(tmp_path, row, reason, field):
    path = tmp_path / "one.jsonl"
    path.write_bytes(line(row))
    table, report = read_records(path, "instance", rejects_dir=tmp_path / "rej")
    assert table.num_rows == 0
    assert report.rejects == {reason: 1}
    [record] = read_rejects(report.rejects_path)
    assert (record["reason"], record["field"]) == (reason, field)


def test_bad_rows_without_rejects_dir_are_counted_and_nothing_is_written(bad_instances_jsonl, tmp_path):
    before = sorted(p for p in tmp_path.rglob("*"))
    _, report = read_records(bad_instances_jsonl, "instance")
    assert report.n_rejected == 7
    assert report.rejects_path is None
    assert sorted(p for p in tmp_path.rglob("*")) == before


def test_parquet_rejects_bad_cells_including_invalid_utf8(tmp_path):
    path = tmp_path / "passages.parquet"
    pq.write_table(pa.table({
        "id": ["p1", None, "p3", "p1", "p5", "p6"],
        "title": ["T1", "T2", "T3", "T4", "T5", None],
        "text": invalid_utf8_strings([b"one", b"two", b"  ", b"dup", b"bad \xff", b"six"]),
        "url": ["u"] * 6,  # outside the schema: ignored
    }), path)

    table, report = read_records(path, "passage", rejects_dir=tmp_path / "rej")

    assert table.schema == PASSAGE_SCHEMA
    assert table.to_pylist() == [{"id": "p1", "title": "T1", "text": "one"},
                                 {"id": "p6", "title": "", "text": "six"}]
    assert report.rejects == {"missing_field": 1, "empty_field": 1, "duplicate_id": 1, "invalid_utf8": 1}
    rejects = read_rejects(tmp_path / "rej" / "passages.rejects.jsonl")
    assert [(r["line"], r["id"], r["reason"], r["field"]) for r in rejects] == [
        (2, None, "missing_field", "id"),
        (3, "p3", "empty_field", "text"),
        (4, "p1", "duplicate_id", "id"),
        (5, "p5", "invalid_utf8", "text"),
    ]
    assert json.loads(rejects[1]["raw"]) == {"id": "p3", "title": "T3", "text": "  "}
    assert json.loads(rejects[3]["raw"])["text"] == "bad \\xff"


def test_parquet_column_of_wrong_type_rejects_its_rows(tmp_path):
    path = tmp_path / "p.parquet"
    pq.write_table(pa.table({"id": ["p1", "p2"], "title": [1, 2], "text": ["a", "b"]}), path)
    table, report = read_records(path, "passage")
    assert table.num_rows == 0
    assert report.rejects == {"wrong_type": 2}


def test_directory_of_mixed_files_in_order_with_duplicates_across_files(tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    write_jsonl([instance("a1"), instance("a2")], data / "a.jsonl")
    write_parquet(pa.Table.from_pylist([instance("b1"), instance("a2")], schema=INSTANCE_SCHEMA),
                  data / "b.parquet")
    (data / "c.json").write_text(json.dumps([instance("c1"), instance("c2", output="")]))
    (data / "README.txt").write_text("not data")
    (data / "_stats.json").write_text("{}")
    (data / ".b.parquet.123.tmp").write_text("half written")

    assert [p.name for p in list_data_files(data)] == ["a.jsonl", "b.parquet", "c.json"]
    table, report = read_records(data, "instance", rejects_dir=tmp_path / "rej")

    assert table.column("id").to_pylist() == ["a1", "a2", "b1", "c1"]
    assert report.n_ok == 4
    assert report.rejects == {"duplicate_id": 1, "empty_output": 1}
    assert report.rejects_path == str(tmp_path / "rej")
    assert sorted(p.name for p in (tmp_path / "rej").iterdir()) == ["b.rejects.jsonl", "c.rejects.jsonl"]
    [dup] = read_rejects(tmp_path / "rej" / "b.rejects.jsonl")
    assert (dup["source"], dup["line"], dup["id"]) == (str(data / "b.parquet"), 2, "a2")
    [empty] = read_rejects(tmp_path / "rej" / "c.rejects.jsonl")
    assert (empty["line"], empty["id"], empty["reason"]) == (2, "c2", "empty_output")


def test_iter_batches_streams_fixed_batches_and_ends_each_file_with_its_final_report(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"".join([line(instance("a1")), line(instance("a2")), b"{oops\n",
                               line(instance("a3")), line(instance("a4")), line(instance("a5"))]))
    out = list(iter_batches(path, "instance", batch_size=2, rejects_dir=tmp_path / "rej"))

    assert [t.column("id").to_pylist() for t, _ in out] == [["a1", "a2"], ["a3"], ["a4", "a5"]]
    assert [(r.n_ok, r.n_rejected) for _, r in out] == [(2, 0), (3, 1), (5, 1)]
    assert [r.rejects_path for _, r in out] == [None, None, str(tmp_path / "rej" / "s.rejects.jsonl")]


def test_iter_batches_yields_final_report_even_when_last_batch_is_all_rejects(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(line(instance("a1")) + b"{bad\n")
    out = list(iter_batches(path, "instance", batch_size=1, rejects_dir=tmp_path / "rej"))
    assert [t.num_rows for t, _ in out] == [1, 0]
    assert out[-1][1].rejects == {"malformed_json": 1}
    assert out[-1][1].rejects_path is not None


def test_stopping_a_stream_early_leaves_no_partial_rejects_file(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_bytes(b"{bad\n" + line(instance("a1")) + line(instance("a2")))
    stream = iter_batches(path, "instance", batch_size=2, rejects_dir=tmp_path / "rej")
    next(stream)
    stream.close()
    assert list((tmp_path / "rej").iterdir()) == []


def test_json_file_of_json_lines_is_read_line_by_line(tmp_path):
    path = tmp_path / "lines.json"
    path.write_bytes(line(instance("a1")) + b"[1]\n" + line(instance("a2")))
    table, report = read_records(path, "instance")
    assert table.column("id").to_pylist() == ["a1", "a2"]
    assert report.rejects == {"malformed_json": 1}


def test_empty_file_yields_one_empty_table(tmp_path):
    path = tmp_path / "empty.jsonl"
    path.write_bytes(b"")
    table, report = read_records(path, "passage")
    assert (table.num_rows, table.schema, report.n_ok, report.rejects) == (0, PASSAGE_SCHEMA, 0, {})


def test_stale_rejects_file_is_removed_when_a_rerun_has_no_rejects(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_bytes(line(instance("a1")) + b"{bad\n")
    _, first = read_records(path, "instance", rejects_dir=tmp_path / "rej")
    assert Path(first.rejects_path).exists()

    path.write_bytes(line(instance("a1")))
    _, second = read_records(path, "instance", rejects_dir=tmp_path / "rej")
    assert second.rejects_path is None
    assert list((tmp_path / "rej").iterdir()) == []


def test_utf8_bom_on_first_line_is_accepted(tmp_path):
    path = tmp_path / "bom.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + line(instance("a1")))
    table, report = read_records(path, "instance")
    assert table.column("id").to_pylist() == ["a1"]
    assert report.rejects == {}


def test_validate_batch_checks_duplicates_only_with_a_seen_set():
    table = pa.Table.from_pylist([{"id": "p1", "title": "t", "text": "x"},
                                  {"id": "p1", "title": "t", "text": "y"},
                                  {"id": "p2", "title": "t", "text": ""}])
    good, rejects = validate_batch(table, "passage", source="batch-7")
    assert good.column("text").to_pylist() == ["x", "y"]
    assert [(r["source"], r["line"], r["reason"]) for r in rejects] == [("batch-7", 3, "empty_field")]

    seen = {"p2"}
    good, rejects = validate_batch(table, "passage", source="batch-7", seen_ids=seen)
    assert good.column("text").to_pylist() == ["x"]
    assert [r["reason"] for r in rejects] == ["duplicate_id", "empty_field"]
    assert seen == {"p1", "p2"}


@pytest.mark.parametrize("make", [
    lambda d: d / "missing",
    lambda d: (d / "empty").mkdir() or d / "empty",
    lambda d: (d / "notes.txt").write_text("x") and d / "notes.txt",
])
def test_no_data_files_is_a_data_error_naming_the_path(tmp_path, make):
    path = make(tmp_path)
    with pytest.raises(DataError) as err:
        list_data_files(path)
    assert str(path) in str(err.value)


def test_two_files_with_the_same_stem_is_a_data_error(tmp_path):
    write_jsonl([instance("a")], tmp_path / "part-0.jsonl")
    write_jsonl([instance("b")], tmp_path / "part-0.json")
    with pytest.raises(DataError, match="part-0"):
        list_data_files(tmp_path)


@pytest.mark.parametrize(("name", "content"), [
    ("broken.parquet", b"PAR1 this is not parquet"),
    ("broken.json", b'[{"id": "a"}, '),
])
def test_unreadable_file_is_a_data_error_naming_the_file(tmp_path, name, content):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(DataError) as err:
        read_records(path, "passage")
    assert err.value.file == str(path)
    assert str(path) in str(err.value)


@pytest.mark.parametrize(("name", "write"), [("t.jsonl", write_jsonl), ("t.parquet", write_parquet)])
def test_written_table_reads_back_equal(tmp_path, name, write):
    table = pa.Table.from_pylist([instance("a1", meta='{"x": 1}'), instance("a2", input="ctx é")],
                                 schema=INSTANCE_SCHEMA)
    assert write(table, tmp_path / name) == tmp_path / name
    back, report = read_records(tmp_path / name, "instance")
    assert back.equals(table)
    assert report.n_rejected == 0


def test_jsonl_is_written_as_utf8_not_ascii_escapes(tmp_path):
    write_jsonl([{"text": "café"}], tmp_path / "u.jsonl")
    assert (tmp_path / "u.jsonl").read_bytes() == '{"text": "café"}\n'.encode()


def test_failed_jsonl_write_keeps_previous_file_and_leaves_no_temp(tmp_path):
    target = tmp_path / "out" / "rows.jsonl"
    write_jsonl([{"v": 1}], target)

    def rows():
        yield {"v": 2}
        raise RuntimeError("producer died")

    with pytest.raises(RuntimeError):
        write_jsonl(rows(), target)
    assert target.read_text() == '{"v": 1}\n'
    assert [p.name for p in target.parent.iterdir()] == ["rows.jsonl"]


def test_failed_parquet_write_keeps_previous_file_and_leaves_no_temp(tmp_path, monkeypatch):
    target = tmp_path / "rows.parquet"
    good = pa.table({"v": [1]})
    write_parquet(good, target)

    def half_write(table, where):
        Path(where).write_bytes(b"PAR1 partial")
        raise OSError("disk full")

    monkeypatch.setattr(io.pq, "write_table", half_write)
    with pytest.raises(OSError):
        write_parquet(pa.table({"v": [2]}), target)
    assert pq.read_table(target).equals(good)
    assert [p.name for p in tmp_path.iterdir()] == ["rows.parquet"]
