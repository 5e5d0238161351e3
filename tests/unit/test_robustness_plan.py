"""The robustness curve (CRAG Fig. 3): which variants are added, the numbers in metrics.json, and
the plot's lines."""

from __future__ import annotations

import json

import pytest

from raypipe.config import RobustnessConfig, load_config
from raypipe.eval import plots
from raypipe.eval.plots import plot_robustness
from raypipe.eval.robustness import plan_removal, robustness_metrics
from raypipe.eval.runner import HEADLINE_SWEEPS, eval_variants
from raypipe.jobs.eval import eval_sections

RATES = RobustnessConfig(enabled=True, removal_rates=[0.0, 0.5, 1.0])


def _headline(*overrides: str):
    cfg = load_config(None, ["eval.methods=[selfrag, rag, crag]", *overrides])
    return [v for v in eval_variants(eval_sections(cfg)) if v.sweep in HEADLINE_SWEEPS]


def test_every_method_that_retrieves_gets_a_curve_and_never_is_the_baseline():
    plan = plan_removal(_headline(), RATES)
    assert set(plan.points) == {"adaptive", "always", "rag", "crag"}
    assert plan.points["crag"] == {0.0: "crag", 0.5: "crag_removed0.5", 1.0: "crag_removed1"}
    assert plan.no_retrieval == ["never"]
    assert {v.name: (v.method, v.value) for v in plan.added if v.name.startswith("rag")} == {
        "rag_removed0.5": ("rag", 0.5), "rag_removed1": ("rag", 1.0)}
    assert plan.rates["always_removed0.5"] == 0.5 and len(plan.added) == 8
    # a removal point decodes its base's settings
    assert {v.name: v.settings.mode for v in plan.added if v.method == "selfrag"} == {
        "adaptive_removed0.5": "adaptive", "adaptive_removed1": "adaptive",
        "always_removed0.5": "always", "always_removed1": "always"}


def test_removal_rates_are_validated_and_sorted():
    assert RobustnessConfig(removal_rates=[1.0, 0.0, 0.5]).removal_rates == [0.0, 0.5, 1.0]
    for bad in ([0.5, 0.5], [1.5], []):
        with pytest.raises(ValueError, match="removal_rates"):
            RobustnessConfig(removal_rates=bad)
    assert load_config(None, []).eval.robustness.enabled is False


def _summary(accuracy=None, factscore=None):
    return {"n": 2, "accuracy": accuracy, "factscore": factscore, "retrieval_frequency": 1.0}


def test_metrics_hold_each_curve_its_removed_share_and_the_baseline(tmp_path):
    plan = plan_removal(_headline("eval.methods=[selfrag, rag]"), RATES)
    per_set = {
        "qa": {"never": _summary(0.1), "adaptive": _summary(0.6), "always": _summary(0.7), "rag": _summary(0.5),
               **{f"{b}_removed{r:g}": _summary(a) for b in ("adaptive", "always", "rag")
                  for r, a in ((0.5, 0.4), (1.0, 0.2))}},
        "bio": {name: _summary(factscore=0.3) for name in ("never", "adaptive", "always", "rag", *plan.rates)},
        "noret": {name: _summary() for name in ("never", "adaptive", "always", "rag", *plan.rates)},
    }
    predictions = tmp_path / "predictions"
    predictions.mkdir()
    for name in plan.rates:  # rag_removed1 found 4 accurate results in qa and removed them all, ...
        rows = [{"set": "qa", "retrieval_removal": {"gold_hits": 2, "removed": 2 if name.endswith("1") else 1}},
                {"set": "qa", "retrieval_removal": {"gold_hits": 2, "removed": 2 if name.endswith("1") else 0}},
                {"set": "bio", "retrieval_removal": {"gold_hits": 0, "removed": 0}}]
        (predictions / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = robustness_metrics(plan, per_set, {"qa", "bio"}, predictions, RATES)
    assert out["metric"] == {"bio": "factscore", "qa": "accuracy"}  # noret has no accurate passages
    assert out["curves"]["qa"]["rag"] == [{"rate": 0.0, "value": 0.5, "removed_share": 0.0},
                                          {"rate": 0.5, "value": 0.4, "removed_share": 0.25},
                                          {"rate": 1.0, "value": 0.2, "removed_share": 1.0}]
    assert out["curves"]["bio"]["always"][1] == {"rate": 0.5, "value": 0.3, "removed_share": None}
    assert out["no_retrieval"] == {"bio": {"never": 0.3}, "qa": {"never": 0.1}}


def test_the_plot_draws_one_line_per_method_and_the_no_retrieval_line(tmp_path, monkeypatch):
    curve = [{"rate": r, "value": v, "removed_share": r} for r, v in ((0.0, 0.6), (0.5, 0.4), (1.0, None))]
    robustness = {"metric": {"qa": "accuracy", "bio": "factscore"},
                  "curves": {"qa": {"selfcrag": curve, "adaptive": curve}, "bio": {"selfcrag": curve, "adaptive": curve}},
                  "no_retrieval": {"qa": {"never": 0.1}, "bio": {}}}
    drawn = []
    save = plots._save
    monkeypatch.setattr(plots, "_save", lambda fig, path, **kw: (drawn.append(fig), save(fig, path, **kw))[1])
    path = plot_robustness(robustness, tmp_path / "robustness.png")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    bio, qa = drawn[0].axes
    assert (bio.get_title(), qa.get_title()) == ("bio", "qa")
    lines = {line.get_label(): line for line in qa.get_lines()}
    assert set(lines) == {"selfcrag", "adaptive", "never (no retrieval)"}
    assert list(lines["adaptive"].get_xydata().tolist()) == [[0.0, 60.0], [50.0, 40.0]]  # no value: no point
    assert list(lines["never (no retrieval)"].get_ydata()) == [10.0, 10.0]
    assert {line.get_label() for line in bio.get_lines()} == {"selfcrag", "adaptive"}
    assert bio.get_ylabel() == "FactScore (%)"
