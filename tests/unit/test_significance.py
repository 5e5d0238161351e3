"""The eval's statistics on cases computed by hand: Wilson's interval, McNemar's exact test, Holm's
correction, macro-F1, and the comparisons an eval states (Self-RAG adaptive against the others)."""

from __future__ import annotations

import json

import pytest

from raypipe.eval.comparisons import stated_comparisons
from raypipe.eval.significance import PairedTest, accuracy_interval, holm, macro_f1, mcnemar


def test_wilson_interval_of_8_in_10():
    # centre (0.8 + z²/20) / (1 + z²/10) = 0.7168, half-width z·sqrt(0.016 + z²/400) / (1 + z²/10) = 0.2266
    low, high = accuracy_interval(8, 10)
    assert (low, high) == (pytest.approx(0.4902, abs=1e-4), pytest.approx(0.9433, abs=1e-4))
    assert accuracy_interval(0, 10)[0] == 0.0 and accuracy_interval(10, 10)[1] == pytest.approx(1.0)


def test_mcnemar_counts_only_the_items_one_method_gets_right():
    # 8 items only A gets right, 1 only B, 5 both, 6 neither: p = 2 · P(Bin(9, 1/2) <= 1) = 2 · 10/512
    a = [True] * 8 + [False] + [True] * 5 + [False] * 6
    b = [False] * 8 + [True] + [True] * 5 + [False] * 6
    test = mcnemar("adaptive", a, "rag", b)
    assert (test.n, test.a_only, test.b_only) == (20, 8, 1)
    assert test.p_value == pytest.approx(20 / 512)
    assert test.verdict == "ahead"
    # the same lead spread thin (1 vs 0) is no evidence; swapped, B is behind A
    assert mcnemar("a", [True, False], "b", [False, False]).verdict == "no difference shown"
    assert mcnemar("rag", b, "adaptive", a).verdict == "behind"
    with pytest.raises(ValueError, match="3 items against 2"):
        mcnemar("a", [True] * 3, "b", [True] * 2)


def test_holm_multiplies_the_smallest_p_by_the_family_size_and_keeps_the_order_monotone():
    tests = [PairedTest("adaptive", other, 100, 20, 10, p, p)
             for other, p in (("rag", 0.01), ("crag", 0.04), ("direct", 0.03))]
    # sorted 0.01·3 = 0.03, 0.03·2 = 0.06, then max(0.06, 0.04·1) = 0.06
    assert [t.adjusted_p for t in holm(tests)] == pytest.approx([0.03, 0.06, 0.06])


def test_macro_f1_counts_an_answer_naming_no_label_as_wrong():
    # `true`: 2 right, 0 wrongly given, 1 missed: F1 4/5; `false`: its one item missed: 0
    assert macro_f1(["true", "true", "false", None], ["true", "true", "true", "false"]) == pytest.approx(0.4)
    # always `true` on 8 true and 2 false claims: 80% accuracy, macro-F1 (16/18 + 0) / 2
    assert macro_f1(["true"] * 10, ["true"] * 8 + ["false"] * 2) == pytest.approx(8 / 18)


def _predictions(folder, variant, correct):
    rows = [{"id": f"q{i}", "set": "heldout_qa", "correct": c} for i, c in enumerate(correct)]
    rows.append({"id": "creative", "set": "heldout_noret", "correct": None})  # not judged: not compared
    (folder / f"{variant}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_the_stated_comparisons_are_adaptive_against_each_other_headline_variant(tmp_path):
    _predictions(tmp_path, "adaptive", [True] * 12 + [False] * 8)
    _predictions(tmp_path, "rag", [False] * 10 + [True] * 2 + [False] * 8)   # adaptive alone on 10 items
    _predictions(tmp_path, "crag", [True] * 11 + [False] + [True] + [False] * 7)  # 1 against 1
    found = stated_comparisons(tmp_path, ["adaptive", "rag", "crag"])
    assert list(found) == ["heldout_qa"]
    by_other = {t["b"]: t for t in found["heldout_qa"]}
    assert (by_other["rag"]["a_only"], by_other["rag"]["b_only"]) == (10, 0)
    # Holm over the two: rag's p = 2/1024 doubled (the smaller), crag's 1.0
    assert by_other["rag"]["adjusted_p"] == pytest.approx(4 / 1024)
    assert by_other["rag"]["verdict"] == "ahead" and by_other["crag"]["verdict"] == "no difference shown"
    assert stated_comparisons(tmp_path, ["rag", "crag"]) == {}  # no adaptive run: nothing is stated
