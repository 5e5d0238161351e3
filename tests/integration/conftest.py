"""One local Ray instance for the whole integration session (ray.init takes ~5 s; share it)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 runtime_env={"env_vars": {"RAY_AUTH_MODE": "disabled", "DS_ACCELERATOR": "cpu",
                                           "TOKENIZERS_PARALLELISM": "false"}})
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    yield ray
    ray.shutdown()
