"""README's figures are generated from committed results files: the committed README is what its files
render to, every block has its file, and the renderers show what a metrics.json and a
demo_times.json hold (intervals, baselines, the papers' rows, the paired verdicts, the machine)."""

from __future__ import annotations

import difflib
import json
from pathlib import Path

import pytest

from raypipe import readme_results as rr


def test_the_committed_readme_is_what_its_results_files_render():
    committed = rr.README.read_text(encoding="utf-8")
    generated = rr.render(committed)
    if committed != generated:
        diff = "\n".join(list(difflib.unified_diff(committed.splitlines(), generated.splitlines(), "committed",
                                                   "generated", lineterm="", n=1))[:30])
        raise AssertionError(f"README.md is stale against {rr.FILES}: run `{rr.COMMAND}`\n{diff}")


def test_readme_shows_the_results_table_and_every_block_it_shows_has_its_committed_file():
    shown = rr.marked_blocks(rr.README.read_text(encoding="utf-8"))
    assert "demo-eval" in shown and set(shown) <= set(rr.BLOCKS)
    for name in shown:
        data = json.loads((rr.ROOT / rr.FILES / rr.BLOCKS[name].file).read_text(encoding="utf-8"))
        assert data, rr.BLOCKS[name].file


def _summary(accuracy: float, interval: tuple[float, float], retrieval: float, answers: dict | None = None) -> dict:
    return {"n": 300, "judged": 300, "accuracy": accuracy, "accuracy_interval": list(interval),
            "retrieval_frequency": retrieval, "factscore": None, "answers": answers}


def _metrics() -> dict:
    fact_answers = {"majority_baseline": 0.66, "chance": 0.5, "collapsed": False, "macro_f1": 0.6834}
    collapsed = {"majority_baseline": 0.66, "chance": 0.5, "collapsed": True, "macro_f1": 0.2537}
    per_set = {  # in file order: the block orders the sets itself, QA first
        "heldout_fact": {"adaptive": _summary(0.70, (0.644, 0.75), 1.0, fact_answers),
                         "rag": _summary(0.34, (0.29, 0.395), 1.0, collapsed)},
        "heldout_qa": {"adaptive": _summary(0.74, (0.687, 0.786), 1.0), "rag": _summary(0.62, (0.564, 0.673), 1.0)},
    }
    comparisons = {"heldout_qa": [{"a": "adaptive", "b": "rag", "verdict": "ahead", "adjusted_p": 0.0021}],
                   "heldout_fact": [{"a": "adaptive", "b": "rag", "verdict": "ahead", "adjusted_p": 1.2e-9}]}
    return {"accuracy": {"adaptive": 0.72, "rag": 0.48}, "per_set": per_set, "comparisons": comparisons,
            "method_rows": {"selfrag": {"variant": "adaptive", "generator": None},
                            "rag": {"variant": "rag", "generator": "lm"}},
            "run": {"commit": "0123456789abcdef", "date": "2026-12-03T14:00:00+00:00",
                    "cpu": "Intel(R) Xeon(R) Processor, AMX", "cores": 2}}


def _rows(text: str) -> list[list[str]]:
    return [[c.strip() for c in line.strip("|").split(" | ")] for line in text.splitlines()
            if line.startswith("|") and not line.startswith("| ---")]


def test_the_demo_table_shows_intervals_baselines_papers_and_the_verdicts():
    text = rr.demo_eval_block(_metrics(), "docs/results/files/demo/metrics.json")
    rows = _rows(text)
    assert rows[0] == ["method", "QA (300)", "fact verification (300)"]
    by_name = {r[0]: r[1:] for r in rows[1:]}
    assert by_name["*always the most frequent gold*"] == ["-", "*66*"]
    assert by_name["*chance*"] == ["-", "*50*"]
    assert by_name["Self-RAG (adaptive)"] == ["74 [69-79] (100)", "70 [64-75] (100)"]
    assert by_name["RAG"] == ["62 [56-67] (100)", "34 [29-40] ! (100)"]
    # Self-RAG Table 2 (PopQA 54.9, PubHealth 72.4) and CRAG Table 1's RAG on LLaMA2-hf-7b (50.5, 48.9)
    assert by_name["*Self-RAG Table 2, Self-RAG 7B*"] == ["*54.9*", "*72.4*"]
    assert by_name["*CRAG Table 1, RAG on LLaMA2-hf-7b*"] == ["*50.5*", "*48.9*"]
    assert "- QA: Self-RAG (adaptive) ahead of RAG (p = 0.0021)" in text.splitlines()
    assert "- fact verification: Self-RAG (adaptive) ahead of RAG (p = 1.2e-09)" in text.splitlines()
    # macro-F1 beside accuracy for the closed sets that carry it; QA has none
    assert "- fact verification: Self-RAG (adaptive) 0.68, RAG 0.25" in text.splitlines()
    assert not any(line.startswith("- QA: Self-RAG (adaptive) 0.") for line in text.splitlines())
    assert text.endswith("2026-12-03, Intel(R) Xeon(R) Processor, AMX, 2 cores, commit 0123456.")


