"""Training data on Ray Data: read, encode with the stage's mask, order deterministically, shard.

Encoding runs as Ray Data tasks across the cluster and is materialized before the workers start, so
the row count (hence the lr schedule's length) is known up front and the workers receive their shards
through ``get_dataset_shard``. The order is a pure function of the data and the seed (rows sorted by a
hash of seed, id and text, then cut into a fixed number of equal blocks), and the shard split runs with
``preserve_order``; a resumed run therefore sees the same rows in the same order and can skip the
micro-batches it already consumed (see ``loop.py``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from raypipe.data.io import is_json_array, list_data_files, write_jsonl
from raypipe.errors import ConfigError, DataError
from raypipe.prompts import GeneratorPrompt, PromptFormatName
from raypipe.training.encode import IGNORE_INDEX, EncodedExample, encode_row

logger = logging.getLogger(__name__)

#: blocks per worker after the deterministic sort; enough for streaming, few enough to stay cheap
BLOCKS_PER_WORKER = 4
_TOKEN_LIST = pa.list_(pa.int32())
#: reject reasons (stats keys)
BAD_ROW = "bad_row"
NO_LOSS = "no_loss_tokens"


@dataclass(frozen=True)
class StepPlan:
    """How many optimizer steps an epoch holds for a given row count and batch geometry.

    Ray's equal shard split gives each worker ``rows // num_workers`` rows; a worker's last partial
    micro-batch and a trailing run of micro-batches shorter than ``grad_accum`` are not used, so every
    rank takes exactly the same number of steps (DeepSpeed's collectives require it).
    """

    rows: int
    num_workers: int
    micro_batch_size: int
    grad_accum: int

    @property
    def global_batch(self) -> int:
        return self.micro_batch_size * self.grad_accum * self.num_workers

    @property
    def micro_batches_per_epoch(self) -> int:
        return self.steps_per_epoch * self.grad_accum

    @property
    def steps_per_epoch(self) -> int:
        return (self.rows // self.num_workers) // self.micro_batch_size // self.grad_accum

    @property
    def rows_unused_per_epoch(self) -> int:
        return self.rows - self.steps_per_epoch * self.global_batch

    def total_steps(self, epochs: float) -> int:
        return max(1, math.ceil(epochs * self.steps_per_epoch))


@lru_cache(maxsize=4)
def _tokenizer(path: str) -> Any:
    """One tokenizer per Ray worker process (tasks reuse processes), not one per batch."""
    from raypipe.models import load_tokenizer

    return load_tokenizer(path)


def _order_key(seed: int, row: dict[str, Any]) -> int:
    text = "\0".join(str(row.get(k) or "") for k in ("prompt", "target", "instruction", "input", "output"))
    digest = hashlib.blake2b(f"{seed}\0{row.get('id')}\0{text}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _dataset(row: dict[str, Any]) -> Any:
    """A row's source data set: `dataset` (ours), else `dataset_name` (Self-RAG's released generator data)."""
    return row["dataset"] if row.get("dataset") is not None else row.get("dataset_name")


def encode_table(batch: pa.Table, *, tokenizer_path: str, mask: list[str], max_length: int,
                 seed: int, datasets: list[str] | None = None, prompt_format: PromptFormatName = "selfrag") -> pa.Table:
    """Ray Data batch function: rows of either shape -> id, path, input_ids, labels, counters, order,
    `reject` (empty, or why the row cannot be trained on) and `selected` (0 for a row whose `dataset`,
    or `dataset_name`, is not among `datasets`: left out by choice, counted, not encoded). Rows given
    as instruction/input are written in `prompt_format`."""
    tokenizer = _tokenizer(tokenizer_path)
    prompt = GeneratorPrompt(prompt_format, tokenizer)
    rows = batch.to_pylist()
    encoded: list[EncodedExample] = []
    rejects: list[str] = []
    selected: list[int] = []
    for row in rows:
        chosen = datasets is None or _dataset(row) in datasets
        selected.append(int(chosen))
        if not chosen:
            encoded.append(EncodedExample([], [], truncated=False))
            rejects.append("")
            continue
        try:
            example = encode_row(row, tokenizer, mask, max_length, prompt_format=prompt)
            reject = "" if example.n_loss_tokens else f"{NO_LOSS}: nothing left after truncation to {max_length}"
        except DataError as exc:
            example, reject = EncodedExample([], [], truncated=False), f"{BAD_ROW}: {exc}"
        encoded.append(example)
        rejects.append(reject)
    return pa.table({
        "id": pa.array([str(r.get("id")) for r in rows], pa.string()),
        "path": pa.array([r.get("path") for r in rows], pa.string()),
        "input_ids": pa.array([e.input_ids for e in encoded], _TOKEN_LIST),
        "labels": pa.array([e.labels for e in encoded], _TOKEN_LIST),
        "n_tokens": pa.array([len(e.input_ids) for e in encoded], pa.int64()),
        "n_loss_tokens": pa.array([e.n_loss_tokens for e in encoded], pa.int64()),
        "truncated": pa.array([int(e.truncated) for e in encoded], pa.int64()),
        "rejected": pa.array([int(bool(r)) for r in rejects], pa.int64()),
        "reject": pa.array(rejects, pa.string()),
        "selected": pa.array(selected, pa.int64()),
        "order": pa.array([_order_key(seed, r) for r in rows], pa.int64()),
    })


def _array_rows(file: Path) -> list[dict[str, Any]]:
    """The rows of a `.json` file holding one array, each with its `path` as `read_json` adds it; ids as
    text, so rows whose ids mix numbers and strings still form one Arrow column."""
    try:
        rows = json.loads(file.read_bytes().decode("utf-8-sig"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DataError(f"a .json file starting with '[' must be one valid JSON array: {exc}", file=str(file)) from None
    bad = next((i for i, row in enumerate(rows) if not isinstance(row, dict)), None)
    if bad is not None:
        raise DataError(f"row {bad} of the array is a {type(rows[bad]).__name__}, not an object", file=str(file))
    path = str(file.resolve())
    return [{**row, "id": None if row.get("id") is None else str(row["id"]), "path": path} for row in rows]


def _read(files: list[Path]) -> Any:
    """Parquet, JSON lines, or `.json` files holding one array each (read on the driver: Self-RAG's
    released critic data is a few tens of MB), as one dataset with a `path` column."""
    import ray

    suffixes = {f.suffix for f in files}
    if suffixes == {".parquet"}:
        return ray.data.read_parquet([str(f.resolve()) for f in files], include_paths=True)
    if not suffixes <= {".jsonl", ".json"}:
        raise DataError(f"training data mixes file formats {sorted(suffixes)}; use one", file=str(files[0].parent))
    arrays = [f for f in files if f.suffix == ".json" and is_json_array(f)]
    lines = [str(f.resolve()) for f in files if f not in arrays]  # tasks may run in another working directory
    parts = [ray.data.read_json(lines, lines=True, include_paths=True)] if lines else []
    parts += [ray.data.from_items(_array_rows(f)) for f in arrays]
    return parts[0].union(*parts[1:]) if len(parts) > 1 else parts[0]


def encode_dataset(data: str, tokenizer_path: str, mask: list[str], max_length: int, seed: int,
                   num_workers: int, rejects_path: Path, datasets: list[str] | None = None,
                   prompt_format: PromptFormatName = "selfrag") -> tuple[Any, dict[str, Any]]:
    """The materialized, encoded, deterministically ordered training set and its encoding stats.

    With `datasets`, only rows whose `dataset` (or `dataset_name`) is listed are trained on; the others
    are counted (`rows_not_selected`). Malformed rows (no target, an unclosed <paragraph>) and rows left
    with no loss token after truncation (a prompt longer than max_length, which would make the loss NaN) go to `rejects_path`
    with the reason and are counted by reason.
    """
    from ray.data.context import ShuffleStrategy

    files = list_data_files(data)
    ds = _read(files)
    ds.context.execution_options.preserve_order = True
    # Ray's default shuffle (hash shuffle v2) starts aggregator actors for every sum and sort: 4-5 s per
    # call on 2 cores, however small the data. The sort-based pull shuffle runs them as plain tasks (0.1 s
    # for the sums) and scales to the training sets raypipe sorts (up to millions of rows).
    ds.context.shuffle_strategy = ShuffleStrategy.SORT_SHUFFLE_PULL_BASED
    # a few seconds of encoding in several short executions: their bars would only leave a blank line
    # each on the terminal (the training stage shows its own step counter)
    ds.context.enable_progress_bars = False
    ds = ds.map_batches(encode_table, batch_format="pyarrow", zero_copy_batch=True,
                        fn_kwargs={"tokenizer_path": tokenizer_path, "mask": list(mask),
                                   "max_length": max_length, "seed": seed,
                                   "datasets": list(datasets) if datasets is not None else None,
                                   "prompt_format": prompt_format})
    encoded = ds.materialize()
    rows = encoded.count()
    sums = encoded.sum(["n_tokens", "n_loss_tokens", "truncated", "rejected", "selected"]) if rows else {}
    rejects: list[dict[str, Any]] = []
    if sums.get("sum(rejected)"):
        rejects = encoded.filter(expr="rejected == 1").select_columns(["id", "path", "reject"]).take_all()
        write_jsonl(({"id": r["id"], "file": r["path"], "reason": r["reject"]} for r in rejects), rejects_path)
        logger.warning("%d rows rejected; ids and reasons in %s", len(rejects), rejects_path)
    not_selected = rows - int(sums.get("sum(selected)", 0))
    kept = rows - len(rejects) - not_selected
    if kept == 0:
        why = (f"none of the {rows} rows has a dataset among {datasets}" if not_selected == rows
               else f"no row can be trained on; reasons in {rejects_path}")
        raise DataError(why if rows else "no rows", file=data)
    train = (encoded.filter(expr="rejected == 0 and selected == 1").sort("order")
             .repartition(max(1, min(kept, num_workers * BLOCKS_PER_WORKER)))
             .select_columns(["id", "input_ids", "labels"]).materialize())
    reasons = Counter(r["reject"].split(":", 1)[0] for r in rejects)
    stats = {
        "files": len(files), "rows_read": rows, "rows_truncated": int(sums.get("sum(truncated)", 0)),
        "rows_rejected": {reason: reasons[reason] for reason in (BAD_ROW, NO_LOSS)},
        "rows_not_selected": not_selected, "rows_train": kept,
        "tokens": int(sums.get("sum(n_tokens)", 0)), "loss_tokens": int(sums.get("sum(n_loss_tokens)", 0)),
    }
    return train, stats


def plan_steps(rows: int, num_workers: int, micro_batch_size: int, grad_accum: int, data: str) -> StepPlan:
    plan = StepPlan(rows, num_workers, micro_batch_size, grad_accum)
    if plan.steps_per_epoch < 1:
        raise ConfigError(
            f"{data}: {rows} training rows do not fill one global batch of {plan.global_batch} "
            f"(micro_batch_size x grad_accum x num_workers); lower them or add data"
        )
    return plan


def collate(batch: dict[str, np.ndarray], pad_id: int) -> dict[str, Any]:
    """Right-pad a numpy batch of variable-length id lists into torch tensors (labels padded -100)."""
    import torch

    ids, labels = batch["input_ids"], batch["labels"]
    width = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), width), pad_id, dtype=torch.long)
    label_t = torch.full((len(ids), width), IGNORE_INDEX, dtype=torch.long)
    attention = torch.zeros((len(ids), width), dtype=torch.long)
    for i, (x, y) in enumerate(zip(ids, labels, strict=True)):
        input_ids[i, : len(x)] = torch.from_numpy(np.asarray(x, dtype=np.int64))
        label_t[i, : len(y)] = torch.from_numpy(np.asarray(y, dtype=np.int64))
        attention[i, : len(x)] = 1
    return {"input_ids": input_ids, "labels": label_t, "attention_mask": attention}
