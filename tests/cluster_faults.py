"""Fault scenarios, shared by the tests that assert on them (tests/integration/test_cluster_faults.py,
test_training.py, test_benchmarks_quick.py) and benchmarks/faults.py, which records them; the
serving pieces are benchmarks/soak.py's too.

The augmentation and training scenarios run the real job entry scripts (`jobs/*.py`) as drivers inside
the head's namespace of a `NetnsCluster`; the serving scenario loads a running Serve app over HTTP.
Each injects its fault from outside (SIGKILL of a node's processes, its link taken down, SIGKILL of one
worker, replica or driver process) when the run has reached a point it can observe (a shard written, a
checkpoint registered, answers received), and returns one record in the shape of
benchmarks/results/faults.json: `fault`, `rows_in`, `rows_out`, `lost`, `duplicates`, `recovery_s`,
`client_errors`, `in_flight_at_kill` (None where a field does not apply), plus what the assertions need.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import psutil
import pyarrow as pa
import pyarrow.parquet as pq
import yaml

from raypipe.settings.retrieval import RetrievalConfig
from tests.cluster_nodes import (
    BIN,
    ROOT,
    SECTION_DEFAULTS,
    SMALL_NODES,
    NetnsCluster,
    base_env,
    kill_all,
    netns_pids,
    process_titles,
)

if TYPE_CHECKING:
    from raypipe.config import RaypipeConfig

PY = sys.executable
RUN_TIMEOUT_S = 600

#: starts a driver: (argv, log file) -> its process
Launch = Callable[[list[str], Path], subprocess.Popen]


def on_head(cluster: NetnsCluster) -> Launch:
    """Drivers inside the head's namespace of `cluster`."""
    return lambda argv, log: cluster.popen(0, argv, log)


def on_instance(address: str) -> Launch:
    """Drivers of the Ray instance at `address` on this machine (a test session's own, one node)."""
    def launch(argv: list[str], log: Path) -> subprocess.Popen:
        return subprocess.Popen(argv, env=base_env(RAY_ADDRESS=address, **SMALL_NODES), cwd=ROOT, stdout=log.open("w"),
                                stderr=subprocess.STDOUT, start_new_session=True)
    return launch


def _recovery_s(after_fault_s: float, reference: dict[str, Any] | None, key: str) -> float | None:
    """A faulted run's time from its fault to its end, less the reference's from the same point (None
    without a reference: when it ran at the same time, the difference would measure the contention)."""
    return round(after_fault_s - reference[key], 2) if reference else None


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
    #: rows per batch through the actors; larger at corpus scale, where per-batch overhead would dominate
    batch_size: int = 4
    #: how long a run may take before it counts as stuck
    timeout_s: float = RUN_TIMEOUT_S

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


