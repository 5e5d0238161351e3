"""An LM's training stages on Ray Train + DeepSpeed (the critic: Self-RAG Eq. 1; the generator: Eq. 2;
the Self-Reasoning model), exported as HF folders; the `raypipe train` job (raypipe.jobs.train) calls it.

Layout under ``training.<which>.out_dir``::

    config.json, model.safetensors, tokenizer files   the final model (last stage), an HF folder
    train_stats.json, _SUCCESS                         per-stage stats; written last
    stages/<name>/                                     earlier stages' exported models (+ their stats)
    checkpoints/<name>/                                Ray Train run storage: sharded DeepSpeed checkpoints
    logs/<name>.metrics.jsonl                          one line per optimizer step (loss, lr, tokens/s)
    rejects/<name>.jsonl                               malformed rows, rows with no loss token left after
                                                       truncation; each with its reason

A stage whose export carries ``_SUCCESS`` is skipped on a rerun; an unfinished stage resumes from its
latest checkpoint (Ray Train restores a run with the same name and storage path). Delete the folder
to start over.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from raypipe.disk import warn_if_short_of_space, write_text
from raypipe.errors import ConfigError
from raypipe.models.base_model import count_parameters
from raypipe.models.prompt_format import resolve_format
from raypipe.prompts import PromptFormatName
from raypipe.settings.cluster import RayConfig
from raypipe.settings.training import ModelTrainConfig, TrainStage
from raypipe.training.data import StepPlan, encode_dataset, plan_steps
from raypipe.training.deepspeed_config import load_deepspeed_config
from raypipe.training.finished import (
    CHECKPOINTS_DIR,
    STATS_FILE,
    SUCCESS,
    finished_summary,
    mark_finished,
    read_stats,
)
from raypipe.training.harness import choose_gpu, fit_and_export
from raypipe.training.precision import trains_in_bf16
from raypipe.training.spans import SPAN_KINDS

logger = logging.getLogger(__name__)

WHICH = ("critic", "generator", "self_reasoning")


def _validate(tc: ModelTrainConfig, which: str) -> None:
    names = [s.name for s in tc.stages]
    if not names:
        raise ConfigError(f"training.{which}.stages is empty")
    if len(set(names)) != len(names):
        raise ConfigError(f"training.{which}.stages: stage names must be unique (they name folders), got {names}")
    for i, stage in enumerate(tc.stages):
        unknown = [k for k in stage.mask if k not in SPAN_KINDS]
        if unknown:
            raise ConfigError(f"training.{which}.stages.{i}.mask: unknown span kind(s) {unknown}; "
                              f"known: {sorted(SPAN_KINDS)}")


def check_positions(tc: ModelTrainConfig, which: str, base: str) -> None:
    """A `max_length` beyond the base model's positions would fail as an index error deep in a Ray
    Train worker's forward; fail here instead, naming both numbers."""
    config = Path(base) / "config.json"
    positions = json.loads(config.read_text()).get("max_position_embeddings") if config.is_file() else None
    if isinstance(positions, int) and tc.max_length > positions:
        raise ConfigError(f"training.{which}.max_length={tc.max_length} is over the {positions} positions of the "
                          f"base model {base} (max_position_embeddings in {config})")


@dataclass
class StageData:
    """A stage's encoded training set and the step plan derived from its row count."""

    dataset: Any
    encode_stats: dict[str, Any]
    plan: StepPlan


def encode_stage(tc: ModelTrainConfig, stage: TrainStage, base_model: str, work_dir: Path,
                 prompt_format: PromptFormatName = "selfrag") -> StageData:
    """Encode `tc.data` with the stage's mask (Ray Data tasks) and plan the steps."""
    train_ds, encode_stats = encode_dataset(tc.data, base_model, stage.mask, tc.max_length, tc.seed,
                                            tc.num_workers, work_dir / "rejects" / f"{stage.name}.jsonl",
                                            datasets=tc.datasets, prompt_format=prompt_format)
    plan = plan_steps(encode_stats["rows_train"], tc.num_workers, tc.micro_batch_size, tc.grad_accum, tc.data)
    return StageData(train_ds, encode_stats, plan)


