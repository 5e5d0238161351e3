"""Small pretrained-encoder classifiers fine-tuned on Ray Train: CRAG's retrieval evaluator and the
encoder critic are `ClassifierTask`s (how the model is loaded, the loss on a batch of rows, how it is
exported) run by the one worker loop (`raypipe.training.loop`) with the plain-torch strategy.

The models are small (22M parameters), so they train as plain PyTorch under Ray Train's DDP
(`TorchStrategy`) rather than DeepSpeed, through the one harness every training job shares
(`raypipe.training.harness`). The rows are read whole by every worker and dealt by a shuffle seeded
per epoch; the checkpoints carry the data position, so a restarted worker group continues at the same
step on the same batches.

A run's checkpoints (Ray Train run storage under `<out>/checkpoints/<run name>/`) hold the weights,
the optimizer and scheduler state and the position, every `checkpoint_every` steps and at each
epoch's end; the last one also holds the exported folder, which the harness copies to `out`. Rank 0
writes one JSON line per step to `<out>/logs/<run name>.metrics.jsonl` (what the demo's progress
counter reads).
"""

from __future__ import annotations

import math
import random
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raypipe.settings.training import Precision
from raypipe.settings.workers import RayTrainWorkers
from raypipe.training.batching import SIZE_WINDOW_BATCHES, size_sorted_batches
from raypipe.training.finished import CHECKPOINTS_DIR
from raypipe.training.harness import choose_gpu, fit_and_export
from raypipe.training.task import EpochBatches, TrainTask


class ClassifierTask(ABC):
    """What one kind of classifier brings to the loop. Instances travel to the Ray Train workers
    (pickled), so they hold plain settings only."""

    @abstractmethod
    def load(self, base_model: str) -> tuple[Any, Any]:
        """(model, tokenizer) to fine-tune, from a local folder, with whatever it freezes frozen."""

    @abstractmethod
    def loss(self, model: Any, tokenizer: Any, rows: list[dict[str, Any]]) -> Any:
        """The scalar loss tensor of one batch of data rows (inputs go to the model's device)."""

    def row_size(self, row: dict[str, Any]) -> int | None:
        """A cheap measure of a row's input length, or None. A task that gives one has its batches
        formed from rows of similar size (`epoch_batches`), so less of each batch is padding."""
        return None

    def export(self, model: Any, tokenizer: Any, folder: Path) -> None:
        """Write the trained model as the folder its users load (an HF folder here)."""
        model.save_pretrained(folder, safe_serialization=True)
        tokenizer.save_pretrained(folder)


@dataclass(frozen=True)
class ClassifierTraining(TrainTask):
    """A classifier on the parquet rows at `data`, read whole by every worker, in batches of
    `batch_size` rows dealt by a shuffle seeded with `seed` + epoch."""

    classifier: ClassifierTask
    data: str
    batch_size: int
    seed: int

    def load(self, base_model: str) -> tuple[Any, Any]:
        return self.classifier.load(base_model)

    def param_groups(self, model: Any, weight_decay: float) -> list[dict[str, Any]]:
        """Every trainable tensor decays, biases and norm gains included: the rule these encoders'
        settings were chosen under (docs/results/critic.md, crag.md)."""
        return [{"params": [p for p in model.parameters() if p.requires_grad], "weight_decay": weight_decay}]

    def epoch_batches(self, rank: int, world: int) -> EpochBatches:
        import pyarrow.parquet as pq

        rows = pq.read_table(self.data).to_pylist()
        given = [self.classifier.row_size(row) for row in rows]
        sizes = None if any(size is None for size in given) else [int(size) for size in given]
        return lambda epoch: epoch_batches(rows, epoch, rank, world, self.batch_size, self.seed, sizes)

    def loss(self, model: Any, tokenizer: Any, batch: Any) -> tuple[Any, int]:
        return self.classifier.loss(model, tokenizer, batch), len(batch)

    def export(self, module: Any, state_dict: dict[str, Any], tokenizer: Any, folder: Path) -> None:
        """Plain torch holds the whole model on rank 0, so `module` is what is saved."""
        self.classifier.export(module, tokenizer, folder)


