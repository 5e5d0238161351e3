"""Local models: tiny Llama + BPE tokenizer with reflection tokens, and loading of any local HF folder.

The names below load their module on first use (PEP 562), so that `from raypipe.models import
load_tokenizer` does not import torch: a process that only tokenizes (a Serve Decoder replica) then
starts in a couple of seconds instead of ten on 2 cores.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from raypipe.models.device import pick_device, pick_dtype
    from raypipe.models.folder import load_tokenizer
    from raypipe.models.load import load_model, minilm_path
    from raypipe.models.tiny import build_tiny_model, world_texts
    from raypipe.models.tokenizer import group_token_ids, reflection_token_ids, train_tokenizer

#: exported name -> the submodule that defines it
_HOMES = {
    "build_tiny_model": "tiny",
    "group_token_ids": "tokenizer",
    "load_model": "load",
    "load_tokenizer": "folder",
    "minilm_path": "load",
    "pick_device": "device",
    "pick_dtype": "device",
    "reflection_token_ids": "tokenizer",
    "train_tokenizer": "tokenizer",
    "world_texts": "tiny",
}

__all__ = ["build_tiny_model", "group_token_ids", "load_model", "load_tokenizer", "minilm_path", "pick_device",
           "pick_dtype", "reflection_token_ids", "train_tokenizer", "world_texts"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_HOMES[name]}"), name)


def __dir__() -> list[str]:
    return __all__
