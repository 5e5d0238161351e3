"""`raypipe self-reasoning data` end to end on Ray (oracle teacher with errors, world checker, keyword
retriever over the world's passages), then one gradual-training stage layout check and an eval of
the `self_reasoning` method with the untrained tiny model (every trajectory fails to parse: answered
from the tail, never an exception)."""

from __future__ import annotations

import functools
import json

import pyarrow.parquet as pq
import pytest

from raypipe.config import RaypipeConfig
from raypipe.methods.self_reasoning.format import parse_trajectory
from raypipe.methods.self_reasoning.generate import run_trajectories
from raypipe.retrieval.keyword import KeywordSearcher

pytestmark = pytest.mark.slow


def keyword_retriever_factory(world_dir):
    """A picklable factory of a word-overlap searcher over the world's passages (stands in for the index)."""
    return functools.partial(KeywordSearcher, pq.read_table(world_dir / "passages").to_pylist())


@pytest.fixture(scope="module")
def data_run(ray_cluster, world_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("trajectories")
    cfg = RaypipeConfig.model_validate({
        "retrieval": {"top_k": 3},
        # the fixture's world, so the long-form set asks about its held-out people
        "world": {"out_dir": str(world_dir), "instances": 400, "seed": 7, "eval_instances": 40, "shard_size": 150},
        "trajectories": {"instances": str(world_dir / "instances"), "out_dir": str(out), "questions": 60,
                         "negative_fraction": 0.3, "max_kept": 40, "batch_size": 16,
                         "teacher": {"kind": "oracle", "error_rate": 0.3}},
    })
    factory = keyword_retriever_factory(world_dir)
    return cfg, out, run_trajectories(cfg, searcher_factory=factory), factory


def test_funnel_is_monotone_and_the_kept_rows_are_valid_trajectories(data_run, world_dir):
    cfg, out, stats, _ = data_run
    flow = stats["funnel"]["overall"]
    assert flow["generated"] == stats["items"] > stats["questions"] - stats["no_documents"]
    steps = [flow[k] for k in ("generated", "replied", "parsed", "answer_correct", "citation_passed")]
    assert steps == sorted(steps, reverse=True)
    assert flow["kept"] == min(40, flow["citation_passed"])
    # QC removes deliberate mistakes far more often than faithful trajectories
    errors = stats["funnel"]["per_oracle_error"]
    faithful = errors["none"]["citation_passed"] / errors["none"]["parsed"]
    wrong = errors["wrong_answer"]["citation_passed"] / max(1, errors["wrong_answer"]["parsed"])
    assert faithful > 0.6 and wrong < faithful
    rows = pq.read_table(out / "train").to_pylist()
    assert len(rows) == flow["kept"]
    for row in rows:  # every item shows top_k = 3 documents
        assert "\n[3] " in row["input"] and "\n[4] " not in row["input"]
        parse_trajectory(row["target"], 3)
    every = [json.loads(line) for line in (out / "trajectories.jsonl").read_text().splitlines()]
    assert len(every) == flow["generated"] and (out / "_SUCCESS").exists()
    longform = [json.loads(line) for line in (out / "eval" / "heldout_longform.jsonl").read_text().splitlines()]
    heldout_people = {json.loads(line)["entity"] for line in (world_dir / "eval" / "heldout_qa.jsonl").open()}
    assert longform and {r["entity"] for r in longform} <= heldout_people


def test_a_finished_folder_is_not_redone(data_run):
    cfg, _, stats, factory = data_run
    again = run_trajectories(cfg, searcher_factory=factory)
    assert again["skipped"] and again["funnel"] == stats["funnel"]


def test_eval_of_an_untrained_model_answers_every_item(data_run, world_dir, tiny_model_dir, tmp_path):
    from raypipe.eval.runner import run_eval

    _, _, _, factory = data_run
    cfg = RaypipeConfig.model_validate({
        "retrieval": {"top_k": 2}, "engine": {"kind": "hf"},
        "methods": {"self_reasoning": {"max_new_tokens": 8}},
        "eval": {"generator": str(tiny_model_dir), "methods": ["self_reasoning"], "limit": 3, "batch_size": 3,
                 "eval_sets": [str(world_dir / "eval" / f"heldout_{s}.jsonl") for s in ("qa", "fact")],
                 "out_dir": str(tmp_path / "eval")},
    })
    stats = run_eval(cfg, searcher_factory=factory)
    metrics = json.loads((tmp_path / "eval" / "metrics.json").read_text())
    assert set(metrics["overall"]) == {"self_reasoning", "self_reasoning_shuffled", "self_reasoning_noise50"}
    assert metrics["overall"]["self_reasoning"]["n"] == 6 and stats["variants decoded"] == 3
    rows = [json.loads(line) for line in (tmp_path / "eval" / "predictions" / "self_reasoning.jsonl").open()]
    assert all(r["trace"]["parse_reason"] for r in rows)  # 8 tokens of an untrained model never parse
