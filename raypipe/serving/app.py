"""Building, starting and stopping the Serve app, from the serve job's sections (raypipe.jobs.serve).

Three ways in, one builder:
- `raypipe serve --config configs/demo.yaml` (or `ray job submit -- python jobs/serve.py ...`):
  `serve_until_stopped` starts Serve on `serve.host:serve.port`, deploys, and blocks until Ctrl-C (or
  SIGTERM), then shuts Serve down;
- `serve run configs/serve.yaml`: Serve imports `raypipe.jobs.serve:app_from_config` with the file's
  `args`;
- `serve deploy configs/serve.yaml` against a running cluster (`ray start --head` or KubeRay's
  RayService): the same file, the app stays up until `serve delete`/`serve shutdown`.
"""

from __future__ import annotations

import logging
import signal
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raypipe.config import ServeConfig
from raypipe.methods import get_method
from raypipe.runtime import ensure_ray
from raypipe.serving.auth import digest_from_env
from raypipe.serving.schemas import check_defaults_within_limits
from raypipe.serving.sections import ServeSections
from raypipe.tools import ToolSources

if TYPE_CHECKING:
    from ray.serve import Application

logger = logging.getLogger(__name__)


def autoscaling_config(serve_cfg: ServeConfig) -> dict[str, Any]:
    return {"min_replicas": serve_cfg.min_replicas, "max_replicas": serve_cfg.max_replicas,
            "target_ongoing_requests": serve_cfg.target_ongoing_requests,
            "upscale_delay_s": serve_cfg.upscale_delay_s, "downscale_delay_s": serve_cfg.downscale_delay_s,
            "look_back_period_s": serve_cfg.look_back_period_s, "metrics_interval_s": serve_cfg.metrics_interval_s}


def _absolute(path: str | None) -> str | None:
    return str(Path(path).expanduser().resolve()) if path else path


def resolve_paths(cfg: ServeSections) -> ServeSections:
    """The sections with the files replicas open made absolute, since replica processes need not share
    the builder's working directory."""
    retrieval = cfg.retrieval.model_copy(update={
        "encoder": cfg.retrieval.encoder.model_copy(update={"path": _absolute(cfg.retrieval.encoder.path)}),
        "index": cfg.retrieval.index.model_copy(update={"out_dir": _absolute(cfg.retrieval.index.out_dir)}),
        "fallback": cfg.retrieval.fallback.model_copy(update={"index_dir": _absolute(cfg.retrieval.fallback.index_dir)}),
    })
    serve_cfg = cfg.serve.model_copy(update={"generator": _absolute(cfg.serve.generator)})
    evaluator = cfg.evaluator.model_copy(update={"path": _absolute(cfg.evaluator.path)})
    return replace(cfg, retrieval=retrieval, serve=serve_cfg, evaluator=evaluator, instruct_lm=_absolute(cfg.instruct_lm))


def _cluster_has_gpus() -> bool:
    import ray

    return ray.is_initialized() and ray.cluster_resources().get("GPU", 0) > 0


