"""Generation engines behind one interface (ARCHITECTURE.md §7): vLLM wherever it imports (its CPU build
or the official GPU wheel), HF transformers on any device."""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

from raypipe.inference.engines.base import Engine, Generation, GenerationParams, GroupProbs
from raypipe.settings.models import EngineConfig, EngineKind

logger = logging.getLogger(__name__)

__all__ = ["Engine", "Generation", "GenerationParams", "GroupProbs", "engine_kind", "make_engine"]


def vllm_installed() -> bool:
    """Whether a vllm module (either build) is importable, found without importing it (seconds)."""
    return importlib.util.find_spec("vllm") is not None


def engine_kind(requested: EngineKind) -> EngineKind:
    """`auto` -> vllm where vllm is installed, else hf (a model vLLM refuses still falls back in
    `make_engine`)."""
    if requested != "auto":
        return requested
    return "vllm" if vllm_installed() else "hf"


def make_engine(model_path: str | Path, cfg: EngineConfig, device: str | None = None) -> Engine:
    """The engine `cfg.kind` names (or picks, for `auto`), loaded on `model_path` with its weights in
    the dtype `cfg.precision` picks. `device` pins the HF engine's device (default: CUDA when visible).

    `auto` falls back to HF, with a warning that says why, when vLLM refuses the model (a head size its
    CPU attention backend lacks, a tokenizer without the reflection tokens); `vllm` raises instead.
    """
    from raypipe.models.device import decoding_dtype, pick_device

    kind = engine_kind(cfg.kind)
    dtype = decoding_dtype(cfg.precision, device or pick_device())
    if kind == "vllm":
        from raypipe.inference.engines.vllm import VLLMEngine

        try:
            engine: Engine = VLLMEngine(model_path, cfg, dtype=dtype)
        except Exception as exc:
            if cfg.kind == "vllm":
                raise
            logger.warning("vLLM cannot run %s (%s: %s); the model runs on HF transformers", model_path,
                           type(exc).__name__, str(exc).splitlines()[0] if str(exc) else "")
        else:
            logger.info("generation engine: vllm (%s) on %s", dtype, model_path)
            return engine
    from raypipe.inference.engines.hf import HFEngine

    logger.info("generation engine: hf (%s) on %s", dtype, model_path)
    return HFEngine(model_path, batch_size=cfg.batch_size, device=device, dtype=dtype)
