"""Where and in what precision a model runs: chosen from the hardware so one config serves a laptop
and a GPU node alike."""

from __future__ import annotations

import contextlib
import platform
from pathlib import Path

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


def cpu_kind() -> str:
    """The CPU's model name and the widest matrix instructions it has (AMX, AVX512-BF16, AVX-512, AVX2):
    what a timing recorded on it needs beside it, since the same job runs 1.5-3x apart across them."""
    name = ""
    with contextlib.suppress(OSError):  # no /proc/cpuinfo: not Linux
        name = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                     if line.startswith("model name")), "")
    isa = ("AMX" if torch.cpu._is_amx_tile_supported() else "AVX512-BF16" if torch.cpu._is_avx512_bf16_supported()
           else "AVX-512" if torch.cpu._is_avx512_supported() else "AVX2" if torch.cpu._is_avx2_supported()
           else "no AVX2")
    return f"{name or platform.processor() or platform.machine()}, {isa}"


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
