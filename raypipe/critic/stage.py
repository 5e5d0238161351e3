"""The critic as a Ray Data stage: a callable class holding one predictor per actor.

Loading a checkpoint costs far more than scoring a batch, so the model is loaded once in `__init__`
and reused for every batch the actor receives (DESIGN §3, "stages are plain functions on batches").
The stage is unit-testable without Ray; `predict_dataset` wraps it in an actor pool.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import torch

from raypipe.critic.predict import make_predictor
from raypipe.errors import DataError
from raypipe.prompts import ASPECT_LABELS, Aspect

logger = logging.getLogger(__name__)

PROBS_COLUMN = "probs"
LABEL_COLUMN = "label"


def _as_table(batch: pa.Table | Mapping[str, Any]) -> pa.Table:
    if isinstance(batch, pa.Table):
        return batch
    return pa.table({name: pa.array(list(values)) for name, values in batch.items()})


class CriticStage:
    """Adds `probs` (list<float64>, the aspect group's distribution in ASPECT_LABELS order) and
    `label` (its argmax token) to batches holding a prompt column and an aspect column.

    `num_threads` pins torch's intra-op threads, so that N actors on N cores do not oversubscribe.
    """

    def __init__(self, model_path: str | Path, batch_size: int = 64, device: str | None = None,
                 num_threads: int | None = None, prompt_column: str = "prompt", aspect_column: str = "aspect"):
        if num_threads:
            torch.set_num_threads(num_threads)
        self.predictor = make_predictor(model_path, batch_size=batch_size, device=device)
        self.prompt_column, self.aspect_column = prompt_column, aspect_column

    def _aspects(self, table: pa.Table) -> list[Aspect]:
        values = table.column(self.aspect_column).to_pylist()
        try:
            return [Aspect(v) for v in values]
        except ValueError as exc:
            row_ids = table.column("id").to_pylist() if "id" in table.column_names else [None] * len(values)
            bad = next(i for i, v in enumerate(values) if v not in {a.value for a in Aspect})
            raise DataError(f"unknown aspect {values[bad]!r}", row_id=row_ids[bad],
                            field=self.aspect_column) from exc

    def __call__(self, batch: pa.Table | Mapping[str, Any]) -> pa.Table:
        table = _as_table(batch)
        for column in (self.prompt_column, self.aspect_column):
            if column not in table.column_names:
                raise DataError(f"the critic stage needs a {column!r} column; the batch has "
                                f"{table.column_names}", field=column)
        aspects = self._aspects(table)
        probs = self.predictor.predict_prompts(table.column(self.prompt_column).to_pylist(), aspects)
        labels = [ASPECT_LABELS[a][int(np.argmax(p))] for a, p in zip(aspects, probs, strict=True)]
        table = table.append_column(PROBS_COLUMN, pa.array([p.tolist() for p in probs],
                                                            type=pa.list_(pa.float64())))
        return table.append_column(LABEL_COLUMN, pa.array(labels, type=pa.string()))


def predict_dataset(ds: Any, model_path: str | Path, *, actors: int = 1, batch_size: int = 64,
                    cpus_per_actor: float = 1.0, prompt_column: str = "prompt",
                    aspect_column: str = "aspect") -> Any:
    """`ds` (a ray.data.Dataset) with the critic's `probs` and `label` columns, over an actor pool.

    On a CUDA machine each actor asks for one GPU; on CPU for `cpus_per_actor` cores and as many
    torch threads.
    """
    import ray.data

    gpu = torch.cuda.is_available()
    threads = None if gpu else max(1, int(cpus_per_actor))
    return ds.map_batches(
        CriticStage,
        fn_constructor_kwargs={"model_path": str(model_path), "batch_size": batch_size, "num_threads": threads,
                               "prompt_column": prompt_column, "aspect_column": aspect_column},
        batch_size=batch_size,
        batch_format="pyarrow",
        compute=ray.data.ActorPoolStrategy(size=actors),
        num_cpus=cpus_per_actor,
        num_gpus=1 if gpu else 0,
    )
