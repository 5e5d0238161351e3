"""The quick runs of every benchmark, started in the background when the test session starts.

Each quick run is its own process with its own Ray instance, and most of its time is process, model
and Ray start-up. The unit tests, which run first (tests/conftest.py orders them), use one core; the
quick runs take the other meanwhile, two at a time, and test_benchmarks_quick.py waits for what is
left. Their figures are not what is checked (speed targets live in the full runs' JSON), so sharing
the cores changes nothing the tests assert.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: the test module that reads the runs: the runs start only when one of its tests is selected
MODULE = "tests/integration/test_benchmarks_quick.py"
#: quick runs at once, in this order: the serving fault first, the soak once it is done (two serving
#: loads at once beside the unit tests starved a replacement replica past the clients' 60 s timeout),
#: the longest beside them, so that the last one to start is a short one
PARALLEL = 2
START_ORDER = ["faults", "training", "soak", "serve_load", "faults_scale", "retrieval", "augment", "engines", "critic",
               "crag", "length_grouping", "decoding", "self_reasoning"]
#: the runs whose checks hold latencies to a timeout: the integration tests that go beside the runs
#: (tests/conftest.py) wait for them to end
SERVING_LOADS = ("faults", "soak")
#: a quick run that has not ended by then is stuck, not slow: alone the longest (the soak) takes ~5 min, and
#: beside the unit tests (vLLM engines among them) on 2 cores up to 4x that
TIMEOUT_S = 1800


@dataclass
class Run:
    """One benchmark's quick run: its exit code and output once finished, and its result folder."""

    returncode: int
    stdout: str
    stderr: str
    results: Path
    #: wall-clock time from start to end (0 for a run never started)
    seconds: float = 0.0


class QuickRuns:
    """Starts every `python -m benchmarks.<name> --quick` on a thread pool; `wait` returns name -> Run."""

    def __init__(self) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="raypipe-bench-quick-"))
        self.procs: dict[str, subprocess.Popen] = {}
        self.closing = False
        self.lock = threading.Lock()  # a run starts, or the session's end stops it, never both
        self.pool = ThreadPoolExecutor(PARALLEL)
        names = [n for n in START_ORDER if (ROOT / "benchmarks" / f"{n}.py").exists()]
        self.futures: dict[str, Future[Run]] = {name: self.pool.submit(self._run, name) for name in names}

    def _run(self, name: str) -> Run:
        results = self.root / name
        results.mkdir()
        # one torch thread per run: beside the unit tests and each other, two threads per process put a
        # load of 10-17 on 2 cores; their figures are not what the tests check
        env = {**os.environ, "RAYPIPE_BENCH_RESULTS": str(results), "RAYPIPE_BENCH_CACHE": str(results / ".cache"),
               "RAY_AUTH_MODE": "disabled", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
        with self.lock:
            if self.closing:  # picked up by the pool as the session ended
                return Run(-1, "", "[not started: the session ended]", results)
            proc = subprocess.Popen([sys.executable, "-m", f"benchmarks.{name}", "--quick"], cwd=ROOT,
                                    env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            self.procs[name] = proc
        start = time.perf_counter()
        try:
            stdout, stderr = proc.communicate(timeout=TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            stdout, stderr = proc.communicate()
            stderr += f"\n[killed after {TIMEOUT_S} s]"
        return Run(proc.returncode, stdout, stderr, results, time.perf_counter() - start)

    def wait_for(self, names: tuple[str, ...]) -> None:
        """Until the runs named (those started) have ended."""
        for name in names:
            if name in self.futures:
                self.futures[name].result()

    def wait(self) -> dict[str, Run]:
        return {name: future.result() for name, future in self.futures.items()}

    def finished(self) -> dict[str, Run]:
        return {name: f.result() for name, f in self.futures.items() if f.done() and not f.cancelled()}

    def summary(self) -> str:
        """One line of every finished run's wall time, longest first: where the session's time went."""
        ranked = sorted(self.finished().items(), key=lambda kv: -kv[1].seconds)
        return "quick benchmark runs (s): " + ", ".join(f"{n} {r.seconds:.0f}" + ("" if r.returncode == 0 else " (failed)")
                                                         for n, r in ranked)

    def close(self) -> None:
        """Stop runs still going (a session ended early) and remove the result folders."""
        with self.lock:
            self.closing = True
            for future in self.futures.values():
                future.cancel()
            for proc in self.procs.values():
                if proc.poll() is None:
                    proc.kill()
        self.pool.shutdown(wait=True)
        shutil.rmtree(self.root, ignore_errors=True)


#: set by tests/conftest.py when the session selected a test of MODULE
started: QuickRuns | None = None
