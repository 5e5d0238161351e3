"""A trained model folder's finish line, shared by every training job (the LM trainer, the encoder critic,
the CRAG evaluator): `train_stats.json` then `_SUCCESS`, written last.

The marker is written after the stats, so a folder with `_SUCCESS` always has its summary, and a rerun
of a finished job returns that summary (marked `skipped`) instead of training again.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path
from typing import Any

from raypipe.disk import write_text

logger = logging.getLogger(__name__)

SUCCESS = "_SUCCESS"
STATS_FILE = "train_stats.json"
#: the folder under a job's output folder that holds its Ray Train runs (storage_path)
CHECKPOINTS_DIR = "checkpoints"


def finished_summary(out: Path) -> dict[str, Any] | None:
    """The summary of a finished folder, marked `skipped`; None when `out` is not finished."""
    if not (out / SUCCESS).exists():
        return None
    logger.info("%s already trained (%s exists); delete the folder to retrain", out, out / SUCCESS)
    return {**read_stats(out)["summary"], "skipped": True}


def read_stats(out: Path) -> dict[str, Any]:
    return json.loads((out / STATS_FILE).read_text())


def mark_finished(out: Path, stats: dict[str, Any], *, keep_checkpoints: bool) -> None:
    """Write `stats` (holding at least a `summary`), then the marker; then, unless `keep_checkpoints`,
    remove the job's Ray Train checkpoints. A finished folder is never resumed (a rerun returns its
    summary), so they are only disk: each holds the optimizer state, several times the model's size.
    Removed after the marker, so a crash in between leaves a finished folder, not a lost resume point."""
    write_text(out / STATS_FILE, json.dumps(stats, indent=1))
    (out / SUCCESS).touch()
    checkpoints = out / CHECKPOINTS_DIR
    if not keep_checkpoints and checkpoints.exists():
        shutil.rmtree(checkpoints)
        logger.info("removed the Ray Train checkpoints of %s (keep_checkpoints_after_export: false)", out)
