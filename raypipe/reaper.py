"""Stops the processes of a local Ray instance when the driver that started it dies, however it dies.

Ray ties the head's own processes (GCS, raylet, dashboard, log monitor) to the driver that started
them, so they die with it even on SIGKILL. The processes the raylet starts do not: after a SIGKILLed
driver the dashboard agent and the runtime-env agent notice that the raylet is gone, then block for
about a minute trying to report it to the GCS, which is gone too, and a busy worker can outlive its
raylet as well. On a shared 2-core machine those leftovers hold memory and cores.

The fix is a watchdog process per local instance (`start`): the driver holds the write end of a pipe
to it and never writes; the kernel closes that end when the driver exits for any reason, the
watchdog reads end-of-file and then ends every process of the instance. While it waits it notes the
raylet's descendants every `POLL_S` seconds, since once the raylet is gone they are orphans nothing
links to the instance except their environment, which is not reliable either: renaming a process
(`ray::DashboardAgent`) can overwrite the start of it. So a process belongs to the instance when it
was one of the head processes or noted descendants (matched by pid and start time, so a reused pid is
never hit), or carries the instance's raylet pid in `RAY_RAYLET_PID` (set for every process the
raylet starts; the agents also carry `RAY_NODE_ID`) and was started before the driver died.
After a normal `ray.shutdown()` there is nothing left to find and the watchdog just exits.

Run as ``python -m raypipe.reaper --raylet-pid N --node-id ID --head PID:START ...`` with the pipe
on stdin; what it stopped goes to ``--log`` (the session's logs folder).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import select
import subprocess
import sys
import time
from collections.abc import Iterable
from pathlib import Path

import psutil

logger = logging.getLogger(__name__)

#: seconds between SIGTERM and SIGKILL
GRACE_S = 3.0
#: seconds between two notes of the raylet's descendants (one pass over /proc: a few ms)
POLL_S = 2.0


def start(raylet_pid: int, node_id: str, head_pids: Iterable[int], log: str | None = None) -> subprocess.Popen:
    """Start the watchdog of the local instance whose raylet is `raylet_pid`.

    The caller must keep the returned Popen (and so its stdin) referenced for as long as the
    instance should live: closing stdin is the signal.
    """
    heads = []
    for pid in head_pids:
        try:
            heads.append(f"{pid}:{psutil.Process(pid).create_time()!r}")
        except psutil.NoSuchProcess:
            continue
    log_args = ["--log", log] if log else []
    return subprocess.Popen(
        [sys.executable, "-m", "raypipe.reaper", "--raylet-pid", str(raylet_pid), "--node-id", node_id,
         *log_args, "--head", *heads],
        stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        # its own session: a Ctrl-C or a kill of the driver's process group does not reach it
        start_new_session=True, close_fds=True,
    )


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        raw = Path(f"/proc/{proc.pid}/environ").read_bytes()
    except FileNotFoundError:  # no /proc (macOS): psutil's reading
        return proc.environ()
    items = (item.split("=", 1) for item in raw.decode("utf-8", errors="replace").split("\0") if "=" in item)
    return dict(items)


def descendants(pid: int, created: float | None) -> dict[int, float]:
    """pid -> start time of every process below `pid` (if `pid` is still the process started at
    `created`)."""
    try:
        root = psutil.Process(pid)
        if created is not None and abs(root.create_time() - created) >= 0.01:
            return {}
        found = {}
        for child in root.children(recursive=True):
            with contextlib.suppress(psutil.Error):
                found[child.pid] = child.create_time()
        return found
    except psutil.Error:
        return {}


def instance_processes(raylet_pid: int, node_id: str, heads: dict[int, float],
                       started_before: float) -> list[psutil.Process]:
    """The live processes of the instance (see the module docstring), this user's only; `heads` holds
    the pid -> start time of the processes known to belong to it."""
    found: list[psutil.Process] = []
    me, uid = os.getpid(), os.getuid()
    for proc in psutil.process_iter(["pid", "uids", "create_time"]):
        info = proc.info
        if info["pid"] == me or info["uids"] is None or info["uids"].real != uid:
            continue
        if info["pid"] in heads and abs(heads[info["pid"]] - info["create_time"]) < 0.01:
            found.append(proc)
            continue
        if info["create_time"] > started_before:
            continue
        try:
            env = _environ(proc)
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess, OSError):
            continue
        if env.get("RAY_RAYLET_PID") == str(raylet_pid) or (node_id and env.get("RAY_NODE_ID") == node_id):
            found.append(proc)
    return found


def stop(procs: list[psutil.Process], grace_s: float = GRACE_S) -> int:
    """SIGTERM, then SIGKILL what is still alive after `grace_s`; returns how many were signalled."""
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.terminate()
    _, alive = psutil.wait_procs(procs, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(alive, timeout=grace_s)
    return len(procs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--raylet-pid", type=int, required=True)
    parser.add_argument("--node-id", default="")
    parser.add_argument("--log", help="file to append what was stopped to")
    parser.add_argument("--head", nargs="*", default=[], help="PID:CREATE_TIME of the head processes")
    args = parser.parse_args(argv)
    if args.log:
        logging.basicConfig(filename=args.log, level=logging.INFO,
                            format="%(asctime)s %(levelname)s raypipe.reaper: %(message)s")
    known = {int(pid): float(created) for pid, created in (h.split(":", 1) for h in args.head)}
    raylet_created = known.get(args.raylet_pid)
    stdin = sys.stdin.fileno()
    # until the driver's end of the pipe closes (its exit, normal or not), note the raylet's descendants
    while True:
        known.update(descendants(args.raylet_pid, raylet_created))
        ready, _, _ = select.select([stdin], [], [], POLL_S)
        if ready and not os.read(stdin, 4096):
            break
    died = time.time()
    # a sweep can race with a worker starting a child process: sweep again until one finds nothing
    for _ in range(5):
        procs = instance_processes(args.raylet_pid, args.node_id, known, died)
        if not procs:
            break
        logger.info("driver gone; stopping %s", ", ".join(f"{p.pid} ({_name(p)})" for p in procs))
        stop(procs)
    return 0


def _name(proc: psutil.Process) -> str:
    try:
        return proc.name()
    except psutil.Error:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