def build_app(cfg: ServeSections) -> Application:
    """The Serve application of `cfg`: Ingress -> Decoder -> Generator + Retrieval, each model
    deployment bound only when a served method uses it."""
    from raypipe.serving.decoder import Decoder
    from raypipe.serving.deployments import Evaluator, Generator, QueryRewriter, Retrieval, WebSearch
    from raypipe.serving.ingress import Ingress

    check_defaults_within_limits(cfg)
    cfg = resolve_paths(cfg)
    s = cfg.serve
    used = {tool for m in s.methods for tool in get_method(m).tool_names}
    if "evaluator" in used:
        from raypipe.retrieval.cross_encoder import require_evaluator

        require_evaluator(cfg.evaluator.path)  # here, not in a replica that Serve would restart
    generator_actor: dict[str, Any] = {"num_cpus": s.generator_cpus}
    if _cluster_has_gpus():
        generator_actor["num_gpus"] = s.generator_gpus
    batching = (s.torch_threads, s.max_batch_size, s.batch_wait_timeout_s)
    # every replica builds its tool from these
    sources = ToolSources(s.generator, cfg.engine, cfg.retrieval, cfg.instruct_lm, cfg.evaluator, cfg.rewriter)
    # Generator/Retrieval callers are Decoder threads, already bounded by the Decoder's own limits:
    # their queues are unbounded and they admit a full batch per replica at least.
    spread = {} if s.max_replicas_per_node is None else {"max_replicas_per_node": s.max_replicas_per_node}
    shared = {"max_ongoing_requests": max(s.max_batch_size, s.max_ongoing_requests), "max_queued_requests": -1,
              **spread}
    handles = {}
    if "retriever" in used:
        handles["retriever"] = Retrieval.options(
            num_replicas=s.retrieval_replicas, ray_actor_options={"num_cpus": s.retrieval_cpus}, **shared,
        ).bind(sources, *batching)
    if "engine" in used:
        handles["engine"] = Generator.options(
            num_replicas=s.generator_replicas, ray_actor_options=generator_actor, **shared,
        ).bind("engine", sources, *batching)
    if "lm" in used:
        handles["lm"] = Generator.options(
            name="InstructLM", num_replicas=s.generator_replicas, ray_actor_options=generator_actor, **shared,
        ).bind("lm", sources, *batching)
    if "evaluator" in used:
        handles["evaluator"] = Evaluator.options(
            num_replicas=1, ray_actor_options={"num_cpus": s.evaluator_cpus}, **shared,
        ).bind(sources, *batching)
    if "web" in used:
        handles["web"] = WebSearch.options(
            num_replicas=1, ray_actor_options={"num_cpus": s.web_cpus}, **shared,
        ).bind(sources, s.torch_threads)
    if "rewriter" in used and cfg.rewriter.url:  # without an endpoint no request may ask for it (the schema)
        handles["rewriter"] = QueryRewriter.options(
            num_replicas=1, ray_actor_options={"num_cpus": s.web_cpus}, **shared,
        ).bind(sources)
    decoder = Decoder.options(
        autoscaling_config=autoscaling_config(s), max_ongoing_requests=s.max_ongoing_requests,
        max_queued_requests=s.max_queued_requests, ray_actor_options={"num_cpus": s.decoder_cpus}, **spread,
    ).bind(handles, s.generator, s.max_ongoing_requests, s.request_timeout_s, cfg.instruct_lm)
    return Ingress.options(
        num_replicas=s.ingress_replicas, max_ongoing_requests=s.ingress_max_ongoing_requests,
        ray_actor_options={"num_cpus": s.ingress_cpus}, **spread,
    ).bind(decoder, cfg, digest_from_env(s.auth_token_env))


def start_app(cfg: ServeSections) -> str:
    """Start Serve's HTTP proxy on `serve.host:serve.port` (joining a running Serve instance if there is
    one), deploy the app and wait until it is RUNNING; returns its base URL."""
    from ray import serve

    from raypipe.logs import reapply

    reapply()  # importing Serve has just set its logger back to INFO ("Started Serve in namespace ...")
    ensure_ray(cfg.ray)
    s = cfg.serve
    serve.start(http_options={"host": s.host, "port": s.port})
    serve.run(build_app(cfg), name=s.app_name, route_prefix=s.route_prefix, blocking=False)
    return f"http://{s.host}:{s.port}{s.route_prefix.rstrip('/')}"


def replica_counts(app_name: str, states: tuple[str, ...] = ("RUNNING",)) -> dict[str, int]:
    """Replicas in `states` per deployment of the app (from serve.status())."""
    from ray import serve

    app = serve.status().applications.get(app_name)
    if app is None:
        return {}
    return {name: sum(int(d.replica_states.get(state, 0)) for state in states) for name, d in app.deployments.items()}


def serve_until_stopped(cfg: ServeSections) -> dict[str, Any]:
    """Serve until Ctrl-C or SIGTERM, then shut Serve down. Returns the URL, the time up and the
    replica counts seen last."""
    from ray import serve

    def stop(signum: int, _frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    started = time.monotonic()
    url = start_app(cfg)
    previous = signal.signal(signal.SIGTERM, stop)  # after ray.init, which installs its own handler
    logger.info("serving %s at %s (POST /v1/generate, POST /v1/chat/completions, GET /healthz); "
                "Ctrl-C stops", cfg.serve.app_name, url)
    replicas: dict[str, int] = {}
    try:
        while True:
            replicas = replica_counts(cfg.serve.app_name) or replicas
            time.sleep(5)
    except KeyboardInterrupt:
        logger.info("stopping the Serve app")
    finally:
        serve.shutdown()
        signal.signal(signal.SIGTERM, previous)
    return {"url": url, "app": cfg.serve.app_name, "uptime_s": round(time.monotonic() - started, 1),
            "replicas": replicas}


#: names that moved out of this module, old -> new import path: a Serve config file written before
#: names the old one, and gets an error naming the new one rather than a bare AttributeError
MOVED = {"app_from_config": "raypipe.jobs.serve:app_from_config"}


def __getattr__(name: str) -> Any:
    if name in MOVED:
        raise AttributeError(f"raypipe.serving.app:{name} moved to {MOVED[name]}: set that import_path in the "
                             "Serve config file")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
