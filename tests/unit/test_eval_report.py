"""The eval table shows accuracy, retrieval frequency and, for closed-set sets, off-format answers."""

from __future__ import annotations

from rich.console import Console

from raypipe.eval.report import accuracy_table


def _summary(accuracy: float, retrieval: float, no_option: float | None) -> dict:
    return {"n": 10, "accuracy": accuracy, "retrieval_frequency": retrieval, "no_option": no_option}


def test_table_flags_closed_set_outputs_that_name_no_option():
    metrics = {
        "accuracy": {"never": 0.0, "always": 0.45},
        "per_set": {"fact": {"never": _summary(0.0, 0.0, 0.9), "always": _summary(0.5, 1.0, 0.0)},
                    "qa": {"never": _summary(0.0, 0.0, None), "always": _summary(0.4, 1.0, None)}},
        "overall": {"never": _summary(0.0, 0.0, 0.9), "always": _summary(0.45, 1.0, 0.0)},
    }
    console = Console(width=200, record=True)
    console.print(accuracy_table(metrics))
    lines = {line.split("│")[1].strip(): line for line in console.export_text().splitlines() if line.count("│") > 2}
    assert "0.0 (0) [90% no option]" in lines["fact"] and "50.0 (100)" in lines["fact"]
    assert "no option]" not in lines["qa"]
    assert lines["fact"].count("no option") == 1  # 0% is not flagged


def test_a_set_with_no_judged_item_shows_its_retrieval_frequency_only():
    creative = {"n": 10, "judged": 0, "accuracy": None, "retrieval_frequency": 0.2, "no_option": None}
    metrics = {"accuracy": {"adaptive": 0.4},
               "per_set": {"noret": {"adaptive": creative}, "qa": {"adaptive": _summary(0.4, 1.0, None)}},
               "overall": {"adaptive": _summary(0.4, 0.6, None)}}
    console = Console(width=200, record=True)
    console.print(accuracy_table(metrics))
    lines = {line.split("│")[1].strip(): line for line in console.export_text().splitlines() if line.count("│") > 2}
    assert lines["noret"].split("│")[2].strip() == "- (20)"
    assert "40.0 (100)" in lines["qa"]
