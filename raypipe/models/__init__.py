"""Local models: tiny Llama + BPE tokenizer with reflection tokens, and loading of any local HF folder."""

from raypipe.models.device import pick_device, pick_dtype
from raypipe.models.load import load_model, load_tokenizer, minilm_path
from raypipe.models.tiny import build_tiny_model, world_texts
from raypipe.models.tokenizer import group_token_ids, reflection_token_ids, train_tokenizer

__all__ = [
    "build_tiny_model",
    "group_token_ids",
    "load_model",
    "load_tokenizer",
    "minilm_path",
    "pick_device",
    "pick_dtype",
    "reflection_token_ids",
    "train_tokenizer",
    "world_texts",
]
