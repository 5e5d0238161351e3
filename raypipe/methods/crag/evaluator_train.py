"""`raypipe crag train-evaluator`: data from the world, the cross-encoder on Ray Train, the held-out
report (CRAG §4.2, §5.5 Table 4, App. B.3).

Layout under `crag.train.out_dir` (the conventions of `raypipe train`)::

    config.json, model.safetensors, tokenizer files, evaluator.json   the evaluator, an HF folder
    report.json                 held-out accuracy, confusion matrix, score distribution
    train_stats.json, _SUCCESS  written last; a rerun with _SUCCESS does nothing
    checkpoints/evaluator/      Ray Train run storage: model + optimizer + position, every
                                `checkpoint_every` steps; an interrupted run resumes from the latest

The model is small (22M parameters), so the loop is plain PyTorch under Ray Train's DDP
(`prepare_model`) rather than DeepSpeed; the checkpoints carry the data position, so a restarted
worker group continues at the same step on the same batches (seeded per-epoch shuffle).
"""

from __future__ import annotations

import json
import logging
import math
import random
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from raypipe.errors import ConfigError, RaypipeError
from raypipe.methods.crag.evaluator import MANIFEST, OUTPUT, CrossEncoderEvaluator
from raypipe.methods.crag.evaluator_data import as_document, write_pairs
from raypipe.settings.crag_tools import EvaluatorTrainConfig
from raypipe.training.checkpoint import MODEL_DIR, TrainState

if TYPE_CHECKING:
    from raypipe.config import RaypipeConfig

logger = logging.getLogger(__name__)

SUCCESS = "_SUCCESS"
STATS_FILE = "train_stats.json"
REPORT_FILE = "report.json"
_WEIGHTS = "weights.pt"
_RUN_NAME = "evaluator"


def _base_model(tc: EvaluatorTrainConfig) -> str:
    from raypipe.models import minilm_path

    return str(Path(tc.base_model).resolve()) if tc.base_model else str(minilm_path())


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

    from raypipe.methods.crag.evaluator import load_cross_encoder

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


def _use_gpu(tc: EvaluatorTrainConfig) -> bool:
    import ray

    if tc.device == "auto":
        return ray.cluster_resources().get("GPU", 0) >= tc.num_workers
    return tc.device == "cuda"


def fit(tc: EvaluatorTrainConfig, base_model: str, data: Path, out: Path) -> dict[str, Any]:
    """Train on Ray Train and export the evaluator folder to `out`."""
    from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
    from ray.train.torch import TorchConfig, TorchTrainer

    use_gpu = _use_gpu(tc)
    trainer = TorchTrainer(
        train_loop_per_worker,
        train_loop_config={"train": tc.model_dump(), "base_model": base_model, "data": str(data)},
        torch_config=TorchConfig(backend="nccl" if use_gpu else "gloo"),
        scaling_config=ScalingConfig(num_workers=tc.num_workers, use_gpu=use_gpu,
                                     resources_per_worker={"CPU": tc.cpus_per_worker}),
        run_config=RunConfig(name=_RUN_NAME, storage_path=str(out / "checkpoints"),
                             failure_config=FailureConfig(max_failures=tc.max_failures),
                             checkpoint_config=CheckpointConfig(num_to_keep=tc.keep_checkpoints)),
    )
    try:
        result = trainer.fit()
    except Exception as exc:  # noqa: BLE001 - the job boundary: report Ray's failure as our error
        raise RaypipeError(f"evaluator training failed: {exc}") from exc
    if result.checkpoint is None:
        raise RaypipeError(f"evaluator training ended without a checkpoint: {result.error}")
    with result.checkpoint.as_directory() as folder:
        shutil.copytree(Path(folder) / MODEL_DIR, out, dirs_exist_ok=True)
        state = TrainState.load(Path(folder))
    (out / MANIFEST).write_text(json.dumps({"kind": "crag-retrieval-evaluator", "output": OUTPUT,
                                            "base_model": base_model, "max_length": tc.max_length}, indent=2) + "\n")
    return {**state.summary, "history": state.history}


def confusion(scores: list[float], labels: list[float], threshold: float = 0.0) -> dict[str, Any]:
    """Pair accuracy with the sign of the score as the verdict (relevant when score > threshold), and
    the confusion matrix (rows: true label, columns: verdict)."""
    tp = sum(s > threshold and y > 0 for s, y in zip(scores, labels, strict=True))
    fn = sum(s <= threshold and y > 0 for s, y in zip(scores, labels, strict=True))
    fp = sum(s > threshold and y < 0 for s, y in zip(scores, labels, strict=True))
    tn = sum(s <= threshold and y < 0 for s, y in zip(scores, labels, strict=True))
    n = tp + fn + fp + tn
    return {"n": n, "accuracy": (tp + tn) / n if n else None,
            "confusion": {"relevant": {"relevant": tp, "irrelevant": fn},
                          "irrelevant": {"relevant": fp, "irrelevant": tn}}}


