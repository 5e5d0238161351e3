"""A job's driver output stays short: what Ray's workers print goes to the session's log files (whose
folder the job logs), and Ray Data's per-dataset INFO lines stay off the terminal. Runs its own
driver in a subprocess, since the terminal output of a whole process is what is measured."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

DRIVER = """
from raypipe.logs import setup_logging
setup_logging()
import ray
from raypipe.settings.cluster import RayConfig
from raypipe.runtime import ensure_ray

ensure_ray(RayConfig(num_cpus=1))

def noisy(batch):
    print("WORKER-SAYS-HI", flush=True)
    return batch

rows = ray.data.range(40, override_num_blocks=4).map_batches(noisy).take_all()
print("rows", len(rows))
ray.shutdown()
"""


def test_worker_output_goes_to_the_log_files_not_the_terminal():
    env = {**os.environ, "RAY_ADDRESS": ""}  # start a fresh local instance, not the session's shared one
    done = subprocess.run([sys.executable, "-c", DRIVER], capture_output=True, text=True, timeout=300, env=env,
                          check=True)
    output = done.stdout + done.stderr
    assert "rows 40" in done.stdout
    assert "WORKER-SAYS-HI" not in output
    assert "Starting execution" not in output and "Execution plan" not in output
    assert "Started a local Ray instance" not in output
    lines = [line for line in output.splitlines() if line.strip()]
    assert len(lines) <= 3, output  # the log-folder line, the rows line (and at most one more)
    logs = re.search(r"Ray's worker logs: (\S+)", output)
    assert logs, output
    worker_files = [p for p in Path(logs.group(1)).glob("worker-*.out") if "WORKER-SAYS-HI" in p.read_text()]
    assert worker_files, "the workers' own output is kept in the session's log files"
