"""What one training run trains, as the one worker loop (`raypipe.training.loop`) sees it: the model, its
parameter groups, the batches of each epoch, the loss of a batch and the exported folder. The LMs'
task is `raypipe.training.lm_task`; the small encoders' share `raypipe.training.classifier`.

A task is built on the driver and pickled to every worker, so it holds plain settings only; what it
reads on a worker (a Ray Data shard, a parquet file) it reads in `epoch_batches`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, ClassVar

#: one epoch's micro-batches on this worker, in order: the same batches for the same epoch, always,
#: so a resumed worker can skip exactly the ones it had consumed
EpochBatches = Callable[[int], Iterable[Any]]


def model_device(model: Any) -> Any:
    """Where a (possibly wrapped) model's weights are: a task moves its batch there."""
    return next(model.parameters()).device


class TrainTask(ABC):
    """One kind of model's part in the worker loop."""

    #: what a step's size is counted in, in the metrics log (`tokens`, `rows`)
    unit: ClassVar[str] = "rows"

    @abstractmethod
    def load(self, base_model: str) -> tuple[Any, Any]:
        """(model, tokenizer) to train, from a local folder, with whatever it freezes frozen."""

    def param_groups(self, model: Any, weight_decay: float) -> list[dict[str, Any]]:
        """The optimizer's groups of trainable parameters: decay on matrices only; biases and norm gains
        are not regularized (the usual fine-tuning rule)."""
        trainable = [p for p in model.parameters() if p.requires_grad]
        return [{"params": [p for p in trainable if p.ndim >= 2], "weight_decay": weight_decay},
                {"params": [p for p in trainable if p.ndim < 2], "weight_decay": 0.0}]

    @abstractmethod
    def epoch_batches(self, rank: int, world: int) -> EpochBatches:
        """This worker's data: called once on the worker, before the first step."""

    @abstractmethod
    def loss(self, model: Any, tokenizer: Any, batch: Any) -> tuple[Any, int]:
        """(the scalar loss tensor of one micro-batch, its size in `unit`); inputs go to the model's
        device."""

    @abstractmethod
    def export(self, module: Any, state_dict: dict[str, Any], tokenizer: Any, folder: Path) -> None:
        """Write the trained model as the folder its users load, on rank 0: `module` as `load` built it,
        `state_dict` its whole weights (gathered where ranks hold shards)."""
