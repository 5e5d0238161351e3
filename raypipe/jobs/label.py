"""`raypipe label`: the critic data set D_critic (Self-RAG §3.2.1; raypipe.critic.dataset)."""

from __future__ import annotations

from typing import Any

from raypipe.config import RaypipeConfig
from raypipe.critic.dataset import write_critic_data


def run_label(cfg: RaypipeConfig) -> dict[str, Any]:
    """Label a sample with the configured teacher and write D_critic to `label.out_dir`."""
    return write_critic_data(cfg.label, cfg.retrieval, cfg.segmentation, cfg.limits)
