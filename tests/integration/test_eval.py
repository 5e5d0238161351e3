"""`run_eval` end to end on Ray: the untrained tiny generator, a keyword retriever over the world's
passages, the three held-out sets plus a file with bad rows."""

from __future__ import annotations

import json

import pytest

from raypipe.config import RaypipeConfig
from raypipe.jobs.eval import run_eval

pytestmark = pytest.mark.slow

LIMIT = 5  # a file's first rows in file order, rejected ones included: all five of the mixed file


@pytest.fixture(scope="module")
def eval_run(ray_cluster, world_dir, keyword_searcher, tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("eval")
    bad = out / "inputs" / "mixed.jsonl"
    bad.parent.mkdir()
    bad.write_text("\n".join([
        json.dumps({"id": "ok-1", "question": "Who is Ada?", "answers": ["a writer"]}),
        json.dumps({"id": "ok-1", "question": "Again?", "answers": ["x"]}),  # duplicate id
        json.dumps({"id": "bad-2", "claim": "The sky is green.", "label": "maybe"}),
        json.dumps({"id": "bad-3", "question": "No answers"}),
        "{not json",
    ]) + "\n")
    sets = [str(world_dir / "eval" / f"heldout_{s}.jsonl") for s in ("qa", "fact", "mc")] + [str(bad)]
    cfg = RaypipeConfig.model_validate({
        "retrieval": {"top_k": 2},
        "engine": {"kind": "hf"},
        "methods": {"selfrag": {"max_new_tokens": 6, "max_depth": 2, "beam_width": 2}},
        "eval": {"generator": str(tiny_model_dir), "eval_sets": sets, "out_dir": str(out / "run"),
                 "limit": LIMIT, "sweeps": {"selfrag": {"threshold": [0.0, 0.2, 0.5, 1.0], "is_sup_weight": [0.0, 2.0]}},
                 "batch_size": 4},
    })
    first = run_eval(cfg, searcher_factory=keyword_searcher)
    second = run_eval(cfg, searcher_factory=keyword_searcher)
    return out / "run", first, second


def test_metrics_are_keyed_by_mode(eval_run):
    run, stats, _ = eval_run
    metrics = json.loads((run / "metrics.json").read_text())
    assert set(metrics["accuracy"]) == {"never", "adaptive", "always"}
    assert all(0.0 <= a <= 1.0 for a in metrics["accuracy"].values())
    assert metrics["retrieval_frequency"]["never"] == 0.0
    assert metrics["retrieval_frequency"]["always"] == 1.0
    assert stats["accuracy"] == metrics["accuracy"]
    assert set(metrics["per_set"]) == {"heldout_qa", "heldout_fact", "heldout_mc", "mixed"}
    assert metrics["per_set"]["heldout_qa"]["never"]["n"] == LIMIT


def test_threshold_sweep_bounds_retrieval(eval_run):
    run, _, _ = eval_run
    sweep = json.loads((run / "metrics.json").read_text())["sweeps"]["threshold"]["heldout_qa"]
    by_threshold = {p["threshold"]: p["retrieval_frequency"] for p in sweep}
    assert by_threshold[1.0] == 0.0  # strict >: δ = 1 never retrieves
    assert by_threshold[0.0] == 1.0  # any p(Retrieval) > 0 retrieves


def test_predictions_carry_citations_and_reflections(eval_run):
    run, _, _ = eval_run
    rows = [json.loads(line) for line in (run / "predictions" / "always.jsonl").read_text().splitlines()]
    assert len(rows) == 3 * LIMIT + 1
    for row in rows:
        assert row["retrieved"] and row["n_retrievals"] >= 1
        assert row["method"] == "selfrag"
        first = row["trace"]["segments"][0]
        assert first["citation"]["passage_id"].startswith("p")
        assert set(first["reflections"]["is_rel"]) == {"[Relevant]", "[Irrelevant]"}
        assert sum(first["reflections"]["is_rel"].values()) == pytest.approx(1.0)
    closed = [r for r in rows if r["task"] != "qa"]
    assert all(r["correct"] == (r["option"] == r["golds"][0]) for r in closed)


def test_bad_rows_are_rejected_with_reasons(eval_run):
    run, stats, _ = eval_run
    assert stats["eval rows"]["mixed"] == 1
    assert stats["rejected rows"]["mixed"] == 4
    rejects = [json.loads(line) for line in (run / "rejects" / "mixed.rejects.jsonl").read_text().splitlines()]
    assert sorted(r["reason"] for r in rejects) == ["bad_label", "duplicate_id", "malformed_json", "unknown_shape"]


def test_plots_are_written_and_reruns_skip_finished_variants(eval_run):
    run, first, second = eval_run
    for name in ("threshold_sweep.png", "is_sup_weight_sweep.png"):
        assert (run / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # threshold 0.2 is adaptive's own setting: decoded once, written under both names
    assert first["variants decoded"] == 8 and first["variants reused"] == 1
    assert (run / "predictions" / "threshold_0.2.jsonl").read_text() == (run / "predictions" / "adaptive.jsonl").read_text()
    assert second["variants decoded"] == 0 and second["variants reused"] == 9
    assert second["accuracy"] == first["accuracy"]
    assert (run / "_SUCCESS").exists()


def test_adaptive_is_compared_with_each_other_mode_on_the_same_items(eval_run):
    """metrics.json's `comparisons`: per set, adaptive against never and always, on the set's judged
    items, with the counts recomputed here from the prediction files."""
    run, _, _ = eval_run
    metrics = json.loads((run / "metrics.json").read_text())
    rows = {v: {(r["set"], r["id"]): r["correct"] for r in map(json.loads, (run / "predictions" / f"{v}.jsonl").open())}
            for v in ("adaptive", "never")}
    qa = {t["b"]: t for t in metrics["comparisons"]["heldout_qa"]}
    assert set(qa) == {"never", "always"} and qa["never"]["n"] == LIMIT
    mine, theirs = rows["adaptive"], rows["never"]
    keys = [k for k in mine if k[0] == "heldout_qa"]
    assert qa["never"]["a_only"] == sum(mine[k] and not theirs[k] for k in keys)
    assert qa["never"]["b_only"] == sum(theirs[k] and not mine[k] for k in keys)
    low, high = metrics["per_set"]["heldout_qa"]["adaptive"]["accuracy_interval"]
    assert low <= metrics["per_set"]["heldout_qa"]["adaptive"]["accuracy"] <= high
