"""The one per-worker training loop Ray Train runs on every worker, for every model raypipe trains: the
LMs (DeepSpeed ZeRO-3) and the small encoders (plain torch under DDP), which differ only in their
`TrainTask` (model, batches, loss, export) and their `WorkerStrategy` (wrapping, stepping, checkpoint
state).

Shape follows Ray's ``deepspeed_finetune`` example: load the model, wrap it with torch AdamW and a
linear warmup/decay (Self-RAG App. B.1), iterate this worker's batches, checkpoint through
``ray.train.report``. A restarted worker group restores the latest checkpoint and skips the
micro-batches its epoch had already consumed: a task gives the same batches for the same epoch, so
the skipped batches are exactly the consumed ones.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raypipe.disk import full_disk_named
from raypipe.runtime import WORKER_ENV
from raypipe.training.checkpoint import MODEL_DIR, TrainState, restore_checkpoint, save_checkpoint
from raypipe.training.strategy import WorkerStrategy
from raypipe.training.task import TrainTask

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class LoopPlan:
    """One run's schedule, planned on the driver: `total_steps` optimizer steps of `grad_accum`
    micro-batches, `micro_batches_per_epoch` per worker and epoch; AdamW at peak `lr` warmed up over
    `warmup_steps`; a checkpoint every `checkpoint_every` steps and at each epoch's end; a log line
    and a metrics report every `log_every` steps."""

    name: str
    base_model: str
    total_steps: int
    micro_batches_per_epoch: int
    lr: float
    weight_decay: float
    warmup_steps: int
    seed: int
    metrics_log: str
    grad_accum: int = 1
    checkpoint_every: int = 100
    log_every: int = 10
    use_gpu: bool = False


def _all_reduce(values: list[float], op: str) -> list[float]:
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    return t.tolist()


@dataclass
class StepMeter:
    """Loss and size (tokens, rows) of the micro-batches of one optimizer step; `close` sums them over
    ranks."""

    loss: float = 0.0
    micro_batches: int = 0
    size: int = 0
    start: float = field(default_factory=time.perf_counter)

    def add(self, loss: float, size: int) -> None:
        self.loss += loss
        self.micro_batches += 1
        self.size += size

    def close(self, step: int, epoch: int, lr: float, unit: str) -> dict[str, Any]:
        """The step's record (mean loss over all ranks' micro-batches, the global size and its rate,
        named by `unit`); resets."""
        loss, micro, size = _all_reduce([self.loss, self.micro_batches, self.size], "SUM")
        seconds = time.perf_counter() - self.start
        self.loss, self.micro_batches, self.size, self.start = 0.0, 0, 0, time.perf_counter()
        return {"step": step, "epoch": epoch, "loss": loss / micro, "lr": lr, unit: int(size),
                "seconds": seconds, f"{unit}_per_s": size / seconds}

    def restart_clock(self) -> None:
        """Checkpoint time is not training throughput."""
        self.start = time.perf_counter()


class MetricsLog:
    """One JSON line per optimizer step on rank 0, kept across restarts (`attempt_start_step` tells
    the attempts apart), so a run's curve survives the failures it recovered from; each line carries
    the run's `total_steps`, so a reader of the log alone can tell how far along it is."""

    def __init__(self, path: Path, rank: int, attempt_start_step: int, total_steps: int):
        self.path, self.rank, self.attempt_start_step, self.total_steps = path, rank, attempt_start_step, total_steps
        if rank == 0:
            path.parent.mkdir(parents=True, exist_ok=True)

    def write(self, record: dict[str, Any]) -> None:
        if self.rank == 0:
            line = {**record, "total_steps": self.total_steps, "attempt_start_step": self.attempt_start_step}
            with full_disk_named(self.path), self.path.open("a") as fh:
                fh.write(json.dumps(line) + "\n")


def next_epoch_at_its_end(state: TrainState, micro_batches_per_epoch: int) -> TrainState:
    """A restored position at an epoch's end is the next epoch's start (the classifier loop before the
    merged one saved its last step of an epoch so)."""
    if state.micro_batches_done >= micro_batches_per_epoch:
        state.epoch, state.micro_batches_done = state.epoch + 1, 0
    return state


