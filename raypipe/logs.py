"""Terminal output a person can read: our own log lines, the stage tables, and nothing else by default.

What is silenced, and where it arises (each at its source, so real warnings and errors still show):
- third-party INFO chatter in the driver: the root logger stays at WARNING, only `raypipe` logs INFO
  (faiss's loader, for one, reports each CPU-feature build it tries, "Loading faiss with AVX2
  support", at INFO);
- Ray Data's per-dataset INFO lines ("Starting execution", "Execution plan", the periodic progress
  log it writes when stdout is not a terminal): its console handler is raised to WARNING; they stay in
  `<session>/logs/ray-data/`. On a terminal Ray Data still draws its own progress bars, except for
  training-data encoding (seconds; each bar would leave a blank line), and its advice on how to turn
  them back on is not printed;
- Ray core's INFO lines in the driver ("Started a local Ray instance") and Ray Train's and Ray Serve's
  driver-side INFO;
- transformers' per-load "Loading weights" progress bars, which finish instantly and leave a line each;
- DeepSpeed's FutureWarnings, filtered to the deepspeed modules only (in Ray's workers, where
  DeepSpeed's ZeRO-3 calls torch.distributed functions torch deprecates, `runtime.WORKER_ENV` filters
  those FutureWarnings of torch.distributed.c10d_logger).
Everything Ray's workers print (Ray Train's workers and controller, the PlacementGroupCleaner's
traceback, Ray Data's actors, Serve's controller with its harmless "Cannot deregister autoscaling
state" warnings and its replicas' access logs) stays in the session's log files when
`ray.log_to_driver` is false (`raypipe.runtime.ensure_ray`); `ray_logs_dir()` says where.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from collections.abc import Callable

#: logger -> the lowest level it prints at; applied by `quiet_third_party`
NOISY_LOGGERS: dict[str, int] = {
    "faiss.loader": logging.WARNING,  # "Loading faiss with AVX2 support." and the failed attempts before it
    "ray": logging.WARNING,  # "Started a local Ray instance." and other driver-side INFO of Ray core
    "ray.train": logging.WARNING,  # Ray Train's driver-side INFO and its repeated dashboard warnings
    "ray.serve": logging.WARNING,  # Serve's driver-side INFO ("Started Serve", "Application ... is ready")
    # "Progress bars disabled. To enable, set ...": advice, when a short step (training-data encoding)
    # turns its bars off on purpose
    "ray.data._internal.progress": logging.ERROR,
    "DeepSpeed": logging.WARNING,  # DeepSpeed's own logger (INFO on every engine start)
    "httpx": logging.WARNING,  # one INFO line per HTTP request of the serving demo
    "sentence_transformers": logging.WARNING,
    "transformers": logging.WARNING,
}
#: the logger of `Progress`'s lines where stderr is not a terminal
PROGRESS_LOGGER = "raypipe.progress"
#: Ray Data's console handler level; its file handler keeps everything
RAY_DATA_CONSOLE_LEVEL = logging.WARNING
_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


#: set by `setup_logging(verbose=False)`: the process asked for a quiet terminal
_quiet = False


def setup_logging(verbose: bool = False) -> None:
    """The CLI's logging: `raypipe` at INFO (DEBUG with -v), everything else at WARNING (INFO with -v),
    and the named noisy loggers raised (unless -v)."""
    global _quiet
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format=_FORMAT, force=True)
    logging.getLogger("raypipe").setLevel(logging.DEBUG if verbose else logging.INFO)
    _quiet = not verbose
    if _quiet:
        quiet_third_party()


def ray_driver_level() -> int:
    """The level `ray.init` gives the driver's "ray" logger (it resets it): WARNING when quiet."""
    return NOISY_LOGGERS["ray"] if _quiet else logging.INFO


def reapply() -> None:
    """Raise the noisy loggers again if the process asked for quiet: importing `ray.serve` sets its
    logger back to INFO; call after that."""
    if _quiet:
        for name, level in NOISY_LOGGERS.items():
            logging.getLogger(name).setLevel(level)


