"""The tiny base model every demo model starts from (ARCHITECTURE.md §4), built by `raypipe models build`
(raypipe.jobs.models)."""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

from raypipe.settings.models import TinyModelConfig

logger = logging.getLogger(__name__)


def build_base_model(tiny: TinyModelConfig, world_dir: str) -> dict[str, Any]:
    """Build the tokenizer and tiny Llama of `tiny` on the texts of the world at `world_dir`; skipped
    when already built."""
    from raypipe.models import build_tiny_model, load_tokenizer, world_texts

    out = Path(tiny.out_dir)
    done = out / "_SUCCESS"
    start = time.perf_counter()
    skipped = done.exists()
    if not skipped:
        texts = world_texts(world_dir, limit=tiny.tokenizer_train_texts)
        build_tiny_model(tiny, texts, out)
        done.touch()
    tokenizer = load_tokenizer(out)
    n_params = count_parameters(out)
    return {
        "model_dir": str(out),
        "skipped (already built)": skipped,
        "vocab_size": len(tokenizer),
        "parameters": n_params,
        "seconds": round(time.perf_counter() - start, 1),
    }


def count_parameters(model_dir: Path) -> int:
    """Parameter count from the safetensors headers, without loading the model."""
    from safetensors import safe_open

    total = 0
    for f in sorted(model_dir.glob("*.safetensors")):
        with safe_open(str(f), framework="pt") as st:
            for key in st.keys():  # noqa: SIM118 - safe_open handles are not iterable
                total += math.prod(st.get_slice(key).get_shape())
    return total
