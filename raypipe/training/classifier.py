"""Small pretrained-encoder classifiers fine-tuned on Ray Train: CRAG's retrieval evaluator and the
encoder critic share this loop and differ only in their `ClassifierTask` (how the model is loaded,
the loss on a batch of rows, how it is exported).

The models are small (22M parameters), so the loop is plain PyTorch under Ray Train's DDP
(`prepare_model`) rather than DeepSpeed, run through the one harness every training job shares
(`raypipe.training.harness`). The rows are read whole by every worker and dealt by a shuffle seeded
per epoch; the checkpoints carry the data position, so a restarted worker group continues at the same
step on the same batches.

A run's checkpoints (Ray Train run storage under `<out>/checkpoints/<run name>/`) hold the weights,
the optimizer and scheduler state and the position, every `checkpoint_every` steps; the last one also
holds the exported folder, which the harness copies to `out`. Rank 0 writes one JSON line per step to
`<out>/logs/<run name>.metrics.jsonl` (what the demo's progress counter reads).
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raypipe.settings.training import Precision
from raypipe.settings.workers import RayTrainWorkers
from raypipe.training.batching import SIZE_WINDOW_BATCHES, size_sorted_batches
from raypipe.training.checkpoint import MODEL_DIR, TrainState
from raypipe.training.finished import CHECKPOINTS_DIR
from raypipe.training.harness import choose_gpu, fit_and_export
from raypipe.training.precision import worker_autocasts

_WEIGHTS = "weights.pt"


class ClassifierTask(ABC):
    """What one kind of classifier brings to the shared loop. Instances travel to the Ray Train
    workers (pickled), so they hold plain settings only."""

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


def model_device(model: Any) -> Any:
    """Where a (possibly DDP-wrapped) model's weights are: a task moves its batch there."""
    return next(model.parameters()).device


def epoch_batches(rows: list[dict[str, Any]], epoch: int, rank: int, world: int, batch_size: int,
                  seed: int, sizes: list[int] | None = None) -> list[list[dict[str, Any]]]:
    """This rank's batches of one epoch: a shuffle seeded by seed + epoch, dealt round-robin, so a
    resumed worker sees the same batches in the same order. With `sizes` (one per row), each window of
    SIZE_WINDOW_BATCHES batches is sorted by size before it is cut, and the batches are shuffled
    again (`raypipe.training.batching`)."""
    rng = random.Random(seed + epoch)
    order = list(range(len(rows)))
    rng.shuffle(order)
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


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train's per-worker loop: AdamW over the trainable parameters, linear warmup and decay, the
    task's loss. `config` is built by `fit_classifier`."""
    import pyarrow.parquet as pq
    import ray.train
    import torch
    from ray.train.torch import prepare_model
    from transformers import get_linear_schedule_with_warmup

    from raypipe.training.loop import MetricsLog

    task: ClassifierTask = config["task"]
    run: ClassifierRun = config["run"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.manual_seed(run.seed)
    model, tokenizer = task.load(config["base_model"])
    model = prepare_model(model)
    rows = pq.read_table(config["data"]).to_pylist()
    given = [task.row_size(row) for row in rows]
    sizes = None if any(size is None for size in given) else [int(size) for size in given]
    per_epoch = steps_per_epoch(len(rows), world, run.batch_size)
    total = max(1, math.ceil(run.epochs * per_epoch))
    params = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=run.lr, weight_decay=run.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(run.warmup_ratio * total), total)
    state = TrainState()
    checkpoint = ray.train.get_checkpoint()
    unwrapped = model.module if hasattr(model, "module") else model
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            saved = torch.load(Path(folder) / _WEIGHTS, map_location="cpu")
            state = TrainState.load(Path(folder))
        unwrapped.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        state.summary["resumed_from_step"] = state.step
    metrics_log = MetricsLog(Path(config["metrics_log"]), rank, state.step, total)
    model.train()
    device_type = model_device(model).type
    # a classifier's weights stay fp32: `bf16` asks for bf16 products, which autocast gives
    autocast = worker_autocasts("autocast" if run.precision == "bf16" else run.precision, device_type == "cuda")

    def save(final: bool) -> None:
        with tempfile.TemporaryDirectory(prefix=f"raypipe-{run.name}-") as tmp:
            folder = Path(tmp)
            if rank == 0:
                torch.save({"model": unwrapped.state_dict(), "optimizer": optimizer.state_dict(),
                            "scheduler": scheduler.state_dict()}, folder / _WEIGHTS)
                state.save(folder)
                if final:
                    task.export(unwrapped, tokenizer, folder / MODEL_DIR)
            metrics = {"step": state.step, "loss": state.history[-1]["loss"] if state.history else None}
            checkpoint = ray.train.Checkpoint.from_directory(str(folder)) if rank == 0 else None
            ray.train.report(metrics, checkpoint=checkpoint)

    while state.step < total:
        batches = epoch_batches(rows, state.epoch, rank, world, run.batch_size, run.seed, sizes)
        for batch in batches[state.micro_batches_done:]:
            start = time.perf_counter()
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=autocast):
                loss = task.loss(model, tokenizer, batch)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, run.grad_clip)
            optimizer.step()
            scheduler.step()
            state.step += 1
            state.micro_batches_done += 1
            record = {"step": state.step, "epoch": state.epoch, "loss": round(loss.item(), 5),
                      "lr": scheduler.get_last_lr()[0], "rows": len(batch),
                      "seconds": round(time.perf_counter() - start, 4)}
            state.history.append(record)
            metrics_log.write(record)
            if state.step == total:
                break
            if state.step % run.checkpoint_every == 0:
                save(final=False)
        if state.step < total:
            state.epoch, state.micro_batches_done = state.epoch + 1, 0
    state.summary.update({"steps": state.step, "final_loss": state.history[-1]["loss"] if state.history else None,
                          "steps_per_epoch": per_epoch, "rows": len(rows),
                          "precision": "autocast" if autocast else "fp32"})
    save(final=True)


def fit_classifier(task: ClassifierTask, run: ClassifierRun, settings: RayTrainWorkers, base_model: str,
                   data: Path, out: Path) -> dict[str, Any]:
    """Train `task` from `base_model` on the parquet rows at `data` (a file or a folder of parts) on
    `settings.num_workers` Ray Train workers and export the model to `out`; returns the run's summary
    and its per-step history."""
    loop_config = {"task": task, "run": run, "base_model": base_model, "data": str(data),
                   "metrics_log": str(out / "logs" / f"{run.name}.metrics.jsonl")}
    state = fit_and_export(train_loop_per_worker, loop_config, settings, use_gpu=choose_gpu(settings),
                           run_name=run.name, storage=out / CHECKPOINTS_DIR, export_dir=out,
                           what=f"{run.name} training")
    return {**state.summary, "history": state.history}