def tables_only() -> None:
    """`raypipe demo`: raise `raypipe`'s own INFO lines to WARNING when the process asked for quiet.
    Each demo stage ends with a table of what it made, so its INFO lines ("wrote runs/demo/world in
    0.3 s", "index runs/demo/index: 1531 passages") said it twice, 21 of the demo's lines; warnings,
    the collapse check's included, still show, and so do the progress lines of a long stage where
    stderr is not a terminal (`raypipe.progress`, one per tenth); -v keeps everything."""
    if _quiet:
        logging.getLogger("raypipe").setLevel(logging.WARNING)
        logging.getLogger(PROGRESS_LOGGER).setLevel(logging.INFO)


def quiet_third_party() -> None:
    """Raise the named noisy loggers, filter DeepSpeed's FutureWarnings and transformers' load bars.
    Idempotent; safe to call before or after the libraries are imported."""
    for name, level in NOISY_LOGGERS.items():
        logging.getLogger(name).setLevel(level)
    warnings.filterwarnings("ignore", category=FutureWarning, module=r"deepspeed(\.|$)")
    # transformers reads this when it is imported; if it already is, switch its bars off directly
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    hf_logging = sys.modules.get("transformers.utils.logging")
    if hf_logging is not None:
        hf_logging.disable_progress_bar()


def quiet_ray_data() -> None:
    """Ray Data's console handler to WARNING (after `ray.data` is imported: it configures its
    loggers on import). Its file handler under the session's logs/ray-data/ keeps every line."""
    import ray.data  # noqa: F401 - configures the "ray.data" logger and its handlers

    for handler in logging.getLogger("ray.data").handlers:
        if not _is_file_handler(handler):
            handler.setLevel(max(handler.level, RAY_DATA_CONSOLE_LEVEL))


def _is_file_handler(handler: logging.Handler) -> bool:
    return isinstance(handler, logging.FileHandler) or type(handler).__name__ == "SessionFileHandler"


def ray_logs_dir() -> str | None:
    """The running Ray session's log folder on this node (None when Ray is not initialized here)."""
    import ray

    if not ray.is_initialized():
        return None
    node = ray._private.worker.global_worker.node  # no public accessor for the session folder
    return node.get_logs_dir_path() if node is not None else None


class ProgressLog:
    """Progress of a long Ray Data pass as log lines when stderr is not a terminal: at every `every`
    share of `total`, and at the first step after `every_s` seconds without a line, so that a slow
    pass still speaks at least that often between batches. There Ray Data's bars are not drawn and
    its own periodic progress log is kept off the console (above), so a job under `ray job submit`,
    nohup or CI would say nothing for the length of an eval or an augmentation. On a terminal it logs
    nothing (the bars show it)."""

    def __init__(self, desc: str, total: int, every: float = 0.1, enabled: bool | None = None,
                 log: logging.Logger | None = None, every_s: float | None = None,
                 clock: Callable[[], float] = time.monotonic):
        self.desc, self.total, self.done = desc, max(total, 1), 0
        self.enabled = (not sys.stderr.isatty()) if enabled is None else enabled
        self.step_size = max(1, round(self.total * every))
        self.every_s = every_s
        self.log = log or logging.getLogger(PROGRESS_LOGGER)
        self.clock = clock
        self.start = self.shown_at = clock()

    def step(self, n: int = 1) -> None:
        before, self.done = self.done, self.done + n
        if not self.enabled:
            return
        now = self.clock()
        overdue = self.every_s is not None and now - self.shown_at >= self.every_s
        if overdue or self.done // self.step_size > before // self.step_size or self.done == self.total:
            elapsed = now - self.start
            rate = self.done / elapsed if elapsed > 0 else 0.0
            left = f", about {duration((self.total - self.done) / rate)} left" if rate and self.done < self.total else ""
            self.log.info("%s: %d of %d (%.0f%%), %.0f s, %.2f/s%s", self.desc, self.done, self.total,
                          100 * self.done / self.total, elapsed, rate, left)
            self.shown_at = now


def duration(seconds: float) -> str:
    """`45 s` under a minute and a half, else `12 min`: how long a progress line says is left."""
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"