def suggest_thresholds(positives: list[float], negatives: list[float], negatives_above: float = 0.01,
                       positives_below: float = 0.05) -> dict[str, float] | None:
    """Trigger thresholds fitted to this evaluator's held-out scores, on a 0.01 grid: `upper` the lowest
    with at most `negatives_above` of the negatives at or above it (Correct is then rarely wrong),
    `lower` the highest with at most `positives_below` of the positives below it (Incorrect then rarely
    drops a relevant document). The paper's values (App. B.3) fit its T5-large evaluator; a smaller or
    shorter-trained one squashes its scores towards 0, so that no score reaches them and every input
    turns Ambiguous."""
    if not positives or not negatives:
        return None
    neg, pos = sorted(negatives), sorted(positives)
    upper = math.floor(neg[len(neg) - math.floor(negatives_above * len(neg)) - 1] * 100) / 100 + 0.01
    lower = math.floor(pos[math.floor(positives_below * len(pos))] * 100) / 100
    upper = min(1.0, round(upper, 2))
    return {"upper": upper, "lower": max(-1.0, min(round(lower, 2), upper))}


def report(evaluator: CrossEncoderEvaluator, heldout: Path, upper: float, lower: float) -> dict[str, Any]:
    """Held-out accuracy (Table 4), per negative kind, and where scores fall against the trigger's
    thresholds (the share of positives >= upper, of negatives < lower)."""
    import pyarrow.parquet as pq

    rows = pq.read_table(heldout).to_pylist()
    scores = evaluator.score([(r["query"], as_document(r["title"], r["text"])) for r in rows])
    labels = [r["label"] for r in rows]
    out = confusion(scores, labels)
    out["by_kind"] = {kind: confusion([s for s, r in zip(scores, rows, strict=True) if r["kind"] == kind],
                                      [r["label"] for r in rows if r["kind"] == kind])["accuracy"]
                      for kind in sorted({r["kind"] for r in rows})}
    pos = [s for s, y in zip(scores, labels, strict=True) if y > 0]
    neg = [s for s, y in zip(scores, labels, strict=True) if y < 0]
    out["thresholds"] = {"upper": upper, "lower": lower,
                         "positives_at_or_above_upper": sum(s >= upper for s in pos) / len(pos) if pos else None,
                         "negatives_below_lower": sum(s < lower for s in neg) / len(neg) if neg else None,
                         "suggested": suggest_thresholds(pos, neg)}
    return out


def run_train_evaluator(cfg: RaypipeConfig) -> dict[str, Any]:
    """Build the pairs (unless `data_dir` holds them for these settings), train, report."""
    from raypipe.retrieval import load_retriever
    from raypipe.runtime import ensure_ray

    tc = cfg.crag.train
    out, data = Path(tc.out_dir).resolve(), Path(tc.data_dir).resolve()
    if (out / SUCCESS).exists():
        logger.info("%s already trained (%s exists); delete the folder to retrain", out, out / SUCCESS)
        return {**json.loads((out / STATS_FILE).read_text())["summary"], "skipped": True}
    if not (Path(cfg.world.out_dir) / "_SUCCESS").exists():
        raise ConfigError(f"world.out_dir: no finished world at {cfg.world.out_dir} (run `raypipe data synth`)")
    base = _base_model(tc)
    start = time.perf_counter()
    stamp = {"world": cfg.world.model_dump(exclude={"out_dir"}), "train": tc.model_dump(
        include={"questions", "retrieve_k", "negatives", "claim_fraction", "heldout_fraction", "seed"})}
    stats_path = data / "stats.json"
    if stats_path.is_file() and json.loads(stats_path.read_text()).get("stamp") == stamp:
        data_stats = json.loads(stats_path.read_text())
        logger.info("reusing the evaluator pairs in %s", data)
    else:
        data_stats = write_pairs(cfg.world, load_retriever(cfg.retrieval),
                                 tc.model_copy(update={"data_dir": str(data)}))
        data_stats["stamp"] = stamp
        stats_path.write_text(json.dumps(data_stats, indent=2) + "\n")
    ensure_ray(cfg.ray)
    trained = fit(tc, base, data / "train.parquet", out)
    evaluator = CrossEncoderEvaluator(out, batch_size=cfg.crag.evaluator.batch_size, max_length=tc.max_length)
    crag = cfg.methods.crag
    rep = report(evaluator, data / "heldout.parquet", crag.upper, crag.lower)
    (out / REPORT_FILE).write_text(json.dumps(rep, indent=2) + "\n")
    summary = {"evaluator": str(out), "base_model": base, "pairs_train": data_stats["train"]["pairs"],
               "pairs_heldout": data_stats["heldout"]["pairs"], "steps": trained.get("steps"),
               "final_loss": trained.get("final_loss"), "resumed_from_step": trained.get("resumed_from_step"),
               "heldout_accuracy": rep["accuracy"], "confusion": rep["confusion"],
               "seconds": round(time.perf_counter() - start, 1)}
    (out / STATS_FILE).write_text(json.dumps({"summary": summary, "data": data_stats, "train": trained,
                                              "report": rep}, indent=1))
    (out / SUCCESS).touch()
    return summary
