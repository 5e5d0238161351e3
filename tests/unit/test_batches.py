"""Training batches: every row once per epoch, the same batches for a resumed worker, and
length-grouped batches that carry less padding than plain shuffled ones, for the classifiers
(`epoch_batches`, rows in memory) and the LMs (`length_grouped_micro_batches`, streamed windows)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from raypipe.training.batching import SIZE_WINDOW_BATCHES, length_grouped_micro_batches
from raypipe.training.classifier import epoch_batches


def _rows(n: int) -> tuple[list[dict], list[int]]:
    rng = random.Random(7)
    sizes = [rng.randint(10, 200) for _ in range(n)]
    return [{"id": i, "size": s} for i, s in enumerate(sizes)], sizes


def _padded_cost(batches: list[list[dict]]) -> int:
    """What a step costs on CPU: every row is padded to its batch's longest."""
    return sum(len(batch) * max(r["size"] for r in batch) for batch in batches)


def test_size_grouped_batches_cover_every_row_once_across_ranks_and_repeat_for_a_resumed_worker():
    rows, sizes = _rows(1000)
    dealt = [epoch_batches(rows, 3, rank, 2, 16, seed=5, sizes=sizes) for rank in range(2)]
    ids = sorted(r["id"] for batches in dealt for batch in batches for r in batch)
    assert ids == list(range(1000))
    assert epoch_batches(rows, 3, 1, 2, 16, seed=5, sizes=sizes) == dealt[1]
    assert epoch_batches(rows, 4, 1, 2, 16, seed=5, sizes=sizes) != dealt[1]  # a new epoch, a new order


@pytest.mark.parametrize("sized", [False, True])
def test_uneven_rows_are_padded_so_every_rank_takes_the_same_number_of_steps(sized):
    rows, sizes = _rows(33)
    dealt = [epoch_batches(rows, 0, rank, 2, 4, seed=5, sizes=sizes if sized else None) for rank in range(2)]
    assert [len(batches) for batches in dealt] == [5, 5]  # 17 rows each: DDP's ranks step together
    ids = [r["id"] for batches in dealt for batch in batches for r in batch]
    order = list(range(33))
    random.Random(5).shuffle(order)
    assert sorted(ids) == sorted([*range(33), order[0]])  # every row once, the epoch's first row twice


def test_size_grouping_cuts_padding_and_keeps_batches_drawn_from_the_whole_data():
    rows, sizes = _rows(2000)
    plain = epoch_batches(rows, 0, 0, 1, 16, seed=0)
    grouped = epoch_batches(rows, 0, 0, 1, 16, seed=0, sizes=sizes)
    assert sorted(r["id"] for b in grouped for r in b) == list(range(2000))
    assert _padded_cost(grouped) < 0.8 * _padded_cost(plain)
    # the batches are not sorted end to end: short and long batches alternate through the epoch
    longest = [max(r["size"] for r in batch) for batch in grouped]
    assert longest != sorted(longest) and longest != sorted(longest, reverse=True)


def test_without_sizes_the_batches_are_the_shuffled_rows_in_order():
    rows, _ = _rows(100)
    batches = epoch_batches(rows, 0, 0, 1, 16, seed=0)
    assert [len(b) for b in batches] == [16] * 6 + [4]
    flat = [r["id"] for b in batches for r in b]
    order = list(range(100))
    random.Random(0).shuffle(order)
    assert flat == order


def _windows(n: int, window: int) -> list[dict[str, np.ndarray]]:
    """n rows of random length in Ray Data's numpy batch format, `window` rows per batch (the last short)."""
    rng = random.Random(3)
    ids = [[7] * rng.randint(10, 200) for _ in range(n)]
    windows = []
    for start in range(0, n, window):
        chunk = np.empty(len(ids[start:start + window]), dtype=object)
        chunk[:] = ids[start:start + window]
        windows.append({"id": np.arange(start, start + len(chunk)), "input_ids": chunk})
    return windows


def _cost(batches: list[dict[str, np.ndarray]]) -> int:
    return sum(len(b["input_ids"]) * max(len(x) for x in b["input_ids"]) for b in batches)


def test_streamed_length_groups_keep_the_epochs_batch_count_and_each_row_at_most_once():
    windows = _windows(1000, 16 * SIZE_WINDOW_BATCHES)
    batches = list(length_grouped_micro_batches(windows, 16, random.Random(1)))
    assert len(batches) == 1000 // 16  # what iter_batches(batch_size=16, drop_last=True) yields
    assert all(len(b["id"]) == 16 and len(b["input_ids"]) == 16 for b in batches)
    ids = [int(i) for b in batches for i in b["id"]]
    assert len(ids) == len(set(ids)) == 62 * 16
    # the rows keep their own columns: each id still carries its own input_ids
    by_id = {int(i): x for w in windows for i, x in zip(w["id"], w["input_ids"], strict=True)}
    assert all(by_id[int(i)] is x for b in batches for i, x in zip(b["id"], b["input_ids"], strict=True))


def test_streamed_length_groups_cut_padding_and_repeat_for_the_same_seed():
    windows = _windows(2048, 16 * SIZE_WINDOW_BATCHES)
    plain = [{k: v[b:b + 16] for k, v in w.items()} for w in windows for b in range(0, len(w["id"]), 16)]
    grouped = list(length_grouped_micro_batches(windows, 16, random.Random(1)))
    assert _cost(grouped) < 0.8 * _cost(plain)
    again = list(length_grouped_micro_batches(windows, 16, random.Random(1)))
    assert [list(b["id"]) for b in again] == [list(b["id"]) for b in grouped]
    longest = [max(len(x) for x in b["input_ids"]) for b in grouped]
    assert longest != sorted(longest)  # short and long batches alternate within each window
