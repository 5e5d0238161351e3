"""A trained model folder's finish line, shared by every training job (the LM trainer, the encoder critic,
the CRAG evaluator): `train_stats.json` then `_SUCCESS`, written last.

The marker is written after the stats, so a folder with `_SUCCESS` always has its summary, and a rerun
of a finished job returns that summary (marked `skipped`) instead of training again.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

SUCCESS = "_SUCCESS"
STATS_FILE = "train_stats.json"


def finished_summary(out: Path) -> dict[str, Any] | None:
    """The summary of a finished folder, marked `skipped`; None when `out` is not finished."""
    if not (out / SUCCESS).exists():
        return None
    logger.info("%s already trained (%s exists); delete the folder to retrain", out, out / SUCCESS)
    return {**read_stats(out)["summary"], "skipped": True}


def read_stats(out: Path) -> dict[str, Any]:
    return json.loads((out / STATS_FILE).read_text())


def mark_finished(out: Path, stats: dict[str, Any]) -> None:
    """Write `stats` (holding at least a `summary`), then the marker."""
    (out / STATS_FILE).write_text(json.dumps(stats, indent=1))
    (out / SUCCESS).touch()
