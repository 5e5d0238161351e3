"""Every benchmark runs end to end at its --quick size, so none of them rots.

Speed targets are not asserted here (they live in the full runs' JSON); what is asserted is that each
benchmark produces its result file with the keys its issue asks for, holding real numbers. So the
quick runs go two at a time (each its own process and Ray instance): most of a quick run is process
and Ray start-up, which leaves a core idle, and their figures are not what is checked.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
REQUIRED = {
    "retrieval": ["n_passages", "recall_at_10", "qps_ratio_vs_flat", "embed_ratio_2_vs_1_actor"],
    "critic": ["batched_vs_single_ratio", "actors_2_vs_1_ratio"],
    "training": ["tokens_per_s_1_worker", "tokens_per_s_2_workers", "zero3_vs_ddp_model_state_ratio", "gemm_gflops"],
    "decoding": ["batched_vs_sequential_ratio", "outputs_identical", "reflection_overhead"],
    "serve_load": ["rps_1_replica", "rps_2_replicas", "p95_ms_1_replica", "p95_ms_2_replicas", "errors",
                   "replicas_over_time", "scaled_up", "scaled_down"],
    "augment": ["n_instances", "wall_s", "instances_per_s", "peak_rss_gib", "ratio_vs_sequential",
                "ceiling_vs_sequential"],
    "faults": ["faults", "failure_detection"],
    "self_reasoning": ["sr_vs_selfrag_time_ratio", "trajectory_parse_rate", "sr_seconds_per_question"],
    "crag": ["evaluator_batched_vs_single", "crag_vs_rag_time_ratio", "selfcrag_vs_selfrag_time_ratio",
             "selfrag_vs_rag_time_ratio"],
}

pytestmark = pytest.mark.slow

#: quick runs at once; the longest first, so that the last one to start is a short one
PARALLEL = 2
LONGEST_FIRST = ["serve_load", "training", "faults", "augment", "retrieval", "critic", "crag", "decoding",
                 "self_reasoning"]


def _run(name: str, results: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "RAYPIPE_BENCH_RESULTS": str(results), "RAY_AUTH_MODE": "disabled"}
    return subprocess.run([sys.executable, str(ROOT / "benchmarks" / f"{name}.py"), "--quick"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def quick_runs(tmp_path_factory) -> dict[str, tuple[subprocess.CompletedProcess, Path]]:
    names = sorted(REQUIRED, key=lambda n: LONGEST_FIRST.index(n) if n in LONGEST_FIRST else len(LONGEST_FIRST))
    names = [n for n in names if (ROOT / "benchmarks" / f"{n}.py").exists()]
    folders = {name: tmp_path_factory.mktemp(f"bench_{name}") for name in names}
    with ThreadPoolExecutor(PARALLEL) as pool:
        futures = {name: pool.submit(_run, name, folders[name]) for name in names}
        return {name: (future.result(), folders[name]) for name, future in futures.items()}


@pytest.mark.parametrize("name", sorted(REQUIRED))
def test_benchmark_quick_run_writes_its_result(name, quick_runs):
    if name not in quick_runs:
        pytest.fail(f"benchmarks/{name}.py is missing")
    proc, results = quick_runs[name]
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads((results / f"{name}.json").read_text())
    for key in REQUIRED[name]:
        assert key in result, f"{name}.json lacks {key}"
        value = result[key]
        if isinstance(value, float):
            assert math.isfinite(value), f"{name}.json: {key} = {value}"
    assert result["machine"]["cores"] >= 1
    assert proc.stdout.strip().splitlines()[-1], "a benchmark prints a one-line summary last"


def test_quick_faults_run_replaced_the_killed_generator_and_failed_only_requests_in_flight(quick_runs):
    """`faults.py --quick` is the serving fault: SIGKILL of the one Generator replica's process (every
    request needs it) under a closed-loop load of 4 clients."""
    proc, results = quick_runs["faults"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    rec = json.loads((results / "faults.json").read_text())["faults"][-1]
    assert rec["fault"].startswith("serve: SIGKILL of the Generator replica"), rec
    # only requests on their way at the kill may fail; none sent after it does, none hangs to its timeout
    assert rec["client_errors"] == rec["failed_in_flight_at_kill"] <= rec["in_flight_at_kill"] <= 4, rec
    assert rec["failed_sent_after_kill"] == 0, rec
    assert rec["max_latency_s"] < rec["timeout_s"], rec
    # Serve replaced the replica and service resumed: every request sent after the recovery was answered
    assert rec["recovery_s"] is not None and rec["answered_after_recovery"] >= 8, rec
    assert rec["replaced"] and rec["running_replicas_after"] == 1, rec

