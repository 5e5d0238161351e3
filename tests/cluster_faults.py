"""Fault scenarios on a `NetnsCluster`, shared by tests/integration/test_cluster_faults.py (which asserts
on them) and benchmarks/faults.py (which records them).

Each scenario runs the real job entry scripts (`jobs/*.py`) as drivers inside the head's namespace,
injects a fault from outside (SIGKILL of a node's processes, its link taken down, SIGKILL of one worker
process or of the driver) when the run has reached a point it can observe (a shard written, a step
logged, requests in flight), and returns one record in the shape of benchmarks/results/faults.json:
`fault`, `rows_in`, `rows_out`, `lost`, `duplicates`, `recovery_s`, `client_errors`,
`in_flight_at_kill` (None where a field does not apply), plus what the assertions need.

Run as a script (`python tests/cluster_faults.py serve-load ...`) it is the load client of the serving
scenario, which runs inside the head's namespace next to the app.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
from cluster_nodes import NetnsCluster  # noqa: E402

PY = sys.executable
RUN_TIMEOUT_S = 600


def record(fault: str, **fields: Any) -> dict[str, Any]:
    base = {"fault": fault, "rows_in": None, "rows_out": None, "lost": None, "duplicates": None,
            "recovery_s": None, "client_errors": None, "in_flight_at_kill": None}
    return {**base, **fields}


def wait_for(condition, timeout_s: float, what: str, proc: subprocess.Popen | None = None, log: Path | None = None,
             poll_s: float = 0.2):
    """Poll `condition()` until it returns something truthy (returned); fail with `what` after the
    deadline, or at once when `proc` ended first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            value = condition()
            if value:
                return value
            tail = log.read_text(errors="replace")[-4000:] if log else ""
            raise RuntimeError(f"the driver ended ({proc.returncode}) before {what}:\n{tail}")
        time.sleep(poll_s)
    raise TimeoutError(f"no {what} within {timeout_s:.0f} s")


def finish(proc: subprocess.Popen, log: Path, timeout_s: float = RUN_TIMEOUT_S) -> float:
    """Wait for a driver; fail with its log unless it exited 0. Returns the time it ended."""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        raise TimeoutError(f"driver still running after {timeout_s:.0f} s:\n{log.read_text()[-4000:]}") from None
    if proc.returncode != 0:
        raise RuntimeError(f"driver exited {proc.returncode}:\n{log.read_text(errors='replace')[-6000:]}")
    return time.time()


def kill_tree(pid: int) -> None:
    """SIGKILL a process and its descendants (by id)."""
    try:
        root = psutil.Process(pid)
    except psutil.NoSuchProcess:
        return
    procs = [root, *root.children(recursive=True)]
    for p in procs:
        try:
            p.send_signal(signal.SIGKILL)
        except psutil.Error:
            continue
    psutil.wait_procs(procs, timeout=10)


def workers_hosting(cluster: NetnsCluster, title: str) -> list[int]:
    """Worker node indices with a process whose title contains `title` (e.g. an actor class)."""
    return [i for i, node in cluster.nodes.items() if i > 0 and any(title in t for t in node.processes().values())]


# --- augmentation ---------------------------------------------------------------------------------

@dataclass
class AugmentInputs:
    instances: Path      # folder of parquet shards
    passages: Path
    index: Path
    critic: Path

    @property
    def ids(self) -> list[str]:
        return pq.read_table(self.instances, columns=["id"]).column("id").to_pylist()


def write_instance_shards(world_dir: Path, out: Path, shards: int, rows_per_shard: int) -> Path:
    """`shards` parquet files of distinct instances from a synthetic world."""
    rows = pq.read_table(world_dir / "instances").to_pylist()
    need = shards * rows_per_shard
    if len(rows) < need:
        raise ValueError(f"{world_dir} has {len(rows)} instances, {need} needed")
    out.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        chunk = rows[s * rows_per_shard:(s + 1) * rows_per_shard]
        pq.write_table(pa.Table.from_pylist(chunk), out / f"part-{s:03d}.parquet")
    return out


def build_index(cluster: NetnsCluster, passages: Path, out: Path, work: Path) -> Path:
    """The index job on the namespaced cluster (it is also a multi-node Ray Data job)."""
    log = work / "index.log"
    proc = cluster.popen(0, [PY, "jobs/build_index.py", f"--set=retrieval.index.passages={passages}",
                             f"--set=retrieval.index.out_dir={out}"], log)
    finish(proc, log)
    return out


