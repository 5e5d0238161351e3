"""Load test of the Serve app on 127.0.0.1: throughput and latency with 1 and 2 replicas of each
deployment on the request path, and an autoscaling run as load rises and falls.

Setup (built in a temp dir, deterministic): a synthetic world, a random-weight Llama of moderate size
(so the engine, not Python overhead, dominates a request, as with a real model) and a Flat faiss index
of world passages. Every model replica gets `torch_threads=1`: one core's worth of threads.

1. `rps_1_replica`: one Ingress, Decoder, Generator and Retrieval; `concurrency` closed-loop clients
   for `duration_s` (or `max_requests`, whichever ends first) after a warm-up.
2. `rps_2_replicas`: the same load with 2 Decoder, Generator and Retrieval replicas. The ratio to
   (1) is the figure: the same-run baseline. Target >= 1.6x with 0 errors.
3. Autoscaling: the Decoder with min 1 / max 2 replicas and short delays; one client, then `burst`
   clients, then one client again, while serve.status() is sampled; the replica counts over time
   must show a scale-up and a scale-down.

Bounded: every phase stops after its seconds or requests; the whole run shuts Serve and Ray down.
Usage: `python -m benchmarks.serve_load [--quick]`; writes benchmarks/results/serve_load.json.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

os.environ.setdefault("RAY_AUTH_MODE", "disabled")

import httpx

from benchmarks._common import add_engine_option, engine_choice, timer, write_result
from raypipe.config import MethodsConfig, RaypipeConfig, ServeConfig
from raypipe.methods.selfrag.settings import SelfRAGSettings
from raypipe.settings.data import WorldConfig
from raypipe.settings.models import EngineConfig, TinyModelConfig
from raypipe.settings.retrieval import EncoderConfig, IndexConfig, RetrievalConfig

logger = logging.getLogger("serve_load")
APP = "serve-load"


@dataclass(frozen=True)
class Plan:
    """Sizes of one run; `--quick` shrinks every phase so the whole run ends within ~1.5 minutes."""

    world_instances: int
    hidden_size: int
    layers: int
    max_tokens: int
    concurrency: int
    warmup_requests: int
    duration_s: float
    max_requests: int
    burst: int
    phase_s: tuple[float, float, float]  # autoscaling: low, high, low


FULL = Plan(world_instances=300, hidden_size=512, layers=4, max_tokens=32, concurrency=8, warmup_requests=8,
            duration_s=40.0, max_requests=2000, burst=12, phase_s=(8.0, 30.0, 25.0))
QUICK = Plan(world_instances=150, hidden_size=256, layers=2, max_tokens=16, concurrency=4, warmup_requests=2,
             duration_s=5.0, max_requests=400, burst=8, phase_s=(2.0, 8.0, 10.0))


# --- assets ----------------------------------------------------------------------------------------


def build_world_index(root: Path, plan: Plan) -> tuple[Path, RetrievalConfig]:
    """A synthetic world of `plan`'s size and a Flat index of one passage shard: the world and its
    retrieval config."""
    from raypipe.data.io import list_data_files
    from raypipe.data.world import synthesize
    from raypipe.retrieval.build import assemble_index
    from raypipe.retrieval.embed import ShardEmbedder, shard_path, source_stamp

    world = root / "world"
    synthesize(WorldConfig(out_dir=str(world), instances=plan.world_instances, seed=3, eval_instances=0,
                           shard_size=200))
    source = list_data_files(world / "passages")[0]
    index_dir = root / "index"
    embedder = ShardEmbedder(EncoderConfig(), batch_size=64, threads=2, rejects_dir=str(index_dir / "rejects"))
    embedder.embed_file(source, shard_path(index_dir, source), source_stamp(source, EncoderConfig()))
    index = IndexConfig(passages=str(source), out_dir=str(index_dir), factory="Flat")
    assemble_index(index_dir, [source], True, index)
    return world, RetrievalConfig(index=index, top_k=2)


def build_assets(root: Path, plan: Plan) -> tuple[Path, RetrievalConfig]:
    """World -> tiny model (random weights, `plan`'s size) and a Flat index of one passage shard."""
    from raypipe.models import build_tiny_model, world_texts

    world, retrieval = build_world_index(root, plan)
    model = root / "model"
    model_cfg = TinyModelConfig(out_dir=str(model), vocab_size=1024, hidden_size=plan.hidden_size,
                                intermediate_size=plan.hidden_size * 4, num_hidden_layers=plan.layers,
                                num_attention_heads=4, max_position_embeddings=1024, tokenizer_train_texts=2000)
    build_tiny_model(model_cfg, world_texts(world, limit=model_cfg.tokenizer_train_texts), model)
    return model, retrieval


def app_config(model: Path, retrieval: RetrievalConfig, plan: Plan, port: int, replicas: int,
               autoscale: tuple[int, int] | None = None, engine: EngineConfig | None = None) -> RaypipeConfig:
    """`replicas` of every deployment on the request path, or the Decoder autoscaled within `autoscale`;
    the model replicas on `engine` (default: HF, fp32). CPU shares are small enough that 2 replicas of
    everything fit 2 cores' worth of Ray CPUs."""
    low, high = autoscale or (replicas, replicas)
    serve = ServeConfig(
        port=port, app_name=APP, generator=str(model), generator_replicas=replicas, retrieval_replicas=replicas,
        min_replicas=low, max_replicas=high, target_ongoing_requests=2.0, upscale_delay_s=1.0,
        downscale_delay_s=3.0, look_back_period_s=2.0, metrics_interval_s=0.5, max_ongoing_requests=plan.burst,
        max_queued_requests=4 * plan.burst, generator_cpus=0.4, retrieval_cpus=0.2, decoder_cpus=0.1,
        ingress_cpus=0.1, torch_threads=1, max_tokens_limit=plan.max_tokens)
    selfrag = SelfRAGSettings(mode="always", beam_width=2, max_depth=1, max_new_tokens=plan.max_tokens)
    return RaypipeConfig(serve=serve, engine=engine or EngineConfig(kind="hf"), methods=MethodsConfig(selfrag=selfrag),
                         retrieval=retrieval)


# --- load ------------------------------------------------------------------------------------------


@dataclass
class LoadResult:
    latencies_ms: list[float] = field(default_factory=list)
    statuses: dict[int, int] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def ok(self) -> int:
        return sum(n for status, n in self.statuses.items() if 200 <= status < 300)

    @property
    def errors(self) -> int:
        return sum(self.statuses.values()) - self.ok

    def percentile_ms(self, q: float) -> float:
        if len(self.latencies_ms) < 2:
            return self.latencies_ms[0] if self.latencies_ms else float("nan")
        return statistics.quantiles(self.latencies_ms, n=100, method="inclusive")[int(q) - 1]

    def summary(self) -> dict[str, Any]:
        return {"requests": sum(self.statuses.values()), "ok": self.ok, "errors": self.errors,
                "statuses": self.statuses, "seconds": round(self.seconds, 2),
                "rps": round(self.ok / self.seconds, 3) if self.seconds else 0.0,
                "p50_ms": round(self.percentile_ms(50), 1), "p95_ms": round(self.percentile_ms(95), 1)}


def request_body(i: int, max_tokens: int) -> dict[str, Any]:
    """The `i`-th request of a load: a different instruction each time, so no two requests are alike."""
    return {"instruction": f"Tell me about person number {i} and where they were born.", "max_tokens": max_tokens}


async def closed_loop(url: str, clients: int, seconds: float, max_requests: int, max_tokens: int,
                      result: LoadResult | None = None) -> LoadResult:
    """`clients` clients each sending one request after another until `seconds` pass or `max_requests`
    have been sent in all."""
    result = result or LoadResult()
    sent = 0
    deadline = time.perf_counter() + seconds

    async def client(c: httpx.AsyncClient) -> None:
        nonlocal sent
        while time.perf_counter() < deadline and sent < max_requests:
            sent += 1
            start = time.perf_counter()
            try:
                status = (await c.post("/v1/generate", json=request_body(sent, max_tokens))).status_code
            except httpx.HTTPError:
                status = 599  # connection-level failure: counted as an error
            if 200 <= status < 300:
                result.latencies_ms.append((time.perf_counter() - start) * 1000)
            result.statuses[status] = result.statuses.get(status, 0) + 1

    start = time.perf_counter()
    limits = httpx.Limits(max_connections=clients + 2)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as c:
        await asyncio.gather(*(client(c) for _ in range(clients)))
    result.seconds += time.perf_counter() - start
    return result


def measure(cfg: RaypipeConfig, plan: Plan) -> dict[str, Any]:
    """Warm up, then `plan.concurrency` closed-loop clients. With one Generator replica the batching
    stats (calls per engine call) are read too; with more, a handle probe reaches only one of them."""
    from ray import serve

    from raypipe.jobs.serve import serve_sections
    from raypipe.serving.app import start_app

    url = start_app(serve_sections(cfg))
    asyncio.run(closed_loop(url, plan.concurrency, 120.0, plan.warmup_requests, plan.max_tokens))
    generator = serve.get_deployment_handle("Generator", app_name=APP)
    single = cfg.serve.generator_replicas == 1
    before = generator.batching_stats.remote().result() if single else None
    summary = asyncio.run(closed_loop(url, plan.concurrency, plan.duration_s, plan.max_requests,
                                      plan.max_tokens)).summary()
    if before is not None:
        after = generator.batching_stats.remote().result()
        engine_calls = after["engine_calls"] - before["engine_calls"]
        summary["calls_per_engine_call"] = round((after["calls"] - before["calls"]) / max(engine_calls, 1), 2)
    serve.delete(APP)
    return summary


def autoscaling_run(cfg: RaypipeConfig, plan: Plan) -> dict[str, Any]:
    """Low -> high -> low load on an autoscaled Decoder, sampling its replicas: RUNNING ones and
    those STARTING (the autoscaler has decided on them; a process start takes seconds)."""
    from ray import serve

    from raypipe.jobs.serve import serve_sections
    from raypipe.serving.app import replica_counts, start_app

    url = start_app(serve_sections(cfg))
    samples: list[dict[str, float]] = []
    phases: list[tuple[str, float]] = []
    start = time.perf_counter()

    async def sample(until: float) -> None:
        while time.perf_counter() < until:
            running, starting = await asyncio.gather(asyncio.to_thread(replica_counts, APP),
                                                     asyncio.to_thread(replica_counts, APP, ("STARTING",)))
            samples.append({"t": round(time.perf_counter() - start, 2), "running": running.get("Decoder", 0),
                            "starting": starting.get("Decoder", 0)})
            await asyncio.sleep(0.5)

    async def run() -> LoadResult:
        result = LoadResult()
        low, high, cool = plan.phase_s
        sampler = asyncio.create_task(sample(time.perf_counter() + low + high + cool))
        for name, clients, seconds in (("low", 1, low), ("high", plan.burst, high), ("low", 1, cool)):
            phases.append((name, round(time.perf_counter() - start, 2)))
            await closed_loop(url, clients, seconds, plan.max_requests, plan.max_tokens, result)
        await sampler
        return result

    load = asyncio.run(run())
    serve.delete(APP)
    wanted = [int(s["running"] + s["starting"]) for s in samples]
    peak = max(wanted, default=0)
    after_peak = wanted[wanted.index(peak):] if wanted else []
    return {"replicas_over_time": samples, "phases": phases,
            "scaled_up": bool(wanted) and peak > wanted[0],
            "scaled_down": bool(wanted) and min(after_peak) < peak,
            "peak_running": max((int(s["running"]) for s in samples), default=0),
            "load": load.summary()}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serve_load",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small sizes, ~1.5 minutes")
    add_engine_option(parser)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("httpx").setLevel(logging.WARNING)
    plan = QUICK if args.quick else FULL

    import ray
    from ray import serve

    from raypipe.inference.engines import engine_kind as resolved_kind
    from raypipe.runtime import use_local_worker_env

    with tempfile.TemporaryDirectory(prefix="serve_load_") as tmp, timer() as total:
        with timer() as setup:
            model, retrieval = build_assets(Path(tmp), plan)
        use_local_worker_env()
        ray.init(num_cpus=os.cpu_count(), include_dashboard=False, log_to_driver=False)
        port = free_port()
        engine = EngineConfig(kind=engine_choice(args), precision="fp32")
        try:
            one = measure(app_config(model, retrieval, plan, port, replicas=1, engine=engine), plan)
            two = measure(app_config(model, retrieval, plan, port, replicas=2, engine=engine), plan)
            scaling = autoscaling_run(app_config(model, retrieval, plan, port, replicas=2, autoscale=(1, 2),
                                                 engine=engine), plan)
        finally:
            serve.shutdown()
            ray.shutdown()
    ratio = two["rps"] / one["rps"] if one["rps"] else 0.0
    payload = {
        "quick": args.quick,
        "plan": plan.__dict__, "engine": resolved_kind(engine.kind),
        "rps_1_replica": one["rps"], "rps_2_replicas": two["rps"], "speedup_2_vs_1": round(ratio, 3),
        "p50_ms_1_replica": one["p50_ms"], "p95_ms_1_replica": one["p95_ms"],
        "p50_ms_2_replicas": two["p50_ms"], "p95_ms_2_replicas": two["p95_ms"],
        "errors": one["errors"] + two["errors"],
        "replicas_over_time": scaling["replicas_over_time"],
        "scaled_up": scaling["scaled_up"], "scaled_down": scaling["scaled_down"],
        "baseline": {"name": "1 replica of each deployment", **one},
        "two_replicas": two, "autoscaling": {k: v for k, v in scaling.items() if k != "replicas_over_time"},
        "targets": {"speedup_2_vs_1": ">= 1.6", "errors": 0, "scaled_up": True, "scaled_down": True},
        "setup_s": round(setup.seconds, 1), "total_s": round(total.seconds, 1),
    }
    path = write_result("serve_load", payload)
    print(f"serve_load: {one['rps']:.2f} -> {two['rps']:.2f} req/s with 2 replicas ({ratio:.2f}x), "
          f"p95 {one['p95_ms']:.0f} -> {two['p95_ms']:.0f} ms, errors {payload['errors']}, "
          f"scaled up {scaling['scaled_up']} / down {scaling['scaled_down']} ({path})")


if __name__ == "__main__":
    main()
