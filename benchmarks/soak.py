"""Serving soak (issue 60): ten minutes of open-loop load at 70% of the rate two Generator replicas
sustain, a Generator replica SIGKILLed at minute 3 and a worker node at minute 6; what the faults cost
and whether the app is the same afterwards.

Where: across a head and two worker nodes, each in its own network namespace (`NetnsCluster`, as
root), with `raypipe serve` (the user's command) as the driver in the head's namespace and every
deployment on the request path twice, one replica per node (tests/cluster_faults.py's
`cluster_serve_config`), the Decoder autoscaled by Serve between 1 and 2 replicas. The load client runs
in the head's namespace too, since the cluster's addresses are reachable only there
(benchmarks/_soak_load.py). Where namespaces cannot be made (`netns_unavailable()`), the app runs on one
local Ray instance, only the replica is killed, and the JSON says why (`node_kill_skipped`).

1. `sustained_rps_2_replicas`: closed-loop saturation of the app (after a warm-up), the same-run
   baseline the rate is set from;
2. the soak: `rate_rps` = 70% of it, open loop (a request every 1/rate s, whatever the answers do), each
   request recorded; meanwhile, every few seconds, the replicas' processes from the process list (their
   number per deployment: what Serve's autoscaler and its replacements made of them) and their memory
   (`raypipe.heap.tree_rss`: an engine's child processes count, and die with their replica); the kills
   at their minutes, from outside, with tests/cluster_faults.py's helpers;
3. the figures (benchmarks/_soak_figures.py says how each is defined): per minute requests/s, p50/p99,
   errors by kind, memory per replica and replica counts (`minutes`); `errors_outside_inflight`,
   `p99_after_over_before` (per kill and the worst), `replica_memory_growth`, and per kill its
   in-flight requests, recovery and replacement (`kills`).

Targets (the full run reports them; nothing asserts them): no error outside the requests in flight at
each kill, p99 after recovery within 20% of before, replica memory growth <= 5%.

    python -m benchmarks.soak                      # 10 x 60 s on the engine serving uses (--engine)
    python -m benchmarks.soak --quick              # 12 x 18 s, HF, the tiny model, at 50% (make test)
    python -m benchmarks.soak --plot benchmarks/results/soak.json docs/results/soak.png
"""

from __future__ import annotations

import argparse
import json
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from benchmarks._common import add_engine_option, engine_choice, timer, write_result
from benchmarks._soak_figures import Kill, Replica, Sample, summary
from benchmarks._soak_load import Request, open_loop_argv, read_requests, saturate_argv
from raypipe.settings.retrieval import RetrievalConfig
from tests.cluster_faults import (
    NODE_FAULT_PORT,
    Launch,
    cluster_serve_config,
    finish,
    kill_hosting_worker,
    kill_replica_process,
    namespace_processes,
    on_head,
    on_instance,
    own_processes,
    replica_pids,
    serve_command,
    stop_server,
    wait_for,
)
from tests.cluster_nodes import FAST_FAILURE_DETECTION, SMALL_NODES, NetnsCluster, netns_unavailable

APP = "soak"
#: the deployments on the request path, sampled; the killed one and how many replicas it has
DEPLOYMENTS = ("Ingress", "Decoder", "Generator", "Retrieval")
KILLED, KILLED_REPLICAS = "Generator", 2
#: Serve's autoscaler runs the Decoder between 1 and 2 replicas (its delays: `Plan`).
#: The Decoder's queue is unbounded: the requests a replica's outage backs up wait for the replacement
#: instead of being shed with 503 (at 70% of two replicas' rate the one left gets 140% of its share;
#: `serve.max_queued_requests`' default of 32 shed 11 requests during a 9 s outage here); one that
#: waits past the client's timeout still fails, and counts.
AUTOSCALED = {"app_name": APP, "min_replicas": 1, "max_replicas": KILLED_REPLICAS, "target_ongoing_requests": 2.0,
              "look_back_period_s": 5.0, "metrics_interval_s": 1.0, "max_ongoing_requests": 4, "max_queued_requests": -1}
#: the app's start on a loaded 2-core machine (every replica a fresh process, a model to load)
READY_S = 300.0
#: time the load client is given to start (python, httpx) before its first request is due
CLIENT_START_S = 5.0


