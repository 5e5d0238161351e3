"""`raypipe train critic` with `training.critic.kind: encoder` (raypipe.jobs.train): the encoder critic fine-tuned on D_critic
on Ray Train as a small classifier, like CRAG's evaluator (`raypipe.training.classifier`).

Layout under `training.critic.out_dir` (the conventions of `raypipe train`)::

    config.json, model.safetensors, tokenizer files,    the critic: the encoder's HF folder, its heads
    aspect_heads.safetensors, critic_encoder.json       and its manifest
    train_stats.json, _SUCCESS      written last; a rerun with _SUCCESS does nothing
    checkpoints/critic/             Ray Train run storage; an interrupted run resumes from the latest
    logs/critic.metrics.jsonl       one line per optimizer step

The loss is the cross-entropy of each row's teacher label over its own aspect's head (Self-RAG Eq. 1
is the same objective over the LM's label tokens), optionally weighted per aspect by inverse label
frequency, fully or tempered (`encoder_class_weights`). Training reads the rows' `example` fields, not their prompts;
the rows are D_critic's, so both critic kinds learn from the same labels.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa

from raypipe.critic.dataset import read_split, row_example
from raypipe.critic.encoder import NUM_OUTPUTS, InputFormat, encode_examples, target_index, write_manifest
from raypipe.errors import ConfigError, DataError
from raypipe.prompts import ASPECT_LABELS, Aspect
from raypipe.settings.cluster import RayConfig
from raypipe.settings.training import CriticTrainConfig
from raypipe.training.classifier import ClassifierRun, ClassifierTask, fit_classifier
from raypipe.training.finished import finished_summary, mark_finished
from raypipe.training.task import model_device
from raypipe.training.trainer import check_positions

logger = logging.getLogger(__name__)

_RUN_NAME = "critic"


@dataclass(frozen=True)
class CriticEncoderTask(ClassifierTask):
    """The encoder critic's model and loss. `layers` keeps the encoder's first N layers (None: all):
    every later judgement in augmentation costs in proportion. `trainable_layers` trains the top N of
    them (None: all; `encoder_model.freeze_for_training`). `class_weights`: one loss weight per head
    output (None: unweighted)."""

    max_length: int
    input_format: InputFormat = "pair"
    layers: int | None = None
    trainable_layers: int | None = None
    class_weights: tuple[float, ...] | None = None

    def load(self, base_model: str) -> tuple[Any, Any]:
        from raypipe.critic.encoder_model import freeze_for_training, load_aspect_heads

        model, tokenizer = load_aspect_heads(base_model, self.layers)
        freeze_for_training(model, self.trainable_layers)
        return model, tokenizer

    def row_size(self, row: dict[str, Any]) -> int:
        """Characters of the judgement's fields: what its token count follows."""
        return sum(len(value or "") for value in row["example"].values())

    def loss(self, model: Any, tokenizer: Any, rows: list[dict[str, Any]]) -> Any:
        import torch

        from raypipe.critic.encoder_model import group_logits

        examples = [row_example(r["aspect"], r["example"]) for r in rows]
        device = model_device(model)
        enc = encode_examples(tokenizer, examples, self.input_format, self.max_length).to(device)
        logits = group_logits(model(**enc), [ex.aspect for ex in examples])
        target = torch.tensor([target_index(ex.aspect, r["target"]) for ex, r in zip(examples, rows, strict=True)],
                              device=device)
        weight = None if self.class_weights is None else torch.tensor(self.class_weights, device=device)
        return torch.nn.functional.cross_entropy(logits, target, weight=weight)

    def export(self, model: Any, tokenizer: Any, folder: Path) -> None:
        from raypipe.critic.encoder_model import save_aspect_heads

        save_aspect_heads(model, tokenizer, folder)