def fit_stage(tc: ModelTrainConfig, stage: TrainStage, base_model: str, data: StageData, export_dir: Path,
              work_dir: Path, prompt_format: PromptFormatName = "selfrag") -> dict[str, Any]:
    """Train one stage from `base_model` on Ray Train and export the result to `export_dir`."""
    from ray.data import ExecutionOptions
    from ray.train import DataConfig

    from raypipe.training.lm_task import LMTask
    from raypipe.training.loop import LoopPlan, train_loop_per_worker
    from raypipe.training.strategy import DeepSpeedStrategy

    start = time.perf_counter()
    use_gpu = choose_gpu(tc)
    bf16 = trains_in_bf16(tc.precision, use_gpu)
    plan = data.plan
    total = plan.total_steps(stage.epochs)
    metrics_log = work_dir / "logs" / f"{stage.name}.metrics.jsonl"
    loop_plan = LoopPlan(name=stage.name, base_model=base_model, total_steps=total,
                         micro_batches_per_epoch=plan.micro_batches_per_epoch, lr=stage.lr,
                         weight_decay=tc.weight_decay, warmup_steps=math.ceil(tc.warmup_ratio * total), seed=tc.seed,
                         metrics_log=str(metrics_log), grad_accum=tc.grad_accum,
                         checkpoint_every=tc.checkpoint_every, log_every=tc.log_every, use_gpu=use_gpu)
    task = LMTask(tc, stage.layers(tc.trainable_layers), "bfloat16" if bf16 else "float32", prompt_format)
    strategy = DeepSpeedStrategy(load_deepspeed_config(tc, bf16=bf16), tc.precision, bf16)
    logger.info("stage %s: %d rows, global batch %d, %d steps/epoch, %d steps, %s, ZeRO-%d, %d %s workers",
                stage.name, plan.rows, plan.global_batch, plan.steps_per_epoch, total,
                "bf16" if bf16 else "fp32 weights", tc.zero_stage, tc.num_workers, "GPU" if use_gpu else "CPU")
    state = fit_and_export(
        train_loop_per_worker, {"plan": loop_plan, "task": task, "strategy": strategy}, tc, use_gpu=use_gpu,
        run_name=stage.name, storage=work_dir / CHECKPOINTS_DIR, export_dir=export_dir,
        what=f"training stage {stage.name!r}", datasets={"train": data.dataset},
        dataset_config=DataConfig(execution_options=ExecutionOptions(preserve_order=True),
                                  enable_shard_locality=False),
    )
    history = state.history
    stats = {
        "stage": stage.name, "base_model": base_model, "mask": list(stage.mask), "lr": stage.lr,
        "epochs": stage.epochs, "trainable_layers": stage.layers(tc.trainable_layers) or "all",
        "num_workers": tc.num_workers, "zero_stage": tc.zero_stage,
        "prompt_format": prompt_format,
        "encode": data.encode_stats,
        "plan": {"global_batch": plan.global_batch, "steps_per_epoch": plan.steps_per_epoch,
                 "rows_unused_per_epoch": plan.rows_unused_per_epoch, "total_steps": total},
        "first_loss": history[0]["loss"] if history else None, **state.summary,
        "tokens_per_s": _throughput(history), "seconds": round(time.perf_counter() - start, 1),
        "metrics_log": str(metrics_log), "history": history,
    }
    write_text(export_dir / STATS_FILE, json.dumps(stats, indent=1))
    return stats


#: bytes per parameter of a ZeRO checkpoint (the fp32 master weights and Adam's two moments, 12, plus
#: the bf16 partitions: ModelTrainConfig's figure) and of an exported model (fp32 weights)
CHECKPOINT_BYTES_PER_PARAM, EXPORT_BYTES_PER_PARAM = 14, 4


def disk_estimate(tc: ModelTrainConfig, n_params: int) -> int:
    """The most a run of `tc` on a model of `n_params` parameters writes under its `out_dir`: every stage
    keeps `keep_checkpoints` checkpoints until the job ends, one more is in flight (Ray Train deletes the
    oldest after the new one is whole) and passes through the worker's temp folder first, and every
    stage exports its model. Counts every parameter as trained and every stage as still to run: an
    upper end, the figure of a warning."""
    checkpoints = len(tc.stages) * tc.keep_checkpoints + 2
    return n_params * (CHECKPOINT_BYTES_PER_PARAM * checkpoints + EXPORT_BYTES_PER_PARAM * len(tc.stages))


def _throughput(history: list[dict[str, Any]]) -> float | None:
    """Tokens/s over all steps but the first (which pays for warm-up: lazy init, first allocations)."""
    steady = history[1:] or history
    seconds = sum(r["seconds"] for r in steady)
    return sum(r["tokens"] for r in steady) / seconds if seconds else None


def _stage_summary(stats: dict[str, Any]) -> dict[str, Any]:
    keys = ("steps", "first_loss", "final_loss", "tokens_per_s", "peak_memory_mib", "model_state_mib_per_rank",
            "resumed_from_step", "seconds")
    encode = stats["encode"]
    return {"rows": encode["rows_train"], "truncated": encode["rows_truncated"],
            "rejected": sum(encode["rows_rejected"].values()),
            **{k: stats.get(k) for k in keys}}


def train_lm(tc: ModelTrainConfig, which: str, ray_cfg: RayConfig) -> dict[str, Any]:
    """Train the LM of `training.<which>` (`tc`), stage after stage, each from the previous one's
    weights, on the Ray instance `ray_cfg` names; a finished run is not trained again."""
    from raypipe.models import load_tokenizer
    from raypipe.runtime import ensure_ray

    _validate(tc, which)
    load_deepspeed_config(tc, bf16=False)  # a bad template fails now, not after encoding the data
    out = Path(tc.out_dir).resolve()
    if (done := finished_summary(out)) is not None:
        return done
    base = str(Path(tc.base_model).resolve())
    # fail here, not inside a Ray task, on a missing or broken base model
    prompt_format = resolve_format(tc.prompt_format, base, load_tokenizer(base))
    check_positions(tc, which, base)
    warn_if_short_of_space(out, disk_estimate(tc, count_parameters(Path(base))), f"training.{which}")
    ensure_ray(ray_cfg)
    stages: list[dict[str, Any]] = []
    for i, stage in enumerate(tc.stages):
        last = i == len(tc.stages) - 1
        export_dir = out if last else out / "stages" / stage.name
        if not last and (export_dir / SUCCESS).exists():
            logger.info("stage %s already exported to %s; skipping", stage.name, export_dir)
            stats = read_stats(export_dir)
        else:
            stats = fit_stage(tc, stage, base, encode_stage(tc, stage, base, out, prompt_format), export_dir, out,
                              prompt_format)
            if not last:
                (export_dir / SUCCESS).touch()
        stages.append(stats)
        base = str(export_dir)
    summary = {"model": str(out), **{f"stage {s['stage']}": _stage_summary(s) for s in stages}}
    mark_finished(out, {"summary": summary, "stages": stages}, keep_checkpoints=tc.keep_checkpoints_after_export)
    return summary
