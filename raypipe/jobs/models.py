"""`raypipe models build` (the tiny base model) and `raypipe models import` (a real pretrained LM)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from raypipe.config import RaypipeConfig
from raypipe.models.base_model import build_base_model
from raypipe.models.importer import import_model


def run_build_models(cfg: RaypipeConfig) -> dict[str, Any]:
    """The tokenizer and tiny Llama of `tiny_model`, trained on the world's texts; skipped when built."""
    return build_base_model(cfg.tiny_model, cfg.world.out_dir)


def run_import_model(cfg: RaypipeConfig) -> dict[str, Any]:
    """The import of `lm_import` as an HF folder with the reflection tokens, as a summary table."""
    start = time.perf_counter()
    manifest, skipped = import_model(cfg.lm_import)
    return {
        "model_dir": str(Path(cfg.lm_import.out_dir)), "source": manifest["source_file"],
        "source sha256": manifest["source_sha256"], "skipped (manifest matches)": skipped,
        "parameters": manifest["parameters"], "layers": manifest["layers"], "vocab_size": manifest["vocab_size"],
        "added tokens": len(manifest["added_tokens"]), "dtype": manifest["dtype"], "eos": manifest["eos_token"],
        "seconds": round(time.perf_counter() - start, 1),
    }