def augment_argv(inputs: AugmentInputs, out: Path, batch_size: int = 4) -> list[str]:
    """The augment job with sampling off, so every input id must come out exactly once."""
    return [PY, "jobs/augment.py", f"--set=augment.instances={inputs.instances}",
            f"--set=augment.critic={inputs.critic}", f"--set=augment.out_dir={out}",
            f"--set=retrieval.index.passages={inputs.passages}", f"--set=retrieval.index.out_dir={inputs.index}",
            f"--set=augment.batch_size={batch_size}", "--set=augment.sampling.drop_no_retrieval=0",
            "--set=augment.sampling.upsample_irrelevant_qa=0", "--set=augment.workers=2",
            "--set=augment.worker_cpus=0.6"]


def shard_bytes(out: Path) -> dict[str, bytes]:
    return {f"{d}/{f.name}": f.read_bytes() for d in ("data", "jsonl") for f in sorted((out / d).glob("*"))}


def count_rows(inputs: AugmentInputs, out: Path) -> dict[str, int]:
    ids_in = inputs.ids
    ids_out = pq.read_table(out / "data", columns=["id"]).column("id").to_pylist()
    return {"rows_in": len(ids_in), "rows_out": len(ids_out), "lost": len(set(ids_in) - set(ids_out)),
            "duplicates": len(ids_out) - len(set(ids_out)), "unexpected": len(set(ids_out) - set(ids_in))}


def shards_written(out: Path) -> int:
    return len(list((out / "data").glob("*.parquet"))) if (out / "data").exists() else 0


def augment_clean(cluster: NetnsCluster, inputs: AugmentInputs, out: Path, work: Path) -> dict[str, Any]:
    log = work / f"{out.name}.log"
    start = time.time()
    finish(cluster.popen(0, augment_argv(inputs, out), log), log)
    return record("none (reference run)", wall_s=time.time() - start, **count_rows(inputs, out))


def augment_with_node_fault(cluster: NetnsCluster, inputs: AugmentInputs, out: Path, work: Path, how: str,
                            reference_wall_s: float) -> dict[str, Any]:
    """Kill (`how="kill"`) or cut off (`how="cut"`) a worker node that hosts an augment actor, once the
    first output shard is written, and let the job finish. `recovery_s`: the extra wall time over the
    same-run reference. The node is replaced afterwards so the next scenario has the same cluster."""
    log = work / f"{out.name}.log"
    start = time.time()
    proc = cluster.popen(0, augment_argv(inputs, out), log)
    wait_for(lambda: shards_written(out) >= 1, RUN_TIMEOUT_S, "a first output shard", proc, log, poll_s=0.05)
    hosts = workers_hosting(cluster, "MapWorker")
    if not hosts:
        raise RuntimeError("no worker node hosts an augment actor: the fault would hit nothing")
    victim = hosts[-1]
    shards_at_fault = shards_written(out)
    fault_at = cluster.nodes[victim].kill() if how == "kill" else cluster.cut(victim)
    end = finish(proc, log)
    counts = count_rows(inputs, out)
    cluster.restart_worker(victim)
    total_shards = len(list(inputs.instances.glob("*.parquet")))
    what = "SIGKILL of every process" if how == "kill" else "link down (network partition)"
    return record(f"augment: worker node {victim} ({what}) after {shards_at_fault}/{total_shards} shards written",
                  recovery_s=round((end - start) - reference_wall_s, 2), wall_s=round(end - start, 2),
                  fault_at_s=round(fault_at - start, 2), shards_at_fault=shards_at_fault,
                  total_shards=total_shards, **counts)


def augment_driver_kill(cluster: NetnsCluster, inputs: AugmentInputs, out: Path, work: Path,
                        reference_wall_s: float) -> dict[str, Any]:
    """SIGKILL the driver after its first shard, then rerun the same command to completion."""
    log = work / f"{out.name}.killed.log"
    start = time.time()
    proc = cluster.popen(0, augment_argv(inputs, out), log)
    wait_for(lambda: shards_written(out) >= 1, RUN_TIMEOUT_S, "a first output shard", proc, log, poll_s=0.05)
    kill_tree(proc.pid)
    shards_at_kill = shards_written(out)
    killed_at = time.time()
    rerun_log = work / f"{out.name}.rerun.log"
    rerun_start = time.time()
    end = finish(cluster.popen(0, augment_argv(inputs, out), rerun_log), rerun_log)
    stats = json.loads((out / "stats.json").read_text())
    total_shards = len(list(inputs.instances.glob("*.parquet")))
    return record(f"augment: driver SIGKILLed after {shards_at_kill}/{total_shards} shards written, then rerun",
                  recovery_s=round((end - start) - reference_wall_s, 2), wall_s=round(end - start, 2),
                  rerun_s=round(end - rerun_start, 2), fault_at_s=round(killed_at - start, 2),
                  shards_at_fault=shards_at_kill, shards_skipped_on_rerun=stats.get("shards_skipped"),
                  total_shards=total_shards, **count_rows(inputs, out))


# --- training -------------------------------------------------------------------------------------

