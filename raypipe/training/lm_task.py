"""An LM's part in the worker loop (the critic, the generator, the Self-Reasoning model): the causal LM
with the reflection tokens, its top `trainable_layers` trainable, the loss on the unmasked target
tokens only (`target_loss`), micro-batches streamed from this worker's Ray Data shard, and an HF folder
with the prompt format it was trained in as the export.

The shard order is deterministic (`training.data`) and the per-epoch shuffle is seeded by seed +
epoch, so the micro-batches a resumed worker skips are exactly the ones it had consumed.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from raypipe.prompts import PromptFormatName
from raypipe.settings.training import ModelTrainConfig
from raypipe.training.batching import SIZE_WINDOW_BATCHES, length_grouped_micro_batches
from raypipe.training.task import EpochBatches, TrainTask, model_device

logger = logging.getLogger(__name__)


def micro_batches(shard: Any, tc: ModelTrainConfig, epoch: int) -> Iterator[dict[str, Any]]:
    """One epoch of this worker's shard in micro-batches, shuffled by a buffer seeded with seed + epoch
    (so a resumed worker can skip exactly the consumed ones), length-grouped if the config asks."""
    window = tc.micro_batch_size * (SIZE_WINDOW_BATCHES if tc.group_by_length else 1)
    batches = shard.iter_batches(batch_size=window, batch_format="numpy", drop_last=not tc.group_by_length,
                                 local_shuffle_buffer_size=tc.shuffle_buffer_rows, local_shuffle_seed=tc.seed + epoch)
    if not tc.group_by_length:
        return iter(batches)
    return length_grouped_micro_batches(batches, tc.micro_batch_size, random.Random(tc.seed + epoch))


@dataclass
class LMTask(TrainTask):
    """`train` is the stage's training section; `trainable_layers` the stage's own count (None: all);
    `dtype` the weights' (`float32`, or `bfloat16` when training in bf16 throughout)."""

    train: ModelTrainConfig
    trainable_layers: int | None
    dtype: str
    prompt_format: PromptFormatName
    unit: ClassVar[str] = "tokens"

    def load(self, base_model: str) -> tuple[Any, Any]:
        import torch

        from raypipe.models import load_model
        from raypipe.training.freeze import freeze_lower_layers
        from raypipe.training.target_loss import TargetLossLM, computes_same_logits

        model, tokenizer = load_model(base_model, dtype=getattr(torch, self.dtype), device="cpu")
        model.config.use_cache = False
        if self.trainable_layers is not None:
            freeze_lower_layers(model, self.trainable_layers)
        model.train()
        return (TargetLossLM(model) if computes_same_logits(model, len(tokenizer)) else model), tokenizer

    def epoch_batches(self, rank: int, world: int) -> EpochBatches:
        import ray.train

        shard = ray.train.get_dataset_shard("train")
        return lambda epoch: micro_batches(shard, self.train, epoch)

    def loss(self, model: Any, tokenizer: Any, batch: Any) -> tuple[Any, int]:
        from raypipe.training.data import collate

        device = model_device(model)
        pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        inputs = {k: v.to(device) for k, v in collate(batch, pad_id).items()}
        return model(**inputs).loss, int(inputs["attention_mask"].sum())

    def export(self, module: Any, state_dict: dict[str, Any], tokenizer: Any, folder: Path) -> None:
        """Rank 0: the HF folder with the model's own keys, the tokenizer with the reflection tokens and
        the prompt format (`raypipe.models.prompt_format`)."""
        from raypipe.models.prompt_format import record_format
        from raypipe.training.target_loss import strip_prefix, unwrap

        folder.mkdir(parents=True, exist_ok=True)
        unwrap(module).save_pretrained(folder, state_dict=strip_prefix(state_dict), safe_serialization=True)
        tokenizer.save_pretrained(folder)
        record_format(folder, self.prompt_format)
        logger.info("exported %d tensors to %s", len(state_dict), folder)
