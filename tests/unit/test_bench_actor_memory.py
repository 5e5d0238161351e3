"""benchmarks/_actor_memory.py: the model actors' growth from the first shards to the last, and their trend."""

from __future__ import annotations

import pytest

from benchmarks._actor_memory import growth, trend_mib_per_hour


def _row(shards: int, rss: dict[str, float]) -> dict:
    return {"shards": shards, "t_s": 60.0 * shards, "rss_mib": rss}


def test_growth_compares_the_means_of_the_first_and_last_tenth_among_actors_alive_throughout():
    # 30 rows: a tenth is 3. Actor a swings +-100 around 1000 and ends where it began; b climbs 10%
    rows = [_row(i, {"a": 1000.0 + (100 if i % 2 else -100), "b": 1000.0 + 100 * i / 29}) for i in range(30)]
    rows.append(_row(30, {"a": 700.0}))  # the pool winding down: b gone, a trimmed; not compared
    first_b = (1000 + 1000 + 100 / 29 + 1000 + 200 / 29) / 3
    last_b = (1000 + 2700 / 29 + 1000 + 2800 / 29 + 1100) / 3
    assert growth(rows) == pytest.approx(last_b / first_b - 1, abs=1e-4)
    assert abs(growth([{**r, "rss_mib": {"a": r["rss_mib"]["a"]}} for r in rows[:30]])) < 0.08


def test_an_actor_restarted_in_between_is_not_compared_with_its_predecessor():
    rows = [_row(i, {"a": 1000.0, "b": 1000.0}) for i in range(3)] + [_row(i, {"c": 500.0, "b": 1010.0})
                                                                      for i in range(3, 6)]
    assert growth(rows) == pytest.approx(0.01)  # c replaced a: only b lived through


def test_no_figure_without_six_rows_or_an_actor_in_every_row():
    assert growth([]) is None
    assert growth([_row(i, {"a": 1000.0}) for i in range(5)]) is None
    assert growth([_row(i, {"a": 1000.0}) for i in range(3)] + [_row(i, {"b": 1000.0}) for i in range(3, 6)]) is None


def test_the_trend_is_the_fitted_slope_per_hour():
    rows = [_row(i, {"a": 1000.0 + 5 * i, "b": 900.0}) for i in range(10)]  # +5 MiB a minute
    assert trend_mib_per_hour(rows) == {"a": pytest.approx(300.0), "b": pytest.approx(0.0)}
    assert trend_mib_per_hour(rows[:2]) == {}
