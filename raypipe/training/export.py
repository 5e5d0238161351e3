"""Export: the trained weights as an ordinary HF folder (consolidated weights + tokenizer).

Under ZeRO-3 no rank holds the whole model, so the weights are gathered one layer at a time onto
rank 0 (DeepSpeed's consolidated state dict, what HF Trainer uses too) and written with
``save_pretrained``; the tokenizer saved beside it carries the reflection tokens, so
``raypipe.models.load_model`` and the decoding engines read the folder as they read any checkpoint.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from raypipe.models.prompt_format import record_format
from raypipe.prompts import PromptFormatName
from raypipe.training.target_loss import strip_prefix, unwrap

logger = logging.getLogger(__name__)


def consolidated_state_dict(engine: Any, rank: int) -> dict[str, Any] | None:
    """Collective under ZeRO-3: the full state dict on rank 0 (with the HF model's own keys), None
    elsewhere."""
    if engine.zero_optimization_partition_weights():
        state_dict = engine._zero3_consolidated_16bit_state_dict()
    else:
        state_dict = engine.module.state_dict() if rank == 0 else None
    return strip_prefix(state_dict) if state_dict is not None else None


def export_hf_folder(engine: Any, tokenizer: Any, out: Path, rank: int, prompt_format: PromptFormatName) -> None:
    """Collective: every rank must call it; rank 0 writes `out`, with the prompt format the model was
    trained in (`raypipe.models.prompt_format`)."""
    state_dict = consolidated_state_dict(engine, rank)
    if rank != 0:
        return
    out.mkdir(parents=True, exist_ok=True)
    unwrap(engine.module).save_pretrained(out, state_dict=state_dict, safe_serialization=True)
    tokenizer.save_pretrained(out)
    record_format(out, prompt_format)
    logger.info("exported %d tensors to %s", len(state_dict), out)
