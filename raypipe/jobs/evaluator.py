"""`raypipe crag train-evaluator`: CRAG's retrieval evaluator (CRAG §4.2; raypipe.evaluator_training)."""

from __future__ import annotations

from typing import Any

from raypipe.config import RaypipeConfig
from raypipe.evaluator_training.train import train_evaluator


def run_train_evaluator(cfg: RaypipeConfig) -> dict[str, Any]:
    """Pairs from the world, the cross-encoder on Ray Train, the held-out report at `methods.crag`'s
    thresholds; the folder `crag.train.out_dir`."""
    crag = cfg.methods.crag
    return train_evaluator(cfg.crag.train, cfg.world, cfg.retrieval, cfg.crag.evaluator, crag.upper, crag.lower,
                           cfg.ray)
