"""A driver killed with SIGKILL leaves no process of the local Ray instance it started behind.

Without the watchdog (raypipe.reaper) the dashboard agent and the runtime-env agent of such an
instance live on for about a minute (they block reporting the raylet's death to the dead GCS), and a
busy worker can outlive its raylet; the bound here is well below that.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.slow

DRIVER = """
import os, sys
import ray
from ray._private import worker
from raypipe.settings.cluster import RayConfig
from raypipe.runtime import ensure_ray

ensure_ray(RayConfig(num_cpus=1))

@ray.remote
class Holder:
    def pid(self):
        return os.getpid()

holder = Holder.remote()
print("WORKER", ray.get(holder.pid.remote()), flush=True)
print("RAYLET", worker._global_node.all_processes["raylet"][0].process.pid, flush=True)
sys.stdin.read()  # live until killed
"""

#: seconds the instance's processes may take to go after the driver is killed
BOUND_S = 20.0


def _stat(pid: int) -> tuple[str, int, int] | None:
    """(state, ppid, start time in clock ticks) of a process, from /proc; None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], int(fields[1]), int(fields[19])


def _descendants(root: int) -> dict[int, int]:
    """pid -> start time of every live process below `root` (the driver: the head processes, and
    under the raylet the agents and workers)."""
    children: dict[int, list[int]] = {}
    starts: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (stat := _stat(int(entry.name))) and stat[0] != "Z":
            children.setdefault(stat[1], []).append(int(entry.name))
            starts[int(entry.name)] = stat[2]
    found, todo = {}, [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found[child] = starts[child]
            todo.append(child)
    return found


def _alive(procs: dict[int, int]) -> list[int]:
    """The processes of `procs` still running (same pid and start time, not a zombie)."""
    return [pid for pid, started in procs.items()
            if (stat := _stat(pid)) is not None and stat[0] != "Z" and stat[2] == started]


def _name(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:120]
    except OSError:
        return "?"


def _watchdog_pids(raylet_pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                args = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"raypipe.reaper" in args and str(raylet_pid).encode() in args:
                out.append(int(entry.name))
    return out


def test_sigkilled_driver_leaves_no_process_of_its_instance():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    driver = subprocess.Popen([sys.executable, "-c", DRIVER], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, env=env, text=True)
    raylet_pid = worker_pid = None
    procs: dict[int, int] = {}
    try:
        for line in driver.stdout:
            key, _, value = line.partition(" ")
            if key == "WORKER":
                worker_pid = int(value)
            if key == "RAYLET":
                raylet_pid = int(value)
                break
        assert raylet_pid and worker_pid, "the driver did not start its instance"
        procs = _descendants(driver.pid)
        names = " ".join(_name(pid) for pid in procs)
        # the head processes, both agents and the actor's worker at least
        assert worker_pid in procs and raylet_pid in procs, procs
        assert "ray::DashboardAgent" in names and "ray::RuntimeEnvAgent" in names, names
        assert _watchdog_pids(raylet_pid), "no watchdog for the instance"

        driver.send_signal(signal.SIGKILL)
        driver.wait(timeout=30)
        deadline = time.monotonic() + BOUND_S
        left = _alive(procs)
        while left and time.monotonic() < deadline:
            time.sleep(0.2)
            left = _alive(procs)
        assert left == [], (f"processes of the killed driver's instance still alive after {BOUND_S} s: "
                            f"{[(pid, _name(pid)) for pid in left]}")
        assert _watchdog_pids(raylet_pid) == []
    finally:
        if driver.poll() is None:
            driver.kill()
        # whatever this test started and is still alive
        for pid in _alive(procs) + (_watchdog_pids(raylet_pid) if raylet_pid else []):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
