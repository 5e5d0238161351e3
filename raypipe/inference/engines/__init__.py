"""Generation engines behind one interface (ARCHITECTURE.md, "Engines"): HF transformers on CPU or GPU,
vLLM on GPU."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from raypipe.errors import ConfigError
from raypipe.inference.engines.base import Engine, Generation, GenerationParams, GroupProbs
from raypipe.settings.models import EngineConfig

logger = logging.getLogger(__name__)

__all__ = ["Engine", "Generation", "GenerationParams", "GroupProbs", "engine_kind", "make_engine"]


def engine_kind(requested: str, device: str | None = None) -> str:
    """`auto` -> vllm when a GPU is visible (and not declined with device="cpu") and vllm is
    importable, else hf."""
    if requested != "auto":
        return requested
    import torch  # here, not at the top: the engine types are imported by processes that hold no model

    if device != "cpu" and torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None:
        return "vllm"
    if device is None and torch.cuda.is_available():
        logger.warning("CUDA is available but vLLM is not installed: the model runs on transformers")
    return "hf"


def make_engine(model_path: str | Path, cfg: EngineConfig, device: str | None = None) -> Engine:
    """The engine `cfg.kind` names (or picks, for `auto`), loaded on `model_path`; `device` pins the
    HF engine's device (default: CUDA when visible), `cfg.precision` its weights' dtype."""
    kind = engine_kind(cfg.kind, device)
    logger.info("generation engine: %s on %s", kind, model_path)
    if kind == "vllm":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError("engine.kind=vllm needs a CUDA GPU; use engine.kind=hf or auto")
        from raypipe.inference.engines.vllm import VLLMEngine

        return VLLMEngine(model_path, gpu_memory_utilization=cfg.gpu_memory_utilization)
    from raypipe.inference.engines.hf import HFEngine
    from raypipe.models.device import decoding_dtype, pick_device

    dtype = decoding_dtype(cfg.precision, device or pick_device())
    return HFEngine(model_path, batch_size=cfg.batch_size, device=device, dtype=dtype)