def test_the_demo_clock_names_the_total_the_longest_stages_and_the_machine():
    times = {"stages": {"synthetic world": 0.4, "generator training": 900.0, "critic training": 300.0,
                        "evaluation": 240.0, "serving": 60.0}, "total_s": 1800.0,
             "cpu": "AMD EPYC, AVX512-BF16", "cores": 2, "when": "2026-12-03T15:00:00+00:00"}
    text = rr.demo_times_block(times, "docs/results/files/demo/demo_times.json")
    assert "**30.0 min**" in text and "2026-12-03" in text and "AMD EPYC, AVX512-BF16, 2 cores" in text
    assert "generator training 15.0, critic training 5.0, evaluation 4.0). From" in text  # no disk recorded
    text = rr.demo_times_block({**times, "disk_bytes": {"run_dir": 1.34e9, "venv": 3.66e9}}, "f.json")
    assert "It left 1.3 GB in its run folder, beside a 3.7 GB `.venv`. From [f.json]" in text


def test_render_replaces_only_the_marked_blocks_and_names_an_unknown_one(tmp_path: Path):
    files = tmp_path / rr.FILES / "demo"
    files.mkdir(parents=True)
    (files / "demo_times.json").write_text(json.dumps({"stages": {"a": 60.0}, "total_s": 60.0, "cpu": "X, AVX2",
                                                       "cores": 2, "when": "2026-12-01T00:00:00+00:00"}))
    readme = "# title\nkept line\n<!-- results:demo-time -->\nstale text\n<!-- /results:demo-time -->\ntail\n"
    out = rr.render(readme, tmp_path)
    assert out.startswith("# title\nkept line\n<!-- results:demo-time -->\n`make demo` took **1.0 min**")
    assert "stale text" not in out and out.endswith("<!-- /results:demo-time -->\ntail\n")
    with pytest.raises(KeyError, match="results:bogus"):
        rr.render("<!-- results:bogus -->\nx\n<!-- /results:bogus -->\n", tmp_path)


def test_publish_refuses_an_unfinished_run_by_path_and_copies_a_finished_one(tmp_path: Path):
    run = tmp_path / "run"
    (run / "eval").mkdir(parents=True)
    (run / "eval" / "metrics.json").write_text("{}")
    with pytest.raises(FileNotFoundError, match=r"run/demo_times.json"):
        rr.publish(run, tmp_path / "repo")
    (run / "demo_times.json").write_text('{"total_s": 1}')
    copied = rr.publish(run, tmp_path / "repo")
    assert [p.relative_to(tmp_path / "repo").as_posix() for p in copied] == [
        f"{rr.FILES.as_posix()}/demo/metrics.json", f"{rr.FILES.as_posix()}/demo/demo_times.json"]
    assert json.loads(copied[1].read_text()) == {"total_s": 1}


def test_the_suite_clock_names_its_minutes_outcomes_and_machine_and_only_a_whole_suite_is_published(tmp_path: Path):
    session = {"selection": "whole suite", "wall_s": 2040.0, "date": "2026-12-03T16:00:00+00:00",
               "cpu": "Intel(R) Xeon(R) Processor, AMX", "cores": 2, "outcomes": {"skipped": 1, "passed": 1299}}
    text = rr.test_time_block(session, "docs/results/files/tests/test_session.json")
    assert "**34.0 min**" in text and "(Intel(R) Xeon(R) Processor, AMX, 2 cores; 1,299 passed, 1 skipped)" in text
    part = tmp_path / "part.json"
    part.write_text(json.dumps({**session, "selection": "part: tests/unit"}))
    with pytest.raises(ValueError, match="not the whole suite"):
        rr.publish_tests(part, tmp_path)
    whole = tmp_path / "whole.json"
    whole.write_text(json.dumps(session))
    assert json.loads(rr.publish_tests(whole, tmp_path).read_text()) == session
