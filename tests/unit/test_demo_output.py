"""The demo's terminal output: compact stage tables."""

from __future__ import annotations

import inspect
import json

import pytest
from rich.console import Console

from raypipe.demo import MAX_VALUE_CHARS, stage_table

#: the shape of `raypipe label`'s stats: three levels deep, 85 rows when flattened one per leaf
LABEL_STATS = {
    "out_dir": "runs/demo/critic_data", "teacher": "oracle", "train": 2249, "dev": 251,
    "aspects": {a: {"requested": 500, "sampled": 500, "labeled": 500, "discarded": 0, "failed": 0, "train": 450,
                    "dev": 50, "labels": {"[Relevant]": 167, "[Irrelevant]": 333},
                    "evidence": {"ground_truth": 161, "random": 278}}
                for a in ("retrieve_input", "retrieve", "is_rel", "is_sup", "is_use")},
    "sampling_rejects": {},
    "instances_read": {"path": "runs/demo/world/instances", "n_ok": 3000, "n_rejected": 0, "rejects": {},
                       "rejects_path": None},
    "seconds": 0.65,
}


def _render(stats, clip: bool = True) -> list[str]:
    console = Console(width=400, record=True)  # wide: one line per row, so lengths can be read
    console.print(stage_table("critic data set:", stats, clip=clip))
    return console.export_text().splitlines()


def test_stage_table_folds_nested_stats_into_one_row_per_key():
    lines = _render(LABEL_STATS, clip=False)
    text = "\n".join(lines)
    assert len(lines) <= 20  # was 85 rows plus borders
    # every leaf is still there, nested under its key; empty values are left out
    assert "aspects.is_sup" in text and "{[Relevant]=167, [Irrelevant]=333}" in text
    assert "sampling_rejects" not in text and "rejects_path" not in text
    keys = [line.split()[0] for line in lines[1:] if line.strip() and not line.startswith("  ")]
    assert keys == ["out_dir", "teacher", "train", "dev", *(f"aspects.{a}" for a in LABEL_STATS["aspects"]),
                    "instances_read", "seconds"]


def test_stage_table_prints_list_like_values_as_they_are():
    text = "\n".join(_render({"qa_datasets": "[factual_qa, multiple_choice]", "[path]": 1}))
    assert "[factual_qa, multiple_choice]" in text and "[path]" in text


def test_long_values_are_cut_to_two_terminal_lines_unless_asked_not_to():
    full = {line.split()[0]: line.split(None, 1)[1].rstrip() for line in _render(LABEL_STATS, clip=False)[1:]}
    clipped = {line.split()[0]: line.split(None, 1)[1].rstrip() for line in _render(LABEL_STATS)[1:]}
    assert full.keys() == clipped.keys()
    for key, value in full.items():
        if len(value) <= MAX_VALUE_CHARS:
            assert clipped[key] == value
        else:  # the head of the value, marked as cut
            assert len(clipped[key]) <= MAX_VALUE_CHARS and clipped[key].endswith("…")
            assert value.startswith(clipped[key][:-1])
    assert any(len(v) > MAX_VALUE_CHARS for v in full.values())  # the label stats do have long rows


def _set_summary(accuracy: float, retrieval: float) -> dict:
    return {"n": 50, "judged": 50, "accuracy": accuracy, "retrieval_frequency": retrieval, "no_option": None}


#: an eval's metrics.json as the runner writes it, its sets in file-name order (QA last)
EVAL_METRICS = {
    "accuracy": {"never": 0.1, "adaptive": 0.34, "rag": 0.35},
    "per_set": {name: {"never": _set_summary(0.0, 0.0), "adaptive": _set_summary(acc, 1.0), "rag": _set_summary(acc, 1.0)}
                for name, acc in (("heldout_fact", 0.76), ("heldout_mc", 0.22), ("heldout_noret", 0.03),
                                  ("heldout_qa", 0.26))},
    "overall": {"never": _set_summary(0.06, 0.0), "adaptive": _set_summary(0.34, 0.92), "rag": _set_summary(0.35, 1.0)},
}


def _closing(argv: list[str], logs: str | None) -> list[str]:
    from raypipe.config import load_config
    from raypipe.demo import closing_block

    console = Console(width=80, record=True)
    console.print(closing_block(load_config(None, ["eval.out_dir=runs/x/eval"]), EVAL_METRICS, logs, argv))
    return console.export_text().splitlines()


