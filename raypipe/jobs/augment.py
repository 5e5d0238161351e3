"""`raypipe augment`: Algorithm 3 over the instance shards, D_gen written (raypipe.augment)."""

from __future__ import annotations

from typing import Any

from raypipe.augment.pipeline import AugmentSections, augment
from raypipe.config import RaypipeConfig


def augment_sections(cfg: RaypipeConfig) -> AugmentSections:
    """The sections of `cfg` augmentation reads."""
    return AugmentSections(cfg.augment, cfg.retrieval, cfg.segmentation, cfg.limits, cfg.label.teacher)


def run_augment(cfg: RaypipeConfig) -> dict[str, Any]:
    """Augment `augment.instances` into `augment.out_dir`, resuming a stopped run at its first
    unfinished shard; the collapse check's report in the stats."""
    return augment(augment_sections(cfg), cfg.ray, cfg.progress_every_s)
