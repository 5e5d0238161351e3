"""The per-worker training loop: one function that Ray Train runs on every worker.

Shape follows Ray's ``deepspeed_finetune`` example: load the model, ``deepspeed.initialize`` with
ZeRO (torch AdamW + linear warmup/decay, Self-RAG App. B.1), iterate this worker's shard, checkpoint
through ``ray.train.report``. A restarted worker group restores the latest checkpoint and skips the
micro-batches its epoch had already consumed: the shard order is deterministic (``data.py``) and the
per-epoch shuffle is seeded by ``seed + epoch``, so the skipped batches are exactly the consumed ones.
"""

from __future__ import annotations

import json
import logging
import os
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from raypipe.runtime import WORKER_ENV, use_installed_ninja
from raypipe.settings.training import ModelTrainConfig, TrainStage
from raypipe.training.batching import SIZE_WINDOW_BATCHES, length_grouped_micro_batches
from raypipe.training.checkpoint import MODEL_DIR, TrainState, restore_checkpoint, save_checkpoint
from raypipe.training.precision import worker_autocasts

logger = logging.getLogger(__name__)


def _param_groups(model: Any, weight_decay: float) -> list[dict[str, Any]]:
    """Decay matrices only: biases and norm gains are not regularized (the usual LM fine-tuning rule).
    Frozen parameters (`trainable_layers`) are left out of the optimizer."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    decay = [p for p in trainable if p.ndim >= 2]
    no_decay = [p for p in trainable if p.ndim < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def micro_batches(shard: Any, tc: ModelTrainConfig, epoch: int) -> Iterator[dict[str, Any]]:
    """One epoch of this worker's shard in micro-batches, shuffled by a buffer seeded with seed + epoch
    (so a resumed worker can skip exactly the consumed ones), length-grouped if the config asks."""
    window = tc.micro_batch_size * (SIZE_WINDOW_BATCHES if tc.group_by_length else 1)
    batches = shard.iter_batches(batch_size=window, batch_format="numpy", drop_last=not tc.group_by_length,
                                 local_shuffle_buffer_size=tc.shuffle_buffer_rows, local_shuffle_seed=tc.seed + epoch)
    if not tc.group_by_length:
        return iter(batches)
    return length_grouped_micro_batches(batches, tc.micro_batch_size, random.Random(tc.seed + epoch))


def _build_engine(config: dict[str, Any], tc: ModelTrainConfig, stage: TrainStage, autocast: bool) -> tuple[Any, Any]:
    import deepspeed
    import torch
    from transformers import get_linear_schedule_with_warmup

    from raypipe.models import load_model
    from raypipe.training.freeze import freeze_lower_layers
    from raypipe.training.target_loss import TargetLossLM, computes_same_logits

    total, warmup = config["total_steps"], config["warmup_steps"]
    torch.manual_seed(tc.seed)
    model, tokenizer = load_model(config["base_model"], dtype=getattr(torch, config["dtype"]), device="cpu")
    model.config.use_cache = False
    layers = stage.layers(tc.trainable_layers)
    if layers is not None:
        freeze_lower_layers(model, layers)
    model.train()
    optimizer = torch.optim.AdamW(_param_groups(model, tc.weight_decay), lr=stage.lr)
    trained = TargetLossLM(model) if computes_same_logits(model, len(tokenizer)) else model
    ds_config = config["ds_config"]
    if autocast:  # DeepSpeed's own autocast wraps the engine's forward (its `torch_autocast` section)
        ds_config = {**ds_config, "torch_autocast": {"enabled": True, "dtype": "bfloat16"}}
    engine, *_ = deepspeed.initialize(
        model=trained, optimizer=optimizer, config=ds_config, dist_init_required=False,
        lr_scheduler=lambda opt: get_linear_schedule_with_warmup(opt, warmup, total),
    )
    return engine, tokenizer


def _all_reduce(values: list[float], op: str) -> list[float]:
    import torch
    import torch.distributed as dist

    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=getattr(dist.ReduceOp, op))
    return t.tolist()


@dataclass
class StepMeter:
    """Loss and tokens of the micro-batches of one optimizer step; `close` sums them over ranks."""

    loss: float = 0.0
    micro_batches: int = 0
    tokens: int = 0
    start: float = field(default_factory=time.perf_counter)

    def add(self, loss: float, tokens: int) -> None:
        self.loss += loss
        self.micro_batches += 1
        self.tokens += tokens

    def close(self, step: int, epoch: int, lr: float) -> dict[str, Any]:
        """The step's record (mean loss over all ranks' micro-batches, global tokens/s); resets."""
        loss, micro, tokens = _all_reduce([self.loss, self.micro_batches, self.tokens], "SUM")
        seconds = time.perf_counter() - self.start
        self.loss, self.micro_batches, self.tokens, self.start = 0.0, 0, 0, time.perf_counter()
        return {"step": step, "epoch": epoch, "loss": loss / micro, "lr": lr, "tokens": int(tokens),
                "seconds": seconds, "tokens_per_s": tokens / seconds}

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
            with self.path.open("a") as fh:
                fh.write(json.dumps(line) + "\n")


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train entry point. `config` is built by ``trainer.fit_stage``."""
    for key, value in WORKER_ENV.items():
        os.environ.setdefault(key, value)
    use_installed_ninja()
    import ray.train
    import torch

    from raypipe.training.data import collate
    from raypipe.training.export import export_hf_folder
    from raypipe.training.memory import model_state_bytes, peak_memory_mib

    tc = ModelTrainConfig.model_validate(config["train"])
    stage = TrainStage.model_validate(config["stage"])
    total, micro_per_epoch = config["total_steps"], config["micro_batches_per_epoch"]
    rank = ray.train.get_context().get_world_rank()
    if config["use_gpu"]:
        torch.cuda.set_device(ray.train.torch.get_device())
    autocast = worker_autocasts(tc.precision, config["use_gpu"])
    precision = "autocast" if autocast else "bf16" if config["dtype"] == "bfloat16" else "fp32"
    if rank == 0:
        logger.info("precision: %s", precision)
    engine, tokenizer = _build_engine(config, tc, stage, autocast)
    restored = restore_checkpoint(engine)
    state = restored or TrainState()
    start_step = state.step
    if restored is not None:
        logger.info("rank %d resumed at step %d (epoch %d, micro-batch %d)", rank, state.step, state.epoch,
                    state.micro_batches_done)
    metrics_log = MetricsLog(Path(config["metrics_log"]), rank, start_step, total)
    shard = ray.train.get_dataset_shard("train")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    state_bytes: dict[str, int] = {}
    meter = StepMeter()

    while state.step < total:
        batches = micro_batches(shard, tc, state.epoch)
        epoch_end = False
        for index, batch in enumerate(batches):
            if index < state.micro_batches_done:
                continue  # consumed before the checkpoint this attempt resumed from
            inputs = {k: v.to(engine.device) for k, v in collate(batch, pad_id).items()}
            loss = engine(**inputs).loss
            engine.backward(loss)
            boundary = (index + 1) % tc.grad_accum == 0
            if boundary and state.step >= 1 and not state_bytes:
                state_bytes = model_state_bytes(engine)  # gradients exist now, optimizer states too
            lr = engine.get_lr()[0]
            engine.step()
            meter.add(loss.item(), int(inputs["attention_mask"].sum()))
            state.micro_batches_done = index + 1
            if not boundary:
                continue
            state.step += 1
            record = meter.close(state.step, state.epoch, lr)
            state.history.append(record)
            metrics_log.write(record)
            epoch_end = state.micro_batches_done >= micro_per_epoch
            if epoch_end:
                state.epoch, state.micro_batches_done = state.epoch + 1, 0
            if state.step >= total:
                break
            if epoch_end or state.step % tc.checkpoint_every == 0:
                save_checkpoint(engine, state, record, rank)
                meter.restart_clock()
            elif state.step % tc.log_every == 0:
                ray.train.report(record)
            if rank == 0 and (state.step % tc.log_every == 0 or epoch_end):
                logger.info("[%s] step %d/%d epoch %d loss %.4f lr %.3g tokens/s %.0f", stage.name, state.step,
                            total, record["epoch"], record["loss"], lr, record["tokens_per_s"])
            if epoch_end:
                break
        if state.step < total and not epoch_end:
            raise RuntimeError(f"rank {rank}: the shard of epoch {state.epoch} ended after "
                               f"{state.micro_batches_done} micro-batches, planned {micro_per_epoch}")

    peak, model_state = _all_reduce([peak_memory_mib(), state_bytes.get("total", 0)], "MAX")
    state.summary = {"steps": state.step, "precision": precision, "resumed_from_step": start_step if restored else None,
                     "final_loss": state.history[-1]["loss"] if state.history else None,
                     "peak_memory_mib": peak, "model_state_mib_per_rank": model_state / 2**20,
                     "model_state_bytes_rank0": state_bytes}

    def export(folder: Path) -> None:
        export_hf_folder(engine, tokenizer, folder / MODEL_DIR, rank, config["prompt_format"])

    save_checkpoint(engine, state, {**(state.history[-1] if state.history else {}), **state.summary}, rank,
                    add_files=export)
