"""Two eval runs compared on the same items (raypipe.eval.compare_runs), on eval folders built as
`raypipe eval` writes them (predictions/<variant>.jsonl rows with the item's fields, the method's result
and `correct`; metrics.json's `run`). Expected figures are counted by hand: Wilson's interval from its
formula, McNemar's p from the binomial sums."""

from __future__ import annotations

import json
import math
from datetime import datetime, timezone
from pathlib import Path

import pytest

from raypipe.errors import DataError
from raypipe.eval.compare_runs import compare_runs, main

Z95 = 1.959963984540054


def wilson(k: int, n: int) -> list[float]:
    """Wilson's score interval, written out (not the code under test's scipy call)."""
    p, z2 = k / n, Z95 ** 2
    centre, half = (p + z2 / (2 * n)) / (1 + z2 / n), Z95 * math.sqrt(p * (1 - p) / n + z2 / (4 * n * n)) / (1 + z2 / n)
    return [centre - half, centre + half]


def _row(set_name: str, item: str, correct: bool | None) -> dict:
    """One prediction row in the eval's shape (runner._prediction_row: item fields, result, judgement)."""
    task = {"heldout_qa": "qa", "heldout_mc": "mc", "heldout_fact": "fact"}.get(set_name, "qa")
    return {"id": item, "set": set_name, "task": task, "instruction": "Answer the question.", "input": f"about {item}?",
            "golds": [] if correct is None else ["Istan"], "choices": {"A": "poet", "B": "novelist"} if task == "mc" else None,
            "text": "Istan.", "option": "B" if task == "mc" else None, "citations": [], "retrieved": True,
            "trace": {"documents": [{"id": "p1"}]}, "correct": correct,
            "exact_match": correct, "factscore": None}


