"""Where and in what precision a model runs: chosen from the hardware so one config serves a laptop
and a GPU node alike."""

from __future__ import annotations

import torch

from raypipe.settings.models import DecodePrecision


def pick_device() -> str:
    """`cuda` when a GPU is visible, else `cpu`."""
    return "cuda" if torch.cuda.is_available() else "cpu"


def pick_dtype(device: str) -> torch.dtype:
    """bf16 on GPUs that support it (the paper trains and serves in bf16); fp16 on older GPUs, whose
    bf16 would be emulated; float32 on CPU, where half precision is slow and lossy."""
    if not device.startswith("cuda"):
        return torch.float32
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def cpu_computes_bf16() -> bool:
    """Whether this CPU has native bf16 matrix instructions (AVX512-BF16 or AMX tiles)."""
    # torch exposes these checks only as torch.cpu's underscore helpers (2.13); they read CPUID, which is
    # what oneDNN itself dispatches on
    return bool(torch.cpu._is_avx512_bf16_supported() or torch.cpu._is_amx_tile_supported())


def decoding_dtype(precision: DecodePrecision, device: str) -> torch.dtype:
    """The weights' dtype for decoding. `auto`: `pick_dtype` on a GPU; on a CPU, bf16 where it multiplies
    bf16 natively, else fp32 (emulated bf16 ran 5.8x slower than fp32 on an AVX2-only CPU)."""
    if precision == "fp32":
        return torch.float32
    if precision == "bf16":
        return torch.bfloat16
    if device.startswith("cuda"):
        return pick_dtype(device)
    return torch.bfloat16 if cpu_computes_bf16() else torch.float32
