"""One local Ray instance for the whole integration session (ray.init takes ~5 s; share it)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def ray_cluster():
    import ray

    from raypipe.runtime import use_local_worker_env

    if not ray.is_initialized():
        use_local_worker_env()  # the workers inherit it (conftest has set RAY_AUTH_MODE and the rest)
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    ctx = ray.data.DataContext.get_current()
    ctx.enable_progress_bars = False
    yield ray
    ray.shutdown()
