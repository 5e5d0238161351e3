"""Ray Train's record of a run's checkpoints, kept whole across a full disk.

Ray Train's controller lists a run's checkpoints in `checkpoint_manager_snapshot.json` in the run's
storage folder, rewritten in place each time it registers a checkpoint; a rerun resumes from the
latest checkpoint the file lists. A disk that fills during that rewrite leaves the file empty or cut
short, and Ray then refuses the folder instead of resuming it. So `SnapshotCopy` (a Ray Train callback,
run by the controller after each registration) copies the file atomically beside it, and
`restore_snapshot`, before a run starts, puts that copy back in place of a file that does not parse.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from ray.train import Checkpoint, UserCallback

from raypipe.disk import write_text

logger = logging.getLogger(__name__)

#: Ray Train's name for it (`StorageContext.checkpoint_manager_snapshot_path`)
SNAPSHOT_FILE = "checkpoint_manager_snapshot.json"
#: the last whole copy, beside it
COPY_FILE = ".checkpoint_manager_snapshot.whole.json"


class SnapshotCopy(UserCallback):
    """After each checkpoint Ray registers (its snapshot just written), copy the snapshot of the run
    stored in `run_dir`. A copy that cannot be written fails the run with the path named, and the
    previous copy stays whole."""

    def __init__(self, run_dir: Path):
        self.run_dir = run_dir

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Checkpoint | None) -> None:
        if checkpoint is not None:
            write_text(self.run_dir / COPY_FILE, (self.run_dir / SNAPSHOT_FILE).read_text(encoding="utf-8"))


def _parses(path: Path) -> bool:
    try:
        return isinstance(json.loads(path.read_text(encoding="utf-8")), dict)
    except (UnicodeDecodeError, json.JSONDecodeError):
        return False


def restore_snapshot(run_dir: Path) -> None:
    """Put the last whole copy in place of a snapshot that a full disk cut short; without a copy (the
    first checkpoint's registration failed), remove it, so that the run starts over as it would have."""
    snapshot = run_dir / SNAPSHOT_FILE
    if not snapshot.is_file() or _parses(snapshot):
        return
    copy = run_dir / COPY_FILE
    if copy.is_file():
        write_text(snapshot, copy.read_text(encoding="utf-8"))
        logger.warning("%s was cut short (a full disk?): restored its last whole copy, the run resumes from the "
                       "checkpoint it lists", snapshot)
    else:
        snapshot.unlink()
        logger.warning("%s was cut short before any checkpoint was registered: removed, the run starts over",
                       snapshot)
