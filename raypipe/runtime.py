"""Starting or joining Ray the same way in every job.

Inside `ray job submit` RAY_ADDRESS is set and we join that cluster; on a laptop we start a local
instance. Token auth is disabled only for the local instance we start ourselves (it is on by default
in Ray 2.60 and gets in the way of one-machine runs). What Ray's workers print stays in the session's
log files unless `ray.log_to_driver` is set (raypipe.logs says what else is kept off the terminal).
A local instance gets a watchdog (raypipe.reaper) that ends its agents and workers when this driver
dies, even by SIGKILL: Ray leaves those behind.
"""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

from raypipe.settings.cluster import RayConfig

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
    # no "Loading weights" bar in the worker logs each time an actor loads a model
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    # DeepSpeed's ZeRO-3 calls torch.distributed functions torch deprecates: one FutureWarning per call
    "PYTHONWARNINGS": os.environ.get("PYTHONWARNINGS", "ignore::FutureWarning:torch.distributed.c10d_logger"),
}

#: only for a local instance started here, not a cluster: Ray Train's preemption watcher polls for nodes
#: being drained (spot capacity reclaimed), which one machine never is, and it is one more worker
#: process to start for every training stage
LOCAL_INSTANCE_ENV = {"RAY_TRAIN_ENABLE_PREEMPTION_WATCHER": "0"}


#: the watchdog of the local instance this process started; closing its stdin (at exit) is its signal
_WATCHDOG: subprocess.Popen | None = None


def _watch_local_instance() -> None:
    """Start the watchdog of the local instance just started (see raypipe.reaper)."""
    global _WATCHDOG
    import ray
    from ray._private import worker

    from raypipe import reaper

    if _WATCHDOG is not None and _WATCHDOG.stdin is not None:
        _WATCHDOG.stdin.close()  # an earlier instance of this process, shut down: sweep its leftovers
    node = getattr(worker, "_global_node", None)
    processes = getattr(node, "all_processes", None) or {}
    raylets = processes.get("raylet") or []
    if not raylets:
        logger.warning("Ray %s: cannot find the local raylet; its processes may outlive a killed driver",
                       ray.__version__)
        return
    heads = [info.process.pid for infos in processes.values() for info in infos]
    log = Path(node.get_logs_dir_path()) / "raypipe_reaper.log"
    _WATCHDOG = reaper.start(raylets[0].process.pid, node.node_id, heads, str(log))


#: a C++ op build holds its lock for about a minute; one much older was left by a killed build
STALE_BUILD_LOCK_S = 600.0


def clear_stale_build_locks(extensions_dir: str | Path, max_age_s: float = STALE_BUILD_LOCK_S) -> list[Path]:
    """Remove the build locks that a killed process left in torch's extension cache.

    torch builds DeepSpeed's C++ ops under a lock file and every later process waits on that file for
    as long as it exists: a build killed mid-way (Ctrl-C, OOM, a killed test) makes every DeepSpeed
    start hang forever. A lock older than any build is such a leftover."""
    import time

    now, removed = time.time(), []
    for lock in Path(extensions_dir).glob("*/lock"):
        try:
            if now - lock.stat().st_mtime > max_age_s:
                lock.unlink()
                removed.append(lock)
        except FileNotFoundError:  # its build just finished
            continue
    for lock in removed:
        logger.warning("removed a stale build lock left by a killed process: %s", lock)
    return removed


def use_installed_ninja() -> None:
    """Put this interpreter's bin folder first on PATH when it holds `ninja` (DeepSpeed's dependency).

    torch builds DeepSpeed's ops with whichever `ninja` PATH finds first, and two ninja versions
    (pip's 1.13 and a system 1.11 here) read each other's build log as "command line changed": on a
    machine with both, every DeepSpeed start from a process with the other PATH (a shell without the
    venv activated, a Ray node started with it) rebuilt the op, ~40 s, minutes under load."""
    bin_dir = str(Path(sys.executable).parent)
    if not (Path(bin_dir) / "ninja").exists():
        return
    rest = [p for p in os.environ.get("PATH", "").split(os.pathsep) if p and p != bin_dir]
    os.environ["PATH"] = os.pathsep.join([bin_dir, *rest])


def use_local_worker_env() -> None:
    """Put WORKER_ENV in this process's environment (values already set win) before it starts a local
    Ray instance: the raylet it starts hands its environment to every worker, so no runtime_env is
    needed. A runtime_env, even one of env_vars only, runs each new worker through Ray's setup step
    first (a second Python start), which slows every actor's start-up. A cluster joined by address
    still gets WORKER_ENV as the job's runtime_env."""
    for key, value in {**WORKER_ENV, **LOCAL_INSTANCE_ENV}.items():
        os.environ.setdefault(key, value)


def ensure_ray(cfg: RayConfig | None = None) -> None:
    """Initialize Ray once per process; a no-op when already initialized (tests, notebooks)."""
    import ray

    if ray.is_initialized():
        return
    clear_stale_build_locks(os.environ.get("TORCH_EXTENSIONS_DIR", WORKER_ENV["TORCH_EXTENSIONS_DIR"]))
    from raypipe.logs import quiet_ray_data, ray_driver_level, ray_logs_dir

    cfg = cfg or RayConfig()
    for key, value in WORKER_ENV.items():
        if key != "PYTHONWARNINGS":  # the workers' filter, not the driver's
            os.environ.setdefault(key, value)
    address = cfg.address or os.environ.get("RAY_ADDRESS")
    if address:
        logger.info("joining Ray cluster at %s", address)
        ray.init(address=address, runtime_env={"env_vars": WORKER_ENV}, log_to_driver=cfg.log_to_driver,
                 logging_level=ray_driver_level())
    else:
        os.environ.setdefault("RAY_AUTH_MODE", "disabled")
        use_local_worker_env()
        ray.init(num_cpus=cfg.num_cpus, include_dashboard=False, log_to_driver=cfg.log_to_driver,
                 logging_level=ray_driver_level())
        _watch_local_instance()
    quiet_ray_data()
    if not cfg.log_to_driver:
        logger.info("Ray's worker logs: %s", ray_logs_dir())
