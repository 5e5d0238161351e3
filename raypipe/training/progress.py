"""What a training run shows while it runs, read from its metrics log.

The Ray Train workers' own output stays in Ray's log files; rank 0 appends one JSON line per optimizer
step to `<out>/logs/<run>.metrics.jsonl` (`training.loop.MetricsLog`: step, total_steps, loss), so a
driver (the demo, `raypipe train`) can follow a run without touching it. On a terminal that is a bar;
where stderr is not one (a pipe, `ray job submit`'s log, CI) it is a line every `every_s` seconds
while steps advance, so a 25-minute stage is never silent.
"""

from __future__ import annotations

import json
import logging
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from raypipe.logs import PROGRESS_LOGGER, duration

#: seconds between looks at a run's metrics log
POLL_S = 1.0


def last_record(logs_dir: Path, since: float) -> dict[str, Any] | None:
    """The last complete line of the newest metrics log written after `since` (None: none yet)."""
    logs = [p for p in logs_dir.glob("*.metrics.jsonl") if p.stat().st_mtime >= since]
    if not logs:
        return None
    newest = max(logs, key=lambda p: p.stat().st_mtime)
    lines = newest.read_text(encoding="utf-8").splitlines()
    for line in reversed(lines):
        try:
            return json.loads(line)
        except json.JSONDecodeError:  # a line still being written
            continue
    return None


def progress_line(desc: str, record: dict[str, Any], steps_per_s: float | None) -> str:
    """`desc: step 120 of 418 (29%), 0.45 steps/s, loss 1.234, about 11 min left` (the parts the
    record and the rate allow)."""
    step, total = record["step"], record.get("total_steps")
    parts = [f"step {step} of {total} ({100 * step / total:.0f}%)" if total else f"step {step}"]
    if steps_per_s:
        parts.append(f"{steps_per_s:.2f} steps/s")
    if "loss" in record:
        parts.append(f"loss {record['loss']:.3f}")
    if steps_per_s and total and total > step:
        parts.append(f"about {duration((total - step) / steps_per_s)} left")
    return f"{desc}: " + ", ".join(parts)


@contextmanager
def training_progress(logs_dir: Path, desc: str, every_s: float, enabled: bool | None = None,
                      log: logging.Logger | None = None) -> Iterator[None]:
    """Follow the run writing `<logs_dir>/*.metrics.jsonl` while the block runs: a bar with the
    total and the latest loss on a terminal (`enabled` None: stderr is one), else a `progress_line`
    to `log` (`raypipe.progress`) at most every `every_s` seconds, when the step has moved."""
    terminal = sys.stderr.isatty() if enabled is None else enabled
    log = log or logging.getLogger(PROGRESS_LOGGER)
    started = time.time()
    stop = threading.Event()
    bar = None
    if terminal:
        from tqdm import tqdm

        bar = tqdm(desc=desc, unit="step", leave=False, dynamic_ncols=True)

    def poll() -> None:
        first: tuple[float, int] | None = None  # (when, step) of the first record seen: the rate's origin
        shown_at, shown_step = time.monotonic(), 0
        while not stop.wait(POLL_S):
            record = last_record(logs_dir, since=started)
            if record is None:
                continue
            now, step = time.monotonic(), record["step"]
            first = first or (now, step)
            rate = (step - first[1]) / (now - first[0]) if step > first[1] else None
            if bar is not None:
                if record.get("total_steps"):
                    bar.total = record["total_steps"]
                if step > bar.n:
                    bar.update(step - bar.n)
                    bar.set_postfix(loss=f"{record.get('loss', float('nan')):.3f}", refresh=True)
            elif step > shown_step and now - shown_at >= every_s:
                log.info("%s", progress_line(desc, record, rate))
                shown_at, shown_step = now, step

    thread = threading.Thread(target=poll, name="training-progress", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        if bar is not None:
            bar.close()