def augment_argv(inputs: AugmentInputs, out: Path) -> list[str]:
    """The augment job with sampling off, so every input id must come out exactly once."""
    return [PY, "jobs/augment.py", SECTION_DEFAULTS, f"--set=augment.instances={inputs.instances}",
            f"--set=augment.critic={inputs.critic}", "--set=augment.critic_engine=hf", f"--set=augment.out_dir={out}",
            f"--set=retrieval.index.passages={inputs.passages}", f"--set=retrieval.index.out_dir={inputs.index}",
            f"--set=augment.batch_size={inputs.batch_size}", "--set=augment.sampling.drop_no_retrieval=0",
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


def augment_clean(launch: Launch, inputs: AugmentInputs, out: Path, work: Path, at_shards: int = 1) -> dict[str, Any]:
    """The uninterrupted run. `after_fault_point_s`, its time from `at_shards` shards written (where the
    faulted runs' faults land) to the end, is the baseline of their `recovery_s` (the start-up before
    that point varies by more than a fault costs on a loaded machine)."""
    log = work / f"{out.name}.log"
    start = time.time()
    proc = launch(augment_argv(inputs, out), log)
    point = wait_for(lambda: shards_written(out) >= at_shards and time.time(), inputs.timeout_s,
                     f"{at_shards} output shard(s)", proc, log, poll_s=0.05)
    end = finish(proc, log, inputs.timeout_s)
    return record("none (reference run)", wall_s=round(end - start, 2), after_fault_point_s=round(end - point, 2),
                  at_shards=at_shards, **count_rows(inputs, out))


def augment_with_node_fault(cluster: NetnsCluster, inputs: AugmentInputs, out: Path, work: Path, how: str,
                            reference: dict[str, Any] | None, at_shards: int = 1) -> dict[str, Any]:
    """Kill (`how="kill"`) or cut off (`how="cut"`) a worker node that hosts an augment actor, once
    `at_shards` output shards are written, and let the job finish. `recovery_s`: the time from the fault
    to the end, less the same-run reference's from the same point to its end (None without one). The
    node is replaced afterwards (in the background: `cluster.wait_nodes()` waits for it) so
    that a next scenario has the same cluster."""
    log = work / f"{out.name}.log"
    start = time.time()
    proc = cluster.popen(0, augment_argv(inputs, out), log)
    wait_for(lambda: shards_written(out) >= at_shards, inputs.timeout_s, f"{at_shards} output shard(s)", proc, log,
             poll_s=0.05)
    cluster.wait_nodes()  # a node the previous scenario replaced
    hosts = workers_hosting(cluster, "MapWorker")
    if not hosts:
        raise RuntimeError("no worker node hosts an augment actor: the fault would hit nothing")
    victim = hosts[-1]
    shards_at_fault = shards_written(out)
    fault_at = cluster.nodes[victim].kill() if how == "kill" else cluster.cut(victim)
    end = finish(proc, log, inputs.timeout_s)
    counts = count_rows(inputs, out)
    cluster.restart_worker(victim, wait=False)  # it starts while the next scenario does
    total_shards = len(list(inputs.instances.glob("*.parquet")))
    what = "SIGKILL of every process" if how == "kill" else "link down (network partition)"
    return record(f"augment: worker node {victim} ({what}) after {shards_at_fault}/{total_shards} shards written",
                  recovery_s=_recovery_s(end - fault_at, reference, "after_fault_point_s"),
                  wall_s=round(end - start, 2), fault_at_s=round(fault_at - start, 2), shards_at_fault=shards_at_fault,
                  total_shards=total_shards, **counts)


def augment_driver_kill(cluster: NetnsCluster, inputs: AugmentInputs, out: Path, work: Path,
                        reference: dict[str, Any] | None) -> dict[str, Any]:
    """SIGKILL the driver after its first shard, then rerun the same command to completion. `recovery_s`:
    from the kill to the rerun's end (its start-up included), less the reference's time after its first
    shard."""
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
                  recovery_s=_recovery_s(end - killed_at, reference, "after_fault_point_s"),
                  wall_s=round(end - start, 2), rerun_s=round(end - rerun_start, 2), fault_at_s=round(killed_at - start, 2),
                  shards_at_fault=shards_at_kill, shards_skipped_on_rerun=stats.get("shards_skipped"),
                  total_shards=total_shards, **count_rows(inputs, out))


# --- training -------------------------------------------------------------------------------------

def write_generator_rows(folder: Path, n: int) -> Path:
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


#: D_gen rows of the training scenario: 48 rows / 2 workers / micro-batch 4 = 6 optimizer steps, one epoch
TRAIN_ROWS, TRAIN_STEPS, TRAIN_CHECKPOINT_EVERY = 48, 6, 2


def train_argv(base_model: Path, data: Path, out: Path, max_failures: int = 1) -> list[str]:
    """Generator training (Eq. 2) under ZeRO-3 on 2 workers of one CPU each: the nodes have one CPU
    each, so the two workers are on two nodes. One epoch, a checkpoint every 2 optimizer steps."""
    stages = "[{name: main, lr: 1.0e-3, mask: [prompt, paragraph], epochs: 1}]"
    return [PY, "jobs/train.py", "generator", SECTION_DEFAULTS, f"--set=training.generator.base_model={base_model}",
            f"--set=training.generator.data={data}", f"--set=training.generator.out_dir={out}",
            f"--set=training.generator.stages={stages}", "--set=training.generator.num_workers=2",
            "--set=training.generator.cpus_per_worker=1", "--set=training.generator.micro_batch_size=4",
            "--set=training.generator.grad_accum=1", "--set=training.generator.max_length=128",
            "--set=training.generator.zero_stage=3",
            f"--set=training.generator.checkpoint_every={TRAIN_CHECKPOINT_EVERY}",
            "--set=training.generator.log_every=1", f"--set=training.generator.max_failures={max_failures}"]


