"""Node and process failures (issue 17): what is lost, and what it costs.

Augmentation and training run on a head and two workers, each in its own network namespace (as root;
`tests/cluster_nodes.py`), as a user submits them (`jobs/*.py` as the driver); the Serve app runs on
one local Ray instance with a client loading it over HTTP. Each fault is injected from outside once
the run has reached a point it can observe (`tests/cluster_faults.py`, shared with the tests), and
recorded in `faults`, one object per fault: `fault` (what was killed or cut off, and when), `rows_in`,
`rows_out`, `lost`, `duplicates`, `recovery_s`, `client_errors`, `in_flight_at_kill` (null where a
field does not apply), plus the details of each scenario.

- augment, a worker node SIGKILLed whole after the first shard is written
- augment, a worker node cut off (its link taken down) after the first shard
- augment, the driver SIGKILLed after the first shard, then the same command rerun
- train generator (ZeRO-3, 2 workers on 2 nodes), one Ray Train worker process SIGKILLed once the first
  checkpoint is registered; Ray Train restarts the group from it (`max_failures=1`)
- serve across the cluster (`raypipe serve` as the driver in the head's namespace, every deployment
  twice on different nodes): the worker node hosting a Generator replica SIGKILLed whole under a
  closed-loop load of 4 clients; `restored_s` is the time until Serve runs both replicas again
- serve on one local Ray instance: the Generator replica process SIGKILLed under the same load

`recovery_s`: for augment and training, the time from the fault to the end of the job (a killed
driver's rerun included), less the same job's uninterrupted run, on the same cluster in the same run,
from the same point (its first shard written, its first checkpoint registered) to its end; for serving,
from the kill to the first answer to a request sent after it. Node-death detection and the retry
backoff of requests to an unreachable node are shortened and one-CPU nodes keep their idle worker
processes (`FAST_FAILURE_DETECTION`, `SMALL_NODES` in tests/cluster_nodes.py, recorded in the JSON):
with Ray's defaults a dead node takes about 30 s longer to be declared dead, and a partitioned node
can stall a job for minutes (a worker-lease request sent to it is retried, not failed).

    python -m benchmarks.faults            # every fault above, 12 shards x 10 instances
    python -m benchmarks.faults --quick    # the one-node serving fault only (the cluster faults are
                                           # tests/integration/test_cluster_faults.py, same helpers)
"""

from __future__ import annotations

import argparse
import os
import secrets
import socket
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._common import timer, write_result

APP = "faults"
TOKEN_ENV = "RAYPIPE_FAULTS_BENCH_TOKEN"


def world_and_model(work: Path, instances: int) -> tuple[Path, Path]:
    """A small synthetic world and an untrained tiny model: the critic of augmentation, the base model of
    training and the served generator (what is measured is the bookkeeping under faults, not quality)."""
    from raypipe.data.world import synthesize
    from raypipe.models import build_tiny_model, world_texts
    from raypipe.settings.data import WorldConfig
    from raypipe.settings.models import TinyModelConfig

    world = work / "world"
    synthesize(WorldConfig(out_dir=str(world), instances=instances, seed=7, eval_instances=10,
                           shard_size=max(instances, 1)))
    model = work / "tiny_model"
    cfg = TinyModelConfig(out_dir=str(model), vocab_size=512, hidden_size=64, intermediate_size=128,
                          num_hidden_layers=2, num_attention_heads=4, max_position_embeddings=512,
                          tokenizer_train_texts=1000)
    build_tiny_model(cfg, world_texts(world, limit=cfg.tokenizer_train_texts), model)
    return world, model