@dataclass(frozen=True)
class Plan:
    """Sizes of one run. Both kill at minutes 3 and 6; the quick run goes on for 6 minutes after the
    node kill, not 4, since under `make test`'s load a node's replacement took up to 76 s of its 18 s
    minutes to answer what the outage queued, and its check wants answers after that."""

    minutes: int
    minute_s: float
    #: minutes of the replica kill and of the node kill
    kill_minutes: tuple[float, float]
    #: the soak's rate as a fraction of the saturation's
    rate_fraction: float
    clients: int
    warmup: int
    saturation_s: float
    sample_s: float
    timeout_s: float
    max_tokens: int
    #: the Decoder autoscaler's delays: the full run takes Ray Serve's own defaults (a replica added
    #: after 30 s over target, removed after 600 s under), a long-running deployment's; with 2 s and 15 s
    #: (near `serve.*_delay_s`' defaults, set for a demo to show autoscaling within a minute) the Decoder
    #: went 1-2-1 in six of ten minutes of a soak, each of those minutes with a p99 2-5x the others' (a
    #: replica's start takes CPU from the two cores). The quick run's minutes are 18 s: it keeps the
    #: short delays, to see the autoscaler act at all.
    upscale_delay_s: float = 30.0
    downscale_delay_s: float = 600.0


FULL = Plan(minutes=10, minute_s=60.0, kill_minutes=(3.0, 6.0), rate_fraction=0.7, clients=8, warmup=16,
            saturation_s=60.0, sample_s=2.0, timeout_s=60.0, max_tokens=8)
QUICK = Plan(minutes=12, minute_s=18.0, kill_minutes=(3.0, 6.0), rate_fraction=0.5, clients=6, warmup=6,
             saturation_s=15.0, sample_s=1.0, timeout_s=60.0, max_tokens=8, upscale_delay_s=2.0, downscale_delay_s=15.0)


@dataclass(frozen=True)
class Site:
    """Where the app runs: how a process is started where its URL is reachable, the Ray instance's
    processes (pid -> title, "[node i] ..." on a cluster), the nodes by network namespace (None: one
    local instance, no node to kill) and the ServeConfig fields the place asks for."""

    launch: Launch
    url: str
    processes: Callable[[], dict[int, str]]
    namespaces: dict[int, str] | None
    serve: dict[str, Any]
    description: str


@contextmanager
def site(work: Path, netns_missing: str | None) -> Iterator[Site]:
    """A 3-node `NetnsCluster` (closed afterwards), or a local Ray instance when namespaces are missing."""
    if netns_missing is None:
        with NetnsCluster(work / "cluster", workers=2) as cluster:
            namespaces = {i: cluster.ns(i) for i in cluster.nodes}
            yield Site(on_head(cluster), f"http://{cluster.ip(0)}:{NODE_FAULT_PORT}",
                       lambda: namespace_processes(namespaces), namespaces, {},
                       "head + 2 workers of 1 CPU, one network namespace each")
        return
    import ray

    from benchmarks.serve_load import free_port
    from raypipe.runtime import use_local_worker_env

    use_local_worker_env()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    port = free_port()
    try:
        yield Site(on_instance(ray.get_runtime_context().gcs_address), f"http://127.0.0.1:{port}", own_processes,
                   None, {"host": "127.0.0.1", "port": port, "max_replicas_per_node": None},
                   "one local Ray instance of 2 CPUs")
    finally:
        ray.shutdown()


def assets(work: Path, quick: bool) -> tuple[Path, RetrievalConfig]:
    """The served model and its index: with --quick the tiny model benchmarks/faults.py serves; else
    benchmarks/serve_load.py's full-size random model, big enough that the engine dominates a request
    (and that vLLM's CPU attention takes its head size)."""
    if not quick:
        from benchmarks.serve_load import FULL as LOAD_PLAN
        from benchmarks.serve_load import build_assets

        return build_assets(work, LOAD_PLAN)
    from benchmarks.faults import world_and_model
    from raypipe.data.io import list_data_files
    from tests.cluster_faults import flat_index

    world, model = world_and_model(work, instances=60)
    return model, flat_index(list_data_files(world / "passages")[0], work / "index")


_NODE = re.compile(r"^\[node (\d+)\]")


def node_of(title: str) -> int:
    """The node index of a process title from `namespace_processes` (0 on a local instance)."""
    found = _NODE.match(title)
    return int(found.group(1)) if found else 0


