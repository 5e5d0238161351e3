"""Batches of rows of similar length, for both training loops (the classifiers' and the LMs').

On CPU a step costs what its longest row costs times the batch size: on the demo's D_gen subset
(rows of 58-185 SmolLM2 tokens) shuffled batches of 16 carry 1.38 padded tokens per real token, and
batches cut from windows of 256 rows sorted by length 1.04 (benchmarks/length_grouping.py). A window
is wide enough that most of its batches hold rows of one length and narrow enough that the batches
still draw from all over the data; the batches are then shuffled, so short and long ones alternate through the epoch. Ours: the
usual "group by length" of sequence trainers (Hugging Face's `group_by_length` sampler), which works on
a whole in-memory data set, while the LM loop streams its shard from Ray Data one window at a time.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, TypeVar

import numpy as np

#: batches per window of rows that are sorted by length together
SIZE_WINDOW_BATCHES = 16

T = TypeVar("T")


def size_sorted_batches(items: Sequence[T], size: Callable[[T], int], batch_size: int) -> list[list[T]]:
    """One window's items sorted by `size` and cut into batches (the last may be short)."""
    ordered = sorted(items, key=size)
    return [ordered[b:b + batch_size] for b in range(0, len(ordered), batch_size)]


def length_grouped_micro_batches(windows: Iterable[dict[str, np.ndarray]], batch_size: int,
                                 rng: random.Random) -> Iterator[dict[str, Any]]:
    """Micro-batches of `batch_size` rows from windows of shuffled rows in Ray Data's numpy batch
    format (column -> array): each window is sorted by the length of its `input_ids`, cut, and its
    batches are yielded in a shuffled order. A window's rows beyond its last full batch are dropped,
    as `iter_batches(drop_last=True)` drops them: with windows of a multiple of `batch_size` rows only
    the epoch's last window has any, so an epoch yields `rows // batch_size` micro-batches either way.
    Seeded by `rng`, so a resumed worker sees the same batches in the same order."""
    for window in windows:
        lengths = [len(ids) for ids in window["input_ids"]]
        batches = [b for b in size_sorted_batches(range(len(lengths)), lengths.__getitem__, batch_size)
                   if len(b) == batch_size]
        rng.shuffle(batches)
        for rows in batches:
            yield {column: values[rows] for column, values in window.items()}
