"""`raypipe crag train-evaluator`: CRAG's retrieval evaluator (CRAG §4.2; raypipe.evaluator_training)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raypipe.config import RaypipeConfig
from raypipe.evaluator_training.train import train_evaluator
from raypipe.training.progress import training_progress


def run_train_evaluator(cfg: RaypipeConfig) -> dict[str, Any]:
    """Pairs from the world, the cross-encoder on Ray Train, the held-out report at `methods.crag`'s
    thresholds; the folder `crag.train.out_dir`. Its steps are followed on stderr as `raypipe train`'s."""
    crag = cfg.methods.crag
    with training_progress(Path(cfg.crag.train.out_dir) / "logs", "CRAG evaluator training", cfg.progress_every_s):
        return train_evaluator(cfg.crag.train, cfg.world, cfg.retrieval, cfg.crag.evaluator, crag.upper,
                               crag.lower, cfg.ray)
