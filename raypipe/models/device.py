"""Where and in what precision a model runs: chosen from the hardware so one config serves a laptop
and a GPU node alike."""

from __future__ import annotations

import torch


def pick_device() -> str:
    """`cuda` when a GPU is visible, else `cpu`."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(device: str) -> torch.dtype:
    """bf16 on GPUs that support it (the paper trains and serves in bf16); fp16 on older GPUs, whose
    bf16 would be emulated; float32 on CPU, where half precision is slow and lossy."""
    if not device.startswith("cuda"):
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
