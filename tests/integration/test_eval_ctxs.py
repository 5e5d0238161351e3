"""`run_eval` on files in the papers' released shapes beside a plain set: the files' `ctxs` answer
their rows' searches (the predictions cite only a row's first K passages), the index the plain set's."""

from __future__ import annotations

import functools
import json

import pytest

from raypipe.config import RaypipeConfig
from raypipe.jobs.eval import run_eval
from tests.keyword_searcher import KeywordSearcher

pytestmark = pytest.mark.slow

QUESTIONS = ["What is Ada's occupation?", "Where was Bob born?", "Which is a gas?", "Who is Cy?"]
#: an index that would answer every question (each passage repeats one's words), if it were asked
INDEX = [{"id": f"idx{i}", "title": q, "text": q} for i, q in enumerate(QUESTIONS)]


def ctxs(tag: str, n: int) -> list[dict]:
    return [{"id": f"{tag}{i}", "title": f"{tag} {i}", "text": f"Passage {tag} {i}.", "score": str(2.0 - i / 10)}
            for i in range(n)]


def test_run_eval_answers_from_the_files_ctxs(ray_cluster, tiny_model_dir, tmp_path):
    popqa = tmp_path / "popqa_longtail_w_gs.jsonl"
    popqa.write_text("".join(json.dumps(r) + "\n" for r in [
        {"id": 1, "question": QUESTIONS[0], "answers": ["poet"], "ctxs": ctxs("p", 3)},
        {"id": 2, "question": QUESTIONS[1], "answers": ["Orr"], "ctxs": ctxs("q", 3)},
    ]))
    arc = tmp_path / "arc_challenge_processed.json"
    arc.write_text(json.dumps([{"id": "Mercury_1", "question": QUESTIONS[2], "answerKey": "1",
                                "choices": {"text": ["steam", "ice"], "label": ["1", "2"]}, "ctxs": ctxs("r", 3)}]))
    plain = tmp_path / "plain.jsonl"
    plain.write_text(json.dumps({"id": "c", "question": QUESTIONS[3], "answers": ["Cy"]}) + "\n")
    cfg = RaypipeConfig.model_validate({
        "retrieval": {"top_k": 2},
        "engine": {"kind": "hf"},
        "methods": {"selfrag": {"max_new_tokens": 4, "max_depth": 1, "beam_width": 1}},
        "eval": {"generator": str(tiny_model_dir), "eval_sets": [str(popqa), str(arc), str(plain)],
                 "out_dir": str(tmp_path / "run"), "sweeps": {"selfrag": {"modes": ["always"], "threshold": [], "is_sup_weight": []}}, "batch_size": 4},
    })
    stats = run_eval(cfg, searcher_factory=functools.partial(KeywordSearcher, INDEX))
    assert stats["eval rows"] == {"popqa_longtail_w_gs": 2, "arc_challenge_processed": 1, "plain": 1}
    rows = [json.loads(line) for line in (tmp_path / "run" / "predictions" / "always.jsonl").read_text().splitlines()]
    assert [(r["set"], r["id"], r["golds"]) for r in rows] == [
        ("popqa_longtail_w_gs", "1", ["poet"]), ("popqa_longtail_w_gs", "2", ["Orr"]),
        ("arc_challenge_processed", "Mercury_1", ["A"]), ("plain", "c", ["Cy"])]
    allowed = [{"p0", "p1"}, {"q0", "q1"}, {"r0", "r1"}, {p["id"] for p in INDEX}]
    for row, ids in zip(rows, allowed, strict=True):
        assert row["retrieved"]
        cited = {s["citation"]["passage_id"] for s in row["trace"]["segments"] if s["citation"]}
        assert cited and cited <= ids
