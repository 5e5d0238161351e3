"""Generation engines behind one interface (DESIGN §3): HF transformers on CPU or GPU, vLLM on GPU."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import torch

from raypipe.config import DecodeConfig
from raypipe.errors import ConfigError
from raypipe.inference.engines.base import Engine, Generation, GenerationParams, GroupProbs

logger = logging.getLogger(__name__)

__all__ = ["Engine", "Generation", "GenerationParams", "GroupProbs", "engine_kind", "make_engine"]


def engine_kind(requested: str) -> str:
    """`auto` -> vllm when a GPU is visible and vllm is importable, else hf."""
    if requested != "auto":
        return requested
    if torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None:
        return "vllm"
    return "hf"


def make_engine(model_path: str | Path, cfg: DecodeConfig) -> Engine:
    """The engine `cfg.engine` names (or picks, for `auto`), loaded on `model_path`."""
    kind = engine_kind(cfg.engine)
    logger.info("generation engine: %s on %s", kind, model_path)
    if kind == "vllm":
        if not torch.cuda.is_available():
            raise ConfigError("decode.engine=vllm needs a CUDA GPU; use decode.engine=hf or auto")
        from raypipe.inference.engines.vllm import VLLMEngine

        return VLLMEngine(model_path, gpu_memory_utilization=cfg.gpu_memory_utilization)
    from raypipe.inference.engines.hf import HFEngine

    return HFEngine(model_path, batch_size=cfg.engine_batch_size)
