"""The shared classifier loop's batches: every row once per epoch, the same batches for a resumed
worker, and size-grouped batches that carry less padding than plain shuffled ones."""

from __future__ import annotations

import random

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
