"""Faults on a real multi-node cluster: a head and two workers, each in its own network namespace.

Augmentation (the `jobs/augment.py` entry script as the driver, in the head's namespace): a worker node
hosting an augment actor is SIGKILLed whole once the first shard is written; in a second run one is
cut off by taking its link down; in a third the driver itself is SIGKILLed and the job rerun. Each run
must end with every input id exactly once in the output (sampling off, so output ids = input ids) and
with the bytes of an uninterrupted run on the same cluster.

Skipped with the reason when this machine cannot make namespaces (needs root and iproute2).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from cluster_faults import (  # noqa: E402
    AugmentInputs,
    augment_clean,
    augment_driver_kill,
    augment_with_node_fault,
    build_index,
    max_weight_difference,
    shard_bytes,
    train_clean,
    train_worker_kill,
    write_generator_rows,
    write_instance_shards,
)
from cluster_nodes import NetnsCluster, netns_unavailable  # noqa: E402

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
def augment_inputs(cluster, world_dir, tiny_model_dir, tmp_path_factory) -> AugmentInputs:
    work = tmp_path_factory.mktemp("augment_inputs")
    # enough shards that a fault after the first one still meets a running job on a quiet machine
    # (with 4 shards the job had finished before the fault landed)
    instances = write_instance_shards(world_dir, work / "instances", shards=SHARDS, rows_per_shard=ROWS_PER_SHARD)
    index = build_index(cluster, world_dir / "passages", work / "index", work)
    return AugmentInputs(instances, world_dir / "passages", index, tiny_model_dir)


@needs_netns
def test_augmentation_survives_a_dead_node_a_partitioned_node_and_a_killed_driver(cluster, augment_inputs, tmp_path):
    reference = augment_clean(cluster, augment_inputs, tmp_path / "reference", tmp_path)
    assert reference["lost"] == reference["duplicates"] == reference["unexpected"] == 0
    assert reference["rows_out"] == reference["rows_in"] == SHARDS * ROWS_PER_SHARD
    expected = shard_bytes(tmp_path / "reference")

    for how in ("kill", "cut"):
        out = tmp_path / f"node_{how}"
        rec = augment_with_node_fault(cluster, augment_inputs, out, tmp_path, how, reference["wall_s"])
        # the fault hit a running job, and nothing was lost or written twice
        assert rec["shards_at_fault"] < rec["total_shards"], rec
        assert (rec["lost"], rec["duplicates"], rec["unexpected"]) == (0, 0, 0), rec
        assert rec["rows_out"] == rec["rows_in"]
        assert shard_bytes(out) == expected, f"{how}: output differs from the uninterrupted run"
        assert len(cluster.nodes) == 3  # the node was replaced for the next run

    out = tmp_path / "driver_kill"
    rec = augment_driver_kill(cluster, augment_inputs, out, tmp_path, reference["wall_s"])
    assert 1 <= rec["shards_skipped_on_rerun"] < rec["total_shards"], rec
    assert (rec["lost"], rec["duplicates"]) == (0, 0), rec
    assert shard_bytes(out) == expected


@needs_netns
@pytest.mark.skipif(os.environ.get("RAYPIPE_TRAINING_FAULT_TEST") != "1",
                    reason="not yet seen to finish on a 2-core machine (a clean + a killed 3-node ZeRO-3 run "
                           "exceeded 600 s under load); opt in with RAYPIPE_TRAINING_FAULT_TEST=1")
def test_generator_training_survives_a_killed_worker_process_and_ends_where_an_uninterrupted_run_ends(
        cluster, tiny_model_dir, tmp_path):
    data = write_generator_rows(tmp_path / "d_gen", 48)  # 48 rows / 2 workers / micro 4 = 6 steps per epoch
    clean = train_clean(cluster, tiny_model_dir, data, tmp_path / "clean", tmp_path)
    rec = train_worker_kill(cluster, tiny_model_dir, data, tmp_path / "killed", tmp_path, clean["wall_s"])
    # killed after step 3 (mid-epoch); the latest checkpoint before it is step 2
    assert rec["step_at_kill"] >= 3 and rec["steps"] == 12, rec
    assert rec["resumed_from_step"] is not None and rec["resumed_from_step"] < rec["step_at_kill"], rec
    assert rec["resumed_from_step"] % 2 == 0
    # the same batches were seen from the restored state: the weights match the uninterrupted run's
    assert max_weight_difference(tmp_path / "clean", tmp_path / "killed") < 1e-4
