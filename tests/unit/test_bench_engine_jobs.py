"""benchmarks.engine_jobs' comparison of two evals of the same items: which answers differ, and which
figures lie outside each other's 95% intervals."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.engine_jobs import differing_answers, outside_intervals


def _predictions(folder: Path, variant: str, rows: list[tuple[str, str, str | None, str, bool | None]]) -> None:
    path = folder / "predictions" / f"{variant}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps({"set": s, "id": i, "option": o, "text": t, "correct": c}) + "\n"
                            for s, i, o, t, c in rows))


def test_differing_answers_lists_each_item_answered_otherwise_with_both_answers(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _predictions(a, "adaptive", [("qa", "1", None, "Leeds", True), ("qa", "2", None, "York", False),
                                 ("fact", "3", "true", "It is true.", True)])
    # item 2 differs in text, item 3 only in its free text (the chosen option decides a closed-set item)
    _predictions(b, "adaptive", [("qa", "1", None, "Leeds", True), ("qa", "2", None, "Bath", True),
                                 ("fact", "3", "true", "True, it is.", True)])
    _predictions(a, "rag", [("fact", "3", "true", "x", True)])
    _predictions(b, "rag", [("fact", "3", "false", "x", False)])
    _predictions(a, "crag", [("qa", "1", None, "Leeds", True)])  # only in one folder: skipped

    out = differing_answers(a, b, ["adaptive", "rag", "crag"])

    assert [(d["variant"], d["set"], d["id"]) for d in out] == [("adaptive", "qa", "2"), ("rag", "fact", "3")]
    assert out[0]["a"] == "York" and out[0]["b"] == "Bath" and (out[0]["a_correct"], out[0]["b_correct"]) == (False, True)
    assert (out[1]["a"], out[1]["b"]) == ("true", "false")


def test_differing_answers_refuses_evals_of_other_items(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    _predictions(a, "adaptive", [("qa", "1", None, "Leeds", True)])
    _predictions(b, "adaptive", [("qa", "9", None, "Leeds", True)])
    with pytest.raises(ValueError, match="adaptive: the two evals judged other items"):
        differing_answers(a, b, ["adaptive"])


def _figures(**by_variant: tuple[float, float, float]) -> dict:
    return {"per_set": {"qa": {v: {"accuracy": acc, "interval": [lo, hi], "n": 50}
                               for v, (acc, lo, hi) in by_variant.items()}}}


def test_outside_intervals_names_a_figure_beyond_either_interval():
    a = _figures(adaptive=(0.70, 0.56, 0.81), rag=(0.64, 0.50, 0.76), crag=(0.60, 0.46, 0.72))
    b = _figures(adaptive=(0.66, 0.52, 0.78), rag=(0.84, 0.71, 0.92), crag=(0.47, 0.34, 0.60))
    # adaptive: each inside the other's; rag: 0.84 above a's upper end; crag: 0.60 on b's upper end and
    # 0.47 just above a's lower end, both inside
    assert outside_intervals(a, b) == ["qa / rag: 0.640 vs 0.840"]
    assert outside_intervals(b, a) == ["qa / rag: 0.840 vs 0.640"]


def test_outside_intervals_skips_figures_either_side_lacks():
    a = _figures(adaptive=(0.70, 0.56, 0.81))
    b = _figures(rag=(0.10, 0.03, 0.20))
    assert outside_intervals(a, b) == []
