"""Starting or joining Ray the same way in every job.

Inside `ray job submit` RAY_ADDRESS is set and we join that cluster; on a laptop we start a local
instance. Token auth is disabled only for the local instance we start ourselves (STACK.md: it is on
by default in Ray 2.60 and gets in the way of one-machine runs).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from raypipe.config import RayConfig

logger = logging.getLogger(__name__)

#: Environment every Ray worker of ours gets: CPU DeepSpeed, no tokenizer thread oversubscription,
#: a lasting cache for DeepSpeed's C++ ops (compiled once, ~40 s).
WORKER_ENV = {
    "DS_ACCELERATOR": os.environ.get("DS_ACCELERATOR", "cpu"),
    "TOKENIZERS_PARALLELISM": "false",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "TORCH_EXTENSIONS_DIR": os.environ.get(
        "TORCH_EXTENSIONS_DIR", str(Path(__file__).resolve().parent.parent / ".cache" / "torch_extensions")
    ),
}


def ensure_ray(cfg: RayConfig | None = None) -> None:
    """Initialize Ray once per process; a no-op when already initialized (tests, notebooks)."""
    import ray

    if ray.is_initialized():
        return
    cfg = cfg or RayConfig()
    for key, value in WORKER_ENV.items():
        os.environ.setdefault(key, value)
    address = cfg.address or os.environ.get("RAY_ADDRESS")
    if address:
        logger.info("joining Ray cluster at %s", address)
        ray.init(address=address, runtime_env={"env_vars": WORKER_ENV})
        return
    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    ray.init(num_cpus=cfg.num_cpus, include_dashboard=False, runtime_env={"env_vars": WORKER_ENV})