def inverse_frequency_weights(table: pa.Table, exponents: dict[str, float] | None = None) -> tuple[float, ...]:
    """Per head output: n_aspect / (labels of the aspect x n_label) over the rows (sklearn's
    "balanced" weights, within each aspect). The weighted mean loss then gives each aspect the share
    of rows it has and each of its labels an equal share within it. A label no row has keeps 1.

    `exponents` (None: 1 for every aspect) raises an aspect's weights to its power and leaves an
    aspect it does not name at 1 (unweighted). An exponent between 0 and 1 tempers the balance (ours:
    fully balanced IsUse labels over-correct, docs/results/critic.md); the tempered weights are scaled
    so that the aspect's rows weigh n_aspect in all, as unweighted rows do, so the other aspects keep
    their share of the loss."""
    counts = Counter(zip(table.column("aspect").to_pylist(), table.column("target").to_pylist(), strict=True))
    weights = [1.0] * NUM_OUTPUTS
    for aspect in Aspect:
        exponent = 1.0 if exponents is None else exponents.get(aspect.value, 0.0)
        labels = ASPECT_LABELS[aspect]
        seen = {label: counts[(aspect.value, label)] for label in labels if counts[(aspect.value, label)]}
        n = sum(seen.values())
        if not seen or exponent == 0:
            continue
        balanced = {label: (n / (len(labels) * count)) ** exponent for label, count in seen.items()}
        scale = 1.0 if exponent == 1 else n / sum(w * seen[label] for label, w in balanced.items())
        for label, weight in balanced.items():
            weights[target_index(aspect, label)] = weight * scale
    return tuple(weights)


def _check_targets(table: pa.Table, data: Path) -> None:
    """A row whose target is not a label of its aspect would fail inside a Ray Train worker; fail here,
    naming the row and the file."""
    rows = zip(table.column("id").to_pylist(), table.column("aspect").to_pylist(),
               table.column("target").to_pylist(), strict=True)
    for row_id, aspect, target in rows:
        if aspect not in {a.value for a in Aspect} or target not in ASPECT_LABELS[Aspect(aspect)]:
            raise DataError(f"target {target!r} is not a label of aspect {aspect!r}", file=str(data),
                            row_id=row_id, field="target")


def _base_model(tc: CriticTrainConfig) -> str:
    from raypipe.models import minilm_path

    return str(Path(tc.encoder_base).resolve()) if tc.encoder_base else str(minilm_path())


def _run(tc: CriticTrainConfig) -> ClassifierRun:
    if len(tc.stages) != 1:
        raise ConfigError(f"training.critic.stages: the encoder critic trains in one stage, got {len(tc.stages)}")
    stage = tc.stages[0]
    return ClassifierRun(name=_RUN_NAME, epochs=stage.epochs, lr=stage.lr, batch_size=tc.micro_batch_size,
                         warmup_ratio=tc.warmup_ratio, weight_decay=tc.weight_decay,
                         checkpoint_every=tc.checkpoint_every, seed=tc.seed, grad_clip=tc.grad_clip,
                         precision=tc.precision)


def critic_task(tc: CriticTrainConfig, train: pa.Table) -> CriticEncoderTask:
    """The task `training.critic` describes, its class weights counted on the `train` rows."""
    exponents = tc.class_weight_exponents()
    weights = inverse_frequency_weights(train, exponents) if exponents else None
    return CriticEncoderTask(max_length=tc.max_length, input_format=tc.encoder_input, layers=tc.encoder_layers,
                             trainable_layers=tc.trainable_layers, class_weights=weights)


def train_encoder_critic(tc: CriticTrainConfig, ray_cfg: RayConfig) -> dict[str, Any]:
    """Fine-tune the encoder critic on `tc.data` and export it to `tc.out_dir`, on the Ray instance
    `ray_cfg` names; a finished run is not trained again."""
    from raypipe.runtime import ensure_ray

    out = Path(tc.out_dir).resolve()
    if (done := finished_summary(out)) is not None:
        return done
    data = Path(tc.data).resolve()
    train = read_split(data.parent, data.name)  # fails here, naming the fix, on a missing or pre-`example` split
    _check_targets(train, data)
    base, run, task = _base_model(tc), _run(tc), critic_task(tc, train)
    check_positions(tc, "critic", base)
    start = time.perf_counter()
    ensure_ray(ray_cfg)
    trained = fit_classifier(task, run, tc, base, data, out)
    write_manifest(out, base, task.layers, tc.max_length, task.input_format)
    summary = {"model": str(out), "kind": "encoder", "base_model": base, "input": task.input_format,
               "layers": task.layers, "trainable_layers": task.trainable_layers,
               "class_weights": tc.encoder_class_weights, "rows": trained.get("rows"), "steps": trained.get("steps"),
               "final_loss": trained.get("final_loss"), "resumed_from_step": trained.get("resumed_from_step"),
               "seconds": round(time.perf_counter() - start, 1)}
    weights = None if task.class_weights is None else {
        aspect.value: {label: round(task.class_weights[target_index(aspect, label)], 4)
                       for label in ASPECT_LABELS[aspect]} for aspect in Aspect}
    mark_finished(out, {"summary": summary, "class_weights": weights, "train": trained},
                  keep_checkpoints=tc.keep_checkpoints_after_export)
    return summary
