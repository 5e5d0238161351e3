"""Faults on a real multi-node cluster: a head and two workers, each in its own network namespace.

Augmentation (the `jobs/augment.py` entry script as the driver, in the head's namespace): a worker node
hosting an augment actor is cut off by taking its link down once the first shard is written; in a
second run the driver itself is SIGKILLed and the job rerun. Each run must end with every input id
exactly once in the output (sampling off, so output ids = input ids), and the two must write the same
bytes: the faults land on different shards at different points, so an output that depended on a fault
would differ between them. A worker node SIGKILLed whole is benchmarks/faults_scale.py's quick run
(against an uninterrupted run, byte for byte), which test_benchmarks_quick.py checks; that an
uninterrupted run, a crashed and resumed one and the staged layout write the same bytes is
test_augment_pipeline's.

Training (`jobs/train.py generator`: ZeRO-3, two Ray Train workers of one CPU on two nodes): one worker
process is SIGKILLed once the first checkpoint is registered; Ray Train restarts the group from it
(`max_failures=1`) and the run must end with the loss curve and the weights of an uninterrupted run
(made on the session's own one-node Ray instance meanwhile).

Serving across the nodes, a worker node killed under load, is the quick soak's (benchmarks/soak.py
--quick, with a Generator replica killed before it), which test_benchmarks_quick.py makes and checks;
a replica process killed on one node is benchmarks/faults.py's quick run, checked there too.
One cluster serves the module: the node a fault took is replaced while the next scenario starts.

Skipped with the reason when this machine cannot make namespaces (needs root and iproute2).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from raypipe.data.io import list_data_files
from tests.cluster_faults import (
    TRAIN_ROWS,
    TRAIN_STEPS,
    AugmentInputs,
    Launch,
    augment_driver_kill,
    augment_with_node_fault,
    flat_index,
    max_weight_difference,
    metrics_by_attempt,
    on_instance,
    shard_bytes,
    train_clean,
    train_worker_kill,
    write_generator_rows,
    write_instance_shards,
)
from tests.cluster_nodes import NetnsCluster, netns_unavailable

pytestmark = pytest.mark.slow

_why = netns_unavailable()
needs_netns = pytest.mark.skipif(_why is not None, reason=f"multi-node fault tests: {_why}")


SHARDS, ROWS_PER_SHARD = 12, 10


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    if _why is not None:
        pytest.skip(_why)
    with NetnsCluster(tmp_path_factory.mktemp("netns"), workers=2) as c:
        yield c


@pytest.fixture(scope="module")
def augment_inputs(world_dir, tiny_model_dir, tmp_path_factory) -> AugmentInputs:
    work = tmp_path_factory.mktemp("augment_inputs")
    # enough shards that a fault after the first one still meets a running job on a quiet machine
    # (with 4 shards the job had finished before the fault landed)
    instances = write_instance_shards(world_dir, work / "instances", shards=SHARDS, rows_per_shard=ROWS_PER_SHARD)
    passages = list_data_files(world_dir / "passages")[0]
    index = flat_index(passages, work / "index")  # built here: the index job on a cluster is test_cluster_jobs'
    return AugmentInputs(instances, passages, Path(index.index.out_dir), tiny_model_dir)


@pytest.fixture(scope="module")
def session_instance(ray_cluster) -> Launch:
    """Drivers of this session's own Ray instance (one node): the uninterrupted training run goes there,
    at the same time as the faulted one on the cluster (Ray Train starts its actors one after the other,
    polling, so a second job overlaps well), and weights must not depend on where they were made."""
    return on_instance(ray_cluster.get_runtime_context().gcs_address)


@needs_netns
def test_augmentation_survives_a_partitioned_node_and_a_killed_driver(cluster, augment_inputs, tmp_path):
    """(A dead node is benchmarks/faults_scale.py's quick run, which test_benchmarks_quick.py checks.)"""
    out = tmp_path / "node_cut"
    rec = augment_with_node_fault(cluster, augment_inputs, out, tmp_path, "cut", None)
    # the fault hit a running job, and nothing was lost or written twice
    assert rec["shards_at_fault"] < rec["total_shards"], rec
    assert (rec["lost"], rec["duplicates"], rec["unexpected"]) == (0, 0, 0), rec
    assert rec["rows_out"] == rec["rows_in"] == SHARDS * ROWS_PER_SHARD
    cut = shard_bytes(out)
    cluster.wait_nodes()
    assert len(cluster.nodes) == 3  # the node was replaced for the next run

    out = tmp_path / "driver_kill"
    rec = augment_driver_kill(cluster, augment_inputs, out, tmp_path, None)
    assert 1 <= rec["shards_skipped_on_rerun"] < rec["total_shards"], rec
    assert (rec["lost"], rec["duplicates"], rec["unexpected"]) == (0, 0, 0), rec
    assert len(cut) == 2 * SHARDS  # a parquet and a jsonl file per input shard
    assert shard_bytes(out) == cut, "the output depends on the fault"


@needs_netns
def test_generator_training_survives_a_killed_worker_process_and_ends_where_an_uninterrupted_run_ends(
        cluster, session_instance, tiny_model_dir, tmp_path):
    data = write_generator_rows(tmp_path / "d_gen", TRAIN_ROWS)
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(train_clean, session_instance, tiny_model_dir, data, tmp_path / "clean", tmp_path)
        rec = train_worker_kill(cluster, tiny_model_dir, data, tmp_path / "killed", tmp_path, None)
        pending.result()
    reference = metrics_by_attempt(tmp_path / "clean" / "logs" / "main.metrics.jsonl")
    attempts = metrics_by_attempt(tmp_path / "killed" / "logs" / "main.metrics.jsonl")
    assert sorted(reference) == [0] and sorted(reference[0]) == list(range(1, TRAIN_STEPS + 1))

    # the kill landed mid-epoch, once a checkpoint was registered; the group restarted once, from the
    # latest registered checkpoint (the one seen at the kill, or a later one registered as it landed)
    resumed = rec["resumed_from_step"]
    assert sorted(attempts) == [0, resumed], rec
    first, second = attempts[0], attempts[resumed]
    assert max(first) < TRAIN_STEPS, rec
    assert 2 <= rec["checkpoint_at_kill"] <= resumed <= max(first) and resumed % 2 == 0, rec
    assert sorted(second) == list(range(resumed + 1, TRAIN_STEPS + 1)) and rec["steps"] == TRAIN_STEPS
    # the restored group saw the same batches from the same state: every step's loss and lr is the
    # uninterrupted run's, the repeated ones included, and so are the final weights
    for steps in (first, second):
        for step, r in steps.items():
            assert r["loss"] == pytest.approx(reference[0][step]["loss"], rel=1e-5), (step, r, reference[0][step])
            assert r["lr"] == pytest.approx(reference[0][step]["lr"])
    assert max_weight_difference(tmp_path / "clean", tmp_path / "killed") < 1e-4
