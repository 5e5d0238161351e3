"""`raypipe train critic|generator|self-reasoning`: the training job. An LM (either critic kind's LM,
the generator, the Self-Reasoning model) trains with DeepSpeed (raypipe.training.trainer); the encoder
critic (`training.critic.kind: encoder`) as a small classifier, like CRAG's evaluator, on plain torch
(raypipe.critic.encoder_train); both through the one worker loop (raypipe.training.loop)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from raypipe.config import RaypipeConfig
from raypipe.critic.encoder_train import train_encoder_critic
from raypipe.errors import ConfigError
from raypipe.training.progress import training_progress
from raypipe.training.trainer import WHICH, train_lm


def run_train(cfg: RaypipeConfig, which: str) -> dict[str, Any]:
    """Train `training.<which>` of `cfg` and export it to its `out_dir`, its steps followed on stderr
    (a bar on a terminal, a line every `progress_every_s` seconds into a pipe or a job's log)."""
    if which not in WHICH:
        raise ConfigError(f"train: expected one of {WHICH}, got {which!r}")
    section = getattr(cfg.training, which)
    with training_progress(Path(section.out_dir) / "logs", f"{which} training", cfg.progress_every_s):
        if which == "critic" and cfg.training.critic.kind == "encoder":
            return train_encoder_critic(cfg.training.critic, cfg.ray)
        return train_lm(section, which, cfg.ray)
