"""The loop Ray Train runs on every worker of `raypipe crag train-evaluator` (CRAG §4.2, App. B.3).

The model is small (22M parameters), so the loop is plain PyTorch under Ray Train's DDP
(`prepare_model`) rather than DeepSpeed; the checkpoints carry the data position, so a restarted
worker group continues at the same step on the same batches (seeded per-epoch shuffle).
"""

from __future__ import annotations

import math
import random
import tempfile
import time
from pathlib import Path
from typing import Any

from raypipe.methods.crag.retrieval_evaluator import as_document
from raypipe.settings.crag_tools import EvaluatorTrainConfig
from raypipe.training.checkpoint import MODEL_DIR, TrainState

_WEIGHTS = "weights.pt"


def _batches(rows: list[dict[str, Any]], epoch: int, rank: int, world: int, batch_size: int,
             seed: int) -> list[list[dict[str, Any]]]:
    """This rank's batches of one epoch: a shuffle seeded by seed + epoch, dealt round-robin, so a
    resumed worker sees the same batches in the same order."""
    order = list(range(len(rows)))
    random.Random(seed + epoch).shuffle(order)
    mine = [rows[i] for i in order[rank::world]]
    return [mine[i:i + batch_size] for i in range(0, len(mine), batch_size)]


def steps_per_epoch(n_rows: int, world: int, batch_size: int) -> int:
    return max(1, math.ceil(math.ceil(n_rows / world) / batch_size))


def train_loop_per_worker(config: dict[str, Any]) -> None:
    """Ray Train's per-worker loop: MSE between tanh(head) and the +1 / -1 label (App. B.3)."""
    import pyarrow.parquet as pq
    import ray.train
    import torch
    from ray.train.torch import prepare_model
    from transformers import get_linear_schedule_with_warmup

    from raypipe.methods.crag.retrieval_evaluator import load_cross_encoder

    tc = EvaluatorTrainConfig.model_validate(config["train"])
    ctx = ray.train.get_context()
    rank, world = ctx.get_world_rank(), ctx.get_world_size()
    torch.manual_seed(tc.seed)
    model, tokenizer = load_cross_encoder(config["base_model"])
    model = prepare_model(model)
    rows = pq.read_table(config["data"]).to_pylist()
    per_epoch = steps_per_epoch(len(rows), world, tc.batch_size)
    total = max(1, math.ceil(tc.epochs * per_epoch))
    optimizer = torch.optim.AdamW(model.parameters(), lr=tc.lr, weight_decay=tc.weight_decay)
    scheduler = get_linear_schedule_with_warmup(optimizer, math.ceil(tc.warmup_ratio * total), total)
    state = TrainState()
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            saved = torch.load(Path(folder) / _WEIGHTS, map_location="cpu")
            state = TrainState.load(Path(folder))
        unwrapped = model.module if hasattr(model, "module") else model
        unwrapped.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        scheduler.load_state_dict(saved["scheduler"])
        state.summary["resumed_from_step"] = state.step
    model.train()

    def save(final: bool) -> None:
        unwrapped = model.module if hasattr(model, "module") else model
        with tempfile.TemporaryDirectory(prefix="raypipe-evaluator-") as tmp:
            folder = Path(tmp)
            if rank == 0:
                torch.save({"model": unwrapped.state_dict(), "optimizer": optimizer.state_dict(),
                            "scheduler": scheduler.state_dict()}, folder / _WEIGHTS)
                state.save(folder)
                if final:
                    unwrapped.save_pretrained(folder / MODEL_DIR, safe_serialization=True)
                    tokenizer.save_pretrained(folder / MODEL_DIR)
            metrics = {"step": state.step, "loss": state.history[-1]["loss"] if state.history else None}
            checkpoint = ray.train.Checkpoint.from_directory(str(folder)) if rank == 0 else None
            ray.train.report(metrics, checkpoint=checkpoint)

    while state.step < total:
        batches = _batches(rows, state.epoch, rank, world, tc.batch_size, tc.seed)
        for batch in batches[state.micro_batches_done:]:
            start = time.perf_counter()
            enc = tokenizer([r["query"] for r in batch], [as_document(r["title"], r["text"]) for r in batch],
                            padding=True, truncation="only_second", max_length=tc.max_length, return_tensors="pt")
            labels = torch.tensor([r["label"] for r in batch], dtype=torch.float32)
            scores = torch.tanh(model(**enc).logits[:, 0])
            loss = torch.nn.functional.mse_loss(scores, labels)
            optimizer.zero_grad()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            optimizer.step()
            scheduler.step()
            state.step += 1
            state.micro_batches_done += 1
            state.history.append({"step": state.step, "epoch": state.epoch, "loss": round(loss.item(), 5),
                                  "lr": scheduler.get_last_lr()[0], "pairs": len(batch),
                                  "seconds": round(time.perf_counter() - start, 4)})
            if state.step == total:
                break
            if state.step % tc.checkpoint_every == 0:
                save(final=False)
        if state.step < total:
            state.epoch, state.micro_batches_done = state.epoch + 1, 0
    state.summary.update({"steps": state.step, "final_loss": state.history[-1]["loss"] if state.history else None,
                          "steps_per_epoch": per_epoch, "rows": len(rows)})
    save(final=True)
