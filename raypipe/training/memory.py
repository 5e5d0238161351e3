"""What one rank actually holds of the model state: parameters, gradients and optimizer states.

Counted from the tensors themselves rather than from a formula, so the figure shows ZeRO's
partitioning as it happened (Rajbhandari et al. 2020: stage 3 splits all three across ranks; plain
data parallelism replicates them). As in the ZeRO paper, the fp32 master copy of the weights that
ZeRO keeps beside the working copy counts as optimizer state. Each storage is counted once, attributed
to the first category that reaches it, so a flat buffer and the per-parameter views into it are not
double counted.
"""

from __future__ import annotations

import resource
from collections.abc import Iterable, Iterator
from typing import Any

import torch

#: flat buffers of DeepSpeed's optimizer wrappers, by category (attribute names of
#: DeepSpeedZeroOptimizer_Stage3 and of BF16_Optimizer, which wraps bf16 training below stage 3)
_PARAM_BUFFERS = ("fp16_partitioned_groups_flat", "lp_param_buffer", "bf16_groups_flat")
_GRAD_BUFFERS = ("grad_partitions_flat_buffer", "averaged_gradients", "fp32_groups_gradients_flat")
_MASTER_BUFFERS = ("fp32_partitioned_groups_flat", "fp32_groups_flat_partition")


def _tensors(value: Any) -> Iterator[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _tensors(v)
    elif isinstance(value, list | tuple):
        for v in value:
            yield from _tensors(v)


def _buffers(optimizer: Any, names: Iterable[str]) -> Iterator[torch.Tensor]:
    for name in names:
        yield from _tensors(getattr(optimizer, name, None))


def _held_weights(param: torch.Tensor) -> torch.Tensor:
    """The weights a rank keeps between steps: its ZeRO-3 partition (`ds_tensor`), or the whole tensor
    for an unpartitioned parameter or one ZeRO-3 keeps whole (`ds_persist`, below the persistence
    threshold). ZeRO-3 also gathers full parameters transiently around each layer's forward and
    backward; that is working memory bounded by `stage3_max_live_parameters`, not model state."""
    if hasattr(param, "ds_tensor") and not getattr(param, "ds_persist", False):
        return param.ds_tensor
    return param.data


def _inner_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer under DeepSpeed's ZeRO wrapper (or the optimizer itself at stage 0)."""
    return getattr(optimizer, "optimizer", optimizer)


def model_state_bytes(module: Any, optimizer: Any) -> dict[str, int]:
    """Bytes of parameters, gradients and optimizer states held by this rank: `module`'s and those of
    `optimizer` (a torch optimizer or DeepSpeed's ZeRO wrapper of one). Call it after a backward and
    after at least one optimizer step, when all three exist."""
    params = list(module.parameters())
    flat_masters = list(_buffers(optimizer, _MASTER_BUFFERS))
    categories = {
        "params": [_held_weights(p) for p in params] + list(_buffers(optimizer, _PARAM_BUFFERS)),
        "grads": [p.grad for p in params if p.grad is not None] + [t.grad for t in flat_masters if t.grad is not None]
        + list(_buffers(optimizer, _GRAD_BUFFERS)),
        "optimizer": flat_masters + list(_tensors(list(_inner_optimizer(optimizer).state.values()))),
    }
    seen: set[int] = set()
    out: dict[str, int] = {}
    for name, tensors in categories.items():
        total = 0
        for t in tensors:
            storage = t.untyped_storage()
            if storage.nbytes() and storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
        out[name] = total
    out["total"] = sum(out.values())
    return out


def peak_memory_mib() -> float:
    """This process's peak memory: the CUDA allocator's peak on GPU, the resident-set peak on CPU."""
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        return torch.cuda.max_memory_allocated() / 2**20
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux reports KiB
