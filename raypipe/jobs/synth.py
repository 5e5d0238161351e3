"""`raypipe data synth`: the synthetic knowledge world (raypipe.data.world)."""

from __future__ import annotations

from typing import Any

from raypipe.config import RaypipeConfig
from raypipe.data.world import synthesize


def run_synth(cfg: RaypipeConfig) -> dict[str, Any]:
    """Write the world of `world` (instances, passages, web pages, eval sets); a finished one is kept."""
    return synthesize(cfg.world)