def metrics_by_attempt(log: Path) -> dict[int, dict[int, dict[str, Any]]]:
    """The per-step records of a metrics log, per attempt (keyed by the step it started from: 0, then
    the checkpoint each restart resumed at)."""
    attempts: dict[int, dict[int, dict[str, Any]]] = {}
    if log.exists():
        for line in log.read_text().splitlines():
            if line.strip():
                rec = json.loads(line)
                attempts.setdefault(rec["attempt_start_step"], {})[rec["step"]] = rec
    return attempts


def last_step(log: Path) -> int:
    return max((step for steps in metrics_by_attempt(log).values() for step in steps), default=0)


def own_processes() -> dict[int, str]:
    """pid -> title of this process's descendants: a Ray instance started here by `ray.init` (its raylet
    and the workers the raylet started) and nothing else on the machine."""
    return process_titles([child.pid for child in psutil.Process().children(recursive=True)])


def cluster_processes(cluster: NetnsCluster, workers_only: bool = True) -> dict[int, str]:
    """pid -> "[node i] title" of the cluster's processes (on its worker nodes only, by default)."""
    return {pid: f"[node {i}] {title}" for i, node in cluster.nodes.items() if i > 0 or not workers_only
            for pid, title in node.processes().items()}


def registered_checkpoint_step(run_storage: Path) -> int:
    """The optimizer step of the latest checkpoint Ray Train has registered for a run (0: none yet): the
    one a restarted worker group resumes from. Ray Train's controller registers a reported checkpoint
    when it next polls the workers (every 2 s), so a worker killed right after reporting one may
    restart from the one before."""
    try:
        snapshot = json.loads((run_storage / "checkpoint_manager_snapshot.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):  # none yet, or caught mid-write
        return 0
    return ((snapshot.get("latest_checkpoint_result") or {}).get("metrics") or {}).get("step", 0)


@dataclass
class Kill:
    pid: int
    title: str
    at: float             # time.time() of the SIGKILL
    step_logged: int      # the last optimizer step in the metrics log when it was sent
    checkpoint_step: int  # the latest registered checkpoint then


def kill_train_worker_after_checkpoint(out: Path, stage: str, processes: Callable[[], dict[int, str]],
                                       proc: subprocess.Popen | None = None, log: Path | None = None,
                                       timeout_s: float = RUN_TIMEOUT_S) -> Kill:
    """SIGKILL one Ray Train worker process of the run writing to `out` as soon as Ray Train has
    registered the stage's first checkpoint: mid-epoch, with a checkpoint to resume from. The victim is
    chosen once a first step is logged (the group's processes are up by then), so the kill itself is
    one poll away from the registration."""
    metrics_log, storage = out / "logs" / f"{stage}.metrics.jsonl", out / "checkpoints" / stage
    wait_for(lambda: last_step(metrics_log) >= 1, timeout_s, "a first optimizer step", proc, log, poll_s=0.1)
    victims = sorted((pid, title) for pid, title in processes().items() if "RayTrainWorker" in title)
    if not victims:
        raise RuntimeError("no Ray Train worker process found")
    checkpoint = wait_for(lambda: registered_checkpoint_step(storage), timeout_s, "a registered checkpoint", proc,
                          log, poll_s=0.02)
    at = time.time()
    kill_tree(victims[-1][0])
    return Kill(*victims[-1], at, last_step(metrics_log), checkpoint)


def train_clean(launch: Launch, base_model: Path, data: Path, out: Path, work: Path) -> dict[str, Any]:
    """The uninterrupted run; `after_first_checkpoint_s` (from its first registered checkpoint to its end)
    is the baseline of the faulted run's `recovery_s`."""
    log = work / f"{out.name}.log"
    start = time.time()
    proc = launch(train_argv(base_model, data, out), log)
    first = wait_for(lambda: registered_checkpoint_step(out / "checkpoints" / "main") and time.time(), RUN_TIMEOUT_S,
                     "a registered checkpoint", proc, log, poll_s=0.05)
    end = finish(proc, log)
    return record("none (reference run)", wall_s=round(end - start, 2), after_first_checkpoint_s=round(end - first, 2))


def train_worker_kill(cluster: NetnsCluster, base_model: Path, data: Path, out: Path, work: Path,
                      reference: dict[str, Any] | None) -> dict[str, Any]:
    """SIGKILL one Ray Train worker process (on a worker node) once its first checkpoint is registered:
    Ray Train restarts the group from the latest checkpoint (`max_failures=1`), which restores the
    weights, the optimizer, the lr schedule and the data position. `recovery_s`: from the kill to the
    end, less the reference's time from its first registered checkpoint to its end."""
    log = work / f"{out.name}.log"
    cluster.wait_nodes()  # a node a previous scenario replaced
    start = time.time()
    proc = cluster.popen(0, train_argv(base_model, data, out), log)
    kill = kill_train_worker_after_checkpoint(out, "main", lambda: cluster_processes(cluster), proc, log)
    end = finish(proc, log)
    stage = json.loads((out / "train_stats.json").read_text())["summary"]["stage main"]
    return record(f"train generator (ZeRO-3, 2 workers on 2 nodes): SIGKILL of a Ray Train worker process "
                  f"({kill.title.split(']')[0][1:]}) after step {kill.step_logged} of {TRAIN_STEPS}, checkpoint of step "
                  f"{kill.checkpoint_step} registered",
                  recovery_s=_recovery_s(end - kill.at, reference, "after_first_checkpoint_s"),
                  wall_s=round(end - start, 2), fault_at_s=round(kill.at - start, 2), step_at_kill=kill.step_logged,
                  checkpoint_at_kill=kill.checkpoint_step, resumed_from_step=stage.get("resumed_from_step"),
                  steps=stage.get("steps"))


def max_weight_difference(a: Path, b: Path) -> float:
    """Largest absolute difference between two exported models' tensors (same names required)."""
    from safetensors.torch import load_file

    wa, wb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    if set(wa) != set(wb):
        raise AssertionError(f"different tensors: {sorted(set(wa) ^ set(wb))[:5]}")
    return max(float((wa[k].float() - wb[k].float()).abs().max()) for k in wa)


# --- retrieval index -------------------------------------------------------------------------------

def flat_index(source: Path, out: Path, top_k: int = 2) -> RetrievalConfig:
    """A Flat faiss index of one passage file, embedded and assembled in this process (MiniLM, a few
    seconds): the index the augment actors and the Serve app's Retrieval load."""
    from raypipe.retrieval.build import assemble_index
    from raypipe.retrieval.embed import ShardEmbedder, shard_path, source_stamp
    from raypipe.settings.retrieval import EncoderConfig, IndexConfig

    embedder = ShardEmbedder(EncoderConfig(), batch_size=64, threads=1, rejects_dir=str(out / "rejects"))
    embedder.embed_file(source, shard_path(out, source), source_stamp(source, EncoderConfig()))
    index = IndexConfig(passages=str(source), out_dir=str(out), factory="Flat")
    assemble_index(out, [source], True, index)
    return RetrievalConfig(index=index, top_k=top_k)


# --- serving ----------------------------------------------------------------------------------------

@dataclass
class Reply:
    start: float         # time.time() when sent
    end: float           # ... and when answered (or failed)
    status: int | None   # HTTP status, None when no answer came (timeout, connection error)
    error: str = ""


def replica_pids(processes: dict[int, str], app: str, deployment: str) -> list[int]:
    """The processes of a Serve deployment's replicas (their title names app and deployment)."""
    return sorted(pid for pid, title in processes.items() if f"ServeReplica:{app}:{deployment}" in title)


#: kills one of a deployment's replicas, given their pids and the deployment's name: returns the
#: victim's pid and what was killed
ReplicaKill = Callable[[list[int], str], tuple[int, str]]


def kill_replica_process(victims: list[int], deployment: str) -> tuple[int, str]:
    kill_tree(victims[0])
    return victims[0], f"the {deployment} replica's process"


def serve_replica_kill(url: str, headers: dict[str, str], app: str, processes: Callable[[], dict[int, str]],
                       deployment: str = "Generator", clients: int = 4, before_kill: int = 6,
                       after_recovery: int = 8, timeout_s: float = 60.0, max_requests: int = 200,
                       deadline_s: float = 300.0, body: dict[str, Any] | None = None,
                       kill_one: ReplicaKill = kill_replica_process) -> dict[str, Any]:
    """Closed-loop load from `clients` clients (each sends its next request when the last is answered,
    every request with a `timeout_s` client timeout); once `before_kill` requests have succeeded, SIGKILL
    one of the deployment's replicas (`kill_one`: its process by default, or the node that hosts it). The
    load goes on until `after_recovery` requests sent after the recovery have been answered (or
    `max_requests` were sent, or `deadline_s` passed). `recovery_s`: from the kill to the first answer
    to a request sent after it, i.e. until a replica served again; `in_flight_at_kill`: requests sent
    before the kill and answered after it; `replaced`: the deployment's replica processes at the end
    are new ones or survivors (the victim's pid is not among them)."""
    import asyncio

    import httpx

    body = body or {"instruction": "Tell me about the painter.", "mode": "never", "max_tokens": 8}
    replies: list[Reply] = []
    kill: dict[str, Any] = {}
    deadline = time.time() + deadline_s

    def ok_after(t: float) -> list[Reply]:
        return [r for r in replies if r.start > t and r.status == 200]

    def recovered_at() -> float | None:
        if "at" not in kill:
            return None
        return min((r.end for r in ok_after(kill["at"])), default=None)

    def done() -> bool:
        back = recovered_at()
        return (len(replies) >= max_requests or time.time() > deadline
                or (back is not None and len(ok_after(back)) >= after_recovery))

    async def client(c: httpx.AsyncClient) -> None:
        while not done():
            start = time.time()
            try:
                r = await c.post("/v1/generate", json=body)
                replies.append(Reply(start, time.time(), r.status_code, "" if r.status_code == 200 else r.text[:200]))
            except httpx.HTTPError as exc:  # a timeout or a dropped connection: no answer
                replies.append(Reply(start, time.time(), None, f"{type(exc).__name__}: {exc}"[:200]))
            if "at" not in kill and sum(r.status == 200 for r in replies) >= before_kill:
                victims = replica_pids(processes(), app, deployment)
                if not victims:
                    raise RuntimeError(f"no {deployment} replica process of app {app!r} found")
                at = time.time()
                pid, what = kill_one(victims, deployment)
                kill.update(at=at, pid=pid, what=what, replicas=len(victims))

    async def run() -> None:
        limits = httpx.Limits(max_connections=clients + 2)
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=timeout_s, limits=limits) as c:
            await asyncio.gather(*(client(c) for _ in range(clients)))

    asyncio.run(run())
    if "at" not in kill:
        raise RuntimeError(f"{before_kill} answers never came: {sorted({r.error for r in replies})[:3]}")
    at, back = kill["at"], recovered_at()
    replacements = replica_pids(processes(), app, deployment)
    failed = [r for r in replies if r.status != 200]
    in_flight = [r for r in replies if r.start < at < r.end]
    return record(f"serve: SIGKILL of {kill['what']} ({kill['replicas']} {deployment} replica(s) running) under "
                  f"a closed-loop load of {clients} clients, after {before_kill} answers",
                  recovery_s=round(back - at, 2) if back else None, client_errors=len(failed),
                  in_flight_at_kill=len(in_flight), requests=len(replies),
                  failed_in_flight_at_kill=sum(r.start < at < r.end for r in failed),
                  failed_sent_after_kill=sum(r.start > at for r in failed),
                  answered_after_recovery=len(ok_after(back)) if back else 0,
                  max_latency_s=round(max(r.end - r.start for r in replies), 2), timeout_s=timeout_s,
                  victim_pid=kill["pid"], killed_at=at, replicas=kill["replicas"], replica_pids_after=replacements,
                  replaced=bool(replacements) and kill["pid"] not in replacements,
                  errors=sorted({r.error for r in failed})[:5])


# --- serving on the cluster ------------------------------------------------------------------------

NODE_FAULT_APP = "faults_node"
NODE_FAULT_PORT = 8000  # the head's namespace is the cluster's own: nothing else listens there
NODE_FAULT_TOKEN_ENV = "RAYPIPE_FAULTS_NODE_TOKEN"
#: every deployment with two replicas on different nodes, in CPU shares small enough that the two
#: nodes left after a worker's death hold them all
NODE_FAULT_REPLICAS = 2


def namespace_processes(namespaces: dict[int, str]) -> dict[int, str]:
    """pid -> "[node i] title" of every process in these network namespaces: the cluster's processes
    as a client inside its network sees them, without the `NetnsCluster` object."""
    return {pid: f"[node {i}] {title}" for i, ns in namespaces.items()
            for pid, title in process_titles(netns_pids(ns)).items()}


def kill_hosting_worker(namespaces: dict[int, str], killed: dict[str, Any]) -> ReplicaKill:
    """A `ReplicaKill` that SIGKILLs every process of the worker node (index > 0) hosting one of the
    replicas, as a machine dies; the node's index goes into `killed["node"]`."""
    def kill_one(victims: list[int], deployment: str) -> tuple[int, str]:
        for i, ns in sorted(namespaces.items()):
            if i == 0:
                continue
            pids = netns_pids(ns)
            hosted = [v for v in victims if v in pids]
            if hosted:
                kill_all(pids, signal.SIGKILL)
                killed["node"] = i
                return hosted[0], f"worker node {i} (every process), which hosted a {deployment} replica"
        raise RuntimeError(f"no worker node hosts one of the replicas {victims}: the fault would hit nothing")
    return kill_one


def serve_node_kill_client(url: str, token: str, namespaces: dict[int, str], restore_timeout_s: float = 180) -> dict:
    """The client side of `serve_node_kill`, run inside the head's namespace: wait until every
    Generator replica runs, load the app, SIGKILL a worker node hosting one, and wait until Serve has
    the replicas it should again (`restored_s`: from the kill)."""
    def generators() -> list[int]:
        return replica_pids(namespace_processes(namespaces), NODE_FAULT_APP, "Generator")

    wait_for(lambda: len(generators()) == NODE_FAULT_REPLICAS, restore_timeout_s, "the Generator replicas")
    wait_for(lambda: healthy(url), restore_timeout_s, "a healthy app")
    killed: dict[str, Any] = {}
    rec = serve_replica_kill(url, {"Authorization": f"Bearer {token}"}, NODE_FAULT_APP,
                             lambda: namespace_processes(namespaces), kill_one=kill_hosting_worker(namespaces, killed),
                             timeout_s=60)
    victim = rec["victim_pid"]
    back = wait_for(lambda: (pids := generators()) and len(pids) == NODE_FAULT_REPLICAS and victim not in pids
                    and pids, restore_timeout_s, "the Generator replicas back to their number")
    titles = namespace_processes(namespaces)
    rec.update(victim_node=killed["node"], replica_pids_after=back, replaced=True,
               replica_nodes_after=sorted(titles[p].split("]")[0] + "]" for p in back),
               restored_s=round(time.time() - rec["killed_at"], 2))
    return rec


def healthy(url: str) -> bool:
    """Whether the app at `url` answers its liveness route (False while it cannot be reached)."""
    import httpx

    try:
        return httpx.get(f"{url}/healthz", timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def cluster_serve_config(model: Path, retrieval: RetrievalConfig, engine: str = "hf", **serve: Any) -> RaypipeConfig:
    """The Serve app of a small model across a cluster's nodes: every deployment on the request path
    twice, on different nodes (`serve.max_replicas_per_node: 1`), in CPU shares small enough that the
    two nodes left after a worker's death hold them all, listening on every address of the head's
    namespace; `serve` overrides any of it (the soak's autoscaled Decoder)."""
    from raypipe.config import MethodsConfig, RaypipeConfig, ServeConfig
    from raypipe.methods.selfrag.settings import SelfRAGSettings
    from raypipe.settings.models import EngineConfig

    n = NODE_FAULT_REPLICAS
    spread = {"host": "0.0.0.0", "port": NODE_FAULT_PORT, "app_name": NODE_FAULT_APP, "generator": str(model),
              "min_replicas": n, "max_replicas": n, "ingress_replicas": n, "generator_replicas": n,
              "retrieval_replicas": n, "max_replicas_per_node": 1, "max_ongoing_requests": 2, "ingress_cpus": 0.05,
              "decoder_cpus": 0.05, "generator_cpus": 0.2, "retrieval_cpus": 0.1}
    return RaypipeConfig(serve=ServeConfig(**{**spread, **serve}), engine=EngineConfig(kind=engine),
                         retrieval=retrieval,
                         methods=MethodsConfig(selfrag=SelfRAGSettings(beam_width=2, max_depth=2, max_new_tokens=8)))


def serve_command(cfg: RaypipeConfig, config: Path) -> list[str]:
    """`raypipe serve` (the user's command) of `cfg`, which is written to `config` for it."""
    config.write_text(yaml.safe_dump(cfg.model_dump(mode="json", exclude_unset=True)))
    return [str(BIN / "raypipe"), "serve", "-c", str(config)]


def stop_server(server: subprocess.Popen) -> None:
    """SIGTERM, on which `raypipe serve` shuts Serve down; SIGKILL of its tree if it has not within 60 s."""
    server.send_signal(signal.SIGTERM)
    try:
        server.wait(timeout=60)
    except subprocess.TimeoutExpired:
        kill_tree(server.pid)


def serve_node_kill(cluster: NetnsCluster, model: Path, retrieval: RetrievalConfig, work: Path) -> dict[str, Any]:
    """Serving across the cluster's nodes with one worker node killed under load: `raypipe serve` (the
    user's command) as the driver in the head's namespace, every deployment twice, on different nodes
    (`serve.max_replicas_per_node: 1`); a closed-loop client there too (the cluster's addresses are
    reachable only inside its network). The dead node is started again afterwards (in the background)
    for a next scenario."""
    import secrets

    cfg = cluster_serve_config(model, retrieval, auth_token_env=NODE_FAULT_TOKEN_ENV)
    token = secrets.token_hex(8)
    server_log, client_log, out = work / "serve_node_fault.server.log", work / "serve_node_fault.client.log", \
        work / "serve_node_fault.json"
    server = cluster.popen(0, serve_command(cfg, work / "serve_node_fault.yaml"), server_log,
                           **{NODE_FAULT_TOKEN_ENV: token})
    namespaces = {i: cluster.ns(i) for i in cluster.nodes}
    try:
        client = cluster.popen(0, [PY, "-m", "tests.cluster_faults", "serve-node-kill", f"http://{cluster.ip(0)}:{NODE_FAULT_PORT}",
                                   json.dumps(namespaces), str(out)], client_log, **{NODE_FAULT_TOKEN_ENV: token})
        try:
            finish(client, client_log)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}\n--- server log ---\n{server_log.read_text(errors='replace')[-4000:]}") from None
        rec = json.loads(out.read_text())
    finally:
        stop_server(server)
    cluster.restart_worker(rec["victim_node"], wait=False)
    return rec


if __name__ == "__main__" and sys.argv[1:2] == ["serve-node-kill"]:
    import os

    _url, _namespaces, _out = sys.argv[2:5]
    _rec = serve_node_kill_client(_url, os.environ[NODE_FAULT_TOKEN_ENV],
                                  {int(i): ns for i, ns in json.loads(_namespaces).items()})
    Path(_out).write_text(json.dumps(_rec))
