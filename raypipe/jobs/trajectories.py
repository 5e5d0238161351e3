"""`raypipe self-reasoning data`: Self-Reasoning's training trajectories (Algorithm 1;
raypipe.trajectories)."""

from __future__ import annotations

from typing import Any

from raypipe.config import RaypipeConfig
from raypipe.trajectories.dataset import SearcherFactory, write_trajectories


def run_trajectories(cfg: RaypipeConfig, searcher_factory: SearcherFactory | None = None) -> dict[str, Any]:
    """Trajectories of the processes `methods.self_reasoning` decodes with, into `trajectories.out_dir`;
    `searcher_factory` stands in for the index (tests)."""
    return write_trajectories(cfg.trajectories, cfg.methods.self_reasoning.processes, cfg.retrieval, cfg.world,
                              cfg.limits, cfg.ray, searcher_factory)
