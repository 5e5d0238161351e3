"""benchmarks/_actor_memory.py: the model actors' growth from the first shard to the last."""

from __future__ import annotations

import pytest

from benchmarks._actor_memory import growth


def _row(shards: int, rss: dict[int, float]) -> dict:
    return {"shards": shards, "t_s": float(shards), "rss_mib": rss}


def test_growth_is_the_largest_last_over_first_among_actors_alive_at_both():
    rows = [_row(1, {11: 1000.0, 12: 800.0}), _row(5, {11: 1500.0, 12: 820.0}), _row(9, {11: 1040.0, 12: 880.0})]
    # actor 11 peaked in between but ends 4% up; actor 12 ends 10% up: the largest is the figure
    assert growth(rows) == pytest.approx(0.10)


def test_an_actor_restarted_in_between_is_not_compared_with_its_predecessor():
    rows = [_row(1, {11: 1000.0, 12: 1000.0}), _row(9, {13: 500.0, 12: 1010.0})]
    assert growth(rows) == pytest.approx(0.01)  # 13 replaced 11: only 12 lived through


def test_no_figure_without_two_rows_or_an_actor_in_both():
    assert growth([]) is None
    assert growth([_row(1, {11: 1000.0})]) is None
    assert growth([_row(1, {11: 1000.0}), _row(2, {12: 1000.0})]) is None
