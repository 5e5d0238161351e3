"""The critic's teacher a config names: the world's ground truth (`oracle`) or an OpenAI-compatible
server (`openai`), both `raypipe.critic.teachers.Teacher`s."""

from __future__ import annotations

from pathlib import Path

from raypipe.critic.teachers import Teacher
from raypipe.settings.teachers import TeacherConfig


def make_critic_teacher(cfg: TeacherConfig, work_dir: Path) -> Teacher:
    """The configured teacher; an HTTP teacher keeps its resumable label cache in `work_dir`."""
    if cfg.kind == "oracle":
        from raypipe.critic.oracle import CriticOracle

        return CriticOracle(error_rate=cfg.error_rate, seed=cfg.seed)
    from raypipe.critic.openai_teacher import OpenAITeacher

    return OpenAITeacher(cfg, cache_path=work_dir / "teacher_cache.jsonl")
