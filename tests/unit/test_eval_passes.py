"""Eval decodes one pass per generator and writes each pass's predictions as soon as it ends, so a run
stopped in a later pass (killed, out of memory) keeps what the earlier passes decoded, and a rerun
decodes only the rest."""

from __future__ import annotations

import json

import pytest

from raypipe.config import load_config
from raypipe.eval import runner
from raypipe.jobs.eval import run_eval

QUESTIONS = [{"id": f"heldout_qa-{i:05d}", "question": f"Who wrote book {i}?", "answers": [f"Author {i}"]}
             for i in range(3)]


def _result(variant: str, item) -> dict:
    return {"method": variant, "text": f"{item.golds[0]} wrote it.", "citations": [], "n_retrievals": 1,
            "retrieved": True, "option": None, "option_scores": {}}


def test_a_pass_that_fails_keeps_the_earlier_pass_and_a_rerun_decodes_only_the_rest(tmp_path, monkeypatch):
    sets = tmp_path / "heldout_qa.jsonl"
    sets.write_text("".join(json.dumps(q) + "\n" for q in QUESTIONS))
    for name in ("generator", "self_reasoning"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    out = tmp_path / "eval"
    cfg = load_config(None, ["eval.methods=[rag,self_reasoning]", f"eval.generator={tmp_path / 'generator'}",
                             f"eval.generators.self_reasoning={tmp_path / 'self_reasoning'}",
                             f"eval.eval_sets=[{sets}]", f"eval.out_dir={out}",
                             "eval.sweeps.self_reasoning.robustness=[]"])
    decoded: list[list[str]] = []

    def passes(cfg, items, variants, searcher_factory, removal, predictions_dir, prints, what, fail: bool):
        for generator, group in runner.variants_by_generator(cfg, variants).items():
            decoded.append([v.name for v in group])
            if fail and generator.endswith("self_reasoning"):
                raise RuntimeError("the actor died")
            yield {v.name: [(item, _result(v.name, item)) for item in items] for v in group}

    monkeypatch.setattr(runner, "_predict", lambda *a: passes(*a, fail=True))
    with pytest.raises(RuntimeError, match="the actor died"):
        run_eval(cfg)
    assert decoded == [["rag"], ["self_reasoning"]]
    rows = [json.loads(line) for line in (out / "predictions" / "rag.jsonl").read_text().splitlines()]
    assert [r["correct"] for r in rows] == [True, True, True]
    assert not (out / "predictions" / "self_reasoning.jsonl").exists()

    decoded.clear()
    monkeypatch.setattr(runner, "_predict", lambda *a: passes(*a, fail=False))
    run_eval(cfg)
    assert decoded == [["self_reasoning"]]
    assert (out / "_SUCCESS").exists()


def test_sweeps_decode_the_first_sweep_limit_rows_of_each_set_after_the_headline(tmp_path, monkeypatch):
    questions = [{"id": f"heldout_qa-{i:05d}", "question": f"Who wrote book {i}?", "answers": [f"Author {i}"]}
                 for i in range(5)]
    sets = tmp_path / "heldout_qa.jsonl"
    sets.write_text("".join(json.dumps(q) + "\n" for q in questions))
    (tmp_path / "generator").mkdir()
    (tmp_path / "generator" / "config.json").write_text("{}")
    out = tmp_path / "eval"
    cfg = load_config(None, ["eval.methods=[selfrag]", f"eval.generator={tmp_path / 'generator'}",
                             f"eval.eval_sets=[{sets}]", f"eval.out_dir={out}", "eval.sweep_limit=2",
                             "eval.sweeps.selfrag.modes=[adaptive]", "eval.sweeps.selfrag.threshold=[0.0,0.5]",
                             "eval.sweeps.selfrag.is_sup_weight=[]"])
    decoded: list[tuple[str, list[str], list[str]]] = []

    def passes(cfg, items, variants, searcher_factory, removal, predictions_dir, prints, what):
        decoded.append((what, [v.name for v in variants], [item.id for item in items]))
        yield {v.name: [(item, _result(v.name, item)) for item in items] for v in variants}

    monkeypatch.setattr(runner, "_predict", passes)
    run_eval(cfg)
    metrics = json.loads((out / "metrics.json").read_text())
    ids = [q["id"] for q in questions]
    assert decoded == [("eval", ["adaptive"], ids), ("eval sweeps", ["threshold_0", "threshold_0.5"], ids[:2])]
    assert metrics["per_set"]["heldout_qa"]["adaptive"]["n"] == 5
    assert metrics["per_set"]["heldout_qa"]["threshold_0.5"]["n"] == 2
    assert metrics["run"]["sweep_limit"] == 2