def _write(run: Path, variant: str, sets: dict[str, list[bool | None]], only: str = "") -> None:
    """`sets`: set -> correctness of items 0.. (ids `<set>-<i>`); `only` adds one item no other run has."""
    rows = [_row(name, f"{name}-{i}", c) for name, values in sets.items() for i, c in enumerate(values)]
    if only:
        rows.append(_row("heldout_qa", f"heldout_qa-{only}", True))
    rows.append(_row("heldout_noret", "heldout_noret-0", None))  # a creative instruction: not judged
    (run / "predictions").mkdir(parents=True, exist_ok=True)
    (run / "predictions" / f"{variant}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run / "predictions" / f"{variant}.meta.json").write_text(json.dumps({"fingerprint": "x", "variant": variant}))


@pytest.fixture()
def runs(tmp_path: Path) -> tuple[Path, Path]:
    base, other = tmp_path / "demo" / "eval", tmp_path / "lever" / "eval"
    # QA: BASE right on items 0-5 of 10, OTHER on 0-8: OTHER alone right on 6, 7, 8; item q-base / q-other
    # is in one run only. MC: BASE right on 2 of 12, OTHER on all 12. Fact: only OTHER evaluated it.
    _write(base, "adaptive", {"heldout_qa": [True] * 6 + [False] * 4, "heldout_mc": [True] * 2 + [False] * 10},
           only="base")
    _write(other, "adaptive", {"heldout_qa": [True] * 9 + [False], "heldout_mc": [True] * 12,
                               "heldout_fact": [True, False]}, only="other")
    # OTHER's RAG: QA right on items 0 and 9 (OTHER's adaptive alone on 1-8, RAG alone on 9); MC on 0-5
    _write(other, "rag", {"heldout_qa": [True] + [False] * 8 + [True], "heldout_mc": [True] * 6 + [False] * 6})
    (base / "metrics.json").write_text(json.dumps({"run": {"commit": "21acb6b", "date": "2026-12-07T00:28:14+00:00"}}))
    return base, other


def test_the_figures_on_the_shared_items_with_intervals_and_paired_p(runs, tmp_path, capsys):
    base, other = runs
    out = tmp_path / "compare.json"
    assert main([str(base), str(other), "--against", "rag", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    written = json.loads(out.read_text())

    assert written["base"] == {"dir": str(base), "run": {"commit": "21acb6b", "date": "2026-12-07T00:28:14+00:00"}}
    assert written["other"] == {"dir": str(other), "run": None}  # no metrics.json: predictions alone compare
    assert (written["variant"], written["against"]) == ("adaptive", "rag")
    assert abs(datetime.fromisoformat(written["date"]) - datetime.now(timezone.utc)).total_seconds() < 60
    assert list(written["sets"]) == ["heldout_qa", "heldout_mc"]  # QA first; the unjudged set is not there
    assert written["only_in_other"] == ["heldout_fact"] and written["only_in_base"] == []

    qa = written["sets"]["heldout_qa"]
    assert (qa["n"], qa["only_base"], qa["only_other"]) == (10, 1, 1)
    assert (qa["base"]["correct"], qa["other"]["correct"]) == (6, 9)
    assert qa["base"]["interval"] == pytest.approx(wilson(6, 10), abs=1e-9)
    assert qa["other"]["interval"] == pytest.approx(wilson(9, 10), abs=1e-9)
    assert qa["difference"] == pytest.approx(0.3)
    assert (qa["paired"]["a_only"], qa["paired"]["b_only"]) == (3, 0)
    assert qa["paired"]["p_value"] == pytest.approx(2 / 2 ** 3)  # 3 of 3 discordant, two-sided
    # against RAG: 8 items only adaptive got right, 1 only RAG: p = 2 (1 + 9) / 2^9
    assert (qa["against"]["paired"]["a_only"], qa["against"]["paired"]["b_only"]) == (8, 1)
    assert qa["against"]["paired"]["p_value"] == pytest.approx(20 / 512)
    assert qa["against"]["rag"]["correct"] == 2

    mc = written["sets"]["heldout_mc"]
    assert (mc["paired"]["a_only"], mc["paired"]["p_value"]) == (10, pytest.approx(2 / 2 ** 10))
    assert mc["against"]["paired"]["p_value"] == pytest.approx(2 / 2 ** 6)

    assert "QA (heldout_qa): 10 items in both runs (1 only in BASE, 1 only in OTHER)" in printed
    assert "  BASE  adaptive 60.0% [31.3, 83.2] (6/10)" in printed
    assert "  difference +30.0 points; 3 items right only in OTHER, 0 only in BASE: p = 0.25" in printed
    assert "vs rag 20.0% [5.7, 51.0] (2/10) on 10 items: 8 vs 1 only one got right, p = 0.039" in printed
    assert "sets only in OTHER (not compared): heldout_fact" in printed
    assert f"written: {out}" in printed


def test_without_against_no_against_figures(runs):
    base, other = runs
    result = compare_runs(base, other)
    assert result["against"] is None and "against" not in result["sets"]["heldout_qa"]


def test_a_method_that_judged_none_of_a_sets_items_is_said_so(tmp_path):
    base, other = tmp_path / "a", tmp_path / "b"
    _write(base, "adaptive", {"heldout_qa": [True, False], "heldout_mc": [True]})
    _write(other, "adaptive", {"heldout_qa": [True, True], "heldout_mc": [False]})
    _write(other, "rag", {"heldout_qa": [False, False]})
    result = compare_runs(base, other, against="rag")
    assert result["sets"]["heldout_mc"]["against"] is None
    assert result["sets"]["heldout_qa"]["against"]["paired"]["a_only"] == 2


def test_a_run_without_the_variant_names_its_folder_and_what_is_there(runs, tmp_path, capsys):
    base, other = runs
    assert main([str(base), str(other), "--variant", "always"]) == 2
    err = capsys.readouterr().err
    assert f"BASE run {base} has no predictions for variant 'always'" in err
    assert "variants there: ['adaptive']" in err

    assert main([str(base), str(other), "--against", "crag"]) == 2
    assert f"OTHER run {other} has no predictions for variant 'crag'; variants there: ['adaptive', 'rag']" \
        in capsys.readouterr().err

    (other / "predictions" / "always.partial.jsonl").write_text('{"fingerprint": "x"}\n')
    _write(base, "always", {"heldout_qa": [True]})
    with pytest.raises(DataError, match="only always.partial.jsonl, a pass that has not ended; "
                                        r"variants there: \['adaptive', 'rag'\]"):
        compare_runs(base, other, "always")

    with pytest.raises(DataError, match=f"BASE run {tmp_path / 'nowhere'} has no predictions/ folder"):
        compare_runs(tmp_path / "nowhere", other)


def test_a_bad_prediction_row_names_the_file_line_and_field(runs):
    base, other = runs
    path = other / "predictions" / "adaptive.jsonl"
    lines = path.read_text().splitlines()
    row = json.loads(lines[2])
    del row["correct"]
    path.write_text("\n".join([*lines[:2], json.dumps(row), *lines[3:]]) + "\n")
    with pytest.raises(DataError, match=r"line 3 has no 'correct' \(file='.*adaptive.jsonl', field='correct'\)"):
        compare_runs(base, other)
    path.write_text(lines[0] + "\n{not json\n")
    with pytest.raises(DataError, match="line 2 is not valid JSON"):
        compare_runs(base, other)


def test_runs_sharing_no_judged_item_are_an_error(tmp_path):
    base, other = tmp_path / "a", tmp_path / "b"
    _write(base, "adaptive", {"heldout_mc": [True]})
    _write(other, "adaptive", {"heldout_fact": [True]})
    with pytest.raises(DataError, match=r"share no judged item: BASE's sets \['heldout_mc'\], OTHER's \['heldout_fact'\]"):
        compare_runs(base, other)


def test_help_explains_the_command(capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    assert "python -m raypipe.eval.compare_runs" in text and "--against METHOD" in text
    assert "not corrected across sets" in text