@dataclass(frozen=True)
class ClassifierRun:
    """The schedule of one run, filled from the job's config section; the workers, devices and failure
    policy come from the section itself (`RayTrainWorkers`)."""

    name: str
    epochs: float
    lr: float
    batch_size: int
    warmup_ratio: float
    weight_decay: float
    checkpoint_every: int
    seed: int
    grad_clip: float = 1.0
    #: `training.*.precision` (raypipe.training.precision); weights stay fp32 whatever it says
    precision: Precision = "fp32"
    log_every: int = 50


def epoch_batches(rows: list[dict[str, Any]], epoch: int, rank: int, world: int, batch_size: int,
                  seed: int, sizes: list[int] | None = None) -> list[list[dict[str, Any]]]:
    """This rank's batches of one epoch: a shuffle seeded by seed + epoch, padded with its own first
    rows to a multiple of `world` (as torch's DistributedSampler pads) and dealt round-robin, so every
    rank has the same number of batches and a resumed worker sees the same batches in the same order.
    With `sizes` (one per row), each window of SIZE_WINDOW_BATCHES batches is sorted by size before it
    is cut, and the batches are shuffled again (`raypipe.training.batching`)."""
    rng = random.Random(seed + epoch)
    order = list(range(len(rows)))
    rng.shuffle(order)
    order += order[:(-len(order)) % world]
    mine = order[rank::world]
    if sizes is None:
        batches = [mine[b:b + batch_size] for b in range(0, len(mine), batch_size)]
    else:
        window = batch_size * SIZE_WINDOW_BATCHES
        batches = [batch for w in range(0, len(mine), window)
                   for batch in size_sorted_batches(mine[w:w + window], sizes.__getitem__, batch_size)]
        rng.shuffle(batches)
    return [[rows[i] for i in batch] for batch in batches]


def steps_per_epoch(n_rows: int, world: int, batch_size: int) -> int:
    return max(1, math.ceil(math.ceil(n_rows / world) / batch_size))


def fit_classifier(task: ClassifierTask, run: ClassifierRun, settings: RayTrainWorkers, base_model: str,
                   data: Path, out: Path) -> dict[str, Any]:
    """Train `task` from `base_model` on the parquet rows at `data` (a file or a folder of parts) on
    `settings.num_workers` Ray Train workers and export the model to `out`; returns the run's summary
    and its per-step history."""
    import pyarrow.dataset as ds

    from raypipe.training.loop import LoopPlan, train_loop_per_worker
    from raypipe.training.strategy import TorchStrategy

    use_gpu = choose_gpu(settings)
    n_rows = ds.dataset(data, format="parquet").count_rows()
    per_epoch = steps_per_epoch(n_rows, settings.num_workers, run.batch_size)
    total = max(1, math.ceil(run.epochs * per_epoch))
    plan = LoopPlan(name=run.name, base_model=base_model, total_steps=total, micro_batches_per_epoch=per_epoch,
                    lr=run.lr, weight_decay=run.weight_decay, warmup_steps=math.ceil(run.warmup_ratio * total),
                    seed=run.seed, metrics_log=str(out / "logs" / f"{run.name}.metrics.jsonl"),
                    checkpoint_every=run.checkpoint_every, log_every=run.log_every, use_gpu=use_gpu)
    training = ClassifierTraining(task, str(data), run.batch_size, run.seed)
    strategy = TorchStrategy(run.precision, run.grad_clip)
    state = fit_and_export(train_loop_per_worker, {"plan": plan, "task": training, "strategy": strategy}, settings,
                           use_gpu=use_gpu, run_name=run.name, storage=out / CHECKPOINTS_DIR, export_dir=out,
                           what=f"{run.name} training")
    return {**state.summary, "steps_per_epoch": per_epoch, "rows": n_rows, "history": state.history}
