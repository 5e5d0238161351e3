"""Every benchmark runs end to end at its --quick size, so none of them rots.

Speed targets are not asserted here (they live in the full runs' JSON); what is asserted is that each
benchmark produces its result file with the keys its issue asks for, holding real numbers. The runs
start with the session and go beside the unit tests (tests/bench_quick.py says why); the fixture
waits for them.
"""

from __future__ import annotations

import json
import math

import pytest

from tests import bench_quick

REQUIRED = {
    "retrieval": ["n_passages", "recall_at_10", "qps_ratio_vs_flat", "embed_ratio_2_vs_1_actor"],
    "critic": ["batched_vs_single_ratio", "actors_2_vs_1_ratio"],
    "training": ["tokens_per_s_1_worker", "tokens_per_s_2_workers", "zero3_vs_ddp_model_state_ratio", "gemm_gflops",
                 "autocast_vs_fp32_tokens_per_s_ratio"],
    "decoding": ["batched_vs_sequential_ratio", "outputs_identical", "reflection_overhead"],
    "serve_load": ["rps_1_replica", "rps_2_replicas", "p95_ms_1_replica", "p95_ms_2_replicas", "errors",
                   "replicas_over_time", "scaled_up", "scaled_down"],
    "augment": ["n_instances", "wall_s", "instances_per_s", "peak_rss_gib", "ratio_vs_sequential",
                "ceiling_vs_sequential", "actor_memory_growth", "actor_rss_by_shard"],
    "faults": ["faults", "failure_detection"],
    "faults_scale": ["n_instances", "rows_out", "lost", "duplicated", "identical", "wall_s_clean", "wall_s_faulted",
                     "overhead", "recovery_s"],
    "soak": ["errors_outside_inflight", "p99_after_over_before", "replica_memory_growth", "sustained_rps_2_replicas",
             "rate_rps", "minutes", "kills"],
    "self_reasoning": ["sr_vs_selfrag_time_ratio", "trajectory_parse_rate", "sr_seconds_per_question"],
    "length_grouping": ["padding_ratio_grouped_vs_plain", "tokens_per_s_grouped_vs_plain"],
    "engines": ["vllm_vs_hf_batch1_fp32", "vllm_vs_hf_batch8_fp32", "tree_search_vs_plain_vllm",
                "extra_requests_per_group_readout", "lm_critic_vllm_vs_hf", "critic_max_abs_difference"],
    "crag": ["evaluator_batched_vs_single", "crag_vs_rag_time_ratio", "selfcrag_vs_selfrag_time_ratio",
             "selfrag_vs_rag_time_ratio"],
}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def quick_runs() -> dict[str, bench_quick.Run]:
    assert bench_quick.started is not None, "tests/conftest.py starts the runs when this module is selected"
    return bench_quick.started.wait()


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_benchmark_quick_run_writes_its_result(name, quick_runs):
    if name not in quick_runs:
        pytest.fail(f"benchmarks/{name}.py is missing")
    run = quick_runs[name]
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((run.results / f"{name}.json").read_text())
    for key in REQUIRED[name]:
        assert key in result, f"{name}.json lacks {key}"
        value = result[key]
        if isinstance(value, float):
            assert math.isfinite(value), f"{name}.json: {key} = {value}"
    assert result["machine"]["cores"] >= 1
    assert run.stdout.strip().splitlines()[-1], "a benchmark prints a one-line summary last"


def test_quick_faults_run_replaced_the_killed_generator_and_failed_only_requests_in_flight(quick_runs):
    """`faults.py --quick` is the serving fault: SIGKILL of the one Generator replica's process (every
    request needs it) under a closed-loop load of 4 clients."""
    run = quick_runs["faults"]
    assert run.returncode == 0, run.stderr[-3000:]
    rec = json.loads((run.results / "faults.json").read_text())["faults"][-1]
    assert rec["fault"].startswith("serve: SIGKILL of the Generator replica"), rec
    # only requests on their way at the kill may fail; none sent after it does, none hangs to its timeout
    assert rec["client_errors"] == rec["failed_in_flight_at_kill"] <= rec["in_flight_at_kill"] <= 4, rec
    assert rec["failed_sent_after_kill"] == 0, rec
    assert rec["max_latency_s"] < rec["timeout_s"], rec
    # Serve replaced the replica and service resumed: every request sent after the recovery was answered
    assert rec["recovery_s"] is not None and rec["answered_after_recovery"] >= 8, rec
    assert rec["replaced"] and rec["running_replicas_after"] == 1, rec


