"""`raypipe demo`: the whole system on the embedded defaults, as far as it is built.

Each stage is an ordinary job function run in order on one config; finished stages are skipped on a
rerun (their outputs carry `_SUCCESS` markers), so `make demo` is idempotent. The demo is sized to
finish on a 2-core laptop in under 20 minutes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from raypipe.config import RaypipeConfig

logger = logging.getLogger(__name__)


def _stages() -> list[tuple[str, Callable[[RaypipeConfig], dict[str, Any]]]]:
    from raypipe.data.world import run_synth
    from raypipe.models.build_job import run_build_models

    return [
        ("synthetic world", run_synth),
        ("tiny models", run_build_models),
    ]


def run_demo(cfg: RaypipeConfig) -> dict[str, Any]:
    from raypipe.cli import print_summary

    summary: dict[str, Any] = {}
    for name, stage in _stages():
        start = time.perf_counter()
        logger.info("demo stage: %s", name)
        stats = stage(cfg)
        print_summary(f"demo: {name}", stats)
        summary[name] = f"{time.perf_counter() - start:.1f} s"
    return {"stage times": summary}