def test_the_demo_closes_with_the_eval_table_qa_first_by_readable_names_then_next_steps():
    lines = _closing(["/venv/bin/raypipe", "demo", "--config", "configs/demo.yaml", "--set", "eval.limit=5"],
                     "/tmp/ray/session_x/logs")
    text = "\n".join(lines)
    assert "heldout_" not in text
    header = next(i for i, line in enumerate(lines) if line.strip() and not line.strip("─"))
    caption = next(i for i, line in enumerate(lines) if line.startswith("plain instructions: retrieval"))
    rows = [line.split("  ")[0] for line in lines[header + 1:caption]]
    assert rows == ["QA", "fact verification", "multiple choice", "plain instructions", "all"]
    qa = next(line for line in lines if line.startswith("QA "))
    assert qa.split() == ["QA", "0.0", "(0)", "26.0", "(100)", "26.0", "(100)"]
    steps = {line.split()[0]: line for line in lines[lines.index(next(x for x in lines if x.startswith("Next steps"))):]}
    assert "runs/x/eval/" in steps["results"]
    # serving is offered on the settings the demo ran with
    assert "raypipe serve --config configs/demo.yaml --set eval.limit=5" in steps["serve"]
    assert "configs/results_table.yaml" in text and "docs/cluster.md" in text and "docs/configuration.md" in text
    assert "/tmp/ray/session_x/logs" in steps["Ray"]
    assert len(lines) <= 25


def test_the_serve_command_keeps_a_list_override_whole():
    """A list value is text, not Rich markup: it printed as `'x=` before."""
    override = "augment.sampling.qa_datasets=[factual_qa, fact_verification]"
    lines = _closing(["raypipe", "demo", "--set", override], None)
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith("serve it"))
    end = next(i for i, line in enumerate(lines) if line.lstrip().startswith("all methods"))
    serve = " ".join(line.strip() for line in lines[start:end])  # the row, folded over lines
    assert f"'{override}'" in serve


def test_the_closing_block_leaves_out_ray_logs_shown_on_the_terminal():
    lines = _closing(["raypipe", "demo"], None)
    assert not any(line.lstrip().startswith("Ray logs") for line in lines)
    assert any(line.split()[:3] == ["serve", "it", "raypipe"] and "raypipe serve:" in line for line in lines)


