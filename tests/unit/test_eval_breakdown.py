"""Where an eval's points go (raypipe.eval.breakdown), on a hand-built case: items split by attribute, a
claim's truth and whether each method's own documents held the gold passage; a chosen option counted
as stated only when a document says it."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from raypipe.eval.breakdown import breakdown, documents, main, totals

ITEMS = {
    "heldout_mc-0": {"id": "heldout_mc-0", "relation": "occupation", "passage_ids": ["p1"]},
    "heldout_mc-1": {"id": "heldout_mc-1", "relation": "occupation", "passage_ids": ["p2"]},
    "heldout_fact-0": {"id": "heldout_fact-0", "relation": "birthplace", "label": "false", "passage_ids": ["p1"]},
}
PASSAGES = {"p1": "Ada Verling was an Istanian novelist.", "p2": "Otto Carner was a composer.", "p9": "Cats sleep."}
CHOICES = {"A": "poet", "B": "novelist", "C": "composer"}


def _mc(item: str, option: str, correct: bool, docs: list[str], method: str = "selfrag") -> dict:
    trace = ({"first_retrieval": [{"passage_id": d} for d in docs]} if method == "selfrag"
             else {"documents": [{"id": d} for d in docs]})
    return {"id": item, "set": "heldout_mc", "task": "mc", "choices": CHOICES, "option": option,
            "correct": correct, "trace": trace}


def _predictions() -> dict[str, list[dict]]:
    fact = {"id": "heldout_fact-0", "set": "heldout_fact", "task": "fact", "option": "false", "correct": True,
            "trace": {"crag": {"documents": [{"id": "p9"}]}}}
    return {
        # had the gold passage for both items: right on one, on the other chose a value no document says
        "adaptive": [_mc("heldout_mc-0", "B", True, ["p1", "p9"]), _mc("heldout_mc-1", "A", False, ["p2"])],
        # missed the gold passage of item 1 and chose a value its document does say
        "rag": [_mc("heldout_mc-0", "C", False, ["p1"], "rag"), _mc("heldout_mc-1", "C", True, ["p9", "p1"], "rag")],
        "crag": [fact],
    }


def test_each_methods_own_documents_decide_its_group_and_a_stated_choice_is_one_a_document_says():
    result = breakdown(_predictions(), ITEMS, PASSAGES)
    mc = result["heldout_mc"]
    assert mc["occupation | gold retrieved"]["adaptive"] == {"n": 2, "correct": 1, "stated": 1}
    assert mc["occupation | gold retrieved"]["rag"] == {"n": 1, "correct": 0, "stated": 0}
    assert mc["occupation | gold missed"]["rag"] == {"n": 1, "correct": 1, "stated": 0}
    assert result["heldout_fact"]["birthplace | false | gold missed"]["crag"]["correct"] == 1
    assert totals(result)["heldout_mc"]["adaptive"] == {"n": 2, "correct": 1, "gold": 2, "correct_gold": 1}
    assert documents({"trace": {}}) == []  # a method that did not retrieve


def test_the_command_writes_its_file_and_names_a_missing_variant(tmp_path: Path, capsys):
    eval_dir, world = tmp_path / "eval", tmp_path / "world"
    (eval_dir / "predictions").mkdir(parents=True)
    for variant, rows in _predictions().items():
        (eval_dir / "predictions" / f"{variant}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (world / "eval").mkdir(parents=True)
    (world / "passages").mkdir()
    for name in ("heldout_mc", "heldout_fact"):
        rows = [r for key, r in ITEMS.items() if key.startswith(name)]
        (world / "eval" / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    pq.write_table(pa.table({"id": list(PASSAGES), "title": list(PASSAGES), "text": list(PASSAGES.values())}),
                   world / "passages" / "part-00000.parquet")

    assert main([str(eval_dir), str(world), "--variants", "adaptive", "rag"]) == 0
    written = json.loads((eval_dir / "breakdown.json").read_text())
    assert written["totals"]["heldout_mc"]["rag"]["correct"] == 1
    assert "| occupation | gold retrieved | 1/2 (stated 1) | 0/1 (stated 0) |" in capsys.readouterr().out

    assert main([str(eval_dir), str(world), "--variants", "always"]) == 2
    assert "no predictions for variant 'always'" in capsys.readouterr().err
