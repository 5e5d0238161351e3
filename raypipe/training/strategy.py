"""How a training worker wraps, steps and checkpoints its model: DeepSpeed ZeRO for the LMs, plain torch
under Ray Train's DDP for the small encoders (the encoder critic, CRAG's retrieval evaluator).

The one worker loop (`raypipe.training.loop`) builds the optimizer (torch AdamW, linear warmup and
decay: Self-RAG App. B.1, CRAG App. B.3) and hands it with the model to a strategy; the strategy is
what differs between a 135M-parameter LM sharded across ranks and a 22M-parameter encoder every rank
holds whole. The shape is OpenRLHF's `DeepspeedStrategy`: one object per worker that owns the wrapped
model, `backward`, `step`, save and load.

A strategy is built on the driver from plain settings (it is pickled to the workers) and comes alive
in `prepare` on the worker. A checkpoint folder holds the strategy's own state (`ds/`: each rank's
ZeRO partition; `weights.pt`: the whole model, the optimizer and the schedule) beside the loop's
`train_state.json`; loading a folder the other strategy wrote fails naming both.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raypipe.errors import RaypipeError
from raypipe.settings.training import Precision
from raypipe.training.precision import worker_autocasts

#: DeepSpeed checkpoint tag (subfolder) inside each checkpoint directory
DS_TAG = "ds"
#: the plain-torch strategy's state inside each checkpoint directory
TORCH_STATE = "weights.pt"


def _linear_schedule(optimizer: Any, warmup_steps: int, total_steps: int) -> Any:
    from transformers import get_linear_schedule_with_warmup

    return get_linear_schedule_with_warmup(optimizer, warmup_steps, total_steps)


def _checkpoint_error(folder: Path, wanted: str, strategy: str) -> RaypipeError:
    found = sorted(p.name for p in folder.iterdir())
    return RaypipeError(f"checkpoint {folder} holds no {wanted} ({strategy}'s state); it holds {found}: written "
                        f"by another kind of run? Delete the run's checkpoints folder to start over")


class WorkerStrategy(ABC):
    """One worker's wrapped model: what the loss runs on, how a micro-batch's gradients reach the
    weights, what a checkpoint holds."""

    #: what the loss runs on (the DeepSpeed engine, the DDP-wrapped model); set by `prepare`
    model: Any

    @abstractmethod
    def prepare(self, model: Any, optimizer: Any, warmup_steps: int, total_steps: int, use_gpu: bool) -> None:
        """Wrap `model` and `optimizer` (over its trainable parameters) with the linear schedule."""

    @abstractmethod
    def backward(self, loss: Any) -> None:
        """Gradients of one micro-batch's loss, accumulated until the step boundary."""

    @abstractmethod
    def step(self, boundary: bool) -> None:
        """After every micro-batch; at a `boundary` (the last micro-batch of an optimizer step) the
        gradients are clipped and applied, the schedule advanced and the gradients cleared."""

    @abstractmethod
    def lr(self) -> float:
        """The learning rate the next optimizer step applies."""

    @abstractmethod
    def save(self, folder: Path, rank: int) -> None:
        """Collective: this rank's share of the model, optimizer and schedule state into `folder`."""

    @abstractmethod
    def load(self, folder: Path) -> None:
        """Restore what `save` wrote."""

    @abstractmethod
    def full_state_dict(self, rank: int) -> dict[str, Any] | None:
        """Collective: the whole model's weights on rank 0 (gathered, where ranks hold shards), None
        elsewhere."""

    @abstractmethod
    def state_bytes(self) -> dict[str, int]:
        """Bytes of parameters, gradients and optimizer states this rank holds (`training.memory`)."""

    @property
    @abstractmethod
    def module(self) -> Any:
        """The model as the task built it, unwrapped."""

    @property
    @abstractmethod
    def precision(self) -> str:
        """What the worker computes in: `fp32`, `bf16` or `autocast`."""

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The context the loss is computed in."""
        return contextlib.nullcontext()


@dataclass
class DeepSpeedStrategy(WorkerStrategy):
    """DeepSpeed ZeRO (`training.*.zero_stage`, the JSON template `deepspeed_config` filled on the
    driver). bf16 autocast goes through DeepSpeed's own `torch_autocast` section, which wraps the
    engine's forward; gradient accumulation and clipping are the engine's."""

    ds_config: dict[str, Any]
    precision_setting: Precision
    bf16_weights: bool

    def prepare(self, model: Any, optimizer: Any, warmup_steps: int, total_steps: int, use_gpu: bool) -> None:
        import deepspeed

        from raypipe.runtime import use_installed_ninja

        use_installed_ninja()
        self._autocast = worker_autocasts(self.precision_setting, use_gpu)
        config = self.ds_config
        if self._autocast:
            config = {**config, "torch_autocast": {"enabled": True, "dtype": "bfloat16"}}
        self.model, *_ = deepspeed.initialize(
            model=model, optimizer=optimizer, config=config, dist_init_required=False,
            lr_scheduler=lambda opt: _linear_schedule(opt, warmup_steps, total_steps))

    def backward(self, loss: Any) -> None:
        self.model.backward(loss)

    def step(self, boundary: bool) -> None:
        self.model.step()  # the engine counts micro-batches and steps the optimizer at its own boundary

    def lr(self) -> float:
        return self.model.get_lr()[0]

    def save(self, folder: Path, rank: int) -> None:
        self.model.save_checkpoint(str(folder), tag=DS_TAG)

    def load(self, folder: Path) -> None:
        if not (folder / DS_TAG).is_dir():
            raise _checkpoint_error(folder, f"{DS_TAG}/", "DeepSpeed")
        self.model.load_checkpoint(str(folder), tag=DS_TAG)

    def full_state_dict(self, rank: int) -> dict[str, Any] | None:
        if self.model.zero_optimization_partition_weights():
            return self.model._zero3_consolidated_16bit_state_dict()
        return self.model.module.state_dict() if rank == 0 else None

    def state_bytes(self) -> dict[str, int]:
        from raypipe.training.memory import model_state_bytes

        return model_state_bytes(self.model.module, self.model.optimizer)

    @property
    def module(self) -> Any:
        return self.model.module

    @property
    def precision(self) -> str:
        return "autocast" if self._autocast else "bf16" if self.bf16_weights else "fp32"


@dataclass
class TorchStrategy(WorkerStrategy):
    """Plain torch: the model whole on every rank under Ray Train's DDP (`prepare_model`), torch's
    autocast around the loss, gradients clipped to `grad_clip`. For models small enough that sharding
    them would cost more in communication than it saves in memory. Weights stay fp32: `bf16` asks for
    bf16 products, which autocast gives."""

    precision_setting: Precision
    grad_clip: float
    grad_accum: int = 1

    def prepare(self, model: Any, optimizer: Any, warmup_steps: int, total_steps: int, use_gpu: bool) -> None:
        from ray.train.torch import prepare_model

        self.model = prepare_model(model)
        self._module = model
        self._optimizer = optimizer
        self._scheduler = _linear_schedule(optimizer, warmup_steps, total_steps)
        self._params = [p for p in model.parameters() if p.requires_grad]
        self._device_type = next(model.parameters()).device.type
        setting = "autocast" if self.precision_setting == "bf16" else self.precision_setting
        self._autocast = worker_autocasts(setting, self._device_type == "cuda")

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        import torch

        return torch.autocast(self._device_type, dtype=torch.bfloat16, enabled=self._autocast)

    def backward(self, loss: Any) -> None:
        (loss / self.grad_accum if self.grad_accum > 1 else loss).backward()

    def step(self, boundary: bool) -> None:
        import torch

        if not boundary:
            return
        torch.nn.utils.clip_grad_norm_(self._params, self.grad_clip)
        self._optimizer.step()
        self._scheduler.step()
        self._optimizer.zero_grad()

    def lr(self) -> float:
        return self._scheduler.get_last_lr()[0]

    def save(self, folder: Path, rank: int) -> None:
        import torch

        if rank == 0:
            torch.save({"model": self._module.state_dict(), "optimizer": self._optimizer.state_dict(),
                        "scheduler": self._scheduler.state_dict()}, folder / TORCH_STATE)

    def load(self, folder: Path) -> None:
        import torch

        if not (folder / TORCH_STATE).is_file():
            raise _checkpoint_error(folder, TORCH_STATE, "plain torch")
        saved = torch.load(folder / TORCH_STATE, map_location="cpu")
        self._module.load_state_dict(saved["model"])
        self._optimizer.load_state_dict(saved["optimizer"])
        self._scheduler.load_state_dict(saved["scheduler"])

    def full_state_dict(self, rank: int) -> dict[str, Any] | None:
        return self._module.state_dict() if rank == 0 else None

    def state_bytes(self) -> dict[str, int]:
        from raypipe.training.memory import model_state_bytes

        return model_state_bytes(self._module, self._optimizer)

    @property
    def module(self) -> Any:
        return self._module

    @property
    def precision(self) -> str:
        return "autocast" if self._autocast else "fp32"
