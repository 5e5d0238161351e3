"""`raypipe serve` and `serve run configs/serve.yaml`: the Serve app (raypipe.serving) of a config;
and the demo's serving step."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, ValidationError

from raypipe.config import RaypipeConfig, load_config
from raypipe.errors import ConfigError
from raypipe.serving.app import build_app, serve_until_stopped
from raypipe.serving.sections import ServeSections

if TYPE_CHECKING:
    from ray.serve import Application


def serve_sections(cfg: RaypipeConfig) -> ServeSections:
    """The sections of `cfg` a server reads."""
    return ServeSections(cfg.serve, cfg.methods, cfg.engine, cfg.retrieval, cfg.instruct_lm, cfg.crag.evaluator,
                         cfg.ray, cfg.crag.rewriter)


def run_serve(cfg: RaypipeConfig) -> dict[str, Any]:
    """Serve `cfg` until Ctrl-C or SIGTERM; the URL, the time up and the replica counts seen last."""
    return serve_until_stopped(serve_sections(cfg))


class AppArgs(BaseModel):
    """The `args` of `app_from_config` in a Serve config file."""

    model_config = ConfigDict(extra="forbid")

    #: a raypipe YAML config (default: the embedded defaults); relative to the working directory
    config: str | None = None
    #: `key.path=value` overrides, as with `--set`
    overrides: list[str] = []


def app_from_config(args: dict[str, Any]) -> Application:
    """The Serve app builder of configs/serve.yaml (`serve run` / `serve deploy`)."""
    try:
        parsed = AppArgs.model_validate(args)
    except ValidationError as exc:
        raise ConfigError(f"serve config args: {exc}") from None
    return build_app(serve_sections(load_config(parsed.config, parsed.overrides)))


def run_serve_demo(cfg: RaypipeConfig) -> dict[str, Any]:
    """The demo's serving step: the app started, a few held-out questions asked, the app deleted."""
    from raypipe.serving.demo import serve_demo

    return serve_demo(serve_sections(cfg), cfg.eval.eval_sets)
