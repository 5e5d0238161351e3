"""Eval rows of the three shapes become requests with golds; bad rows are rejected with a reason."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest

from raypipe.data.world_tasks import FACT_INSTRUCTION, MC_INSTRUCTION
from raypipe.errors import DataError
from raypipe.eval.datasets import EvalItem, parse_item, read_eval_set, read_eval_sets
from raypipe.prompts import format_choices


def test_three_shapes():
    qa = parse_item({"id": "q", "question": "Who?", "answers": ["Ada"]}, "s")
    assert (qa.task, qa.instruction, qa.input, qa.golds, qa.options()) == ("qa", "Who?", "", ("Ada",), ())
    fact = parse_item({"id": "f", "claim": "Ada wrote it.", "label": "True"}, "s")
    assert (fact.task, fact.instruction, fact.input, fact.golds) == ("fact", FACT_INSTRUCTION, "Ada wrote it.", ("true",))
    assert [o.label for o in fact.options()] == ["true", "false"]
    mc = parse_item({"id": "m", "question": "Where?", "choices": {"A": "Rome", "B": "Lyon"}, "answerKey": "B"}, "s")
    assert (mc.task, mc.instruction, mc.input, mc.golds) == ("mc", MC_INSTRUCTION, "Where?\nA: Rome\nB: Lyon", ("B",))
    assert mc.request().options == mc.options()
    # closed-set items retrieve with the claim or the question (and choices), not the task instruction
    assert (qa.request().query, fact.request().query, mc.request().query) == (None, "Ada wrote it.", mc.input)
    assert not any(item.request().long_form for item in (qa, fact, mc))
    assert EvalItem.from_json(mc.to_json()) == mc


def test_mc_prompt_matches_the_worlds_training_instances(world_dir):
    rows = pq.read_table(world_dir / "instances").to_pylist()
    mc_rows = [r for r in rows if r["dataset"] == "multiple_choice"]
    assert mc_rows
    for row in mc_rows:
        meta = json.loads(row["meta"])
        assert row["instruction"] == MC_INSTRUCTION
        assert format_choices(row["input"].split("\n")[0], meta["choices"]) == row["input"]


def test_bad_rows_go_to_the_rejects_file_and_limit_counts_rows_in_file_order(tmp_path):
    path = tmp_path / "mine.jsonl"
    lines = [
        {"id": "1", "question": "Q1", "answers": ["a"]},
        {"id": "2", "question": "Q2", "answers": []},  # wrong_type
        {"id": "3", "claim": "c", "label": "yes"},  # bad_label
        {"id": "4", "question": "Q", "choices": {"A": "x"}, "answerKey": "B"},  # bad_label
        {"question": "Q5", "answers": ["a"]},  # missing id
        {"id": "1", "question": "again", "answers": ["a"]},  # duplicate_id
        {"id": "7", "text": "?"},  # unknown_shape
        {"id": "8", "question": "Q8", "answers": ["b"]},
        {"id": "9", "question": "Q9", "answers": ["c"]},
    ]
    path.write_bytes(b"\n".join(json.dumps(x).encode() for x in lines) + b"\n[1, 2\n\xff\xfe\n")
    items, report = read_eval_set(path, tmp_path / "rejects")
    assert [i.id for i in items] == ["1", "8", "9"]
    assert report.rejects == {"wrong_type": 1, "bad_label": 2, "missing_field": 1, "duplicate_id": 1,
                              "unknown_shape": 1, "malformed_json": 1, "invalid_utf8": 1}
    rejects = [json.loads(x) for x in (tmp_path / "rejects" / "mine.rejects.jsonl").read_text().splitlines()]
    assert [(r["line"], r["reason"], r["field"]) for r in rejects][:2] == [(2, "wrong_type", "answers"),
                                                                          (3, "bad_label", "label")]
    # the first 8 rows, rejects included: the same questions whatever is rejected among them
    limited, report = read_eval_set(path, tmp_path / "rejects", limit=8)
    assert [i.id for i in limited] == ["1", "8"]
    assert (report.n_rejected, report.rows_past_limit) == (6, 3)
    limited, report = read_eval_set(path, tmp_path / "rejects", limit=2)
    assert [i.id for i in limited] == ["1"]
    assert report.rejects == {"wrong_type": 1} and report.as_dict()["rows_past_limit"] == 9


def test_missing_files_and_clashing_set_names_are_errors(tmp_path):
    with pytest.raises(DataError, match="eval set not found"):
        read_eval_set(tmp_path / "nope.jsonl", tmp_path)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    for d in ("a", "b"):
        (tmp_path / d / "qa.jsonl").write_text(json.dumps({"id": "1", "question": "q", "answers": ["x"]}) + "\n")
    with pytest.raises(DataError, match="two eval sets are named 'qa'"):
        read_eval_sets([str(tmp_path / "a" / "qa.jsonl"), str(tmp_path / "b" / "qa.jsonl")], tmp_path / "rejects")


def test_instruction_rows_read_as_their_own_task(tmp_path):
    arith = parse_item({"id": "a", "instruction": "Compute the following expression.", "input": "12 times 3",
                        "answers": ["36"], "category": "arith"}, "noret")
    assert (arith.task, arith.instruction, arith.input, arith.golds, arith.options()) == (
        "instruction", "Compute the following expression.", "12 times 3", ("36",), ())
    assert arith.request().query is None  # open-ended: the decoder retrieves with the prompt
    creative = parse_item({"id": "c", "instruction": "Write a two-sentence story about a kite.", "answers": []}, "s")
    assert (creative.task, creative.input, creative.golds) == ("instruction", "", ())
    assert EvalItem.from_json(arith.to_json()) == arith
    path = tmp_path / "noret.jsonl"
    rows = [{"id": "1", "instruction": "Reverse kite.", "answers": ["etik"]},
            {"id": "2", "instruction": "Write a poem."},  # missing_field: [] must be said, not implied
            {"id": "3", "instruction": "Add.", "input": 5, "answers": ["5"]},  # wrong_type input
            {"id": "4", "instruction": "Add.", "answers": [""]},  # wrong_type answers
            {"id": "5", "instruction": "   ", "answers": []}]  # empty_field
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    items, report = read_eval_set(path, tmp_path / "rejects")
    assert [i.id for i in items] == ["1"]
    assert report.rejects == {"missing_field": 1, "wrong_type": 2, "empty_field": 1}


def test_the_worlds_noret_split_reads_without_rejects(world_dir, tmp_path):
    items, report = read_eval_set(world_dir / "eval" / "heldout_noret.jsonl", tmp_path)
    assert report.n_rejected == 0 and len(items) == 40
    assert {i.task for i in items} == {"instruction"}
    assert any(i.golds for i in items) and any(not i.golds for i in items)