def test_held_out_answers_are_two_lines_each_qa_first(tmp_path):
    from raypipe.eval.report import answers_block

    def row(set_name, task, i, text, correct, option=None, golds=("x",), citations=()):
        # closed-set rows carry the claim or question in `input`, under a fixed instruction
        closed = task in ("fact", "mc")
        return {"set": set_name, "task": task, "id": f"{set_name}-{i}",
                "instruction": "Is it true?" if closed else f"{set_name} question {i}",
                "input": f"{set_name} question {i}" if closed else "", "text": text, "option": option, "golds": list(golds), "correct": correct,
                "citations": [{"title": t, "passage_id": p} for t, p in citations]}

    (tmp_path / "predictions").mkdir()
    rows = [row("heldout_noret", "instruction", 0, "A short poem.", None, golds=()),
            row("heldout_fact", "fact", 0, "It is false.", False, option="false", golds=("true",)),
            row("heldout_qa", "qa", 0, "The Iron Kite in Blue is an opera.", True, golds=("opera",),
                citations=[("The Iron Kite in Blue", "p0001128")]),
            row("heldout_qa", "qa", 1, "second QA answer", True)]
    (tmp_path / "predictions" / "adaptive.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    console = Console(width=200, record=True)
    console.print(answers_block(tmp_path, n=1))
    lines = console.export_text().splitlines()
    assert lines == [
        "Held-out questions (adaptive retrieval)",
        "QA: heldout_qa question 0",
        "  ✓ The Iron Kite in Blue is an opera. | gold: opera | cites: The Iron Kite in Blue (p0001128)",
        "fact verification: heldout_fact question 0",
        "  ✗ false | gold: true | cites: -",
        "plain instructions: heldout_noret question 0",
        "  · A short poem. | gold: (not judged) | cites: -"]
    assert answers_block(tmp_path, variant="never") is None


def _rows_at_80_columns(title: str, stats: dict) -> dict[str, int]:
    """Terminal lines per stat row of a stage table on an 80-column terminal."""
    console = Console(width=80, record=True)
    console.print(stage_table(title, stats))
    rows: dict[str, int] = {}
    key = None
    for line in console.export_text().splitlines()[1:]:
        if line[:2].strip():  # a row's first line: its key in the first column
            key = line.split()[0]
            rows[key] = 0
        rows[key] += 1
    return rows


def test_the_demos_label_table_gives_each_aspect_its_split_and_balance_in_two_lines(monkeypatch):
    import raypipe.jobs.label
    from raypipe.demo import _label

    monkeypatch.setattr(raypipe.jobs.label, "run_label", lambda cfg: json.loads(json.dumps(LABEL_STATS)))
    stats = _label(None)
    assert stats["aspects"]["is_rel"] == {"train": 450, "dev": 50, "failed": 0,
                                          "labels": {"[Relevant]": 167, "[Irrelevant]": 333}}
    rows = _rows_at_80_columns("critic data set:", stats)
    assert all(rows[f"aspects.{a}"] <= 2 for a in LABEL_STATS["aspects"])
    assert rows["aspects.is_rel"] < _rows_at_80_columns("critic data set:", LABEL_STATS)["aspects.is_rel"]


def test_the_demos_augmentation_table_names_a_collapsed_aspect_and_each_agreement(monkeypatch):
    import raypipe.jobs.augment
    from raypipe.demo import _augment

    check = {"teacher": "oracle", "collapsed": ["is_use"], "rows": 2363, "sample_rows": 200, "max_share": 0.95,
             "aspects": {"is_rel": {"agreement": 0.8018, "collapsed": False},
                         "is_use": {"agreement": 0.61, "collapsed": True}}}
    monkeypatch.setattr(raypipe.jobs.augment, "run_augment", lambda cfg: {"rows_written": 5, "collapse_check": check})
    stats = _augment(None)
    assert stats["collapse_check"] == "collapsed: is_use (oracle teacher, 200 rows relabelled)"
    assert stats["D_gen vs teacher"] == "is_rel 80%, is_use 61%"
    rows = _rows_at_80_columns("corpus augmentation:", stats)
    assert rows["collapse_check"] == 1 and rows["D_gen"] == 1


def test_the_demos_eval_table_leaves_out_what_the_closing_tables_and_warnings_show(monkeypatch):
    import raypipe.eval.runner
    import raypipe.jobs.eval
    from raypipe.demo import EVAL_SHOWN_ELSEWHERE, _evaluate

    stats = {"out_dir": "runs/demo/eval", "accuracy": {"adaptive": 0.5}, "retrieval_frequency": {"adaptive": 1.0},
             "CRAG's corrective step (all sets)": {"crag": "correct 79"},
             "one answer or verdict for (nearly) every item": ["rag answers 'false' to 100%"],
             "critique vs look-alikes": {"adaptive": "IsRel gold > look-alike 135/182 pairs (74%)"}, "seconds": 1.0}
    runner_source = inspect.getsource(raypipe.eval.runner)
    assert all(f'"{name}"' in runner_source for name in EVAL_SHOWN_ELSEWHERE)  # names the runner writes
    monkeypatch.setattr(raypipe.jobs.eval, "run_eval", lambda cfg: stats)
    assert list(_evaluate(None)) == ["out_dir", "critique vs look-alikes", "seconds"]


def test_the_demo_clock_names_the_machine_beside_the_seconds():
    import os

    from raypipe.demo import demo_times

    clock = demo_times({"synthetic world": 3.2, "generator training": 1500.0}, 1603.26)
    assert clock["stages"] == {"synthetic world": 3.2, "generator training": 1500.0}
    assert clock["total_s"] == 1603.3 and clock["cores"] == os.cpu_count()
    assert clock["cpu"].rsplit(", ", 1)[1] in {"AMX", "AVX512-BF16", "AVX-512", "AVX2", "no AVX2"}
    assert "disk_bytes" not in clock


def test_the_demo_clock_counts_the_run_folders_files_once(tmp_path):
    from raypipe.demo import demo_times

    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "weights.bin").write_bytes(b"x" * 3000)
    (tmp_path / "metrics.json").write_bytes(b"{}")
    (tmp_path / "latest").symlink_to(tmp_path / "models" / "weights.bin")  # a link is not a second copy
    assert demo_times({}, 1.0, tmp_path)["disk_bytes"]["run_dir"] == 3002


@pytest.mark.parametrize(("amx", "bf16", "avx512", "avx2", "kind"), [
    (True, True, True, True, "AMX"), (False, True, True, True, "AVX512-BF16"),
    (False, False, True, True, "AVX-512"), (False, False, False, True, "AVX2"), (False, False, False, False, "no AVX2")])
def test_cpu_kind_names_the_widest_matrix_instructions(monkeypatch, amx, bf16, avx512, avx2, kind):
    import torch

    from raypipe.models.device import cpu_kind

    for name, value in (("amx_tile", amx), ("avx512_bf16", bf16), ("avx512", avx512), ("avx2", avx2)):
        monkeypatch.setattr(torch.cpu, f"_is_{name}_supported", lambda v=value: v)
    assert cpu_kind().endswith(f", {kind}")