def test_quick_scale_fault_lost_nothing_and_wrote_what_the_uninterrupted_run_wrote(quick_runs):
    """`faults_scale.py --quick`: the augment job on the 3-node cluster, uninterrupted and then with the
    worker node hosting an actor SIGKILLed at half the shards (the dead-node fault of the cluster tests)."""
    run = quick_runs["faults_scale"]
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((run.results / "faults_scale.json").read_text())
    if result.get("skipped"):
        pytest.skip(f"multi-node faults: {result['skipped']}")
    clean, faulted = result["pairs"]
    # the kill hit a running job, on a node that hosted an actor, and the node was replaced
    assert faulted["shards_at_fault"] < faulted["total_shards"] == result["shards"], faulted
    assert faulted["fault"].startswith("augment: worker node") and "SIGKILL" in faulted["fault"], faulted
    # every input id came out exactly once, in the same bytes as the uninterrupted run's
    assert (faulted["lost"], faulted["duplicates"], faulted["unexpected"]) == (0, 0, 0), faulted
    assert clean["rows_out"] == faulted["rows_out"] == result["n_instances"] == result["shards"] * result["rows"]
    assert result["identical"] and clean["digest"] == faulted["digest"]
    assert faulted["recovery_s"] is not None and result["recovery_s"] == pytest.approx(faulted["recovery_s"], abs=0.05)


def test_quick_soak_kills_failed_only_requests_in_flight_and_the_app_came_back_whole(quick_runs):
    """`soak.py --quick`: open-loop load across a head and two workers (each deployment twice, one
    replica per node), a Generator replica SIGKILLed at minute 3 and the worker node hosting one at
    minute 6; on one local Ray instance, without network namespaces, the replica kill only."""
    run = quick_runs["soak"]
    assert run.returncode == 0, run.stderr[-3000:]
    result = json.loads((run.results / "soak.json").read_text())
    kills = {k["kill"]: k for k in result["kills"]}
    assert sorted(kills) == (["replica"] if result["node_kill_skipped"] else ["node", "replica"]), result["kills"]
    assert result["rate_rps"] > 0 and len(result["minutes"]) == result["plan"]["minutes"]
    # only requests on their way at a kill failed; none sent at any other time did, none hung to its timeout
    assert result["errors_outside_inflight"] == 0, result["errors_outside_inflight_by_kind"]
    assert result["max_latency_s"] < result["plan"]["timeout_s"], result["max_latency_s"]
    for kill in kills.values():
        # the fault hit a Generator replica while another one served, and the app answered again after it
        assert kill["replicas_at_kill"] == 2, kill
        assert kill["recovery_s"] is not None and kill["answered_after_recovery"] >= 8, kill
        # Serve replaced what was lost: two Generator replicas again, the victim not among them
        assert kill["replaced_s"] is not None, kill
    if "node" in kills:
        node = kills["node"]
        # a worker node died, and the replacement runs on a node left alive
        assert node["node"] in (1, 2) and node["node"] not in node["replica_nodes_after"], node



def test_the_quick_retrieval_run_keeps_its_embedding_cache_out_of_the_checkout(quick_runs):
    """Under the tests `RAYPIPE_BENCH_CACHE` points at the run's temp folder: the embedded corpora land
    there, so a second local session starts as cold as a fresh clone's."""
    run = quick_runs["retrieval"]
    assert run.returncode == 0, run.stderr[-3000:]
    assert list((run.results / ".cache" / "retrieval").glob("corpus-*")), "no corpus cached in the run's folder"
