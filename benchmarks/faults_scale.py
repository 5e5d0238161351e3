"""A worker node lost halfway through a large augmentation (issue 60): what it costs, and that nothing is lost.

The augment job (`jobs/augment.py` as the driver, sampling off so every input id must come out exactly
once) runs over `shards x rows` instances on a head and two workers, each in its own network namespace
(`tests/cluster_nodes.py`), the critic a tiny untrained LM (the fault path does not depend on the
critic's kind; what is measured is the bookkeeping). Each pair is the same job uninterrupted, then with
the worker node hosting an augment actor SIGKILLed whole once half the shards are written; pairs run
one after the other, so the host's drift (5-25% from run to run here) falls on both halves of a pair
alike. Ray Data reruns the lost actor's tasks on the nodes left; the killed node is started again
before the next run.

Result (`benchmarks/results/faults_scale.json`): `n_instances`, `rows_out`, `lost`, `duplicated` (summed
over the faulted runs), `identical` (every run's output bytes equal the first uninterrupted run's),
`wall_s_clean`, `wall_s_faulted` (medians), `overhead` (the median over pairs of faulted / clean - 1),
`recovery_s` (the median over pairs of the faulted run's time from the kill to its end, less the clean
run's from the same point), and `pairs` (every run's record).

    python -m benchmarks.faults_scale           # 60 shards x 500 instances, two pairs
    python -m benchmarks.faults_scale --quick   # 12 shards x 10 instances, one pair (make test)
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import tempfile
from pathlib import Path
from typing import Any

from benchmarks._common import timer, write_result

#: shards x rows per shard, pairs, batch size; the full size is the issue's >= 30,000 instances
FULL = {"shards": 60, "rows": 500, "pairs": 2, "batch_size": 64}
QUICK = {"shards": 12, "rows": 10, "pairs": 1, "batch_size": 4}
#: a full-size run takes ~15 minutes on 2 cores: an hour is stuck, not slow
RUN_TIMEOUT_S = 3600


def output_digest(out: Path) -> str:
    """sha256 over every output file's name and bytes (data/ and jsonl/), in name order: the full-size
    outputs are compared by digest, not held in memory."""
    h = hashlib.sha256()
    for folder in ("data", "jsonl"):
        for f in sorted((out / folder).glob("*")):
            h.update(f"{folder}/{f.name}\0".encode())
            with f.open("rb") as fh:
                for block in iter(lambda fh=fh: fh.read(1 << 20), b""):
                    h.update(block)
    return h.hexdigest()


def _pair(cluster: Any, inputs: Any, work: Path, i: int, at_shards: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """One uninterrupted run and one with a worker node killed at `at_shards` shards written; each run's
    output is digested and removed (a full-size output is ~100 MB)."""
    from tests.cluster_faults import augment_clean, augment_with_node_fault, on_head

    runs = []
    for kind in ("clean", "faulted"):
        out = work / f"{kind}_{i}"
        cluster.wait_nodes()  # the node the previous faulted run killed is back
        if kind == "clean":
            rec = augment_clean(on_head(cluster), inputs, out, work, at_shards)
        else:
            rec = augment_with_node_fault(cluster, inputs, out, work, "kill", runs[0], at_shards)
        rec.update(run=kind, pair=i, digest=output_digest(out))
        shutil.rmtree(out)
        runs.append(rec)
    return runs[0], runs[1]


def summarize(pairs: list[tuple[dict[str, Any], dict[str, Any]]], n_instances: int) -> dict[str, Any]:
    """The result's figures from the pairs' records (see the module docstring)."""
    clean, faulted = [c for c, _ in pairs], [f for _, f in pairs]
    reference = clean[0]["digest"]
    return {
        "n_instances": n_instances,
        "rows_out": min(r["rows_out"] for r in clean + faulted),
        "lost": sum(r["lost"] for r in faulted),
        "duplicated": sum(r["duplicates"] for r in faulted),
        "identical": all(r["digest"] == reference for r in clean + faulted),
        "wall_s_clean": round(statistics.median(r["wall_s"] for r in clean), 1),
        "wall_s_faulted": round(statistics.median(r["wall_s"] for r in faulted), 1),
        "overhead": round(statistics.median(f["wall_s"] / c["wall_s"] - 1 for c, f in pairs), 3),
        "recovery_s": round(statistics.median(f["recovery_s"] for f in faulted), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.faults_scale", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="12 shards x 10 instances, one pair (what make test runs)")
    args = parser.parse_args()

    from benchmarks.faults import world_and_model
    from raypipe.data.io import list_data_files
    from tests.cluster_faults import AugmentInputs, flat_index, write_instance_shards
    from tests.cluster_nodes import FAST_FAILURE_DETECTION, SMALL_NODES, NetnsCluster, netns_unavailable

    size = QUICK if args.quick else FULL
    n = size["shards"] * size["rows"]
    payload: dict[str, Any] = {"quick": args.quick, **{k: size[k] for k in ("shards", "rows", "batch_size")},
                               "nodes": "head + 2 workers of 1 CPU, one network namespace each",
                               "failure_detection": FAST_FAILURE_DETECTION, "small_nodes": SMALL_NODES}
    why = netns_unavailable()
    if why:  # the keys are there, empty, so that a reader sees why
        payload.update(skipped=why, **dict.fromkeys(
            ("n_instances", "rows_out", "lost", "duplicated", "identical", "wall_s_clean", "wall_s_faulted",
             "overhead", "recovery_s")), pairs=[])
        print(f"faults_scale: skipped ({why}) -> {write_result('faults_scale', payload)}")
        return
    # a short prefix: the nodes' Ray socket paths under it must fit in 107 bytes
    with tempfile.TemporaryDirectory(prefix="raypipe-fscale-") as tmp, timer() as total:
        work = Path(tmp)
        world, model = world_and_model(work, n + 40)
        index = flat_index(list_data_files(world / "passages")[0], work / "index")
        instances = write_instance_shards(world, work / "instances", size["shards"], size["rows"])
        inputs = AugmentInputs(instances, Path(index.index.passages), Path(index.index.out_dir), model,
                               batch_size=size["batch_size"], timeout_s=RUN_TIMEOUT_S)
        with NetnsCluster(work / "cluster", workers=2) as cluster:
            pairs = []
            for i in range(size["pairs"]):
                pairs.append(_pair(cluster, inputs, work, i, size["shards"] // 2))
                print(f"faults_scale: pair {i + 1}/{size['pairs']}: clean {pairs[-1][0]['wall_s']:.0f} s, "
                      f"faulted {pairs[-1][1]['wall_s']:.0f} s", flush=True)
    payload.update(summarize(pairs, n), pairs=[r for pair in pairs for r in pair], total_s=round(total.seconds, 1))
    path = write_result("faults_scale", payload)
    print(f"faults_scale: {n} instances, a worker node killed at half the shards: lost {payload['lost']}, "
          f"duplicated {payload['duplicated']}, identical {payload['identical']}, overhead "
          f"{payload['overhead']:+.1%}, recovery {payload['recovery_s']} s -> {path}")


if __name__ == "__main__":
    main()
