"""Node and process failures on a real multi-node cluster (issue 17): what is lost, and what it costs.

A head and two workers, each in its own network namespace (as root; `tests/cluster_nodes.py`), run the
job entry scripts as a user submits them. Each fault is injected from outside once the run has reached
a point it can observe, and recorded in `faults`, one object per fault: `fault` (what and when),
`rows_in`, `rows_out`, `lost`, `duplicates`, `recovery_s`, `client_errors`, `in_flight_at_kill` (null
where a field does not apply). The baseline of `recovery_s` is the same job uninterrupted, on the same
cluster, in the same run (`recovery_s` = the faulted run's extra wall time).

- augment, worker node SIGKILLed whole after the first shard is written
- augment, worker node cut off (its link taken down) after the first shard
- augment, driver SIGKILLed after the first shard, then the same command rerun
- train generator, one Ray Train worker process SIGKILLed after step 3 (a checkpoint every 2 steps)

Node-death detection is shortened (`FAST_FAILURE_DETECTION` in tests/cluster_nodes.py, recorded in
the JSON): Ray's defaults take about 30 s longer to declare a node dead.

    python benchmarks/faults.py            # every fault above, 6 shards x 12 instances
    python benchmarks/faults.py --quick    # the node kill only, 3 shards x 8 instances
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

from benchmarks._common import timer, write_result  # noqa: E402


def _world_and_critic(work: Path, instances: int) -> tuple[Path, Path]:
    """A small synthetic world and an untrained tiny model as the critic (labels arbitrary but
    well-formed: what is measured is the bookkeeping under faults, not label quality)."""
    from raypipe.config import TinyModelConfig, WorldConfig
    from raypipe.data.world import synthesize
    from raypipe.models import build_tiny_model, world_texts

    world = work / "world"
    synthesize(WorldConfig(out_dir=str(world), instances=instances, seed=7, eval_instances=10,
                           shard_size=max(instances, 1)))
    model = work / "tiny_model"
    cfg = TinyModelConfig(out_dir=str(model), vocab_size=512, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=512,
                          tokenizer_train_texts=1000)
    build_tiny_model(cfg, world_texts(world, limit=cfg.tokenizer_train_texts), model)
    return world, model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="the node kill only, 3 shards x 8 instances")
    args = parser.parse_args()

    from cluster_faults import (
        AugmentInputs,
        augment_clean,
        augment_driver_kill,
        augment_with_node_fault,
        build_index,
        max_weight_difference,
        train_clean,
        train_worker_kill,
        write_instance_shards,
    )
    from cluster_nodes import FAST_FAILURE_DETECTION, NetnsCluster, netns_unavailable

    shards, rows = (3, 8) if args.quick else (6, 12)
    payload = {"quick": args.quick, "nodes": "head + 2 workers, one network namespace each",
               "failure_detection": FAST_FAILURE_DETECTION, "faults": []}
    why = netns_unavailable()
    if why:
        payload["skipped"] = why
        write_result("faults", payload)
        print(f"faults: skipped ({why})")
        return

    faults = payload["faults"]
    with tempfile.TemporaryDirectory(prefix="raypipe-faults-") as tmp, timer() as total:
        work = Path(tmp)
        world, critic = _world_and_critic(work, shards * rows + 40)
        with NetnsCluster(work / "cluster", workers=2) as cluster:
            instances = write_instance_shards(world, work / "instances", shards, rows)
            index = build_index(cluster, world / "passages", work / "index", work)
            inputs = AugmentInputs(instances, world / "passages", index, critic)
            reference = augment_clean(cluster, inputs, work / "reference", work)
            payload["augment_reference_wall_s"] = round(reference["wall_s"], 2)
            faults.append(augment_with_node_fault(cluster, inputs, work / "node_kill", work, "kill",
                                                  reference["wall_s"]))
            if not args.quick:
                faults.append(augment_with_node_fault(cluster, inputs, work / "node_cut", work, "cut",
                                                      reference["wall_s"]))
                faults.append(augment_driver_kill(cluster, inputs, work / "driver_kill", work, reference["wall_s"]))
                clean = train_clean(cluster, critic, work / "reference" / "data", work / "train_ref", work)
                payload["train_reference_wall_s"] = clean["wall_s"]
                killed = train_worker_kill(cluster, critic, work / "reference" / "data", work / "train_kill", work,
                                           clean["wall_s"])
                killed["max_weight_diff_vs_uninterrupted"] = max_weight_difference(work / "train_ref",
                                                                                   work / "train_kill")
                faults.append(killed)
    payload["total_s"] = round(total.seconds, 1)
    path = write_result("faults", payload)
    worst = max((f["lost"] or 0) + (f["duplicates"] or 0) for f in faults)
    print(f"faults: {len(faults)} faults injected, rows lost or duplicated at worst {worst}, recovery_s "
          f"{[f['recovery_s'] for f in faults]} -> {path}")


if __name__ == "__main__":
    main()
