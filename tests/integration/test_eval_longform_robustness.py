"""`run_eval` with the long-form set and the robustness curve on Ray: the untrained tiny generator,
Self-RAG never / always, a keyword retriever over the world's passages, three items per set."""

from __future__ import annotations

import json

import pytest
from rich.console import Console

from raypipe.config import RaypipeConfig
from raypipe.eval.report import accuracy_table
from raypipe.jobs.eval import run_eval

pytestmark = pytest.mark.slow

SETS = ("heldout_qa", "heldout_longform")


@pytest.fixture(scope="module")
def run(ray_cluster, world_dir, tiny_model_dir, keyword_searcher, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval_robustness")
    cfg = RaypipeConfig.model_validate({
        "retrieval": {"top_k": 3, "index": {"passages": str(world_dir / "passages")}},
        "engine": {"kind": "hf"},
        "methods": {"selfrag": {"max_new_tokens": 8, "max_depth": 1, "beam_width": 1}},
        "eval": {"generator": str(tiny_model_dir), "eval_sets": [str(world_dir / "eval" / f"{s}.jsonl") for s in SETS],
                 "out_dir": str(out), "limit": 3, "batch_size": 6,
                 "sweeps": {"selfrag": {"modes": ["never", "always"], "threshold": [], "is_sup_weight": []}},
                 "robustness": {"enabled": True, "removal_rates": [0.0, 1.0]}},
    })
    stats = run_eval(cfg, searcher_factory=keyword_searcher)
    gold = {(s, r["id"]): set(r["passage_ids"]) for s in SETS
            for r in map(json.loads, (world_dir / "eval" / f"{s}.jsonl").read_text().splitlines())}
    return out, stats, gold


def _rows(out, variant):
    return [json.loads(line) for line in (out / "predictions" / f"{variant}.jsonl").read_text().splitlines()]


def test_removal_reaches_the_method_and_only_takes_accurate_passages(run):
    out, stats, gold = run
    assert stats["variants decoded"] == 3  # never, always, always_removed1

    def cited(row):
        return {s["citation"]["passage_id"] for s in row["trace"]["segments"] if s.get("citation")}

    full, removed = _rows(out, "always"), _rows(out, "always_removed1")
    assert any(cited(r) & gold[(r["set"], r["id"])] for r in full)  # the keyword retriever finds gold ...
    for row in removed:  # ... and at rate 1 no answer reads any
        assert not cited(row) & gold[(row["set"], row["id"])], row["id"]
        counts = row["retrieval_removal"]
        assert counts["rate"] == 1.0 and counts["removed"] == counts["gold_hits"]
    assert sum(r["retrieval_removal"]["removed"] for r in removed) > 0


def test_metrics_plot_and_table_carry_factscore_and_the_curve(run):
    out, _, _ = run
    metrics = json.loads((out / "metrics.json").read_text())
    bio = metrics["per_set"]["heldout_longform"]["always"]
    assert bio["accuracy"] is None and 0.0 <= bio["factscore"] <= 1.0
    assert all(isinstance(r["factscore"], float) for r in _rows(out, "always") if r["set"] == "heldout_longform")
    robustness = metrics["robustness"]
    assert robustness["metric"] == {"heldout_longform": "factscore", "heldout_qa": "accuracy"}
    curve = robustness["curves"]["heldout_qa"]["always"]
    assert [p["rate"] for p in curve] == [0.0, 1.0] and curve[1]["removed_share"] == 1.0
    assert curve[0]["value"] == metrics["per_set"]["heldout_qa"]["always"]["accuracy"]
    assert set(robustness["no_retrieval"]["heldout_qa"]) == {"never"}
    assert metrics["plots"]["robustness"].endswith("robustness.png") and (out / "robustness.png").is_file()
    console = Console(width=200, record=True)
    console.print(accuracy_table(metrics))
    assert f"FS {100 * bio['factscore']:.1f}" in console.export_text()