def _cluster_faults(work: Path, world: Path, model: Path, index: Any, shards: int, rows: int,
                    payload: dict[str, Any]) -> list[dict[str, Any]]:
    from tests.cluster_faults import (
        TRAIN_ROWS,
        AugmentInputs,
        augment_clean,
        augment_driver_kill,
        augment_with_node_fault,
        max_weight_difference,
        on_head,
        serve_node_kill,
        shard_bytes,
        train_clean,
        train_worker_kill,
        write_generator_rows,
        write_instance_shards,
    )
    from tests.cluster_nodes import NetnsCluster

    faults = []
    with NetnsCluster(work / "cluster", workers=2) as cluster:
        instances = write_instance_shards(world, work / "instances", shards, rows)
        inputs = AugmentInputs(instances, Path(index.index.passages), Path(index.index.out_dir), model)
        reference = augment_clean(on_head(cluster), inputs, work / "reference", work)
        payload["augment_reference"] = reference
        faults.append(augment_with_node_fault(cluster, inputs, work / "node_kill", work, "kill", reference))
        faults.append(augment_with_node_fault(cluster, inputs, work / "node_cut", work, "cut", reference))
        faults.append(augment_driver_kill(cluster, inputs, work / "driver_kill", work, reference))
        expected = shard_bytes(work / "reference")
        for rec, out in zip(faults, ("node_kill", "node_cut", "driver_kill"), strict=True):
            rec["same_bytes_as_uninterrupted"] = shard_bytes(work / out) == expected
        data = write_generator_rows(work / "d_gen", TRAIN_ROWS)
        clean = train_clean(on_head(cluster), model, data, work / "train_ref", work)
        payload["train_reference"] = clean
        killed = train_worker_kill(cluster, model, data, work / "train_kill", work, clean)
        killed["max_weight_diff_vs_uninterrupted"] = max_weight_difference(work / "train_ref", work / "train_kill")
        faults.append(killed)
        cluster.wait_nodes()
        faults.append(serve_node_kill(cluster, model, index, work))
    return faults


def _serve_fault(model: Path, index: Any) -> dict[str, Any]:
    """The Serve app of the tiny model on a local Ray instance (one node: a replica's death is a process
    death, the same on any node), its Generator replica killed under load."""
    import ray
    from ray import serve

    from raypipe.config import MethodsConfig, RaypipeConfig, ServeConfig
    from raypipe.jobs.serve import serve_sections
    from raypipe.methods.selfrag.settings import SelfRAGSettings
    from raypipe.serving.app import start_app
    from raypipe.settings.models import EngineConfig
    from tests.cluster_faults import own_processes, serve_replica_kill

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    token = secrets.token_hex(8)
    os.environ[TOKEN_ENV] = token
    cfg = RaypipeConfig(serve=ServeConfig(port=port, app_name=APP, generator=str(model), auth_token_env=TOKEN_ENV,
                                          min_replicas=2, max_replicas=2, max_ongoing_requests=2),
                        engine=EngineConfig(kind="hf"), retrieval=index,
                        methods=MethodsConfig(selfrag=SelfRAGSettings(beam_width=2, max_depth=2, max_new_tokens=8)))
    try:
        url = start_app(serve_sections(cfg))
        rec = serve_replica_kill(url, {"Authorization": f"Bearer {token}"}, APP, own_processes, clients=4,
                                 timeout_s=60)
        rec["running_replicas_after"] = serve.status().applications[APP].deployments["Generator"].replica_states.get(
            "RUNNING", 0)
        return rec
    finally:
        serve.shutdown()
        ray.shutdown()
        os.environ.pop(TOKEN_ENV, None)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.faults", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="the serving fault only: `make test` runs the cluster faults in test_cluster_faults.py")
    args = parser.parse_args()

    from raypipe.data.io import list_data_files
    from tests.cluster_faults import flat_index
    from tests.cluster_nodes import FAST_FAILURE_DETECTION, SMALL_NODES, netns_unavailable

    shards, rows = 12, 10
    payload: dict[str, Any] = {
        "quick": args.quick, "nodes": "head + 2 workers of 1 CPU, one network namespace each (augment, train, "
        "serve across nodes); one local Ray instance (serve, replica process)", "failure_detection": FAST_FAILURE_DETECTION,
        "small_nodes": SMALL_NODES,
        "faults": []}
    faults = payload["faults"]
    why = "--quick" if args.quick else netns_unavailable()
    if why:
        payload["cluster_faults_skipped"] = why
    with tempfile.TemporaryDirectory(prefix="raypipe-faults-") as tmp, timer() as total:
        work = Path(tmp)
        world, model = world_and_model(work, shards * rows + 40)
        index = flat_index(list_data_files(world / "passages")[0], work / "index")
        if not why:
            faults += _cluster_faults(work, world, model, index, shards, rows, payload)
        faults.append(_serve_fault(model, index))
    payload["total_s"] = round(total.seconds, 1)
    path = write_result("faults", payload)
    worst = max((f["lost"] or 0) + (f["duplicates"] or 0) for f in faults)
    serving = faults[-1]
    print(f"faults: {len(faults)} faults injected{f' ({why}: serving only)' if why else ''}, rows lost or "
          f"duplicated at worst {worst}, recovery_s {[f['recovery_s'] for f in faults]}, serving "
          f"{serving['client_errors']} client errors of {serving['in_flight_at_kill']} in flight -> {path}")


if __name__ == "__main__":
    main()
