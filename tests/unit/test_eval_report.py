"""The eval table shows accuracy, retrieval frequency and, for closed-set sets, off-format answers; the
world's held-out sets by readable names, QA first."""

from __future__ import annotations

from rich.console import Console

from raypipe.eval.report import accuracy_table, ordered_sets, set_name


def _summary(accuracy: float, retrieval: float, no_option: float | None) -> dict:
    return {"n": 10, "accuracy": accuracy, "retrieval_frequency": retrieval, "no_option": no_option}


def _lines(metrics: dict) -> list[str]:
    """The table's lines on an 80-column terminal, from its header rule on."""
    console = Console(width=80, record=True)
    console.print(accuracy_table(metrics))
    lines = console.export_text().splitlines()
    return lines[next(i for i, line in enumerate(lines) if line.startswith("─")):]


def test_table_flags_closed_set_outputs_that_name_no_option():
    metrics = {
        "accuracy": {"never": 0.0, "always": 0.45},
        "per_set": {"fact": {"never": _summary(0.0, 0.0, 0.9), "always": _summary(0.5, 1.0, 0.0)},
                    "qa": {"never": _summary(0.0, 0.0, None), "always": _summary(0.4, 1.0, None)}},
        "overall": {"never": _summary(0.0, 0.0, 0.9), "always": _summary(0.45, 1.0, 0.0)},
    }
    lines = [line.split() for line in _lines(metrics)]
    rows = [cells[0] if cells[0] != "no" else "no option" for cells in lines[1:] if cells]
    # the no-option share sits under the set it belongs to, and only there
    assert rows == ["fact", "no option", "qa", "all", "no option"]
    fact = lines[1 + rows.index("fact")]
    assert fact == ["fact", "0.0", "(0)", "50.0", "(100)"]
    assert lines[1 + rows.index("no option")] == ["no", "option", "90%", "0%"]


def test_a_set_with_no_judged_item_shows_its_retrieval_frequency_only():
    creative = {"n": 10, "judged": 0, "accuracy": None, "retrieval_frequency": 0.2, "no_option": None}
    metrics = {"accuracy": {"adaptive": 0.4},
               "per_set": {"noret": {"adaptive": creative}, "qa": {"adaptive": _summary(0.4, 1.0, None)}},
               "overall": {"adaptive": _summary(0.4, 0.6, None)}}
    rows = {line.split()[0]: line.split()[1:] for line in _lines(metrics)[1:] if line.strip()}
    assert rows["noret"] == ["-", "(20)"] and rows["qa"] == ["40.0", "(100)"]


def test_the_worlds_sets_show_by_name_qa_first_and_five_variants_fit_80_columns():
    sets = ["heldout_noret", "heldout_mc", "popqa", "heldout_fact", "heldout_qa", "arc", "heldout_longform"]
    assert ordered_sets(sets) == ["heldout_qa", "heldout_fact", "heldout_mc", "heldout_longform", "heldout_noret",
                                  "arc", "popqa"]
    assert [set_name(s) for s in ordered_sets(sets)] == ["QA", "fact verification", "multiple choice",
                                                         "biographies", "plain instructions", "arc", "popqa"]
    variants = ["never", "adaptive", "always", "rag", "crag"]
    cell = {v: _summary(1.0, 1.0, None) for v in variants}  # the widest cell: 100.0 (100)
    metrics = {"accuracy": dict.fromkeys(variants, 1.0),
               "per_set": {s: cell for s in ("heldout_noret", "heldout_mc", "heldout_fact", "heldout_qa")},
               "overall": cell}
    lines = _lines(metrics)
    body = [line for line in lines[1:] if line.strip()]
    assert [line[:18].strip() for line in body[:5]] == ["QA", "fact verification", "multiple choice",
                                                         "plain instructions", "all"]
    assert all(line.count("100.0 (100)") == 5 for line in body[:5])  # one line per row: nothing wrapped
    assert "heldout" not in "\n".join(lines)
    assert "plain instructions: retrieval % should be low" in "\n".join(lines)


def test_the_comparisons_block_reads_each_stated_comparison_with_its_intervals_and_baselines():
    from raypipe.eval.report import comparisons_block

    fact = {"accuracy": 0.7, "accuracy_interval": [0.6, 0.8],
            "answers": {"majority_label": "true", "majority_baseline": 0.66, "chance": 0.5, "macro_f1": 0.61}}
    rag = {"accuracy": 0.34, "accuracy_interval": [0.25, 0.45]}
    crag = {"accuracy": 0.68, "accuracy_interval": [0.58, 0.78]}
    tests = [{"a": "adaptive", "b": "rag", "n": 50, "a_only": 20, "b_only": 2, "adjusted_p": 0.0002, "verdict": "ahead"},
             {"a": "adaptive", "b": "crag", "n": 50, "a_only": 5, "b_only": 4, "adjusted_p": 1.0,
              "verdict": "no difference shown"}]
    metrics = {"comparisons": {"heldout_fact": tests},
               "per_set": {"heldout_fact": {"adaptive": fact, "rag": rag, "crag": crag}}}
    console = Console(width=120, record=True)
    console.print(comparisons_block(metrics))
    text = console.export_text()
    assert "fact verification (50 items; always 'true' 66.0, chance 50.0, adaptive macro-F1 0.61)" in text
    assert "adaptive 70.0 [60.0, 80.0] vs rag 34.0 [25.0, 45.0]: ahead (20 vs 2" in text
    assert "vs crag 68.0 [58.0, 78.0]: no difference shown" in text
    assert comparisons_block({"per_set": {}}) is None