def _step_loop(plan: LoopPlan, task: TrainTask, strategy: WorkerStrategy, tokenizer: Any, state: TrainState,
               rank: int, world: int, metrics_log: MetricsLog) -> dict[str, int]:
    """Train from `state` to `plan.total_steps`; returns the model-state bytes this rank held."""
    import ray.train

    epoch_batches = task.epoch_batches(rank, world)
    state_bytes: dict[str, int] = {}
    meter = StepMeter()
    while state.step < plan.total_steps:
        epoch_end = False
        for index, batch in enumerate(epoch_batches(state.epoch)):
            if index < state.micro_batches_done:
                continue  # consumed before the checkpoint this attempt resumed from
            with strategy.autocast():
                loss, size = task.loss(strategy.model, tokenizer, batch)
            strategy.backward(loss)
            boundary = (index + 1) % plan.grad_accum == 0
            if boundary and state.step >= 1 and not state_bytes:
                state_bytes = strategy.state_bytes()  # gradients exist now, optimizer states too
            lr = strategy.lr()
            strategy.step(boundary)
            meter.add(loss.item(), size)
            state.micro_batches_done = index + 1
            if not boundary:
                continue
            state.step += 1
            record = meter.close(state.step, state.epoch, lr, task.unit)
            state.history.append(record)
            metrics_log.write(record)
            epoch_end = state.micro_batches_done >= plan.micro_batches_per_epoch
            if epoch_end:
                state.epoch, state.micro_batches_done = state.epoch + 1, 0
            if state.step >= plan.total_steps:
                break
            if epoch_end or state.step % plan.checkpoint_every == 0:
                save_checkpoint(strategy, state, record, rank)
                meter.restart_clock()
            elif state.step % plan.log_every == 0:
                ray.train.report(record)
            if rank == 0 and (state.step % plan.log_every == 0 or epoch_end):
                logger.info("[%s] step %d/%d epoch %d loss %.4f lr %.3g %s/s %.0f", plan.name, state.step,
                            plan.total_steps, record["epoch"], record["loss"], lr, task.unit,
                            record[f"{task.unit}_per_s"])
            if epoch_end:
                break
        if state.step < plan.total_steps and not epoch_end:
            raise RuntimeError(f"rank {rank}: the batches of epoch {state.epoch} ended after "
                               f"{state.micro_batches_done} micro-batches, planned {plan.micro_batches_per_epoch}")
    return state_bytes


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train entry point. `config` holds the run's `plan` (LoopPlan), `task` (TrainTask) and
    `strategy` (WorkerStrategy), built by the job's driver (`trainer.fit_stage`, `classifier.fit_classifier`)."""
    for key, value in WORKER_ENV.items():
        os.environ.setdefault(key, value)
    import ray.train
    import torch

    from raypipe.training.memory import peak_memory_mib

    plan: LoopPlan = config["plan"]
    task: TrainTask = config["task"]
    strategy: WorkerStrategy = config["strategy"]
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    if plan.use_gpu:
        torch.cuda.set_device(ray.train.torch.get_device())
    torch.manual_seed(plan.seed)
    model, tokenizer = task.load(plan.base_model)
    model.train()
    optimizer = torch.optim.AdamW(task.param_groups(model, plan.weight_decay), lr=plan.lr)
    strategy.prepare(model, optimizer, plan.warmup_steps, plan.total_steps, plan.use_gpu)
    if rank == 0:
        logger.info("[%s] precision: %s", plan.name, strategy.precision)
    restored = restore_checkpoint(strategy)
    state = next_epoch_at_its_end(restored or TrainState(), plan.micro_batches_per_epoch)
    start_step = state.step
    if restored is not None:
        logger.info("rank %d resumed at step %d (epoch %d, micro-batch %d)", rank, state.step, state.epoch,
                    state.micro_batches_done)
    metrics_log = MetricsLog(Path(plan.metrics_log), rank, start_step, plan.total_steps)
    state_bytes = _step_loop(plan, task, strategy, tokenizer, state, rank, world, metrics_log)

    peak, model_state = _all_reduce([peak_memory_mib(), state_bytes.get("total", 0)], "MAX")
    state.summary = {"steps": state.step, "precision": strategy.precision,
                     "resumed_from_step": start_step if restored else None,
                     "final_loss": state.history[-1]["loss"] if state.history else None,
                     "peak_memory_mib": peak, "model_state_mib_per_rank": model_state / 2**20,
                     "model_state_bytes_rank0": state_bytes}

    def export(folder: Path) -> None:
        state_dict = strategy.full_state_dict(rank)  # collective: every rank takes part in the gather
        if rank == 0:
            task.export(strategy.module, state_dict, tokenizer, folder / MODEL_DIR)

    save_checkpoint(strategy, state, {**(state.history[-1] if state.history else {}), **state.summary}, rank,
                    add_files=export)
