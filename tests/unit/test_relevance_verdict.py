"""Self-Reasoning's `Relevant:` verdict against the documents it read: a fixed verdict is flagged."""

from __future__ import annotations

import json

from raypipe.eval.relevance_verdict import collapsed_verdicts, relevance_verdicts


def _write(path, verdicts: list[bool | None], gold_read: list[bool]) -> dict:
    """Predictions for items q0..qN: the model's verdict, and whether its documents held the gold."""
    gold, rows = {}, []
    for i, (said, held) in enumerate(zip(verdicts, gold_read, strict=True)):
        gold[("heldout_qa", f"q{i}")] = {f"gold{i}"}
        documents = [{"n": 1, "id": f"gold{i}" if held else f"other{i}", "title": "t"}, {"n": 2, "id": "x", "title": "u"}]
        trajectory = None if said is None else {"relevant": said, "answer": "a"}
        rows.append({"set": "heldout_qa", "id": f"q{i}", "trace": {"documents": documents, "trajectory": trajectory}})
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return gold


def test_always_relevant_over_documents_that_mostly_miss_the_gold_is_a_collapse(tmp_path):
    # the demo's noised QA eval: `Relevant: True` for 30 of 30, a gold passage read for 9
    path = tmp_path / "self_reasoning.jsonl"
    gold = _write(path, [True] * 30, [True] * 9 + [False] * 21)
    found = relevance_verdicts(path, gold)["heldout_qa"]
    assert (found["items"], found["said_relevant"], found["agreement"]) == (30, 1.0, 9 / 30)
    assert found["confusion"] == {"said_True_gold_True": 9, "said_True_gold_False": 21,
                                  "said_False_gold_True": 0, "said_False_gold_False": 0}
    assert found["collapsed"]
    [line] = collapsed_verdicts({"self_reasoning": {"heldout_qa": found}})
    assert "`Relevant: True` for 100% of heldout_qa (30 items)" in line and "for 30%" in line


def test_a_verdict_that_follows_the_documents_is_not_flagged(tmp_path):
    path = tmp_path / "p.jsonl"
    held = [True] * 20 + [False] * 10
    said = held[:]
    said[0], said[25] = False, True  # two errors
    found = relevance_verdicts(path, _write(path, said, held))["heldout_qa"]
    assert found["agreement"] == 28 / 30 and not found["collapsed"]
    assert collapsed_verdicts({"v": {"heldout_qa": found}}) == []


def test_a_fixed_verdict_over_one_sided_documents_is_not_flagged(tmp_path):
    path = tmp_path / "p.jsonl"
    found = relevance_verdicts(path, _write(path, [True] * 30, [True] * 30))["heldout_qa"]
    assert found["agreement"] == 1.0 and not found["collapsed"]


def test_unparsed_trajectories_are_left_out_and_other_methods_have_no_verdicts(tmp_path):
    path = tmp_path / "p.jsonl"
    found = relevance_verdicts(path, _write(path, [True, None, False], [True, True, False]))["heldout_qa"]
    assert found["items"] == 2 and found["agreement"] == 1.0
    rag = tmp_path / "rag.jsonl"
    rag.write_text(json.dumps({"set": "heldout_qa", "id": "q0", "trace": {"documents": []}}) + "\n")
    assert relevance_verdicts(rag, {("heldout_qa", "q0"): {"gold0"}}) is None
