"""What a training worker computes in: fp32, bf16 throughout (weights, gradients, DeepSpeed's bf16
optimizer), or fp32 weights with bf16 matrix products under `torch.autocast` (mixed precision).

`auto` follows the hardware of the workers, not of the driver, which often runs on a CPU-only head
node: bf16 on GPU workers (Self-RAG App. B.1); on CPU workers, autocast where the CPU multiplies bf16
natively (AVX512-BF16 or AMX), else fp32: there autocast speeds a step up, and on a CPU without
those instructions oneDNN emulates bf16 at a fraction of fp32's speed (figures: docs/training.md,
"Precision"). Whole-model bf16 stays off on CPU: fp32 master weights keep small updates that bf16
weights would round away.
"""

from __future__ import annotations

from raypipe.models.device import cpu_computes_bf16
from raypipe.settings.training import Precision


def trains_in_bf16(precision: Precision, use_gpu: bool) -> bool:
    """Weights, gradients and optimizer in bf16 (decided on the driver from the cluster's GPUs)."""
    return use_gpu if precision == "auto" else precision == "bf16"


def worker_autocasts(precision: Precision, use_gpu: bool) -> bool:
    """Whether this worker runs its forward and backward under bf16 autocast; called on the worker,
    since the CPU that decides `auto` is the worker's."""
    if precision == "auto":
        return not use_gpu and cpu_computes_bf16()
    return precision == "autocast"