#: in a replica's process title while Serve constructs it (the actor's `__init__`, then the call that
#: runs the deployment's constructor: its engine loading); a replica that serves shows the method it
#: last ran (a request's, a health check's)
CONSTRUCTING = (".__init__", ".initialize_and_get_metadata")


def _ready(title: str) -> bool:
    return not any(step in title for step in CONSTRUCTING)


def sample(titles: dict[int, str]) -> Sample:
    from raypipe.heap import tree_rss

    return Sample(time.time(), tuple(Replica(d, pid, node_of(titles[pid]), tree_rss(pid), _ready(titles[pid]))
                                     for d in DEPLOYMENTS for pid in replica_pids(titles, APP, d)))


def kill(where: Site, kind: str, titles: dict[int, str]) -> Kill:
    """SIGKILL a Generator replica's process (`kind` "replica") or every process of the worker node
    hosting one ("node")."""
    victims = replica_pids(titles, APP, KILLED)
    if not victims:
        raise RuntimeError(f"no {KILLED} replica to kill: {sorted(set(titles.values()))[:10]}")
    at = time.time()
    if kind == "replica":
        pid, what = kill_replica_process(victims, KILLED)
        return Kill(kind, at, pid, node_of(titles[pid]), len(victims), what)
    killed: dict[str, Any] = {}
    pid, what = kill_hosting_worker(where.namespaces or {}, killed)(victims, KILLED)
    return Kill(kind, at, pid, killed["node"], len(victims), what)


def _replica_line(s: Sample) -> str:
    """The replicas of each deployment in a sample and their mean memory: the soak's progress line (its
    requests are known only when the client ends)."""
    parts = []
    for d in DEPLOYMENTS:
        rss = [r.rss for r in s.of(d)]
        parts.append(f"{d} {len(rss)}" + (f" ({sum(rss) / len(rss) / 2**20:.0f} MiB)" if rss else ""))
    return ", ".join(parts)


def soak(where: Site, plan: Plan, rate: float, work: Path) -> tuple[list[Request], list[Sample], list[Kill], float]:
    """The open-loop load from a client process while this one samples the replicas and kills at the
    plan's minutes; returns the requests, samples, kills and the load's start."""
    start = time.time() + CLIENT_START_S
    seconds = plan.minutes * plan.minute_s
    out, log = work / "soak.requests.json", work / "soak.client.log"
    client = where.launch(open_loop_argv(where.url, out, rate, start, seconds, plan.max_tokens, plan.timeout_s), log)
    kinds = ("replica", "node") if where.namespaces else ("replica",)
    due = [(start + minute * plan.minute_s, kind) for minute, kind in zip(plan.kill_minutes, kinds, strict=False)]
    samples: list[Sample] = []
    kills: list[Kill] = []
    minute = 0
    while client.poll() is None:
        titles = where.processes()
        samples.append(sample(titles))
        if due and time.time() >= due[0][0]:
            kills.append(kill(where, due.pop(0)[1], titles))
            print(f"soak: killed {kills[-1].what}", flush=True)
        if time.time() >= start + (minute + 1) * plan.minute_s and minute < plan.minutes:
            minute += 1
            print(f"soak: minute {minute}/{plan.minutes}: {_replica_line(samples[-1])}", flush=True)
        wake = min([time.time() + plan.sample_s, *(t for t, _ in due[:1])])
        time.sleep(max(0.0, wake - time.time()))
    finish(client, log, timeout_s=seconds + plan.timeout_s)
    return read_requests(out), samples, kills, start