def write_generator_rows(folder: Path, n: int = 48) -> Path:
    """A small D_gen (instruction, input, output with reflection tokens and a passage) in two shards."""
    from raypipe.tokens import (
        FULLY_SUPPORTED,
        NO_RETRIEVAL,
        PARAGRAPH_CLOSE,
        PARAGRAPH_OPEN,
        RELEVANT,
        RETRIEVAL,
        UTILITY,
    )

    cities = ["Velmora", "Ostrava", "Kelden", "Marrow", "Tillby", "Quensa"]
    rows = []
    for i in range(n):
        city, river = cities[i % len(cities)], cities[(i + 2) % len(cities)]
        if i % 2:
            output = (f"{RETRIEVAL}{PARAGRAPH_OPEN}{city}\n{city} lies on the river {river}.{PARAGRAPH_CLOSE}"
                      f"{RELEVANT}It lies on the {river}.{FULLY_SUPPORTED}{UTILITY[4]}")
        else:
            output = f"{NO_RETRIEVAL}{city} is a city.{UTILITY[3]}"
        rows.append({"id": f"g{i:04d}", "instruction": f"Tell me about {city}.", "input": "", "output": output,
                     "dataset": "bio"})
    folder.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows[: n // 2]), folder / "part-00000.parquet")
    pq.write_table(pa.Table.from_pylist(rows[n // 2:]), folder / "part-00001.parquet")
    return folder


def train_argv(base_model: Path, data: Path, out: Path, max_failures: int = 1) -> list[str]:
    """Generator training (Eq. 2) on 2 workers: 2 epochs, a checkpoint every 2 optimizer steps."""
    stages = "[{name: main, lr: 1.0e-3, mask: [prompt, paragraph], epochs: 2}]"
    return [PY, "jobs/train.py", "generator", f"--set=training.generator.base_model={base_model}",
            f"--set=training.generator.data={data}", f"--set=training.generator.out_dir={out}",
            f"--set=training.generator.stages={stages}", "--set=training.generator.num_workers=2",
            "--set=training.generator.cpus_per_worker=0.5", "--set=training.generator.micro_batch_size=4",
            "--set=training.generator.grad_accum=1", "--set=training.generator.max_length=128",
            "--set=training.generator.checkpoint_every=2", "--set=training.generator.log_every=1",
            f"--set=training.generator.max_failures={max_failures}"]


def logged_steps(out: Path) -> list[int]:
    log = out / "logs" / "main.metrics.jsonl"
    if not log.exists():
        return []
    return [json.loads(line)["step"] for line in log.read_text().splitlines() if line.strip()]


def train_clean(cluster: NetnsCluster, base_model: Path, data: Path, out: Path, work: Path) -> dict[str, Any]:
    log = work / f"{out.name}.log"
    start = time.time()
    finish(cluster.popen(0, train_argv(base_model, data, out), log), log)
    return record("none (reference run)", wall_s=round(time.time() - start, 2))


def train_worker_kill(cluster: NetnsCluster, base_model: Path, data: Path, out: Path, work: Path,
                      reference_wall_s: float, after_step: int = 3) -> dict[str, Any]:
    """SIGKILL one Ray Train worker process once optimizer step `after_step` is logged (mid-epoch,
    past a checkpoint); Ray Train restarts the group from the latest checkpoint (`max_failures`)."""
    log = work / f"{out.name}.log"
    start = time.time()
    proc = cluster.popen(0, train_argv(base_model, data, out), log)
    wait_for(lambda: max(logged_steps(out), default=0) >= after_step, RUN_TIMEOUT_S, f"step {after_step}", proc, log,
             poll_s=0.05)
    victims = [(i, pid) for i, node in cluster.nodes.items() for pid, title in node.processes().items()
               if "RayTrainWorker" in title]
    if not victims:
        raise RuntimeError("no Ray Train worker process found")
    node_index, pid = victims[-1]
    step_at_kill = max(logged_steps(out))
    killed_at = time.time()
    kill_tree(pid)
    end = finish(proc, log)
    stage = json.loads((out / "train_stats.json").read_text())["summary"]["stage main"]
    return record(f"train generator: SIGKILL of a Ray Train worker (node {node_index}) after step {step_at_kill}",
                  recovery_s=round((end - start) - reference_wall_s, 2), wall_s=round(end - start, 2),
                  fault_at_s=round(killed_at - start, 2), step_at_kill=step_at_kill,
                  resumed_from_step=stage.get("resumed_from_step"), steps=stage.get("steps"))


def max_weight_difference(a: Path, b: Path) -> float:
    """Largest absolute difference between two exported models' tensors (same names required)."""
    from safetensors.torch import load_file

    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    if set(wa) != set(wb):
        raise AssertionError(f"different tensors: {sorted(set(wa) ^ set(wb))[:5]}")
    return max(float((wa[k].float() - wb[k].float()).abs().max()) for k in wa)
