"""Checkpoints: the strategy's model and optimizer state plus our position in the data, reported to Ray
Train.

Every rank writes its share (`WorkerStrategy.save`: a ZeRO partition, or on rank 0 the whole model)
into a local folder and reports it; Ray Train merges the folders into one checkpoint directory in the
run's storage (distributed checkpointing). Rank 0 adds `train_state.json`: the optimizer step, the
epoch, the micro-batches consumed in that epoch and the metric history, which is what lets a
restarted worker group continue at the same step on the same data (Ray Train hands the latest
checkpoint back through ``get_checkpoint()``). The final checkpoint also holds the exported model in
`model/`, which the harness copies out.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raypipe.disk import full_disk_named, write_text
from raypipe.errors import DiskFullError

if TYPE_CHECKING:
    from ray.train import Checkpoint

    from raypipe.training.strategy import WorkerStrategy

STATE_FILE = "train_state.json"
#: subfolder of the final checkpoint holding the exported HF model
MODEL_DIR = "model"


@dataclass
class TrainState:
    step: int = 0
    epoch: int = 0
    #: micro-batches of `epoch` each rank has consumed; a resumed rank skips this many
    micro_batches_done: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)

    def save(self, folder: Path) -> None:
        write_text(folder / STATE_FILE, json.dumps(asdict(self), indent=1))

    @classmethod
    def load(cls, folder: Path) -> TrainState:
        return cls(**json.loads((folder / STATE_FILE).read_text()))


def save_checkpoint(strategy: WorkerStrategy, state: TrainState, metrics: dict[str, Any], rank: int,
                    add_files: Callable[[Path], None] | None = None) -> None:
    """Collective: every rank saves its share and calls ``ray.train.report`` (a barrier in Ray Train).
    `add_files(folder)` runs on every rank before the report (the final export writes there).

    A full disk, in the local folder or in the run's storage, is a `DiskFullError` naming the folder,
    and nothing of the failed checkpoint stays: the local folder is temporary, and `_persist` removes a
    partial copy from the storage. Ray Train registers a checkpoint only once every rank has reported
    it, so a resumed run starts from the last whole one."""
    import ray.train

    with tempfile.TemporaryDirectory(prefix="raypipe-ckpt-") as tmp:
        folder = Path(tmp)
        with full_disk_named(folder):
            strategy.save(folder, rank)
            if rank == 0:
                state.save(folder)
            if add_files is not None:
                add_files(folder)
        # a rank that holds nothing of the model (plain torch's other ranks) reports no folder
        if any(folder.iterdir()):
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(str(folder)),
                             checkpoint_upload_fn=_persist)
        else:
            ray.train.report(metrics)


def _persist(checkpoint: Checkpoint, dir_name: str) -> Checkpoint:
    """Ray Train's own copy of a rank's checkpoint folder into the run's storage, with a full disk named
    and the partial copy removed (it would hold the disk's space until Ray deleted it as an old one)."""
    import ray.train

    storage = ray.train.get_context().get_storage()
    target = storage.build_checkpoint_path_from_name(dir_name)
    try:
        with full_disk_named(target):
            return storage.persist_current_checkpoint(checkpoint, dir_name)
    except DiskFullError:
        with contextlib.suppress(OSError):  # none there: the copy failed before it made the folder
            storage.storage_filesystem.delete_dir(target)
        raise


def restore_checkpoint(strategy: WorkerStrategy) -> TrainState | None:
    """Load the latest reported checkpoint into `strategy` (weights, optimizer, lr schedule) and return
    the saved position; None on a fresh start."""
    import ray.train

    checkpoint = ray.train.get_checkpoint()
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as folder:
        strategy.load(Path(folder))
        return TrainState.load(Path(folder))