def serve_and_soak(where: Site, plan: Plan, model: Path, retrieval: RetrievalConfig, engine: str,
                   work: Path) -> dict[str, Any]:
    """`raypipe serve` of the app, the saturation, then the soak; Serve is shut down afterwards."""
    cfg = cluster_serve_config(model, retrieval, engine, **AUTOSCALED, upscale_delay_s=plan.upscale_delay_s,
                               downscale_delay_s=plan.downscale_delay_s, **where.serve)
    server_log = work / "soak.server.log"
    server = where.launch(serve_command(cfg, work / "soak.yaml"), server_log)
    try:
        wait_for(lambda: len(replica_pids(where.processes(), APP, KILLED)) == KILLED_REPLICAS, READY_S,
                 f"the {KILLED} replicas", server, server_log)
        out, log = work / "saturation.json", work / "saturation.log"
        finish(where.launch(saturate_argv(where.url, out, plan.clients, plan.warmup, plan.saturation_s, plan.max_tokens,
                                          READY_S), log), log)
        saturation = json.loads(out.read_text())
        rate = round(plan.rate_fraction * saturation["rps"], 3)
        print(f"soak: two {KILLED} replicas sustain {saturation['rps']:g} req/s; {plan.minutes} minutes of "
              f"{plan.minute_s:g} s at {rate:g} req/s", flush=True)
        requests, samples, kills, start = soak(where, plan, rate, work)
    except (RuntimeError, TimeoutError) as exc:
        raise RuntimeError(f"{exc}\n--- server log ---\n{server_log.read_text(errors='replace')[-4000:]}") from None
    finally:
        stop_server(server)
    figures = summary(requests, samples, kills, start, plan.minute_s, plan.minutes, KILLED, KILLED_REPLICAS)
    return {"sustained_rps_2_replicas": saturation["rps"], "rate_rps": rate,
            "baseline": {"name": f"closed-loop saturation, {plan.clients} clients, {KILLED_REPLICAS} {KILLED} replicas",
                         **saturation}, **figures, "raw": raw_records(requests, samples, start)}


def raw_records(requests: list[Request], samples: list[Sample], start: float) -> dict[str, Any]:
    """Every request and replica sample, seconds from the load's start: the figures' own data, so that a
    question the summary does not answer (which requests were slow after a recovery, on which replica's
    start) is read from the file, not from a rerun."""
    return {"requests": {"columns": ["sent_s", "latency_s", "status", "error"],
                         "rows": [[round(r.start - start, 3), round(r.end - r.start, 3), r.status, r.error]
                                  for r in requests]},
            "samples": {"columns": ["t_s", "deployment", "pid", "node", "rss_mib", "ready"],
                        "rows": [[round(x.t - start, 2), r.deployment, r.pid, r.node, round(r.rss / 2**20, 1), r.ready]
                                 for x in samples for r in x.replicas]}}


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.soak", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="12 minutes of 18 s, the tiny model on HF, at 50%%")
    add_engine_option(parser)
    parser.add_argument("--plot", nargs=2, type=Path, metavar=("SOAK_JSON", "OUT_PNG"),
                        help="draw a soak.json's per-minute figures to a PNG, and run nothing")
    args = parser.parse_args()
    if args.plot:
        from benchmarks._soak_plot import plot_soak

        print(f"soak: plot -> {plot_soak(*args.plot)}")
        return

    from raypipe.inference.engines import engine_kind

    plan = QUICK if args.quick else FULL
    engine = engine_choice(args)
    why = netns_unavailable()
    with tempfile.TemporaryDirectory(prefix="raypipe-soak-") as tmp, timer() as total:
        work = Path(tmp)
        with timer() as setup:
            model, retrieval = assets(work, args.quick)
        with site(work, why) as where:
            figures = serve_and_soak(where, plan, model, retrieval, engine, work)
    payload = {"quick": args.quick, "plan": asdict(plan), "engine": engine_kind(engine), "topology": where.description,
               "node_kill_skipped": why, "failure_detection": None if why else FAST_FAILURE_DETECTION,
               "small_nodes": None if why else SMALL_NODES, **figures,
               "targets": {"errors_outside_inflight": 0, "p99_after_over_before": "<= 1.2",
                           "replica_memory_growth": "<= 0.05"},
               "setup_s": round(setup.seconds, 1), "total_s": round(total.seconds, 1)}
    path = write_result("soak", payload)
    print(f"soak: {payload['rate_rps']:g} req/s ({plan.rate_fraction:.0%} of {payload['sustained_rps_2_replicas']:g}) "
          f"for {plan.minutes} x {plan.minute_s:g} s, kills {[k['kill'] for k in payload['kills']]}"
          f"{f' ({why}: no node kill)' if why else ''}, errors outside in-flight {payload['errors_outside_inflight']}, "
          f"p99 after/before {payload['p99_after_over_before']['worst']}, replica memory growth "
          f"{payload['replica_memory_growth']} -> {path}")


if __name__ == "__main__":
    main()
