"""`raypipe train critic|generator|self-reasoning`: the training job. An LM (either critic kind's LM,
the generator, the Self-Reasoning model) trains with DeepSpeed (raypipe.training.trainer); the encoder
critic (`training.critic.kind: encoder`) as a small classifier, like CRAG's evaluator, on plain torch
(raypipe.critic.encoder_train); both through the one worker loop (raypipe.training.loop)."""

from __future__ import annotations

from typing import Any

from raypipe.config import RaypipeConfig
from raypipe.critic.encoder_train import train_encoder_critic
from raypipe.errors import ConfigError
from raypipe.training.trainer import WHICH, train_lm


def run_train(cfg: RaypipeConfig, which: str) -> dict[str, Any]:
    """Train `training.<which>` of `cfg` and export it to its `out_dir`."""
    if which not in WHICH:
        raise ConfigError(f"train: expected one of {WHICH}, got {which!r}")
    if which == "critic" and cfg.training.critic.kind == "encoder":
        return train_encoder_critic(cfg.training.critic, cfg.ray)
    return train_lm(getattr(cfg.training, which), which, cfg.ray)
