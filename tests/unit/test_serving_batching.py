"""`run_grouped`, the body of the Generator's and Retriever's `@serve.batch` handlers."""

from __future__ import annotations

import pytest

from raypipe.serving.batching import run_grouped


class Recorder:
    """A fake engine: answers item -> f"{item}@{key}" and records each call it receives."""

    def __init__(self):
        self.calls: list[tuple[list[str], int]] = []

    def __call__(self, items: list[str], key: int) -> list[str]:
        self.calls.append((items, key))
        return [f"{item}@{key}" for item in items]


def test_compatible_calls_share_one_engine_call_and_get_their_own_results():
    engine = Recorder()
    calls = [(["a", "b"], 1), (["c"], 2), (["d", "e", "f"], 1), ([], 1), (["g"], 2)]
    out = run_grouped(calls, engine)
    assert out == [["a@1", "b@1"], ["c@2"], ["d@1", "e@1", "f@1"], [], ["g@2"]]
    assert engine.calls == [(["a", "b", "d", "e", "f"], 1), (["c", "g"], 2)]


def test_a_group_without_items_makes_no_engine_call():
    engine = Recorder()
    assert run_grouped([([], 3), ([], 3)], engine) == [[], []]
    assert engine.calls == []


def test_an_engine_returning_the_wrong_count_is_an_error():
    with pytest.raises(RuntimeError, match="2 results for 3 inputs"):
        run_grouped([(["a", "b", "c"], 0)], lambda items, key: items[:2])
